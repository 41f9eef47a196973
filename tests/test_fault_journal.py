"""Removing faults replays the injection journal backwards through the Kubernetes API, and waiters
behave like ITBench's (restart, scale with its wait, delete pods, pause)."""

from __future__ import annotations

from typing import Any

from conftest import ShopTwin
from itbench_gym.faults import ObjectRef, inject_faults, remove_faults
from itbench_gym.spec import FaultRef

NS = "otel-demo"
FLAGD = ObjectRef("v1", "ConfigMap", "flagd-config", NS)
CART = ObjectRef("apps/v1", "Deployment", "cart", NS)


def _workload(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS}}


def test_removal_restores_changed_objects_and_deletes_created_ones(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    before = ctx.require(FLAGD)["data"]
    log = inject_faults([
        FaultRef("opentelemetry-demo-feature-flag", {"flag": {"name": "cartFailure", "state": "on"},
                                                      "kubernetesObject": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                           "metadata": {"name": "flagd-config", "namespace": NS}}}),
        FaultRef("scheduled-chaos-mesh-experiment", {
            "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
                                 "metadata": {"name": "cart-kill", "namespace": "chaos-mesh"}},
            "scheduleSpec": {"type": "PodChaos", "podChaos": {"action": "pod-kill", "mode": "one",
                                                              "selector": {"labelSelectors": {"opentelemetry.io/name": "cart"},
                                                                           "namespaces": [NS]}}}}),
    ], ctx)
    assert len(log) == 2 and ctx.require(FLAGD)["data"] != before
    schedule = ObjectRef("chaos-mesh.org/v1alpha1", "Schedule", "cart-kill", "chaos-mesh")
    assert ctx.get(schedule) is not None
    undone = remove_faults(ctx)
    assert undone == ["deleted Schedule chaos-mesh/cart-kill", "restored ConfigMap otel-demo/flagd-config"]
    assert ctx.require(FLAGD)["data"] == before
    assert ctx.get(schedule) is None
    ctx.close()


def test_waiters_are_not_reverted_and_delete_pods_replaces_every_pod(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    old = {p["metadata"]["name"] for p in shop_twin.store.list("Pod", NS, label_selector="opentelemetry.io/name=cart")}
    start = shop_twin.backend.clock.now()
    inject_faults([FaultRef("scale-kubernetes-workload", {"kubernetesObject": _workload("cart"), "replicas": 2}),
                   FaultRef("delete-workload-pods", {"kubernetesObject": _workload("cart")}),
                   FaultRef("pause-execution", {"seconds": 30})], ctx)
    assert shop_twin.backend.clock.now() - start >= 30
    assert ctx.require(CART)["spec"]["replicas"] == 2
    pods = {p["metadata"]["name"] for p in shop_twin.store.list("Pod", NS, label_selector="opentelemetry.io/name=cart")
            if not p["metadata"].get("deletionTimestamp")}
    assert len(pods) == 2 and not pods & old
    assert ctx.journal == [] and remove_faults(ctx) == []
    ctx.close()


def test_every_definition_has_an_operation() -> None:
    from itbench_gym.faults import catalogue
    from itbench_gym.faults.operations import OPERATIONS

    assert {d.id: d.operation for d in catalogue().values() if d.operation not in OPERATIONS} == {}
