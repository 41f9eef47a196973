"""Kyverno's own CEL libraries answered from given data, as ``kyverno test`` answers them from a suite's
context file (``kind: Context``: ``spec.resources`` and ``spec.images``) instead of a cluster and registries.

``resource.Get(apiVersion, resource, namespace, name)`` is the object (an error when there is none),
``resource.List(apiVersion, resource, namespace)`` a list object whose ``items`` are those of the
namespace (every namespace for ``""``); ``image.GetMetadata(reference)`` is the image's entry
(``manifest``, ``config``, ...).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from itbench_gym.policy.cel.engine import HostObject

from .match import resource_namespace
from .vpol import plural


class Resources(HostObject):
    """Kyverno's ``resource`` library over a fixed set of objects."""

    def __init__(self, objects: Iterable[dict[str, Any]]) -> None:
        self._objects = [o for o in objects if isinstance(o, dict)]

    def _of(self, api_version: Any, resource: Any, namespace: Any) -> list[dict[str, Any]]:
        return [o for o in self._objects
                if o.get("apiVersion") == api_version and plural(str(o.get("kind", ""))) == resource
                and (not namespace or resource_namespace(o) == namespace)]

    def call(self, method: str, args: list[Any]) -> Any:
        if method == "Get" and len(args) == 4:
            api_version, resource, namespace, name = args
            found = [o for o in self._of(api_version, resource, namespace) if (o.get("metadata") or {}).get("name") == name]
            if not found:
                raise KeyError(f'{resource} "{name}" not found in namespace {namespace!r} ({api_version})')
            return copy.deepcopy(found[0])
        if method == "List" and len(args) == 3:
            api_version, resource, namespace = args
            return {"apiVersion": api_version, "kind": "List", "items": copy.deepcopy(self._of(api_version, resource, namespace))}
        raise TypeError(f"no such overload: resource.{method} with {len(args)} arguments")


class Images(HostObject):
    """Kyverno's ``image`` library over images described in a suite's context."""

    def __init__(self, entries: Iterable[dict[str, Any]]) -> None:
        self._by_ref = {str(e["image"]): e for e in entries if isinstance(e, dict) and e.get("image")}

    def call(self, method: str, args: list[Any]) -> Any:
        if method == "GetMetadata" and len(args) == 1:
            entry = self._by_ref.get(str(args[0]))
            if entry is None:
                raise KeyError(f"image {args[0]!r}: no metadata (not described in the context)")
            return copy.deepcopy(entry)
        raise TypeError(f"no such overload: image.{method} with {len(args)} arguments")
