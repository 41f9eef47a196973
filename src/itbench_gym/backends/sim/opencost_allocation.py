"""OpenCost's cost allocation, computed as upstream computes it: PromQL over the cluster's Prometheus.

What carries over from opencost/opencost (``pkg/costmodel/allocation*.go``, ``core/pkg/opencost``):

- windows (``core/pkg/opencost/window.go``): ``today``, ``yesterday``, ``week``, ``lastweek``,
  ``month``, ``lastmonth``; ``<n>m|h|d|w`` (the window ends at the next multiple of the unit after
  now, a week at the end of today); ``<n><unit> offset <n><unit>``; Unix-second pairs ``a,b`` (or
  ``a-b``, ``a|b``); RFC 3339 pairs. Anything else is ``illegal window``. The part of a window after
  now has no data and is cut off, so an allocation's minutes are those it ran;
- a container's allocation is its ``container_cpu_allocation`` / ``container_memory_allocation_bytes``
  (the exporter's max of request and use) while it runs; CPU cost = core-hours x the node's
  ``node_cpu_hourly_cost``, RAM cost = GiB-hours x ``node_ram_hourly_cost``, PV cost = the pod's
  ``pod_pvc_allocation`` GiB-hours x the volume's ``pv_hourly_cost``, split evenly between the pod's
  containers; request and usage averages come from ``kube_pod_container_resource_requests``,
  ``container_cpu_usage_seconds_total`` and ``container_memory_working_set_bytes``;
- controllers, services and labels as ``computeAllocation`` resolves them (``_Metadata``): from the
  exporter's own ``deployment_match_labels``, ``statefulSet_match_labels`` and ``service_selector_labels``
  matched against the pods' labels, which only its ``kube_pod_labels`` carries (kube-state-metrics'
  exports none here), and ``kube_pod_owner`` for DaemonSets, Jobs and ReplicaSets no Deployment owns;
  labels over the namespace's over the include list's node labels;
- aggregation keys (``AllocationProperties.GenerateKey``): property values joined with ``/``, a
  controller as ``kind:name``, a missing controller, label or service ``__unallocated__``; aggregated
  properties are those all members share; averages are re-weighted by minutes (``Allocation.add``);
- efficiencies (usage / request, 1 for use without a request) and ``__idle__``: node capacity cost
  the allocations leave unused.

Where the twin differs: costs are integrated over the window (allocation x price x time at each
``resolution`` interval, so price or scale changes inside the window count where they happen)
rather than averaged; figures are not rounded to upstream's five decimals, which would hide the
small costs of a short window on a small cluster; PVs no pod mounts (upstream's ``__unmounted__``),
network and load-balancer costs are not modelled (zero).
"""

from __future__ import annotations

import calendar
import math
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.lang.durations import DurationError, parse_go_duration, parse_prometheus_duration
from itbench_gym.lang.timestamps import rfc3339

from .promql.engine import Engine
from .promql.limits import API_LIMITS

UNALLOCATED = "__unallocated__"
IDLE = "__idle__"
GIB = float(2**30)
DAY, WEEK = 86_400.0, 7 * 86_400.0
#: The cluster's name in allocations: the exporter's ``CLUSTER_ID`` (envs/*/cluster/opencost.yaml).
DEFAULT_CLUSTER_ID = "default-cluster"
#: Properties ``aggregate`` accepts besides ``label:<name>`` and ``annotation:<name>``.
PROPERTIES = ("cluster", "node", "namespace", "controllerKind", "controller", "service", "pod", "container")
#: Upstream's key without ``aggregate``: one allocation per container.
DEFAULT_AGGREGATE = ("cluster", "node", "namespace", "pod", "container")
#: Most resolution intervals evaluated per step; a longer step gets a coarser resolution.
MAX_POINTS_PER_STEP = 1_440

_UNITS = {"m": 60.0, "h": 3_600.0, "d": DAY, "w": WEEK}
_DURATION = re.compile(r"(\d+)([mhdw])")
_DURATION_OFFSET = re.compile(r"(\d+)([mhdw]) offset (\d+)([mhdw])")
_UNIX_PAIR = re.compile(r"(\d+)[,|-](\d+)")
_RFC3339_PAIR = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z,(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)Z")
_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")
#: A Job a CronJob made: its name is the CronJob's and a schedule time (upstream's ``isCron``).
_CRON_JOB = re.compile(r"^(.+)-(\d{10}|\d{8})$")
#: The series ``computeAllocation`` reads pods' controllers, services, labels and annotations from.
METADATA_SERIES = ("kube_pod_owner", "kube_replicaset_owner", "kube_pod_labels", "kube_namespace_labels", "kube_node_labels",
                   "kube_pod_annotations", "kube_namespace_annotations", "service_selector_labels",
                   "deployment_match_labels", "statefulSet_match_labels")
#: Node labels an allocation takes (upstream's ``ALLOCATION_NODE_LABELS_INCLUDE_LIST`` default, sanitised).
NODE_LABELS = ("cloud_google_com_gke_nodepool", "eks_amazonaws_com_nodegroup", "kubernetes_azure_com_agentpool",
               "node_kubernetes_io_instance_type", "topology_kubernetes_io_region", "topology_kubernetes_io_zone")


class ParameterError(ValueError):
    """A request parameter the allocation API cannot use; ``param`` names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"Invalid '{param}' parameter: {message}")
        self.param = param


# ------------------------------------------------------------------------------------------ parsing
def parse_window(text: str, now: float) -> tuple[float, float]:
    """``(start, end)`` in Unix seconds of an OpenCost window at ``now`` (UTC)."""
    today = math.floor(now / DAY) * DAY
    weekday = (int(today // DAY) + 4) % 7  # 1970-01-01 was a Thursday; Sunday is 0 as in Go
    if text == "today":
        return today, today + DAY
    if text == "yesterday":
        return today - DAY, today
    if text == "week":
        return today - weekday * DAY, now
    if text == "lastweek":
        start = today - (weekday + 7) * DAY
        return start, start + WEEK
    year, month = _year_month(today)
    first = calendar.timegm((year, month, 1, 0, 0, 0, 0, 0, 0))
    if text == "month":
        return float(first), now
    if text == "lastmonth":
        last_year, last_month = (year - 1, 12) if month == 1 else (year, month - 1)
        return float(calendar.timegm((last_year, last_month, 1, 0, 0, 0, 0, 0, 0))), float(first)
    if m := _DURATION.fullmatch(text):
        amount, unit = int(m.group(1)), m.group(2)
        if unit == "w":
            end = today + DAY
            return math.floor((now - amount * WEEK) / DAY) * DAY + DAY, end
        size = _UNITS[unit]
        end = math.floor(now / size) * size + size
        return end - amount * size, end
    if m := _DURATION_OFFSET.fullmatch(text):
        end = now - int(m.group(3)) * _UNITS[m.group(4)]
        return end - int(m.group(1)) * _UNITS[m.group(2)], end
    if m := _UNIX_PAIR.fullmatch(text):
        return float(m.group(1)), float(m.group(2))
    if m := _RFC3339_PAIR.fullmatch(text):
        try:
            parts = [int(g) for g in m.groups()]
            return (float(calendar.timegm((*parts[:6], 0, 0, 0))), float(calendar.timegm((*parts[6:], 0, 0, 0))))
        except (ValueError, OverflowError):
            pass
    raise ParameterError("window", f"illegal window: {text}")


def _year_month(t: float) -> tuple[int, int]:
    st = time.gmtime(t)
    return st.tm_year, st.tm_mon


def parse_duration(text: str, param: str) -> float:
    """A positive duration as OpenCost reads one (Go's ``time.ParseDuration``, plus days and weeks)."""
    for parse in (parse_go_duration, parse_prometheus_duration):
        try:
            seconds = parse(text)
        except DurationError:
            continue
        if seconds > 0 and math.isfinite(seconds):
            return seconds
        raise ParameterError(param, f"must be a positive duration, got {text!r}")
    raise ParameterError(param, f"not a duration: {text!r}; use e.g. 30m, 1h, 24h or 1d")


def parse_aggregate(text: str) -> tuple[str, ...]:
    """The properties of ``aggregate`` (comma-separated); none is upstream's per-container default."""
    out: list[str] = []
    for raw in text.split(","):
        prop = raw.strip()
        if prop in PROPERTIES:
            out.append(prop)
        elif prop.startswith(("label:", "annotation:")) and prop.partition(":")[2]:
            out.append(prop)
        elif prop:
            raise ParameterError("aggregate", f"unknown property {prop!r}; use {', '.join(PROPERTIES)}, label:<name> "
                                              "or annotation:<name>, comma-separated")
    return tuple(out) or DEFAULT_AGGREGATE


def parse_bool(text: str, param: str) -> bool:
    """Go's ``strconv.ParseBool``, which OpenCost's query parameters use."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ParameterError(param, f"not a boolean: {text!r}; use true or false")


def sanitize_label(name: str) -> str:
    """A Kubernetes label name as kube-state-metrics (and so OpenCost) writes it."""
    return _INVALID_LABEL_CHARS.sub("_", name)


# ---------------------------------------------------------------------------------------- the model
@dataclass
class Allocation:
    """One allocation of a set: its properties, window and the resource-hours and costs it sums."""

    properties: dict[str, Any]
    start: float
    end: float
    cpu_core_hours: float = 0.0
    cpu_request_core_hours: float = 0.0
    cpu_usage_core_hours: float = 0.0
    cpu_cost: float = 0.0
    ram_byte_hours: float = 0.0
    ram_request_byte_hours: float = 0.0
    ram_usage_byte_hours: float = 0.0
    ram_cost: float = 0.0
    pv_byte_hours: float = 0.0
    pv_cost: float = 0.0
    pvs: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def hours(self) -> float:
        return max(self.end - self.start, 0.0) / 3600.0

    def add(self, other: Allocation) -> None:
        """Merge ``other`` in: sums add, the window widens, shared properties stay (``Allocation.add``)."""
        self.properties = _intersection(self.properties, other.properties)
        self.start, self.end = min(self.start, other.start), max(self.end, other.end)
        for name in ("cpu_core_hours", "cpu_request_core_hours", "cpu_usage_core_hours", "cpu_cost", "ram_byte_hours",
                     "ram_request_byte_hours", "ram_usage_byte_hours", "ram_cost", "pv_byte_hours", "pv_cost"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for key, pv in other.pvs.items():
            mine = self.pvs.setdefault(key, {"byteHours": 0.0, "cost": 0.0})
            mine["byteHours"] += pv["byteHours"]
            mine["cost"] += pv["cost"]

    def to_json(self, name: str, window: tuple[float, float]) -> dict[str, Any]:
        """The allocation as upstream's ``AllocationJSON`` writes it (NaN and infinities as null)."""
        hours = self.hours
        per_hour = (lambda x: x / hours) if hours > 0 else (lambda x: 0.0)
        cpu_request, cpu_usage = per_hour(self.cpu_request_core_hours), per_hour(self.cpu_usage_core_hours)
        ram_request, ram_usage = per_hour(self.ram_request_byte_hours), per_hour(self.ram_usage_byte_hours)
        cpu_eff = _efficiency(cpu_request, cpu_usage, self.cpu_cost)
        ram_eff = _efficiency(ram_request, ram_usage, self.ram_cost)
        spent = self.cpu_cost + self.ram_cost
        total = self.cpu_cost + self.ram_cost + self.pv_cost
        body: dict[str, Any] = {
            "name": name, "properties": {k: v for k, v in self.properties.items() if v},  # upstream's omitempty
            "window": {"start": rfc3339(window[0]), "end": rfc3339(window[1])},
            "start": rfc3339(self.start), "end": rfc3339(self.end), "minutes": hours * 60.0,
            "cpuCores": per_hour(self.cpu_core_hours), "cpuCoreRequestAverage": cpu_request,
            "cpuCoreUsageAverage": cpu_usage, "cpuCoreHours": self.cpu_core_hours, "cpuCost": self.cpu_cost,
            "cpuCostAdjustment": 0.0, "cpuEfficiency": cpu_eff,
            "gpuCount": 0.0, "gpuHours": 0.0, "gpuCost": 0.0, "gpuCostAdjustment": 0.0,
            "networkTransferBytes": 0.0, "networkReceiveBytes": 0.0, "networkCost": 0.0, "networkCostAdjustment": 0.0,
            "loadBalancerCost": 0.0, "loadBalancerCostAdjustment": 0.0,
            "pvBytes": per_hour(self.pv_byte_hours), "pvByteHours": self.pv_byte_hours, "pvCost": self.pv_cost,
            "pvs": self.pvs or None, "pvCostAdjustment": 0.0,
            "ramBytes": per_hour(self.ram_byte_hours), "ramByteRequestAverage": ram_request,
            "ramByteUsageAverage": ram_usage, "ramByteHours": self.ram_byte_hours, "ramCost": self.ram_cost,
            "ramCostAdjustment": 0.0, "ramEfficiency": ram_eff,
            "externalCost": 0.0, "sharedCost": 0.0, "totalCost": total,
            "totalEfficiency": (cpu_eff * self.cpu_cost + ram_eff * self.ram_cost) / spent if spent > 0 else 0.0,
        }
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in body.items()}


def _efficiency(request: float, usage: float, cost: float) -> float:
    """Upstream's ``CPUEfficiency``/``RAMEfficiency``: usage over request; use without a request counts as 1."""
    if request > 0:
        return usage / request
    return 1.0 if usage > 0 and cost > 0 else 0.0


def _intersection(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The properties two allocations share (``AllocationProperties.Intersection``)."""
    out = {k: v for k, v in a.items() if k in ("cluster", "node", "container", "controller", "controllerKind", "pod")
           and b.get(k) == v}
    if a.get("namespace") is not None and a.get("namespace") == b.get("namespace"):
        out["namespace"] = a["namespace"]
        for shared in ("namespaceLabels", "namespaceAnnotations"):
            if shared in a:
                out[shared] = a[shared]
    return out


def aggregation_key(props: Mapping[str, Any], aggregate: Iterable[str]) -> str:
    """``AllocationProperties.GenerateKey``: the values of the aggregated properties, joined with ``/``."""
    names: list[str] = []
    for prop in aggregate:
        if prop in ("cluster", "node", "namespace", "pod", "container"):
            names.append(str(props.get(prop, "")))
        elif prop == "controllerKind":
            names.append(props.get("controllerKind") or UNALLOCATED)
        elif prop == "controller":
            controller, kind = props.get("controller"), props.get("controllerKind")
            names.append(UNALLOCATED if not controller else f"{kind}:{controller}" if kind else controller)
        elif prop == "service":
            services = props.get("services") or []
            names.append(services[0] if services else UNALLOCATED)
        else:
            kind, _, name = prop.partition(":")
            values = props.get("labels" if kind == "label" else "annotations") or {}
            names.append(values.get(sanitize_label(name), UNALLOCATED))
    return "/".join(names)


# ------------------------------------------------------------------------------------ the queries
_CONTAINER = 'container!="", container!="POD"'


class AllocationModel:
    """Computes allocation sets from the twin's Prometheus engine, as OpenCost does from Prometheus."""

    def __init__(self, engine: Engine, cluster_id: str = DEFAULT_CLUSTER_ID) -> None:
        self.engine = engine
        self.cluster_id = cluster_id

    def compute(self, start: float, end: float, resolution: float, include_idle: bool) -> dict[tuple[str, ...], Allocation]:
        """The per-container allocations of ``[start, end]`` (``end`` at most now), plus ``__idle__`` if asked."""
        if end <= start:
            return {}
        resolution = min(max(resolution, (end - start) / MAX_POINTS_PER_STEP), end - start)
        res_ms, end_ms, start_ms = max(1, round(resolution * 1000)), round(end * 1000), round(start * 1000)
        n = max(1, math.ceil((end_ms - start_ms) / res_ms))
        first_ms = end_ms - (n - 1) * res_ms
        weights = {first_ms + k * res_ms: res_ms / 1000.0 for k in range(n)}
        weights[first_ms] = (first_ms - start_ms) / 1000.0
        grid = (first_ms / 1000.0, end_ms / 1000.0, res_ms / 1000.0)
        over = f"{res_ms}ms"

        def series(expr: str, by: str) -> dict[tuple[str, ...], list[tuple[int, float]]]:
            res = self.engine.range(f"avg by ({by}) (avg_over_time({expr}[{over}]))", *grid, limits=API_LIMITS)
            keys = [k.strip() for k in by.split(",")]
            return {tuple(s.metric.get(k, "") for k in keys): [(round(t * 1000), v) for t, v in s.points] for s in res.data}

        by = "namespace, pod, container, node"
        cpu = series(f"container_cpu_allocation{{{_CONTAINER}, node!=\"\"}}", by)
        ram = series(f"container_memory_allocation_bytes{{{_CONTAINER}, node!=\"\"}}", by)
        cpu_price = {k[0]: dict(v) for k, v in series("node_cpu_hourly_cost", "node").items()}
        ram_price = {k[0]: dict(v) for k, v in series("node_ram_hourly_cost", "node").items()}
        averages = self._averages(end, end_ms - start_ms)
        meta = _Metadata(self._instant(end, end_ms - start_ms))
        allocations: dict[tuple[str, ...], Allocation] = {}
        for key in sorted(set(cpu) | set(ram)):
            namespace, pod, container, node = key
            times = sorted({t for t, _ in cpu.get(key, [])} | {t for t, _ in ram.get(key, [])})
            first, last = times[0], times[-1]
            a = Allocation(meta.properties(self.cluster_id, namespace, pod, container, node),
                           start=max((first - res_ms) / 1000.0, start), end=last / 1000.0)
            a.start = min(a.start, a.end)
            for t, v in cpu.get(key, []):
                hours = weights.get(t, 0.0) / 3600.0
                a.cpu_core_hours += v * hours
                a.cpu_cost += v * hours * cpu_price.get(node, {}).get(t, 0.0)
            for t, v in ram.get(key, []):
                hours = weights.get(t, 0.0) / 3600.0
                a.ram_byte_hours += v * hours
                a.ram_cost += v / GIB * hours * ram_price.get(node, {}).get(t, 0.0)
            hours = a.hours
            cpu_req, ram_req, cpu_use, ram_use = (averages[name].get(key[:3], 0.0) for name in ("cpu_req", "ram_req", "cpu_use", "ram_use"))
            a.cpu_request_core_hours, a.ram_request_byte_hours = cpu_req * hours, ram_req * hours
            a.cpu_usage_core_hours, a.ram_usage_byte_hours = cpu_use * hours, ram_use * hours
            allocations[key] = a
        self._volumes(allocations, series, weights)
        if include_idle:
            idle = self._idle(allocations.values(), series, weights, cpu_price, ram_price, start, end)
            if idle is not None:
                allocations[(IDLE,)] = idle
        return allocations

    def _instant(self, t: float, window_ms: int) -> dict[str, list[dict[str, str]]]:
        """The metadata series over the window: owners, labels, annotations."""
        out: dict[str, list[dict[str, str]]] = {}
        for metric in METADATA_SERIES:
            res = self.engine.instant(f"max_over_time({metric}[{window_ms}ms])", t, limits=API_LIMITS)
            out[metric] = [s.metric for s in res.data]
        return out

    def _averages(self, t: float, window_ms: int) -> dict[str, dict[tuple[str, ...], float]]:
        """Per (namespace, pod, container): average requests and usage over the window, as upstream queries them."""
        over = f"{window_ms}ms"
        queries = {
            "cpu_req": f'avg_over_time(kube_pod_container_resource_requests{{resource="cpu", {_CONTAINER}}}[{over}])',
            "ram_req": f'avg_over_time(kube_pod_container_resource_requests{{resource="memory", {_CONTAINER}}}[{over}])',
            "cpu_use": f"rate(container_cpu_usage_seconds_total{{{_CONTAINER}}}[{over}])",
            "ram_use": f"avg_over_time(container_memory_working_set_bytes{{{_CONTAINER}}}[{over}])",
        }
        out: dict[str, dict[tuple[str, ...], float]] = {}
        for name, expr in queries.items():
            res = self.engine.instant(f"avg by (namespace, pod, container) ({expr})", t, limits=API_LIMITS)
            out[name] = {(s.metric.get("namespace", ""), s.metric.get("pod", ""), s.metric.get("container", "")): s.value
                         for s in res.data if math.isfinite(s.value)}
        return out

    def _volumes(self, allocations: dict[tuple[str, ...], Allocation], series: Any, weights: Mapping[int, float]) -> None:
        """Each mounted claim's byte-hours and cost, split evenly between its pod's containers."""
        claims = series("pod_pvc_allocation", "namespace, pod, persistentvolume")
        prices = {k[0]: dict(v) for k, v in series("pv_hourly_cost", "persistentvolume").items()}
        containers: dict[tuple[str, ...], list[Allocation]] = {}
        for key, a in allocations.items():
            containers.setdefault(key[:2], []).append(a)
        for (namespace, pod, volume), points in claims.items():
            sharing = containers.get((namespace, pod))
            if not sharing:
                continue
            byte_hours = sum(v * weights.get(t, 0.0) / 3600.0 for t, v in points)
            cost = sum(v / GIB * weights.get(t, 0.0) / 3600.0 * prices.get(volume, {}).get(t, 0.0) for t, v in points)
            for a in sharing:
                a.pv_byte_hours += byte_hours / len(sharing)
                a.pv_cost += cost / len(sharing)
                a.pvs[f"{self.cluster_id}/{volume}"] = {"byteHours": byte_hours / len(sharing), "cost": cost / len(sharing)}

    def _idle(self, allocations: Iterable[Allocation], series: Any, weights: Mapping[int, float],
              cpu_price: Mapping[str, Mapping[int, float]], ram_price: Mapping[str, Mapping[int, float]],
              start: float, end: float) -> Allocation | None:
        """What the nodes' capacity cost beyond the allocations (``__idle__``), or None without node data."""
        capacity = series('kube_node_status_capacity{resource=~"cpu|memory"}', "node, resource")
        if not capacity:
            return None
        idle = Allocation({"cluster": self.cluster_id}, start=start, end=end)
        for (node, resource), points in capacity.items():
            for t, v in points:
                hours = weights.get(t, 0.0) / 3600.0
                if resource == "cpu":
                    idle.cpu_core_hours += v * hours
                    idle.cpu_cost += v * hours * cpu_price.get(node, {}).get(t, 0.0)
                else:
                    idle.ram_byte_hours += v * hours
                    idle.ram_cost += v / GIB * hours * ram_price.get(node, {}).get(t, 0.0)
        for a in allocations:
            idle.cpu_core_hours -= a.cpu_core_hours
            idle.cpu_cost -= a.cpu_cost
            idle.ram_byte_hours -= a.ram_byte_hours
            idle.ram_cost -= a.ram_cost
        for name in ("cpu_core_hours", "cpu_cost", "ram_byte_hours", "ram_cost"):
            setattr(idle, name, max(getattr(idle, name), 0.0))
        return idle


class _Metadata:
    """Controllers, services, labels and annotations of the window's pods, resolved from the metadata
    series as upstream's ``computeAllocation`` resolves them (``allocation_helpers.go``).

    Every series of a pod (kube-state-metrics' and OpenCost's own, whose ``kube_pod_labels`` carries the
    labels) adds its labels to the pod's; node labels of the include list come first, then the
    namespace's, then the pod's. Controllers: Deployments and StatefulSets whose match labels select
    the pod's labels, then owner references to DaemonSets, Jobs (a CronJob's by its name) and ReplicaSets
    no Deployment owns, each later kind overriding an earlier one. Services: those whose selector
    selects the pod's labels. Where upstream iterates Go maps (several controllers or services
    selecting one pod), names are taken in sorted order, so the answer does not change between calls.
    """

    def __init__(self, series: Mapping[str, list[dict[str, str]]]) -> None:
        self.labels = _merged(series["kube_pod_labels"], ("namespace", "pod"), "label_")
        self.annotations = _merged(series["kube_pod_annotations"], ("namespace", "pod"), "annotation_")
        self.namespace_labels = {k[0]: v for k, v in _merged(series["kube_namespace_labels"], ("namespace",), "label_").items()}
        self.namespace_annotations = {k[0]: v for k, v in _merged(series["kube_namespace_annotations"], ("namespace",),
                                                                  "annotation_").items()}
        self.node_labels = {k[0]: {name: v[name] for name in NODE_LABELS if name in v}
                            for k, v in _merged(series["kube_node_labels"], ("node",), "label_").items()}
        self.owners: dict[tuple[str, ...], tuple[str, str]] = {}
        for kind, metric in (("deployment", "deployment_match_labels"), ("statefulset", "statefulSet_match_labels")):
            selectors = _merged(series[metric], ("namespace", kind if kind == "deployment" else "statefulSet"), "label_")
            for controller, pod in _selections(_without_underscore_twins(selectors), self.labels):
                self.owners[pod] = (kind, controller[-1])  # the last in sorted order wins
        unowned = {(m.get("namespace", ""), m.get("replicaset", "")) for m in series["kube_replicaset_owner"]
                   if m.get("owner_kind") == "<none>" and m.get("owner_name") == "<none>"}
        for kind in ("DaemonSet", "Job", "ReplicaSet"):
            for m in series["kube_pod_owner"]:
                namespace, name = m.get("namespace", ""), m.get("owner_name", "")
                if m.get("owner_kind") != kind or (kind == "ReplicaSet" and (namespace, name) not in unowned):
                    continue
                if kind == "Job" and (cron := _CRON_JOB.match(name)) is not None:
                    name = cron.group(1)
                self.owners[(namespace, m.get("pod", ""))] = (kind.lower(), name)
        services = _merged(series["service_selector_labels"], ("namespace", "service"), "label_")
        self.services: dict[tuple[str, ...], list[str]] = {}
        for service, pod in _selections(_without_underscore_twins(services), self.labels):
            self.services.setdefault(pod, []).append(service[-1])

    def properties(self, cluster: str, namespace: str, pod: str, container: str, node: str) -> dict[str, Any]:
        props: dict[str, Any] = {"cluster": cluster, "node": node, "container": container}
        kind, controller = self.owners.get((namespace, pod), ("", ""))
        if controller:
            props["controller"], props["controllerKind"] = controller, kind
        namespace_labels = self.namespace_labels.get(namespace, {})
        namespace_annotations = self.namespace_annotations.get(namespace, {})
        props.update({"namespace": namespace, "pod": pod,
                      "labels": {**self.node_labels.get(node, {}), **namespace_labels, **self.labels.get((namespace, pod), {})},
                      "annotations": {**namespace_annotations, **self.annotations.get((namespace, pod), {})},
                      "namespaceLabels": namespace_labels, "namespaceAnnotations": namespace_annotations})
        if (namespace, pod) in self.services:
            props["services"] = self.services[(namespace, pod)]
        return props


def _merged(series: Iterable[Mapping[str, str]], key: tuple[str, ...], prefix: str) -> dict[tuple[str, ...], dict[str, str]]:
    """Per key, the ``prefix``-ed labels of every series of it, prefix removed (``QueryResult.GetLabels``),
    later series adding to earlier ones; series missing a key label are skipped, as upstream does."""
    out: dict[tuple[str, ...], dict[str, str]] = {}
    for m in series:
        if any(k not in m for k in key):
            continue
        out.setdefault(tuple(m[k] for k in key), {}).update(_prefixed(m, prefix))
    return out


def _without_underscore_twins(selectors: dict[tuple[str, ...], dict[str, str]]) -> dict[tuple[str, ...], dict[str, str]]:
    """Upstream's pruning: a name with ``_`` is dropped where the same name with ``-`` also exists."""
    return {k: v for k, v in selectors.items()
            if "_" not in k[-1] or (*k[:-1], k[-1].replace("_", "-")) not in selectors}


def _selections(selectors: Mapping[tuple[str, ...], dict[str, str]],
                pods: Mapping[tuple[str, ...], dict[str, str]]) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    """``(selector key, pod key)`` for each pod of a selector's namespace whose labels include all the
    selector's (``labels.Set`` as a selector: an empty set selects every pod of the namespace); selectors
    in sorted order."""
    for key, wanted in sorted(selectors.items()):
        for pod, labels in pods.items():
            if pod[0] == key[0] and wanted.items() <= labels.items():
                yield key, pod


def _prefixed(metric: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in metric.items() if k.startswith(prefix)}
