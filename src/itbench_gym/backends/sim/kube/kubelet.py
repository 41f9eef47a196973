"""The kubelet of every node: a pod's life from ContainerCreating to Running, crashes and all.

What an SRE agent diagnoses mostly lives here: ``FailedMount`` for a missing ConfigMap or Secret,
``CreateContainerConfigError`` for a missing env reference, ``ImagePullBackOff`` (with containerd's reason
from the runtime: an unknown reference, no manifest for the node's platform), ``StartError`` for a
missing executable, ``exec format error`` for a binary of another CPU, ``CrashLoopBackOff`` with
its doubling back-off (first restart at once, then 10 s, 20 s, ... capped at 300 s, reset after
10 minutes of good behaviour), ``OOMKilled`` in ``lastState``, readiness that lags start-up, init
containers (whose processes read what their volumes project), graceful termination. Each container is a small state machine advanced at exact
event times (the cluster's timers); probes are evaluated whenever the pod syncs (at least once
per tick), asking the ContainerRuntime whether they pass *now*. The pod's status is rendered from
that state, with the same fields, reasons and messages a real kubelet writes.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import ipaddress
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from itbench_gym.backends.sim.containers.context import VolumeContent
from itbench_gym.backends.sim.containers.mainprocess import FollowedRun
from itbench_gym.lang.timestamps import rfc3339

from .controllers.base import Cache, Context, Controller, Key
from .controllers.util import container_limits, container_requests, parse_time
from .errors import ApiError
from .runtime import ContainerRuntime, FileReader

Obj = dict[str, Any]
#: (pod, container, horizon, how far it was followed before) -> the container's own process followed
#: ``horizon`` seconds from its start through the emulated programs (``ContainerExec.main_process``),
#: or None where they do not say.
MainOutput = Callable[[Obj, Obj, float, "FollowedRun | None"], "FollowedRun | None"]

MAX_BACKOFF = 300.0
#: How long past the process model's end an emulated process is followed (its sleeps, in seconds).
FOLLOW_PAST_PLAN = 3600.0
INITIAL_BACKOFF = 10.0
#: A container that ran this long since its last restart starts its back-off afresh.
BACKOFF_RESET = 2 * MAX_BACKOFF
#: Time to resolve a reference that does not exist, and until the kubelet reports the back-off.
PULL_FAILURE_SECONDS = 1.0
POD_CIDR = ipaddress.ip_network("10.244.0.0/16")
#: The volume manager's retry back-off after a failed mount operation (nestedpendingoperations'
#: exponentialbackoff: initialDurationBeforeRetry 500 ms, doubling, maxDurationBeforeRetry 2m2s).
MOUNT_RETRY_INITIAL, MOUNT_RETRY_MAX = 0.5, 122.0
#: The pod worker's resync after a sync error such as CreateContainerConfigError (kubelet backOffPeriod).
SYNC_ERROR_RETRY_SECONDS = 10.0
#: The pod worker's periodic resync (kubelet ``syncFrequency``, 1 minute), at which the volume manager
#: projects ConfigMap and Secret volumes again; each pod resyncs with its own phase in the first half
#: minute (the pod workers jitter every interval by up to half of it).
RESYNC_SECONDS, RESYNC_PHASES = 60.0, 30.0

Phase = Literal["waiting", "running", "terminated"]


@dataclass
class ContainerRun:
    """The kubelet's memory of one container of one pod."""

    name: str
    image: str
    init: bool
    sidecar: bool = False
    state: Phase = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    #: What happens next and when: "create" | "pull-failed" | "pull-retry" | "start" | "restart".
    step: str = "create"
    due: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int = 0
    term_reason: str = ""
    term_message: str = ""
    last: Obj | None = None
    restarts: int = 0
    backoff: float = 0.0
    pull_backoff: float = INITIAL_BACKOFF
    last_restart_at: float | None = None
    exit_at: float | None = None
    planned_exit: int = 0
    ready: bool = False
    started: bool = False
    ever_ran: bool = False
    ready_fail_since: float | None = None
    live_fail_since: float | None = None
    last_probe: dict[str, float] = field(default_factory=dict)
    pulling: bool = False
    #: Why the last pull failed (containerd's words after the image reference).
    pull_cause: str = ""
    #: What this run and the one before printed, as (when, text) pieces (``Kubelet.main_output``).
    output: tuple[tuple[float, str], ...] = ()
    last_output: tuple[tuple[float, str], ...] = ()
    #: How far the twin followed this run's process through the emulated programs (None: not at all).
    followed: FollowedRun | None = None
    #: The ConfigMaps and Secrets this run's env and subPath mounts name, as they were when it started
    #: (the store's own objects, which are never changed; None for one that did not exist).
    sources: dict[tuple[str, str], Obj | None] | None = None

    def copy(self) -> ContainerRun:
        """A copy the kubelet can change without touching this one (``last`` is replaced, never changed)."""
        out = copy.copy(self)
        out.last_probe = dict(self.last_probe)
        return out

    def container_id(self, uid: str) -> str:
        return "containerd://" + hashlib.sha256(f"{uid}/{self.name}/{self.restarts}".encode()).hexdigest()

    def image_id(self) -> str:
        repo = self.image.split("@")[0].rsplit(":", 1)[0] if ":" in self.image.split("/")[-1] else self.image
        return f"{repo}@sha256:{hashlib.sha256(self.image.encode()).hexdigest()}"


@dataclass
class PodRun:
    uid: str
    node: str
    ip: str
    start_time: float
    containers: list[ContainerRun]
    conditions: dict[str, tuple[str, float]] = field(default_factory=dict)
    stop_at: float | None = None
    #: whether ``ip`` is still taken from the node's range (a finished pod's sandbox gives it back)
    ip_held: bool = True
    #: False until the pod's volumes are mounted and its sandbox (network, IP) exists.
    sandbox: bool = True
    #: The volume manager's current retry delay and when it may try the failed mounts again.
    mount_retry: float = 0.0
    mount_due: float | None = None
    #: What the containers wrote into the pod's emptyDir volumes, by volume (none written: empty).
    volumes: dict[str, VolumeContent] = field(default_factory=dict)
    #: The ConfigMaps and Secrets, by (kind, name), as the pod's volumes project them: read when the
    #: volumes were mounted and again at each resync after one changed (None: it did not exist).
    projected: dict[tuple[str, str], Obj | None] = field(default_factory=dict)
    #: When the next resync projects the volumes again (None: none of their sources changed).
    refresh_at: float | None = None

    def copy(self) -> PodRun:
        out = copy.copy(self)
        out.containers = [c.copy() for c in self.containers]
        out.conditions = dict(self.conditions)
        out.volumes = dict(self.volumes)
        out.projected = dict(self.projected)
        return out


@dataclass
class KubeletState:
    pods: dict[Key, PodRun] = field(default_factory=dict)
    ips: dict[str, set[str]] = field(default_factory=dict)  # node -> allocated pod IPs
    images: dict[str, set[str]] = field(default_factory=dict)  # node -> pulled images

    def copy(self) -> KubeletState:
        """What a snapshot keeps: copies of every run and set the kubelet changes in place."""
        return KubeletState({k: run.copy() for k, run in self.pods.items()}, {n: set(v) for n, v in self.ips.items()},
                            {n: set(v) for n, v in self.images.items()})


#: The probes of a container: kind -> its field.
_PROBES = {"startup": "startupProbe", "readiness": "readinessProbe", "liveness": "livenessProbe"}
#: How often a waiting init container retries its condition (the ``sleep`` of an ``until`` loop).
INIT_POLL_SECONDS = 2.0


def _probe_target(pod_ip: str, container: Obj, probe: Obj) -> str:
    def port(p: Any) -> Any:
        if isinstance(p, str):
            for cp in container.get("ports") or []:
                if cp.get("name") == p:
                    return cp.get("containerPort")
        return p

    if "httpGet" in probe:
        h = probe["httpGet"]
        scheme = str(h.get("scheme", "HTTP")).lower()
        return f'Get "{scheme}://{pod_ip}:{port(h.get("port"))}{h.get("path", "/")}": dial tcp {pod_ip}:{port(h.get("port"))}: connect: connection refused'
    if "tcpSocket" in probe:
        p = port((probe["tcpSocket"] or {}).get("port"))
        return f"dial tcp {pod_ip}:{p}: connect: connection refused"
    if "grpc" in probe:
        return f'timeout: failed to connect service "{pod_ip}:{(probe["grpc"] or {}).get("port")}" within 1s'
    return "command terminated with non-zero exit code: exit status 1"


class Kubelet(Controller):
    """All nodes' kubelets: syncs every pod bound to a node."""

    name = "kubelet"

    def __init__(self, ctx: Context, runtime: ContainerRuntime) -> None:
        super().__init__(ctx)
        self.runtime = runtime
        self.state = KubeletState()
        #: What a container's own process prints and its exit code, where the twin emulates it (a debug
        #: pod's ``nslookup``); None where no model says (``Twin`` sets it).
        self.main_output: MainOutput | None = None
        #: pod -> (the cached pod, what its status was rendered from) for pods whose status that
        #: rendering left as it was: the same inputs render the same status, so it is not rebuilt.
        self._unchanged: dict[Key, tuple[Obj, tuple[Any, ...]]] = {}
        #: pod -> (the cached pod, whether its spec probes any container): specs do not change
        self._probed: dict[Key, tuple[Obj, bool]] = {}
        #: Pods a ConfigMap or Secret their volumes project changed for since their last sync.
        self._stale_sources: set[Key] = set()

    # -- wiring ---------------------------------------------------------------------------------

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "Pod" and ((obj.get("spec") or {}).get("nodeName") or Cache.key_of(obj) in self.state.pods):
            return [Cache.key_of(obj)]
        if kind in ("ConfigMap", "Secret"):
            name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace")
            stale = [k for k, run in self.state.pods.items() if k[0] == namespace and (kind, name) in run.projected]
            self._stale_sources.update(stale)
            return stale
        if kind == "Node" and old is not None and _node_ip(obj) != _node_ip(old):
            name = obj["metadata"]["name"]
            return [k for k, run in self.state.pods.items() if run.node == name]  # their status shows it as hostIP
        return ()

    def probing_pods(self) -> list[Key]:
        """Running pods a sync at the end of a tick may find something to do for: those with a probe
        that runs now, a container not yet started or ready, or whose last sync was for another version of the
        pod. Any other pod's sync would find it idle (``_idle``) until an event, a timer or a kill
        enqueues it (after a restore, which forgets what syncs found, every running pod may change)."""
        return [k for k, run in self.state.pods.items() if any(c.state == "running" for c in run.containers) and self._may_change(k, run)]

    def _may_change(self, key: Key, run: PodRun) -> bool:
        pod = self.ctx.cache.get("Pod", *key)
        seen = self._unchanged.get(key)
        if pod is None or seen is None or seen[0] is not pod:
            return True
        for c in run.containers:
            if c.state == "running" and (not c.started or not c.ready or (c.init and not c.sidecar)):
                return True
            if c.due is None and c.state == "waiting" and c.step == "create":
                return True
        probed = self._probed.get(key)
        if probed is None or probed[0] is not pod:
            spec = pod.get("spec") or {}
            probed = self._probed[key] = (pod, any(
                c.get(p) for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                for p in _PROBES.values()))
        if not probed[1]:
            return False
        now = self.ctx.now()
        for c in run.containers:
            if c.state == "running" and c.started_at is not None:
                spec = self._spec_of(pod, c)
                if any((probe := spec.get(field)) is not None and not self._probe_noted(c, probe, kind, now)
                       for kind, field in _PROBES.items()):
                    return True  # one of its probes runs
        return False

    def snapshot_state(self) -> KubeletState:
        return self.state.copy()

    def restore_state(self, state: KubeletState) -> None:
        self.state = state.copy()
        self._unchanged.clear()
        self._stale_sources.clear()

    # -- the pod worker -------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        pod = self.ctx.cache.get("Pod", *key)
        run = self.state.pods.get(key)
        if pod is None:
            if run is not None:
                self._forget(key, run)
            return
        if run is not None and run.uid != pod["metadata"].get("uid"):
            self._forget(key, run)
            run = None
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return
        node = self.ctx.cache.get("Node", "", node_name)
        if node is None:
            return
        now = self.ctx.now()
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(key, pod, run, now)
            return
        if run is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            run = self._admit(key, pod, now)
        if not run.sandbox and not self._prepare(key, pod, node, run, now):
            self._write(key, pod, node, run, now)
            return
        self._resync_volumes(key, pod, run, now)
        if self._idle(key, pod, node, run, now):
            return
        self._advance(pod, node, run, now)
        self._probe(pod, run, now)
        self._write(key, pod, node, run, now)
        nxt = self._next_due(pod, run)
        if nxt is not None:
            self.requeue_at(key, max(nxt, now))

    def _idle(self, key: Key, pod: Obj, node: Obj, run: PodRun, now: float) -> bool:
        """Whether syncing the pod now would change nothing: most syncs at the end of a tick.

        True when no container has a transition due, no probe is due for a new evaluation (a pod
        without probes, or one probed at this instant already), the status would render as it did
        the last time it was found unchanged, and the requeue timer is set as early as it would be.
        """
        seen = self._unchanged.get(key)
        if seen is None or seen[0] is not pod:
            return False
        for c in run.containers:
            if c.due is not None and c.due <= now:
                return False
            if c.due is None and c.state == "waiting" and c.step == "create":
                return False
            if c.state != "running":
                continue
            if c.exit_at is not None and c.exit_at <= now:
                return False
            if c.started_at is None:
                continue
            spec = self._spec_of(pod, c)
            if not c.started:
                if not self._probe_noted(c, spec.get("startupProbe") or {}, "startup", now):
                    return False
                continue
            if c.init and not c.sidecar:
                if c.exit_at is None:
                    return False
                continue
            readiness, liveness = spec.get("readinessProbe"), spec.get("livenessProbe")
            if readiness is None and not c.ready:
                return False
            for kind, probe in (("readiness", readiness), ("liveness", liveness)):
                if probe is not None and not self._probe_noted(c, probe, kind, now):
                    return False
        nxt = self._next_due(pod, run)
        if nxt is not None:
            timer = self.ctx.timers.due.get((self.name, key))
            if timer is None or timer > max(nxt, now):
                return False
        return seen[1] == self._status_inputs(run, _node_ip(node))

    def _forget(self, key: Key, run: PodRun) -> None:
        self.state.pods.pop(key, None)
        self._unchanged.pop(key, None)
        self._probed.pop(key, None)
        self._release_ip(run)

    def _release_ip(self, run: PodRun) -> None:
        if run.ip_held:
            run.ip_held = False
            self.state.ips.get(run.node, set()).discard(run.ip)

    # -- admission and IPs --------------------------------------------------------------------

    def _allocate_ip(self, node: Obj, pod: Obj) -> str | None:
        """A free address of the node's pod range (the node's own for hostNetwork); None when none is left."""
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork"):
            return _node_ip(node)
        name = node["metadata"]["name"]
        cidr = (node.get("spec") or {}).get("podCIDR")
        if cidr:
            net = ipaddress.ip_network(cidr, strict=False)
        else:
            names = sorted(n["metadata"]["name"] for n in self.ctx.cache.list("Node"))
            index = names.index(name) + 1 if name in names else len(names) + 1
            base = int(POD_CIDR.network_address)
            net = ipaddress.ip_network((base + (index % 256) * 256, 24))
        used = self.state.ips.setdefault(name, set())
        first = int(net.network_address) + 2  # .1 is the node's bridge
        for n in range(first, int(net.broadcast_address)):
            ip = str(ipaddress.ip_address(n))
            if ip not in used:
                used.add(ip)
                return ip
        return None

    def _admit(self, key: Key, pod: Obj, now: float) -> PodRun:
        """The pod worker takes the pod: its containers wait until the volumes and the sandbox are ready.

        Until then every container waits as ``ContainerCreating`` (``PodInitializing`` in a pod with
        init containers: the kubelet's default waiting state in ``convertToAPIContainerStatuses``).
        """
        spec = pod.get("spec") or {}
        waiting = "PodInitializing" if spec.get("initContainers") else "ContainerCreating"
        containers = [
            ContainerRun(c["name"], c.get("image", ""), True, sidecar=c.get("restartPolicy") == "Always")
            for c in spec.get("initContainers") or []
        ] + [ContainerRun(c["name"], c.get("image", ""), False) for c in spec.get("containers") or []]
        for c in containers:
            c.reason = waiting
        run = PodRun(pod["metadata"].get("uid", ""), (pod.get("spec") or {}).get("nodeName", ""), "", now, containers,
                     ip_held=False, sandbox=False)
        self.state.pods[key] = run
        return run

    def _prepare(self, key: Key, pod: Obj, node: Obj, run: PodRun, now: float) -> bool:
        """Mount the pod's volumes, then create its sandbox; False (and a retry timer) while either fails.

        A configMap or secret volume (or projected source) naming an object or key that does not
        exist, and is not ``optional``, fails ``MountVolume.SetUp`` as the kubelet's volume plugins
        do; the volume manager retries with its exponential back-off and the pod stays
        ``ContainerCreating`` until the object appears. Then the CNI gives the sandbox an address.
        """
        if run.mount_due is not None and now < run.mount_due:
            self.requeue_at(key, run.mount_due)
            return False
        failures = self._mount_failures(pod)
        if failures:
            for volume, error in failures:
                self.ctx.recorder.record(pod, "Warning", "FailedMount",
                                         f'MountVolume.SetUp failed for volume "{volume}" : {error}',
                                         component="kubelet", host=node["metadata"]["name"])
            run.mount_retry = MOUNT_RETRY_INITIAL if run.mount_retry == 0 else min(run.mount_retry * 2, MOUNT_RETRY_MAX)
            run.mount_due = now + run.mount_retry
            self.requeue_at(key, run.mount_due)
            return False
        run.mount_retry, run.mount_due = 0.0, None
        ip = self._allocate_ip(node, pod)
        if ip is None:  # the CNI's answer when the node's range is used up; the pod worker retries
            self.ctx.recorder.record(
                pod, "Warning", "FailedCreatePodSandBox",
                "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox: "
                'plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set',
                component="kubelet", host=node["metadata"]["name"])
            self.requeue_at(key, now + INITIAL_BACKOFF)
            return False
        run.ip, run.ip_held, run.sandbox = ip, not (pod.get("spec") or {}).get("hostNetwork"), True
        run.conditions["PodReadyToStartContainers"] = ("True", now)
        self._project(pod, run)
        return True

    def _project(self, pod: Obj, run: PodRun) -> None:
        """Read every ConfigMap and Secret the pod's volumes project, as mounting them does."""
        namespace = str(pod["metadata"].get("namespace") or "default")
        run.projected = {(kind, name): self._stored(kind, namespace, name) for kind, name in _volume_sources(pod)}
        run.refresh_at = None

    def _resync_volumes(self, key: Key, pod: Obj, run: PodRun, now: float) -> None:
        """A ConfigMap or Secret the volumes project changed: they show it from the pod's next resync
        on (the kubelet updates such volumes only when it syncs the pod), not at once."""
        if run.refresh_at is None:
            if key not in self._stale_sources:
                return
            self._stale_sources.discard(key)
            namespace = str(pod["metadata"].get("namespace") or "default")
            if all(self._stored(kind, namespace, name) is obj for (kind, name), obj in run.projected.items()):
                return
            phase = int(hashlib.sha256(run.uid.encode()).hexdigest()[:8], 16) % int(RESYNC_PHASES * 1000) / 1000.0
            first = run.start_time + phase
            run.refresh_at = first + RESYNC_SECONDS * max(0, math.ceil((now - first) / RESYNC_SECONDS))
        if now >= run.refresh_at:
            self._project(pod, run)
        else:
            self.requeue_at(key, run.refresh_at)

    def _stored(self, kind: str, namespace: str, name: str) -> Obj | None:
        """A ConfigMap or Secret as the API server has it now, or None."""
        store = self.ctx.store
        try:
            return store.get_stored(store.registry.by_kind(kind), namespace, name)
        except (ApiError, KeyError, LookupError):
            return None

    def reader(self, pod: Obj, spec: Obj) -> FileReader:
        """What the container reads at a path: the ConfigMap / Secret key its volume mounts project
        there, or what a process wrote into its emptyDir."""
        namespace = pod["metadata"].get("namespace") or "default"
        volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
        run = self._run_of(pod)

        def shown(kind: str, namespace: str, name: str) -> Obj | None:
            """A source as the volumes project it (as the store has it before they are mounted)."""
            if run is not None and (kind, name) in run.projected:
                return run.projected[(kind, name)]
            return self._stored(kind, namespace, name)

        def read(path: str) -> str | None:
            for mount in spec.get("volumeMounts") or []:
                root = str(mount.get("mountPath", "")).rstrip("/")
                if not path.startswith(root + "/"):
                    continue
                rel = path[len(root) + 1:]
                sub = str(mount.get("subPath") or "")
                rel = f"{sub}/{rel}" if sub else rel
                volume = volumes.get(mount.get("name")) or {}
                if "emptyDir" in volume:
                    written = run.volumes.get(str(mount.get("name"))) if run is not None else None
                    data = written.files.get(rel) if written is not None else None
                    found = data.decode("utf-8", "replace") if data is not None else None
                else:
                    found = _projected(volume, rel, namespace, shown)
                if found is not None:
                    return found
            return None

        return read

    def _mount_failures(self, pod: Obj) -> list[tuple[str, str]]:
        """(volume, error) for each volume whose ConfigMap / Secret source cannot be projected now."""
        namespace = pod["metadata"].get("namespace") or "default"
        out: list[tuple[str, str]] = []
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            for kind, ref in _volume_refs(volume):
                error = _source_error(kind, ref, namespace, self._stored)
                if error is not None:
                    out.append((str(volume.get("name", "")), error))
                    break
        return out

    # -- container state machine ------------------------------------------------------------

    def _spec_of(self, pod: Obj, c: ContainerRun) -> Obj:
        spec = pod.get("spec") or {}
        items: list[Obj] = (spec.get("initContainers") if c.init else spec.get("containers")) or []
        for item in items:
            if item.get("name") == c.name:
                return item
        return {"name": c.name, "image": c.image}

    def _init_done(self, run: PodRun) -> bool:
        return all(
            (c.state == "terminated" and c.exit_code == 0) or (c.sidecar and c.started)
            for c in run.containers if c.init
        )

    def _eligible(self, run: PodRun) -> list[ContainerRun]:
        """Containers the kubelet may act on now: the next init container, or all app containers."""
        out: list[ContainerRun] = []
        for c in run.containers:
            if not c.init:
                continue
            out.append(c)
            if not ((c.state == "terminated" and c.exit_code == 0) or (c.sidecar and c.started)):
                return out
        return out + [c for c in run.containers if not c.init]

    def _advance(self, pod: Obj, node: Obj, run: PodRun, now: float) -> None:
        for _ in range(10_000):
            pending: list[tuple[float, int, ContainerRun]] = []
            for i, c in enumerate(self._eligible(run)):
                if c.state == "waiting" and c.step == "create" and c.due is None:
                    self._begin_create(pod, node, c, now)
                if c.due is not None and c.due <= now:
                    pending.append((c.due, i, c))
                if c.state == "running" and c.exit_at is not None and c.exit_at <= now:
                    pending.append((c.exit_at, i, c))
            if not pending:
                return
            at, _, c = min(pending, key=lambda p: (p[0], p[1]))
            if c.state == "running" and c.exit_at is not None and c.exit_at <= at:
                code = c.planned_exit
                self._terminated(pod, run, c, c.exit_at, code, "Completed" if code == 0 else "Error", "")
            else:
                self._step(pod, node, run, c, at)
        raise RuntimeError(f"kubelet: pod {pod['metadata'].get('name')} did not settle")

    def _record(self, pod: Obj, c: ContainerRun, type_: str, reason: str, message: str, count: int = 1) -> None:
        prefix = "spec.initContainers" if c.init else "spec.containers"
        self.ctx.recorder.record(pod, type_, reason, message, component="kubelet",
                                 host=(pod.get("spec") or {}).get("nodeName"),
                                 field_path=f"{prefix}{{{c.name}}}", count=count)

    def _needs_pull(self, pod: Obj, node: Obj, c: ContainerRun) -> bool:
        policy = self._spec_of(pod, c).get("imagePullPolicy")
        if policy is None:
            tail = c.image.split("/")[-1]
            policy = "Always" if (":" not in tail or tail.endswith(":latest")) and "@" not in c.image else "IfNotPresent"
        if policy == "Never":
            return False
        return policy == "Always" or c.image not in self.state.images.get(node["metadata"]["name"], set())

    def _begin_create(self, pod: Obj, node: Obj, c: ContainerRun, at: float) -> None:
        c.pulling = self._needs_pull(pod, node, c)
        if c.pulling:
            self._record(pod, c, "Normal", "Pulling", f'Pulling image "{c.image}"')
            cause = self.runtime.pull_error(c.image, _node_arch(node))
            if cause is not None:
                c.step, c.due, c.pull_cause = "pull-failed", at + PULL_FAILURE_SECONDS, cause
                return
        c.step, c.due = "start", at + max(0.0, float(self.runtime.startup_seconds(pod, self._spec_of(pod, c))))

    def _step(self, pod: Obj, node: Obj, run: PodRun, c: ContainerRun, at: float) -> None:
        step = c.step
        c.due = None
        if step == "pull-failed":
            msg = f'failed to pull and unpack image "{c.image}": {c.pull_cause}'
            self._record(pod, c, "Warning", "Failed", f'Failed to pull image "{c.image}": {msg}')
            self._record(pod, c, "Warning", "Failed", "Error: ErrImagePull")
            c.reason, c.message = "ErrImagePull", msg
            c.step, c.due = "pull-backoff", at + PULL_FAILURE_SECONDS
        elif step == "pull-backoff":
            self._record(pod, c, "Normal", "BackOff", f'Back-off pulling image "{c.image}"')
            self._record(pod, c, "Warning", "Failed", "Error: ImagePullBackOff")
            c.reason, c.message = "ImagePullBackOff", f'Back-off pulling image "{c.image}": ErrImagePull: {c.message}'
            c.step, c.due = "pull-retry", at - PULL_FAILURE_SECONDS + c.pull_backoff
            c.pull_backoff = min(c.pull_backoff * 2, MAX_BACKOFF)
        elif step == "pull-retry":
            self._begin_create(pod, node, c, at)
        elif step == "start":
            self._start(pod, node, run, c, at, pulled=True)
        elif step in ("restart", "config-retry"):
            self._start(pod, node, run, c, at, pulled=False)

    def _start(self, pod: Obj, node: Obj, run: PodRun, c: ContainerRun, at: float, *, pulled: bool) -> None:
        spec = self._spec_of(pod, c)
        node_name = node["metadata"]["name"]
        images = self.state.images.setdefault(node_name, set())
        if pulled and c.pulling:
            took = max(0.0, float(self.runtime.startup_seconds(pod, spec)))
            size = int(hashlib.sha256(c.image.encode()).hexdigest()[:6], 16) * 64 + 5_000_000
            self._record(pod, c, "Normal", "Pulled",
                         f'Successfully pulled image "{c.image}" in {_go_seconds(took)} '
                         f"({_go_seconds(took)} including waiting). Image size: {size} bytes.")
        else:
            self._record(pod, c, "Normal", "Pulled", f'Container image "{c.image}" already present on machine')
        images.add(c.image)
        config_error = self._env_error(pod, spec)
        if config_error is not None:  # generateContainerConfig fails: nothing is created, no restart counted
            self._record(pod, c, "Warning", "Failed", f"Error: {config_error}")
            c.state, c.reason, c.message = "waiting", "CreateContainerConfigError", config_error
            c.step, c.due = "config-retry", at + SYNC_ERROR_RETRY_SECONDS
            return
        if c.ever_ran or c.restarts or c.last is not None:
            c.last_output, c.output, c.followed = c.output, (), None
            c.restarts += 1
            c.last_restart_at = at
            c.backoff = INITIAL_BACKOFF if c.backoff == 0 else min(c.backoff * 2, MAX_BACKOFF)
        error = self.runtime.start_error(pod, spec)
        if error:
            self._record(pod, c, "Warning", "Failed", f"Error: {error}")
            c.state, c.started_at, c.ever_ran = "running", at, True
            self._terminated(pod, run, c, at, 128, "StartError", error, waiting_reason="RunContainerError")
            return
        self._record(pod, c, "Normal", "Created", f"Created container: {c.name}")
        self._record(pod, c, "Normal", "Started", f"Started container {c.name}")
        c.state, c.reason, c.message = "running", "", ""
        c.started_at, c.ever_ran = at, True
        c.ready, c.ready_fail_since, c.live_fail_since, c.last_probe = False, None, None, {}
        c.started = "startupProbe" not in spec
        self._project(pod, run)  # the sync that starts a container mounts the volumes again
        namespace = str(pod["metadata"].get("namespace") or "default")
        c.sources = {(kind, name): self._stored(kind, namespace, name) for kind, name in start_sources(spec, pod)}
        if not self.runtime.binary_runs(c.image, _node_arch(node)):
            # runc's execve fails with ENOEXEC after the container started: its init exits 1.
            c.exit_at, c.planned_exit = at, 1
            return
        ran = self._follow(pod, spec, c, at, 0.0)
        if ran is None:
            self._unknown_writer(pod, run, spec)
        planned = self.runtime.exit_after(pod, spec, self.reader(pod, spec), emulated=ran is not None)
        c.exit_at, c.planned_exit = (at + planned[0], planned[1]) if planned else (None, 0)
        if planned is not None:
            self._follow_to_exit(pod, spec, c, at, planned[0])

    def _follow(self, pod: Obj, spec: Obj, c: ContainerRun, now: float, horizon: float) -> FollowedRun | None:
        """Follow the run's process through the emulated programs ``horizon`` seconds from its start:
        what it printed since it was last followed is logged from when it printed it (at the latest
        wait it passed, ``now`` at the earliest). None: the twin does not emulate it."""
        if self.main_output is None:
            return None
        ran = self.main_output(pod, spec, horizon, c.followed)
        if ran is None:
            return None
        text = ran.printed_since(c.followed)
        if text:
            c.output += ((max(now, (c.started_at or now) + ran.elapsed), text),)
        c.followed = ran
        return ran

    def _follow_to_exit(self, pod: Obj, spec: Obj, c: ContainerRun, now: float, remaining: float) -> None:
        """The process model says the process ends ``remaining`` seconds from ``now`` (a ``sleep``
        first, a dependency that now answers): an emulated process is followed to its end and exits
        with the emulated programs' status, when they say, if later (the model does not follow a
        ``for`` loop's sleeps); one still waiting :data:`FOLLOW_PAST_PLAN` seconds after the model's
        end (a dial the emulation finds refused) ends when the model says."""
        started = c.started_at if c.started_at is not None else now
        if c.followed is None or c.followed.code is None:
            self._follow(pod, spec, c, now, now - started + remaining + FOLLOW_PAST_PLAN)
        if c.followed is not None and c.followed.code is not None:
            c.planned_exit = c.followed.code
            c.exit_at = max(now + remaining, started + c.followed.elapsed)

    @staticmethod
    def _unknown_writer(pod: Obj, run: PodRun, spec: Obj) -> None:
        """A process the twin does not emulate started with emptyDir volumes it may write: what they
        hold is known from now on only as far as emulated processes wrote it."""
        empty = {str(v.get("name")) for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v}
        for mount in spec.get("volumeMounts") or []:
            name = str(mount.get("name"))
            if name in empty and not mount.get("readOnly"):
                content = run.volumes.get(name, VolumeContent())
                run.volumes[name] = VolumeContent(content.files, content.directories, complete=False)

    def mounted(self, pod: Obj) -> dict[tuple[str, str], Obj | None] | None:
        """The ConfigMaps and Secrets as the pod's volumes show them now (``ContainerExec``'s
        ``PodVolumes``); None when the pod does not run on a node."""
        run = self._run_of(pod)
        return run.projected if run is not None else None

    def volume(self, pod: Obj, name: str) -> VolumeContent | None:
        """What the pod's emptyDir volume ``name`` holds (empty until a container writes it); None
        when the pod does not run on a node (``ContainerExec``'s ``PodVolumes``)."""
        run = self._run_of(pod)
        return None if run is None else run.volumes.get(name, VolumeContent())

    def write_volume(self, pod: Obj, name: str, content: VolumeContent) -> None:
        """Keep what a process wrote into the pod's emptyDir volume ``name`` (it lives as long as the pod)."""
        run = self._run_of(pod)
        if run is not None:
            run.volumes[name] = content

    def _run_of(self, pod: Obj) -> PodRun | None:
        meta = pod["metadata"]
        run = self.state.pods.get((str(meta.get("namespace") or "default"), str(meta.get("name", ""))))
        return run if run is not None and run.uid == meta.get("uid") else None

    def started_sources(self, pod: Obj, container: str) -> dict[tuple[str, str], Obj | None] | None:
        """The ConfigMaps and Secrets the container's current run read when it started (its env and
        subPath mounts keep them until it restarts); None when the kubelet has not started it."""
        run = self._run_of(pod)
        c = next((c for c in run.containers if c.name == container), None) if run is not None else None
        return c.sources if c is not None else None

    def output_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        """The lines a container's runs that started in ``[start, end]`` printed (``main_output``)."""
        run = self.state.pods.get((namespace, pod))
        c = next((c for c in run.containers if c.name == container), None) if run is not None else None
        if c is None:
            return []
        out: list[tuple[float, str]] = []
        for at, text in (*c.last_output, *c.output):
            if start <= at <= end:
                out += [(at, line) for line in text.splitlines()]
        return out

    def _env_error(self, pod: Obj, spec: Obj) -> str | None:
        """Why the container's environment cannot be built (a missing ConfigMap / Secret or key), or None.

        The kubelet's ``makeEnvironmentVariables`` messages: the API's NotFound text for a missing
        object, ``couldn't find key K in ConfigMap ns/name`` for a missing key; ``optional``
        references are skipped.
        """
        namespace = pod["metadata"].get("namespace") or "default"
        for source in spec.get("envFrom") or []:
            for field_name, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                ref = source.get(field_name)
                if ref is not None and not ref.get("optional") and self._stored(kind, namespace, ref.get("name", "")) is None:
                    return _not_found(kind, ref.get("name", ""))
        for env in spec.get("env") or []:
            value_from = env.get("valueFrom") or {}
            for field_name, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                ref = value_from.get(field_name)
                if ref is None or ref.get("optional"):
                    continue
                obj = self._stored(kind, namespace, ref.get("name", ""))
                if obj is None:
                    return _not_found(kind, ref.get("name", ""))
                if str(ref.get("key", "")) not in _data_keys(obj):
                    return f"couldn't find key {ref.get('key', '')} in {kind} {namespace}/{ref.get('name', '')}"
        return None

    def _should_restart(self, pod: Obj, c: ContainerRun, code: int) -> bool:
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        if c.sidecar:
            return True
        if c.init:
            return code != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def _terminated(
        self, pod: Obj, run: PodRun, c: ContainerRun, at: float, code: int, reason: str, message: str,
        *, waiting_reason: str = "CrashLoopBackOff",
    ) -> None:
        """The process ended: record it, then restart (at once or after back-off) or stay down."""
        c.state, c.finished_at, c.exit_code, c.term_reason, c.term_message = "terminated", at, code, reason, message
        c.exit_at, c.ready, c.started = None, False, False
        record: Obj = {"exitCode": code, "reason": reason, "startedAt": rfc3339(c.started_at or at),
                       "finishedAt": rfc3339(at), "containerID": c.container_id(run.uid)}
        if message:
            record["message"] = message
        if not self._should_restart(pod, c, code):
            return
        c.last = record
        if c.last_restart_at is not None and at - c.last_restart_at > BACKOFF_RESET:
            c.backoff = 0.0
        c.step = "restart"
        if c.backoff == 0:
            c.state, c.reason, c.message, c.due = "waiting", waiting_reason, message, at
            return
        ident = f"{pod['metadata']['name']}_{pod['metadata'].get('namespace')}({run.uid})"
        c.state, c.due = "waiting", at + c.backoff
        c.reason = "CrashLoopBackOff"
        c.message = f"back-off {_go_seconds(c.backoff)} restarting failed container={c.name} pod={ident}"
        self._record(pod, c, "Warning", "BackOff", f"Back-off restarting failed container {c.name} in pod {ident}")

    def kill(self, key: Key, container: str, *, reason: str, exit_code: int, message: str) -> None:
        """Something outside the pod (the OOM killer, a chaos tool) ended a running container."""
        run = self.state.pods.get(key)
        pod = self.ctx.cache.get("Pod", *key)
        if run is None or pod is None:
            raise KeyError(f"pod {key[0]}/{key[1]} is not running on any node")
        c = next((c for c in run.containers if c.name == container), None)
        if c is None:
            raise KeyError(f"pod {key[0]}/{key[1]} has no container {container!r}")
        if c.state != "running":
            return
        self._terminated(pod, run, c, self.ctx.now(), exit_code, reason, message)
        self.enqueue(key)

    # -- probes ---------------------------------------------------------------------------------

    def _probe(self, pod: Obj, run: PodRun, now: float) -> None:
        for c in run.containers:
            if c.state != "running" or c.started_at is None:
                continue
            spec = self._spec_of(pod, c)
            if not c.started:
                self._startup_probe(pod, run, c, spec, now)
                if not c.started or c.state != "running":
                    continue
            if c.init and not c.sidecar:
                self._poll_init(pod, c, spec, now)
                continue
            self._readiness(pod, run, c, spec, now)
            self._liveness(pod, run, c, spec, now)

    def _poll_init(self, pod: Obj, c: ContainerRun, spec: Obj, now: float) -> None:
        """An init container that waits for something (``until nc -z kafka 9092``) ends once it is there."""
        if c.exit_at is not None:
            return
        planned = self.runtime.exit_after(pod, spec, self.reader(pod, spec))
        if planned is not None:
            c.exit_at, c.planned_exit = now + planned[0], planned[1]
            self._follow_to_exit(pod, spec, c, now, planned[0])

    @staticmethod
    def _probe_noted(c: ContainerRun, probe: Obj, kind: str, now: float) -> bool:
        """Whether ``_probe_due`` would answer 0: before the first probe, or no probe since the last one."""
        first = (c.started_at or now) + float(probe.get("initialDelaySeconds", 0) or 0)
        last = c.last_probe.get(kind)
        return now < first or (last is not None and now - last < float(probe.get("periodSeconds", 10) or 10))

    def _probe_due(self, c: ContainerRun, probe: Obj, kind: str, now: float) -> int:
        """How many probes of ``kind`` the kubelet has run since the last one evaluated (0: none).

        The kubelet probes once a period from the initial delay on, whatever the steps time takes:
        ``last_probe`` holds the time of the latest of those probes, so a step shorter than the
        period runs none and a longer one runs every probe it spans (each failure counted)."""
        first = (c.started_at or now) + float(probe.get("initialDelaySeconds", 0) or 0)
        if now < first:
            return 0
        period = float(probe.get("periodSeconds", 10) or 10)
        last = c.last_probe.get(kind)
        n = 1 + int((now - first) // period) if last is None else int((now - last) // period)
        if n > 0:
            c.last_probe[kind] = (first - period if last is None else last) + n * period
        return n

    @staticmethod
    def _first_of(c: ContainerRun, probe: Obj, kind: str, n: int) -> float:
        """When the first of the ``n`` probes of ``kind`` just evaluated ran."""
        return c.last_probe[kind] - (n - 1) * float(probe.get("periodSeconds", 10) or 10)

    def _startup_probe(self, pod: Obj, run: PodRun, c: ContainerRun, spec: Obj, now: float) -> None:
        probe = spec.get("startupProbe") or {}
        n = self._probe_due(c, probe, "startup", now)
        if n == 0:
            return
        if self.runtime.probe_succeeds(pod, spec, "startup"):
            c.started = True
            return
        self._record(pod, c, "Warning", "Unhealthy",
                     f"Startup probe failed: {_probe_target(run.ip, spec, probe)}", count=n)
        threshold = int(probe.get("failureThreshold", 3) or 3)
        period = float(probe.get("periodSeconds", 10) or 10)
        first = (c.started_at or now) + float(probe.get("initialDelaySeconds", 0) or 0)
        if now >= first + (threshold - 1) * period:
            self._record(pod, c, "Normal", "Killing", f"Container {c.name} failed startup probe, will be restarted")
            self._terminated(pod, run, c, now, 137, "Error", "")

    def _readiness(self, pod: Obj, run: PodRun, c: ContainerRun, spec: Obj, now: float) -> None:
        probe = spec.get("readinessProbe")
        if probe is None:
            c.ready = True
            return
        n = self._probe_due(c, probe, "readiness", now)
        if n == 0:
            return
        if self.runtime.probe_succeeds(pod, spec, "readiness"):
            c.ready, c.ready_fail_since = True, None
            return
        self._record(pod, c, "Warning", "Unhealthy",
                     f"Readiness probe failed: {_probe_target(run.ip, spec, probe)}", count=n)
        if not c.ready:
            return
        c.ready_fail_since = c.ready_fail_since if c.ready_fail_since is not None else self._first_of(c, probe, "readiness", n)
        threshold = int(probe.get("failureThreshold", 3) or 3)
        period = float(probe.get("periodSeconds", 10) or 10)
        if now >= c.ready_fail_since + (threshold - 1) * period:
            c.ready = False

    def _liveness(self, pod: Obj, run: PodRun, c: ContainerRun, spec: Obj, now: float) -> None:
        probe = spec.get("livenessProbe")
        if probe is None:
            return
        n = self._probe_due(c, probe, "liveness", now)
        if n == 0:
            return
        if self.runtime.probe_succeeds(pod, spec, "liveness"):
            c.live_fail_since = None
            return
        self._record(pod, c, "Warning", "Unhealthy",
                     f"Liveness probe failed: {_probe_target(run.ip, spec, probe)}", count=n)
        c.live_fail_since = c.live_fail_since if c.live_fail_since is not None else self._first_of(c, probe, "liveness", n)
        threshold = int(probe.get("failureThreshold", 3) or 3)
        period = float(probe.get("periodSeconds", 10) or 10)
        if now >= c.live_fail_since + (threshold - 1) * period:
            self._record(pod, c, "Normal", "Killing", f"Container {c.name} failed liveness probe, will be restarted")
            self._terminated(pod, run, c, now, 137, "Error", "")

    # -- termination ----------------------------------------------------------------------------

    def _terminate(self, key: Key, pod: Obj, run: PodRun | None, now: float) -> None:
        meta = pod["metadata"]
        if run is None:
            self._remove(key, pod)
            return
        if run.stop_at is None:
            deadline = parse_time(meta.get("deletionTimestamp")) or now
            grace = float(meta.get("deletionGracePeriodSeconds", 0) or 0)
            begun = deadline - grace
            longest = 0.0
            for c in run.containers:
                if c.state == "running":
                    self._record(pod, c, "Normal", "Killing", f"Stopping container {c.name}")
                    longest = max(longest, float(self.runtime.stop_seconds(pod, self._spec_of(pod, c))))
            run.stop_at = begun + min(grace, longest)
        if now >= run.stop_at:
            self._remove(key, pod)
            return
        self.requeue_at(key, run.stop_at)

    def _remove(self, key: Key, pod: Obj) -> None:
        run = self.state.pods.get(key)
        if run is not None:
            self._forget(key, run)
        try:
            self.ctx.store.delete("Pod", key[0], key[1], grace_period_seconds=0,
                                  preconditions={"uid": pod["metadata"].get("uid", "")})
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    # -- status ---------------------------------------------------------------------------------

    def _next_due(self, pod: Obj, run: PodRun) -> float | None:
        times: list[float] = []
        for c in run.containers:
            if c.due is not None:
                times.append(c.due)
            if c.exit_at is not None:
                times.append(c.exit_at)
            elif c.state == "running" and c.init and not c.sidecar:
                times.append(self.ctx.now() + INIT_POLL_SECONDS)
            if c.state == "running" and c.started_at is not None:
                spec = self._spec_of(pod, c)
                for kind, key in (("startup", "startupProbe"), ("readiness", "readinessProbe"), ("liveness", "livenessProbe")):
                    probe = spec.get(key)
                    if kind != "startup" and not c.started:
                        continue  # readiness and liveness probes wait until the startup probe has passed
                    if probe is not None and kind not in c.last_probe:
                        times.append(c.started_at + float(probe.get("initialDelaySeconds", 0) or 0))
                # Once unready, a failing readiness probe has nothing left to wait for (its threshold
                # time is past: waiting for it would requeue the pod at the same instant forever).
                ready_since = c.ready_fail_since if c.ready else None
                for since, key in ((ready_since, "readinessProbe"), (c.live_fail_since, "livenessProbe")):
                    probe = spec.get(key)
                    if since is not None and probe is not None:
                        times.append(since + (int(probe.get("failureThreshold", 3) or 3) - 1)
                                     * float(probe.get("periodSeconds", 10) or 10))
        return min(times) if times else None

    def _phase(self, pod: Obj, run: PodRun) -> str:
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        inits = [c for c in run.containers if c.init]
        apps = [c for c in run.containers if not c.init]
        for c in inits:
            if c.state == "terminated" and c.exit_code != 0 and policy == "Never":
                return "Failed"
        if not self._init_done(run):
            return "Pending"
        waiting_fresh = sum(1 for c in apps if c.state == "waiting" and not c.ever_ran)
        running = sum(1 for c in apps if c.state == "running")
        restarting = sum(1 for c in apps if c.state == "waiting" and c.ever_ran)
        stopped = [c for c in apps if c.state == "terminated"]
        if waiting_fresh:
            return "Pending"
        if running or restarting:
            return "Running"
        if stopped and len(stopped) == len(apps):
            return "Failed" if any(c.exit_code != 0 for c in stopped) else "Succeeded"
        return "Pending"

    def _container_status(self, run: PodRun, c: ContainerRun) -> Obj:
        out: Obj = {"name": c.name, "image": c.image, "imageID": c.image_id() if c.ever_ran else ""}
        if c.ever_ran:
            out["containerID"] = c.container_id(run.uid)
        out["ready"] = c.ready and c.state == "running"
        out["restartCount"] = c.restarts
        out["started"] = c.state == "running" and c.started
        if c.state == "running":
            out["state"] = {"running": {"startedAt": rfc3339(c.started_at or 0.0)}}
        elif c.state == "terminated":
            term: Obj = {"exitCode": c.exit_code, "reason": c.term_reason,
                         "startedAt": rfc3339(c.started_at or 0.0), "finishedAt": rfc3339(c.finished_at or 0.0),
                         "containerID": c.container_id(run.uid)}
            if c.term_message:
                term["message"] = c.term_message
            out["state"] = {"terminated": term}
        else:
            waiting: Obj = {"reason": c.reason}
            if c.message:
                waiting["message"] = c.message
            out["state"] = {"waiting": waiting}
        out["lastState"] = {"terminated": dict(c.last)} if c.last else {}
        return out

    def _condition(self, run: PodRun, type_: str, status: str, now: float, reason: str = "", message: str = "") -> Obj:
        prev = run.conditions.get(type_)
        since = prev[1] if prev is not None and prev[0] == status else now
        run.conditions[type_] = (status, since)
        out: Obj = {"type": type_, "status": status, "lastProbeTime": None, "lastTransitionTime": rfc3339(since)}
        if reason:
            out["reason"] = reason
        if message:
            out["message"] = message
        return out

    @staticmethod
    def _status_inputs(run: PodRun, host_ip: str) -> tuple[Any, ...]:
        """Everything of the kubelet's memory that ``_write`` renders into the pod's status."""
        return (run.uid, run.ip, run.sandbox, run.start_time, tuple(run.conditions.items()), host_ip, tuple(
            (c.name, c.image, c.init, c.sidecar, c.state, c.reason, c.message, c.started_at, c.finished_at,
             c.exit_code, c.term_reason, c.term_message, c.last, c.restarts, c.ready, c.started, c.ever_ran)
            for c in run.containers))

    def _write(self, key: Key, pod: Obj, node: Obj, run: PodRun, now: float) -> None:
        """Render the pod's status from the kubelet's memory and store it when it changed.

        Most syncs (the probes of every running pod, every tick) change nothing: when the cached
        pod and the inputs are those of a rendering that matched the stored status, it still does.
        """
        host_ip = _node_ip(node)
        seen = self._unchanged.get(key)
        if seen is not None and seen[0] is pod and seen[1] == self._status_inputs(run, host_ip):
            return
        apps = [c for c in run.containers if not c.init]
        inits = [c for c in run.containers if c.init]
        phase = self._phase(pod, run)
        unready = [c.name for c in apps if not (c.ready and c.state == "running")]
        init_pending = [c.name for c in inits if not (c.state == "terminated" and c.exit_code == 0)
                        and not (c.sidecar and c.started)]
        done = phase in ("Succeeded", "Failed")
        sandbox_ready = run.sandbox and not done
        conditions = [self._condition(run, "PodReadyToStartContainers", "True" if sandbox_ready else "False", now)]
        if init_pending and not done:
            conditions.append(self._condition(run, "Initialized", "False", now, "ContainersNotInitialized",
                                              f"containers with incomplete status: [{' '.join(init_pending)}]"))
        else:
            conditions.append(self._condition(run, "Initialized", "True", now))
        if done:
            reason = "PodCompleted"
            conditions.append(self._condition(run, "Ready", "False", now, reason))
            conditions.append(self._condition(run, "ContainersReady", "False", now, reason))
        elif unready:
            msg = f"containers with unready status: [{' '.join(unready)}]"
            conditions.append(self._condition(run, "Ready", "False", now, "ContainersNotReady", msg))
            conditions.append(self._condition(run, "ContainersReady", "False", now, "ContainersNotReady", msg))
        else:
            conditions.append(self._condition(run, "Ready", "True", now))
            conditions.append(self._condition(run, "ContainersReady", "True", now))
        old_status = pod.get("status") or {}
        kept = [c for c in old_status.get("conditions") or [] if c.get("type") not in run.conditions]
        status: Obj = {"phase": phase, "conditions": conditions + kept}
        status["hostIP"] = host_ip
        status["hostIPs"] = [{"ip": host_ip}]
        if run.ip:
            status["podIP"] = run.ip
            status["podIPs"] = [{"ip": run.ip}]
        status["startTime"] = rfc3339(run.start_time)
        if inits:
            status["initContainerStatuses"] = [self._container_status(run, c) for c in inits]
        status["containerStatuses"] = [self._container_status(run, c) for c in apps]
        status["qosClass"] = old_status.get("qosClass") or qos_class(pod)
        for k in ("nominatedNodeName",):
            if k in old_status:
                status[k] = old_status[k]
        if pod.get("status") == status:
            self._unchanged[key] = (pod, self._status_inputs(run, host_ip))
        else:
            self._unchanged.pop(key, None)
            self.write_status(pod, status)
        if done:
            self._release_ip(run)  # the sandbox is gone; the API keeps showing the address it had


def _volume_refs(volume: Obj) -> list[tuple[str, Obj]]:
    """(kind, reference) of each ConfigMap and Secret a configMap / secret / projected volume projects."""
    pairs = (("configMap", "ConfigMap"), ("secret", "Secret"))
    refs = [(kind, volume[field_name] or {}) for field_name, kind in pairs if field_name in volume]
    for source in (volume.get("projected") or {}).get("sources") or []:
        refs += [(kind, source[field_name] or {}) for field_name, kind in pairs if field_name in source]
    return refs


def _ref_name(kind: str, ref: Obj) -> str:
    return str(ref.get("name") if kind == "ConfigMap" else ref.get("secretName", ref.get("name", "")))


def _volume_sources(pod: Obj) -> list[tuple[str, str]]:
    """(kind, name) of every ConfigMap and Secret the pod's volumes project."""
    return [(kind, _ref_name(kind, ref)) for volume in (pod.get("spec") or {}).get("volumes") or []
            for kind, ref in _volume_refs(volume)]


def _projected(volume: Obj, rel: str, namespace: str, lookup: Callable[[str, str, str], Obj | None]) -> str | None:
    """The content a configMap / secret / projected volume shows at ``rel`` (its ``items`` or every key)."""
    for kind, ref in _volume_refs(volume):
        name = _ref_name(kind, ref)
        obj = lookup(kind, namespace, name)
        if obj is None:
            continue
        items = ref.get("items")
        key = next((str(i.get("key")) for i in items if i.get("path") == rel), None) if items else rel
        data = obj.get("data") or {}
        if key is None or key not in data:
            continue
        value = str(data[key])
        return base64.b64decode(value).decode("utf-8", "replace") if kind == "Secret" else value
    return None


def _data_keys(obj: Obj) -> set[str]:
    """The keys a ConfigMap or Secret holds (``data``, ``binaryData``, a Secret's write-only ``stringData``)."""
    return {str(k) for field_name in ("data", "binaryData", "stringData") for k in (obj.get(field_name) or {})}


def _not_found(kind: str, name: str) -> str:
    """The API server's NotFound message for a ConfigMap or Secret, as the kubelet passes it on."""
    return f'{kind.lower()} "{name}" not found'


def _source_error(kind: str, ref: Obj, namespace: str, lookup: Callable[[str, str, str], Obj | None]) -> str | None:
    """The volume plugin's SetUp error for one configMap / secret source, or None when it can be projected.

    Messages as the configmap and secret volume plugins (and the projected plugin, which reuses
    them) write them; an ``optional`` source projects nothing when its object or keys are missing.
    """
    name = _ref_name(kind, ref)
    obj = lookup(kind, namespace, name)
    optional = bool(ref.get("optional"))
    if obj is None:
        return None if optional else _not_found(kind, name)
    keys = _data_keys(obj)
    for item in ref.get("items") or []:
        key = str(item.get("key", ""))
        if key not in keys and not optional:
            what = "config key" if kind == "ConfigMap" else "secret key"
            return f"{kind.lower()} references non-existent {what}: {key}"
    return None


def qos_class(pod: Obj) -> str:
    containers = list((pod.get("spec") or {}).get("containers") or []) + list(
        (pod.get("spec") or {}).get("initContainers") or [])
    requests = [container_requests(c) for c in containers]
    limits = [container_limits(c) for c in containers]
    if not any(requests) and not any(limits):
        return "BestEffort"
    guaranteed = all(
        all(lim.get(r) is not None and req.get(r) == lim.get(r) for r in ("cpu", "memory"))
        for req, lim in zip(requests, limits, strict=True)
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _node_arch(node: Obj) -> str:
    return str(((node.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/arch", "amd64"))


def _node_ip(node: Obj) -> str:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return str(addr.get("address"))
    return "10.0.0.1"


def _go_seconds(seconds: float) -> str:
    """``time.Duration`` text for the kubelet's messages: ``1.5s``, ``10s``, ``5m0s``."""
    if seconds < 60:
        text = f"{seconds:.3f}".rstrip("0").rstrip(".")
        return f"{text}s"
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s}s"


def start_sources(spec: Obj, pod: Obj) -> list[tuple[str, str]]:
    """The (kind, name) of each ConfigMap and Secret a container reads only when it starts: its env
    (``envFrom``, ``configMapKeyRef``, ``secretKeyRef``) and the volumes it mounts with a ``subPath``
    (the kubelet never updates those files)."""
    out: list[tuple[str, str]] = []
    for source in spec.get("envFrom") or []:
        for field_name, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            if isinstance(source.get(field_name), dict):
                out.append((kind, str(source[field_name].get("name", ""))))
    for e in spec.get("env") or []:
        value_from = e.get("valueFrom") or {}
        for field_name, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            if isinstance(value_from.get(field_name), dict):
                out.append((kind, str(value_from[field_name].get("name", ""))))
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    for mount in spec.get("volumeMounts") or []:
        if not mount.get("subPath"):
            continue
        volume = volumes.get(mount.get("name")) or {}
        refs = [volume] + list((volume.get("projected") or {}).get("sources") or [])
        for ref in refs:
            if isinstance(ref.get("configMap"), dict):
                out.append(("ConfigMap", str(ref["configMap"].get("name", ""))))
            if isinstance(ref.get("secret"), dict):
                out.append(("Secret", str(ref["secret"].get("secretName", ref["secret"].get("name", "")))))
    return list(dict.fromkeys(out))
