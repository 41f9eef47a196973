"""The Kubernetes metrics OpenCost's exporter publishes on ``/metrics`` from its cluster cache.

Besides its cost gauges (:mod:`.opencost`), the exporter registers Prometheus collectors that turn the
objects of its informer cache into kube-state-metrics-like series (opencost/opencost ``pkg/metrics``:
``kubemetrics.go`` registers them, one file per collector). This module computes the same series from
the store at each scrape, with upstream's names, labels and values.

Which collectors run is fixed when the process starts, from the container's environment
(``pkg/costmodel/metrics.go`` calls ``InitKubeMetrics`` with the options of ``pkg/env/costmodelenv.go``,
each read by ``core/pkg/env.GetBool``: Go's ``strconv.ParseBool``, the default when the variable is
unset or does not parse):

- always: ``service_selector_labels``, ``deployment_match_labels`` and ``statefulSet_match_labels``
  (the "kubecost controller" collectors, which the emitter always asks for);
- ``EMIT_POD_ANNOTATIONS_METRIC`` / ``EMIT_NAMESPACE_ANNOTATIONS_METRIC`` (default false):
  ``kube_pod_annotations`` / ``kube_namespace_annotations``;
- ``EMIT_KSM_V1_METRICS`` (default true): the node, namespace, deployment, pod, PV, PVC and job
  collectors; else ``EMIT_KSM_V1_METRICS_ONLY`` (default false): the node and namespace collectors,
  ``kube_pod_labels``/``kube_pod_owner`` alone and the PV collector; else the PV collector alone. In
  both of the last two cases the PV capacity and phase series are switched off, so only
  ``kubecost_pv_info`` remains of the PV collector;
- unless ``EMIT_DEPRECATED_METRICS`` is true (default false), the names upstream lists as deprecated
  (:data:`DEPRECATED`) are switched off wherever they come from.

The metrics configuration file (disabled metrics, a pod label allow-list) is not mounted where the twin
runs OpenCost, so nothing else is switched off and every pod label is kept.

Labels and values as upstream writes them: object labels, selectors and annotations become
``label_<name>`` / ``annotation_<name>`` labels with every character outside ``[a-zA-Z0-9_]`` replaced by
``_`` (``core/pkg/util/promutil``); resource quantities are given in cores (``MilliValue() / 1000``)
or, for bytes and counts, as Go's ``Quantity.Value()``, which rounds up. ``kube_pod_owner`` says
``owner_is_controller="true"`` whenever the owner reference has a ``controller`` field, whatever its
value (upstream tests the pointer, not what it points to); a job's failure reasons are matched against
``BackoffLimitExceeded``, ``DeadLineExceeded`` (sic) and ``Evicted``. Series carry no ``job`` or
``instance``: the scrape adds its target's labels.

Every series carries a ``uid`` label, the ``metadata.uid`` of the object it describes (for
``kube_pod_owner`` and the container series, the pod's; empty when the object has none).

Provenance. The structure, names, values and switches follow opencost/opencost 5f65333 (develop of
October 2024, the newest full source at hand). The image the twin deploys, 1.121.1, is later; the
``uid`` label follows upstream pull request 3366 (merged September 2025: nodes, namespaces, pods,
deployments, statefulsets, services, PVs, PVCs, jobs) and 3384 (merged October 2025, pod metrics), as
read from stored undated versions of ``pkg/metrics`` collectors and their tests that match those pull
requests, not from a tagged 1.121.1 tree (that ``kube_pod_owner``'s uid is the pod's, not the owner's,
is inferred from the constructor's argument order). Left out as unmerged when last seen: the
replication-controller and pod-disruption-budget collectors (pull request 3306, closed), the
``matchExpressions`` fallback for the selector series (3695, open) and OTel label names (3676, open). A
stored ``servicemetrics.go`` also defines a ``kube_service_info`` collector, but no version of
``kubemetrics.go`` seen registers it, so it is not emitted here. The ``EMIT_*_LABELS_METRIC`` switches
of later versions filter the collector data source, not these collectors. Whatever 1.121.1 changed
beyond that is unknown. Where upstream's outcome rests on Go's random map order (two label keys that
sanitize to the same name), the twin keeps the value of the key that sorts last.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from decimal import ROUND_UP, Decimal
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike
from itbench_gym.backends.sim.kube.controllers.util import quantity

from .object_series import Family, ObjectSeries

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]
Env = Callable[[str], str | None]
#: A collector: the kind of object it reads and its series of one such object.
Collector = tuple[str, Family]

#: What ``InitKubeMetrics`` switches off unless ``EMIT_DEPRECATED_METRICS`` is true.
DEPRECATED = frozenset({
    "kube_pod_container_resource_limits", "kube_pod_container_resource_limits_memory_bytes",
    "kube_pod_container_resource_limits_cpu_cores", "kube_pod_container_status_restarts_total",
    "kube_node_status_condition", "kube_deployment_status_replicas_available", "kube_deployment_spec_replicas",
    "kube_persistentvolume_status_phase", "kube_pod_status_phase",
})
#: What it switches off when the full KSM v1 set is not emitted (only ``kubecost_pv_info`` is wanted then).
PV_STATE = frozenset({"kube_persistentvolume_capacity_bytes", "kube_persistentvolume_status_phase"})
#: Go's ``strconv.ParseBool``: the spellings of true and of false; anything else is an error.
TRUE_TEXT = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE_TEXT = frozenset({"0", "f", "F", "FALSE", "false", "False"})
POD_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")
PV_PHASES = ("Pending", "Available", "Bound", "Released", "Failed")
CONDITION_STATUSES = ("True", "False", "Unknown")
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadLineExceeded", "Evicted")
#: The storage class annotation a PVC's class is read from first.
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
BYTE_RESOURCES = frozenset({"storage", "ephemeral-storage", "memory"})

_INVALID_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


class OpenCostKubeMetrics:
    """The collectors of OpenCost's processes: each object's series, recomputed when it changed
    (:class:`.object_series.ObjectSeries`)."""

    def __init__(self) -> None:
        self._series = ObjectSeries()

    def collect(self, store: StoreLike, env: Env) -> list[Sample]:
        """The Kubernetes series of an OpenCost exporter whose container has the environment ``env``
        (a variable's value, None when unset), computed from the objects in ``store``."""
        collectors, disabled = _registered(env)
        return [s for run in self._series.runs(store, collectors) for s in run if s[0]["__name__"] not in disabled]


def kube_metrics(store: StoreLike, env: Env) -> list[Sample]:
    """One uncached collection (tests, one-off reads): what :meth:`OpenCostKubeMetrics.collect` gives."""
    return OpenCostKubeMetrics().collect(store, env)


# -- registration (kubemetrics.go InitKubeMetrics) ----------------------------------------------------


def _flag(env: Env, name: str, default: bool) -> bool:
    """``env.GetBool``: the variable parsed as Go's ``strconv.ParseBool`` does, else ``default``."""
    value = env(name)
    if value in TRUE_TEXT:
        return True
    if value in FALSE_TEXT:
        return False
    return default


def _registered(env: Env) -> tuple[list[Collector], frozenset[str]]:
    """The collectors the process registers and the metric names switched off for all of them."""
    disabled = frozenset() if _flag(env, "EMIT_DEPRECATED_METRICS", False) else DEPRECATED
    collectors: list[Collector] = [("Service", _service_selectors), ("Deployment", _deployment_selectors),
                                   ("StatefulSet", _statefulset_selectors)]
    if _flag(env, "EMIT_POD_ANNOTATIONS_METRIC", False):
        collectors.append(("Pod", _pod_annotations))
    if _flag(env, "EMIT_NAMESPACE_ANNOTATIONS_METRIC", False):
        collectors.append(("Namespace", _namespace_annotations))
    if _flag(env, "EMIT_KSM_V1_METRICS", True):
        collectors += [("Node", _nodes), ("Namespace", _namespace_labels), ("Deployment", _deployments), ("Pod", _pods),
                       ("PersistentVolume", _persistent_volumes), ("PersistentVolumeClaim", _claims), ("Job", _jobs)]
    elif _flag(env, "EMIT_KSM_V1_METRICS_ONLY", False):
        collectors += [("Node", _nodes), ("Namespace", _namespace_labels), ("Pod", _pod_labels_and_owners),
                       ("PersistentVolume", _persistent_volumes)]
        disabled |= PV_STATE
    else:
        collectors.append(("PersistentVolume", _persistent_volumes))
        disabled |= PV_STATE
    return collectors, disabled


# -- helpers (kubemetrics.go, core/pkg/util/promutil) -------------------------------------------------


def _m(name: str, value: float, labels: Mapping[str, str]) -> Sample:
    return ({"__name__": name, **labels}, float(value))


def _sanitize(name: str) -> str:
    """``promutil.SanitizeLabelName``."""
    return _INVALID_LABEL_CHAR.sub("_", name)


def _qualified(labels: Mapping[str, Any] | None, prefix: str) -> dict[str, str]:
    """Kubernetes labels (or annotations) as Prometheus labels: ``prefix`` + the sanitized key
    (``promutil.KubePrependQualifierToLabels``). Keys that sanitize alike collapse into one: for labels
    upstream's ``SanitizeLabels`` keeps whichever Go's map order reaches last (here the key sorting
    last); for annotations it writes both, and Prometheus' client then refuses the whole scrape (not
    modelled: the twin keeps one, as for labels)."""
    out: dict[str, str] = {}
    for key in sorted(labels or {}):
        out[prefix + _sanitize(key)] = str((labels or {})[key])
    return out


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.get("metadata") or {}
    return meta


def _uid(meta: Obj) -> str:
    """The ``uid`` label: the object's own ``metadata.uid`` (empty when it has none)."""
    return str(meta.get("uid") or "")


def _value(q: Decimal) -> float:
    """``Quantity.Value()``: rounded up (away from zero) to a whole number."""
    return float(q.to_integral_value(rounding=ROUND_UP))


def _cores(q: Decimal) -> float:
    """``Quantity.MilliValue() / 1000``: whole millicores, rounded up, in cores."""
    return float((q * 1000).to_integral_value(rounding=ROUND_UP)) / 1000


def _is_extended_resource(name: str) -> bool:
    """``isExtendedResourceName``: a domain-prefixed name outside ``kubernetes.io/`` that is a valid
    qualified name once ``requests.`` is put in front of it."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    parts = f"requests.{name}".split("/")
    if len(parts) != 2:
        return False
    prefix, short = parts
    return (len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None
            and 0 < len(short) <= 63 and _QUALIFIED_NAME.fullmatch(short) is not None)


def _resource_unit_value(name: str, raw: Any) -> tuple[str, str, float] | None:
    """``toResourceUnitValue``: (sanitized resource, unit, value), None for a resource upstream skips."""
    q = quantity(raw)
    if name == "cpu":
        return "cpu", "core", _cores(q)
    if name in BYTE_RESOURCES or name.startswith(("hugepages-", "attachable-volumes-")):
        return _sanitize(name), "byte", _value(q)
    if name == "pods" or _is_extended_resource(name):
        return _sanitize(name), "integer", _value(q)
    return None


def _resources(resources: Mapping[str, Any] | None) -> Iterable[tuple[str, str, float]]:
    for name, raw in (resources or {}).items():
        parsed = _resource_unit_value(name, raw)
        if parsed is not None:
            yield parsed


# -- the "kubecost controller" collectors (servicemetrics.go, deploymentmetrics.go, statefulsetmetrics.go)


def _selector_series(obj: Obj, name: str, label: str, selector: Any) -> Iterable[Sample]:
    """One series valued 1 if the object's selector has labels: ``label_*``, namespace, the object's name
    and its uid."""
    meta = _meta(obj)
    labels = _qualified(selector, "label_")
    if labels:
        yield _m(name, 1, {**labels, "namespace": meta.get("namespace", ""), label: meta.get("name", ""), "uid": _uid(meta)})


def _service_selectors(service: Obj) -> Iterable[Sample]:
    """``KubecostServiceCollector``."""
    return _selector_series(service, "service_selector_labels", "service", (service.get("spec") or {}).get("selector"))


def _match_labels(obj: Obj) -> Any:
    return ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels")


def _deployment_selectors(deployment: Obj) -> Iterable[Sample]:
    """``KubecostDeploymentCollector``."""
    return _selector_series(deployment, "deployment_match_labels", "deployment", _match_labels(deployment))


def _statefulset_selectors(statefulset: Obj) -> Iterable[Sample]:
    """``KubecostStatefulsetCollector``."""
    return _selector_series(statefulset, "statefulSet_match_labels", "statefulSet", _match_labels(statefulset))


# -- annotations (podmetrics.go KubecostPodCollector, namespacemetrics.go KubecostNamespaceCollector) ---


def _pod_annotations(pod: Obj) -> Iterable[Sample]:
    """``KubecostPodCollector``: pods with annotations only."""
    meta = _meta(pod)
    labels = _qualified(meta.get("annotations"), "annotation_")
    if labels:
        yield _m("kube_pod_annotations", 1, {**labels, "namespace": meta.get("namespace", ""), "pod": meta.get("name", ""),
                                             "uid": _uid(meta)})


def _namespace_annotations(ns: Obj) -> Iterable[Sample]:
    """``KubecostNamespaceCollector``: namespaces with annotations only."""
    return _namespace_map(ns, "kube_namespace_annotations", "annotations", "annotation_")


def _namespace_map(ns: Obj, name: str, field: str, prefix: str) -> Iterable[Sample]:
    """One series valued 1 if the namespace's labels or annotations (``field``) are not empty."""
    meta = _meta(ns)
    labels = _qualified(meta.get(field), prefix)
    if labels:
        yield _m(name, 1, {**labels, "namespace": meta.get("name", ""), "uid": _uid(meta)})


# -- KSM v1 collectors ---------------------------------------------------------------------------------


def _nodes(node: Obj) -> Iterable[Sample]:
    """``KubeNodeCollector`` (nodemetrics.go)."""
    meta, status = _meta(node), node.get("status") or {}
    lbl = {"node": meta.get("name", ""), "uid": _uid(meta)}
    for field, name in (("capacity", "kube_node_status_capacity"), ("allocatable", "kube_node_status_allocatable")):
        for resource, unit, value in _resources(status.get(field)):
            if resource == "cpu":
                yield _m(f"{name}_cpu_cores", value, lbl)
            if resource == "memory":
                yield _m(f"{name}_memory_bytes", value, lbl)
            yield _m(name, value, {**lbl, "resource": resource, "unit": unit})
    yield _m("kube_node_labels", 1, {**_qualified(meta.get("labels"), "label_"), **lbl})
    for c in status.get("conditions") or []:
        for s in CONDITION_STATUSES:
            yield _m("kube_node_status_condition", c.get("status") == s,
                     {**lbl, "condition": str(c.get("type", "")), "status": s.lower()})


def _namespace_labels(ns: Obj) -> Iterable[Sample]:
    """``KubeNamespaceCollector`` (namespacemetrics.go): namespaces with labels only."""
    return _namespace_map(ns, "kube_namespace_labels", "labels", "label_")


def _deployments(d: Obj) -> Iterable[Sample]:
    """``KubeDeploymentCollector`` (deploymentmetrics.go): both series are deprecated."""
    meta, spec = _meta(d), d.get("spec") or {}
    lbl = {"namespace": meta.get("namespace", ""), "deployment": meta.get("name", ""), "uid": _uid(meta)}
    replicas = spec.get("replicas")
    yield _m("kube_deployment_spec_replicas", 1 if replicas is None else replicas, lbl)
    yield _m("kube_deployment_status_replicas_available", (d.get("status") or {}).get("availableReplicas", 0), lbl)


def _pod_labels_and_owners(pod: Obj) -> Iterable[Sample]:
    """``KubePodLabelsCollector`` (podlabelmetrics.go): what the KSM-v1-only mode keeps of the pods."""
    return _labels_and_owners(_meta(pod))


def _labels_and_owners(meta: Obj) -> Iterable[Sample]:
    pl = {"namespace": meta.get("namespace", ""), "pod": meta.get("name", ""), "uid": _uid(meta)}
    yield _m("kube_pod_labels", 1, {**_qualified(meta.get("labels"), "label_"), **pl})
    for owner in meta.get("ownerReferences") or []:  # uid: the pod's, not the owner's
        yield _m("kube_pod_owner", 1, {**pl, "owner_name": str(owner.get("name", "")),
                                       "owner_kind": str(owner.get("kind", "")),
                                       "owner_is_controller": "true" if owner.get("controller") is not None else "false"})


def _pods(pod: Obj) -> Iterable[Sample]:
    """``KubePodCollector`` (podmetrics.go): every pod in the cache, scheduled or not."""
    meta, spec, status = _meta(pod), pod.get("spec") or {}, pod.get("status") or {}
    pl = {"namespace": meta.get("namespace", ""), "pod": meta.get("name", ""), "uid": _uid(meta)}
    phase = status.get("phase") or ""
    if phase:
        for p in POD_PHASES:
            yield _m("kube_pod_status_phase", p == phase, {**pl, "phase": p})
    yield from _labels_and_owners(meta)
    for cs in status.get("containerStatuses") or []:
        cl = {**pl, "container": str(cs.get("name", ""))}
        state = cs.get("state") or {}
        yield _m("kube_pod_container_status_restarts_total", cs.get("restartCount", 0), cl)
        if state.get("running") is not None:
            yield _m("kube_pod_container_status_running", 1, cl)
        if state.get("terminated") is not None:
            yield _m("kube_pod_container_status_terminated_reason", 1, {**cl, "reason": str(state["terminated"].get("reason", ""))})
    node = str(spec.get("nodeName", ""))
    for c in spec.get("containers") or []:
        cl = {**pl, "container": str(c.get("name", "")), "node": node}
        resources = c.get("resources") or {}
        for resource, unit, value in _resources(resources.get("requests")):
            yield _m("kube_pod_container_resource_requests", value, {**cl, "resource": resource, "unit": unit})
        for resource, unit, value in _resources(resources.get("limits")):
            if resource == "cpu":
                yield _m("kube_pod_container_resource_limits_cpu_cores", value, cl)
            if resource == "memory":
                yield _m("kube_pod_container_resource_limits_memory_bytes", value, cl)
            yield _m("kube_pod_container_resource_limits", value, {**cl, "resource": resource, "unit": unit})


def _persistent_volumes(pv: Obj) -> Iterable[Sample]:
    """``KubePVCollector`` (pvmetrics.go)."""
    meta, spec = _meta(pv), pv.get("spec") or {}
    lbl = {"persistentvolume": meta.get("name", ""), "uid": _uid(meta)}
    phase = (pv.get("status") or {}).get("phase") or ""
    if phase:
        for p in PV_PHASES:
            yield _m("kube_persistentvolume_status_phase", p == phase, {**lbl, "phase": p})
    yield _m("kube_persistentvolume_capacity_bytes", _value(quantity((spec.get("capacity") or {}).get("storage", 0))), lbl)
    csi = spec.get("csi")
    provider_id = str(csi.get("volumeHandle") or "") if csi is not None else ""
    yield _m("kubecost_pv_info", 1, {**lbl, "storageclass": str(spec.get("storageClassName") or ""),
                                     "provider_id": provider_id or lbl["persistentvolume"]})


def _claim_class(meta: Obj, spec: Obj) -> str:
    """``getPersistentVolumeClaimClass``: the beta annotation, else ``spec.storageClassName``, else ``""``."""
    annotations = meta.get("annotations") or {}
    if BETA_STORAGE_CLASS in annotations:
        return str(annotations[BETA_STORAGE_CLASS])
    return str(spec.get("storageClassName") or "")


def _claims(pvc: Obj) -> Iterable[Sample]:
    """``KubePVCCollector`` (pvcmetrics.go)."""
    meta, spec = _meta(pvc), pvc.get("spec") or {}
    lbl = {"namespace": meta.get("namespace", ""), "persistentvolumeclaim": meta.get("name", ""), "uid": _uid(meta)}
    yield _m("kube_persistentvolumeclaim_info", 1, {**lbl, "storageclass": _claim_class(meta, spec),
                                                    "volumename": str(spec.get("volumeName") or "")})
    requests = (spec.get("resources") or {}).get("requests") or {}
    if "storage" in requests:
        yield _m("kube_persistentvolumeclaim_resource_requests_storage_bytes", _value(quantity(requests["storage"])), lbl)


def _jobs(job: Obj) -> Iterable[Sample]:
    """``KubeJobCollector`` (jobmetrics.go): a job that never failed gets one series valued 0 with an empty
    reason; one that did gets, per ``Failed`` condition, one series per known reason (1 for the
    condition's) and, when its reason is none of them, an empty-reason series valued the failed count. A
    job with failures but no ``Failed`` condition gets none."""
    meta, status = _meta(job), job.get("status") or {}
    lbl = {"job_name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "uid": _uid(meta)}
    failed = status.get("failed") or 0
    if not failed:
        yield _m("kube_job_status_failed", 0, {**lbl, "reason": ""})
        return
    for c in status.get("conditions") or []:
        if c.get("type") != "Failed":
            return
        for reason in JOB_FAILURE_REASONS:
            yield _m("kube_job_status_failed", c.get("reason") == reason, {**lbl, "reason": reason})
        if c.get("reason") not in JOB_FAILURE_REASONS:
            yield _m("kube_job_status_failed", failed, {**lbl, "reason": ""})
