"""The far end of ``kubectl exec``: the container the kubelet finds, the process the runtime starts.

The process gets what containerd gives an exec: the container's env (containerd's default PATH,
``HOSTNAME``, the image config's Env, then what the kubelet resolved: Service links, ``envFrom``,
``env``), its working directory and the container's mounts; it runs the program the image holds
(:mod:`.programs`). An argv[0] the image does not hold fails as runc words it, before any process.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import ipaddress
import math
import posixpath
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from itbench_gym.backends.sim.app.cluster_view import container_env, downward_field, resource_field
from itbench_gym.backends.sim.app.dns import resolv_conf
from itbench_gym.backends.sim.kube.auth import (
    TOKEN_ISSUER,
    WARN_ONLY_EXPIRATION_SECONDS,
    BoundAccount,
    BoundObject,
    issue_token,
    kubelet_token_issued_at,
)
from itbench_gym.backends.sim.kube.controllers.util import container_limits
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.kube.nodes import KERNEL_BUILD, uname_machine
from itbench_gym.backends.sim.kube.registry import ImageRule
from itbench_gym.backends.sim.kube.remotecommand import Outcome, exit_status, internal_error, success
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.lang.timestamps import parse_rfc3339

from . import programs
from .context import Container, FileTree, ProcessTime, ProcessWaits, VolumeContent, WritableMount
from .mainprocess import FollowedRun, ReplayedNetwork
from .network import AppRouting, ClusterNetwork, stable_draw

Obj = dict[str, Any]
#: containerd's default process PATH (what a container gets when its image sets none).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_HOSTS_HEADER = "# Kubernetes-managed hosts file.\n"
_HOSTS_LOCAL = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
                "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
#: The image's catalogue entry for a reference (None: no registry serves it).
RuleOf = Callable[[str], "ImageRule | None"]
#: The env the kubelet resolved when the container's current run started (None: not recorded).
StartedEnv = Callable[[Obj, str], "Mapping[str, str] | None"]
#: The ConfigMaps and Secrets, by (kind, name), the container's current run read when it started: its
#: env and subPath mounts keep them (``Kubelet.started_sources``; None: not started by the kubelet).
StartedSources = Callable[[Obj, str], "Mapping[tuple[str, str], Obj | None] | None"]
_Sources = Mapping[tuple[str, str], "Obj | None"]
#: The app model's routing of a namespace (None: no modelled app runs there).
Routing = Callable[[str], "AppRouting | None"]
#: (namespace, pod, container) -> the container's working-set memory in bytes.
WorkingSet = Callable[[str, str, str], float]


class PodVolumes(Protocol):
    """What the kubelet keeps of a pod's volumes: what its containers wrote into its emptyDirs, and
    the ConfigMaps and Secrets its other volumes project (as of the kubelet's last resync)."""

    def volume(self, pod: Obj, name: str) -> VolumeContent | None:
        """What the pod's volume ``name`` holds; None when the pod runs on no node."""
        ...

    def mounted(self, pod: Obj) -> Mapping[tuple[str, str], Obj | None] | None:
        """The ConfigMaps and Secrets as the pod's volumes show them now; None when the pod runs on no node."""
        ...

    def write_volume(self, pod: Obj, name: str, content: VolumeContent) -> None:
        """Keep ``content`` as what the pod's volume ``name`` holds now."""
        ...


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_links(services: list[Obj], namespace: str, enabled: bool) -> dict[str, str]:
    """The Docker-link style variables the kubelet adds for Services: every Service of the pod's
    namespace when ``enableServiceLinks``, and the API server's ``kubernetes`` Service always."""
    out: dict[str, str] = {}
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        master = meta.get("namespace") == "default" and meta.get("name") == "kubernetes"
        ip = str(spec.get("clusterIP") or "")
        if not (master or (enabled and meta.get("namespace") == namespace)) or ip in ("", "None"):
            continue
        ports = spec.get("ports") or []
        if not ports:
            continue
        prefix = _env_name(str(meta.get("name", "")))
        out[f"{prefix}_SERVICE_HOST"] = ip
        out[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for port in ports:
            if port.get("name"):
                out[f"{prefix}_SERVICE_PORT_{_env_name(str(port['name']))}"] = str(port.get("port"))
        try:
            host = f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip
        except ValueError:
            continue  # not an address the proxy could route: no variables, as for a headless Service
        for i, port in enumerate(ports):
            protocol = str(port.get("protocol") or "TCP")
            url = f"{protocol.lower()}://{host}:{port.get('port')}"
            if i == 0:
                out[f"{prefix}_PORT"] = url
            link = f"{prefix}_PORT_{port.get('port')}_{protocol.upper()}"
            out.update({link: url, f"{link}_PROTO": protocol.lower(), f"{link}_PORT": str(port.get("port")),
                        f"{link}_ADDR": ip})
    return out


class ContainerExec:
    """Runs exec'd processes in the containers of ``store`` (the twin's ``ExecSource``)."""

    def __init__(self, store: ObjectStore, lock: threading.RLock, clock: Any, rule_of: RuleOf, *,
                 default_home: str, started_env: StartedEnv | None = None, routing: Routing | None = None,
                 seed: Callable[[], int] = lambda: 0, hidden: frozenset[str] = frozenset(),
                 started_sources: StartedSources | None = None, volumes: PodVolumes | None = None,
                 working_set: WorkingSet | None = None) -> None:
        """``working_set``: a container's memory in use (bytes), which its limit leaves an exec'd process less of."""
        self._store, self._lock, self._clock = store, lock, clock
        self._working_set = working_set
        self._started_sources, self._volumes = started_sources, volumes
        self._rule_of, self._default_home, self._started_env = rule_of, default_home, started_env
        #: Namespaces the agent's API hides (the injection machinery): their names do not resolve either.
        self._routing, self._seed, self._hidden = routing, seed, hidden

    def __call__(self, namespace: str, pod_name: str, container_name: str, argv: list[str], stdin: bytes,
                 tty: bool) -> Outcome:
        """Run ``argv`` to its end under the twin's lock: the process reads the cluster's objects (its
        mounts, the Services it dials) as they are at one moment, and no tick runs meanwhile."""
        with self._lock:
            try:
                pod = self._store.get_stored(self._store.registry.by_kind("Pod", "v1"), namespace, pod_name)
            except ApiError:
                return Outcome(b"", b"", internal_error(f'container not found ("{container_name}")'))
            spec = next((c for key in ("containers", "initContainers", "ephemeralContainers")
                         for c in (pod.get("spec") or {}).get(key) or [] if c.get("name") == container_name), None)
            if spec is None:
                return Outcome(b"", b"", internal_error(f'container not found ("{container_name}")'))
            image = str(spec.get("image", ""))
            rule = self._rule_of(image)
            if rule is None or rule.executables is None:
                return Outcome(b"", b"", internal_error(
                    f"error executing command in container: the itbench_gym twin does not catalogue the programs of image "
                    f"{image}, so it cannot run {argv[0]!r} there"))
            container = self._container(pod, spec, rule)
            if programs.find(argv[0], container) is None:
                return Outcome(b"", b"", internal_error(self._not_found(pod, container_name, argv)))
            result = programs.run(argv, container, stdin)
            self._keep_written(pod, container)
        stdout, stderr = result.stdout, result.stderr
        if tty:  # one terminal: both streams on it, with the line discipline's CR before each LF
            stdout, stderr = (stdout + stderr).replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"), b""
        return Outcome(stdout, stderr, success() if result.code == 0 else exit_status(argv, result.code))

    def main_process(self, pod: Obj, spec: Obj, argv: list[str], horizon: float,
                     before: FollowedRun | None = None) -> FollowedRun | None:
        """A container's own process followed ``horizon`` seconds from its start (:mod:`.mainprocess`;
        ``before``: how far it was followed last), when it runs only programs the twin emulates on what
        the twin models; None otherwise (an image whose programs are not catalogued, a program not
        emulated, a file, destination or answer the twin does not model: its log would be the twin's
        words, not the program's). The runtime refused a missing argv[0] before (``start_error``)."""
        with self._lock:
            rule = self._rule_of(str(spec.get("image", "")))
            if rule is None or rule.executables is None:
                return None
            volumes = before.volumes if before is not None else self._empty_dirs(pod)
            container = self._container(pod, spec, rule, volumes)
            if not argv or programs.find(argv[0], container) is None:
                return None
            network = ReplayedNetwork(container.network, before.answers if before is not None else ()) \
                if container.network is not None else None
            waited = ProcessTime(horizon)
            followed = dataclasses.replace(container, network=network, process_time=waited)
            try:
                result = programs.run(argv, followed, b"")
                out, err, code = result.stdout, result.stderr, result.code
            except ProcessWaits as waits:
                out, err, code = waits.out, waits.err, None
            if code in (programs.NOT_EMULATED, programs.EMULATION_FAILED) or programs.TWIN_WORD.encode() in out + err:
                return None
            self._keep_written(pod, followed)
        return FollowedRun(out, err, code, waited.elapsed, tuple(network.answers) if network is not None else (), volumes)

    def _empty_dirs(self, pod: Obj) -> dict[str, VolumeContent | None]:
        """The pod's emptyDir volumes as they are now, by name."""
        names = [str(v.get("name")) for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v]
        return {name: self._volumes.volume(pod, name) for name in names} if self._volumes is not None else {}

    def _keep_written(self, pod: Obj, container: Container) -> None:
        """Hand what the process wrote into the pod's emptyDir volumes to the kubelet, which keeps them."""
        if self._volumes is None:
            return
        mounts = container.files.writable
        for root, content in container.files.written().items():
            mount = mounts[root]
            before = self._volumes.volume(pod, mount.volume)
            if before is None:
                continue
            self._volumes.write_volume(pod, mount.volume, _replaced(before, mount.sub, content))

    def _not_found(self, pod: Obj, container: str, argv: list[str]) -> str:
        """The runtime's refusal of an argv[0] the image does not hold (containerd names the exec by its id)."""
        seed = f"{pod['metadata'].get('uid', '')}/{container}/{self._clock.now()}/{argv}".encode()
        exec_id = hashlib.sha256(seed).hexdigest()
        return (f'error executing command in container: failed to exec in container: failed to start exec "{exec_id}": '
                f"{programs.runtime_refusal(argv[0])}")

    def _lookup(self, namespace: str, started: _Sources) -> tuple[Callable[[str, str, str], str | None], Callable[[str, str], dict[str, str] | None]]:
        def data(kind: str, name: str) -> dict[str, str] | None:
            obj = self._source(kind, namespace, name, started)
            if obj is None:
                return None
            raw = _data_bytes(kind, obj)
            return {k: v.decode("utf-8", "replace") for k, v in raw.items()}

        def key(kind: str, name: str, k: str) -> str | None:
            return (data(kind, name) or {}).get(k)

        return key, data

    def _source(self, kind: str, namespace: str, name: str, started: _Sources) -> Obj | None:
        """A ConfigMap or Secret as the container's run read it at its start, else as it is now."""
        return started[(kind, name)] if (kind, name) in started else self._object(kind, namespace, name)

    def _object(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return self._store.get_stored(self._store.registry.by_kind(kind, "v1"), namespace, name)
        except ApiError:
            return None

    def _container(self, pod: Obj, spec: Obj, rule: ImageRule,
                   empty_dirs: Mapping[str, VolumeContent | None] | None = None) -> Container:
        """The container as a process in it sees it (``empty_dirs``: its emptyDir volumes as a process
        that started earlier found them; default, as they are now)."""
        meta, pod_spec = pod["metadata"], pod.get("spec") or {}
        namespace = str(meta.get("namespace") or "default")
        hostname = str(pod_spec.get("hostname") or meta.get("name", ""))[:63]
        started = (self._started_sources(pod, str(spec.get("name"))) if self._started_sources is not None else None) or {}
        kubelet = self._started_env(pod, str(spec.get("name"))) if self._started_env is not None else None
        if kubelet is None:
            key, data = self._lookup(namespace, started)
            kubelet = container_env(spec, pod, key, data)
        services = self._store.list_stored(self._store.registry.by_kind("Service", "v1"), None)
        links = service_links(services, namespace, pod_spec.get("enableServiceLinks") is not False)
        env: dict[str, str] = {"PATH": DEFAULT_PATH, "HOSTNAME": hostname}
        env.update(rule.env)
        env.update(sorted({**links, **kubelet}.items()))
        env.setdefault("HOME", rule.home or self._default_home)
        pods = self._visible(self._store.list_stored(self._store.registry.by_kind("Pod", "v1"), None))
        names = frozenset(str(n["metadata"].get("name"))
                          for n in self._visible(self._store.list_stored(self._store.registry.by_kind("Namespace", "v1"), None)))
        routing = self._routing(namespace) if self._routing is not None else None
        network = ClusterNetwork(pod, self._visible(services), pods, routing,
                                 stable_draw(self._seed(), meta.get("uid", ""), self._clock.now()), names)
        node = self._object("Node", "", str(pod_spec.get("nodeName") or ""))
        info = ((node or {}).get("status") or {}).get("nodeInfo") or {}
        kernel = (str(info.get("kernelVersion", "")), KERNEL_BUILD, uname_machine(str(info.get("architecture", ""))))
        limit = container_limits(spec).get("memory")
        used = self._working_set(namespace, str(meta.get("name", "")), str(spec.get("name", ""))) if self._working_set is not None else 0.0
        return Container(pod=str(meta.get("name", "")), namespace=namespace, name=str(spec.get("name", "")),
                         image=str(spec.get("image", "")), hostname=hostname, env=env,
                         files=self._files(pod, spec, hostname, started, empty_dirs),
                         executables=rule.executables, cwd=str(spec.get("workingDir") or rule.workdir or "/"),
                         now=float(self._clock.now()), network=network, kernel=kernel, versions=dict(rule.versions),
                         memory_room=max(float(limit) - used, 0.0) if limit else math.inf)

    def _visible(self, objects: list[Obj]) -> list[Obj]:
        """The objects outside the hidden namespaces (a Namespace by its own name)."""
        return [o for o in objects if (o["metadata"].get("namespace") or o["metadata"].get("name")) not in self._hidden]

    def _files(self, pod: Obj, spec: Obj, hostname: str, started: _Sources,
               empty_dirs: Mapping[str, VolumeContent | None] | None) -> FileTree:
        """The container's mounts and the files the kubelet writes into it (a subPath mount's as they
        were when the container started: the kubelet never updates them)."""
        tree = _TreeBuilder()
        pod_spec = pod.get("spec") or {}
        namespace = str(pod["metadata"].get("namespace") or "default")
        if not pod_spec.get("hostNetwork"):
            tree.file("/etc/hosts", _hosts(pod, hostname).encode())
            tree.file("/etc/hostname", f"{hostname}\n".encode())
        resolv = resolv_conf(pod_spec, namespace)
        if resolv is not None:
            tree.file("/etc/resolv.conf", resolv.encode())
        tree.file(str(spec.get("terminationMessagePath") or "/dev/termination-log"), b"")
        volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
        stamp = _stamp(pod)
        for mount in spec.get("volumeMounts") or []:
            volume = volumes.get(mount.get("name")) or {}
            root = posixpath.normpath(str(mount.get("mountPath", "/")))
            if "emptyDir" in volume:
                self._empty_dir(tree, pod, mount, root, empty_dirs)
                continue
            shown = started if mount.get("subPath") else (self._volumes.mounted(pod) if self._volumes is not None else None) or {}
            projected = self._projected(volume, pod, spec, namespace, shown)
            if projected is None:  # a volume whose content the twin does not hold (hostPath, PVC, ...)
                tree.directory(root, modelled=False)
                continue
            tree.read_only.add(root)
            files, complete = projected
            sub = str(mount.get("subPath") or "")
            if sub:
                if sub in files:
                    tree.file(root, files[sub])
                else:
                    tree.directory(root, modelled=complete and not any(p.startswith(sub + "/") for p in files))
                    for rel, content in files.items():
                        if rel.startswith(sub + "/"):
                            tree.file(posixpath.join(root, rel[len(sub) + 1:]), content)
                continue
            tree.atomic(root, stamp, files, complete)
        return tree.build()

    def _empty_dir(self, tree: _TreeBuilder, pod: Obj, mount: Obj, root: str,
                   empty_dirs: Mapping[str, VolumeContent | None] | None) -> None:
        """An emptyDir mount: what the pod's containers wrote there (the kubelet keeps it), writable
        unless mounted ``readOnly``; a volume some process the twin does not emulate wrote to is known
        only as far as the emulated ones wrote it."""
        raw_sub = str(mount.get("subPath") or "")
        name, sub = str(mount.get("name")), posixpath.normpath(raw_sub) if raw_sub else ""
        if empty_dirs is not None:
            content = empty_dirs.get(name)
        else:
            content = self._volumes.volume(pod, name) if self._volumes is not None else None
        if content is None:  # not on a node yet, or no kubelet keeps volumes here
            tree.directory(root, modelled=False)
            return
        tree.directory(root, modelled=content.complete)
        prefix = f"{sub}/" if sub else ""
        for rel in content.directories:
            if rel.startswith(prefix):
                tree.directory(posixpath.join(root, rel[len(prefix):]), modelled=content.complete)
        for rel, data in content.files.items():
            if rel.startswith(prefix):
                tree.file(posixpath.join(root, rel[len(prefix):]), data)
        if mount.get("readOnly"):
            tree.read_only.add(root)
        else:
            tree.writable[root] = WritableMount(name, sub)

    def _projected(self, volume: Obj, pod: Obj, spec: Obj, namespace: str, started: _Sources) -> tuple[dict[str, bytes], bool] | None:
        """A volume's files by relative path and whether they are all the volume holds; None for a
        volume kind whose content the twin does not model (a hostPath holds the node's files, a claim
        its disk's; an emptyDir is :meth:`_empty_dir`'s)."""
        sources: list[tuple[str, Obj]] = []
        for kind in ("configMap", "secret", "downwardAPI"):
            if kind in volume:
                sources.append((kind, volume[kind] or {}))
        for source in (volume.get("projected") or {}).get("sources") or []:
            for kind in ("configMap", "secret", "downwardAPI", "serviceAccountToken", "clusterTrustBundle"):
                if kind in source:
                    sources.append((kind, source[kind] or {}))
        if not sources:
            return None
        files: dict[str, bytes] = {}
        complete = True
        for kind, ref in sources:
            if kind in ("configMap", "secret"):
                name = str(ref.get("name") if kind == "configMap" else ref.get("secretName", ref.get("name", "")))
                obj = self._source("ConfigMap" if kind == "configMap" else "Secret", namespace, name, started)
                data = _data_bytes("ConfigMap" if kind == "configMap" else "Secret", obj) if obj is not None else {}
                items = ref.get("items")
                for rel, key in ([(str(i.get("path")), str(i.get("key"))) for i in items] if items else [(k, k) for k in data]):
                    if key in data:
                        files[rel] = data[key]
            elif kind == "downwardAPI":
                for item in ref.get("items") or []:
                    text = _downward_file(pod, spec, item)
                    if text is None:
                        complete = False
                    else:
                        files[str(item.get("path"))] = text.encode()
            elif kind == "serviceAccountToken" and (token := self._pod_token(pod, ref)) is not None:
                files[str(ref.get("path", "token"))] = token.encode()
            else:  # a trust bundle (or a token of an account that is gone): the twin has no such file
                complete = False
        return files, complete

    def _pod_token(self, pod: Obj, ref: Obj) -> str | None:
        """The token the kubelet last asked for on the pod's behalf: bound to the pod and its node,
        asked for at the pod's start and again each day (``auth.kubelet_token_issued_at``)."""
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        namespace = str(meta.get("namespace") or "default")
        account, started = self._object("ServiceAccount", namespace, str(spec.get("serviceAccountName") or "default")), status.get("startTime")
        if account is None or not started:
            return None
        node = self._object("Node", "", str(spec.get("nodeName") or ""))
        seconds = ref.get("expirationSeconds", WARN_ONLY_EXPIRATION_SECONDS)
        audience = ref.get("audience")
        token, _ = issue_token(
            BoundAccount(namespace, str(account["metadata"]["name"]), str(account["metadata"].get("uid", ""))),
            kubelet_token_issued_at(parse_rfc3339(str(started)), self._clock.now()), int(seconds),
            audiences=(str(audience),) if audience else (TOKEN_ISSUER,),
            bound=BoundObject("Pod", str(meta.get("name", "")), str(meta.get("uid", ""))),
            node=BoundObject("Node", str(node["metadata"]["name"]), str(node["metadata"].get("uid", ""))) if node is not None else None)
        return token


def _data_bytes(kind: str, obj: Obj) -> dict[str, bytes]:
    """A ConfigMap's or Secret's keys as the files a volume would hold (base64 decoded where stored so)."""
    out: dict[str, bytes] = {}
    encoded = ["data", "binaryData"] if kind == "Secret" else ["binaryData"]
    for field_name in ("data", "binaryData"):
        for k, v in (obj.get(field_name) or {}).items():
            if field_name in encoded:
                try:
                    out[str(k)] = base64.b64decode(str(v))
                except (ValueError, binascii.Error):
                    continue
            else:
                out[str(k)] = str(v).encode()
    if kind == "Secret":
        out.update({str(k): str(v).encode() for k, v in (obj.get("stringData") or {}).items()})
    return out


def _downward_file(pod: Obj, spec: Obj, item: Obj) -> str | None:
    """A downwardAPI volume item's content (labels and annotations as sorted ``key="value"`` lines)."""
    field_ref = item.get("fieldRef")
    if field_ref:
        path = str(field_ref.get("fieldPath", ""))
        if path in ("metadata.labels", "metadata.annotations"):
            values = (pod.get("metadata") or {}).get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{_go_quote(str(v))}"' for k, v in sorted(values.items()))
        return downward_field(pod, path)
    ref = item.get("resourceFieldRef")
    if ref:
        name = ref.get("containerName") or spec.get("name")
        target = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), None)
        return resource_field(target, ref) if target is not None else None
    return None


def _go_quote(text: str) -> str:
    """The inside of Go's ``%q`` for text: backslash, quote and control characters escaped."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _hosts(pod: Obj, hostname: str) -> str:
    """The kubelet's managed ``/etc/hosts``: localhost entries, the pod's IPs, then ``hostAliases``."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ips = [str(i.get("ip")) for i in status.get("podIPs") or []] or ([str(status["podIP"])] if status.get("podIP") else [])
    subdomain = spec.get("subdomain")
    namespace = pod["metadata"].get("namespace") or "default"
    text = _HOSTS_HEADER + _HOSTS_LOCAL
    for ip in ips:
        text += (f"{ip}\t{hostname}.{subdomain}.{namespace}.svc.cluster.local\t{hostname}\n" if subdomain
                 else f"{ip}\t{hostname}\n")
    aliases = spec.get("hostAliases") or []
    if aliases:
        text += "\n# Entries added by HostAliases.\n"
        text += "".join(f"{a.get('ip')}\t{chr(9).join(str(h) for h in a.get('hostnames') or [])}\n" for a in aliases)
    return text


def _stamp(pod: Obj) -> str:
    """The atomic writer's timestamped directory (``..<UTC time>.<random digits>``, from the pod's start)."""
    started = (pod.get("status") or {}).get("startTime") or (pod.get("metadata") or {}).get("creationTimestamp")
    when = parse_rfc3339(str(started)) if started else 0.0
    digits = int(hashlib.sha256(str((pod.get("metadata") or {}).get("uid", "")).encode()).hexdigest()[:8], 16) % 10**10
    return time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime(when)) + str(digits)


class _TreeBuilder:
    """Collects a container's files, directories, links and modelled roots."""

    def __init__(self) -> None:
        self.files: dict[str, bytes | bytearray] = {}
        self.dirs: set[str] = {"/"}
        self.links: dict[str, str] = {}
        self.modelled: set[str] = set()
        self.writable: dict[str, WritableMount] = {}
        self.read_only: set[str] = set()

    def _parents(self, path: str) -> None:
        parent = posixpath.dirname(path)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = posixpath.dirname(parent)

    def file(self, path: str, content: bytes) -> None:
        self._parents(path)
        self.files[path] = content
        self.modelled.add(path)

    def directory(self, path: str, *, modelled: bool) -> None:
        self._parents(path)
        self.dirs.add(path)
        if modelled:
            self.modelled.add(path)

    def atomic(self, root: str, stamp: str, files: Mapping[str, bytes], complete: bool) -> None:
        """A ConfigMap, Secret, projected or downwardAPI volume as the kubelet's atomic writer lays it out."""
        self.directory(root, modelled=complete)
        data_dir = posixpath.join(root, stamp)
        self.directory(data_dir, modelled=complete)
        self.links[posixpath.join(root, "..data")] = stamp
        for rel, content in files.items():
            path = posixpath.join(data_dir, rel)
            self._parents(path)
            self.files[path] = content
            top = rel.split("/", 1)[0]
            self.links[posixpath.join(root, top)] = f"..data/{top}"

    def build(self) -> FileTree:
        return FileTree(self.files, self.dirs, frozenset(self.modelled), self.links, self.writable, frozenset(self.read_only))


def _replaced(before: VolumeContent, sub: str, written: VolumeContent) -> VolumeContent:
    """A volume's content with its directory ``sub`` ("" for all of it) holding ``written``."""
    prefix = f"{sub}/" if sub else ""
    files = {rel: data for rel, data in before.files.items() if sub and not rel.startswith(prefix)}
    dirs = {rel for rel in before.directories if sub and not (rel == sub or rel.startswith(prefix))}
    files.update({prefix + rel: data for rel, data in written.files.items()})
    dirs.update(prefix + rel for rel in written.directories)
    if sub:
        dirs.add(sub)
    return VolumeContent(files, frozenset(dirs), before.complete)
