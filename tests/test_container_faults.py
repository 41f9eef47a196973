"""ITBench's container and kubelet faults on the twin: what kubectl, the events and
kube-state-metrics show for each, and the process, registry and OOM models behind them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import SHARED, ShopTwin
from itbench_gym.backends.sim.app.processes import Process, only_sleeps, programs
from itbench_gym.backends.sim.kube import oom
from itbench_gym.backends.sim.kube.registry import shared, split_reference
from itbench_gym.backends.sim.kube.tables import pod_status_reason
from itbench_gym.faults import inject_faults, remove_faults
from itbench_gym.faults.catalogue import FaultError, fault_args_problems
from itbench_gym.faults.operations import containers
from itbench_gym.faults.operations.common import target
from itbench_gym.spec import FaultRef

NS = "otel-demo"
Obj = dict[str, Any]
MY_FAULTS = ["invalid-kubernetes-workload-container-command", "nonexistent-kubernetes-workload-container-image",
             "unsupported-architecture-kubernetes-workload-container-image", "crashing-kubernetes-workload-init-container",
             "hanging-kubernetes-workload-init-container", "misconfigured-kubernetes-workload-container-readiness-probe",
             "insufficient-kubernetes-workload-container-resources",
             "unassigned-kubernetes-workload-container-resource-limits"]


def _workload(name: str) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS}}


#: The shop's collector's pods (no app model drives it).
COLLECTOR_PODS = "app.kubernetes.io/name=opentelemetry-collector"


def _inject(twin: ShopTwin, fault: str, service: str, *, container: bool = True, seconds: float = 120,
            container_name: str | None = None, selector: str | None = None) -> list[Obj]:
    """Inject ``fault`` on ``service``'s Deployment (on the healthy shop), let ``seconds`` pass; its pods
    made since (from the faulted template). The container and the pods' selector default to the shop's
    naming (``opentelemetry.io/name``)."""
    twin.reset()
    selector = selector or f"opentelemetry.io/name={service}"
    before = {p["metadata"]["uid"] for p in twin.store.list("Pod", NS, label_selector=selector)}
    ctx = twin.context()
    args: Obj = {"kubernetesObject": _workload(service)}
    if container:
        args["container"] = {"name": container_name or service}
    inject_faults([FaultRef(fault, args)], ctx)
    ctx.close()
    twin.backend.advance(seconds)
    return [p for p in twin.store.list("Pod", NS, label_selector=selector) if p["metadata"]["uid"] not in before]


def _inject_collector(twin: ShopTwin, fault: str, seconds: float = 120) -> list[Obj]:
    return _inject(twin, fault, "otel-collector", container_name="opentelemetry-collector", selector=COLLECTOR_PODS, seconds=seconds)


def _status(pod: Obj, name: str) -> Obj:
    statuses = pod["status"].get("initContainerStatuses", []) + pod["status"]["containerStatuses"]
    return next(s for s in statuses if s["name"] == name)


def _events(twin: ShopTwin, pod: Obj) -> list[str]:
    return [e["message"] for e in twin.store.list("Event", NS)
            if e["involvedObject"].get("name") == pod["metadata"]["name"]]


def test_invalid_command_fails_to_start_and_crash_loops(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[0], "ad", seconds=300)
    st = _status(pod, "ad")
    last = st["lastState"]["terminated"]
    assert (last["reason"], last["exitCode"]) == ("StartError", 128)
    assert 'exec: "invalid-command": executable file not found in $PATH' in last["message"]
    assert st["state"]["waiting"]["reason"] == "CrashLoopBackOff" and st["restartCount"] >= 2
    assert pod_status_reason(pod)[0] == "CrashLoopBackOff"
    assert shop_twin.value('kube_pod_container_status_waiting_reason{container="ad",reason="CrashLoopBackOff"}') == 1


def test_nonexistent_image_is_image_pull_back_off_with_the_registry_answer(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[1], "product-catalog")
    st = _status(pod, "product-catalog")
    assert pod["status"]["phase"] == "Pending" and st["state"]["waiting"]["reason"] == "ImagePullBackOff"
    image = "quay.io/it-bench/hello-bench-invalid:1.0.0"
    cause = (f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": unexpected status from '
             "HEAD request to https://quay.io/v2/it-bench/hello-bench-invalid/manifests/1.0.0: 401 UNAUTHORIZED")
    assert st["state"]["waiting"]["message"] == f'Back-off pulling image "{image}": ErrImagePull: {cause}'
    assert f'Failed to pull image "{image}": {cause}' in _events(shop_twin, pod)
    assert shop_twin.value('kube_pod_container_status_waiting_reason{container="product-catalog",reason="ImagePullBackOff"}') == 1


def test_unsupported_architecture_pins_a_worker_and_the_pull_finds_no_platform(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[2], "checkout")
    node = pod["spec"]["nodeSelector"]["kubernetes.io/hostname"]
    assert node.startswith("worker-") and pod["spec"]["nodeName"] == node
    st = _status(pod, "checkout")
    assert st["image"] == "quay.io/it-bench/hello-bench-arm64:2.0.0"
    assert st["state"]["waiting"]["message"].endswith(": no match for platform in manifest: not found")


def test_crashing_init_container_fails_on_the_config_and_recovers_when_it_is_fixed(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[3], "recommendation", container=False, seconds=90)
    init = _status(pod, "worker")
    assert init["lastState"]["terminated"]["exitCode"] == 1 and init["restartCount"] >= 1
    assert pod["status"]["phase"] == "Pending" and pod_status_reason(pod)[0].startswith("Init:")
    assert _status(pod, "recommendation")["state"]["waiting"]["reason"] == "PodInitializing"
    assert shop_twin.value('kube_pod_container_status_waiting_reason{container="recommendation",reason="PodInitializing"}') == 1
    config = shop_twin.store.get("ConfigMap", NS, "recommendation-config")
    assert config["data"]["script"] == containers._data()["load_config_script"]
    # The script only fails on the malformed JSON: valid configuration lets the pod start.
    shop_twin.store.patch("ConfigMap", NS, "recommendation-config",
                          {"data": {"config": json.dumps({"configuration_items": []})}}, "merge")
    shop_twin.backend.advance(400)
    pod = shop_twin.store.get("Pod", NS, pod["metadata"]["name"])
    assert _status(pod, "worker")["state"]["terminated"]["exitCode"] == 0
    assert pod["status"]["phase"] == "Running"


def test_hanging_init_container_keeps_the_pod_initialising_until_removed(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[4], "shipping", container=False, seconds=600)
    assert "running" in _status(pod, "worker")["state"] and pod["status"]["phase"] == "Pending"
    assert pod_status_reason(pod)[0] == "Init:0/1"


def test_failing_readiness_probe_keeps_the_pod_out_of_the_endpoints(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[5], "currency")
    assert pod["status"]["phase"] == "Running" and not _status(pod, "currency")["ready"]
    ip = pod["status"]["podIP"]
    assert (f'Readiness probe failed: Get "http://{ip}:40/ready": dial tcp {ip}:40: connect: connection refused'
            in _events(shop_twin, pod))
    endpoints = shop_twin.store.get("Endpoints", NS, "currency")
    ready = {a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []}
    assert ip not in ready and ready
    assert shop_twin.value(f'kube_pod_status_ready{{pod="{pod["metadata"]["name"]}",condition="false"}}') == 1


def test_a_failing_probe_fails_on_a_component_no_app_model_drives(shop_twin: ShopTwin) -> None:
    """The shop's collector serves its declared ports and the health endpoint the install probes
    (13133): the fault's probe on port 40 finds nothing there, while every install probe passes."""
    shop_twin.reset()
    assert all(all(c["ready"] for c in p["status"]["containerStatuses"]) for p in shop_twin.store.list("Pod")
               if p["status"]["phase"] == "Running")
    [new] = _inject_collector(shop_twin, MY_FAULTS[5])
    assert new["status"]["phase"] == "Running" and not _status(new, "opentelemetry-collector")["ready"]
    old = [p for p in shop_twin.store.list("Pod", NS, label_selector=COLLECTOR_PODS) if p["metadata"]["uid"] != new["metadata"]["uid"]]
    assert old and all(_status(p, "opentelemetry-collector")["ready"] for p in old)


def test_insufficient_resources_oom_kill_the_container(shop_twin: ShopTwin) -> None:
    [pod] = _inject(shop_twin, MY_FAULTS[6], "postgresql", seconds=300)
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "5m", "memory": "5Mi"},
                                                         "requests": {"cpu": "5m", "memory": "5Mi"}}
    st = _status(pod, "postgresql")
    assert st["lastState"]["terminated"]["reason"] == "OOMKilled" and st["state"]["waiting"]["reason"] == "CrashLoopBackOff"


def test_a_lowered_limit_kills_a_component_no_app_model_drives(shop_twin: ShopTwin) -> None:
    """The collector's process holds what the install gave it (its 200Mi), not what a fault's 5Mi limit
    says: the kernel kills it at the limit, as it kills an app service."""
    [new] = _inject_collector(shop_twin, MY_FAULTS[6], seconds=300)
    st = _status(new, "opentelemetry-collector")
    assert st["lastState"]["terminated"]["reason"] == "OOMKilled" and st["state"]["waiting"]["reason"] == "CrashLoopBackOff"


def test_removed_limits_keep_the_requests_and_removal_restores_them(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    ref = target({"kubernetesObject": _workload("cart")})
    before = ctx.require(ref)["spec"]["template"]["spec"]["containers"][0]["resources"]
    inject_faults([FaultRef(MY_FAULTS[7], {"kubernetesObject": _workload("cart"), "container": {"name": "cart"}})], ctx)
    assert "limits" not in ctx.require(ref)["spec"]["template"]["spec"]["containers"][0].get("resources", {})
    assert remove_faults(ctx) == ["restored Deployment otel-demo/cart"]
    assert ctx.require(ref)["spec"]["template"]["spec"]["containers"][0]["resources"] == before
    ctx.close()


def test_a_container_that_is_not_in_the_template_is_a_clear_fault_error(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    with pytest.raises(FaultError, match=r"Deployment otel-demo/checkout has no container 'wait-for-kafka'; containers: checkout"):
        inject_faults([FaultRef(MY_FAULTS[0], {"kubernetesObject": _workload("checkout"), "container": {"name": "wait-for-kafka"}})], ctx)
    assert ctx.journal == []
    ctx.close()


def _node(name: str, memory: str = "16Gi", provider: str | None = None) -> Obj:
    return {"metadata": {"name": name}, "spec": {"providerID": provider} if provider else {},
            "status": {"capacity": {"memory": memory}}}


def _pod(name: str, qos: str, request: str | None = None) -> Obj:
    resources = {"requests": {"memory": request}} if request else {}
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"containers": [{"name": "c", "resources": resources}]},
            "status": {"qosClass": qos}}


def test_oom_killer_kills_by_badness_on_the_shared_kind_host() -> None:
    gi = 2.0**30
    pods = {p["metadata"]["name"]: p for p in [_pod("hog", "Guaranteed"), _pod("small", "BestEffort"),
                                                _pod("mid", "Burstable", "8Gi")]}
    nodes = [_node("w1", provider="kind://docker/kind/w1"), _node("w2", provider="kind://docker/kind/w2"), _node("solo")]
    uses = [oom.Use(NS, "hog", "c", "w1", 9 * gi), oom.Use(NS, "small", "c", "w2", 1 * gi), oom.Use(NS, "mid", "c", "w2", 7 * gi),
            oom.Use(NS, "other", "c", "solo", 15 * gi)]
    # w1 and w2 share one 16Gi host (17Gi used): the BestEffort container dies first, although smallest.
    assert [u.pod for u in oom.victims(uses, nodes, lambda ns, n: pods.get(n))] == ["small"]
    # the killer goes on while the host is short; Guaranteed containers go last
    uses.append(oom.Use(NS, "small", "d", "w1", 1 * gi))
    assert [(u.pod, u.container) for u in oom.victims(uses, nodes, lambda ns, n: pods.get(n))] == [("small", "c"), ("small", "d")]
    assert oom.oom_score_adj(pods["mid"], pods["mid"]["spec"]["containers"][0], 16 * gi) == 500


def test_process_model_follows_shell_scripts_and_known_programs() -> None:
    data = containers._data()
    files = {"/opt/app-root/src/scripts/load_config.py": data["load_config_script"],
             "/opt/app-root/src/config/config.json": data["invalid_config"]}

    def run(script: str) -> tuple[float, int] | None:
        return Process(["/bin/sh", "-c", script], "/opt/app-root/src", files.get, lambda h, p: h == "up").outcome()

    assert run("python3.14 ~/scripts/load_config.py") == (1.0, 1)
    files["/opt/app-root/src/config/config.json"] = "{}"
    assert run("python3.14 ~/scripts/load_config.py") == (1.0, 0)
    assert run("sleep infinity") is None and run("sleep 30") == (30.0, 0)
    assert run("until nc -z down 80; do sleep 2; done") is None and run("until nc -z up 80; do sleep 2; done") == (1.0, 0)
    assert run("false && sleep infinity") == (0.0, 1) and run("false || exit 3") == (0.0, 3)
    # the shop's own init containers wait this way; a keep-alive loop never ends; ``&`` does not wait
    assert run("until nc -z -v -w30 up 6379; do echo waiting for up; sleep 2; done;") == (1.0, 0)
    assert run("until nc -z -v -w30 down 6379; do echo waiting for down; sleep 2; done;") is None
    assert run("while true; do sleep 30; done") is None and run("sleep infinity & exit 4") == (0.0, 4)
    assert run("sleep 5 | false") == (5.0, 1) and run("sleep 3; nc -z up 80 && exit 7") == (4.0, 7)
    assert run("echo 'unterminated") == (0.0, 2) and run("case $X in a) exit 1;; esac") is None
    assert only_sleeps(["/bin/sh", "-c", "sleep infinity"]) and only_sleeps(["sleep", "3600"])
    assert not only_sleeps(["/bin/sh", "-c", "sleep 5; python3 app.py"]) and not only_sleeps(["python3", "app.py"])
    assert only_sleeps(["/bin/sh", "-c", "sleep 1 && sleep infinity"]) and not only_sleeps(["/bin/sh", "-c", "sleep 1 | cat"])
    # the program table knows the script the fault writes, by its digest
    assert hashlib.sha256(data["load_config_script"].encode()).hexdigest() in programs()


def test_registry_knows_the_fault_images_and_words_missing_ones_per_registry() -> None:
    registry = shared()
    assert registry.pull_error("quay.io/it-bench/hello-bench-arm64:2.0.0", "arm64") is None
    assert registry.pull_error(containers._data()["images"]["minimal"], "amd64") is None
    assert registry.pull_error("docker.io/library/nope:1", "amd64") == (
        'failed to resolve reference "docker.io/library/nope:1": docker.io/library/nope:1: not found')
    assert split_reference("busybox") == ("docker.io", "library/busybox", "latest")
    assert split_reference("quay.io/it-bench/x@sha256:ab") == ("quay.io", "it-bench/x", "sha256:ab")
    python = registry.rule(containers._data()["images"]["python"])
    assert python is not None and python.has("python3.14") and python.home == containers._data()["python_home"]


@pytest.mark.skipif(not (SHARED / "itbench" / "scenarios").is_dir(), reason="ITBench's library is not beside the project")
def test_library_arguments_of_these_faults_validate() -> None:
    seen = set()
    for file in sorted(Path(SHARED / "itbench" / "scenarios").glob("*.json")):
        for disruption in json.loads(file.read_text()).get("disruptions", []):
            for injection in disruption.get("injections", []):
                if injection["id"] in MY_FAULTS:
                    assert fault_args_problems(injection["id"], injection["args"]) == [], (file.name, injection)
                    seen.add(injection["id"])
    assert len(seen) >= 5
    for fault in MY_FAULTS:
        schema = json.loads((SHARED / "itbench" / "schemas" / "faults" / f"{fault}.json").read_text())
        minimal = {key: {"kubernetesObject": _workload("cart"), "container": {"name": "cart"}}[key] for key in schema["required"]}
        assert fault_args_problems(fault, minimal) == [], fault


def test_fault_data_is_the_itbench_task_data() -> None:
    data = yaml.safe_load(Path(containers.__file__).with_name("containers.yaml").read_text())
    assert data["images"]["unsupported"] == {"amd64": "quay.io/it-bench/hello-bench-arm64:2.0.0",
                                              "arm64": "quay.io/it-bench/hello-bench-amd64:2.0.0"}
