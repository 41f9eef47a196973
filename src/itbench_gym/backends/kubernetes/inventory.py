"""What an episode may change on a cluster, recorded so the cluster can be put back exactly.

An inventory is every top-level object (no owner: controllers recreate what they own) in the
namespaces the scenario works in, plus the cluster-scoped objects ITBench's agent and faults may
touch (Namespaces of the scenario, PriorityClasses, Nodes' labels, taints and schedulability). Each
is kept as what defines it — no status, nothing the API server or a controller writes — so two
inventories are equal exactly when the cluster is as it was. :func:`restore` makes the cluster equal
an earlier inventory with plain API calls: delete what was created, create what was deleted,
replace what was changed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.resource import ResourceList

from itbench_gym.backends.sim.install import INSTALL_ORDER

Obj = dict[str, Any]
Key = tuple[str, str, str, str]
"""(apiVersion, kind, namespace or "", name)."""

#: Kinds whose objects the cluster writes for itself (or that only report): never part of an inventory.
_SKIPPED_KINDS = frozenset({
    "Event", "Endpoints", "EndpointSlice", "Lease", "ControllerRevision", "PodMetrics", "NodeMetrics",
    "PolicyReport", "ClusterPolicyReport", "Binding", "TokenReview", "LocalSubjectAccessReview",
})
#: Cluster-scoped kinds the scenario's agent and faults may change (ITBench grants patch on Nodes and
#: create/delete on PriorityClasses; faults create namespaced objects, Namespaces are the scenario's).
CLUSTER_KINDS = ("Namespace", "PriorityClass", "Node")
#: Metadata the API server fills in.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink",
                    "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "ownerReferences")
#: Spec fields the API server allocates when an object is created (a re-created Service gets a new IP).
_ALLOCATED = {"Service": ("clusterIP", "clusterIPs"), "PersistentVolumeClaim": ("volumeName",)}
#: Annotations controllers write on the objects they manage.
_CONTROLLER_ANNOTATIONS = ("deployment.kubernetes.io/revision",)


def normal(obj: Mapping[str, Any]) -> Obj:
    """What defines an object: no status, no server metadata, no controller annotations (Nodes: labels and spec)."""
    out = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (out.get("metadata") or {}).items() if k not in _SERVER_METADATA}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _CONTROLLER_ANNOTATIONS}
    meta.pop("annotations", None)
    if annotations:
        meta["annotations"] = annotations
    out["metadata"] = meta
    spec = out.get("spec")
    for field in _ALLOCATED.get(str(obj.get("kind")), ()):
        if isinstance(spec, dict):
            spec.pop(field, None)
    if obj.get("kind") == "Node":
        spec = obj.get("spec") or {}
        out = {"apiVersion": obj.get("apiVersion"), "kind": "Node",
               "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
               "spec": {"taints": spec.get("taints") or [], "unschedulable": bool(spec.get("unschedulable"))}}
    return out


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(obj.get("apiVersion")), str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))


def describe(key: Key) -> str:
    api_version, kind, namespace, name = key
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


@dataclass(frozen=True)
class Difference:
    created: tuple[Key, ...]
    deleted: tuple[Key, ...]
    changed: tuple[Key, ...]

    def __bool__(self) -> bool:
        return bool(self.created or self.deleted or self.changed)

    def summary(self) -> str:
        parts = [f"{what}: {', '.join(describe(k) for k in keys)}"
                 for what, keys in (("created", self.created), ("deleted", self.deleted), ("changed", self.changed)) if keys]
        return "; ".join(parts) or "no difference"


@dataclass(frozen=True)
class Inventory:
    namespaces: tuple[str, ...]
    objects: Mapping[Key, Obj]

    def difference(self, now: Inventory) -> Difference:
        """How ``now`` differs from this inventory."""
        return Difference(
            created=tuple(sorted(k for k in now.objects if k not in self.objects)),
            deleted=tuple(sorted(k for k in self.objects if k not in now.objects)),
            changed=tuple(sorted(k for k, v in self.objects.items() if k in now.objects and now.objects[k] != v)),
        )


def _resources(client: dynamic.DynamicClient) -> list[Any]:
    """Every kind the cluster serves that an inventory holds, once (preferred version)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for resource in client.resources.search():
        verbs = set(getattr(resource, "verbs", None) or ())
        if isinstance(resource, ResourceList):
            continue
        name = getattr(resource, "name", None) or ""
        if not name or "/" in name or not {"list", "create", "delete"} <= verbs or resource.kind in _SKIPPED_KINDS:
            continue
        if not getattr(resource, "preferred", True):
            continue
        if not resource.namespaced and resource.kind not in CLUSTER_KINDS:
            continue
        group_kind = (resource.group, resource.kind)
        if group_kind in seen:
            continue
        seen.add(group_kind)
        out.append(resource)
    return out


def take(client: dynamic.DynamicClient, namespaces: Iterable[str], cluster_kinds: Iterable[str] = CLUSTER_KINDS) -> Inventory:
    """The inventory of ``namespaces`` (and of ``cluster_kinds``, Namespaces only those named) as the cluster is now."""
    wanted = tuple(dict.fromkeys(namespaces))
    kinds = frozenset(cluster_kinds)
    objects: dict[Key, Obj] = {}
    for resource in _resources(client):
        if not resource.namespaced and resource.kind not in kinds:
            continue
        if resource.namespaced:
            items = [i for ns in wanted for i in _items(resource, ns)]
        else:
            items = [i for i in _items(resource, None) if resource.kind != "Namespace" or i["metadata"]["name"] in wanted]
        for item in items:
            item.setdefault("apiVersion", resource.group_version)
            item.setdefault("kind", resource.kind)
            if (item.get("metadata") or {}).get("ownerReferences") or (item.get("metadata") or {}).get("deletionTimestamp"):
                continue
            objects[key_of(item)] = normal(item)
    return Inventory(wanted, objects)


def _items(resource: Any, namespace: str | None) -> list[Obj]:
    try:
        listed = resource.get(namespace=namespace) if namespace else resource.get()
    except ApiException as exc:
        if exc.status in (403, 404, 405):
            return []
        raise
    items: list[Obj] = [dict(i) for i in listed.to_dict().get("items") or []]
    return items


def _order(key: Key) -> int:
    kind = key[1]
    return INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)


def restore(client: dynamic.DynamicClient, baseline: Inventory, now: Inventory) -> list[str]:
    """Make the cluster equal ``baseline`` again; what was done, in words (a harness log)."""
    diff = baseline.difference(now)
    log: list[str] = []
    for key in sorted(diff.created, key=_order, reverse=True):
        api_version, kind, namespace, name = key
        if kind == "Node":
            continue  # a node that joined is not the episode's doing
        try:
            client.resources.get(api_version=api_version, kind=kind).delete(name=name, namespace=namespace or None,
                                                                          body={"propagationPolicy": "Background"})
        except ApiException as exc:
            if exc.status != 404:
                raise
        log.append(f"deleted {describe(key)}")
    for key in sorted(diff.deleted, key=_order):
        api_version, kind, namespace, name = key
        client.resources.get(api_version=api_version, kind=kind).create(body=baseline.objects[key], namespace=namespace or None)
        log.append(f"created {describe(key)} again")
    for key in sorted(diff.changed, key=_order):
        api_version, kind, namespace, name = key
        resource = client.resources.get(api_version=api_version, kind=kind)
        wanted = baseline.objects[key]
        if kind == "Node":
            resource.patch(name=name, body={"metadata": {"labels": _label_patch(now.objects[key], wanted)},
                                            "spec": wanted["spec"]}, content_type="application/merge-patch+json")
        else:
            current = resource.get(name=name, namespace=namespace or None).to_dict()
            body = copy.deepcopy(wanted)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                resource.replace(body=body, name=name, namespace=namespace or None)
            except ApiException as exc:
                if exc.status != 422:
                    raise
                # a field that cannot change in place (an immutable one): the object is made again
                resource.delete(name=name, namespace=namespace or None)
                resource.create(body=wanted, namespace=namespace or None)
        log.append(f"put back {describe(key)}")
    return log


def _label_patch(now: Obj, wanted: Obj) -> dict[str, str | None]:
    """A merge patch taking a Node's labels from ``now`` back to ``wanted`` (None removes a label)."""
    have, want = now["metadata"]["labels"], wanted["metadata"]["labels"]
    return {**{k: None for k in have if k not in want}, **{k: v for k, v in want.items() if have.get(k) != v}}
