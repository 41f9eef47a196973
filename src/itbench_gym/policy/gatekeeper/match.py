"""Which objects a constraint applies to: Gatekeeper's ``spec.match`` semantics.

Every criterion that is set must hold (kinds, scope, namespaces, excludedNamespaces, labelSelector,
namespaceSelector, name); an update matches when either its object or its old object does.
Namespace and name patterns take one ``*`` at the front and/or the end; a Namespace object is
matched by its own name and labels; a cluster-scoped object passes the namespace criteria.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.lang import selectors
from itbench_gym.policy.gatekeeper.errors import GatekeeperError

WILDCARD = "*"
SCOPES = ("*", "Cluster", "Namespaced")


def wildcard_matches(pattern: str, value: str) -> bool:
    """``kube-*`` is a prefix, ``*-system`` a suffix, ``*x*`` a substring, anything else is exact."""
    if pattern.startswith(WILDCARD) and pattern.endswith(WILDCARD) and len(pattern) > 1:
        return pattern[1:-1] in value
    if pattern.endswith(WILDCARD):
        return value.startswith(pattern[:-1])
    if pattern.startswith(WILDCARD):
        return value.endswith(pattern[1:])
    return pattern == value


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """A Kubernetes label selector (the project's one implementation); a bad operator is a GatekeeperError."""
    try:
        return selectors.selector_matches(selector, {str(k): str(v) for k, v in labels.items()})
    except selectors.SelectorError as exc:
        raise GatekeeperError(f"label selector: {exc}") from None


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _is_namespace(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Namespace" and obj.get("apiVersion") == "v1"


def _kinds_match(match: Mapping[str, Any], group: str, kind: str) -> bool:
    entries = match.get("kinds") or []
    if not entries:
        return True
    for entry in entries:
        kinds, groups = entry.get("kinds") or [], entry.get("apiGroups") or []
        if (not kinds or WILDCARD in kinds or kind in kinds) and (not groups or WILDCARD in groups or group in groups):
            return True
    return False


def object_matches(match: Mapping[str, Any], obj: Mapping[str, Any], group: str, namespace: Mapping[str, Any] | None) -> bool:
    """Whether one object (of API ``group``) in ``namespace`` (its Namespace object, when known) is in scope."""
    metadata = _metadata(obj)
    kind = str(obj.get("kind", ""))
    is_namespace = _is_namespace(obj)
    ns_name = str(metadata.get("name", "")) if is_namespace else str(_metadata(namespace).get("name", "")) if namespace else str(metadata.get("namespace") or "")
    if not _kinds_match(match, group, kind):
        return False
    scope = match.get("scope") or "*"
    has_namespace = bool(metadata.get("namespace")) or namespace is not None
    if scope == "Cluster" and not (is_namespace or not has_namespace):
        return False
    if scope == "Namespaced" and not (not is_namespace and has_namespace):
        return False
    if match.get("namespaces") and ns_name and not any(wildcard_matches(p, ns_name) for p in match["namespaces"]):
        return False
    if match.get("excludedNamespaces") and ns_name and any(wildcard_matches(p, ns_name) for p in match["excludedNamespaces"]):
        return False
    if match.get("labelSelector") is not None and not selector_matches(match["labelSelector"], metadata.get("labels") or {}):
        return False
    if (selector := match.get("namespaceSelector")) is not None:
        if is_namespace:
            labels = metadata.get("labels") or {}
        elif namespace is not None:
            labels = _metadata(namespace).get("labels") or {}
        elif ns_name:
            raise GatekeeperError(f"namespaceSelector needs Namespace {ns_name!r}, which is not in the inventory")
        else:
            labels = None  # a cluster-scoped object other than a Namespace passes
        if labels is not None and not selector_matches(selector, labels):
            return False
    name = match.get("name")
    return not name or wildcard_matches(str(name), str(metadata.get("name", "")))


def review_matches(match: Mapping[str, Any] | None, review: Mapping[str, Any], namespaces: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the constraint applies to the review: its object or old object matches (an absent match matches all)."""
    if not match:
        return True
    group = str((review.get("kind") or {}).get("group", ""))
    objects = [o for o in (review.get("object"), review.get("oldObject")) if isinstance(o, Mapping)]
    if not objects:
        raise GatekeeperError("review has neither object nor oldObject")
    for obj in objects:
        ns_name = str(review.get("namespace") or _metadata(obj).get("namespace") or "")
        if object_matches(match, obj, group, namespaces.get(ns_name) if ns_name else None):
            return True
    return False
