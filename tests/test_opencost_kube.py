"""OpenCost's Kubernetes series (``pkg/metrics`` collectors) computed from a small store: names, label
sets and values as upstream writes them, and the exporter's EMIT_* switches."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from itbench_gym.backends.sim.app.cluster_view import list_kind
from itbench_gym.backends.sim.exporters.opencost_kube import OpenCostKubeMetrics, Sample, kube_metrics
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.clock import SimClock

NS = "shop"
Obj = dict[str, Any]

#: Always registered: the "kubecost controller" collectors.
CONTROLLERS = {"service_selector_labels", "deployment_match_labels", "statefulSet_match_labels"}
NODE = {"kube_node_status_capacity", "kube_node_status_capacity_cpu_cores", "kube_node_status_capacity_memory_bytes",
        "kube_node_status_allocatable", "kube_node_status_allocatable_cpu_cores",
        "kube_node_status_allocatable_memory_bytes", "kube_node_labels"}
POD = {"kube_pod_labels", "kube_pod_owner", "kube_pod_container_status_running",
       "kube_pod_container_status_terminated_reason", "kube_pod_container_resource_requests"}
#: What the exporter emits with no EMIT_* variable set.
DEFAULT = CONTROLLERS | NODE | POD | {
    "kube_namespace_labels", "kube_persistentvolume_capacity_bytes", "kubecost_pv_info",
    "kube_persistentvolumeclaim_info", "kube_persistentvolumeclaim_resource_requests_storage_bytes", "kube_job_status_failed"}
DEPRECATED = {"kube_pod_container_resource_limits", "kube_pod_container_resource_limits_memory_bytes",
              "kube_pod_container_resource_limits_cpu_cores", "kube_pod_container_status_restarts_total",
              "kube_node_status_condition", "kube_deployment_status_replicas_available", "kube_deployment_spec_replicas",
              "kube_persistentvolume_status_phase", "kube_pod_status_phase"}


def _meta(name: str, **extra: Any) -> Obj:
    return {"name": name, "namespace": NS, **extra}


def _template(labels: dict[str, str]) -> Obj:
    return {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}


def _job(name: str, failed: int, reason: str | None) -> Obj:
    status: Obj = {"failed": failed}
    if reason is not None:
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name),
            "spec": {"template": {**_template({"job": name}), "spec": {"restartPolicy": "Never",
                                                                        "containers": [{"name": "main", "image": "busybox"}]}}},
            "status": status}


OBJECTS: list[Obj] = [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1", "node.kubernetes.io/instance-type": "e2"}},
     "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "hugepages-2Mi": "0", "nvidia.com/gpu": "2",
                             "example": "3"},
                "allocatable": {"cpu": "3920m", "memory": "7.5Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]}},
    {"apiVersion": "v1", "kind": "Namespace",
     "metadata": {"name": NS, "labels": {"team": "shop", "kubernetes.io/metadata.name": NS}, "annotations": {"owner": "sre"}}},
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": _meta("web-1", labels={"app.kubernetes.io/name": "web", "tier": "front-end", "app-kubernetes.io/name": "other"},
                       annotations={"prometheus.io/scrape": "true"},
                       ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "u1", "controller": True},
                                        {"apiVersion": "v1", "kind": "ConfigMap", "name": "cfg", "uid": "u2", "controller": False},
                                        {"apiVersion": "v1", "kind": "Secret", "name": "sec", "uid": "u3"}]),
     "spec": {"nodeName": "node-1",
              "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
              "containers": [
                  {"name": "main", "image": "nginx:1.27",
                   "resources": {"requests": {"cpu": "100m", "memory": "1.1Ki", "nvidia.com/gpu": "1", "hugepages-2Mi": "2Mi"},
                                 "limits": {"cpu": "1.0001", "memory": "256Mi", "nvidia.com/gpu": "1", "hugepages-2Mi": "2Mi"}}},
                  {"name": "side", "image": "envoy:1", "resources": {"requests": {"cpu": "0.5"}}}]},
     "status": {"phase": "Running",
                "containerStatuses": [{"name": "main", "restartCount": 3, "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}},
                                      {"name": "side", "restartCount": 0,
                                       "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}},
    {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("pending"),
     "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}, "status": {"phase": "Pending"}},
    {"apiVersion": "v1", "kind": "Service", "metadata": _meta("web"),
     "spec": {"selector": {"app.kubernetes.io/name": "web"}, "ports": [{"port": 80}]}},
    {"apiVersion": "v1", "kind": "Service", "metadata": _meta("external"), "spec": {"ports": [{"port": 443}]}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("web"),
     "spec": {"replicas": 2, "selector": {"matchLabels": {"app.kubernetes.io/name": "web"}},
              "template": _template({"app.kubernetes.io/name": "web"})},
     "status": {"availableReplicas": 1}},
    {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _meta("db"),
     "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db", "role.x/y": "primary"}},
              "template": _template({"app": "db", "role.x/y": "primary"})}},
    {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
     "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
              "csi": {"driver": "pd.csi.storage.gke.io", "volumeHandle": "projects/p/disks/d1"}},
     "status": {"phase": "Bound"}},
    {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-2"},
     "spec": {"capacity": {"storage": "2.5"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}},
     "status": {"phase": "Available"}},
    {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
     "metadata": _meta("data", annotations={"volume.beta.kubernetes.io/storage-class": "legacy"}),
     "spec": {"storageClassName": "standard", "volumeName": "pv-1", "accessModes": ["ReadWriteOnce"],
              "resources": {"requests": {"storage": "1G"}}}},
    _job("ok", 0, None),
    _job("backoff", 2, "BackoffLimitExceeded"),
    _job("deadline", 1, "DeadlineExceeded"),
]


@pytest.fixture(scope="module")
def store() -> Any:
    store = KubeCluster(SimClock(), seed=0).store
    for obj in OBJECTS:  # created as they are: no controller runs, so the statuses stay as written
        store.create(copy.deepcopy(obj))
    return store


def _metrics(store: Any, **env: str) -> list[Sample]:
    return kube_metrics(store, env.get)


def _names(samples: list[Sample]) -> set[str]:
    return {labels["__name__"] for labels, _ in samples}


def _find(samples: list[Sample], name: str, **match: str) -> list[Sample]:
    return [(labels, v) for labels, v in samples if labels["__name__"] == name and all(labels.get(k) == m for k, m in match.items())]


def _one(samples: list[Sample], name: str, **match: str) -> Sample:
    found = _find(samples, name, **match)
    assert len(found) == 1, found
    return found[0]


def _uid(store: Any, name: str, kind: str = "Pod", namespace: str | None = NS) -> str:
    uid: str = store.get(kind, namespace, name)["metadata"]["uid"]
    assert uid
    return uid


def _without_name(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != "__name__"}


def test_the_default_environment_emits_the_ksm_v1_set_without_deprecated_names(store: Any) -> None:
    samples = _metrics(store)
    assert _names(samples) == DEFAULT
    assert not _names(samples) & DEPRECATED


def test_pod_labels_are_sanitized_and_prefixed(store: Any) -> None:
    labels, value = _one(_metrics(store), "kube_pod_labels", pod="web-1")
    # "app-kubernetes.io/name" and "app.kubernetes.io/name" sanitize alike: one label, the value of the key sorting last.
    assert _without_name(labels) == {"label_app_kubernetes_io_name": "web", "label_tier": "front-end",
                                     "namespace": NS, "pod": "web-1", "uid": _uid(store, "web-1")}
    assert value == 1
    assert _without_name(_one(_metrics(store), "kube_pod_labels", pod="pending")[0]) == {
        "namespace": NS, "pod": "pending", "uid": _uid(store, "pending")}


def test_a_pod_owner_series_per_owner_reference_says_controller_when_the_field_is_set(store: Any) -> None:
    owners = {lb["owner_name"]: _without_name(lb) for lb, _ in _find(_metrics(store), "kube_pod_owner", pod="web-1")}
    # uid: the pod's own, not the owner reference's ("u1")
    assert owners["web-abc"] == {"namespace": NS, "pod": "web-1", "uid": _uid(store, "web-1"), "owner_name": "web-abc",
                                 "owner_kind": "ReplicaSet", "owner_is_controller": "true"}
    assert owners["cfg"]["owner_is_controller"] == "true"  # controller: false is still a set pointer upstream
    assert owners["sec"]["owner_is_controller"] == "false"
    assert not _find(_metrics(store), "kube_pod_owner", pod="pending")


def test_container_requests_carry_resource_unit_and_go_rounding(store: Any) -> None:
    samples = _metrics(store)
    requests = {(lb["container"], lb["resource"], lb["unit"]): v
                for lb, v in _find(samples, "kube_pod_container_resource_requests", pod="web-1")}
    assert requests == {("main", "cpu", "core"): 0.1, ("main", "memory", "byte"): 1127.0,  # 1.1Ki = 1126.4, rounded up
                        ("main", "nvidia_com_gpu", "integer"): 1.0, ("main", "hugepages_2Mi", "byte"): 2.0**21,
                        ("side", "cpu", "core"): 0.5}
    labels, _ = _one(samples, "kube_pod_container_resource_requests", pod="web-1", container="main", resource="cpu")
    assert _without_name(labels) == {"namespace": NS, "pod": "web-1", "container": "main", "uid": _uid(store, "web-1"),
                                     "node": "node-1", "resource": "cpu", "unit": "core"}
    assert not _find(samples, "kube_pod_container_resource_requests", pod="pending")


def test_container_states(store: Any) -> None:
    samples = _metrics(store)
    running = _one(samples, "kube_pod_container_status_running", pod="web-1")
    assert _without_name(running[0]) == {"namespace": NS, "pod": "web-1", "container": "main", "uid": _uid(store, "web-1")}
    terminated = _one(samples, "kube_pod_container_status_terminated_reason", pod="web-1")
    assert (terminated[0]["container"], terminated[0]["reason"], terminated[1]) == ("side", "OOMKilled", 1.0)


def test_selector_series(store: Any) -> None:
    samples = _metrics(store)
    service = _find(samples, "service_selector_labels")
    assert [_without_name(lb) for lb, _ in service] == [{"label_app_kubernetes_io_name": "web", "namespace": NS, "service": "web",
                                                         "uid": _uid(store, "web", "Service")}]
    deployment = _one(samples, "deployment_match_labels")
    assert _without_name(deployment[0]) == {"label_app_kubernetes_io_name": "web", "namespace": NS, "deployment": "web",
                                            "uid": _uid(store, "web", "Deployment")}
    statefulset = _one(samples, "statefulSet_match_labels")
    assert _without_name(statefulset[0]) == {"label_app": "db", "label_role_x_y": "primary", "namespace": NS, "statefulSet": "db",
                                             "uid": _uid(store, "db", "StatefulSet")}


def test_node_capacity_and_allocatable(store: Any) -> None:
    samples = _metrics(store)
    capacity = {(lb["resource"], lb["unit"]): v for lb, v in _find(samples, "kube_node_status_capacity", node="node-1")}
    # "example" has no domain: neither native nor extended, so upstream skips it.
    assert capacity == {("cpu", "core"): 4.0, ("memory", "byte"): 8 * 2.0**30, ("pods", "integer"): 110.0,
                        ("hugepages_2Mi", "byte"): 0.0, ("nvidia_com_gpu", "integer"): 2.0}
    allocatable = {(lb["resource"], lb["unit"]): v for lb, v in _find(samples, "kube_node_status_allocatable", node="node-1")}
    assert allocatable == {("cpu", "core"): 3.92, ("memory", "byte"): 7.5 * 2.0**30, ("pods", "integer"): 110.0}
    node_uid = _uid(store, "node-1", "Node", None)
    assert _one(samples, "kube_node_status_allocatable_cpu_cores") == ({"__name__": "kube_node_status_allocatable_cpu_cores",
                                                                        "node": "node-1", "uid": node_uid}, 3.92)
    assert _one(samples, "kube_node_status_capacity_memory_bytes")[1] == 8 * 2.0**30
    labels = _one(samples, "kube_node_labels")[0]
    assert labels["label_node_kubernetes_io_instance_type"] == "e2" and labels["node"] == "node-1" and labels["uid"] == node_uid
    assert _without_name(_one(samples, "kube_node_status_capacity", resource="cpu")[0]) == {
        "node": "node-1", "uid": node_uid, "resource": "cpu", "unit": "core"}


def test_namespaces_volumes_claims_and_jobs(store: Any) -> None:
    samples = _metrics(store)
    assert _without_name(_one(samples, "kube_namespace_labels", namespace=NS)[0]) == {
        "label_team": "shop", "label_kubernetes_io_metadata_name": NS, "namespace": NS, "uid": _uid(store, NS, "Namespace", None)}
    assert _one(samples, "kubecost_pv_info", persistentvolume="pv-1")[0]["provider_id"] == "projects/p/disks/d1"
    pv2_uid = _uid(store, "pv-2", "PersistentVolume", None)
    assert _without_name(_one(samples, "kubecost_pv_info", persistentvolume="pv-2")[0]) == {
        "persistentvolume": "pv-2", "uid": pv2_uid, "storageclass": "", "provider_id": "pv-2"}
    capacity = _one(samples, "kube_persistentvolume_capacity_bytes", persistentvolume="pv-2")
    assert capacity == ({"__name__": "kube_persistentvolume_capacity_bytes", "persistentvolume": "pv-2", "uid": pv2_uid}, 3.0)  # 2.5 up
    claim_uid = _uid(store, "data", "PersistentVolumeClaim")
    info = _one(samples, "kube_persistentvolumeclaim_info")[0]
    assert (info["storageclass"], info["volumename"], info["uid"]) == ("legacy", "pv-1", claim_uid)  # the beta annotation wins
    requested = _one(samples, "kube_persistentvolumeclaim_resource_requests_storage_bytes")
    assert requested == ({"__name__": "kube_persistentvolumeclaim_resource_requests_storage_bytes", "namespace": NS,
                          "persistentvolumeclaim": "data", "uid": claim_uid}, 1e9)
    assert {lb["uid"] for lb, _ in _find(samples, "kube_job_status_failed", job_name="backoff")} == {_uid(store, "backoff", "Job")}
    jobs = {(lb["job_name"], lb["reason"]): v for lb, v in _find(samples, "kube_job_status_failed")}
    assert jobs == {("ok", ""): 0.0,
                    ("backoff", "BackoffLimitExceeded"): 1.0, ("backoff", "DeadLineExceeded"): 0.0, ("backoff", "Evicted"): 0.0,
                    # upstream looks for "DeadLineExceeded", so the real reason counts as unknown: the failed count.
                    ("deadline", "BackoffLimitExceeded"): 0.0, ("deadline", "DeadLineExceeded"): 0.0,
                    ("deadline", "Evicted"): 0.0, ("deadline", ""): 1.0}


def test_deprecated_names_come_back_with_emit_deprecated_metrics(store: Any) -> None:
    samples = _metrics(store, EMIT_DEPRECATED_METRICS="true")
    assert _names(samples) == DEFAULT | DEPRECATED
    phases = {lb["phase"]: v for lb, v in _find(samples, "kube_pod_status_phase", pod="web-1")}
    assert phases == {"Pending": 0.0, "Succeeded": 0.0, "Failed": 0.0, "Unknown": 0.0, "Running": 1.0}
    assert _one(samples, "kube_pod_container_resource_limits_cpu_cores")[1] == 1.001  # MilliValue rounds 1000.1 up
    assert _one(samples, "kube_pod_container_status_restarts_total", container="main")[1] == 3
    assert _one(samples, "kube_deployment_spec_replicas")[1] == 2
    assert _one(samples, "kube_deployment_status_replicas_available")[1] == 1
    assert {lb["status"]: v for lb, v in _find(samples, "kube_node_status_condition")} == {"true": 1.0, "false": 0.0, "unknown": 0.0}
    assert {lb["phase"] for lb, v in _find(samples, "kube_persistentvolume_status_phase", persistentvolume="pv-1") if v} == {"Bound"}


def test_without_ksm_v1_metrics_only_the_controllers_and_the_pv_info_remain(store: Any) -> None:
    assert _names(_metrics(store, EMIT_KSM_V1_METRICS="false")) == CONTROLLERS | {"kubecost_pv_info"}
    assert _names(_metrics(store, EMIT_KSM_V1_METRICS="0", EMIT_DEPRECATED_METRICS="1")) == CONTROLLERS | {"kubecost_pv_info"}


def test_ksm_v1_only_keeps_nodes_namespaces_pod_labels_and_owners(store: Any) -> None:
    v1_only = CONTROLLERS | NODE | {"kube_namespace_labels", "kube_pod_labels", "kube_pod_owner", "kubecost_pv_info"}
    assert _names(_metrics(store, EMIT_KSM_V1_METRICS="F", EMIT_KSM_V1_METRICS_ONLY="True")) == v1_only
    with_deprecated = _metrics(store, EMIT_KSM_V1_METRICS="F", EMIT_KSM_V1_METRICS_ONLY="True", EMIT_DEPRECATED_METRICS="t")
    assert _names(with_deprecated) == v1_only | {"kube_node_status_condition"}
    # the full set wins over the "only" switch
    assert _names(_metrics(store, EMIT_KSM_V1_METRICS_ONLY="true")) == DEFAULT


def test_a_value_go_does_not_parse_as_a_bool_leaves_the_default(store: Any) -> None:
    assert _names(_metrics(store, EMIT_KSM_V1_METRICS="no", EMIT_DEPRECATED_METRICS="yes")) == DEFAULT
    assert _names(_metrics(store, EMIT_KSM_V1_METRICS=" false", EMIT_DEPRECATED_METRICS="")) == DEFAULT


def test_annotation_metrics_are_opt_in(store: Any) -> None:
    samples = _metrics(store, EMIT_POD_ANNOTATIONS_METRIC="true", EMIT_NAMESPACE_ANNOTATIONS_METRIC="TRUE")
    assert _names(samples) == DEFAULT | {"kube_pod_annotations", "kube_namespace_annotations"}
    assert _without_name(_one(samples, "kube_pod_annotations")[0]) == {"annotation_prometheus_io_scrape": "true",
                                                                       "namespace": NS, "pod": "web-1", "uid": _uid(store, "web-1")}
    assert _without_name(_one(samples, "kube_namespace_annotations", namespace=NS)[0]) == {
        "annotation_owner": "sre", "namespace": NS, "uid": _uid(store, NS, "Namespace", None)}


def test_every_series_carries_the_uid_of_the_object_it_describes(store: Any) -> None:
    samples = _metrics(store, EMIT_DEPRECATED_METRICS="true", EMIT_POD_ANNOTATIONS_METRIC="true",
                       EMIT_NAMESPACE_ANNOTATIONS_METRIC="true")
    # which label names the object, per kind; cluster-scoped kinds have no namespace
    naming = {"pod": "Pod", "deployment": "Deployment", "statefulSet": "StatefulSet", "service": "Service", "node": "Node",
              "persistentvolume": "PersistentVolume", "persistentvolumeclaim": "PersistentVolumeClaim", "job_name": "Job"}
    for labels, _ in samples:
        key = next((k for k in naming if k in labels), None)
        kind, name = (naming[key], labels[key]) if key else ("Namespace", labels["namespace"])
        scoped = kind not in {"Node", "PersistentVolume", "Namespace"}
        assert labels["uid"] == _uid(store, name, kind, labels["namespace"] if scoped else None), labels
    deprecated = _one(samples, "kube_deployment_spec_replicas")[0]
    assert deprecated["uid"] == _uid(store, "web", "Deployment")
    assert {lb["uid"] for lb, _ in _find(samples, "kube_pod_container_resource_limits", pod="web-1")} == {_uid(store, "web-1")}


def test_a_kubernetes_label_named_uid_does_not_clash_and_a_missing_uid_is_empty() -> None:
    store = KubeCluster(SimClock(), seed=0).store
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": {"uid": "mine"}}})
    labels = _one(_metrics(store), "kube_namespace_labels", namespace=NS)[0]
    assert labels["label_uid"] == "mine" and labels["uid"] == _uid(store, NS, "Namespace", None) != "mine"

    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare"}})
    bare = next(n for n in list_kind(store, "Node") if n["metadata"]["name"] == "bare")
    bare["metadata"].pop("uid")  # the stored object itself: as if it had none
    assert _one(_metrics(store), "kube_node_labels", node="bare")[0]["uid"] == ""


def test_an_unchanged_object_keeps_its_series_and_a_changed_one_is_read_again() -> None:
    """The exporter's cache: the same label dicts for what did not change (the scrape cache knows them by
    identity), new series once an object's resourceVersion moved."""
    store = KubeCluster(SimClock(), seed=0).store
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    store.create({"apiVersion": "v1", "kind": "Pod", "metadata": _meta("p", labels={"tier": "a"}), "spec": _template({})["spec"]})
    exporter, env = OpenCostKubeMetrics(), {}.get
    first = exporter.collect(store, env)
    assert [labels for labels, _ in exporter.collect(store, env)] == [labels for labels, _ in first]
    assert all(a[0] is b[0] for a, b in zip(first, exporter.collect(store, env), strict=True))
    pod = store.get("Pod", NS, "p")
    pod["metadata"]["labels"] = {"tier": "b"}
    store.update(pod)
    changed = exporter.collect(store, env)
    assert _one(changed, "kube_pod_labels", pod="p")[0]["label_tier"] == "b"
    assert _one(changed, "kube_namespace_labels", namespace=NS)[0] is _one(first, "kube_namespace_labels", namespace=NS)[0]
