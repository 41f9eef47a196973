"""The documents a Gatekeeper policy reads: ``input.review`` and ``data.inventory``.

Shapes follow Gatekeeper's admission target: a review is an AdmissionRequest (``kind`` as group,
version and kind; ``object``; ``oldObject``; ``name``; ``namespace``; ``operation``; ``userInfo``), and
synced objects sit at ``cluster[groupVersion][kind][name]`` or ``namespace[ns][groupVersion][kind][name]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from itbench_gym.policy.gatekeeper.errors import GatekeeperError

ADMISSION_GROUP = "admission.k8s.io"


def group_version_kind(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(group, version, kind) of an object; a core object's apiVersion ``v1`` has the empty group."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        raise GatekeeperError(f"object {_name(obj)!r} needs apiVersion and kind")
    group, _, version = api_version.rpartition("/")
    return group, version, kind


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""


def _namespace(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("namespace") or "") if isinstance(metadata, Mapping) else ""


def is_admission_review(obj: Mapping[str, Any]) -> bool:
    """An AdmissionReview (any version of ``admission.k8s.io``) is reviewed as the request it carries."""
    api_version = obj.get("apiVersion")
    return obj.get("kind") == "AdmissionReview" and isinstance(api_version, str) and api_version.startswith(ADMISSION_GROUP + "/")


def review_of_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The review Gatekeeper builds for a bare object (audit, gator): a request without an operation."""
    group, version, kind = group_version_kind(obj)
    review: dict[str, Any] = {"kind": {"group": group, "version": version, "kind": kind}, "object": dict(obj), "name": _name(obj)}
    if namespace := _namespace(obj):
        review["namespace"] = namespace
    return review


def review_of_admission(admission_review: Mapping[str, Any]) -> dict[str, Any]:
    """The request of an AdmissionReview; a DELETE carries only ``oldObject``, which Gatekeeper also reviews as ``object``."""
    request = admission_review.get("request")
    if not isinstance(request, Mapping):
        raise GatekeeperError("AdmissionReview has no request")
    review = dict(request)
    obj, old = review.get("object"), review.get("oldObject")
    if not isinstance(obj, Mapping) and not isinstance(old, Mapping):
        raise GatekeeperError("AdmissionRequest has neither object nor oldObject to review")
    if review.get("operation") == "DELETE" and not isinstance(obj, Mapping):
        review["object"] = old
    if "kind" not in review:
        group, version, kind = group_version_kind(review["object"] if isinstance(review.get("object"), Mapping) else review["oldObject"])
        review["kind"] = {"group": group, "version": version, "kind": kind}
    return review


def review_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return review_of_admission(obj) if is_admission_review(obj) else review_of_object(obj)


def inventory_document(objects: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``data.inventory`` as Gatekeeper syncs ``objects`` (a later object with the same key replaces an earlier one)."""
    inventory: dict[str, Any] = {"cluster": {}, "namespace": {}}
    for obj in objects:
        group, version, kind = group_version_kind(obj)
        group_version = f"{group}/{version}" if group else version
        namespace = _namespace(obj)
        root = inventory["namespace"].setdefault(namespace, {}) if namespace else inventory["cluster"]
        root.setdefault(group_version, {}).setdefault(kind, {})[_name(obj)] = dict(obj)
    return inventory
