"""What the kubelet asks the container runtime: the seam between Kubernetes mechanics and the app.

The kubelet model knows *how* a pod moves through its lifecycle (pull, create, start, probe,
crash, back off); whether an image exists, a command is valid or a probe answers is a fact of the
application, so the app model supplies it through this protocol. ``DefaultRuntime`` is a healthy
world (every image known, nothing fails) that the app's runtime can subclass and refine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

ProbeKind = Literal["startup", "readiness", "liveness"]
#: A container's view of the files its volumes project (absolute path → content, None when absent).
FileReader = Callable[[str], "str | None"]


class ContainerRuntime(Protocol):
    def pull_error(self, image: str, arch: str) -> str | None:
        """Why containerd cannot pull ``image`` for a node of ``arch`` (the text after
        ``failed to pull and unpack image "<image>": ``), or None → ErrImagePull, ImagePullBackOff."""
        ...

    def binary_runs(self, image: str, arch: str) -> bool:
        """False when the pulled image's binaries are for another CPU: the process dies with
        ``exec format error`` as soon as it starts."""
        ...

    def start_error(self, pod: dict[str, Any], container: dict[str, Any]) -> str | None:
        """Why the container cannot start (e.g. executable not found), or None."""
        ...

    def startup_seconds(self, pod: dict[str, Any], container: dict[str, Any]) -> float:
        """Seconds from ContainerCreating until the process runs (image pull included)."""
        ...

    def probe_succeeds(self, pod: dict[str, Any], container: dict[str, Any], kind: ProbeKind) -> bool:
        """Whether the container's probe of ``kind`` passes right now."""
        ...

    def exit_after(self, pod: dict[str, Any], container: dict[str, Any], files: FileReader, *,
                   emulated: bool = False) -> tuple[float, int] | None:
        """``(seconds after start, exit code)`` when the process ends by itself; None = runs until
        killed, or (for an init container, asked again every few seconds) not yet. ``files`` reads
        what the container's volumes hold; ``emulated``: every program of its command line ran through
        the twin's emulation, which ended (``Kubelet.main_output``), so none of them is a server."""
        ...

    def stop_seconds(self, pod: dict[str, Any], container: dict[str, Any]) -> float:
        """Seconds the process takes to exit after SIGTERM (the grace period caps it)."""
        ...


def not_found(image: str) -> str:
    """containerd's resolver when the registry has no such tag."""
    return f'failed to resolve reference "{image}": {image}: not found'


#: containerd's platform matcher finding no manifest for the node in the image's index.
NO_PLATFORM = "no match for platform in manifest: not found"


class DefaultRuntime:
    """Every image exists for every architecture and every process behaves.

    Long-running pods (``restartPolicy: Always``) run until killed; batch pods and init containers
    finish successfully a few seconds after they start, which is what Jobs and init containers
    need to make progress. Subclasses refine ``image_known`` / ``image_supports`` (which
    ``pull_error`` words as containerd does) or the rest of the protocol.
    """

    def __init__(
        self,
        *,
        startup: float = 2.0,
        batch_run: float = 5.0,
        init_run: float = 1.0,
        stop: float = 1.0,
    ) -> None:
        self._startup = startup
        self._batch_run = batch_run
        self._init_run = init_run
        self._stop = stop

    def image_known(self, image: str) -> bool:
        return True

    def image_supports(self, image: str, arch: str) -> bool:
        return True

    def pull_error(self, image: str, arch: str) -> str | None:
        if not self.image_known(image):
            return not_found(image)
        return None if self.image_supports(image, arch) else NO_PLATFORM

    def binary_runs(self, image: str, arch: str) -> bool:
        return True

    def start_error(self, pod: dict[str, Any], container: dict[str, Any]) -> str | None:
        return None

    def startup_seconds(self, pod: dict[str, Any], container: dict[str, Any]) -> float:
        return self._startup

    def probe_succeeds(self, pod: dict[str, Any], container: dict[str, Any], kind: ProbeKind) -> bool:
        return True

    def exit_after(self, pod: dict[str, Any], container: dict[str, Any], files: FileReader, *,
                   emulated: bool = False) -> tuple[float, int] | None:
        spec = pod.get("spec") or {}
        names = {c.get("name") for c in spec.get("initContainers") or []}
        if container.get("name") in names and container.get("restartPolicy") != "Always":
            return (self._init_run, 0)
        if spec.get("restartPolicy", "Always") != "Always":
            return (self._batch_run, 0)
        return None

    def stop_seconds(self, pod: dict[str, Any], container: dict[str, Any]) -> float:
        return self._stop
