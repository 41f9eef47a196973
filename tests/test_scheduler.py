"""Scheduling decisions and the FailedScheduling messages agents read in ``kubectl describe``."""

from __future__ import annotations

from kube_fixtures import NS, container, deployment, events, make_cluster, pods, run


def _pod(name, *, memory="128Mi", cpu="100m", **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
            "spec": {"containers": [container(cpu=cpu, memory=memory, limit=None)], **spec}}


def _scheduled(cluster, name):
    pod = cluster.store.get("Pod", NS, name)
    return pod["spec"].get("nodeName"), {c["type"]: c for c in pod["status"].get("conditions", [])}["PodScheduled"]


def test_insufficient_memory_message_matches_upstream():
    cluster, _ = make_cluster(_pod("big", memory="20Gi"))
    node, cond = _scheduled(cluster, "big")
    msg = ("0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are available: "
           "3 No preemption victims found for incoming pod..")
    assert node is None and cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"] == msg
    (ev,) = events(cluster, "FailedScheduling")
    assert ev["message"] == msg and ev["type"] == "Warning" and ev["source"]["component"] == "default-scheduler"
    assert cluster.store.get("Pod", NS, "big")["status"]["phase"] == "Pending"


def test_cordon_blocks_scheduling_until_uncordoned():
    cluster, clock = make_cluster()
    for n in cluster.store.list("Node"):
        n["spec"] = {"unschedulable": True}
        cluster.store.update(n)
    cluster.apply([_pod("web")])
    node, cond = _scheduled(cluster, "web")
    assert node is None
    assert cond["message"] == ("0/3 nodes are available: 3 node(s) were unschedulable. preemption: 0/3 nodes are "
                               "available: 3 Preemption is not helpful for scheduling..")
    n = cluster.store.get("Node", None, "node-2")
    n["spec"] = {}
    cluster.store.update(n)
    cluster.reconcile()
    assert _scheduled(cluster, "web")[0] == "node-2"
    assert events(cluster, "Scheduled")[0]["message"] == "Successfully assigned shop/web to node-2"


def test_mixed_reasons_are_counted_and_sorted():
    cluster, _ = make_cluster()
    n1 = cluster.store.get("Node", None, "node-1")
    n1["spec"] = {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}
    cluster.store.update(n1)
    cluster.apply([_pod("pinned", memory="20Gi", nodeSelector={"kubernetes.io/os": "linux"})])
    assert _scheduled(cluster, "pinned")[1]["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
        "2 Insufficient memory. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod..")


def test_node_selector_affinity_and_tolerations():
    cluster, _ = make_cluster()
    n3 = cluster.store.get("Node", None, "node-3")
    n3["metadata"]["labels"]["disk"] = "ssd"
    n3["spec"] = {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}
    cluster.store.update(n3)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}
    cluster.apply([
        _pod("no-toleration", affinity=affinity),
        _pod("tolerating", affinity=affinity,
             tolerations=[{"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}]),
    ])
    assert _scheduled(cluster, "tolerating")[0] == "node-3"
    node, cond = _scheduled(cluster, "no-toleration")
    assert node is None and cond["message"].startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: db}, "
        "2 node(s) didn't match Pod's node affinity/selector.")


def test_required_pod_anti_affinity_spreads_then_blocks():
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    d = deployment("web", 4)
    d["spec"]["template"]["spec"]["affinity"] = anti
    cluster, _ = make_cluster(d)
    placed = [p["spec"].get("nodeName") for p in pods(cluster, "web-")]
    assert sorted(n for n in placed if n) == ["node-1", "node-2", "node-3"] and placed.count(None) == 1
    (ev,) = events(cluster, "FailedScheduling")
    assert "3 node(s) didn't match pod anti-affinity rules" in ev["message"]


def test_pods_spread_over_nodes_and_respect_allocatable():
    cluster, _ = make_cluster(deployment("web", 6, containers=[container(cpu="1")]), cpu="2")
    placed = [p["spec"].get("nodeName") for p in pods(cluster, "web-")]
    assert sorted(placed) == ["node-1", "node-1", "node-2", "node-2", "node-3", "node-3"]
    d = cluster.store.get("Deployment", NS, "web")
    d["spec"]["replicas"] = 7
    cluster.store.update(d)
    cluster.reconcile()
    pending = [p for p in pods(cluster, "web-") if not p["spec"].get("nodeName")]
    assert len(pending) == 1
    assert "3 Insufficient cpu" in events(cluster, "FailedScheduling")[0]["message"]


def test_priority_class_preempts_lower_priority_pods():
    high = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "critical"},
            "value": 1000}
    cluster, clock = make_cluster(high, *[_pod(f"filler-{i}", memory="7Gi") for i in range(3)])
    run(cluster, clock, 15)
    cluster.apply([_pod("vip", memory="2Gi", priorityClassName="critical")])
    vip = cluster.store.get("Pod", NS, "vip")
    victims = [p for p in pods(cluster, "filler-") if p["metadata"].get("deletionTimestamp")]
    assert len(victims) == 1 and vip["status"]["nominatedNodeName"] == victims[0]["spec"]["nodeName"]
    assert events(cluster, "Preempted")[0]["message"].startswith(f"Preempted by pod {vip['metadata']['uid']} on node ")
    run(cluster, clock, 45)
    assert cluster.store.get("Pod", NS, "vip")["spec"]["nodeName"] == victims[0]["spec"]["nodeName"]


def test_equal_priority_does_not_preempt():
    cluster, clock = make_cluster(*[_pod(f"filler-{i}", memory="7Gi") for i in range(3)])
    cluster.apply([_pod("late", memory="2Gi")])
    assert not [p for p in pods(cluster) if p["metadata"].get("deletionTimestamp")]
    assert "No preemption victims found for incoming pod" in _scheduled(cluster, "late")[1]["message"]
