"""The app's ContainerRuntime: which images exist, which commands they contain, how long
processes take to start, and whether probes and init containers succeed.

Answers come from ``app.yaml`` (the image catalogue, start-up times, listening ports), the
cluster-wide registry (``kube/registry.yaml``), the process model (``processes.py``: what a command
line does) and the latest view the model saw of the pod's namespace, so an init container that
waits for Kafka finishes only once Kafka is reachable from there, exactly like ``until nc -z kafka
9092`` would. One runtime serves every namespace the app runs in (``fleet.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import cached_property, partial
from typing import Any

from itbench_gym.backends.sim.kube.registry import RegistryRuntime, shared
from itbench_gym.backends.sim.kube.runtime import FileReader, ProbeKind

from .cluster_view import ClusterView, container_env, parse_quantity, pod_view
from .network import reach, reachable_once_started
from .process import container_ports
from .processes import Process
from .spec import AppSpec

#: The latest view of a namespace the app runs in, or why there is none: it has no instance there
#: (``False``) or its instance has not ticked yet (``True``).
ViewOf = Callable[[str], ClusterView | bool]


def _pod_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A Pod's spec, or the pod template's of a workload (a CronJob's through its job template)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return spec
    if obj.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return (spec.get("template") or {}).get("spec") or {}


def _probe_port(container: Mapping[str, Any], probe: Mapping[str, Any]) -> int | None:
    """The port an HTTP, TCP or gRPC probe targets (a named one through the container's ports); None
    for an exec probe, a name the container does not declare, or no probe."""
    port = next((probe[k].get("port") for k in ("httpGet", "tcpSocket", "grpc") if isinstance(probe.get(k), Mapping)), None)
    if isinstance(port, str) and not port.isdigit():
        port = next((p.get("containerPort") for p in container.get("ports") or [] if p.get("name") == port), None)
    return int(port) if isinstance(port, int) or (isinstance(port, str) and port.isdigit()) else None


def probed_at_install(manifests: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[int]]:
    """Image -> the ports the install's manifests probe on containers of that image: what a process no
    app model describes serves (its health endpoint), besides the ports its container declares."""
    out: dict[str, set[int]] = {}
    for obj in manifests:
        spec = _pod_spec(obj)
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            ports = out.setdefault(str(c.get("image", "")), set())
            for key in ("readinessProbe", "livenessProbe", "startupProbe"):
                port = _probe_port(c, c.get(key) or {})
                if port is not None:
                    ports.add(port)
    return {image: frozenset(ports) for image, ports in out.items()}


def memory_at_install(manifests: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], float]:
    """(namespace, container, image) -> the memory the install gives a container (its request, else its
    limit): what the process of a component no app model or idle estimate describes holds, whatever a
    later edit sets. A key the install gives two different figures is left out (unknown)."""
    seen: dict[tuple[str, str, str], set[float]] = {}
    for obj in manifests:
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        spec = _pod_spec(obj)
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            res = c.get("resources") or {}
            memory = (res.get("requests") or {}).get("memory") or (res.get("limits") or {}).get("memory")
            if memory is not None:
                seen.setdefault((namespace, str(c.get("name", "")), str(c.get("image", ""))), set()).add(parse_quantity(memory))
    return {key: next(iter(values)) for key, values in seen.items() if len(values) == 1}


class AppRuntime(RegistryRuntime):
    def __init__(self, spec: AppSpec, view_of: ViewOf, manifests: Iterable[Mapping[str, Any]] = ()) -> None:
        """``manifests``: the objects the install creates: which health ports and how much memory the
        cluster's own components have (what their processes serve and hold)."""
        super().__init__(spec.images)
        self.spec = spec
        self._view_of = view_of
        #: The namespace as it is at this moment, where a process connects between ticks (``Twin``).
        self.view_now: ViewOf | None = None
        self._manifests = tuple(manifests)
        #: container name -> start-up seconds of the first service running a container so named
        self._startup_by_container: dict[str, float] = {}
        for svc in spec.services.values():
            self._startup_by_container.setdefault(svc.container, svc.startup_seconds)

    # Each index is read by one runtime only (the cluster's probes, the model's machines): built on first use.
    @cached_property
    def _probed_at_install(self) -> dict[str, frozenset[int]]:
        return probed_at_install(self._manifests)

    @cached_property
    def _memory_at_install(self) -> dict[tuple[str, str, str], float]:
        return memory_at_install(self._manifests)

    def installed_memory(self, namespace: str, container: str, image: str) -> float | None:
        """Bytes the install gives that container of that image (see :func:`memory_at_install`)."""
        return self._memory_at_install.get((namespace, container, image))

    def _process_argv(self, container: dict[str, Any]) -> list[str] | None:
        """What the container's process runs when the pod says it: ``command`` and ``args``, or ``args``
        alone on an image without an Entrypoint; None when the image's own entrypoint runs."""
        command, args = container.get("command") or [], container.get("args") or []
        if command:
            return [*command, *args]
        rule = self._rule(container.get("image", ""))
        return list(args) if args and rule is not None and rule.entrypoint == () else None

    def main_argv(self, pod: dict[str, Any], container: dict[str, Any]) -> list[str] | None:
        """The command line of a container whose process no model drives (a debug or probe pod's
        ``nslookup``, ``wget``) or an init container (flagd's copy of its flag file): what its run
        prints is then the emulated programs' (``Twin``), where an app's service prints what its
        model says. None for the app's own containers and where the image's entrypoint runs."""
        spec = pod.get("spec") or {}
        init = container.get("restartPolicy") != "Always" and any(
            c.get("name") == container.get("name") for c in spec.get("initContainers") or [])
        if not init and self._service_of(pod, container) is not None:
            return None
        return self._process_argv(container)

    def start_error(self, pod: dict[str, Any], container: dict[str, Any]) -> str | None:
        """containerd's error when the command's executable is not in the image (runc 1.2+ wording)."""
        rule = self._rule(container.get("image", ""))
        command = self._process_argv(container) or []
        if rule is None or not command:
            return None
        exe = str(command[0])
        if rule.has(exe):
            return None
        return (
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
            f"failed: unable to start container process: error during container init: exec: \"{exe}\": executable file not "
            "found in $PATH: unknown"
        )

    def startup_seconds(self, pod: dict[str, Any], container: dict[str, Any]) -> float:
        name = container.get("name")
        return self._startup_by_container.get(name, 1.0) if isinstance(name, str) else 1.0

    def _service_of(self, pod: dict[str, Any], container: dict[str, Any]) -> str | None:
        view = self._view_of(str(pod["metadata"].get("namespace", "")))
        if view is False:
            return None  # the cluster's own components (a gateway elsewhere may name its container as the app's does)
        if not isinstance(view, bool):
            mine = view.named(pod["metadata"]["name"])
            if mine:
                return mine[0].service
        name = container.get("name")
        return next((s.name for s in self.spec.services.values() if s.container == name), None)

    def probe_succeeds(self, pod: dict[str, Any], container: dict[str, Any], kind: ProbeKind) -> bool:
        probe = container.get(f"{kind}Probe") or {}
        svc_name = self._service_of(pod, container)
        if "exec" in probe:
            rule = self._rule(container.get("image", ""))
            cmd = (probe["exec"].get("command") or [""])[0]
            return rule is None or rule.has(str(cmd))
        if not any(k in probe for k in ("httpGet", "tcpSocket", "grpc")):
            return True
        port = _probe_port(container, probe)
        if port is None:
            return False
        if svc_name is None:
            # A container the behaviour model does not describe (the cluster's own components): its
            # process serves the ports its container declares and the health endpoints the install
            # probes on its image; a probe elsewhere (a fault's) finds nothing listening. An image the
            # install never ran is taken to serve whatever its manifest probes.
            served = self._probed_at_install.get(str(container.get("image", "")))
            declared = {p.get("containerPort") for p in container.get("ports") or []}
            return served is None or port in served or port in declared
        view = self._view_of(str(pod["metadata"].get("namespace", "")))
        env = container_env(container, pod, view.key, view.data) if isinstance(view, ClusterView) else container_env(container, pod)
        ports = container_ports(self.spec.services[svc_name], container, env)
        return ports is None or int(port) in ports

    def exit_after(self, pod: dict[str, Any], container: dict[str, Any], files: FileReader, *,
                   emulated: bool = False) -> tuple[float, int] | None:
        """A container with a command line runs it (``processes``); one without runs its image's
        entrypoint: an app server until killed, an init container's or a batch pod's job to success.
        A long-running container's command line ends in its server, so only a failing step ends it —
        unless every program of it was ``emulated`` (a probe's ``nslookup`` ends; the pod restarts it);
        a server that cannot reach its start dependency exits (:meth:`_dependency_exit`)."""
        unmet = self._dependency_exit(pod, container)
        if unmet is not None:
            return unmet
        argv = self._process_argv(container)
        if argv is None:
            return super().exit_after(pod, container, files)
        env = {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}
        home = str(env.get("HOME") or shared().home(container.get("image", ""), self.spec.images))
        spec = pod.get("spec") or {}
        long_running = container.get("restartPolicy") == "Always" or (
            container.get("name") not in {c.get("name") for c in spec.get("initContainers") or []}
            and spec.get("restartPolicy", "Always") == "Always")
        done = Process(argv, home, files, partial(self._reachable, str(pod["metadata"].get("namespace", "")))).outcome()
        if done is None:
            return None
        if long_running and not emulated:
            # a server's command line ends in the server itself: only a failing step ends it
            return done if done[1] != 0 else None
        return max(done[0], self._init_run), done[1]

    def _dependency_exit(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[float, int] | None:
        """When the service's server cannot reach its app.yaml ``start_dependency`` from this pod (as
        the last tick's view of its namespace routes it): the exit its process makes, else None."""
        name = self._service_of(pod, container)
        svc = self.spec.services.get(name) if name is not None else None
        if svc is None or svc.start_dependency is None or container.get("name") != svc.container:
            return None
        view = self._view_of(str(pod["metadata"].get("namespace", "")))
        src = pod_view(self.spec, svc.name, pod)
        if isinstance(view, bool) or src is None or reachable_once_started(self.spec, view, src, svc.start_dependency.address):
            return None
        return svc.start_dependency.within_seconds, svc.start_dependency.exit_code

    def _reachable(self, namespace: str, host: str, port: int) -> bool:
        """Whether a process in ``namespace`` connects to ``host:port`` now (unknown before the model's first look)."""
        view = (self.view_now or self._view_of)(namespace)
        # a connection check (``nc -z``) only connects: a server's authentication never stops it
        return isinstance(view, bool) or reach(self.spec, view, None, host, port, host, handshake=False).ok_share > 0
