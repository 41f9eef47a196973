"""The kubelet does not start a pod whose ConfigMap / Secret volume or env reference is missing.

What a real kubelet does (pkg/kubelet/volumemanager, the configmap/secret volume plugins,
makeEnvironmentVariables): the pod stays ContainerCreating without a sandbox (no IP) and FailedMount
events repeat with the volume manager's back-off until the object exists; a missing env reference
leaves the container in CreateContainerConfigError. A running pod keeps what it mounted.
"""

from __future__ import annotations

import json
from typing import Any

from conftest import ShopTwin
from kube_fixtures import NS, container, cstatus, deployment, events, make_cluster, pods, run

Obj = dict[str, Any]


def _pod(name: str = "solo", *, volumes: list[Obj] | None = None, init: list[Obj] | None = None, **c: Any) -> Obj:
    spec: Obj = {"containers": [container(**c)], "volumes": volumes or []}
    if init:
        spec["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _cm(name: str, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": data}


def _conditions(pod: Obj) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod["status"]["conditions"]}


def test_missing_configmap_volume_keeps_the_pod_container_creating_with_failed_mount_events() -> None:
    cluster, clock = make_cluster(_pod(volumes=[{"name": "config-ro", "configMap": {"name": "flagd-config"}}]))
    run(cluster, clock, 60)
    pod = cluster.store.get("Pod", NS, "solo")
    assert pod["status"]["phase"] == "Pending" and "podIP" not in pod["status"]
    assert cstatus(pod)["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert _conditions(pod)["PodReadyToStartContainers"] == "False" and _conditions(pod)["Ready"] == "False"
    failed = events(cluster, "FailedMount")
    assert [e["message"] for e in failed] == ['MountVolume.SetUp failed for volume "config-ro" : configmap "flagd-config" not found']
    assert failed[0]["type"] == "Warning" and failed[0]["source"]["component"] == "kubelet"
    assert failed[0]["count"] >= 7  # 0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s: the back-off doubles
    assert not events(cluster, "Started")
    cluster.apply([_cm("flagd-config", **{"demo.flagd.json": "{}"})])
    run(cluster, clock, 150)  # the next retry comes at most 2m2s later
    pod = cluster.store.get("Pod", NS, "solo")
    assert pod["status"]["phase"] == "Running" and pod["status"]["podIP"].startswith("10.244.")
    assert cstatus(pod)["ready"] and cstatus(pod)["restartCount"] == 0


def test_optional_and_present_sources_mount() -> None:
    volumes = [
        {"name": "opt", "configMap": {"name": "absent", "optional": True}},
        {"name": "cfg", "configMap": {"name": "present", "items": [{"key": "a.json", "path": "a.json"}]}},
        {"name": "proj", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}, {"configMap": {"name": "present"}}]}},
    ]
    cluster, clock = make_cluster(_cm("present", **{"a.json": "{}"}), _pod(volumes=volumes))
    run(cluster, clock, 15)
    assert cluster.store.get("Pod", NS, "solo")["status"]["phase"] == "Running"
    assert not events(cluster, "FailedMount")


def test_missing_item_key_and_missing_secret_have_their_plugin_messages() -> None:
    key_pod = _pod("keys", volumes=[{"name": "cfg", "configMap": {"name": "present", "items": [{"key": "gone.json", "path": "x"}]}}])
    secret_pod = _pod("creds", volumes=[{"name": "tls", "secret": {"secretName": "tls-certs"}}])
    projected = _pod("proj", volumes=[{"name": "bundle", "projected": {"sources": [{"secret": {"name": "bundle"}}]}}])
    cluster, clock = make_cluster(_cm("present", **{"a.json": "{}"}), key_pod, secret_pod, projected)
    run(cluster, clock, 15)
    messages = {e["involvedObject"]["name"]: e["message"] for e in events(cluster, "FailedMount")}
    assert messages == {
        "keys": 'MountVolume.SetUp failed for volume "cfg" : configmap references non-existent config key: gone.json',
        "creds": 'MountVolume.SetUp failed for volume "tls" : secret "tls-certs" not found',
        "proj": 'MountVolume.SetUp failed for volume "bundle" : secret "bundle" not found',
    }
    assert all(p["status"]["phase"] == "Pending" for p in pods(cluster))


def test_pod_with_init_containers_waits_as_pod_initializing() -> None:
    init = [container("init-config", image="busybox")]
    cluster, clock = make_cluster(_pod(volumes=[{"name": "config-ro", "configMap": {"name": "flagd-config"}}], init=init))
    run(cluster, clock, 15)
    pod = cluster.store.get("Pod", NS, "solo")
    assert pod["status"]["initContainerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert cstatus(pod)["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert _conditions(pod)["Initialized"] == "False"


def test_running_pod_keeps_its_mounted_configmap_but_a_replacement_cannot_start() -> None:
    volumes = [{"name": "config-ro", "configMap": {"name": "flagd-config"}}]
    dep = deployment("flagd", 1)
    dep["spec"]["template"]["spec"]["volumes"] = volumes
    cluster, clock = make_cluster(_cm("flagd-config", **{"demo.flagd.json": "{}"}), dep)
    run(cluster, clock, 15)
    cluster.store.delete("ConfigMap", NS, "flagd-config")
    run(cluster, clock, 60)
    first = pods(cluster, "flagd-")
    assert [p["status"]["phase"] for p in first] == ["Running"]  # mounted content stays
    cluster.store.delete("Pod", NS, first[0]["metadata"]["name"])
    run(cluster, clock, 120)
    replacement = [p for p in pods(cluster, "flagd-") if p["metadata"]["uid"] != first[0]["metadata"]["uid"]]
    assert len(replacement) == 1 and replacement[0]["status"]["phase"] == "Pending"
    assert cstatus(replacement[0])["state"]["waiting"]["reason"] == "ContainerCreating"
    assert events(cluster, "FailedMount")[0]["involvedObject"]["name"] == replacement[0]["metadata"]["name"]


def test_missing_env_reference_is_create_container_config_error_until_it_exists() -> None:
    env = [{"name": "FLAG", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "flag"}}}]
    cluster, clock = make_cluster(_pod("env", env=env), _pod("from", envFrom=[{"secretRef": {"name": "creds"}}]),
                                  _pod("opt", envFrom=[{"configMapRef": {"name": "nothing", "optional": True}}]))
    run(cluster, clock, 30)
    waiting = {p["metadata"]["name"]: cstatus(p)["state"].get("waiting") for p in pods(cluster)}
    assert waiting == {
        "env": {"reason": "CreateContainerConfigError", "message": 'configmap "settings" not found'},
        "from": {"reason": "CreateContainerConfigError", "message": 'secret "creds" not found'},
        "opt": None,
    }
    assert {e["message"] for e in events(cluster, "Failed")} == {'Error: configmap "settings" not found', 'Error: secret "creds" not found'}
    cluster.apply([_cm("settings", other="x")])
    run(cluster, clock, 15)
    env_pod = cluster.store.get("Pod", NS, "env")
    assert cstatus(env_pod)["state"]["waiting"]["message"] == f"couldn't find key flag in ConfigMap {NS}/settings"
    cluster.apply([_cm("settings", flag="on")])
    run(cluster, clock, 15)
    env_pod = cluster.store.get("Pod", NS, "env")
    assert "running" in cstatus(env_pod)["state"] and cstatus(env_pod)["restartCount"] == 0


def test_env_and_subpath_files_keep_what_the_container_started_with(shop_twin: ShopTwin) -> None:
    """``kubectl exec`` sees a ConfigMap edit in a whole-volume mount once the kubelet resyncs the pod
    (within its minute), but the container's env and its subPath file keep the values its run started
    with (the kubelet resolves env once and never updates a subPath mount); the container's next run
    reads the new ones."""
    shop_twin.reset()
    store, twin = shop_twin.store, shop_twin.backend.twin
    namespace = "otel-demo"
    store.create({**_cm("settings", mode="calm", level="1"), "metadata": {"name": "settings", "namespace": namespace}})
    solo = _pod(image="busybox:1.36", command=["sleep", "3600"],
                env=[{"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}}],
                volumeMounts=[{"name": "all", "mountPath": "/etc/all"}, {"name": "one", "mountPath": "/etc/level", "subPath": "level"}],
                volumes=[{"name": "all", "configMap": {"name": "settings"}}, {"name": "one", "configMap": {"name": "settings"}}])
    store.create({**solo, "metadata": {"name": "solo", "namespace": namespace}})
    shop_twin.backend.advance(30)

    def view() -> str:
        script = 'echo "$MODE $(cat /etc/level) $(cat /etc/all/mode) $(cat /etc/all/level)"'
        return twin.container_exec()(namespace, "solo", "main", ["sh", "-c", script], b"", False).stdout.decode()

    assert view() == "calm 1 calm 1\n"
    edited = store.get("ConfigMap", namespace, "settings")
    edited["data"] = {"mode": "storm", "level": "9"}
    store.update(edited)
    assert view() == "calm 1 calm 1\n"  # the kubelet projects the edit at the pod's next resync
    shop_twin.backend.advance(60)
    assert view() == "calm 1 storm 9\n"
    twin.cluster.kill_container(namespace, "solo", "main", reason="Error", exit_code=1)
    shop_twin.backend.advance(60)
    assert cstatus(store.get("Pod", namespace, "solo"))["restartCount"] == 1
    assert view() == "storm 9 storm 9\n"


def test_an_emptydir_holds_what_the_pods_emulated_processes_wrote_for_the_pods_life(shop_twin: ShopTwin) -> None:
    """flagd's init container copies the flag file into the emptyDir its other containers read (its
    log is the file); what an exec writes there is seen by the pod's other containers and survives a
    container restart, not the pod; a readOnly mount and a ConfigMap volume refuse writes."""
    shop_twin.reset()
    store, twin = shop_twin.store, shop_twin.backend.twin
    namespace = "otel-demo"
    flagd = next(p for p in store.list("Pod", namespace) if p["metadata"]["name"].startswith("flagd-"))
    name = flagd["metadata"]["name"]
    flag_file = store.get("ConfigMap", namespace, "flagd-config")["data"]["demo.flagd.json"]

    def exec_(pod: str, container: str, script: str) -> tuple[str, str]:
        out = twin.container_exec()(namespace, pod, container, ["sh", "-c", script], b"", False)
        return out.stdout.decode(), out.stderr.decode()

    assert exec_(name, "flagd-ui", "cat /app/data/demo.flagd.json") == (flag_file, "")
    listed, note = exec_(name, "flagd-ui", "ls /app/data")  # flagd and flagd-ui are servers the twin does not emulate
    assert listed == "demo.flagd.json\n" and "does not model what is here" in note
    logged = twin.container_log_lines(namespace, name, "init-config", 0, shop_twin.backend.clock.now())
    assert "\n".join(line for _, line in logged) == flag_file.rstrip("\n")

    solo = _pod(image="busybox:1.36", command=["sleep", "3600"],
                volumeMounts=[{"name": "scratch", "mountPath": "/data"}, {"name": "scratch", "mountPath": "/ro", "readOnly": True},
                              {"name": "config", "mountPath": "/etc/config"}],
                volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "config", "configMap": {"name": "flagd-config"}}],
                init=[container(name="prepare", image="busybox:1.36", command=["sh", "-c", "mkdir -p /w/d && echo ready > /w/d/state"],
                                volumeMounts=[{"name": "scratch", "mountPath": "/w"}])])
    store.create({**solo, "metadata": {"name": "solo", "namespace": namespace}})
    shop_twin.backend.advance(30)
    assert exec_("solo", "main", "cat /data/d/state /ro/d/state") == ("ready\nready\n", "")
    assert exec_("solo", "main", "echo note > /data/note; echo x > /ro/x; echo x > /etc/config/x") == (
        "", "sh: can't create /ro/x: Read-only file system\nsh: can't create /etc/config/x: Read-only file system\n")
    twin.cluster.kill_container(namespace, "solo", "main", reason="Error", exit_code=1)
    shop_twin.backend.advance(60)
    assert cstatus(store.get("Pod", namespace, "solo"))["restartCount"] == 1
    assert exec_("solo", "main", "ls /data") == ("d\nnote\n", "")
    store.delete("Pod", namespace, "solo", grace_period_seconds=0)
    store.create({**solo, "metadata": {"name": "solo", "namespace": namespace}})
    shop_twin.backend.advance(30)
    assert exec_("solo", "main", "ls /data") == ("d\n", "")


def test_flagd_serves_its_working_copy_of_the_flag_file(shop_twin: ShopTwin) -> None:
    """A ConfigMap edit reaches flagd only through a new pod (its init container copies the file);
    a container restart keeps the copy; an edit of the copy itself (through flagd-ui's shell) is
    served at once, as flagd watches the file; a file flagd rejects leaves a running flagd as it was."""
    shop_twin.reset()
    store, twin, backend = shop_twin.store, shop_twin.backend.twin, shop_twin.backend
    namespace = "otel-demo"
    config = store.get("ConfigMap", namespace, "flagd-config")
    flags = json.loads(config["data"]["demo.flagd.json"])
    flags["flags"]["paymentFailure"]["defaultVariant"] = "100%"
    edited = json.dumps(flags)
    config["data"]["demo.flagd.json"] = edited
    store.update(config)
    # the collector's span metrics move once a minute: a 2-minute window holds two of its flushes
    failures = 'sum(increase(traces_span_metrics_calls_total{service_name="payment", status_code="STATUS_CODE_ERROR"}[2m])) or vector(0)'

    backend.advance(150)
    assert shop_twin.value(failures) == 0
    flagd = next(p["metadata"]["name"] for p in store.list("Pod", namespace) if p["metadata"]["name"].startswith("flagd-"))
    twin.cluster.kill_container(namespace, flagd, "flagd", reason="Error", exit_code=1)
    backend.advance(150)
    assert cstatus(store.get("Pod", namespace, flagd), "flagd")["restartCount"] == 1
    assert shop_twin.value(failures) == 0

    written = twin.container_exec()(namespace, flagd, "flagd-ui", ["sh", "-c", f"echo '{edited}' > /app/data/demo.flagd.json"], b"", False)
    assert (written.stdout, written.stderr) == (b"", b"")
    backend.advance(150)
    assert shop_twin.value(failures) > 0

    broken = twin.container_exec()(namespace, flagd, "flagd-ui", ["sh", "-c", "echo '{' > /app/data/demo.flagd.json"], b"", False)
    assert broken.stderr == b""
    backend.advance(150)
    assert shop_twin.value(failures) > 0, "flagd keeps what it served when it rejects the file it watches"
    twin.cluster.kill_container(namespace, flagd, "flagd", reason="Error", exit_code=1)
    backend.advance(240)  # the failures before the restart are flushed and scraped before the window
    assert shop_twin.value(failures) == 0, "a flagd starting on a file it rejects serves no flags"
