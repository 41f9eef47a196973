"""The twin under load, faults and fixes behaves like the cluster ITBench runs (docs/fidelity.md).

One healthy shop is built once and checkpointed; each test restores it, changes the cluster as an
operator would (flags in the ConfigMap, restarts, scaling, Chaos Mesh objects) and reads the outcome
through PromQL, the alert rules and the containers' logs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from itbench_gym.backends.sim.app.cpu import CpuDemand, CpuState, cpu_tick, fair_shares
from itbench_gym.backends.sim.app.flow import Moments, retransmit_delay, split_at
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.registry import get_spec

NS = "otel-demo"


class Shop:
    def __init__(self) -> None:
        self.backend = SimBackend()
        self.backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        self.baseline = self.backend.checkpoint()

    def reset(self) -> float:
        self.backend.restore(self.baseline)
        return self.now

    @property
    def now(self) -> float:
        return self.backend.clock.now()

    @property
    def store(self) -> Any:
        return self.backend.twin.cluster.store

    def advance(self, seconds: float) -> None:
        self.backend.advance(seconds)

    def value(self, expr: str) -> float:
        return float(sum(s.value for s in self.backend.twin.engine.instant(expr, self.now).data))

    def by(self, expr: str) -> dict[str, float]:
        return {",".join(s.metric.values()): s.value for s in self.backend.twin.engine.instant(expr, self.now).data}

    def set_flag(self, name: str, variant: str) -> None:
        cm = self.store.get("ConfigMap", NS, "flagd-config")
        doc = json.loads(cm["data"]["demo.flagd.json"])
        doc["flags"][name]["defaultVariant"] = variant
        cm["data"]["demo.flagd.json"] = json.dumps(doc)
        self.store.update(cm)

    def restart(self, *deployments: str) -> None:
        for name in deployments:
            d = self.store.get("Deployment", NS, name)
            d["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
                "kubectl.kubernetes.io/restartedAt"] = str(self.now)
            self.store.update(d)
        self.store.settle()

    def scale(self, deployment: str, replicas: int) -> None:
        d = self.store.get("Deployment", NS, deployment)
        d["spec"]["replicas"] = replicas
        self.store.update(d)
        self.store.settle()

    def chaos(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        self.store.create({"apiVersion": "chaos-mesh.org/v1alpha1", "kind": kind,
                           "metadata": {"name": name, "namespace": "chaos-mesh"}, "spec": spec})
        self.store.settle()

    def active_alerts(self) -> set[tuple[str, str]]:
        return {(a.labels.get("alertname", ""), a.labels.get("service_name") or a.labels.get("container", ""))
                for a in self.backend.twin.rules.alerts() if a.state in ("pending", "firing")}

    def pods(self, service: str) -> list[dict[str, Any]]:
        return [p for p in self.store.list("Pod", NS, label_selector=f"opentelemetry.io/name={service}")
                if not p["metadata"].get("deletionTimestamp")]

    def log_count(self, pod: str, container: str, seconds: float) -> int:
        return len(self.backend.twin.log_lines(NS, pod, container, self.now - seconds, self.now))


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    s = Shop()
    yield s
    s.backend.close()


def _selector(service: str) -> dict[str, Any]:
    return {"namespaces": [NS], "labelSelectors": {"opentelemetry.io/name": service}}


def test_ad_high_cpu_is_capped_at_its_limit_throttles_and_slows_its_caller(shop: Shop) -> None:
    shop.reset()
    shop.set_flag("adHighCpu", "on")
    shop.restart("flagd", "ad")
    alerts: set[tuple[str, str]] = set()
    wanted = {("HighRequestLatency", "frontend"), ("CPUThrottlingHigh", "ad")}
    for _ in range(60):
        shop.advance(30)
        alerts |= shop.active_alerts()
        if wanted <= alerts:
            break
    assert wanted <= alerts, alerts
    cpu = shop.value('sum(rate(container_cpu_usage_seconds_total{namespace="otel-demo", container="ad"}[2m]))')
    assert 0.12 < cpu <= 0.1501, cpu  # ITBench's 150m limit, not the four cores the flag's threads want
    throttled = shop.value('sum(rate(container_cpu_cfs_throttled_periods_total{container="ad"}[2m]))'
                           ' / sum(rate(container_cpu_cfs_periods_total{container="ad"}[2m]))')
    assert throttled > 0.9, throttled
    # kube-prometheus-stack's kubelet ServiceMonitor drops the throttled-seconds counter cAdvisor exports
    assert shop.by('container_cpu_cfs_throttled_seconds_total') == {}


def test_a_network_delay_beyond_envoys_route_timeout_gives_504s_and_error_spans(shop: Shop) -> None:
    shop.reset()
    shop.chaos("NetworkChaos", "catalog-delay", {"action": "delay", "mode": "all", "selector": _selector("product-catalog"),
                                                 "direction": "to", "delay": {"latency": "20s"}, "duration": "10m"})
    shop.advance(180)
    errors = shop.value('sum(rate(traces_span_metrics_calls_total{service_name="frontend-proxy", span_kind="SPAN_KIND_SERVER",'
                        ' status_code="STATUS_CODE_ERROR"}[2m]))')
    assert errors > 0.5, errors
    proxy = shop.pods("frontend-proxy")[0]["metadata"]["name"]
    lines = [line for _, line in shop.backend.twin.log_lines(NS, proxy, "frontend-proxy", shop.now - 60, shop.now)]
    assert any(" 504 UT upstream_response_timeout " in line for line in lines), lines[:3]


def test_partial_packet_loss_costs_retransmission_latency_without_cutting_the_path(shop: Shop) -> None:
    start = shop.reset()
    sel = 'service_name="frontend", span_name="grpc.oteldemo.ProductCatalogService/GetProduct"'
    mean = (f'sum(rate(traces_span_metrics_duration_milliseconds_sum{{{sel}}}[4m]))'
            f' / sum(rate(traces_span_metrics_duration_milliseconds_count{{{sel}}}[4m]))')
    before = shop.value(mean)
    shop.chaos("NetworkChaos", "catalog-loss", {"action": "loss", "mode": "all", "selector": _selector("product-catalog"),
                                                "direction": "to", "loss": {"loss": "25"}, "duration": "10m"})
    shop.advance(300)
    assert shop.now > start
    assert shop.value(mean) > before + 100, (before, shop.value(mean))
    assert shop.value(f'sum(rate(traces_span_metrics_calls_total{{{sel}, status_code="STATUS_CODE_UNSET"}}[2m]))') > 0


@pytest.mark.parametrize(("name", "spec", "added_ms"), [
    # a corrupted segment fails TCP's checksum and is retransmitted as a lost one is
    ("corrupt", {"action": "corrupt", "corrupt": {"corrupt": "25"}}, (100.0, 1e9)),
    # TCP discards duplicated segments
    ("duplicate", {"action": "duplicate", "duplicate": {"duplicate": "50"}}, (-1e9, 20.0)),
    # one netem qdisc of every parameter set, whichever action names it: the delay and the loss
    ("netem", {"action": "delay", "delay": {"latency": "200ms"}, "loss": {"loss": "25"}}, (300.0, 1e9)),
    # netem sends the reorder share of packets at once: half of product-catalog's packets leave undelayed,
    # on GetProduct's answer and on its own query to postgresql (2 x 1 s without the reorder)
    ("reorder", {"action": "delay", "delay": {"latency": "1000ms", "reorder": {"reorder": "50"}}}, (700.0, 1300.0)),
])
def test_netem_parameters_act_as_tcp_meets_them(shop: Shop, name: str, spec: dict[str, Any], added_ms: tuple[float, float]) -> None:
    shop.reset()
    sel = 'service_name="frontend", span_name="grpc.oteldemo.ProductCatalogService/GetProduct"'
    mean = (f'sum(rate(traces_span_metrics_duration_milliseconds_sum{{{sel}}}[4m]))'
            f' / sum(rate(traces_span_metrics_duration_milliseconds_count{{{sel}}}[4m]))')
    before = shop.value(mean)
    shop.chaos("NetworkChaos", f"catalog-{name}", {"mode": "all", "selector": _selector("product-catalog"),
                                                   "direction": "to", "duration": "10m", **spec})
    shop.advance(300)
    low, high = added_ms
    assert before + low < shop.value(mean) < before + high, (before, shop.value(mean))


def test_netem_jitter_spreads_the_delay_and_leaves_its_mean(shop: Shop) -> None:
    """netem draws each packet's delay uniformly within ``jitter`` of ``latency``: the p95 rises, the mean stays."""
    sel = 'service_name="frontend", span_name="grpc.oteldemo.ProductCatalogService/GetProduct"'
    p95 = f'histogram_quantile(0.95, sum by (le) (rate(traces_span_metrics_duration_milliseconds_bucket{{{sel}}}[4m])))'
    mean = (f'sum(rate(traces_span_metrics_duration_milliseconds_sum{{{sel}}}[4m]))'
            f' / sum(rate(traces_span_metrics_duration_milliseconds_count{{{sel}}}[4m]))')
    seen = {}
    for jitter in ("0ms", "400ms"):
        shop.reset()
        shop.chaos("NetworkChaos", "catalog-jitter", {"action": "delay", "mode": "all", "selector": _selector("product-catalog"),
                                                      "direction": "to", "duration": "10m", "delay": {"latency": "500ms", "jitter": jitter}})
        shop.advance(300)
        seen[jitter] = (shop.value(mean), shop.value(p95))
    (mean0, p95_0), (mean1, p95_1) = seen["0ms"], seen["400ms"]
    assert abs(mean1 - mean0) < 60 and p95_1 > p95_0 + 150, seen


def test_grpc_clients_stay_on_one_pod_while_envoy_spreads_its_requests(shop: Shop) -> None:
    shop.reset()
    shop.scale("recommendation", 3)
    shop.scale("frontend", 2)
    shop.advance(300)
    served = {p["metadata"]["name"]: shop.log_count(p["metadata"]["name"], "recommendation", 120) for p in shop.pods("recommendation")}
    busy = [n for n, lines in served.items() if lines > 0]
    assert len(served) == 3 and 1 <= len(busy) <= 2, served  # at most one recommendation pod per frontend pod
    fronts = {p["metadata"]["name"]: shop.log_count(p["metadata"]["name"], "frontend", 120) for p in shop.pods("frontend")}
    assert len(fronts) == 2 and min(fronts.values()) > 0, fronts


def test_an_oom_kill_fails_the_requests_in_flight_even_with_other_replicas_ready(shop: Shop) -> None:
    shop.reset()
    shop.scale("recommendation", 3)
    shop.advance(120)
    shop.set_flag("recommendationCacheFailure", "on")
    shop.restart("flagd")
    # frontend's error counter for its recommendation calls: a new series when the first ones fail, so
    # read the counter itself (increase() misses a series' first sample)
    failed = ('sum(traces_span_metrics_calls_total{service_name="frontend",'
              ' span_name="grpc.oteldemo.RecommendationService/ListRecommendations", status_code="STATUS_CODE_ERROR"})')
    killed_at, before = None, 0.0
    for _ in range(80):
        before = shop.value(failed)
        shop.advance(15)
        if shop.value('sum(kube_pod_container_status_restarts_total{namespace="otel-demo", container="recommendation"})') > 0:
            killed_at = shop.now
            break
    assert killed_at is not None, "the pinned recommendation pod was never OOMKilled"
    shop.advance(30)
    ready = shop.value('sum(kube_pod_status_ready{namespace="otel-demo", pod=~"recommendation-.*", condition="true"})')
    # the calls in flight in the killed process failed, though other replicas stayed ready
    assert ready >= 2 and shop.value(failed) > before == 0, (ready, before, shop.value(failed))


def test_turning_the_cache_flag_off_leaves_the_leaked_memory_until_the_process_restarts(shop: Shop) -> None:
    shop.reset()
    wss = 'max(container_memory_working_set_bytes{namespace="otel-demo", container="recommendation"}) / 2^20'
    base = shop.value(wss)
    shop.set_flag("recommendationCacheFailure", "on")
    shop.restart("flagd", "recommendation")
    restarts = 'sum(kube_pod_container_status_restarts_total{namespace="otel-demo", container="recommendation"})'
    for _ in range(80):
        shop.advance(15)
        if shop.value(wss) > base + 20:
            break
    grown = shop.value(wss)
    # grown well past its baseline, not yet killed at its 512Mi limit
    assert base + 20 < grown < 480 and shop.value(restarts) == 0, (base, grown)
    shop.set_flag("recommendationCacheFailure", "off")
    shop.restart("flagd")
    shop.advance(60)
    assert shop.value(wss) > 0.95 * grown, (grown, shop.value(wss))
    shop.restart("recommendation")
    shop.advance(60)
    assert shop.value(wss) < base + 30, (base, shop.value(wss))


# -- the mechanisms, one at a time --------------------------------------------------------------


def _demand(**kw: Any) -> CpuDemand:
    d: dict[str, Any] = {"cores": 1.0, "limit": math.inf, "node_cores": 4.0, "idle": 0.0, "busy_threads": 0.0,
                         "request_cpu_s": 0.1, "requests_per_s": 10.0, "cpu_per_request_s": 0.01, "wakeups_per_request": 1.0,
                         "jit_cold_factor": 1.0, "jit_warmup_cpu_s": 0.0}
    return CpuDemand(**{**d, **kw})


def test_fair_shares_fill_the_smallest_demands_first() -> None:
    assert fair_shares([4.0, 0.01], [4.0, 1.0], 1.0) == pytest.approx([0.99, 0.01])
    assert fair_shares([4.0, 1.0], [4.0, 1.0], 1.0) == pytest.approx([0.8, 0.2])


def test_a_single_threaded_runtime_never_uses_more_than_its_core_and_queues_beyond_it() -> None:
    state = CpuState()
    for _ in range(4):
        tick = cpu_tick(state, _demand(cores=1.0, request_cpu_s=1.5), 15.0)
        state = tick.state
        assert tick.usage_cores <= 1.0
    assert state.backlog_core_s == pytest.approx(4 * 15 * 0.5)
    assert state.wait_s > 20  # the queue grows without bound while demand exceeds the core


def test_a_saturated_quota_throttles_every_period_for_the_rest_of_it() -> None:
    tick = cpu_tick(CpuState(), _demand(cores=0.2, limit=0.2, request_cpu_s=0.5), 15.0)
    assert tick.usage_cores == pytest.approx(0.2)
    assert tick.cfs_throttled_periods_per_s == pytest.approx(tick.cfs_periods_per_s) == pytest.approx(10.0)
    assert tick.cfs_throttled_s_per_s == pytest.approx(0.8)  # one thread: runs 20 ms of every 100 ms
    idle = cpu_tick(CpuState(), _demand(cores=0.2, limit=0.2, request_cpu_s=0.01, requests_per_s=1.0), 15.0)
    assert idle.cfs_throttled_periods_per_s < 0.01 and idle.usage_cores < 0.02


def test_a_cold_jit_costs_cpu_until_the_compiler_has_had_its_share() -> None:
    state, ticks = CpuState(), 0
    while state.jit_cpu_s < 20.0 and ticks < 100:
        state = cpu_tick(state, _demand(jit_cold_factor=10.0, jit_warmup_cpu_s=20.0), 15.0).state
        ticks += 1
    assert 2 <= ticks < 100
    warm = cpu_tick(state, _demand(jit_cold_factor=10.0, jit_warmup_cpu_s=20.0), 15.0).state
    assert warm.slowdown < 1.2


def test_a_deadline_cuts_the_tail_of_a_latency_distribution() -> None:
    late, rest = split_at(Moments(1.0, 0.25), 2.0)
    assert 0.0 < late < 0.1 and rest.mean < 1.0
    assert split_at(Moments(20.0, 1.0), 15.0)[0] > 0.99
    assert split_at(Moments(0.001, 1e-8), 15.0)[0] == 0.0


def test_packet_loss_costs_retransmission_timeouts() -> None:
    assert retransmit_delay(0.0).mean == 0.0
    assert 0.1 < retransmit_delay(0.1).mean < retransmit_delay(0.3).mean
