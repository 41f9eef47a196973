"""A container's own process followed through the emulated programs as simulated time passes.

A wait (``sleep``) takes simulated time: a process prints what it prints before its first wait as it
starts, the rest once the process model says its wait ends, on the path its first run took (the
network's answers replayed) and on the volumes it started with.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import ShopTwin
from itbench_gym.lang.timestamps import parse_rfc3339
from kube_fixtures import container

Obj = dict[str, Any]
NS = "otel-demo"


def _pod(name: str, init_script: str) -> Obj:
    scratch = [{"name": "scratch", "mountPath": "/w"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}, "spec": {
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "initContainers": [container("wait", image="busybox:1.36", command=["sh", "-c", init_script], volumeMounts=scratch)],
        "containers": [container(image="busybox:1.36", command=["sleep", "3600"], volumeMounts=scratch)]}}


def _scale(store: Any, name: str, replicas: int) -> None:
    deployment = store.get("Deployment", NS, name)
    deployment["spec"]["replicas"] = replicas
    store.update(deployment)


def _logged(shop_twin: ShopTwin, pod: str, name: str) -> list[tuple[float, str]]:
    return shop_twin.backend.twin.container_log_lines(NS, pod, name, 0, shop_twin.backend.clock.now())


def _state(shop_twin: ShopTwin, pod: str) -> Obj:
    return shop_twin.store.get("Pod", NS, pod)["status"]["initContainerStatuses"][0]["state"]


def test_a_wait_for_a_dependency_logs_its_first_round_then_what_follows_once_it_answers(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    store = shop_twin.store
    kafka = store.get("Service", NS, "kafka")["spec"]["clusterIP"]
    _scale(store, "kafka", 0)
    shop_twin.backend.advance(15)
    script = "echo start >> /w/log; until nc -z -v -w30 kafka 9092; do echo waiting for kafka; sleep 2; done; cat /w/log"
    store.create(_pod("waiter", script))
    shop_twin.backend.advance(60)
    assert "running" in _state(shop_twin, "waiter")
    first = _logged(shop_twin, "waiter", "wait")
    assert [line for _, line in first] == ["waiting for kafka", f"nc: can't connect to remote host ({kafka}): Connection refused"]
    _scale(store, "kafka", 1)
    for _ in range(20):
        shop_twin.backend.advance(15)
        if "terminated" in _state(shop_twin, "waiter"):
            break
    assert _state(shop_twin, "waiter")["terminated"]["exitCode"] == 0
    logged = _logged(shop_twin, "waiter", "wait")
    assert logged[:2] == first
    # what follows its last wait: the log it wrote once (stdout), then nc's answer (stderr)
    assert [line for _, line in logged[2:]] == ["start", f"kafka ({kafka}:9092) open"]
    assert logged[2][0] > first[0][0]
    exec_ = shop_twin.backend.twin.container_exec()
    assert exec_(NS, "waiter", "main", ["cat", "/w/log"], b"", False).stdout == b"start\n"


def test_a_container_started_as_its_dependency_restarts_waits_for_the_new_one(shop_twin: ShopTwin) -> None:
    """Kafka's pod and a waiting pod start in the same instant (``kubectl delete pods --all``): the wait
    reads the namespace as it is then, not as the last tick left it, and ends once the new Kafka answers."""
    shop_twin.reset()
    store = shop_twin.store
    kafka = next(p for p in store.list("Pod", NS) if p["metadata"]["name"].startswith("kafka-"))
    store.delete("Pod", NS, kafka["metadata"]["name"], grace_period_seconds=0)
    store.create(_pod("waiter", "until nc -z -v -w30 kafka 9092; do echo waiting for kafka; sleep 2; done"))
    shop_twin.backend.advance(2)
    assert "running" in _state(shop_twin, "waiter")
    for _ in range(20):
        shop_twin.backend.advance(15)
        if "terminated" in _state(shop_twin, "waiter"):
            break
    new_kafka = next(p for p in store.list("Pod", NS) if p["metadata"]["name"].startswith("kafka-"))
    ready = next(c["lastTransitionTime"] for c in new_kafka["status"]["conditions"] if c["type"] == "Ready")
    assert _state(shop_twin, "waiter")["terminated"]["finishedAt"] >= ready
    assert [line for _, line in _logged(shop_twin, "waiter", "wait")][::2] == ["waiting for kafka", f"kafka ({store.get('Service', NS, 'kafka')['spec']['clusterIP']}:9092) open"]


@pytest.mark.parametrize("script, lines", [("sleep 30; echo done", ["done"]), ("echo now; sleep 1m; echo later", ["now", "later"])])
def test_what_a_process_prints_after_a_sleep_shows_once_the_sleep_is_over(shop_twin: ShopTwin, script: str, lines: list[str]) -> None:
    shop_twin.reset()
    shop_twin.store.create(_pod("sleeper", script))
    shop_twin.backend.advance(10)
    started = shop_twin.store.get("Pod", NS, "sleeper")["status"]["initContainerStatuses"][0]["state"]["running"]
    assert [line for _, line in _logged(shop_twin, "sleeper", "wait")] == lines[:-1]
    shop_twin.backend.advance(75)
    assert [line for _, line in _logged(shop_twin, "sleeper", "wait")] == lines
    assert _state(shop_twin, "sleeper")["terminated"]["exitCode"] == 0
    assert started["startedAt"] < _state(shop_twin, "sleeper")["terminated"]["finishedAt"]


def test_a_loop_of_sleeps_ends_when_its_last_sleep_does(shop_twin: ShopTwin) -> None:
    """The process model does not follow a ``for`` loop's sleeps; the emulated programs do, and say when it ends."""
    shop_twin.reset()
    shop_twin.store.create(_pod("looper", "for i in 1 2; do echo $i; sleep 20; done; echo end"))
    shop_twin.backend.advance(10)
    assert "running" in _state(shop_twin, "looper")
    assert [line for _, line in _logged(shop_twin, "looper", "wait")] == ["1"]
    shop_twin.backend.advance(45)
    terminated = _state(shop_twin, "looper")["terminated"]
    assert [line for _, line in _logged(shop_twin, "looper", "wait")] == ["1", "2", "end"]
    assert parse_rfc3339(terminated["finishedAt"]) - parse_rfc3339(terminated["startedAt"]) >= 40
