"""CISO episodes end to end on the twin: set-up per seed, the agent's artefacts graded as ITBench grades
them (a Kyverno policy's reports, a fetch script and Rego, an edited policy), the validation proof, and
the leaderboard's CISO columns from a batch run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import itbench_gym
from conftest import needs_clock_shim
from itbench_gym.agents.answer import AnswerAgent
from itbench_gym.agents.base import run_episode
from itbench_gym.env import ITBenchEnv
from itbench_gym.registry import get_spec
from itbench_gym.runner import leaderboard
from itbench_gym.runner.batch import run_batch
from itbench_gym.spec import ScenarioSpec
from itbench_gym.tasks.ciso import draw_case
from itbench_gym.tools.sandbox import isolation_available
from itbench_gym.validate.checks import validate_scenario

KYVERNO = "CISO-Kyverno-5.2.5-v0"
OPA = "CISO-K8sOPA-5.2.5-v0"
UPDATE = "CISO-KyvernoUpdate-RootTrustedRegistry-v0"
#: Agent-written fetch scripts run only in the rooted sandbox: without it they are refused, never run.
needs_sandbox = pytest.mark.skipif(not isolation_available(), reason="bubblewrap with user and network namespaces is not available here")


def seed_of(spec: ScenarioSpec, compliant: bool) -> int:
    """The first seed that sets up a compliant (or a non-compliant) case."""
    return next(s for s in range(200) if draw_case(spec, s).compliant is compliant)


@pytest.fixture(scope="module")
def kyverno_env() -> Iterator[ITBenchEnv]:
    env = itbench_gym.make(KYVERNO).unwrapped
    assert isinstance(env, ITBenchEnv)
    yield env
    env.close()


def test_the_library_has_the_papers_fifty_scenarios_in_four_classes() -> None:
    by_class: dict[str, int] = {}
    for summary in itbench_gym.list_scenarios(domain="ciso"):
        by_class[summary["class"]] = by_class.get(summary["class"], 0) + 1
    assert by_class["kyverno"] >= 10 and by_class["k8s-opa"] >= 10 and by_class["kyverno-update"] >= 10
    assert by_class.get("rhel9-opa", 0) >= 20 and sum(by_class.values()) >= 50


def test_a_seed_always_sets_up_the_same_case_and_some_seeds_set_up_a_compliant_one() -> None:
    spec = get_spec(KYVERNO)
    assert [draw_case(spec, s).id for s in range(30)] == [draw_case(spec, s).id for s in range(30)]
    assert {draw_case(spec, s).compliant for s in range(30)} == {True, False}


def test_the_prompt_is_itbenchs_goal_and_the_cluster_is_a_kind_cluster_with_kyverno(kyverno_env: ITBenchEnv) -> None:
    obs, info = kyverno_env.reset(seed=seed_of(kyverno_env.scenario, False))
    assert "Minimize the admission of containers wishing to share the host network namespace." in obs["text"]
    assert "deploy a Kyverno policy to the cluster" in obs["text"] and obs["firing_alerts"] == ""
    assert info["endpoints"]["prometheus"] is None  # no monitoring stack on ITBench's CISO cluster
    obs, *_ = kyverno_env.step("kubectl get deployments -n kyverno")
    assert "kyverno-admission-controller" in obs["text"] and obs["exit_status"] == 0
    obs, *_ = kyverno_env.step("kubectl get deployments,pods -n paa")
    assert "nginx-deployment" in obs["text"] or "net-debug" in obs["text"]


@pytest.mark.parametrize("compliant", [False, True])
def test_the_oracle_policy_passes_and_doing_nothing_fails(kyverno_env: ITBenchEnv, compliant: bool) -> None:
    spec = kyverno_env.scenario
    assert spec.compliance is not None
    seed = seed_of(spec, compliant)
    evaluation = run_episode(kyverno_env, AnswerAgent(spec.compliance.oracle), seed=seed)["evaluation"]
    assert evaluation["passed"], evaluation["reasons"]
    assert evaluation["compliant"] is compliant and evaluation["tasks"]["generate_policy"]
    assert evaluation["ttp_seconds"] is not None and evaluation["ttp_seconds"] >= 60
    kyverno_env.reset(seed=seed)
    *_, info = kyverno_env.step({"tool": "submit", "args": {"compliant": compliant}})
    assert not info["evaluation"]["passed"] and info["evaluation"]["tasks"]["stated_posture_correct"]
    assert "no PolicyReport is scoped" in info["evaluation"]["reasons"][0]


def test_a_policy_for_another_control_does_not_detect_the_violation(kyverno_env: ITBenchEnv) -> None:
    spec = kyverno_env.scenario
    assert spec.compliance is not None
    seed = seed_of(spec, False)
    evaluation = run_episode(kyverno_env, AnswerAgent(spec.compliance.wrong), seed=seed)["evaluation"]
    assert not evaluation["passed"] and "does not detect the violation" in evaluation["reasons"][0]


@needs_sandbox
def test_a_k8s_opa_episode_runs_the_agents_script_and_rego_again_at_grading() -> None:
    env = itbench_gym.make(OPA).unwrapped
    assert isinstance(env, ITBenchEnv) and env.scenario.compliance is not None
    try:
        seed = seed_of(env.scenario, False)
        agent = AnswerAgent(env.scenario.compliance.oracle)
        evaluation = run_episode(env, agent, seed=seed)["evaluation"]
        assert evaluation["passed"], evaluation["reasons"]
        assert [out for action, _, out in agent.outputs if action.startswith("opa eval")] == ["false"]
        # A stale collected_data.json cannot decide the verdict: grading runs the script again.
        env.reset(seed=seed)
        env.step({"tool": "write_file", "args": {"path": "collected_data.json", "content": '{"items": []}'}})
        env.step({"tool": "write_file", "args": {"path": "script.sh", "content": "exit 0\n"}})
        env.step({"tool": "write_file", "args": {"path": "policy.rego", "content": "package check\n\nresult := false\n"}})
        *_, info = env.step("submit")
        assert not info["evaluation"]["passed"]
        assert "did not write collected_data.json" in info["evaluation"]["reasons"][0]
    finally:
        env.close()


@needs_sandbox
@needs_clock_shim
def test_a_fetch_scripts_kubectl_takes_simulated_time_only_on_its_own_timers() -> None:
    """Through the sandbox's relay, a request's answer is never held back while the twin's time runs on
    (every request of a script timed out after 32 simulated seconds, a TLS handshake on a busy host
    after 10), and a wait in the script still ends after its timeout of simulated time."""
    env = itbench_gym.make(OPA).unwrapped
    assert isinstance(env, ITBenchEnv)
    try:
        env.reset(seed=0)
        clock, cost = env.backend.clock, env.tools["bash"].cost_seconds
        gets = "".join(f"kubectl get {kind} -n paa -o name\n" for kind in ("pods", "deployments", "replicasets", "serviceaccounts"))
        wait = "kubectl wait --for=condition=Ready=false namespace/paa --timeout=20s\n"
        moved = []
        for path, script in (("gets.sh", gets * 3), ("wait.sh", wait)):
            env.step({"tool": "write_file", "args": {"path": path, "content": script}})
            before = clock.now()
            obs, *_ = env.step(f"bash {path}")
            moved.append(clock.now() - before)
            assert obs["exit_status"] == (0 if path == "gets.sh" else 1), obs["text"]
        assert moved[0] == cost and 20 <= moved[1] - cost < 20.01, moved
    finally:
        env.close()


def test_the_update_class_fails_an_edit_of_the_policy_that_must_stay_unchanged() -> None:
    spec = get_spec(UPDATE)
    assert spec.compliance is not None and "service-account-requirements" in spec.compliance.unchanged_policies
    env = ITBenchEnv(scenario=spec)
    try:
        seed = seed_of(spec, False)
        good = run_episode(env, AnswerAgent(spec.compliance.oracle), seed=seed)["evaluation"]
        assert good["passed"], good["reasons"]
        assert good["tasks"] == {"evidence_available": True, "violation_detected": True, "untouched_policies_unchanged": True}
        env.reset(seed=seed)
        obs, *_ = env.step("kubectl patch clusterpolicy service-account-requirements --type=json "
                           "-p='[{\"op\":\"replace\",\"path\":\"/spec/rules/0/validate/message\",\"value\":\"changed\"}]'")
        assert obs["exit_status"] == 0, obs["text"]
        *_, info = env.step("submit")
        assert not info["evaluation"]["passed"] and not info["evaluation"]["tasks"]["untouched_policies_unchanged"]
    finally:
        env.close()


@needs_sandbox
def test_validate_proves_a_compliance_scenario_case_by_case() -> None:
    result = validate_scenario(OPA, [0])
    assert result.status == "passed", result.reason
    assert set(result.info["cases"]) == {c.id for c in get_spec(OPA).compliance.cases}  # type: ignore[union-attr]
    assert len(result.seeds) == len(result.info["cases"])


@needs_sandbox
def test_ciso_results_appear_in_the_leaderboard_with_the_papers_columns(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_batch("oracle", [KYVERNO, OPA], runs=1, out=out, echo=lambda _line: None)
    assert (done.ran, done.errors) == (2, 0)
    text = leaderboard.markdown_report(leaderboard.load([out]))
    assert "## CISO" in text and "kyverno pass@1 | k8s-opa pass@1 | rhel9-opa pass@1 | kyverno-update pass@1" in text
    row = next(line for line in text.splitlines() if line.startswith("| oracle (privileged) |"))
    cells: list[Any] = row.split(" | ")
    assert cells[3:5] == ["1.000", "1.000"] and cells[7].startswith("1.000")
