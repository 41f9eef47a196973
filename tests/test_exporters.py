"""kube-state-metrics and cAdvisor samples derived from cluster state."""

from __future__ import annotations

import pytest

from itbench_gym.backends.sim.app import AppModel
from itbench_gym.backends.sim.exporters import kube_state_metrics
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
