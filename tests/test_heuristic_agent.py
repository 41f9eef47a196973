"""The heuristic agent is honest (it never touches the env it is built for) and solves what a runbook solves."""

from __future__ import annotations

import json

import pytest

import itbench_gym
from itbench_gym.agents import HeuristicAgent, run_episode
from itbench_gym.agents.finops_runbook import Autoscaler, odd_autoscalers
from itbench_gym.agents.heuristic import alert_labels


class Forbidden:
    """Stands in for the env: any attribute the agent reads would be a privileged read."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the heuristic agent read env.{name}")


@pytest.mark.parametrize(("scenario", "root"), [("SRE-CorruptImage-v0", "otel-demo/Deployment/product-catalog")])
def test_it_diagnoses_and_fixes_through_the_agents_tools_only(scenario: str, root: str) -> None:
    env = itbench_gym.make(scenario)
    try:
        agent = HeuristicAgent(Forbidden())  # type: ignore[arg-type]
        info = run_episode(env, agent, seed=0)
    finally:
        env.close()
    assert agent.suspects[0].entity == root
    assert info["evaluation"]["passed"], info["evaluation"]["mitigation"]


def test_alert_lines_of_the_prompt_are_read_as_label_sets() -> None:
    prompt = "Alerts firing now:\n- KubePodNotReady{namespace=otel-demo,pod=cart-1}\n- Watchdog{severity=none}\nDiagnose"
    assert alert_labels(prompt) == [{"alertname": "KubePodNotReady", "namespace": "otel-demo", "pod": "cart-1"},
                                    {"alertname": "Watchdog", "severity": "none"}]


@pytest.mark.parametrize(("scenario", "resources"), [
    ("FinOps-MinReplicasTooHigh-v0", [{"name": "accounting", "type": "HorizontalPodAutoscaler"}]),
    ("FinOps-CostAlertMisconfiguration-v0", [{"name": "finops-budget-alerts", "type": "PrometheusRule"}]),
])
def test_on_a_finops_task_it_follows_the_finops_runbook(scenario: str, resources: list[dict[str, str]]) -> None:
    """The FinOps submit is recognised from the tool's schema; the finding is named and fixed through the tools."""
    env = itbench_gym.make(scenario)
    try:
        agent = HeuristicAgent(Forbidden())  # type: ignore[arg-type]
        info = run_episode(env, agent, seed=0)
        report = env.unwrapped.episode.steps[-1].action  # type: ignore[attr-defined]
    finally:
        env.close()
    assert json.loads(report) == {"tool": "submit", "args": {"resource": resources}}
    assert [(f.kind, f.name) for f in agent.findings] == [(r["type"], r["name"]) for r in resources] and agent.suspects == []
    assert info["evaluation"]["passed"], info["evaluation"]["mitigation"]


def _autoscaler(name: str, least: int = 1, cpu: int = 70) -> Autoscaler:
    return Autoscaler(name, "Deployment", name, {"minReplicas": least, "maxReplicas": 10, "metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}}]})


def test_an_autoscaler_is_odd_only_against_what_most_of_its_siblings_share() -> None:
    [odd] = odd_autoscalers("shop", [_autoscaler("a"), _autoscaler("b"), _autoscaler("c", least=8, cpu=20)])
    assert (odd.kind, odd.name) == ("HorizontalPodAutoscaler", "c")
    patch, scale = (action["args"]["argv"] for action in odd.fix if isinstance(action, dict))
    assert json.loads(patch[-1]) == {"spec": _autoscaler("c").settings}  # put back to the common settings
    assert scale == ["scale", "deployment/c", "--replicas=1", "-n", "shop"]  # then from its minimum
    assert odd_autoscalers("shop", [_autoscaler("a"), _autoscaler("b", cpu=20)]) == []  # no majority, no verdict
