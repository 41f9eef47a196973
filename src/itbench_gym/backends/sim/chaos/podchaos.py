"""What PodChaos does to a selected pod (chaos-controller-manager's podchaos implementations).

- ``pod-kill`` deletes the pod with ``gracePeriod`` (default 0); its controller replaces it.
- ``container-kill`` kills the named containers (exit 137); restartPolicy decides what follows.
- ``pod-failure`` swaps every container's image for the pause image, keeping the original in an
  annotation, so the containers restart running nothing; recovery puts the images back.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..kube.errors import ApiError
from ..kube.store import clone
from .kinds import PAUSE_IMAGE, record_id

Obj = dict[str, Any]
ONE_SHOT_ACTIONS = ("pod-kill", "container-kill")
_IMAGE_KEY = "chaos-mesh.org/original-image."


class ActionError(RuntimeError):
    """An action could not be applied to one target; the message goes into an Event."""


class Killer(Protocol):
    def __call__(self, namespace: str, pod: str, container: str, *, reason: str = ..., exit_code: int = ...,
                 message: str = ...) -> None: ...


class StoreLike(Protocol):
    def get(self, kind: str, namespace: str | None, name: str, api_version: str | None = None) -> Obj: ...
    def update(self, obj: Obj, *, subresource: str | None = None, dry_run: bool = False) -> Obj: ...
    def delete(self, kind: str, namespace: str | None, name: str, *, grace_period_seconds: int | None = None) -> Obj: ...


def record_ids(spec: Obj, pods: list[Obj]) -> list[str]:
    """``namespace/pod`` per pod, or ``namespace/pod/container`` for container-kill."""
    ids = []
    for p in pods:
        base = record_id(p)
        if spec.get("action") == "container-kill":
            names = {c.get("name") for c in (p.get("spec") or {}).get("containers") or []}
            ids += [f"{base}/{c}" for c in spec.get("containerNames") or [] if c in names]
        else:
            ids.append(base)
    return ids


class PodChaosActions:
    def __init__(self, store: StoreLike, kill: Killer) -> None:
        self.store = store
        self.kill = kill

    def _pod(self, record_id: str) -> Obj:
        ns, name = record_id.split("/")[:2]
        try:
            return self.store.get("Pod", ns, name)
        except ApiError as e:
            raise ActionError(f"pod {ns}/{name}: {e.message}") from None

    def apply(self, spec: Obj, record_id: str) -> None:
        action = spec.get("action")
        if action == "pod-kill":
            pod = self._pod(record_id)
            grace = int(spec.get("gracePeriod", 0) or 0)
            self.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"], grace_period_seconds=grace)
        elif action == "container-kill":
            ns, name, container = record_id.split("/")
            self._kill(ns, name, container)
        elif action == "pod-failure":
            self._swap(self._pod(record_id), fail=True)
        else:
            raise ActionError(f'spec.action: unsupported value "{action}": one of pod-kill, pod-failure, container-kill')

    def recover(self, spec: Obj, record_id: str) -> None:
        if spec.get("action") != "pod-failure":
            return
        try:
            pod = self._pod(record_id)
        except ActionError:
            return  # the pod is gone; its replacement runs the original template
        self._swap(pod, fail=False)

    def _kill(self, ns: str, pod: str, container: str) -> None:
        try:
            self.kill(ns, pod, container, reason="Error", exit_code=137)
        except KeyError as e:
            raise ActionError(str(e).strip("'\"")) from None

    def _swap(self, pod: Obj, *, fail: bool) -> None:
        """Pause images in (fail) or originals back (recover); the changed containers restart."""
        new = clone(pod)
        annotations = new["metadata"].setdefault("annotations", {})
        changed: list[str] = []
        for field in ("initContainers", "containers"):
            for c in new["spec"].get(field) or []:
                key = _IMAGE_KEY + c["name"]
                if fail and key not in annotations:
                    annotations[key] = c.get("image", "")
                    c["image"] = PAUSE_IMAGE
                    changed.append(c["name"])
                elif not fail and key in annotations:
                    c["image"] = annotations.pop(key)
                    changed.append(c["name"])
        if not changed:
            return
        try:
            self.store.update(new)
        except ApiError as e:
            raise ActionError(f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']}: {e.message}") from None
        running = {s["name"] for s in (pod.get("status") or {}).get("containerStatuses") or [] if "running" in (s.get("state") or {})}
        for name in changed:
            if name in running:
                self._kill(pod["metadata"]["namespace"], pod["metadata"]["name"], name)

