"""The cluster's Prometheus as prometheus-operator runs it: scrape what it discovers, evaluate what it loads.

One object per twin holds the scraper (targets from ServiceMonitors/PodMonitors, ``up``), the
exporters behind the targets (kube-state-metrics, node-exporter, the kubelets' cAdvisor, OpenCost) and the
rule manager fed from PrometheusRule objects. The twin gives it the store, each tick's cAdvisor series
and pod expositions from the app model (the mesh's proxies, the collector's exporter with the span
metrics) and the nodes' usage; everything else it reads from the store. Every series reaches the
TSDB through a target.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from itbench_gym.backends.sim.alerting import PrometheusRuleSource, RuleAwareTSDB, RuleManager
from itbench_gym.backends.sim.app.cluster_view import StoreLike, list_kind
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.promql.engine import Engine
from itbench_gym.backends.sim.tsdb import SampleBatch
from itbench_gym.lang.durations import parse_prometheus_duration

from .kube_state import KubeStateMetrics, resources_flag
from .node_exporter import NodeExporter
from .opencost import OpenCost, OpenCostSnapshot
from .scrape import TARGET_LABEL_NAMES, PodEndpoint, Sample, ScrapeInput, Scraper
from .targets import DEFAULT_INTERVAL, Target, find_prometheus

#: The kubelet endpoints whose series the twin models, by path (the operator's kubelet ServiceMonitor).
KUBELET_PATHS = {"/metrics/cadvisor": "cadvisor"}
Obj = dict[str, Any]


@dataclass(frozen=True)
class MonitoringSnapshot:
    rules: object
    rule_source: tuple[Any, ...] | None
    jobs: frozenset[str]
    nodes: object
    opencost: OpenCostSnapshot


def _stored(store: StoreLike, kind: str, namespace: str | None, name: str) -> Obj | None:
    try:
        obj: Obj = store.get_stored(store.registry.by_kind(kind), namespace, name)  # type: ignore[attr-defined]
    except (ApiError, KeyError, LookupError):
        return None
    return obj


class Monitoring:
    """Scrapes and rule evaluation of the Prometheus the store describes."""

    def __init__(self, store: StoreLike, engine: Engine, apiserver: Callable[[], list[Sample]] | None = None,
                 etcd: Callable[[], list[Sample]] | None = None) -> None:
        self.store = store
        #: what the API server exposes on /metrics (``kube/apiload.py``), and etcd on its metrics port (``kube/etcd.py``)
        self.apiserver = apiserver
        self.etcd = etcd
        self.rules = RuleManager([], engine)
        if isinstance(engine.storage, RuleAwareTSDB):
            engine.storage.rules = self.rules
        self.rule_source = PrometheusRuleSource(store)
        self.kube_state = KubeStateMetrics()
        self.node_exporter = NodeExporter()
        self.opencost = OpenCost()
        self.tsdb = engine.storage
        #: the last scrape's cAdvisor label dicts by id, with what the kubelet exposes of them (the same
        #: dict each scrape, so the kubelet target's cache finds it by identity)
        self._stripped: dict[int, tuple[dict[str, str], dict[str, str]]] = {}
        self.scraper = Scraper({"kube-state-metrics": self._kube_state, "node-exporter": self._node, "cadvisor": self._cadvisor,
                                "kube-apiserver": self._apiserver, "etcd": self._etcd, "opencost": self._opencost},
                               KUBELET_PATHS)

    # -- per tick ---------------------------------------------------------------------------------
    def scrape(self, t: float, cadvisor_samples: Sequence[Sample], node_usage: Mapping[str, tuple[float, float]],
               exposed: Mapping[PodEndpoint, Sequence[Sequence[Sample]]] | None = None) -> tuple[SampleBatch, set[str]]:
        """The tick's series of every target to store (for :meth:`TSDB.append`), with the jobs scraped.
        The model's label dicts are read-only from here on (the cache goes by their identity).

        The model's cAdvisor series (job ``kubelet``, path ``/metrics/cadvisor``, by ``node``) are what
        each node's kubelet exposes: they reach the TSDB only through that node's kubelet target.
        ``exposed`` is what the app's pods serve (:attr:`ScrapeInput.exposed`): scraped through their targets.
        """
        batch = SampleBatch(self.tsdb)
        cadvisor: dict[str, list[Sample]] = {}
        stripped, self._stripped = self._stripped, {}
        for labels, value in cadvisor_samples:
            hit = stripped.get(id(labels))
            if hit is None or hit[0] is not labels:
                hit = (labels, {k: v for k, v in labels.items() if k not in TARGET_LABEL_NAMES})
            self._stripped[id(labels)] = hit
            cadvisor.setdefault(labels.get("node", ""), []).append((hit[1], value))
        jobs = self.scraper.scrape(ScrapeInput(self.store, t, cadvisor, node_usage, exposed or {}), batch)
        return batch, jobs

    def scrape_interval(self) -> float:
        """Seconds between the cluster Prometheus' scrapes (the operator's default without one)."""
        prometheus = find_prometheus(self.store)
        return prometheus.scrape_interval if prometheus is not None else parse_prometheus_duration(DEFAULT_INTERVAL)

    def evaluate(self, t: float) -> None:
        """Reload the rules if the PrometheusRule objects (or what selects them) changed; evaluate up to ``t`` when read.

        Evaluations are deferred (:meth:`RuleManager.defer_until`) and run in one batch when alerts,
        rules or the series rules write are read; a reload first runs what was due under the old rules.
        """
        self.rule_source.sync(self.rules, t)
        self.rules.defer_until(t)

    # -- what each kind of target exposes ---------------------------------------------------------
    def _target_pod(self, target: Target) -> Obj | None:
        return _stored(self.store, "Pod", target.pod[0], target.pod[1]) if target.pod is not None else None

    def _kube_state(self, inputs: ScrapeInput, target: Target) -> list[list[Sample]]:
        pod = self._target_pod(target) or {}
        container: Obj = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == target.container), {})
        return self.kube_state.runs(inputs.store, resources_flag(container.get("args") or []))

    def _node(self, inputs: ScrapeInput, target: Target) -> list[list[Sample]]:
        pod = self._target_pod(target) or {}
        node_name = str((pod.get("spec") or {}).get("nodeName", ""))
        node = _stored(inputs.store, "Node", None, node_name) if node_name else None
        if node is None:
            return []
        cpu, mem = inputs.node_usage.get(node_name, (0.0, 0.0))
        pods = sum(1 for p in list_kind(inputs.store, "Pod") if (p.get("spec") or {}).get("nodeName") == node_name)
        return [self.node_exporter.collect(node, inputs.now, cpu, mem, pods)]

    def _opencost(self, inputs: ScrapeInput, target: Target) -> list[list[Sample]]:
        pod = self._target_pod(target) or {}
        container: Obj | None = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == target.container), None)
        return [self.opencost.collect(inputs, pod, container)] if container is not None else []

    def _apiserver(self, inputs: ScrapeInput, target: Target) -> list[list[Sample]]:
        return [self.apiserver()] if self.apiserver is not None else []

    def _etcd(self, inputs: ScrapeInput, target: Target) -> list[list[Sample]]:
        return [self.etcd()] if self.etcd is not None else []

    def _cadvisor(self, inputs: ScrapeInput, target: Target) -> list[list[Sample]]:
        return [list(inputs.cadvisor.get(target.node, ()))]

    # -- snapshots --------------------------------------------------------------------------------
    def snapshot(self, *, deferred_rules: bool = False) -> MonitoringSnapshot:
        return MonitoringSnapshot(self.rules.snapshot(deferred=deferred_rules), self.rule_source.snapshot(), self.scraper.snapshot(),
                                  self.node_exporter.snapshot(), self.opencost.snapshot())

    def restore(self, snap: MonitoringSnapshot) -> None:
        self.rules.restore(snap.rules)
        self.rule_source.restore(snap.rule_source)
        self.scraper.restore(snap.jobs)
        self.node_exporter.restore(snap.nodes)  # type: ignore[arg-type]
        self.opencost.restore(snap.opencost)
