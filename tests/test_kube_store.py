"""The twin's object store behaves like the Kubernetes API server's storage layer."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.clock import SimClock
from itbench_gym.paths import envs_dir


def deployment(name: str = "web", ns: str = "default", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}},
    }


def pod(name: str, ns: str = "default", labels: dict[str, str] | None = None, owner: dict[str, Any] | None = None,
        node: str | None = "node-1") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx:1.25"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore(SimClock())


def test_create_assigns_metadata_and_defaults(store: ObjectStore) -> None:
    d = store.create(deployment())
    meta = d["metadata"]
    assert meta["generation"] == 1
    assert meta["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert int(meta["resourceVersion"]) > 0 and len(meta["uid"]) == 36
    assert d["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    assert d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_uids_and_generated_names_are_deterministic() -> None:
    a, b = ObjectStore(SimClock(), seed=7), ObjectStore(SimClock(), seed=7)
    pa = a.create({**pod(""), "metadata": {"generateName": "web-", "namespace": "default"}})
    pb = b.create({**pod(""), "metadata": {"generateName": "web-", "namespace": "default"}})
    assert pa["metadata"]["uid"] == pb["metadata"]["uid"]
    assert pa["metadata"]["name"] == pb["metadata"]["name"] and pa["metadata"]["name"].startswith("web-")
    c = ObjectStore(SimClock(), seed=8).create(pod("x"))
    assert c["metadata"]["uid"] != pa["metadata"]["uid"]


def test_create_errors(store: ObjectStore) -> None:
    store.create(deployment())
    with pytest.raises(ApiError) as e:
        store.create(deployment())
    assert (e.value.code, e.value.reason) == (409, "AlreadyExists")
    assert e.value.message == 'deployments.apps "web" already exists'
    with pytest.raises(ApiError) as e:
        store.create(deployment(ns="nope"))
    assert (e.value.code, e.value.message) == (404, 'namespaces "nope" not found')
    bad = deployment("bad")
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(ApiError) as e:
        store.create(bad)
    assert e.value.code == 422 and "`selector` does not match template `labels`" in e.value.message
    assert e.value.status()["details"]["causes"][0]["field"] == "spec.template.metadata.labels"


def test_resource_quantities_below_zero_and_unknown_container_resources_are_refused(store: ObjectStore) -> None:
    """A negative limit would reach the kubelets and the app model (a negative working set); the API
    server refuses it, and a container resource that is neither standard nor domain-qualified."""
    d = store.create(deployment())
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"memory": "-1", "foo": "1"}, "requests": {"cpu": "-500m"}}
    with pytest.raises(ApiError) as e:
        store.update(d)
    assert e.value.code == 422
    causes = {(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]}
    assert causes == {
        ("spec.template.spec.containers[0].resources.limits[memory]", 'Invalid value: "-1": must be greater than or equal to 0'),
        ("spec.template.spec.containers[0].resources.limits[foo]", 'Invalid value: "foo": must be a standard resource for containers'),
        ("spec.template.spec.containers[0].resources.requests[cpu]", 'Invalid value: "-500m": must be greater than or equal to 0'),
    }
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"memory": "0", "hugepages-2Mi": "0", "example.com/gpu": "1"}}
    store.update(d)  # zero, huge pages and extended resources are allowed
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "default"},
             "spec": {"hard": {"pods": "-1"}}}
    with pytest.raises(ApiError, match=r'spec.hard\[pods\]: Invalid value: "-1": must be greater than or equal to 0'):
        store.create(quota)


@pytest.mark.parametrize(("rolling", "field", "message"), [
    ({"maxUnavailable": "abc"}, "spec.strategy.rollingUpdate.maxUnavailable",
     'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"abc"}: a valid percent string must be a numeric string '
     "followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"),
    ({"maxUnavailable": 0, "maxSurge": 0}, "spec.strategy.rollingUpdate.maxUnavailable",
     'Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:""}: may not be 0 when `maxSurge` is 0'),
    ({"maxUnavailable": "101%"}, "spec.strategy.rollingUpdate.maxUnavailable",
     'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"101%"}: must not be greater than 100%'),
    ({"maxSurge": -1}, "spec.strategy.rollingUpdate.maxSurge", "Invalid value: -1: must be greater than or equal to 0"),
])
def test_a_rolling_update_the_controller_cannot_run_is_refused(store: ObjectStore, rolling: dict[str, Any], field: str, message: str) -> None:
    """What the deployment controller would divide by or parse is checked where the API server checks it
    (an unparseable maxUnavailable once failed every later tick)."""
    d = deployment()
    d["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": rolling}
    with pytest.raises(ApiError) as e:
        store.create(d)
    assert [(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]] == [(field, message)]


def test_probe_counts_below_zero_are_refused_and_a_job_gets_its_generated_selector(store: ObjectStore) -> None:
    d = deployment()
    d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"] = {"tcpSocket": {"port": 80}, "periodSeconds": -1}
    with pytest.raises(ApiError, match=r"containers\[0\].livenessProbe.periodSeconds: Invalid value: -1: must be greater than or equal to 0"):
        store.create(d)
    job = store.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
                        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}})
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert job["spec"]["template"]["metadata"]["labels"] == {
        "job-name": "j", "batch.kubernetes.io/job-name": "j", "controller-uid": uid, "batch.kubernetes.io/controller-uid": uid}


@pytest.mark.parametrize(("schedule", "message"), [
    ("not a schedule", 'Invalid value: "not a schedule": expected exactly 5 fields, found 3: [not a schedule]'),
    ("0 * * * 7", 'Invalid value: "0 * * * 7": end of range (7) above maximum (6): 7'),
    ("TZ=UTC 0 * * * *", 'Invalid value: "TZ=UTC 0 * * * *": cannot use TZ or CRON_TZ in schedule, use timeZone field instead'),
])
def test_a_cronjob_schedule_is_validated_as_upstream_parses_it(store: ObjectStore, schedule: str, message: str) -> None:
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
               "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}
    with pytest.raises(ApiError) as e:
        store.create(cronjob)
    assert [(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]] == [("spec.schedule", message)]


@pytest.mark.parametrize(("zone", "messages"), [
    ("Mars/Olympus", ['Invalid value: "Mars/Olympus": unknown time zone Mars/Olympus']),
    ("../etc/passwd", ['Invalid value: "../etc/passwd": unknown time zone ../etc/passwd']),
    ("Local", ['Invalid value: "Local": timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones']),
    ("", ['Invalid value: "": timeZone must be nil or non-empty string']),
])
def test_a_cronjob_time_zone_is_one_go_loads(store: ObjectStore, zone: str, messages: list[str]) -> None:
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
               "spec": {"schedule": "0 * * * *", "timeZone": zone, "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}}
    with pytest.raises(ApiError) as e:
        store.create(cronjob)
    assert [(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]] == [("spec.timeZone", m) for m in messages]
    store.create({**cronjob, "spec": {**cronjob["spec"], "timeZone": "Europe/Paris"}})


@pytest.mark.parametrize(("obj", "causes"), [
    ({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "n", "namespace": "default"},
      "spec": {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]},
               "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [{"key": "b", "operator": "In"}]}}]}]}},
     [("spec.podSelector.matchExpressions[0].operator", 'Invalid value: "Foo": not a valid selector operator'),
      ("spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].values",
       "Required value: must be specified when `operator` is 'In' or 'NotIn'")]),
    ({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "p", "namespace": "default"},
      "spec": {"minAvailable": "200%", "selector": {"matchLabels": {"app": "web"}}}},
     [("spec.minAvailable", 'Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:"200%"}: must not be greater than 100%')]),
    ({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "default"},
      "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "-1Gi"}}}},
     [("spec.resources[storage]", 'Invalid value: "-1Gi": must be greater than zero')]),
    ({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "default"}, "spec": {}},
     [("spec.accessModes", "Required value: at least 1 access mode is required"), ("spec.resources[storage]", "Required value")]),
])
def test_selectors_budgets_and_claims_are_validated_as_upstream(store: ObjectStore, obj: dict[str, Any],
                                                                 causes: list[tuple[str, str]]) -> None:
    with pytest.raises(ApiError) as e:
        store.create(obj)
    assert [(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]] == causes


_ENV_PATHS = ('"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName", '
              '"status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"')
_ENV_REF = "spec.template.spec.containers[0].env[0].valueFrom.fieldRef"


@pytest.mark.parametrize(("ref", "causes"), [
    ({"fieldPath": "metadata.foo"},
     [(f"{_ENV_REF}.fieldPath", 'Invalid value: "metadata.foo": error converting fieldPath: field label not supported: metadata.foo')]),
    ({"fieldPath": "metadata.labels"}, [(f"{_ENV_REF}.fieldPath", f'Unsupported value: "metadata.labels": supported values: {_ENV_PATHS}')]),
    ({"fieldPath": "spec.nodeName['x']"},
     [(f"{_ENV_REF}.fieldPath", "Invalid value: \"spec.nodeName['x']\": error converting fieldPath: field label does not support subscript: "
       "spec.nodeName['x']")]),
    ({"apiVersion": "v2", "fieldPath": "metadata.name"},
     [(f"{_ENV_REF}.fieldPath", 'Invalid value: "metadata.name": error converting fieldPath: unsupported pod version: v2')]),
    ({"fieldPath": "metadata.labels['a b']"}, [(_ENV_REF, 'Invalid value: "a b": name part must consist of alphanumeric characters, '
                                                "'-', '_' or '.', and must start and end with an alphanumeric character")]),
    ({}, [(f"{_ENV_REF}.fieldPath", "Required value")]),
])
def test_a_downward_api_field_is_one_the_kubelet_can_give(store: ObjectStore, ref: dict[str, Any], causes: list[tuple[str, str]]) -> None:
    """validateObjectFieldSelector: a path ConvertDownwardAPIFieldLabel takes and the env may name."""
    d = deployment()
    d["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "X", "valueFrom": {"fieldRef": ref}}]
    with pytest.raises(ApiError) as e:
        store.create(d)
    assert [(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]] == causes


def test_downward_api_fields_are_defaulted_to_v1_and_a_volume_may_select_labels(store: ObjectStore) -> None:
    d = deployment()
    spec = d["spec"]["template"]["spec"]
    spec["containers"][0]["env"] = [{"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.host"}}}]
    spec["volumes"] = [{"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]
    created = store.create(d)["spec"]["template"]["spec"]
    assert [e["valueFrom"]["fieldRef"]["apiVersion"] for e in created["containers"][0]["env"]] == ["v1", "v1"]
    assert created["volumes"][0]["downwardAPI"]["items"][0]["fieldRef"] == {"apiVersion": "v1", "fieldPath": "metadata.labels"}
    spec["volumes"] = [{"name": "info", "projected": {"sources": [
        {"downwardAPI": {"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]}}]}}]
    with pytest.raises(ApiError) as e:
        store.create({**d, "metadata": {**d["metadata"], "name": "web2"}})
    assert [(c["field"], c["message"]) for c in e.value.status()["details"]["causes"]] == [(
        "spec.template.spec.volumes[0].projected.sources[0].downwardAPI.items[0].fieldRef.fieldPath",
        'Unsupported value: "status.podIP": supported values: "metadata.annotations", "metadata.labels", "metadata.name", '
        '"metadata.namespace", "metadata.uid"')]


def test_get_returns_copies(store: ObjectStore) -> None:
    store.create(deployment())
    got = store.get("Deployment", "default", "web")
    got["spec"]["replicas"] = 99
    assert store.get("Deployment", "default", "web")["spec"]["replicas"] == 2


def test_update_conflict_generation_and_status(store: ObjectStore) -> None:
    d = store.create(deployment())
    stale = dict(d)
    d["spec"]["replicas"] = 3
    d2 = store.update(d)
    assert d2["metadata"]["generation"] == 2
    with pytest.raises(ApiError) as e:
        store.update(stale)
    assert e.value.reason == "Conflict" and "the object has been modified" in e.value.message
    d2["metadata"]["labels"]["extra"] = "1"
    d3 = store.update(d2)
    assert d3["metadata"]["generation"] == 2  # metadata-only change
    d3["status"] = {"replicas": 3, "observedGeneration": 2}
    d3["spec"]["replicas"] = 10
    d4 = store.update(d3, subresource="status")
    assert d4["status"]["replicas"] == 3 and d4["spec"]["replicas"] == 3  # status update ignores spec
    d4["status"] = {"replicas": 0}
    d5 = store.update(d4)
    assert d5["status"]["replicas"] == 3  # main resource update ignores status


def test_noop_update_keeps_resource_version(store: ObjectStore) -> None:
    d = store.create(deployment())
    again = store.update(d)
    assert again["metadata"]["resourceVersion"] == d["metadata"]["resourceVersion"]


def test_label_and_field_selectors(store: ObjectStore) -> None:
    store.create(pod("a", labels={"app": "web", "tier": "fe"}))
    store.create(pod("b", labels={"app": "web"}, node="node-2"))
    store.create(pod("c", labels={"app": "db"}, node=None))
    names = lambda pods: [p["metadata"]["name"] for p in pods]
    assert names(store.list("Pod", "default", label_selector="app=web")) == ["a", "b"]
    assert names(store.list("Pod", "default", label_selector="app in (web, db),!tier")) == ["b", "c"]
    assert names(store.list("Pod", "default", label_selector="app notin (web)")) == ["c"]
    assert names(store.list("Pod", "default", label_selector="tier")) == ["a"]
    assert names(store.list("Pod", None, field_selector="spec.nodeName=node-2")) == ["b"]
    assert names(store.list("Pod", None, field_selector="spec.nodeName=,metadata.name!=a")) == ["c"]
    with pytest.raises(ApiError) as e:
        store.list("Pod", None, field_selector="spec.bogus=1")
    assert e.value.code == 400 and "field label not supported: spec.bogus" in e.value.message
    with pytest.raises(ApiError) as e:
        store.list("Pod", None, label_selector="app in web")
    assert e.value.code == 400


def test_background_deletion_collects_dependents(store: ObjectStore) -> None:
    d = store.create(deployment())
    rs = store.create({**deployment("web-1"), "kind": "ReplicaSet",
                       "metadata": {"name": "web-1", "namespace": "default", "ownerReferences": [
                           {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": d["metadata"]["uid"],
                            "controller": True}]}})
    store.create(pod("web-1-a", labels={"app": "web-1"}, owner=rs, node=None))
    store.create(pod("web-1-b", labels={"app": "web-1"}, owner=rs))
    store.delete("Deployment", "default", "web")
    assert store.list("ReplicaSet", "default") == []
    remaining = store.list("Pod", "default")
    # the unscheduled pod goes at once; the running one terminates gracefully
    assert [p["metadata"]["name"] for p in remaining] == ["web-1-b"]
    assert remaining[0]["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:30Z"
    store.delete("Pod", "default", "web-1-b", grace_period_seconds=0)
    assert store.list("Pod", "default") == []


def test_orphan_and_foreground_deletion(store: ObjectStore) -> None:
    d = store.create(deployment())
    store.create(pod("p", owner=d, node=None))
    store.delete("Deployment", "default", "web", propagation_policy="Orphan")
    assert "ownerReferences" not in store.get("Pod", "default", "p")["metadata"]
    d = store.create(deployment())
    store.create(pod("q", owner=d))
    out = store.delete("Deployment", "default", "web", propagation_policy="Foreground")
    assert "foregroundDeletion" in out["metadata"]["finalizers"]
    assert store.get("Deployment", "default", "web")["metadata"]["deletionTimestamp"]
    store.delete("Pod", "default", "q", grace_period_seconds=0)  # the kubelet finishes the pod
    with pytest.raises(ApiError):
        store.get("Deployment", "default", "web")


def test_finalizers_block_deletion(store: ObjectStore) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default",
                                                                 "finalizers": ["example.com/keep"]}}
    store.create(cm)
    out = store.delete("ConfigMap", "default", "c")
    assert out["metadata"]["deletionTimestamp"]
    live = store.get("ConfigMap", "default", "c")
    live["metadata"]["finalizers"] = []
    store.update(live)
    with pytest.raises(ApiError):
        store.get("ConfigMap", "default", "c")


def test_namespace_deletion_removes_contents(store: ObjectStore) -> None:
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    store.create(deployment(ns="shop"))
    store.create(pod("running", ns="shop"))
    store.delete("Namespace", None, "shop")
    ns = store.get("Namespace", None, "shop")
    assert ns["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as e:
        store.create(deployment("new", ns="shop"))
    assert e.value.code == 403 and "being terminated" in e.value.message
    store.delete("Pod", "shop", "running", grace_period_seconds=0)
    with pytest.raises(ApiError):
        store.get("Namespace", None, "shop")


def test_subscribe_and_watch_log(store: ObjectStore) -> None:
    seen: list[tuple[str, str]] = []
    store.subscribe(lambda t, o: seen.append((t, o["metadata"]["name"])))
    rv = store.resource_version
    d = store.create(deployment())
    d["spec"]["replicas"] = 5
    store.update(d)
    store.delete("Deployment", "default", "web")
    assert seen == [("ADDED", "web"), ("MODIFIED", "web"), ("DELETED", "web")]
    dep = store.registry.by_kind("Deployment")
    events = store.events_since(rv, dep, "default")
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert [e.resource_version for e in events] == sorted(e.resource_version for e in events)
    assert store.events_since(rv, store.registry.by_kind("Pod"), "default") == []


def test_snapshot_restore(store: ObjectStore) -> None:
    store.create(deployment())
    snap = store.snapshot()
    uid_next = store.create(pod("after"))["metadata"]["uid"]
    store.delete("Deployment", "default", "web")
    store.restore(snap)
    assert [d["metadata"]["name"] for d in store.list("Deployment")] == ["web"]
    assert store.list("Pod") == []
    assert store.create(pod("after"))["metadata"]["uid"] == uid_next  # deterministic after restore
    with pytest.raises(ApiError) as e:
        store.events_since(0)
    assert e.value.code == 410


def test_crd_serves_new_kind(store: ObjectStore) -> None:
    store.create({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "podchaos.chaos-mesh.org"},
        "spec": {"group": "chaos-mesh.org", "scope": "Namespaced",
                 "names": {"kind": "PodChaos", "plural": "podchaos", "singular": "podchaos"},
                 "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object"}}}]},
    })
    pc = store.create({"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "PodChaos",
                       "metadata": {"name": "kill", "namespace": "default"}, "spec": {"action": "pod-kill"}})
    assert pc["metadata"]["generation"] == 1
    assert store.registry.by_plural("chaos-mesh.org", "v1alpha1", "podchaos").kind == "PodChaos"
    store.delete("CustomResourceDefinition", None, "podchaos.chaos-mesh.org")
    with pytest.raises(ApiError):
        store.registry.by_kind("PodChaos")


def _chaos_mesh_crds(store: ObjectStore) -> None:
    """The CRDs the twin installs for Chaos Mesh (its cluster manifests)."""
    for doc in yaml.safe_load_all((envs_dir() / "astronomy-shop" / "cluster" / "chaos-mesh.yaml").read_text()):
        if doc and doc.get("kind") == "CustomResourceDefinition":
            store.create(doc)


def _http_chaos(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "HTTPChaos", "metadata": {"name": "h", "namespace": "default"},
            "spec": {"mode": "all", "selector": {"labelSelectors": {"app": "web"}}, "target": "Request", **spec}}


def test_custom_resources_are_validated_against_their_crd_schema(store: ObjectStore) -> None:
    """A custom object that breaks its CRD's openAPIV3Schema is refused as the API server words it, on
    create and update alike; a valid one (its optional fields left out) is stored."""
    _chaos_mesh_crds(store)
    with pytest.raises(ApiError) as e:
        store.create(_http_chaos(target="Body", port={"default": 8080}, abort="yes"))
    assert e.value.code == 422
    assert e.value.message == (
        'HTTPChaos.chaos-mesh.org "h" is invalid: [spec.target: Unsupported value: "Body": supported values: "Request", '
        '"Response", spec.port: Invalid value: "object": spec.port in body must be of type integer: "object", '
        'spec.abort: Invalid value: "string": spec.abort in body must be of type boolean: "string"]')
    with pytest.raises(ApiError, match=r'is invalid: spec.selector: Required value'):
        store.create({**_http_chaos(), "spec": {"mode": "all", "target": "Request"}})
    created = store.create(_http_chaos(abort=True))  # port is optional, as in Chaos Mesh's CRD
    created["spec"]["port"] = "8080"
    with pytest.raises(ApiError, match=r'spec.port in body must be of type integer: "string"'):
        store.update(created)


def test_a_schedule_is_refused_for_its_embedded_experiment(store: ObjectStore) -> None:
    """Chaos Mesh's Schedule CRD embeds each experiment kind's spec: a broken one fails the Schedule's own
    write, naming the field under the Schedule, before any experiment exists."""
    _chaos_mesh_crds(store)
    schedule = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": "s", "namespace": "default"},
                "spec": {"schedule": "@every 1m", "type": "HTTPChaos", "historyLimit": 0,
                         "httpChaos": {"mode": "every", "selector": {}, "target": "Request", "port": [8080]}}}
    with pytest.raises(ApiError) as e:
        store.create(schedule)
    assert e.value.message == (
        'Schedule.chaos-mesh.org "s" is invalid: [spec.historyLimit: Invalid value: 0: spec.historyLimit in body should be '
        'greater than or equal to 1, spec.httpChaos.mode: Unsupported value: "every": supported values: "one", "all", '
        '"fixed", "fixed-percent", "random-max-percent", spec.httpChaos.port: Invalid value: "array": spec.httpChaos.port '
        'in body must be of type integer: "array"]')


def test_hpa_served_in_v1_and_v2(store: ObjectStore) -> None:
    store.create({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                  "metadata": {"name": "h", "namespace": "default"},
                  "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                           "maxReplicas": 5, "targetCPUUtilizationPercentage": 60}})
    v2 = store.get("HorizontalPodAutoscaler", "default", "h")
    assert v2["apiVersion"] == "autoscaling/v2"
    assert v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 60
    v1 = store.get("HorizontalPodAutoscaler", "default", "h", api_version="autoscaling/v1")
    assert v1["spec"]["targetCPUUtilizationPercentage"] == 60


def test_service_gets_cluster_ip_and_pod_updates_are_restricted(store: ObjectStore) -> None:
    svc = store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cart", "namespace": "default"},
                        "spec": {"selector": {"app": "cart"}, "ports": [{"port": 8080}]}})
    assert svc["spec"]["clusterIP"].startswith("10.96.") and svc["spec"]["ports"][0]["targetPort"] == 8080
    p = store.create(pod("p"))
    p["spec"]["containers"][0]["image"] = "nginx:2"
    store.update(p)  # images may change
    p = store.get("Pod", "default", "p")
    p["spec"]["containers"][0]["resources"] = {"limits": {"memory": "1Gi"}}
    with pytest.raises(ApiError) as e:
        store.update(p)
    assert e.value.code == 422 and "pod updates may not change fields" in e.value.message
