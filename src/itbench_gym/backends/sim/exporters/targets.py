"""Scrape targets as prometheus-operator configures Prometheus to discover them.

The operator turns each ServiceMonitor (and PodMonitor) the ``Prometheus`` object selects into a
scrape job over Kubernetes service discovery (``prometheus-operator/prometheus-operator:
pkg/prometheus/promcfg.go``): one target per address of the Service's Endpoints (ready and not ready)
and per endpoint entry whose port it names, labelled ``namespace``, ``service``, ``pod``,
``container``, ``node`` (addresses that point at a Node), ``job`` (the Service's name, or the value of
its ``jobLabel`` label) and ``endpoint`` (the port), then the entry's own ``relabelings``. Targets of
pods that have Succeeded or Failed are dropped, as the operator's config does. ``instance`` is the
address (``ip:port``), ``metrics_path`` only where a relabeling copies ``__metrics_path__``.

Everything is read from the store: no component's name is known here.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike, list_kind
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.lang.durations import DurationError, parse_prometheus_duration
from itbench_gym.lang.selectors import SelectorError, selector_from_dict

from .relabel import Relabel, RelabelError, parse_all, relabel

MONITORING_API = "monitoring.coreos.com/v1"
#: The operator's defaults for a Prometheus that sets neither (``pkg/prometheus/promcfg.go``).
DEFAULT_INTERVAL = "30s"
#: Pod phases whose targets the operator's generated config drops.
_FINISHED_PHASES = ("Succeeded", "Failed")

Obj = dict[str, Any]


def _seconds(value: Any, default: str) -> float:
    try:
        return parse_prometheus_duration(str(value or default))
    except DurationError:
        return parse_prometheus_duration(default)


@dataclass(frozen=True)
class PrometheusConfig:
    """What of a ``Prometheus`` object decides which monitors and rules it loads, and how often."""

    namespace: str
    name: str
    spec: Mapping[str, Any]
    resource_version: str

    @property
    def evaluation_interval(self) -> float:
        return _seconds(self.spec.get("evaluationInterval"), DEFAULT_INTERVAL)

    @property
    def scrape_interval(self) -> float:
        return _seconds(self.spec.get("scrapeInterval"), DEFAULT_INTERVAL)

    @property
    def external_labels(self) -> dict[str, str]:
        """The operator adds ``prometheus`` and ``prometheus_replica`` to the object's own externalLabels."""
        out = {str(k): str(v) for k, v in (self.spec.get("externalLabels") or {}).items()}
        out.setdefault("prometheus", f"{self.namespace}/{self.name}")
        out.setdefault("prometheus_replica", f"prometheus-{self.name}-0")
        return out

    def namespaces(self, store: StoreLike, selector_key: str) -> list[str]:
        """Namespaces a ``*NamespaceSelector`` picks: nil means the Prometheus' own, ``{}`` all of them."""
        selector = self.spec.get(selector_key)
        if selector is None:
            return [self.namespace]
        try:
            sel = selector_from_dict(selector)
        except SelectorError:
            return []
        return [n["metadata"]["name"] for n in list_kind(store, "Namespace") if sel.matches(n["metadata"].get("labels"))]

    def selects(self, selector_key: str, obj: Obj) -> bool:
        """Whether a resource selector (``ruleSelector``, ``serviceMonitorSelector``...) picks ``obj``; nil picks none."""
        selector = self.spec.get(selector_key)
        if selector is None:
            return False
        try:
            return selector_from_dict(selector).matches(obj["metadata"].get("labels"))
        except SelectorError:
            return False


def find_prometheus(store: StoreLike) -> PrometheusConfig | None:
    """The cluster's Prometheus (the first ``Prometheus`` object by namespace and name), if any."""
    for p in list_kind(store, "Prometheus", api_version=MONITORING_API):
        meta = p["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        return PrometheusConfig(meta.get("namespace", ""), meta["name"], p.get("spec") or {}, str(meta.get("resourceVersion", "")))
    return None


@dataclass(frozen=True)
class Target:
    """One scrape target: its final labels and what decides whether a scrape of it succeeds."""

    labels: Mapping[str, str]
    scrape_pool: str
    metrics_path: str
    port: int
    honor_labels: bool
    metric_relabelings: tuple[Relabel, ...]
    #: the pod behind the address (namespace, name) and the container exposing the port, if any
    pod: tuple[str, str] | None = None
    container: str = ""
    #: the node behind the address (targets that point at a Node, or a bare host address)
    node: str = ""
    meta: Mapping[str, str] = field(default_factory=dict)


def _pod_meta(pod: Obj, port: int) -> tuple[dict[str, str], str]:
    """Service discovery's ``__meta_kubernetes_pod_*`` labels and the container that exposes ``port``."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    container = ""
    port_name = ""
    for c in spec.get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("containerPort") == port:
                container, port_name = c.get("name", ""), p.get("name", "")
                break
        if container:
            break
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "Unknown")
    out = {
        "__meta_kubernetes_pod_name": meta["name"],
        "__meta_kubernetes_pod_phase": status.get("phase", "Pending"),
        "__meta_kubernetes_pod_ready": str(ready).lower(),
        "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
        "__meta_kubernetes_pod_ip": status.get("podIP", ""),
        "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
        "__meta_kubernetes_pod_container_name": container,
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_container_port_number": str(port) if container else "",
    }
    for k, v in (meta.get("labels") or {}).items():
        out[f"__meta_kubernetes_pod_label_{_sanitize(k)}"] = str(v)
    return out, container


@functools.lru_cache(maxsize=4096)
def _sanitize(name: str) -> str:
    """Prometheus' ``strutil.SanitizeLabelName``: every character outside [a-zA-Z0-9_] becomes ``_``.

    Cached: discovery runs again on every change, over the same few hundred label names.
    """
    return "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name)


def _endpoint_ports_match(ep: Mapping[str, Any], port: Mapping[str, Any], pod_port_name: str) -> bool:
    """The operator's keep rule: the entry's ``port`` names the Endpoints port, or ``targetPort`` the container port."""
    if ep.get("port"):
        return bool(port.get("name") == ep["port"])
    target = ep.get("targetPort")
    if target is None:
        return True
    if isinstance(target, int) or str(target).isdigit():
        return bool(int(target) == port.get("port"))
    return bool(str(target) == pod_port_name)


def _monitor_namespaces(store: StoreLike, monitor: Obj) -> list[str] | None:
    """A monitor's ``namespaceSelector``: its own namespace, ``matchNames``, or every one (None) with ``any``."""
    sel = (monitor.get("spec") or {}).get("namespaceSelector") or {}
    if sel.get("any"):
        return None
    names = sel.get("matchNames")
    return [str(n) for n in names] if names else [monitor["metadata"].get("namespace", "")]


def _scoped(store: StoreLike, kind: str, namespaces: list[str] | None) -> Iterable[Obj]:
    if namespaces is None:
        yield from list_kind(store, kind)
        return
    for ns in namespaces:
        yield from list_kind(store, kind, ns)


def _common_tail(labels: dict[str, str], endpoint: Mapping[str, Any], default_job: str, job_source: str) -> None:
    """``job`` and ``endpoint`` as the operator sets them."""
    labels["job"] = default_job
    if job_source and labels.get(job_source):
        labels["job"] = labels[job_source]
    port = endpoint.get("port") or endpoint.get("targetPort")
    if port is not None and str(port) != "":
        labels["endpoint"] = str(port)


def _finish(labels: dict[str, str], user: tuple[Relabel, ...]) -> dict[str, str] | None:
    """User relabelings, then what Prometheus does: ``instance`` defaults to the address, hidden labels go."""
    out = relabel(labels, user)
    if out is None:
        return None
    out.setdefault("instance", out["__address__"])
    final = {k: v for k, v in out.items() if not k.startswith("__") and v != ""}
    final["__metrics_path__"] = out.get("__metrics_path__", "/metrics")
    return final


def _parse_relabels(raw: Any, where: str) -> tuple[Relabel, ...] | None:
    try:
        return parse_all(raw if isinstance(raw, list) else None)
    except RelabelError:
        return None  # the operator rejects the monitor; Prometheus never sees it


ScrapeEndpoint = tuple[str, Mapping[str, Any], tuple[Relabel, ...], tuple[Relabel, ...]]
"""One endpoint of a monitor: its scrape pool, its spec, its relabelings and metricRelabelings."""


def _monitor_scrape(store: StoreLike, monitor: Obj, kind: str, field_name: str,
                    pool_kind: str) -> tuple[str, list[Obj], str, list[ScrapeEndpoint]]:
    """What a ServiceMonitor or PodMonitor asks for: its ``namespace/name``, the objects of ``kind``
    its selector picks in its namespaces, its ``jobLabel``, and its endpoints the operator accepts
    (one pool each)."""
    meta, spec = monitor["metadata"], monitor.get("spec") or {}
    ns_name = f"{meta.get('namespace', '')}/{meta['name']}"
    try:
        selector = selector_from_dict(spec.get("selector") or {})
    except SelectorError:
        return ns_name, [], "", []
    objects = [o for o in _scoped(store, kind, _monitor_namespaces(store, monitor)) if selector.matches(o["metadata"].get("labels"))]
    endpoints: list[ScrapeEndpoint] = []
    for i, ep in enumerate(spec.get(field_name) or []):
        if not isinstance(ep, Mapping):
            continue
        user = _parse_relabels(ep.get("relabelings"), ns_name)
        metric = _parse_relabels(ep.get("metricRelabelings"), ns_name)
        if user is not None and metric is not None:
            endpoints.append((f"{pool_kind}/{ns_name}/{i}", ep, user, metric))
    return ns_name, objects, str(spec.get("jobLabel") or ""), endpoints


def service_monitor_targets(store: StoreLike, monitor: Obj, nodes_by_ip: Mapping[str, str],
                            pods_by_ip: Mapping[str, list[Obj]]) -> list[Target]:
    _, services, job_label, endpoints = _monitor_scrape(store, monitor, "Service", "endpoints", "serviceMonitor")
    out: list[Target] = []
    for pool, ep, user, metric in endpoints:
        for svc in services:
            smeta = svc["metadata"]
            sns, sname = smeta.get("namespace", ""), smeta["name"]
            try:
                endpoints = store.get_stored(store.registry.by_kind("Endpoints"), sns, sname)  # type: ignore[attr-defined]
            except (ApiError, KeyError, LookupError):
                continue
            base = {"__meta_kubernetes_namespace": sns, "__meta_kubernetes_service_name": sname}
            for k, v in (smeta.get("labels") or {}).items():
                base[f"__meta_kubernetes_service_label_{_sanitize(k)}"] = str(v)
            for subset in endpoints.get("subsets") or []:
                for port in subset.get("ports") or []:
                    for ready, field_name in (("true", "addresses"), ("false", "notReadyAddresses")):
                        for addr in subset.get(field_name) or []:
                            target = _service_target(base, ep, port, addr, ready, pool, job_label, sname, user, metric,
                                                     store, nodes_by_ip, pods_by_ip)
                            if target is not None:
                                out.append(target)
    return out


def _service_target(base: Mapping[str, str], ep: Mapping[str, Any], port: Mapping[str, Any], addr: Mapping[str, Any],
                    ready: str, pool: str, job_label: str, service: str, user: tuple[Relabel, ...],
                    metric: tuple[Relabel, ...], store: StoreLike, nodes_by_ip: Mapping[str, str],
                    pods_by_ip: Mapping[str, list[Obj]]) -> Target | None:
    ip, number = str(addr.get("ip", "")), int(port.get("port", 0))
    ref = addr.get("targetRef") or {}
    labels: dict[str, str] = {
        **base,
        "__address__": f"{ip}:{number}",
        "__metrics_path__": str(ep.get("path") or "/metrics"),
        "__scheme__": str(ep.get("scheme") or "http"),
        "__meta_kubernetes_endpoint_port_name": str(port.get("name", "")),
        "__meta_kubernetes_endpoint_ready": ready,
        "__meta_kubernetes_endpoint_address_target_kind": str(ref.get("kind", "")),
        "__meta_kubernetes_endpoint_address_target_name": str(ref.get("name", "")),
    }
    pod_obj: Obj | None = None
    if ref.get("kind") == "Pod":
        try:
            pod_obj = store.get_stored(store.registry.by_kind("Pod"), ref.get("namespace") or base["__meta_kubernetes_namespace"],  # type: ignore[attr-defined]
                                       ref.get("name", ""))
        except (ApiError, KeyError, LookupError):
            pod_obj = None
    container = ""
    if pod_obj is not None:
        pod_meta, container = _pod_meta(pod_obj, number)
        labels.update(pod_meta)
    if not _endpoint_ports_match(ep, port, labels.get("__meta_kubernetes_pod_container_port_name", "")):
        return None
    if labels.get("__meta_kubernetes_pod_phase") in _FINISHED_PHASES:
        return None
    kind, name = labels["__meta_kubernetes_endpoint_address_target_kind"], labels["__meta_kubernetes_endpoint_address_target_name"]
    if kind == "Node":
        labels["node"] = name
    elif kind == "Pod":
        labels["pod"] = name
    labels["namespace"] = labels["__meta_kubernetes_namespace"]
    labels["service"] = service
    if labels.get("__meta_kubernetes_pod_name"):
        labels["pod"] = labels["__meta_kubernetes_pod_name"]
    if labels.get("__meta_kubernetes_pod_container_name"):
        labels["container"] = labels["__meta_kubernetes_pod_container_name"]
    _common_tail(labels, ep, service, f"__meta_kubernetes_service_label_{_sanitize(job_label)}" if job_label else "")
    final = _finish(labels, user)
    if final is None:
        return None
    path = final.pop("__metrics_path__")
    pod_key = (pod_obj["metadata"].get("namespace", ""), pod_obj["metadata"]["name"]) if pod_obj is not None else None
    node = name if kind == "Node" else ""
    if pod_key is None and not node:
        node, pod_key, container = _host_of(ip, number, nodes_by_ip, pods_by_ip)
    return Target(final, pool, path, number, bool(ep.get("honorLabels")), metric, pod_key, container, node,
                  {k: v for k, v in labels.items() if k.startswith("__meta_")})


def _host_of(ip: str, port: int, nodes_by_ip: Mapping[str, str],
             pods_by_ip: Mapping[str, list[Obj]]) -> tuple[str, tuple[str, str] | None, str]:
    """A bare address (no targetRef, e.g. the API server's): the pod declaring that port there, else the node."""
    for pod in pods_by_ip.get(ip, []):
        for c in (pod.get("spec") or {}).get("containers") or []:
            if any(p.get("containerPort") == port for p in c.get("ports") or []):
                return "", (pod["metadata"].get("namespace", ""), pod["metadata"]["name"]), c.get("name", "")
    return nodes_by_ip.get(ip, ""), None, ""


def pod_monitor_targets(store: StoreLike, monitor: Obj) -> list[Target]:
    ns_name, pods, job_label, endpoints = _monitor_scrape(store, monitor, "Pod", "podMetricsEndpoints", "podMonitor")
    out: list[Target] = []
    for pool, ep, user, metric in endpoints:
        for pod in pods:
            pmeta, status = pod["metadata"], pod.get("status") or {}
            ip = status.get("podIP")
            if not ip or status.get("phase") in _FINISHED_PHASES:
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                for p in c.get("ports") or []:
                    name = str(p.get("name", ""))
                    if ep.get("port") and name != ep["port"]:
                        continue
                    target_port = ep.get("targetPort") if not ep.get("port") else None
                    if target_port is not None and str(target_port) not in (name, str(p.get("containerPort"))):
                        continue
                    number = int(p.get("containerPort", 0))
                    labels: dict[str, str] = {
                        "__address__": f"{ip}:{number}",
                        "__metrics_path__": str(ep.get("path") or "/metrics"),
                        "__scheme__": str(ep.get("scheme") or "http"),
                        "__meta_kubernetes_namespace": pmeta.get("namespace", ""),
                    }
                    pod_meta, _ = _pod_meta(pod, number)
                    labels.update(pod_meta)
                    labels["__meta_kubernetes_pod_container_name"] = c.get("name", "")
                    labels["namespace"] = labels["__meta_kubernetes_namespace"]
                    labels["container"] = c.get("name", "")
                    labels["pod"] = pmeta["name"]
                    _common_tail(labels, ep, ns_name, f"__meta_kubernetes_pod_label_{_sanitize(job_label)}" if job_label else "")
                    final = _finish(labels, user)
                    if final is None:
                        continue
                    path = final.pop("__metrics_path__")
                    out.append(Target(final, pool, path, number, bool(ep.get("honorLabels")), metric,
                                      (pmeta.get("namespace", ""), pmeta["name"]), c.get("name", ""), "",
                                      {k: v for k, v in labels.items() if k.startswith("__meta_")}))
    return out


#: Every kind :func:`discover` reads, with its API group version.
DISCOVERY_KINDS = (("Prometheus", MONITORING_API), ("ServiceMonitor", MONITORING_API), ("PodMonitor", MONITORING_API),
                   ("Namespace", None), ("Node", None), ("Service", None), ("Endpoints", None), ("Pod", None))


def _pod_inputs(pod: Obj) -> Hashable:
    """What discovery reads of a Pod (:func:`_pod_meta`, the pod monitors, bare host addresses)."""
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "Unknown")
    containers = tuple((c.get("name", ""), tuple((p.get("containerPort"), p.get("name", "")) for p in c.get("ports") or []))
                       for c in spec.get("containers") or [])
    return (meta.get("namespace", ""), meta["name"], tuple((meta.get("labels") or {}).items()), spec.get("nodeName", ""),
            containers, status.get("phase", "Pending"), ready, status.get("podIP", ""), status.get("hostIP", ""))


def _node_inputs(node: Obj) -> Hashable:
    """What discovery reads of a Node: its name and addresses."""
    return node["metadata"]["name"], tuple((a.get("type"), a.get("address")) for a in (node.get("status") or {}).get("addresses") or [])


class DiscoveryWatch:
    """What :func:`discover` reads, as a value that changes only when the targets may change.

    Pods and Nodes enter it by the fields discovery reads: their status is written far more often
    (container states, heartbeats) than their targets change. Every other kind enters by its
    resourceVersions, so any write changes it, as long as resourceVersions are not handed out
    again (a store restored to a snapshot does that: whoever caches by this value forgets it on a
    rewind). A stored object is never changed in place, so what was read of one is kept by identity.
    """

    _INPUTS = {"Pod": _pod_inputs, "Node": _node_inputs}

    def __init__(self) -> None:
        self._read: dict[int, tuple[Obj, Hashable]] = {}

    def state(self, store: StoreLike) -> tuple[Hashable, ...]:
        read, seen = self._read, {}
        out: list[Hashable] = []
        for kind, api in DISCOVERY_KINDS:
            objs = list_kind(store, kind, api_version=api)
            inputs = self._INPUTS.get(kind)
            if inputs is None:
                out.append(tuple(str(o["metadata"].get("resourceVersion", "")) for o in objs))
                continue
            values = []
            for o in objs:
                hit = read.get(id(o))
                if hit is None or hit[0] is not o:
                    hit = (o, inputs(o))
                seen[id(o)] = hit
                values.append(hit[1])
            out.append(tuple(values))
        self._read = seen
        return tuple(out)


def discover(store: StoreLike, prometheus: PrometheusConfig) -> list[Target]:
    """Every target of the monitors ``prometheus`` selects, in scrape-pool order."""
    nodes_by_ip: dict[str, str] = {}
    for n in list_kind(store, "Node"):
        for a in (n.get("status") or {}).get("addresses") or []:
            if a.get("type") == "InternalIP":
                nodes_by_ip[str(a.get("address"))] = n["metadata"]["name"]
    pods_by_ip: dict[str, list[Obj]] = {}
    for p in list_kind(store, "Pod"):
        ip = (p.get("status") or {}).get("podIP")
        if ip:
            pods_by_ip.setdefault(str(ip), []).append(p)
    out: list[Target] = []
    for ns in prometheus.namespaces(store, "serviceMonitorNamespaceSelector"):
        for sm in list_kind(store, "ServiceMonitor", ns, MONITORING_API):
            if prometheus.selects("serviceMonitorSelector", sm):
                out += service_monitor_targets(store, sm, nodes_by_ip, pods_by_ip)
    for ns in prometheus.namespaces(store, "podMonitorNamespaceSelector"):
        for pm in list_kind(store, "PodMonitor", ns, MONITORING_API):
            if prometheus.selects("podMonitorSelector", pm):
                out += pod_monitor_targets(store, pm)
    return out
