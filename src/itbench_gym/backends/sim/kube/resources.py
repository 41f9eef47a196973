"""The resource registry: which kinds the twin serves, under which group/version/plural.

Discovery (`kubectl api-resources`, short names like ``deploy``, the ``all`` category), URL
routing and the object store all resolve resources here, so a CRD created at run time becomes a
first-class kind everywhere at once. Some kinds are served in several versions but stored once
(``autoscaling/v1`` and ``v2`` HPAs, core and ``events.k8s.io`` Events); ``convert`` maps between
them the way the real API server's conversion functions do for the fields clients use.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from . import errors

ALL_VERBS: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
NO_COLLECTION_DELETE: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
READ_ONLY: tuple[str, ...] = ("get", "list")
CREATE_ONLY: tuple[str, ...] = ("create",)


@dataclass(frozen=True)
class ResourceType:
    """One served resource (group, version, plural) and what discovery says about it."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    #: apiVersion the object is stored in when it differs from the served one.
    storage_api_version: str | None = None
    #: False for virtual resources that are computed per request (reviews, metrics).
    stored: bool = True
    #: Defined by a CustomResourceDefinition.
    custom: bool = False
    #: Scale subresource paths for custom resources (specReplicasPath, statusReplicasPath, ...).
    scale_paths: tuple[tuple[str, str], ...] = field(default=())
    #: A custom resource's ``openAPIV3Schema`` for this version (what the API server validates writes against).
    schema: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @cached_property
    def storage_key(self) -> tuple[str, str]:
        """Identity of the underlying storage, shared by all versions of a resource (every store
        access asks for it, so it is computed once)."""
        group = self.group
        if self.storage_api_version is not None:
            group = self.storage_api_version.rpartition("/")[0]
        return (group, self.plural)

    @property
    def storage_version(self) -> str:
        return self.storage_api_version or self.api_version

    @property
    def qualified(self) -> str:
        return errors.qualified(self.group, self.plural)


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> ``("apps", "v1")``; ``v1`` -> ``("", "v1")``."""
    group, _, version = api_version.rpartition("/")
    return group, version


def _rt(
    api_version: str,
    kind: str,
    plural: str,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    cats: tuple[str, ...] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
    sub: tuple[str, ...] = (),
    storage: str | None = None,
    stored: bool = True,
) -> ResourceType:
    group, version = split_api_version(api_version)
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=short,
        categories=cats,
        verbs=verbs,
        subresources=sub,
        storage_api_version=storage,
        stored=stored,
    )


_ALL = ("all",)
_POD_SUB = ("attach", "binding", "ephemeralcontainers", "eviction", "exec", "log", "portforward", "proxy", "resize", "status")

#: Built-in resources in the order a real API server lists groups (preferred version first).
BUILTIN: tuple[ResourceType, ...] = (
    _rt("v1", "ConfigMap", "configmaps", short=("cm",)),
    _rt("v1", "Endpoints", "endpoints", short=("ep",)),
    _rt("v1", "Event", "events", short=("ev",)),
    _rt("v1", "LimitRange", "limitranges", short=("limits",)),
    _rt("v1", "Namespace", "namespaces", False, short=("ns",), verbs=NO_COLLECTION_DELETE, sub=("finalize", "status")),
    _rt("v1", "Node", "nodes", False, short=("no",), sub=("proxy", "status")),
    _rt("v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), sub=("status",)),
    _rt("v1", "PersistentVolume", "persistentvolumes", False, short=("pv",), sub=("status",)),
    _rt("v1", "Pod", "pods", short=("po",), cats=_ALL, sub=_POD_SUB),
    _rt("v1", "ResourceQuota", "resourcequotas", short=("quota",), sub=("status",)),
    _rt("v1", "Secret", "secrets"),
    _rt("v1", "ServiceAccount", "serviceaccounts", short=("sa",), sub=("token",)),
    _rt("v1", "Service", "services", short=("svc",), cats=_ALL, sub=("proxy", "status")),
    _rt("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False),
    _rt("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False),
    _rt("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", False,
        short=("crd", "crds"), cats=("api-extensions",), sub=("status",)),
    _rt("apps/v1", "ControllerRevision", "controllerrevisions"),
    _rt("apps/v1", "DaemonSet", "daemonsets", short=("ds",), cats=_ALL, sub=("status",)),
    _rt("apps/v1", "Deployment", "deployments", short=("deploy",), cats=_ALL, sub=("scale", "status")),
    _rt("apps/v1", "ReplicaSet", "replicasets", short=("rs",), cats=_ALL, sub=("scale", "status")),
    _rt("apps/v1", "StatefulSet", "statefulsets", short=("sts",), cats=_ALL, sub=("scale", "status")),
    _rt("authentication.k8s.io/v1", "SelfSubjectReview", "selfsubjectreviews", False, verbs=CREATE_ONLY, stored=False),
    _rt("authentication.k8s.io/v1", "TokenReview", "tokenreviews", False, verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io/v1", "LocalSubjectAccessReview", "localsubjectaccessreviews", True,
        verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io/v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews", False,
        verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io/v1", "SubjectAccessReview", "subjectaccessreviews", False,
        verbs=CREATE_ONLY, stored=False),
    _rt("authorization.k8s.io/v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews", False,
        verbs=CREATE_ONLY, stored=False),
    _rt("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",), cats=_ALL,
        sub=("status",)),
    _rt("autoscaling/v1", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",), cats=_ALL,
        sub=("status",), storage="autoscaling/v2"),
    _rt("batch/v1", "CronJob", "cronjobs", short=("cj",), cats=_ALL, sub=("status",)),
    _rt("batch/v1", "Job", "jobs", cats=_ALL, sub=("status",)),
    _rt("coordination.k8s.io/v1", "Lease", "leases"),
    _rt("discovery.k8s.io/v1", "EndpointSlice", "endpointslices"),
    _rt("events.k8s.io/v1", "Event", "events", short=("ev",), storage="v1"),
    _rt("networking.k8s.io/v1", "IngressClass", "ingressclasses", False),
    _rt("networking.k8s.io/v1", "Ingress", "ingresses", short=("ing",), sub=("status",)),
    _rt("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", short=("netpol",)),
    _rt("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), sub=("status",)),
    _rt("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "clusterrolebindings", False),
    _rt("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", False),
    _rt("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    _rt("rbac.authorization.k8s.io/v1", "Role", "roles"),
    _rt("scheduling.k8s.io/v1", "PriorityClass", "priorityclasses", False, short=("pc",)),
    _rt("storage.k8s.io/v1", "StorageClass", "storageclasses", False, short=("sc",)),
    _rt("metrics.k8s.io/v1beta1", "NodeMetrics", "nodes", False, verbs=READ_ONLY, stored=False),
    _rt("metrics.k8s.io/v1beta1", "PodMetrics", "pods", True, verbs=READ_ONLY, stored=False),
)


class ResourceRegistry:
    """Lookup of served resources by kind, by URL segments, by short name; CRDs extend it."""

    def __init__(self, builtin: tuple[ResourceType, ...] = BUILTIN) -> None:
        self._builtin = builtin
        self._custom: dict[str, tuple[ResourceType, ...]] = {}  # CRD name -> its served versions
        self._reindex()

    def _reindex(self) -> None:
        self._all: list[ResourceType] = list(self._builtin)
        for types in self._custom.values():
            self._all.extend(types)
        self._by_path = {(t.group, t.version, t.plural): t for t in self._all}
        self._by_kind: dict[str, list[ResourceType]] = {}
        for t in self._all:
            self._by_kind.setdefault(t.kind, []).append(t)
        self._storage_type: dict[tuple[str, str], ResourceType] = {}
        for t in self._all:
            if t.stored and t.storage_api_version is None:
                self._storage_type.setdefault(t.storage_key, t)

    def all(self) -> list[ResourceType]:
        return list(self._all)

    def groups(self) -> list[tuple[str, list[str]]]:
        """``(group, versions)`` in discovery order, preferred version first."""
        out: dict[str, list[str]] = {}
        for t in self._all:
            versions = out.setdefault(t.group, [])
            if t.version not in versions:
                versions.append(t.version)
        return list(out.items())

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self._all if t.group == group and t.version == version]

    def by_plural(self, group: str, version: str, plural: str) -> ResourceType:
        try:
            return self._by_path[(group, version, plural)]
        except KeyError:
            raise errors.not_found_path() from None

    def by_kind(self, kind: str, api_version: str | None = None) -> ResourceType:
        candidates = self._by_kind.get(kind, [])
        if api_version is not None:
            group, version = split_api_version(api_version)
            candidates = [t for t in candidates if t.group == group and t.version == version]
        else:
            # Like kubectl's RESTMapper: the core group wins, then the group's preferred version.
            candidates = sorted(candidates, key=lambda t: t.group != "")
        if not candidates:
            where = f' in version "{api_version}"' if api_version else ""
            raise errors.ApiError(404, "NotFound", f'no matches for kind "{kind}"{where}')
        return candidates[0]

    def storage_type(self, rt: ResourceType) -> ResourceType:
        """The version objects of ``rt`` are stored in."""
        return self._storage_type[rt.storage_key]

    def storage_types(self) -> list[ResourceType]:
        return list(self._storage_type.values())

    # -- CustomResourceDefinitions ------------------------------------------------------------

    def add_crd(self, crd: dict[str, Any]) -> list[ResourceType]:
        """Serve the kind a CRD defines (all its served versions); raises Invalid on a bad CRD."""
        types = crd_types(crd)
        name = crd["metadata"]["name"]
        for t in types:
            clash = self._by_path.get((t.group, t.version, t.plural))
            if clash is not None and not clash.custom:
                raise errors.invalid(
                    "apiextensions.k8s.io", "CustomResourceDefinition", name,
                    [("FieldValueInvalid", "spec.group", f"Invalid value: {t.group!r}: built-in group")],
                )
        self._custom[name] = tuple(types)
        self._reindex()
        return types

    def remove_crd(self, name: str) -> None:
        if self._custom.pop(name, None) is not None:
            self._reindex()

    def snapshot(self) -> dict[str, tuple[ResourceType, ...]]:
        return dict(self._custom)

    def restore(self, snap: dict[str, tuple[ResourceType, ...]]) -> None:
        self._custom = dict(snap)
        self._reindex()

    # -- conversion between served versions --------------------------------------------------

    def convert(self, obj: dict[str, Any], target: ResourceType) -> dict[str, Any]:
        """``obj`` (a stored object, not modified) as ``target``'s version would serve it."""
        source = obj.get("apiVersion")
        if source == target.api_version:
            return obj
        out = copy.deepcopy(obj)
        converter = _CONVERTERS.get((source or "", target.api_version, target.kind))
        if converter is not None:
            converter(out)
        out["apiVersion"] = target.api_version
        return out


def crd_types(crd: dict[str, Any]) -> list[ResourceType]:
    """ResourceTypes for every served version of a CRD, storage version first."""
    spec = crd.get("spec") or {}
    meta = crd.get("metadata") or {}
    name = meta.get("name", "")
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    kind = names.get("kind") or ""
    causes: list[tuple[str, str, str]] = []
    if not group or "." not in group:
        causes.append(("FieldValueInvalid", "spec.group", f"Invalid value: {group!r}: should be a domain with at least one dot"))
    if not plural:
        causes.append(("FieldValueRequired", "spec.names.plural", "Required value"))
    if not kind:
        causes.append(("FieldValueRequired", "spec.names.kind", "Required value"))
    if plural and group and name != f"{plural}.{group}":
        causes.append(("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    scope = spec.get("scope")
    if scope not in ("Namespaced", "Cluster"):
        causes.append(("FieldValueNotSupported", "spec.scope", f'Unsupported value: {scope!r}: supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(("FieldValueRequired", "spec.versions", "Required value"))
    storage = [v for v in versions if v.get("storage")]
    if versions and len(storage) != 1:
        causes.append(("FieldValueInvalid", "spec.versions", "Invalid value: must have exactly one version marked as storage version"))
    if causes:
        raise errors.invalid("apiextensions.k8s.io", "CustomResourceDefinition", name, causes)
    storage_av = f"{group}/{storage[0]['name']}"
    served = sorted((v for v in versions if v.get("served", True)), key=lambda v: not v.get("storage"))
    out = []
    for v in served:
        sub = v.get("subresources") or {}
        scale = sub.get("scale") or {}
        av = f"{group}/{v['name']}"
        out.append(
            ResourceType(
                group=group,
                version=v["name"],
                kind=kind,
                plural=plural,
                singular=names.get("singular") or kind.lower(),
                namespaced=scope == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                verbs=ALL_VERBS,
                subresources=tuple(s for s in ("scale", "status") if s in sub),
                storage_api_version=None if av == storage_av else storage_av,
                custom=True,
                scale_paths=tuple(sorted((k, str(val)) for k, val in scale.items())),
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
            )
        )
    return out


# -- version converters (in place on a deep copy) ------------------------------------------------


def _hpa_v2_to_v1(obj: dict[str, Any]) -> None:
    spec = obj.get("spec") or {}
    for m in spec.pop("metrics", None) or []:
        res = m.get("resource") or {}
        target = res.get("target") or {}
        if m.get("type") == "Resource" and res.get("name") == "cpu" and "averageUtilization" in target:
            spec["targetCPUUtilizationPercentage"] = target["averageUtilization"]
    spec.pop("behavior", None)
    status = obj.get("status") or {}
    for m in status.pop("currentMetrics", None) or []:
        res = m.get("resource") or {}
        current = res.get("current") or {}
        if m.get("type") == "Resource" and res.get("name") == "cpu" and "averageUtilization" in current:
            status["currentCPUUtilizationPercentage"] = current["averageUtilization"]
    status.pop("conditions", None)


def _hpa_v1_to_v2(obj: dict[str, Any]) -> None:
    spec = obj.get("spec") or {}
    target = spec.pop("targetCPUUtilizationPercentage", None)
    if target is not None:
        spec["metrics"] = [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}
        ]
    status = obj.get("status") or {}
    current = status.pop("currentCPUUtilizationPercentage", None)
    if current is not None:
        status["currentMetrics"] = [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": current}}}
        ]


_EVENT_FIELDS = (  # (core/v1 name, events.k8s.io/v1 name)
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)


def _event_core_to_events(obj: dict[str, Any]) -> None:
    for core, new in _EVENT_FIELDS:
        if core in obj:
            obj[new] = obj.pop(core)


def _event_events_to_core(obj: dict[str, Any]) -> None:
    for core, new in _EVENT_FIELDS:
        if new in obj:
            obj[core] = obj.pop(new)


_CONVERTERS = {
    ("autoscaling/v2", "autoscaling/v1", "HorizontalPodAutoscaler"): _hpa_v2_to_v1,
    ("autoscaling/v1", "autoscaling/v2", "HorizontalPodAutoscaler"): _hpa_v1_to_v2,
    ("v1", "events.k8s.io/v1", "Event"): _event_core_to_events,
    ("events.k8s.io/v1", "v1", "Event"): _event_events_to_core,
}
