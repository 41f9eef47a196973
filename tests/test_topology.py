"""Typed topology: ITBench topology-monitor relations from plain Kubernetes objects."""

from __future__ import annotations

import json

import pytest

from itbench_gym.topology import TopologyError, build_topology, topology_to_text

NS = "otel-demo"


def workload(name: str, suffix: str, *, mounts: tuple[str, ...] = (), claims: tuple[str, ...] = ()) -> list[dict]:
    labels = {"opentelemetry.io/name": name}
    rs, pod = f"{name}-6d5f9c8b7", f"{name}-6d5f9c8b7-{suffix}"
    volumes = [{"name": m, "configMap": {"name": m}} for m in mounts]
    volumes += [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    return [
        {"kind": "Deployment", "metadata": {"name": name, "namespace": NS, "labels": labels}},
        {"kind": "ReplicaSet", "metadata": {"name": rs, "namespace": NS,
                                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}]}},
        {"kind": "Pod", "metadata": {"name": pod, "namespace": NS, "labels": labels,
                                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs}]},
         "spec": {"nodeName": "worker-1", "volumes": volumes}},
        {"kind": "Service", "metadata": {"name": name, "namespace": NS},
         "spec": {"selector": labels, "ports": [{"port": 8080, "protocol": "TCP"}]}},
        {"kind": "Endpoints", "metadata": {"name": name, "namespace": NS},
         "subsets": [{"addresses": [{"targetRef": {"kind": "Pod", "name": pod}}], "ports": [{"port": 8080, "protocol": "TCP"}]}]},
    ]


def cluster() -> list[dict]:
    objs = [
        {"kind": "Namespace", "metadata": {"name": NS}},
        {"kind": "Namespace", "metadata": {"name": "chaos-mesh"}},
        {"kind": "Node", "metadata": {"name": "worker-1"}},
        {"kind": "Node", "metadata": {"name": "worker-2"}},
        {"kind": "ConfigMap", "metadata": {"name": "flagd-config", "namespace": NS}},
        {"kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": NS}},
        {"kind": "PersistentVolume", "metadata": {"name": "pv-1"}, "spec": {"claimRef": {"name": "data", "namespace": NS}}},
        {"kind": "Pod", "metadata": {"name": "chaos-daemon-x2x4z", "namespace": "chaos-mesh"}, "spec": {"nodeName": "worker-2"}},
        {"kind": "Event", "metadata": {"name": "ev", "namespace": NS}},
    ]
    objs += workload("frontend", "kx2lp")
    objs += workload("flagd", "kx2lq", mounts=("flagd-config",))
    objs += workload("postgresql", "kx2lr", claims=("data",))
    return objs


def edge_types(graph, u: str, v: str) -> set[str]:
    return {d["verbose_type"] for d in graph.get_edge_data(u, v, default={}).values()}


def test_relations_follow_the_topology_monitor() -> None:
    g = build_topology(cluster(), call_graph=[("frontend", "flagd"), ("frontend", "missing")])
    pod = f"{NS}/Pod/frontend-6d5f9c8b7-kx2lp"
    assert edge_types(g, f"{NS}/Deployment/frontend", f"{NS}/ReplicaSet/frontend-6d5f9c8b7") == {"DEPLOYMENT_OWNS_REPLICASET"}
    assert edge_types(g, f"{NS}/ReplicaSet/frontend-6d5f9c8b7", pod) == {"REPLICASET_OWNS_POD"}
    assert edge_types(g, "Namespace/otel-demo", f"{NS}/Deployment/frontend") == {"NAMESPACE_OWNS_DEPLOYMENT"}
    assert edge_types(g, "K8Cluster/cluster", "Namespace/otel-demo") == {"CLUSTER_OWN_NAMESPACE"}
    assert edge_types(g, "K8Cluster/cluster", "Node/worker-1") == {"CLUSTER_OWN_RESOURCE"}
    assert edge_types(g, "Node/worker-1", pod) == {"NODE_RUNS_POD"}
    assert edge_types(g, f"{NS}/Service/frontend", pod) == {"SERVICE_SELECTS_POD"}
    assert edge_types(g, f"{NS}/Service/frontend", f"{NS}/Endpoints/frontend") == {"SERVICE_HAS_ENDPOINTS"}
    assert edge_types(g, f"{NS}/Endpoints/frontend", pod) == {"ENDPOINTS_TARGET_POD"}
    assert edge_types(g, f"{NS}/Service/frontend", f"{NS}/Port/frontend-8080-TCP") == {"SERVICE_OWNS_PORT"}
    assert edge_types(g, pod, f"{NS}/Port/frontend-6d5f9c8b7-kx2lp-8080-TCP") == {"POD_OWNS_PORT"}
    assert edge_types(g, f"{NS}/Port/frontend-8080-TCP", f"{NS}/Port/frontend-6d5f9c8b7-kx2lp-8080-TCP") == {"SERVICE_TARGETS_PORT"}
    assert edge_types(g, f"{NS}/Pod/flagd-6d5f9c8b7-kx2lq", f"{NS}/ConfigMap/flagd-config") == {"POD_MOUNTS_CONFIGMAP"}
    assert edge_types(g, f"{NS}/Pod/postgresql-6d5f9c8b7-kx2lr", f"{NS}/PersistentVolumeClaim/data") == {"POD_MOUNTS_PVC"}
    assert edge_types(g, "PersistentVolume/pv-1", f"{NS}/PersistentVolumeClaim/data") == {"PV_BOUND_TO_PVC"}
    assert edge_types(g, f"{NS}/Service/frontend", f"{NS}/Service/flagd") == {"CALLS"}
    # Endpoints are reached through their Service, not owned by the namespace; events are left out.
    assert not g.has_edge("Namespace/otel-demo", f"{NS}/Endpoints/frontend")
    assert f"{NS}/Event/ev" not in g
    assert f"{NS}/Service/missing" not in g


def test_namespace_restriction_hides_other_namespaces() -> None:
    g = build_topology(cluster(), namespace=NS)
    assert "Namespace/chaos-mesh" not in g
    assert "chaos-mesh/Pod/chaos-daemon-x2x4z" not in g
    assert "Node/worker-1" in g  # runs otel-demo pods
    assert "Node/worker-2" not in g  # runs only the hidden namespace's pod
    assert "PersistentVolume/pv-1" in g


def test_text_rendering_focus_and_errors() -> None:
    g = build_topology(cluster(), namespace=NS)
    doc = json.loads(topology_to_text(g, focus="flagd-config", depth=1))
    assert doc["focus"] == f"{NS}/ConfigMap/flagd-config"
    assert {n["id"] for n in doc["nodes"]} == {f"{NS}/ConfigMap/flagd-config", "Namespace/otel-demo", f"{NS}/Pod/flagd-6d5f9c8b7-kx2lq"}
    assert {"source": f"{NS}/Pod/flagd-6d5f9c8b7-kx2lq", "target": f"{NS}/ConfigMap/flagd-config", "type": "POD_MOUNTS_CONFIGMAP"} in doc["edges"]
    assert topology_to_text(g) == topology_to_text(build_topology(reversed(cluster()), namespace=NS))  # order-independent
    with pytest.raises(TopologyError, match="ambiguous"):
        topology_to_text(g, focus="frontend")  # Deployment and Service
    with pytest.raises(TopologyError, match="Did you mean"):
        topology_to_text(g, focus="otel-demo/Service/frontnd")
    with pytest.raises(TopologyError, match="depth"):
        topology_to_text(g, focus="Service/frontend", depth=-1)
    with pytest.raises(TopologyError, match="without kind"):
        build_topology([{"metadata": {"name": "x"}}])
