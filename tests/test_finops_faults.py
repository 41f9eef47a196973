"""FinOps faults on the twin with OpenCost and the autoscalers installed: each changes what it says through
the Kubernetes API, its cost shows in OpenCost's and kube-state-metrics' series, and removal (the
journal replayed) leaves the objects as they were; plus the budget-expression helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conftest import finops_backend
from itbench_gym.faults import FaultContext, FaultError, ObjectRef, fault_context, inject_faults, remove_faults
from itbench_gym.faults.catalogue import catalogue, created_objects, fault_args_problems
from itbench_gym.faults.context import restorable
from itbench_gym.paths import envs_dir
from itbench_gym.spec import FaultRef
from itbench_gym.spec.appfacts import load_app_facts
from itbench_gym.spec.budget import budget_threshold, with_threshold

NS = "otel-demo"
MI, GI = 2**20, 2**30
#: ITBench's budget alerts (alert-rules/otel_demo.yaml.j2, group opentelemetry_demo.cost, shipped commented out).
CPU_COST = ('sum by (namespace) (container_namespace_node:container_cpu_allocation_cost_per_node:avg5m'
            '{container!="load-generator", namespace="otel-demo"})')
RAM_COST = ('sum by (namespace) (container_namespace_node:container_memory_allocation_gigabytes_cost_per_node:avg5m'
            '{container!="load-generator", namespace="otel-demo"})')
BUDGETS = ObjectRef("monitoring.coreos.com/v1", "PrometheusRule", "budgets", "opencost")
BUDGET_RULE = {
    "apiVersion": BUDGETS.api_version, "kind": BUDGETS.kind, "metadata": {"name": BUDGETS.name, "namespace": BUDGETS.namespace},
    "spec": {"groups": [{"name": "opentelemetry_demo.cost", "interval": "1m", "rules": [
        {"alert": "CPUSpend", "expr": f"{CPU_COST} > 3", "for": "1m", "labels": {"severity": "warning"}},
        {"alert": "MemorySpend", "expr": f"{RAM_COST} > 9\n", "for": "1m", "labels": {"severity": "warning"}},
    ]}, {"name": "opentelemetry_demo.efficiency", "rules": [
        {"alert": "CPUEfficiency", "expr": "round(avg by (container, namespace) (container_namespace:container_cpu_usage_seconds_per_requests:"
                                           'ratio_irate1m{namespace="otel-demo"}) * 100) < 65', "for": "2m"},
    ]}]},
}


def _workload(name: str, namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace}}


def _budgets(alert: str, threshold: float) -> FaultRef:
    obj = {"apiVersion": BUDGETS.api_version, "kind": BUDGETS.kind, "metadata": {"name": BUDGETS.name, "namespace": BUDGETS.namespace}}
    return FaultRef("misconfigured-opencost-budget-alert", {"kubernetesObject": obj, "alert": alert, "threshold": threshold})


class FinOpsShop:
    """The Astronomy Shop with ITBench's FinOps and HPA install options on one twin, checkpointed healthy."""

    def __init__(self) -> None:
        self.backend, spec = finops_backend(hpa=True)
        self.app = load_app_facts(envs_dir() / spec.app)
        self._baseline = self.backend.checkpoint()

    def reset(self) -> FaultContext:
        """Back to the healthy baseline; a fault context on the admin credential (the harness' path)."""
        self.backend.restore(self._baseline)
        return fault_context(self.backend, self.app)

    @property
    def store(self) -> Any:
        return self.backend.twin.cluster.store

    def query(self, expr: str) -> list[Any]:
        return list(self.backend.twin.engine.instant(expr, self.backend.clock.now()).data)

    def by_pod(self, expr: str) -> dict[str, float]:
        return {s.metric["pod"]: float(s.value) for s in self.query(expr)}

    def advance_until(self, done: Callable[[], bool], limit: float, step: float = 5.0) -> float:
        """Let simulated time pass until ``done()``; the seconds it took (the test fails past ``limit``)."""
        start = self.backend.clock.now()
        while not done():
            assert self.backend.clock.now() - start < limit, f"not done within {limit} s"
            self.backend.advance(step)
        return self.backend.clock.now() - start

    def pods(self, prefix: str) -> list[dict[str, Any]]:
        return [p for p in self.store.list("Pod", NS) if p["metadata"]["name"].startswith(prefix)
                and not p["metadata"].get("deletionTimestamp")]


@pytest.fixture(scope="module")
def shop() -> Iterator[FinOpsShop]:
    twin = FinOpsShop()
    yield twin
    twin.backend.close()


def _rule_queries(shop: FinOpsShop, alert: str) -> list[tuple[str, str]]:
    """What the cluster's Prometheus loaded for ``alert``: (query, state) of each rule of that name."""
    return [(r["query"], r["state"]) for g in shop.backend.twin.rules.groups("alert", rule_names=[alert]) for r in g["rules"]]


# -- budget expressions --------------------------------------------------------------------------------


def test_budget_threshold_reads_and_replaces_the_trailing_comparison() -> None:
    assert budget_threshold(f"{CPU_COST} > 3") == (CPU_COST, 3.0)
    assert budget_threshold("sum(cost)>0.05\n") == ("sum(cost)", 0.05)
    assert budget_threshold("sum(cost) > 1e-2") == ("sum(cost)", 0.01)
    for other in ("sum(cost) >= 3", "sum(cost) > bool 3", "sum(cost) < 3", "sum(cost) > 3 unless on() vector(1)", "> 3", "sum(cost)"):
        assert budget_threshold(other) is None, other
    assert with_threshold(f"{CPU_COST} > 3", 0.5) == f"{CPU_COST} > 0.5"
    assert with_threshold("sum(cost) >  9\n", 12.0) == "sum(cost) >  12\n"
    assert with_threshold("sum(cost) > 3", 1e-5) == "sum(cost) > 1e-05"
    with pytest.raises(ValueError, match="not of the form"):
        with_threshold("sum(cost) < 3", 1)


# -- misconfigured budget alert ----------------------------------------------------------------------------


def test_budget_alert_gets_the_new_threshold_prometheus_reloads_it_and_removal_restores_it(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    shop.backend.twin.cluster.apply([BUDGET_RULE])
    shop.backend.advance(30)
    before = ctx.require(BUDGETS)
    assert _rule_queries(shop, "CPUSpend") == [(f"{CPU_COST} > 3", "inactive")]
    cost = sum(s.value for s in shop.query(CPU_COST))
    assert 0 < cost < 3  # the shop's CPU costs cents an hour: the budget of 3 never fires

    inject_faults([_budgets("CPUSpend", cost / 10)], ctx)
    rules = {r["alert"]: r["expr"] for g in ctx.require(BUDGETS)["spec"]["groups"] for r in g["rules"]}
    assert rules["CPUSpend"] == with_threshold(f"{CPU_COST} > 3", cost / 10)
    assert budget_threshold(rules["CPUSpend"]) == (CPU_COST, pytest.approx(cost / 10))
    assert rules["MemorySpend"] == f"{RAM_COST} > 9\n"  # the other alerts as they were
    shop.backend.advance(150)  # a reload, then `for: 1m` at the group's 1m interval
    assert _rule_queries(shop, "CPUSpend") == [(rules["CPUSpend"], "firing")]

    assert remove_faults(ctx) == ["restored PrometheusRule opencost/budgets"]
    assert restorable(ctx.require(BUDGETS)) == restorable(before)
    shop.backend.advance(30)
    assert [q for q, _ in _rule_queries(shop, "CPUSpend")] == [f"{CPU_COST} > 3"]
    ctx.close()


def test_budget_alert_errors_name_the_alerts_and_the_expected_form(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    shop.backend.twin.cluster.apply([BUDGET_RULE])
    with pytest.raises(FaultError, match=r"PrometheusRule opencost/budgets has no alert 'CPUSpent'; its alerts: CPUEfficiency, CPUSpend, MemorySpend"):
        inject_faults([_budgets("CPUSpent", 1)], ctx)
    with pytest.raises(FaultError, match=r"alert 'CPUEfficiency' .* is not a budget alert: its expr does not end in '> <number>'"):
        inject_faults([_budgets("CPUEfficiency", 1)], ctx)
    missing = _budgets("CPUSpend", 1)
    missing.args["kubernetesObject"]["metadata"]["name"] = "no-budgets"
    with pytest.raises(FaultError, match=r"PrometheusRule opencost/no-budgets does not exist"):
        inject_faults([missing], ctx)
    assert ctx.journal == []
    assert fault_args_problems("misconfigured-opencost-budget-alert", {**_budgets("CPUSpend", 0).args}) == [
        ("args.threshold", "0 is less than or equal to the minimum of 0")]
    ctx.close()


# -- over-provisioned requests -------------------------------------------------------------------------


def test_over_provisioned_requests_show_in_kube_state_metrics_and_opencost_allocation(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    cart = ObjectRef("apps/v1", "Deployment", "cart", NS)
    before = ctx.require(cart)
    assert before["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"memory": "160Mi"}}
    fault = FaultRef("over-provisioned-kubernetes-workload-container-resources",
                     {"kubernetesObject": _workload("cart"), "requests": {"cpu": "500m", "memory": "512Mi"}})
    inject_faults([fault], ctx)
    # the memory limit (160Mi) is raised to the new request: the API refuses requests above limits
    resources = ctx.require(cart)["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}}

    def new_pods() -> list[str]:
        pods = shop.pods("cart-")
        fresh = [p for p in pods if p["status"].get("phase") == "Running"
                 and (p["spec"]["containers"][0]["resources"].get("requests") or {}).get("cpu") == "500m"]
        return [p["metadata"]["name"] for p in fresh] if len(fresh) == len(pods) else []

    shop.advance_until(lambda: bool(new_pods()), 120)
    # the rolled-out pods (the autoscaler may add more: a new pod's start-up CPU counts against its new CPU request)
    pods = set(new_pods())
    shop.backend.advance(60)  # two OpenCost scrapes of the new pods
    selector = f'namespace="{NS}", container="cart", pod=~"{"|".join(pods)}"'
    assert shop.by_pod(f'kube_pod_container_resource_requests{{{selector}, resource="cpu"}}') == dict.fromkeys(pods, 0.5)
    assert shop.by_pod(f'kube_pod_container_resource_requests{{{selector}, resource="memory"}}') == dict.fromkeys(pods, 512 * MI)
    allocation = shop.by_pod(f"container_cpu_allocation{{{selector}}}")
    used = shop.by_pod(f"irate(container_cpu_usage_seconds_total{{{selector}}}[1m])")
    assert set(allocation) == pods and allocation == pytest.approx({p: max(0.5, used[p]) for p in pods}, rel=1e-9)
    memory = shop.by_pod(f"container_memory_allocation_bytes{{{selector}}}")
    working = shop.by_pod(f"container_memory_working_set_bytes{{{selector}}}")
    assert memory == pytest.approx({p: max(512.0 * MI, working[p]) for p in pods}, rel=1e-9)

    assert remove_faults(ctx) == ["restored Deployment otel-demo/cart"]
    assert ctx.require(cart)["spec"]["template"] == before["spec"]["template"]
    ctx.close()


def test_over_provisioning_checks_the_container(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    fault = FaultRef("over-provisioned-kubernetes-workload-container-resources",
                     {"kubernetesObject": _workload("cart"), "container": {"name": "kart"}, "requests": {"memory": "1Gi"}})
    with pytest.raises(FaultError, match=r"Deployment otel-demo/cart has no container 'kart'; containers: cart"):
        inject_faults([fault], ctx)
    assert ctx.journal == []
    ctx.close()


# -- autoscaler floor ------------------------------------------------------------------------------------


def test_raised_autoscaler_floor_scales_the_workload_and_removal_restores_it(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    hpa = ObjectRef("autoscaling/v2", "HorizontalPodAutoscaler", "payment", NS)
    payment = ObjectRef("apps/v1", "Deployment", "payment", NS)
    before = ctx.require(hpa)
    assert (before["spec"]["minReplicas"], before["spec"]["maxReplicas"], ctx.require(payment)["spec"]["replicas"]) == (1, 10, 1)
    inject_faults([FaultRef("raised-kubernetes-horizontal-pod-autoscaler-min-replicas",
                            {"kubernetesObject": _workload("payment"), "minReplicas": 3})], ctx)
    assert ctx.require(hpa)["spec"]["minReplicas"] == 3
    took = shop.advance_until(lambda: (ctx.require(payment)["status"].get("availableReplicas") or 0) == 3, 120)
    assert took <= 60 and ctx.require(payment)["spec"]["replicas"] == 3
    shop.backend.advance(30)
    min_replicas = f'kube_horizontalpodautoscaler_spec_min_replicas{{namespace="{NS}", horizontalpodautoscaler="payment"}}'
    assert [s.value for s in shop.query(min_replicas)] == [3.0]
    assert len(shop.by_pod(f'container_cpu_allocation{{namespace="{NS}", container="payment"}}')) == 3

    assert remove_faults(ctx) == ["restored HorizontalPodAutoscaler otel-demo/payment"]
    assert restorable(ctx.require(hpa))["spec"] == restorable(before)["spec"]
    ctx.close()


def test_autoscaler_floor_defaults_to_the_ceiling_and_refuses_one_above_it(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    fault = "raised-kubernetes-horizontal-pod-autoscaler-min-replicas"
    with pytest.raises(FaultError, match=r"minReplicas 11 is above the maxReplicas 10 of HorizontalPodAutoscaler otel-demo/currency"):
        inject_faults([FaultRef(fault, {"kubernetesObject": _workload("currency"), "minReplicas": 11})], ctx)
    with pytest.raises(FaultError, match=r"minReplicas 1 does not raise the minReplicas 1"):
        inject_faults([FaultRef(fault, {"kubernetesObject": _workload("currency"), "minReplicas": 1})], ctx)
    with pytest.raises(FaultError, match=r"no HorizontalPodAutoscaler in namespace otel-demo targets Deployment otel-demo/otel-collector"):
        inject_faults([FaultRef(fault, {"kubernetesObject": _workload("otel-collector")})], ctx)
    assert ctx.journal == []
    inject_faults([FaultRef(fault, {"kubernetesObject": _workload("currency")})], ctx)
    assert ctx.require(ObjectRef("autoscaling/v2", "HorizontalPodAutoscaler", "currency", NS))["spec"]["minReplicas"] == 10
    remove_faults(ctx)
    ctx.close()


# -- idle copy ---------------------------------------------------------------------------------------------


def test_idle_copy_runs_ready_pods_no_service_routes_to_and_opencost_prices(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    copy = ObjectRef("apps/v1", "Deployment", "cart-loadtest", NS)
    fault = FaultRef("idle-kubernetes-workload-copy", {"kubernetesObject": _workload("cart"), "name": copy.name, "replicas": 2})
    start = shop.backend.clock.now()
    inject_faults([fault], ctx)
    assert shop.backend.clock.now() - start <= 30  # the operation waited for its replicas
    deployment = ctx.require(copy)
    assert deployment["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": copy.name}}
    assert "load test copy of deployment/cart" in deployment["metadata"]["annotations"]["kubernetes.io/change-cause"]
    original = ctx.require(ObjectRef("apps/v1", "Deployment", "cart", NS))
    assert deployment["spec"]["template"]["spec"]["containers"] == original["spec"]["template"]["spec"]["containers"]
    pods = shop.pods("cart-loadtest-")
    assert len(pods) == 2
    for pod in pods:
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert pod["status"]["phase"] == "Running" and ready["Ready"] == "True"
        labels = pod["metadata"]["labels"]
        assert "opentelemetry.io/name" not in labels and labels["app.kubernetes.io/name"] == copy.name
        # what no selector uses is kept: the env's fieldRef to app.kubernetes.io/component still resolves
        assert labels["app.kubernetes.io/component"] == "cart"
    names = {p["metadata"]["name"] for p in pods}
    ips = {p["status"]["podIP"] for p in pods}
    for endpoints in shop.store.list("Endpoints", NS):
        for subset in endpoints.get("subsets") or []:
            for address in [*(subset.get("addresses") or []), *(subset.get("notReadyAddresses") or [])]:
                assert address.get("ip") not in ips and (address.get("targetRef") or {}).get("name") not in names
    for endpoint_slice in shop.store.list("EndpointSlice", NS):
        for endpoint in endpoint_slice.get("endpoints") or []:
            assert (endpoint.get("targetRef") or {}).get("name") not in names
    shop.backend.advance(60)
    memory = shop.by_pod(f'container_memory_allocation_bytes{{namespace="{NS}", pod=~"cart-loadtest-.*"}}')
    assert set(memory) == names and all(v >= 160 * MI for v in memory.values())  # the memory request the limit defaults
    assert len(shop.by_pod(f'container_cpu_allocation{{namespace="{NS}", pod=~"cart-loadtest-.*"}}')) == 2

    assert remove_faults(ctx) == ["deleted Deployment otel-demo/cart-loadtest"]
    assert ctx.get(copy) is None
    shop.advance_until(lambda: not shop.pods("cart-loadtest-"), 60)
    ctx.close()


def test_idle_copy_refuses_names_that_clash(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    fault = "idle-kubernetes-workload-copy"
    with pytest.raises(FaultError, match=r"Deployment otel-demo/payment already exists"):
        inject_faults([FaultRef(fault, {"kubernetesObject": _workload("cart"), "name": "payment", "replicas": 1})], ctx)
    # the collector's pods carry app.kubernetes.io/name=opentelemetry-collector: the copy's selector would take them in
    with pytest.raises(FaultError, match=r"already carry app.kubernetes.io/name=opentelemetry-collector"):
        inject_faults([FaultRef(fault, {"kubernetesObject": _workload("otel-collector"), "name": "opentelemetry-collector",
                                        "replicas": 1})], ctx)
    assert ctx.journal == []
    made = created_objects(catalogue()[fault], {"kubernetesObject": _workload("cart"), "name": "cart-loadtest", "replicas": 1})
    assert [(m.kind, m.name, m.namespace, m.spawns) for m in made] == [("Deployment", "cart-loadtest", NS, "Pod")]
    ctx.close()


# -- orphaned claim ----------------------------------------------------------------------------------------


def test_orphaned_claim_stays_bound_to_a_priced_volume_no_pod_mounts(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    volumes_before = {v["metadata"]["name"] for v in shop.store.list("PersistentVolume")}
    claim = ObjectRef("v1", "PersistentVolumeClaim", "reports-archive", NS)
    start = shop.backend.clock.now()
    inject_faults([FaultRef("orphaned-kubernetes-persistent-volume-claim", {"namespace": NS, "name": claim.name, "storage": "20Gi"})], ctx)
    took = shop.backend.clock.now() - start
    assert took <= 10  # the twin schedules the consumer, provisions and binds within one step
    bound = ctx.require(claim)
    assert bound["status"]["phase"] == "Bound" and bound["spec"]["storageClassName"] == "standard"  # the default class
    volume = bound["spec"]["volumeName"]
    pv = ctx.require(ObjectRef("v1", "PersistentVolume", volume))
    assert pv["spec"]["claimRef"]["name"] == claim.name and pv["spec"]["capacity"] == {"storage": "20Gi"}
    assert ctx.get(ObjectRef("v1", "Pod", f"{claim.name}-init", NS)) is None
    mounting = [p["metadata"]["name"] for p in shop.store.list("Pod")
                if any((v.get("persistentVolumeClaim") or {}).get("claimName") == claim.name for v in p["spec"].get("volumes") or [])]
    assert mounting == []

    shop.backend.advance(60)
    assert [s.value for s in shop.query(f'pv_hourly_cost{{persistentvolume="{volume}"}}')] == [pytest.approx(0.003425)]
    # kube-state-metrics and OpenCost's own collector both publish the volume's capacity
    capacity = shop.query(f'kube_persistentvolume_capacity_bytes{{persistentvolume="{volume}"}}')
    assert sorted((s.metric["job"], s.value) for s in capacity) == [("kube-state-metrics", 20.0 * GI), ("opencost", 20.0 * GI)]
    ref = f'kube_persistentvolume_claim_ref{{persistentvolume="{volume}", name="{claim.name}", claim_namespace="{NS}"}}'
    assert [s.value for s in shop.query(ref)] == [1.0]
    info = f'kube_persistentvolumeclaim_info{{namespace="{NS}", persistentvolumeclaim="{claim.name}", volumename="{volume}"}}'
    assert sorted((s.metric["job"], s.value) for s in shop.query(info)) == [("kube-state-metrics", 1.0), ("opencost", 1.0)]
    assert shop.query(f'pod_pvc_allocation{{persistentvolumeclaim="{claim.name}"}}') == []  # no pod uses it
    # what the orphan costs an hour: OpenCost's per-GiB price times the volume's size (one exporter's capacity:
    # both would make the match ambiguous)
    cost = (f'sum(pv_hourly_cost{{persistentvolume="{volume}"}} * on (persistentvolume) '
            'kube_persistentvolume_capacity_bytes{job="kube-state-metrics"} / 1024^3)')
    assert [s.value for s in shop.query(cost)] == [pytest.approx(20 * 0.003425)]

    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"  # the class's reclaimPolicy: the volume goes with its claim
    # removal deletes only the claim: the released volume is deleted by its reclaim policy, not by the fault
    assert remove_faults(ctx) == ["deleted PersistentVolumeClaim otel-demo/reports-archive"]
    assert ctx.get(claim) is None
    shop.advance_until(lambda: ctx.get(ObjectRef("v1", "PersistentVolume", volume)) is None, 15)
    assert {v["metadata"]["name"] for v in shop.store.list("PersistentVolume")} == volumes_before
    ctx.close()


def test_orphaned_claim_needs_a_storage_class(shop: FinOpsShop) -> None:
    ctx = shop.reset()
    args = {"namespace": NS, "name": "reports-archive", "storage": "1Gi", "storageClassName": "fast"}
    with pytest.raises(FaultError, match=r"no StorageClass 'fast'; classes: standard"):
        inject_faults([FaultRef("orphaned-kubernetes-persistent-volume-claim", args)], ctx)
    with pytest.raises(FaultError, match=r"namespace 'billing' does not exist"):
        inject_faults([FaultRef("orphaned-kubernetes-persistent-volume-claim", {**args, "namespace": "billing"})], ctx)
    assert ctx.journal == []
    ctx.close()
