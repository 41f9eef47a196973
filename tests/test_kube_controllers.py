"""Workload controllers of the twin: what a user sees happen after a kubectl command."""

from __future__ import annotations

import copy

import pytest

from itbench_gym.backends.sim.kube.controllers.util import ALPHANUMS
from itbench_gym.backends.sim.kube.runtime import DefaultRuntime
from itbench_gym.lang import cron
from kube_fixtures import NS, container, deployment, events, make_cluster, pods, run, service


def _rs(cluster, deploy):  # newest first
    out = [r for r in cluster.store.list("ReplicaSet", NS) if r["metadata"]["name"].startswith(deploy + "-")]
    return sorted(out, key=lambda r: -int(r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))


def _patch_template(cluster, name, mutate):
    d = cluster.store.get("Deployment", NS, name)
    mutate(d["spec"]["template"])
    cluster.store.update(d)
    cluster.reconcile()


def test_deployment_creates_hashed_replicaset_and_ready_pods():
    cluster, clock = make_cluster(deployment("web", 3))
    (rs,) = _rs(cluster, "web")
    h = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{h}" and set(h) <= set(ALPHANUMS)
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert rs["metadata"]["ownerReferences"][0]["controller"] is True
    created = pods(cluster, "web-")
    assert len(created) == 3
    assert all(p["metadata"]["name"].startswith(f"web-{h}-") and len(p["metadata"]["name"]) == len(f"web-{h}-") + 5
               for p in created)
    assert {p["status"]["phase"] for p in created} == {"Pending"}
    run(cluster, clock, 30)
    d = cluster.store.get("Deployment", NS, "web")
    assert d["status"]["readyReplicas"] == d["status"]["availableReplicas"] == d["status"]["updatedReplicas"] == 3
    conds = {c["type"]: c for c in d["status"]["conditions"]}
    assert conds["Available"]["reason"] == "MinimumReplicasAvailable"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"
    assert conds["Progressing"]["message"] == f'ReplicaSet "web-{h}" has successfully progressed.'
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    msgs = [e["message"] for e in events(cluster, "ScalingReplicaSet")]
    assert msgs == [f"Scaled up replica set web-{h} from 0 to 3"]


def test_same_seed_same_names_and_other_seed_differs():
    a, _ = make_cluster(deployment("web", 3), seed=7)
    b, _ = make_cluster(deployment("web", 3), seed=7)
    c, _ = make_cluster(deployment("web", 3), seed=8)
    names = lambda k: sorted(p["metadata"]["name"] for p in pods(k))
    assert names(a) == names(b)
    assert names(a) != names(c)


def test_rolling_update_replaces_pods_within_surge_and_unavailability():
    cluster, clock = make_cluster(deployment("web", 4))
    run(cluster, clock, 30)
    old_names = {p["metadata"]["name"] for p in pods(cluster, "web-")}
    _patch_template(cluster, "web", lambda t: t["spec"]["containers"][0].update(image="ghcr.io/demo/app:2.0"))
    new_rs, old_rs = _rs(cluster, "web")
    assert new_rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    # 25 % of 4: one extra pod and one unavailable pod at most
    assert new_rs["spec"]["replicas"] + old_rs["spec"]["replicas"] <= 5
    assert old_rs["spec"]["replicas"] >= 3
    seen_max = 0
    for _ in range(8):
        run(cluster, clock, 5, step=5)
        live = [p for p in pods(cluster, "web-") if not p["metadata"].get("deletionTimestamp")]
        seen_max = max(seen_max, len(live))
    assert seen_max <= 5
    run(cluster, clock, 60)
    current = pods(cluster, "web-")
    assert len(current) == 4 and not ({p["metadata"]["name"] for p in current} & old_names)
    assert all(p["spec"]["containers"][0]["image"] == "ghcr.io/demo/app:2.0" for p in current)
    d = cluster.store.get("Deployment", NS, "web")
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert d["status"]["updatedReplicas"] == 4 and d["status"]["availableReplicas"] == 4
    assert cluster.store.get("ReplicaSet", NS, old_rs["metadata"]["name"])["spec"]["replicas"] == 0
    scaled = [e["message"] for e in events(cluster, "ScalingReplicaSet")]
    assert any(m.startswith(f"Scaled down replica set {old_rs['metadata']['name']} from") for m in scaled)


def test_rollout_undo_reuses_old_replicaset_with_revision_history():
    cluster, clock = make_cluster(deployment("web", 2))
    run(cluster, clock, 30)
    original = copy.deepcopy(cluster.store.get("Deployment", NS, "web")["spec"]["template"])
    _patch_template(cluster, "web", lambda t: t["spec"]["containers"][0].update(image="ghcr.io/demo/app:2.0"))
    run(cluster, clock, 60)
    first = [r for r in _rs(cluster, "web") if r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"][0]
    # what `kubectl rollout undo` does: put revision 1's template back
    _patch_template(cluster, "web", lambda t: t.clear() or t.update(original))
    run(cluster, clock, 60)
    rs = cluster.store.get("ReplicaSet", NS, first["metadata"]["name"])
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision-history"] == "1"
    assert rs["spec"]["replicas"] == 2
    assert len(_rs(cluster, "web")) == 2
    assert cluster.store.get("Deployment", NS, "web")["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"


def test_rollout_restart_creates_new_replicaset_and_replaces_pods():
    cluster, clock = make_cluster(deployment("web", 2))
    run(cluster, clock, 30)
    before = {p["metadata"]["name"] for p in pods(cluster, "web-")}
    _patch_template(cluster, "web", lambda t: t["metadata"].setdefault("annotations", {}).update(
        {"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:30Z"}))
    assert len(_rs(cluster, "web")) == 2
    run(cluster, clock, 90)
    after = {p["metadata"]["name"] for p in pods(cluster, "web-")}
    assert len(after) == 2 and not (after & before)


def test_recreate_deletes_all_old_pods_before_creating_new_ones():
    cluster, clock = make_cluster(deployment("db", 2, strategy={"type": "Recreate"}))
    run(cluster, clock, 30)
    _patch_template(cluster, "db", lambda t: t["spec"]["containers"][0].update(image="ghcr.io/demo/app:2.0"))
    new_rs = _rs(cluster, "db")[0]
    assert new_rs["spec"]["replicas"] == 0 or not [p for p in pods(cluster) if p["metadata"]["name"].startswith(new_rs["metadata"]["name"])]
    run(cluster, clock, 60)
    current = pods(cluster, "db-")
    assert len(current) == 2 and all(p["spec"]["containers"][0]["image"].endswith(":2.0") for p in current)


def test_scale_down_prefers_unready_pods_and_paused_deployment_does_not_roll():
    class SlowToBeReady(DefaultRuntime):
        def probe_succeeds(self, pod, c, kind):
            return pod["metadata"]["name"] != self.unready

    runtime = SlowToBeReady()
    probe = {"readinessProbe": {"httpGet": {"path": "/", "port": 8080}}}
    cluster, clock = make_cluster(deployment("web", 3, containers=[container(**probe)]), runtime=runtime)
    runtime.unready = pods(cluster, "web-")[1]["metadata"]["name"]
    run(cluster, clock, 30)
    d = cluster.store.get("Deployment", NS, "web")
    d["spec"]["replicas"] = 2
    cluster.store.update(d)
    cluster.reconcile()
    terminating = [p["metadata"]["name"] for p in pods(cluster, "web-") if p["metadata"].get("deletionTimestamp")]
    assert terminating == [runtime.unready]
    d = cluster.store.get("Deployment", NS, "web")
    d["spec"]["paused"] = True
    d["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/demo/app:9"
    cluster.store.update(d)
    cluster.reconcile()
    assert len(_rs(cluster, "web")) == 1
    cond = {c["type"]: c for c in cluster.store.get("Deployment", NS, "web")["status"]["conditions"]}["Progressing"]
    assert (cond["status"], cond["reason"], cond["message"]) == ("Unknown", "DeploymentPaused", "Deployment is paused")


def test_revision_history_limit_prunes_oldest_replicasets():
    cluster, clock = make_cluster(deployment("web", 1, revisionHistoryLimit=1))
    for version in range(2, 5):
        run(cluster, clock, 30)
        _patch_template(cluster, "web", lambda t, v=version: t["spec"]["containers"][0].update(image=f"ghcr.io/demo/app:{v}"))
    run(cluster, clock, 60)
    revisions = [r["metadata"]["annotations"]["deployment.kubernetes.io/revision"] for r in _rs(cluster, "web")]
    assert revisions == ["4", "3"]


def test_quota_blocks_pod_creation_with_failedcreate_event_and_condition():
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "mem", "namespace": NS},
             "spec": {"hard": {"requests.memory": "300Mi", "pods": "10"}}}
    cluster, clock = make_cluster(quota, deployment("web", 3))
    assert len(pods(cluster, "web-")) == 2
    failed = events(cluster, "FailedCreate")
    assert failed and failed[0]["involvedObject"]["kind"] == "ReplicaSet"
    msg = failed[0]["message"]
    assert msg.startswith('Error creating: pods "web-') and '-" is forbidden' in msg and "is forbidden: exceeded quota: mem, requested: " \
        "requests.memory=128Mi, used: requests.memory=256Mi, limited: requests.memory=300Mi" in msg
    run(cluster, clock, 30)
    d = cluster.store.get("Deployment", NS, "web")
    failure = {c["type"]: c for c in d["status"]["conditions"]}["ReplicaFailure"]
    assert failure["reason"] == "FailedCreate" and "exceeded quota" in failure["message"]
    q = cluster.store.get("ResourceQuota", NS, "mem")
    assert q["status"]["used"] == {"pods": "2", "requests.memory": "256Mi"}
    q["spec"]["hard"]["requests.memory"] = "1Gi"
    cluster.store.update(q)
    cluster.reconcile()
    assert len(pods(cluster, "web-")) == 3


def test_endpoints_follow_readiness_and_resolve_named_ports():
    class Flaky(DefaultRuntime):
        healthy = True

        def probe_succeeds(self, pod, c, kind):
            return self.healthy

    runtime = Flaky()
    probe = {"readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 5, "failureThreshold": 1}}
    cluster, clock = make_cluster(deployment("cart", 2, containers=[container(**probe)]), service("cart"),
                                  runtime=runtime)
    ep = cluster.store.get("Endpoints", NS, "cart")
    assert "addresses" not in ep.get("subsets", [{}])[0]
    run(cluster, clock, 30)
    (subset,) = cluster.store.get("Endpoints", NS, "cart")["subsets"]
    assert len(subset["addresses"]) == 2 and subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    runtime.healthy = False
    run(cluster, clock, 15)
    (subset,) = cluster.store.get("Endpoints", NS, "cart")["subsets"]
    assert "addresses" not in subset and len(subset["notReadyAddresses"]) == 2
    unhealthy = events(cluster, "Unhealthy")
    assert unhealthy and unhealthy[0]["message"].startswith('Readiness probe failed: Get "http://10.244.')
    cluster.store.delete("Service", NS, "cart")
    cluster.reconcile()
    assert not [e for e in cluster.store.list("Endpoints", NS) if e["metadata"]["name"] == "cart"]



def _endpoint_pods(cluster, service_name):
    subsets = cluster.store.get("Endpoints", NS, service_name).get("subsets") or []
    return sorted(a["targetRef"]["name"] for s in subsets for a in s.get("addresses", []) + s.get("notReadyAddresses", []))


def test_endpoints_follow_pod_labels_also_after_a_restore():
    """A pod relabelled from one Service's selector to another's moves to the other's Endpoints; a restored
    cluster goes by the labels of its snapshot."""
    cluster, clock = make_cluster(deployment("cart", 2), service("cart"), service("spare"))
    run(cluster, clock, 30)
    snap = cluster.snapshot()
    first, second = sorted(p["metadata"]["name"] for p in pods(cluster, "cart-"))

    def relabel(name):
        pod = copy.deepcopy(cluster.store.get("Pod", NS, name))
        pod["metadata"]["labels"] = {"app": "spare"}
        cluster.store.update(pod)
        cluster.reconcile()

    relabel(first)
    assert _endpoint_pods(cluster, "spare") == [first] and first not in _endpoint_pods(cluster, "cart")
    cluster.restore(snap)
    relabel(second)
    assert _endpoint_pods(cluster, "spare") == [second] and first in _endpoint_pods(cluster, "cart")

def _hpa(name, cpu_target, lo=1, hi=10):
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name, "namespace": NS},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": lo, "maxReplicas": hi,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                                    "target": {"type": "Utilization", "averageUtilization": cpu_target}}}]}}


def _load(cluster, name, cores_per_pod):
    for p in pods(cluster, name + "-"):
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            cluster.set_usage(NS, p["metadata"]["name"], "main", cpu_cores=cores_per_pod, memory_bytes=100 * 2**20)


def test_hpa_scales_up_on_cpu_then_waits_for_stabilisation_to_scale_down():
    cluster, clock = make_cluster(deployment("api", 2), _hpa("api", 50))
    run(cluster, clock, 15)
    _load(cluster, "api", 0.1)  # 100 % of the 100m request, target 50 % → 4 replicas
    run(cluster, clock, 15)
    d = cluster.store.get("Deployment", NS, "api")
    assert d["spec"]["replicas"] == 4
    hpa = cluster.store.get("HorizontalPodAutoscaler", NS, "api")
    assert hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"] == 100
    conds = {c["type"]: c for c in hpa["status"]["conditions"]}
    assert conds["AbleToScale"]["reason"] == "SucceededRescale"
    assert conds["ScalingActive"]["reason"] == "ValidMetricFound"
    (rescale,) = events(cluster, "SuccessfulRescale")
    assert rescale["message"] == "New size: 4; reason: cpu resource utilization (percentage of request) above target"
    run(cluster, clock, 30)
    _load(cluster, "api", 0.01)
    run(cluster, clock, 120)
    assert cluster.store.get("Deployment", NS, "api")["spec"]["replicas"] == 4  # held by the 300 s window
    conds = {c["type"]: c for c in cluster.store.get("HorizontalPodAutoscaler", NS, "api")["status"]["conditions"]}
    assert conds["AbleToScale"]["reason"] == "ScaleDownStabilized"
    for _ in range(24):
        _load(cluster, "api", 0.01)
        run(cluster, clock, 15)
    assert cluster.store.get("Deployment", NS, "api")["spec"]["replicas"] == 1


def test_hpa_within_tolerance_does_nothing_and_max_limits():
    cluster, clock = make_cluster(deployment("api", 2), _hpa("api", 50, hi=3))
    run(cluster, clock, 15)
    _load(cluster, "api", 0.054)  # 54 % vs 50 %: inside the 10 % tolerance
    run(cluster, clock, 30)
    assert cluster.store.get("Deployment", NS, "api")["spec"]["replicas"] == 2
    _load(cluster, "api", 0.5)
    run(cluster, clock, 15)
    assert cluster.store.get("Deployment", NS, "api")["spec"]["replicas"] == 3
    conds = {c["type"]: c for c in cluster.store.get("HorizontalPodAutoscaler", NS, "api")["status"]["conditions"]}
    assert conds["ScalingLimited"]["reason"] == "TooManyReplicas"


def test_hpa_reports_missing_requests():
    cluster, clock = make_cluster(deployment("api", 1, containers=[{"name": "main", "image": "x:1"}]), _hpa("api", 50))
    run(cluster, clock, 30)
    conds = {c["type"]: c for c in cluster.store.get("HorizontalPodAutoscaler", NS, "api")["status"]["conditions"]}
    assert conds["ScalingActive"]["status"] == "False"
    assert "missing request for cpu in container main of Pod api-" in conds["ScalingActive"]["message"]


def test_an_hpa_that_cannot_compute_its_metrics_leaves_no_garbage_for_the_collector():
    """Each sync of such an HPA fails its metric; what it keeps of the failure must not hold the
    sync's frame (a reference cycle per sync only the cyclic collector frees, thousands per set-up)."""
    import gc

    from itbench_gym.backends.sim.kube.controllers.hpa import MetricError

    cluster, clock = make_cluster(deployment("api", 1, containers=[{"name": "main", "image": "x:1"}]), _hpa("api", 50))
    run(cluster, clock, 30)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run(cluster, clock, 300)
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, MetricError)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert kept == []


def test_statefulset_creates_ordinals_in_order():
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "kafka", "namespace": NS},
           "spec": {"replicas": 3, "serviceName": "kafka", "selector": {"matchLabels": {"app": "kafka"}},
                    "template": {"metadata": {"labels": {"app": "kafka"}}, "spec": {"containers": [container()]}}}}
    cluster, clock = make_cluster(sts, runtime=DefaultRuntime(startup=10))
    assert [p["metadata"]["name"] for p in pods(cluster, "kafka-")] == ["kafka-0"]
    run(cluster, clock, 15)
    assert [p["metadata"]["name"] for p in pods(cluster, "kafka-")] == ["kafka-0", "kafka-1"]
    run(cluster, clock, 30)
    names = [p["metadata"]["name"] for p in pods(cluster, "kafka-")]
    assert names == ["kafka-0", "kafka-1", "kafka-2"]
    assert pods(cluster, "kafka-2")[0]["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "2"
    status = cluster.store.get("StatefulSet", NS, "kafka")["status"]
    assert status["readyReplicas"] == 3 and status["currentRevision"] == status["updateRevision"]
    assert cluster.store.list("ControllerRevision", NS)



def test_statefulset_claims_come_from_its_templates_wait_for_a_class_and_outlive_scale_down():
    storage = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "standard"},
               "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"}
    template = {"metadata": {"name": "data", "labels": {"tier": "db"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "missing",
                         "resources": {"requests": {"storage": "1Gi"}}}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
           "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "volumeClaimTemplates": [template],
                    "template": {"metadata": {"labels": {"app": "db"}},
                                 "spec": {"containers": [container()], "volumes": [{"name": "data", "emptyDir": {}}]}}}}
    cluster, clock = make_cluster(storage, sts)
    run(cluster, clock, 30)
    claim = cluster.store.get("PersistentVolumeClaim", NS, "data-db-0")
    assert claim["metadata"]["labels"] == {"tier": "db", "app": "db"} and claim["status"]["phase"] == "Pending"
    (pod,) = pods(cluster, "db-")
    assert pod["spec"]["volumes"][0] == {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}
    assert [v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"][1:]] == [True]  # admission's token volume
    assert pod["status"]["phase"] == "Pending"  # its class does not exist: the claim never binds
    assert any("create Claim data-db-0 Pod db-0 in StatefulSet db success" in e["message"]
               for e in events(cluster, "SuccessfulCreate"))
    # an existing claim is kept as it is: the fixed template takes effect once claim and pod are deleted
    cluster.store.delete("PersistentVolumeClaim", NS, "data-db-0")
    cluster.store.delete("Pod", NS, "db-0")
    s = cluster.store.get("StatefulSet", NS, "db")
    s["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = "standard"
    cluster.store.update(s)
    run(cluster, clock, 60)
    assert cluster.store.get("PersistentVolumeClaim", NS, "data-db-0")["status"]["phase"] == "Bound"
    assert pods(cluster, "db-")[0]["status"]["phase"] == "Running"
    s = cluster.store.get("StatefulSet", NS, "db")
    s["spec"]["replicas"] = 0
    cluster.store.update(s)
    run(cluster, clock, 60)
    assert not pods(cluster, "db-") and cluster.store.get("PersistentVolumeClaim", NS, "data-db-0")  # Retain

def test_daemonset_runs_one_pod_per_eligible_node():
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": NS},
          "spec": {"selector": {"matchLabels": {"app": "agent"}},
                   "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [container()]}}}}
    cluster, clock = make_cluster(ds)
    run(cluster, clock, 15)
    placed = sorted(p["spec"]["nodeName"] for p in pods(cluster, "agent-"))
    assert placed == ["node-1", "node-2", "node-3"]
    node = cluster.store.get("Node", None, "node-3")
    node["spec"] = {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
    cluster.store.update(node)
    cluster.reconcile()
    run(cluster, clock, 60)
    assert sorted(p["spec"]["nodeName"] for p in pods(cluster, "agent-")) == ["node-1", "node-2"]
    status = cluster.store.get("DaemonSet", NS, "agent")["status"]
    assert status["desiredNumberScheduled"] == 2 and status["numberReady"] == 2


def test_job_runs_to_completion():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": NS},
           "spec": {"completions": 2, "parallelism": 1,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container()]}}}}
    cluster, clock = make_cluster(job)
    run(cluster, clock, 60, step=5)
    status = cluster.store.get("Job", NS, "migrate")["status"]
    assert status["succeeded"] == 2
    assert {c["type"] for c in status["conditions"]} >= {"Complete"}
    assert [e["message"] for e in events(cluster, "Completed")] == ["Job completed"]


def test_cron_schedule_parsing() -> None:
    assert cron.parse("*/15 2 * * 1-5").next_after(1_767_225_600.0) == 1_767_225_600.0 + 2 * 3600  # 2026-01-01, a Thursday


@pytest.mark.parametrize(("spec", "message"), [
    ("not a schedule", "expected exactly 5 fields, found 3: [not a schedule]"),
    ("99 * * * *", "end of range (99) above maximum (59): 99"),
    ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
    ("* * * * 7", "end of range (7) above maximum (6): 7"),
    ("5-2 * * * *", "beginning of range (5) beyond end of range (2): 5-2"),
    ("*/0 * * * *", "step of range should be a positive number: */0"),
    ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
    ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
    ("@fortnightly", "unrecognized descriptor: @fortnightly"),
    ("@every soon", 'failed to parse duration @every soon: time: invalid duration "soon"'),
    ("", "empty spec string"),
])
def test_cron_schedules_are_refused_in_robfig_crons_words(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        cron.parse(spec)
    assert str(e.value) == message


def test_cron_days_match_as_robfig_cron_matches_them() -> None:
    """Both day fields restricted: either matches (the 1st, or a Monday); one a star: both must."""
    jan1 = 1_767_225_600.0  # Thursday 2026-01-01 00:00 UTC
    either = cron.parse("0 0 1 * mon")
    assert either.next_after(jan1) == jan1 + 4 * 86400  # Monday the 5th, before February the 1st
    assert cron.parse("0 0 * * MON").next_after(jan1) == jan1 + 4 * 86400
    assert cron.parse("0 0 1 jan *").next_after(jan1) == 1_798_761_600.0  # 2027-01-01
    assert cron.parse("@every 90s").next_after(jan1 + 0.5) == jan1 + 90


def test_cron_time_zones_read_the_fields_on_that_zones_clock() -> None:
    """robfig's TZ=/CRON_TZ= prefix (a Chaos Mesh Schedule may give one; the CronJob controller prefixes
    its timeZone): the fields are the zone's wall clock, daylight saving time included."""
    new_york = cron.parse("CRON_TZ=America/New_York 30 9 * * *")
    before_dst = 1_772_841_600.0  # 2026-03-07 00:00 UTC; New York moves its clocks on the 8th
    first = new_york.next_after(before_dst)
    assert first == before_dst + 14.5 * 3600  # 09:30 EST
    assert new_york.next_after(first) == first + 23 * 3600  # 09:30 EDT, a 23-hour day later
    jan1 = 1_767_225_600.0
    assert cron.parse("TZ=UTC 0 9 * * *").next_after(jan1) == cron.parse("TZ=Local 0 9 * * *").next_after(jan1) == jan1 + 9 * 3600
    with pytest.raises(ValueError, match="^provided bad location Mars/Olympus: unknown time zone Mars/Olympus$"):
        cron.parse("TZ=Mars/Olympus 0 9 * * *", seconds=True)


def test_a_cronjob_runs_on_its_time_zones_clock() -> None:
    """``timeZone: Asia/Kolkata`` (UTC+05:30): its hours begin at half past the hour in UTC."""
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "hourly", "namespace": NS},
               "spec": {"schedule": "0 * * * *", "timeZone": "Asia/Kolkata", "jobTemplate": {"spec": {"template": {"spec": {
                   "restartPolicy": "Never", "containers": [container(image="busybox:1.36", command=["true"])]}}}}}}
    cluster, clock = make_cluster(cronjob)
    run(cluster, clock, 40 * 60)
    assert cluster.store.get("CronJob", NS, "hourly")["status"]["lastScheduleTime"] == "2026-01-01T00:30:00Z"


def test_snapshot_restore_round_trip():
    cluster, clock = make_cluster(deployment("web", 2))
    run(cluster, clock, 30)
    snap = cluster.snapshot()
    names = sorted(p["metadata"]["name"] for p in pods(cluster))
    d = cluster.store.get("Deployment", NS, "web")
    d["spec"]["replicas"] = 5
    cluster.store.update(d)
    run(cluster, clock, 30)
    assert len(pods(cluster, "web-")) == 5
    cluster.restore(snap)
    assert sorted(p["metadata"]["name"] for p in pods(cluster)) == names
    run(cluster, clock, 30)
    assert len(pods(cluster, "web-")) == 2
    assert cluster.store.get("Deployment", NS, "web")["status"]["availableReplicas"] == 2


def _load_balancer(name):
    svc = service(name)
    svc["spec"]["type"] = "LoadBalancer"
    return svc


def _lb_ips(cluster, name):
    status = cluster.store.get("Service", NS, name).get("status") or {}
    return [i["ip"] for i in (status.get("loadBalancer") or {}).get("ingress") or []]


def test_load_balancer_services_get_kind_network_addresses_in_creation_order_and_give_them_back():
    """Cloud Provider Kind: each LoadBalancer Service gets the lowest free address of the nodes' network
    (nodes at 172.18.0.2-4 here), the service controller's finalizer and events; a deleted Service or one
    that stops being a LoadBalancer frees its address and loses its status."""
    cluster, _ = make_cluster(_load_balancer("front"), _load_balancer("admin"), service("cart"))
    front = cluster.store.get("Service", NS, "front")
    assert front["status"]["loadBalancer"]["ingress"] == [
        {"ip": "172.18.0.5", "ipMode": "Proxy", "ports": [{"port": 80, "protocol": "TCP"}]}]
    assert front["metadata"]["finalizers"] == ["service.kubernetes.io/load-balancer-cleanup"]
    assert _lb_ips(cluster, "admin") == ["172.18.0.6"] and _lb_ips(cluster, "cart") == []
    ensured = [(e["involvedObject"]["name"], e["source"]["component"]) for e in events(cluster, "EnsuredLoadBalancer")]
    assert sorted(ensured) == [("admin", "service-controller"), ("front", "service-controller")]
    assert sorted(e["involvedObject"]["name"] for e in events(cluster, "EnsuringLoadBalancer")) == ["admin", "front"]

    cluster.store.delete("Service", NS, "front")
    cluster.reconcile()
    assert "front" not in [s["metadata"]["name"] for s in cluster.store.list("Service", NS)]
    assert [e["involvedObject"]["name"] for e in events(cluster, "DeletedLoadBalancer")] == ["front"]
    cluster.store.create(_load_balancer("next"))
    cluster.reconcile()
    assert _lb_ips(cluster, "next") == ["172.18.0.5"]  # the freed address is the lowest free one again

    admin = copy.deepcopy(cluster.store.get("Service", NS, "admin"))
    admin["spec"]["type"] = "ClusterIP"
    for port in admin["spec"]["ports"]:
        port.pop("nodePort", None)
    cluster.store.update(admin)
    cluster.reconcile()
    admin = cluster.store.get("Service", NS, "admin")
    assert admin["status"]["loadBalancer"] == {} and not admin["metadata"].get("finalizers")
    assert [e["message"] for e in events(cluster, "Type")] == ["LoadBalancer -> ClusterIP"]
    assert sorted(e["involvedObject"]["name"] for e in events(cluster, "DeletingLoadBalancer")) == ["admin", "front"]
    cluster.store.create(_load_balancer("last"))
    cluster.reconcile()
    assert _lb_ips(cluster, "last") == ["172.18.0.6"]


def test_hpa_sets_aside_cpu_samples_as_upstream_does_in_a_pods_first_minutes():
    """Upstream's replica calculator: in the CPU initialisation period (5 min from start) a sample whose
    window began before the pod became Ready is a start-up burst, not load; later only a pod that has never
    been Ready is set aside."""
    from itbench_gym.backends.sim.kube.controllers.hpa import _cpu_sample_ignored
    from itbench_gym.lang.timestamps import rfc3339

    def pod(started: float, ready_at: float, ready: str = "True") -> dict:
        return {"status": {"startTime": rfc3339(started),
                           "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": rfc3339(ready_at)}]}}

    t0 = 1_767_225_600.0
    assert _cpu_sample_ignored(pod(t0, t0 + 20), t0 + 30)  # ready 10 s ago: the 15 s window began before
    assert not _cpu_sample_ignored(pod(t0, t0 + 20), t0 + 40)  # a whole window since Ready
    assert _cpu_sample_ignored(pod(t0, t0 + 20, "False"), t0 + 200)  # not ready within the period
    assert not _cpu_sample_ignored(pod(t0, t0 + 100, "False"), t0 + 400)  # turned unready late: counted after the period
    assert _cpu_sample_ignored(pod(t0, t0 + 10, "False"), t0 + 400)  # never ready (its transition within the 30 s delay)
    assert _cpu_sample_ignored({"status": {"startTime": rfc3339(t0)}}, t0 + 400)  # no Ready condition


def test_every_namespace_has_a_default_service_account_that_comes_back():
    """kube-controller-manager's service-account controller: namespaces made before it ran, new ones,
    a deleted ``default`` made again; none in a namespace being deleted."""
    cluster, clock = make_cluster()
    accounts = {(sa["metadata"]["namespace"], sa["metadata"]["name"]) for sa in cluster.store.list("ServiceAccount")}
    assert {("default", "default"), ("kube-system", "default"), (NS, "default")} <= accounts
    cluster.store.delete("ServiceAccount", NS, "default")
    cluster.reconcile()
    assert cluster.store.get("ServiceAccount", NS, "default")["metadata"]["uid"]
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}])
    assert cluster.store.get("ServiceAccount", "fresh", "default")
    cluster.store.delete("Namespace", None, "fresh")
    cluster.reconcile()
    run(cluster, clock, 60)
    assert not [sa for sa in cluster.store.list("ServiceAccount") if sa["metadata"]["namespace"] == "fresh"]
