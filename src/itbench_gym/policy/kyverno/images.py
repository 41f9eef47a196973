"""The `images` context variable: container image references split into registry, path, tag, digest.

Kyverno exposes `images.<containers|initContainers|ephemeralContainers>.<container name>` for pods and
pod templates, so policies can test e.g. `images.containers.*.registry`.
"""

from __future__ import annotations

from typing import Any

_CONTAINER_KINDS = ("containers", "initContainers", "ephemeralContainers")
_POD_SPEC_PATHS = (("spec",), ("spec", "template", "spec"), ("spec", "jobTemplate", "spec", "template", "spec"))


def parse_image(image: str) -> dict[str, str]:
    """Split an image reference the way container runtimes do (default registry docker.io, tag latest)."""
    rest, _, digest = image.partition("@")
    first, sep, remainder = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        registry, path_tag = first, remainder
    else:
        registry, path_tag = "docker.io", rest
    slash = path_tag.rfind("/")
    colon = path_tag.rfind(":")
    if colon > slash:
        path, tag = path_tag[:colon], path_tag[colon + 1 :]
    else:
        path, tag = path_tag, ("" if digest else "latest")
    info = {"registry": registry, "path": path, "name": path.rsplit("/", 1)[-1], "tag": tag, "digest": digest}
    reference = f"{registry}/{path}" + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    info["reference"] = reference
    info["referenceWithTag"] = f"{registry}/{path}:{tag}" if tag else reference
    return info


def pod_spec(resource: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a Pod or of a controller's pod template (None when there is none)."""
    kind = resource.get("kind")
    paths = _POD_SPEC_PATHS[:1] if kind == "Pod" else _POD_SPEC_PATHS[2:] if kind == "CronJob" else _POD_SPEC_PATHS[1:2]
    for path in paths:
        node: Any = resource
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            return node
    return None


def images_variable(resource: dict[str, Any]) -> dict[str, Any]:
    spec = pod_spec(resource)
    if spec is None:
        return {}
    out: dict[str, Any] = {}
    for kind in _CONTAINER_KINDS:
        containers = {
            str(c.get("name")): parse_image(str(c["image"])) for c in spec.get(kind) or [] if isinstance(c, dict) and c.get("image")
        }
        if containers:
            out[kind] = containers
    return out
