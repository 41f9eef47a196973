"""The app's ContainerRuntime: which images exist, which commands they contain, how long
processes take to start, and whether probes and init containers succeed.

Answers come from ``app.yaml`` (the image catalogue, start-up times, listening ports) and from the
latest cluster view the model saw, so an init container that waits for Kafka finishes only once
Kafka is reachable, exactly like ``until nc -z kafka 9092`` would.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from itbench_gym.backends.sim.kube.runtime import DefaultRuntime, ProbeKind

from .cluster_view import ClusterView
from .network import reach
from .spec import AppSpec, ImageRule

_NC = re.compile(r"nc\s+-z\s+(?:-v\s+)?(?:-w\s*\d+\s+)?(?P<host>[A-Za-z0-9.-]+)\s+(?P<port>\d+)")


class AppRuntime(DefaultRuntime):
    def __init__(self, spec: AppSpec, view: Callable[[], ClusterView | None]) -> None:
        super().__init__()
        self.spec = spec
        self._view = view
        #: container name -> start-up seconds of the first service running a container so named
        self._startup_by_container: dict[str, float] = {}
        for svc in spec.services.values():
            self._startup_by_container.setdefault(svc.container, svc.startup_seconds)

    def _rule(self, image: str) -> ImageRule | None:
        return next((r for r in self.spec.images if fnmatch.fnmatchcase(image, r.pattern)), None)

    def image_known(self, image: str) -> bool:
        return self._rule(image) is not None

    def image_supports(self, image: str, arch: str) -> bool:
        rule = self._rule(image)
        return rule is not None and arch in rule.architectures

    def start_error(self, pod: dict[str, Any], container: dict[str, Any]) -> str | None:
        rule = self._rule(container.get("image", ""))
        command = container.get("command") or []
        if rule is None or not command or rule.executables is None:
            return None
        exe = str(command[0])
        if exe in rule.executables or exe.rsplit("/", 1)[-1] in rule.executables:
            return None
        return (
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
            f"failed: unable to start container process: exec: \"{exe}\": executable file not found in $PATH: unknown"
        )

    def startup_seconds(self, pod: dict[str, Any], container: dict[str, Any]) -> float:
        name = container.get("name")
        return self._startup_by_container.get(name, 1.0) if isinstance(name, str) else 1.0

    def _service_of(self, pod: dict[str, Any], container: dict[str, Any]) -> str | None:
        view = self._view()
        if view is not None:
            mine = view.named(pod["metadata"]["name"])
            if mine:
                return mine[0].service
        name = container.get("name")
        return next((s.name for s in self.spec.services.values() if s.container == name), None)

    def probe_succeeds(self, pod: dict[str, Any], container: dict[str, Any], kind: ProbeKind) -> bool:
        probe = container.get(f"{kind}Probe") or {}
        svc_name = self._service_of(pod, container)
        port: Any = None
        if "httpGet" in probe:
            port = probe["httpGet"].get("port")
        elif "tcpSocket" in probe:
            port = probe["tcpSocket"].get("port")
        elif "grpc" in probe:
            port = probe["grpc"].get("port")
        elif "exec" in probe:
            rule = self._rule(container.get("image", ""))
            cmd = (probe["exec"].get("command") or [""])[0]
            return rule is None or rule.executables is None or cmd in rule.executables
        else:
            return True
        if isinstance(port, str) and not port.isdigit():
            named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
            port = named.get(port)
        if port is None:
            return False
        if svc_name is None:
            # A container the behaviour model does not describe (the cluster's own components): its
            # process serves the health endpoint its manifest probes, as the real component does.
            return True
        svc = self.spec.services[svc_name]
        listening = svc.port
        env = {e["name"]: str(e.get("value", "")) for e in container.get("env") or [] if "value" in e}
        if svc.port_env and svc.port_env in env and env[svc.port_env].isdigit():
            listening = int(env[svc.port_env])
        return listening is not None and int(port) == listening

    def exit_after(self, pod: dict[str, Any], container: dict[str, Any]) -> tuple[float, int] | None:
        names = {c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []}
        if container.get("name") in names:
            script = " ".join(str(x) for x in (container.get("command") or []) + (container.get("args") or []))
            m = _NC.search(script)
            if m and "until" in script:
                view = self._view()
                if view is None:
                    return (self._init_run, 0)
                target = reach(self.spec, view, None, m.group("host"), int(m.group("port")), m.group("host"), handshake=False)
                return (self._init_run, 0) if target.ok_share > 0 else None
        return super().exit_after(pod, container)
