"""The FinOps task: its report and how it is graded, and the shortcuts that must fail on the twin
(starving the app to meet a budget, hiding a cost by raising or deleting its budget)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from itbench_gym.agents.oracle import cost_report
from itbench_gym.env import ITBenchEnv
from itbench_gym.evaluation.finops import grade_cost_report
from itbench_gym.evaluation.groundtruth import parse_ground_truth
from itbench_gym.registry import get_spec
from itbench_gym.tasks.finops import BUDGET_HEADROOM
from itbench_gym.tools.submit import CostReportSubmitTool

SCENARIO = "FinOps-CostAlertMisconfiguration-v0"
AUTOSCALER = "FinOps-AutoscalerMisconfiguration-v0"
#: Every episode here acts once, then waits this long and submits: they all end at the same clock time, so
#: the task computes the reference run once for all of them.
SETTLE = "wait 300"


def _grade(scenario: str, resources: list[dict[str, str]]) -> Any:
    spec = get_spec(scenario)
    return grade_cost_report({"resource": resources}, parse_ground_truth(spec.ground_truth), spec.namespace)


def test_the_report_must_name_every_root_cause_and_nothing_else() -> None:
    both = [{"name": "frontend", "type": "hpa"}, {"name": "otel-demo/fraud-detection", "type": "HorizontalPodAutoscaler"}]
    assert _grade(AUTOSCALER, both).passed
    # an alias (the Deployment the autoscaler scales) names the same root cause; the namespace is in the ground truth
    assert _grade(AUTOSCALER, [{"name": "frontend", "type": "deployments"}, {"name": "fraud-detection", "type": "hpa"},
                               {"name": "otel-demo", "type": "Namespace"}]).passed
    one = _grade(AUTOSCALER, both[:1])
    assert not one.passed and one.missed == ("fraud-detection-hpa-1",)
    wrong = _grade(AUTOSCALER, [*both, {"name": "cart", "type": "Deployment"}])
    assert not wrong.passed and wrong.extra == ("otel-demo/Deployment/cart",)
    assert not _grade(AUTOSCALER, []).passed


def test_the_oracle_report_is_the_ground_truths_root_causes() -> None:
    report = cost_report(get_spec(SCENARIO))
    assert report == {"resource": [{"name": "finops-budget-alerts", "type": "PrometheusRule"}]}
    assert _grade(SCENARIO, report["resource"]).passed


@pytest.mark.parametrize(("payload", "problem"), [
    ("not json", "the report is not JSON"),
    ({"resources": []}, 'the report needs "resource"'),
    ({"resource": [{"name": "cart"}]}, "resource[0].type must be a non-empty string"),
    ({"resource": ["cart"]}, "resource[0] must be an object"),
])
def test_a_malformed_report_is_rejected_with_where_it_is_wrong(payload: Any, problem: str) -> None:
    args = {"text": payload} if isinstance(payload, str) else payload
    result = CostReportSubmitTool().run(args, None)  # type: ignore[arg-type]
    assert not result.ends_episode and result.exit_status == 2
    assert problem in result.text


@pytest.fixture(scope="module")
def env() -> Iterator[ITBenchEnv]:
    environment = ITBenchEnv(scenario=get_spec(SCENARIO))
    yield environment
    environment.close()


def _submit(env: ITBenchEnv, *commands: str) -> dict[str, Any]:
    env.reset(seed=0)
    for command in commands:
        observation, _, _, _, _ = env.step(command)
        assert observation["exit_status"] == 0, observation["text"]
    *_, info = env.step({"tool": "submit", "args": cost_report(env.scenario)})
    evaluation: dict[str, Any] = info["evaluation"]
    return evaluation


def _budget_patch(threshold: float | None) -> str:
    """The budget rule edited as the agent's grant allows: the MemorySpend budget set to ``threshold``
    (None: the alert removed)."""
    rule = "sum by (namespace) (container_namespace_node:container_memory_allocation_gigabytes_cost_per_node:avg5m" \
           '{container!="load-generator", namespace="otel-demo"})'
    groups = [{"name": "finops.budget", "interval": "1m", "rules": [
        {"alert": "CPUSpend", "expr": "sum by (namespace) (container_namespace_node:container_cpu_allocation_cost_per_node:avg5m"
                                      '{container!="load-generator", namespace="otel-demo"}) > 0.02', "for": "1m",
         "labels": {"severity": "warning"}},
        *([{"alert": "MemorySpend", "expr": f"{rule} > {threshold:g}", "for": "1m", "labels": {"severity": "warning"}}]
          if threshold is not None else [])]}]
    return f"kubectl -n otel-demo patch prometheusrule finops-budget-alerts --type=merge -p '{json.dumps({'spec': {'groups': groups}})}'"


def test_starving_the_app_to_meet_the_budget_fails_with_the_service_level_reason(env: ITBenchEnv) -> None:
    evaluation = _submit(env, "kubectl -n otel-demo scale deployment frontend --replicas=0", SETTLE)
    assert not evaluation["mitigation"]["passed"]
    assert any(r.startswith("user-facing") for r in evaluation["mitigation"]["reasons"]), evaluation["mitigation"]["reasons"]
    assert evaluation["diagnosis"]["passed"]  # the report was right: the fix is what failed


def test_a_corrected_budget_passes_and_a_budget_raised_out_of_reach_fails(env: ITBenchEnv) -> None:
    fixed = _submit(env, _budget_patch(0.06), SETTLE)
    assert fixed["passed"], fixed["mitigation"]["reasons"]
    assert min(fixed["proximity"].values()) > 0.95
    hidden = _submit(env, _budget_patch(1.0), SETTLE)
    assert not hidden["mitigation"]["passed"]
    assert any(f"more than {BUDGET_HEADROOM:g}x what the load legitimately costs" in r for r in hidden["mitigation"]["reasons"])


def test_removing_the_budget_alert_fails(env: ITBenchEnv) -> None:
    evaluation = _submit(env, _budget_patch(None), SETTLE)
    assert not evaluation["mitigation"]["passed"]
    assert "budget alert MemorySpend removed from PrometheusRule otel-demo/finops-budget-alerts" in evaluation["mitigation"]["reasons"]


def test_a_misspelled_budget_rule_is_refused_or_pruned_as_the_crd_says(env: ITBenchEnv) -> None:
    """PrometheusRule's spec has the operator's structural schema. ``kubectl patch`` asks for no field
    validation, so the API server's default warns of an unknown field and drops it: a rule whose
    ``expr`` is misspelled has none and is refused, and the budget stays as it was; an extra field is
    dropped from a rule that is otherwise whole."""
    env.reset(seed=0)
    memory = '"expr": "sum by (namespace) (container_namespace_node:container_memory'
    observation, *_ = env.step(_budget_patch(0.06).replace(memory, memory.replace('"expr"', '"exp"')))
    assert observation["exit_status"] == 1 and "spec.groups[0].rules[1].expr: Required value" in observation["text"], observation["text"]
    observation, *_ = env.step("kubectl -n otel-demo get prometheusrule finops-budget-alerts -o jsonpath={.spec.groups[0].rules[1].expr}")
    assert observation["exit_status"] == 0 and "> 0.06" not in observation["text"] and "memory" in observation["text"]
    observation, *_ = env.step(_budget_patch(0.06).replace(memory, '"severty": "warning", ' + memory))
    assert observation["exit_status"] == 0 and 'Warning: unknown field "spec.groups[0].rules[1].severty"' in observation["text"], observation["text"]
    observation, *_ = env.step("kubectl -n otel-demo get prometheusrule finops-budget-alerts -o json")
    rule = json.loads(observation["text"])["spec"]["groups"][0]["rules"][1]
    assert "severty" not in rule and rule["expr"].endswith("> 0.06")


def test_deleting_an_autoscaler_fails(env: ITBenchEnv) -> None:
    evaluation = _submit(env, "kubectl -n otel-demo delete hpa frontend", SETTLE)
    assert not evaluation["mitigation"]["passed"]
    assert any(r.startswith("HorizontalPodAutoscaler otel-demo/frontend deleted") for r in evaluation["mitigation"]["reasons"])


def test_the_budgets_are_deployed_once_on_the_shared_start(env: ITBenchEnv) -> None:
    """The budget alerts are the same objects for every seed: every new seed starts from one
    deployment of them (same uid), made on the shared healthy baseline, and names that start."""
    uids = []
    for seed in (11, 12):
        env.reset(seed=seed)
        assert env.backend.baseline_key is not None and env.backend.baseline_key.provisioned.startswith("finops-budgets-")
        observation, *_ = env.step("kubectl -n otel-demo get prometheusrule finops-budget-alerts -o jsonpath={.metadata.uid}")
        assert observation["exit_status"] == 0, observation["text"]
        uids.append(observation["text"].strip())
    assert uids[0] and uids[0] == uids[1]
