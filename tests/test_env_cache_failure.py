"""SRE-CacheFailure-v0 end to end on the embedded twin, driven through the Gymnasium API."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import itbench_gym
from itbench_gym.agents import OracleAgent, run_episode
from itbench_gym.agents.oracle import ground_truth_report
from itbench_gym.backends.sim.baselines import SHARED_BASELINES
from itbench_gym.backends.sim.incidents import SHARED_INCIDENTS

SCENARIO = "SRE-CacheFailure-v0"


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    environment = itbench_gym.make(SCENARIO, render_mode="ansi")
    yield environment
    environment.close()


def _fix_and_submit(env: gym.Env, report: dict[str, Any]) -> dict[str, Any]:
    """Turn the flag off, restart flagd (it copies the ConfigMap at start) and recommendation, then submit."""
    obs, *_ = env.step("kubectl get configmap flagd-config -n otel-demo -o json")
    assert obs["exit_status"] == 0, obs["text"]
    flags = json.loads(json.loads(obs["text"])["data"]["demo.flagd.json"])
    assert flags["flags"]["recommendationCacheFailure"]["defaultVariant"] == "on"
    flags["flags"]["recommendationCacheFailure"]["defaultVariant"] = "off"
    patch = json.dumps({"data": {"demo.flagd.json": json.dumps(flags)}})
    obs, *_ = env.step({"tool": "kubectl", "args": {"argv": ["patch", "configmap", "flagd-config", "-n", "otel-demo", "--type", "merge", "-p", patch]}})
    assert obs["exit_status"] == 0 and "patched" in obs["text"], obs["text"]
    obs, *_ = env.step("kubectl rollout restart deployment/flagd deployment/recommendation -n otel-demo")
    assert obs["exit_status"] == 0 and obs["text"].count("restarted") == 2, obs["text"]
    env.step("wait 120")
    _, _, terminated, truncated, info = env.step({"tool": "submit", "args": report})
    assert terminated and not truncated
    return info["evaluation"]


def test_reset_shows_the_incident(env: gym.Env) -> None:
    obs, info = env.reset(seed=1)
    assert set(obs) == {"text", "tool", "exit_status", "firing_alerts", "clock", "step"}
    assert "HighRequestErrorRate" in obs["firing_alerts"] and "service_name=frontend" in obs["firing_alerts"]
    assert "HighRequestErrorRate" in obs["text"]
    assert info["scenario_id"] == SCENARIO
    pods, *_ = env.step("kubectl get pods -n otel-demo")
    assert pods["exit_status"] == 0
    assert "recommendation-" in pods["text"] and "RESTARTS" in pods["text"]


def test_env_checker_passes(env: gym.Env) -> None:
    check_env(env.unwrapped, skip_render_check=True)


def test_correct_episode_passes_diagnosis_and_mitigation(env: gym.Env) -> None:
    env.reset(seed=3)
    evaluation = _fix_and_submit(env, ground_truth_report(env.unwrapped.scenario))
    assert evaluation["diagnosis"]["fl_pass"] is True
    assert evaluation["mitigation"]["passed"] is True, evaluation["mitigation"]["reasons"]
    assert evaluation["reward"] == 1.0


def test_turning_the_flag_off_in_flagds_working_copy_is_a_fix_too(env: gym.Env) -> None:
    """flagd serves the file its init container copied; flagd-ui edits that file, and so can sed in
    its container: flagd serves the edit at once, with no ConfigMap change and no flagd restart."""
    env.reset(seed=3)
    edit = ("kubectl exec -n otel-demo deploy/flagd -c flagd-ui -- sed -i "
            "'/recommendationCacheFailure/,/defaultVariant/s/\"defaultVariant\": \"on\"/\"defaultVariant\": \"off\"/' "
            "/app/data/demo.flagd.json")
    obs, *_ = env.step(edit)
    assert obs["exit_status"] == 0, obs["text"]
    obs, *_ = env.step("kubectl rollout restart deployment/recommendation -n otel-demo")
    assert obs["exit_status"] == 0, obs["text"]
    env.step("wait 120")
    _, reward, terminated, _, info = env.step({"tool": "submit", "args": ground_truth_report(env.unwrapped.scenario)})
    assert terminated and info["evaluation"]["mitigation"]["passed"] is True, info["evaluation"]["mitigation"]["reasons"]
    assert reward == 1.0


def test_wrong_diagnosis_fails(env: gym.Env) -> None:
    env.reset(seed=3)
    report = {"entities": [{"id": "otel-demo/Service/cart", "root_cause": True}], "propagations": []}
    evaluation = _fix_and_submit(env, report)
    assert evaluation["diagnosis"]["fl_pass"] is False
    assert evaluation["mitigation"]["passed"] is True


def test_doing_nothing_fails_mitigation_with_reason(env: gym.Env) -> None:
    env.reset(seed=2)
    _, reward, terminated, _, info = env.step({"tool": "submit", "args": ground_truth_report(env.unwrapped.scenario)})
    mitigation = info["evaluation"]["mitigation"]
    assert terminated and reward == 0.0
    assert mitigation["passed"] is False
    # the alert never clears: firing, or pending again between two of the cache's OOM cycles
    assert any("HighRequestErrorRate" in r and ("still firing" in r or "still pending" in r) for r in mitigation["reasons"]), \
        mitigation["reasons"]


def test_bad_actions_are_observations(env: gym.Env) -> None:
    env.reset(seed=4)
    cases = [
        ({"tool": "kubectl", "args": 7}, "'args' must be an object"),
        ("frobnicate the cluster", "unknown tool 'frobnicate'"),
        ("kubectl get podz -n otel-demo", 'the server doesn\'t have a resource type "podz"'),
        ("kubectl " + "a" * 1_000_000, "1,000,008 characters"),
        # a negative limit would reach the kubelets and the app model: the API server refuses it
        ("kubectl set resources deploy/cart -n otel-demo --limits=memory=-1", 'Invalid value: "-1": must be greater than or equal to 0'),
        # a process past what its container's limit leaves it is OOM-killed, not the twin's host
        ("kubectl exec -n otel-demo deploy/valkey-cart -- sh -c 'x=a; while true; do x=$x$x; done'", "command terminated with exit code 137"),
    ]
    for action, expected in cases:
        obs, reward, terminated, truncated, _ = env.step(action)
        assert expected in obs["text"], obs["text"]
        assert obs["exit_status"] != 0 and not terminated and not truncated and reward == 0.0
    obs, *_ = env.step("wait 30")
    assert obs["exit_status"] == 0, obs["text"]
    obs, *_ = env.step("kubectl get deploy recommendation -n otel-demo")
    assert obs["exit_status"] == 0 and "recommendation" in obs["text"]


def _play(seed: int) -> tuple[list[str], dict[str, Any]]:
    environment = itbench_gym.make(SCENARIO)
    try:
        info = run_episode(environment, OracleAgent(environment.unwrapped), seed=seed)
        texts = [s.observation for s in environment.unwrapped.episode.steps]
        evaluation = {k: v for k, v in info["evaluation"].items() if k != "timings"}
        return texts, evaluation
    finally:
        environment.close()


def test_same_seed_same_actions_same_observations_and_scores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ITBENCH_GYM_CACHE", str(tmp_path))  # an empty cache: the first episode builds
    SHARED_BASELINES.clear()  # the shared baseline, the second restores it
    first = _play(seed=11)
    SHARED_INCIDENTS.clear()  # the second injects again, on the restored baseline
    second = _play(seed=11)
    assert first == second
    assert first[1]["mitigation"]["passed"] is True


def test_a_watch_lets_time_pass_only_while_kubectl_waits(env: gym.Env) -> None:
    """How long kubectl takes to read an event costs no simulated time, however busy the host: a
    finished rollout's status ends at once, a restart's when the controllers finish it, and nothing
    advances once kubectl has exited; kubectl's own timers take the twin's time."""
    env.reset(seed=3)
    clock = env.unwrapped.backend.clock
    cost = env.unwrapped.tools["kubectl"].cost_seconds
    start = clock.now()
    obs, *_ = env.step("kubectl -n otel-demo rollout status deployment/cart --timeout=120s")
    assert "successfully rolled out" in obs["text"]
    assert clock.now() - start == cost
    start = clock.now()  # client-go polls its informer's cache every 100 ms, of the twin's time as on a cluster's
    obs, *_ = env.step("kubectl -n otel-demo wait --for=condition=Available deployment/cart --timeout=60s")
    assert "condition met" in obs["text"] and clock.now() - start == pytest.approx(cost + 0.1, abs=1e-6)
    env.step("kubectl -n otel-demo rollout restart deployment/cart")
    start = clock.now()
    obs, *_ = env.step("kubectl -n otel-demo rollout status deployment/cart --timeout=120s")
    took = clock.now() - start
    assert "successfully rolled out" in obs["text"] and "Waiting for deployment" in obs["text"] and took > cost
    time.sleep(0.3)
    assert clock.now() - start == took


def test_episode_record_jsonl(env: gym.Env, tmp_path: Path) -> None:
    env.reset(seed=5)
    env.step("alerts")
    env.step({"tool": "submit", "args": {"entities": [], "propagations": []}})
    path = env.unwrapped.episode.to_jsonl(tmp_path / "episode.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["type"] for line in lines] == ["episode", "step", "step", "evaluation"]
    assert lines[1]["tool"] == "alerts" and "HighRequestErrorRate" in lines[1]["observation"]
    assert {"sim_time", "wall_seconds", "exit_status", "action"} <= set(lines[1])
    assert "alerts" in env.render()


def _listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_close_leaves_no_sockets_or_temp_dirs() -> None:
    environment = itbench_gym.make(SCENARIO)
    environment.reset(seed=0)
    endpoints = environment.unwrapped.endpoints
    urls = [environment.unwrapped.backend.kube_url, endpoints.prometheus, endpoints.loki, endpoints.jaeger]
    ports = {int(url.rsplit(":", 1)[1]) for url in urls}
    assert ports <= _listening_ports()
    environment.close()
    assert not ports & _listening_ports()
    assert not endpoints.kubeconfig.exists()


def test_vector_envs() -> None:
    for mode in ("sync", "async"):
        envs = gym.make_vec(SCENARIO, num_envs=2, vectorization_mode=mode)
        try:
            obs, _ = envs.reset(seed=[0, 1])
            assert len(obs["text"]) == 2 and all("HighRequestErrorRate" in t for t in obs["text"])
            obs, *_ = envs.step(["alerts", "kubectl get pods -n otel-demo"])
            assert "HighRequestErrorRate" in obs["text"][0] and "recommendation" in obs["text"][1]
        finally:
            envs.close()


def test_topology_tool_shows_typed_relations(env: gym.Env) -> None:
    env.reset(seed=1)
    obs, *_ = env.step({"tool": "topology", "args": {"focus": "Deployment/recommendation", "depth": 2}})
    assert obs["exit_status"] == 0, obs["text"]
    graph = json.loads(obs["text"])
    edges = {(e["source"], e["type"]) for e in graph["edges"]}
    assert ("otel-demo/Deployment/recommendation", "DEPLOYMENT_OWNS_REPLICASET") in edges
    assert any(kind == "SERVICE_SELECTS_POD" and src == "otel-demo/Service/recommendation" for src, kind in edges)
    obs, *_ = env.step("topology Deployment/nothing")
    assert obs["exit_status"] != 0 and "Did you mean" in obs["text"]


@pytest.mark.parametrize("mode", ["score", "callable"])
def test_reward_modes(mode: str) -> None:
    reward_mode: Any = "score" if mode == "score" else (lambda evaluation: 0.25 + 0.5 * evaluation["diagnosis"]["fl_pass"])
    environment = itbench_gym.make(SCENARIO, reward_mode=reward_mode)
    try:
        environment.reset(seed=3)
        _, reward, terminated, _, info = environment.step({"tool": "submit", "args": ground_truth_report(environment.unwrapped.scenario)})
        assert terminated and reward == info["evaluation"]["reward"]
        if mode == "callable":
            assert reward == 0.75
        else:
            assert 0.0 < reward < 1.0  # right diagnosis, mitigation not done
    finally:
        environment.close()
