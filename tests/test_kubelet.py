"""The kubelet model: pod lifecycle, crashes, back-off, image pulls, probes, termination."""

from __future__ import annotations

import pytest

from itbench_gym.backends.sim.kube.controllers.util import parse_time
from itbench_gym.backends.sim.kube.runtime import DefaultRuntime
from kube_fixtures import NS, container, cstatus, deployment, events, make_cluster, pods, run


def _pod(name="solo", containers=None, init=None, **spec):
    body = {"containers": containers or [container()], **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": body}


def _get(cluster, name="solo"):
    return cluster.store.get("Pod", NS, name)


def test_pod_goes_from_container_creating_to_running_with_kubelet_events():
    cluster, clock = make_cluster(_pod(), runtime=DefaultRuntime(startup=4))
    pod = _get(cluster)
    assert pod["status"]["phase"] == "Pending"
    assert cstatus(pod)["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert pod["status"]["podIP"].startswith("10.244.") and pod["status"]["hostIP"].startswith("172.18.0.")
    run(cluster, clock, 15)
    pod = _get(cluster)
    assert pod["status"]["phase"] == "Running"
    st = cstatus(pod)
    assert st["ready"] and st["started"] and st["restartCount"] == 0
    assert st["containerID"].startswith("containerd://") and "@sha256:" in st["imageID"]
    started = parse_time(st["state"]["running"]["startedAt"]) - parse_time(pod["metadata"]["creationTimestamp"])
    assert started == 4
    conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conds == {"PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "True",
                     "ContainersReady": "True", "PodScheduled": "True"}
    reasons = [e["reason"] for e in sorted(cluster.store.list("Event", NS), key=lambda e: e["metadata"]["name"])
               if e["involvedObject"]["name"] == "solo"]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    assert events(cluster, "Created")[0]["involvedObject"]["fieldPath"] == "spec.containers{main}"


def test_oom_kill_restarts_then_crash_loop_back_off_doubles():
    cluster, clock = make_cluster(deployment("rec", 1))
    run(cluster, clock, 15)
    name = pods(cluster, "rec-")[0]["metadata"]["name"]
    cluster.kill_container(NS, name, "main")  # first crash: restarted at once
    st = cstatus(_get(cluster, name))
    assert st["restartCount"] == 1 and "running" in st["state"]
    assert st["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert st["lastState"]["terminated"]["exitCode"] == 137
    run(cluster, clock, 5, step=5)
    cluster.kill_container(NS, name, "main")  # second crash: back-off 10 s
    pod = _get(cluster, name)
    st = cstatus(pod)
    assert st["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert st["state"]["waiting"]["message"].startswith(f"back-off 10s restarting failed container=main pod={name}_{NS}(")
    assert st["restartCount"] == 1 and not st["ready"] and pod["status"]["phase"] == "Running"
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    assert events(cluster, "BackOff")[0]["message"].startswith(f"Back-off restarting failed container main in pod {name}_{NS}(")
    run(cluster, clock, 9, step=9)
    assert "waiting" in cstatus(_get(cluster, name))["state"]
    run(cluster, clock, 1, step=1)
    st = cstatus(_get(cluster, name))
    assert "running" in st["state"] and st["restartCount"] == 2
    cluster.kill_container(NS, name, "main")
    assert "back-off 20s" in cstatus(_get(cluster, name))["state"]["waiting"]["message"]


def test_back_off_is_capped_at_five_minutes():
    cluster, clock = make_cluster(deployment("rec", 1))
    run(cluster, clock, 15)
    name = pods(cluster, "rec-")[0]["metadata"]["name"]
    waits = []
    for _ in range(9):
        cluster.kill_container(NS, name, "main")
        state = cstatus(_get(cluster, name))["state"]
        waits.append(state["waiting"]["message"].split()[1] if "waiting" in state else "0s")
        run(cluster, clock, 301, step=301)
    assert waits == ["0s", "10s", "20s", "40s", "1m20s", "2m40s", "5m0s", "5m0s", "5m0s"]


def test_unknown_image_goes_err_image_pull_then_image_pull_back_off():
    class NoSuchImage(DefaultRuntime):
        def image_known(self, image):
            return image != "ghcr.io/demo/app:typo"

    cluster, clock = make_cluster(_pod(containers=[container(image="ghcr.io/demo/app:typo")]), runtime=NoSuchImage())
    run(cluster, clock, 1, step=1)
    st = cstatus(_get(cluster))
    assert st["state"]["waiting"]["reason"] == "ErrImagePull"
    run(cluster, clock, 5, step=5)
    pod = _get(cluster)
    st = cstatus(pod)
    assert st["state"]["waiting"]["reason"] == "ImagePullBackOff" and pod["status"]["phase"] == "Pending"
    assert st["state"]["waiting"]["message"].startswith('Back-off pulling image "ghcr.io/demo/app:typo"')
    failed = [e["message"] for e in events(cluster, "Failed")]
    assert 'Failed to pull image "ghcr.io/demo/app:typo": failed to pull and unpack image' in failed[0]
    assert "Error: ErrImagePull" in failed and "Error: ImagePullBackOff" in failed
    run(cluster, clock, 120)
    pulling = [e for e in events(cluster, "Pulling")][0]
    assert pulling["count"] >= 3


def test_bad_command_is_run_container_error_then_crash_loop():
    class BadCommand(DefaultRuntime):
        def start_error(self, pod, c):
            return 'exec: "serve": executable file not found in $PATH'

    cluster, clock = make_cluster(_pod(), runtime=BadCommand())
    run(cluster, clock, 15)
    st = cstatus(_get(cluster))
    assert st["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    last = st["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("StartError", 128)
    assert "executable file not found" in last["message"]


def test_image_index_without_the_node_platform_fails_the_pull():
    class AmdOnly(DefaultRuntime):
        def image_supports(self, image, arch):
            return arch == "amd64"

    cluster, clock = make_cluster(_pod(), runtime=AmdOnly(), arch="arm64")
    run(cluster, clock, 30)
    st = cstatus(_get(cluster))
    assert st["state"]["waiting"]["reason"] == "ImagePullBackOff" and st["restartCount"] == 0
    assert st["state"]["waiting"]["message"].endswith(": no match for platform in manifest: not found")


def test_binary_for_another_cpu_exits_at_once_and_crash_loops():
    class AmdBinaries(DefaultRuntime):
        def binary_runs(self, image, arch):
            return arch == "amd64"

    cluster, clock = make_cluster(_pod(), runtime=AmdBinaries(), arch="arm64")
    run(cluster, clock, 30)
    st = cstatus(_get(cluster))
    assert st["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    last = st["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("Error", 1) and st["restartCount"] >= 1


def test_readiness_waits_for_initial_delay():
    probe = {"readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "initialDelaySeconds": 20}}
    cluster, clock = make_cluster(_pod(containers=[container(**probe)]))
    run(cluster, clock, 15)
    pod = _get(cluster)
    assert pod["status"]["phase"] == "Running" and not cstatus(pod)["ready"]
    ready = {c["type"]: c for c in pod["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "ContainersNotReady" and ready["message"] == "containers with unready status: [main]"
    run(cluster, clock, 15)
    pod = _get(cluster)
    assert cstatus(pod)["ready"]
    ready = {c["type"]: c for c in pod["status"]["conditions"]}["Ready"]
    assert parse_time(ready["lastTransitionTime"]) - parse_time(pod["metadata"]["creationTimestamp"]) == 22


def test_liveness_failure_restarts_container():
    class Dead(DefaultRuntime):
        def probe_succeeds(self, pod, c, kind):
            return kind != "liveness"

    probe = {"livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 10, "failureThreshold": 3}}
    cluster, clock = make_cluster(_pod(containers=[container(**probe)]), runtime=Dead())
    run(cluster, clock, 45)
    st = cstatus(_get(cluster))
    assert st["restartCount"] == 1 and st["lastState"]["terminated"]["exitCode"] == 137
    killing = [e["message"] for e in events(cluster, "Killing")]
    assert "Container main failed liveness probe, will be restarted" in killing
    assert any(e["message"].startswith("Liveness probe failed: dial tcp 10.244.") for e in events(cluster, "Unhealthy"))


def test_probe_that_starts_failing_after_a_quiet_spell_is_seen_at_the_next_tick():
    class Switch(DefaultRuntime):
        healthy = True

        def probe_succeeds(self, pod, c, kind):
            return self.healthy

    runtime = Switch()
    probe = {"readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 10, "failureThreshold": 2}}
    cluster, clock = make_cluster(_pod(containers=[container(**probe)]), runtime=runtime)
    run(cluster, clock, 600)
    assert cstatus(_get(cluster))["ready"] and not events(cluster, "Unhealthy")
    runtime.healthy = False
    switched = clock.now()
    run(cluster, clock, 10, step=1)  # one probe in any 10 s
    (unhealthy,) = events(cluster, "Unhealthy")
    assert unhealthy["message"] == 'Readiness probe failed: Get "http://10.244.1.2:8080/": dial tcp 10.244.1.2:8080: connect: connection refused'
    assert unhealthy["count"] == 1 and cstatus(_get(cluster))["ready"]  # one failure: the threshold is two
    first = parse_time(unhealthy["firstTimestamp"])
    assert switched < first <= switched + 10
    run(cluster, clock, 30)  # unready at the second failing probe, a period after the first, and it stays so
    pod = _get(cluster)
    assert not cstatus(pod)["ready"]
    ready = {c["type"]: c for c in pod["status"]["conditions"]}["Ready"]
    assert ready["status"] == "False" and parse_time(ready["lastTransitionTime"]) == first + 10


@pytest.mark.parametrize("step", [1.0, 2.0, 15.0, 60.0])
def test_a_failing_probe_counts_one_failure_a_period_however_time_is_stepped(step):
    """The kubelet probes once a period: how often the twin's clock is advanced (an agent's short
    steps, a tick, a long wait) changes neither the failures an event counts nor when they end."""
    class Failing(DefaultRuntime):
        def probe_succeeds(self, pod, c, kind):
            return kind != "readiness"

    probe = {"readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 10, "failureThreshold": 3}}
    cluster, clock = make_cluster(_pod(containers=[container(**probe)]), runtime=Failing(startup=0))
    start = parse_time(_get(cluster)["metadata"]["creationTimestamp"])
    run(cluster, clock, 120, step=step)
    (unhealthy,) = events(cluster, "Unhealthy")
    assert unhealthy["count"] == 13  # probes at 0, 10, ..., 120 s after the start
    assert parse_time(unhealthy["firstTimestamp"]) - start <= 10 + step


def test_container_killed_after_a_quiet_spell_shows_the_kill_at_once():
    cluster, clock = make_cluster(_pod())
    run(cluster, clock, 900)
    rv = cluster.store.resource_version
    run(cluster, clock, 0.5, step=0.5)
    assert {ev.obj["kind"] for ev in cluster.store.events_since(rv)} <= {"Lease"}
    cluster.kill_container(NS, "solo", "main")
    st = cstatus(_get(cluster))
    assert st["restartCount"] == 1 and "running" in st["state"]
    assert parse_time(st["lastState"]["terminated"]["finishedAt"]) == int(clock.now())


def test_init_containers_run_first_and_in_order():
    init = [container("migrate", image="ghcr.io/demo/migrate:1"), container("seed", image="ghcr.io/demo/seed:1")]
    cluster, clock = make_cluster(_pod(init=init), runtime=DefaultRuntime(startup=2, init_run=5))
    pod = _get(cluster)
    assert cstatus(pod)["state"]["waiting"]["reason"] == "PodInitializing"
    assert {c["type"]: c for c in pod["status"]["conditions"]}["Initialized"]["message"] == \
        "containers with incomplete status: [migrate seed]"
    run(cluster, clock, 10, step=10)  # migrate ran 2..7 s, seed started at 9 s
    pod = _get(cluster)
    inits = {s["name"]: s for s in pod["status"]["initContainerStatuses"]}
    assert inits["migrate"]["state"]["terminated"]["reason"] == "Completed"
    assert "running" in inits["seed"]["state"] and pod["status"]["phase"] == "Pending"
    run(cluster, clock, 15)
    pod = _get(cluster)
    assert pod["status"]["phase"] == "Running" and cstatus(pod)["ready"]


def test_graceful_deletion_keeps_pod_terminating_until_it_stops():
    cluster, clock = make_cluster(_pod(), runtime=DefaultRuntime(stop=10))
    run(cluster, clock, 15)
    cluster.store.delete("Pod", NS, "solo")
    cluster.reconcile()
    assert _get(cluster)["metadata"]["deletionTimestamp"]
    assert events(cluster, "Killing")[0]["message"] == "Stopping container main"
    run(cluster, clock, 5, step=5)
    assert _get(cluster)
    run(cluster, clock, 5, step=5)
    assert not pods(cluster, "solo")


def test_batch_pod_succeeds_and_never_policy_fails():
    class ExitCode(DefaultRuntime):
        def exit_after(self, pod, c, files, *, emulated=False):
            return (3.0, 0 if pod["metadata"]["name"] == "ok" else 2)

    cluster, clock = make_cluster(_pod("ok", restartPolicy="Never"), _pod("bad", restartPolicy="Never"), runtime=ExitCode())
    run(cluster, clock, 15)
    assert _get(cluster, "ok")["status"]["phase"] == "Succeeded"
    bad = _get(cluster, "bad")
    assert bad["status"]["phase"] == "Failed"
    assert cstatus(bad)["state"]["terminated"]["exitCode"] == 2


def test_usage_is_reported_for_running_containers_only_and_bad_input_is_clear():
    cluster, clock = make_cluster(_pod())
    run(cluster, clock, 15)
    cluster.set_usage(NS, "solo", "main", cpu_cores=0.25, memory_bytes=64 * 2**20)
    usage = cluster.usage()
    assert usage.pods[(NS, "solo")] == {"main": (0.25, 64 * 2**20)}
    node = _get(cluster)["spec"]["nodeName"]
    assert usage.nodes[node][0] > 0.25
    cluster.kill_container(NS, "solo", "main")
    cluster.kill_container(NS, "solo", "main")  # now in back-off: not running, no usage
    assert (NS, "solo") not in cluster.usage().pods
    with pytest.raises(KeyError, match="has no container 'nope'"):
        cluster.set_usage(NS, "solo", "nope", cpu_cores=1, memory_bytes=1)
    with pytest.raises(KeyError, match="pod shop/ghost does not exist"):
        cluster.set_usage(NS, "ghost", "main", cpu_cores=1, memory_bytes=1)
    with pytest.raises(KeyError, match="is not running on any node"):
        cluster.kill_container(NS, "ghost", "main")


def test_quiet_cluster_tick_is_cheap_and_deterministic():
    objs = [deployment(f"svc{i}", 2) for i in range(20)]
    a, ca = make_cluster(*objs, seed=3)
    b, cb = make_cluster(*objs, seed=3)
    run(a, ca, 60)
    run(b, cb, 60)
    strip = lambda k: sorted((p["metadata"]["name"], p["status"]["podIP"], p["spec"]["nodeName"]) for p in pods(k))
    assert strip(a) == strip(b)
    rv = a.store.resource_version
    run(a, ca, 60)
    # In a healthy steady state only the nodes' heartbeat Leases are renewed (every 10 s, 3 nodes).
    changed = a.store.events_since(rv)
    assert {ev.obj["kind"] for ev in changed} == {"Lease"} and len(changed) == 18


def test_pods_left_alone_at_the_end_of_a_tick_end_up_as_if_every_pod_had_been_synced(monkeypatch):
    """The end of a tick syncs only pods that may change; what the cluster shows must be what syncing
    every running pod shows, through node address changes, kills, edits and a restore."""
    from itbench_gym.backends.sim.kube.kubelet import Kubelet

    class Flaky(DefaultRuntime):
        healthy = True

        def probe_succeeds(self, pod, c, kind):
            return self.healthy

    probe = {"readinessProbe": {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 10, "failureThreshold": 2}}
    objs = [deployment("plain", 2), deployment("probed", 1), _pod("probe", containers=[container(**probe)]),
            _pod("boot", init=[container("migrate", image="ghcr.io/demo/migrate:1")])]

    def history(every: bool) -> list:
        if every:
            monkeypatch.setattr(Kubelet, "_may_change", lambda self, key, run: True)
        else:
            monkeypatch.undo()
        runtime = Flaky()
        cluster, clock = make_cluster(*objs, seed=4, runtime=runtime)
        seen = []

        def look() -> None:
            seen.append(sorted((p["metadata"]["name"], p["status"]) for p in pods(cluster)))

        run(cluster, clock, 300)
        look()
        node = cluster.store.get("Node", "", _get(cluster, "probe")["spec"]["nodeName"])
        node["status"]["addresses"][0]["address"] = "172.18.0.99"
        cluster.store.update(node, subresource="status")
        run(cluster, clock, 15)
        look()
        runtime.healthy = False
        run(cluster, clock, 60)
        look()
        snap = cluster.snapshot()
        plain = pods(cluster, "plain-")[0]["metadata"]["name"]
        cluster.kill_container(NS, plain, "main")
        run(cluster, clock, 120)
        look()
        cluster.restore(snap)
        run(cluster, clock, 30, step=2)
        look()
        return seen

    synced_all = history(every=True)
    assert any(status["hostIP"] == "172.18.0.99" for _, status in synced_all[1])
    assert not next(status for name, status in synced_all[2] if name == "probe")["containerStatuses"][0]["ready"]
    assert history(every=False) == synced_all
