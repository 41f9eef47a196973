"""One healthy baseline per app, shared by every seed and every twin of the process (``baselines.py``)."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest

import itbench_gym
from itbench_gym.backends.sim.twin import Twin, TwinSnapshot
from itbench_gym.paths import envs_dir

APP = envs_dir() / "astronomy-shop"
SCENARIO = "SRE-CacheFailure-v0"


def _series(twin: Twin) -> dict[Any, list[tuple[int, float]]]:
    """Every stored sample by series labels (NaN markers compared by bit pattern)."""
    return {s.labels: list(zip(s.ts.tolist(), s.vs.view(np.int64).tolist(), strict=True)) for s in twin.tsdb.select([])}


def _objects(twin: Twin) -> dict[Any, Any]:
    return twin.cluster.store.snapshot().data


@pytest.fixture(scope="module")
def baseline() -> tuple[Twin, TwinSnapshot]:
    twin = Twin(APP, seed=0)
    twin.advance(300)
    return twin, twin.snapshot()


def _after(twin: Twin, seconds: float) -> tuple[dict[Any, Any], dict[Any, Any]]:
    twin.advance(seconds)
    return _objects(twin), _series(twin)


@pytest.mark.parametrize(("stored", "deferred"), [(False, False), (True, False), (False, True)],
                         ids=["in-memory", "pickled", "rules-deferred"])
def test_a_twin_restored_from_a_snapshot_goes_on_like_the_twin_that_took_it(stored: bool, deferred: bool) -> None:
    """...also from a pickled snapshot: what the disk cache of baselines stores (``BaselineStore``);
    and from one whose due rule evaluations stay due (an incident's): the copy runs them later, the
    twin that took it at once, and both record the same."""
    origin = Twin(APP, seed=0)
    origin.advance(300)
    snap = origin.snapshot(deferred_rules=deferred)
    assert (snap.rules.rules[-1] is not None) == deferred  # evaluations still due, or none
    origin.rules.catch_up()
    copy = Twin(APP, seed=0, state=pickle.loads(pickle.dumps(snap)) if stored else snap)
    for twin in (origin, copy):
        twin.advance(300)
        twin.rules.catch_up()  # recorded series and ALERTS included, from before the snapshot too
    assert (_objects(copy), _series(copy)) == (_objects(origin), _series(origin))
    assert any(dict(labels).get("__name__") == "ALERTS_FOR_STATE" for labels in _series(copy))


def test_a_reseeded_twin_goes_on_like_the_twin_it_was_restored_from_reseeded(baseline: tuple[Twin, TwinSnapshot]) -> None:
    origin, snap = baseline
    copy = Twin(APP, seed=7, state=snap)
    origin.restore(snap)
    origin.reseed(7)
    assert _after(copy, 300) == _after(origin, 300)


def test_twins_of_one_baseline_are_independent(baseline: tuple[Twin, TwinSnapshot]) -> None:
    _, snap = baseline
    first = Twin(APP, seed=3, state=snap)
    untouched = Twin(APP, seed=3, state=snap)
    before = (_objects(untouched), _series(untouched))
    first.cluster.store.delete("Pod", "otel-demo", next(iter(_objects(first)[("", "pods")]["otel-demo"])))
    first.advance(120)
    assert (_objects(untouched), _series(untouched)) == before
    assert _after(untouched, 120) != (_objects(first), _series(first))


def test_the_episode_seed_drives_what_follows_the_baseline(baseline: tuple[Twin, TwinSnapshot]) -> None:
    _, snap = baseline
    one, other = Twin(APP, seed=1, state=snap), Twin(APP, seed=2, state=snap)
    assert (_objects(one), _series(one)) == (_objects(other), _series(other))
    assert _after(one, 60)[1] != _after(other, 60)[1]
    assert one.seed == 1 and other.seed == 2
    assert one.snapshot().seed == 1 and Twin(APP, seed=5, state=one.snapshot()).seed == 5


def test_a_new_seed_reuses_the_healthy_baseline_its_task_measured_on_the_same_start_state() -> None:
    first, second = itbench_gym.make(SCENARIO), itbench_gym.make(SCENARIO)
    try:
        first.reset(seed=21)
        first.reset(seed=22)  # the baseline measured for seed 21 is reused
        second.reset(seed=22)  # another task measures it afresh
        incidents = [env.unwrapped.task._incident for env in (first, second)]  # type: ignore[attr-defined]
        assert incidents[0] is not None and incidents[0] == incidents[1]
        assert incidents[0].baseline.workloads and incidents[0].baseline.services
    finally:
        first.close()
        second.close()


def test_set_ups_share_the_backends_admin_client_and_the_env_closes_it() -> None:
    """One admin client for every set-up; its requests are answered in-process, as the served API answers them."""
    from kubernetes import client as k8s
    from kubernetes import config as kube_config

    env = itbench_gym.make(SCENARIO)
    backend = env.unwrapped.backend  # type: ignore[attr-defined]
    try:
        env.reset(seed=23)
        client = backend.admin_client()
        env.reset(seed=24)  # a new seed: injected and probed again, through the same client
        assert backend.admin_client() is client
        assert env.unwrapped.task._probe._api is client  # type: ignore[attr-defined]
        served = kube_config.new_client_from_config(config_file=str(backend.admin_kubeconfig))
        try:
            local, remote = k8s.CoreV1Api(client), k8s.CoreV1Api(served)
            pods = [json.loads(api.list_namespaced_pod("otel-demo", label_selector="app.kubernetes.io/component",
                                                       _preload_content=False).data) for api in (local, remote)]
            assert pods[0] == pods[1] and pods[0]["items"]
            statuses = []
            for api in (local, remote):
                with pytest.raises(k8s.ApiException) as missing:
                    api.read_namespaced_config_map("no-such-map", "otel-demo")
                statuses.append((missing.value.status, json.loads(missing.value.body)["reason"]))
            assert statuses == [(404, "NotFound")] * 2
        finally:
            served.close()
    finally:
        env.close()
    with pytest.raises(RuntimeError, match="not been started"):
        backend.admin_client()
