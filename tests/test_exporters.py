"""kube-state-metrics and cAdvisor samples derived from cluster state."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from itbench_gym.backends.sim.app import AppModel
from itbench_gym.backends.sim.exporters import kube_state_metrics
from itbench_gym.backends.sim.exporters.kube_state import KubeStateMetrics
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.clock import SimClock
from test_app_model import APP, _run, _setup


@pytest.fixture(scope="module")
def base_model() -> AppModel:
    return AppModel.load(APP, seed=7)


def test_exporters_report_restarts_and_last_termination(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _run(model, cluster, clock, 1)
    pod = next(p.name for p in model._view.by_service["cart"])
    cluster.kill_container("otel-demo", pod, "cart", reason="OOMKilled", exit_code=137)
    samples = _run(model, cluster, clock, 1)
    assert not any(lb["__name__"].startswith("kube_") for lb, _ in samples)  # kube-state-metrics is a scrape target, not the app
    by = {(lb["__name__"], lb.get("pod"), lb.get("reason"), lb.get("container")): v
          for lb, v in samples + kube_state_metrics(cluster.store)}
    assert by[("kube_pod_container_status_restarts_total", pod, None, "cart")] == 1
    assert by[("kube_pod_container_status_last_terminated_reason", pod, "OOMKilled", "cart")] == 1
    assert by[("kube_pod_container_status_waiting_reason", pod, "CrashLoopBackOff", "cart")] == 1
    limits = [v for lb, v in samples if lb["__name__"] == "container_spec_memory_limit_bytes" and lb["container"] == "checkout"]
    assert limits == [20 * 2**20]
    cpu = [lb for lb, _ in samples if lb["__name__"] == "container_cpu_usage_seconds_total"]
    assert cpu and all(lb["job"] == "kubelet" and lb["namespace"] == "otel-demo" for lb in cpu)


def test_kube_state_reports_hpa_and_deployment_replicas(base_model: AppModel) -> None:
    _, cluster, _ = _setup(base_model)
    cluster.store.create({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                          "metadata": {"name": "frontend", "namespace": "otel-demo"},
                          "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"},
                                   "minReplicas": 1, "maxReplicas": 3,
                                   "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 20}}}]}})
    by = {(lb["__name__"], lb.get("horizontalpodautoscaler") or lb.get("deployment")): (lb, v) for lb, v in kube_state_metrics(cluster.store)}
    labels, value = by[("kube_horizontalpodautoscaler_spec_max_replicas", "frontend")]
    assert value == 3 and labels["namespace"] == "otel-demo" and "job" not in labels  # the scrape adds job/instance
    assert by[("kube_horizontalpodautoscaler_spec_target_metric", "frontend")][1] == 20
    assert by[("kube_deployment_spec_replicas", "checkout")][1] == 1


def test_kube_state_keeps_its_series_through_a_restore_and_follows_the_store_back() -> None:
    """Series are kept per stored object, not per resourceVersion: after a rewind the store hands the
    same versions out again, and an object written anew under a version the other timeline already
    used must show its own values, while every object both timelines hold keeps its series list."""
    store = KubeCluster(SimClock(), seed=0).store
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "otel-demo"}})
    for name in ("ad", "cart"):
        store.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "otel-demo"},
                      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                               "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": name, "image": name}]}}}})
    ksm = KubeStateMetrics()
    snap = store.snapshot()
    before = {id(run) for run in ksm.runs(store)}

    def scale(replicas: int) -> dict[str, float]:
        deployment = copy.deepcopy(store.get("Deployment", "otel-demo", "ad"))
        deployment["spec"]["replicas"] = replicas
        store.update(deployment)
        return {lb["deployment"]: v for run in ksm.runs(store) for lb, v in run if lb["__name__"] == "kube_deployment_spec_replicas"}

    assert scale(2) == {"ad": 2.0, "cart": 1.0}
    version = store.get("Deployment", "otel-demo", "ad")["metadata"]["resourceVersion"]
    store.restore(snap)
    assert scale(3) == {"ad": 3.0, "cart": 1.0}
    assert store.get("Deployment", "otel-demo", "ad")["metadata"]["resourceVersion"] == version
    changed = [run for run in ksm.runs(store) if id(run) not in before]
    assert len(changed) == 1 and {lb.get("deployment") for lb, _ in changed[0]} == {"ad"}


def test_kube_state_hands_out_the_same_label_dicts_when_a_changed_object_keeps_its_series() -> None:
    """A write that changes values only (a Deployment scaled) gives new values under the label dicts of
    before, which the scrape cache recognises by identity; a series whose labels change (a Service's
    type) gets a new dict, and its object's other series keep theirs."""
    store = KubeCluster(SimClock(), seed=0).store
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "otel-demo"}})
    store.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ad", "namespace": "otel-demo"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "ad"}},
                           "template": {"metadata": {"labels": {"app": "ad"}}, "spec": {"containers": [{"name": "ad", "image": "ad"}]}}}})
    store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ad", "namespace": "otel-demo"},
                  "spec": {"selector": {"app": "ad"}, "ports": [{"port": 8080}]}})
    ksm = KubeStateMetrics()

    def series(label: str) -> dict[str, tuple[dict[str, str], float]]:
        return {lb["__name__"]: (lb, v) for run in ksm.runs(store) for lb, v in run if lb.get(label) == "ad"}

    def write(kind: str, change: Any) -> None:
        obj = copy.deepcopy(store.get(kind, "otel-demo", "ad"))
        change(obj)
        store.update(obj)

    before = series("deployment")
    write("Deployment", lambda d: d["spec"].update(replicas=4))
    after = series("deployment")
    assert after["kube_deployment_spec_replicas"][1] == 4.0 and after.keys() == before.keys()
    assert all(after[name][0] is labels for name, (labels, _) in before.items())
    service = series("service")
    write("Service", lambda s: s["spec"].update(type="NodePort"))
    changed = series("service")
    assert changed["kube_service_spec_type"][0]["type"] == "NodePort"
    assert changed["kube_service_spec_type"][0] is not service["kube_service_spec_type"][0]
    assert changed["kube_service_labels"][0] is service["kube_service_labels"][0]
