"""The heuristic agent is honest (it never touches the env it is built for) and solves what a runbook solves."""

from __future__ import annotations

import pytest

import itbench_gym
from itbench_gym.agents import HeuristicAgent, run_episode
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
