"""CISO grading as ITBench grades it (PolicyReports, Rego output, untouched policies), the compliant case,
the leaderboard's CISO columns, and the tools a CISO agent writes its artefacts with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.backends.base import Endpoints
from itbench_gym.evaluation.ciso import (
    grade_policy_result,
    grade_probes,
    grade_rego_output,
    grade_reports,
    grade_unchanged,
    holds_fields,
)
from itbench_gym.runner import leaderboard
from itbench_gym.runner.store import AgentInfo, EpisodeRecord, ResultStore
from itbench_gym.tools.base import ToolContext, ToolInputError
from itbench_gym.tools.submit import AssessmentSubmitTool
from itbench_gym.tools.workspace_files import ListFilesTool, ReadFileTool, WriteFileTool

TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "paa", "name": "nginx-deployment"}


def report(fail: int, passed: int, *, name: str = "nginx-deployment", kind: str = "Deployment", namespace: str = "paa",
           policy: str = "disallow-host-network", result: str | None = None) -> dict[str, Any]:
    results = [{"policy": policy, "rule": "autogen-host-network", "result": result or ("fail" if fail else "pass")}]
    return {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "scope": {"apiVersion": "apps/v1", "kind": kind, "namespace": namespace, "name": name, "uid": "u"},
            "summary": {"pass": passed, "fail": fail, "warn": 0, "error": 0, "skip": 0}, "results": results}


def test_a_failed_result_scoped_to_the_injected_resource_detects_the_violation() -> None:
    assert grade_reports([report(1, 0)], TARGET, compliant=False).passed
    verdict = grade_reports([report(0, 1)], TARGET, compliant=False)
    assert not verdict.passed and "does not detect the violation" in verdict.reasons[0]


def test_reports_of_other_resources_do_not_count() -> None:
    others = [report(3, 0, name="other"), report(2, 0, namespace="kube-system"), report(1, 0, kind="Pod")]
    verdict = grade_reports(others, TARGET, compliant=False)
    assert not verdict.passed and "no PolicyReport is scoped to Deployment paa/nginx-deployment" in verdict.reasons[0]


def test_the_compliant_case_needs_passes_and_no_failure() -> None:
    assert grade_reports([report(0, 2)], TARGET, compliant=True).passed
    assert "not there" in grade_reports([report(1, 1)], TARGET, compliant=True).reasons[0]
    assert not grade_reports([], TARGET, compliant=True).passed  # no report is no evidence of compliance


def test_the_update_class_reads_the_graded_policys_own_result() -> None:
    reports = [report(1, 0, policy="container-security-controls")]
    assert grade_policy_result(reports, TARGET, "container-security-controls", compliant=False).passed
    other = grade_policy_result(reports, TARGET, "service-account-requirements", compliant=False)
    assert not other.passed and "reports no result" in other.reasons[0]
    assert not grade_policy_result([report(0, 1, policy="p")], TARGET, "p", compliant=False).passed
    assert grade_policy_result([report(0, 1, policy="p")], TARGET, "p", compliant=True).passed
    kept_and_added = report(1, 1, policy="p")
    kept_and_added["results"] = [{"policy": "p", "rule": "old", "result": "pass"}, {"policy": "p", "rule": "new", "result": "fail"}]
    assert grade_policy_result([kept_and_added], TARGET, "p", compliant=False).passed  # a new rule beside the old one
    assert not grade_policy_result([kept_and_added], TARGET, "p", compliant=True).passed


def test_an_untouched_policy_may_gain_defaults_but_not_lose_or_change_a_field() -> None:
    rules = [{"name": "r", "validate": {"pattern": {"spec": {"serviceAccountName": "!default"}}}}]
    before = [{"metadata": {"name": "sa"}, "spec": {"rules": rules}}]
    defaulted = [{"metadata": {"name": "sa"}, "spec": {"rules": [{**rules[0], "skipBackgroundRequests": True}]}}]
    assert grade_unchanged(before, defaulted, ["sa"]).passed
    edited = [{"metadata": {"name": "sa"}, "spec": {"rules": [*rules, {"name": "added"}]}}]
    assert "were changed" in grade_unchanged(before, edited, ["sa"]).reasons[0]
    assert "is gone" in grade_unchanged(before, [], ["sa"]).reasons[0]
    assert holds_fields({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2, "c": 3}], "d": 4})
    assert not holds_fields({"a": [1]}, {"a": [1, 2]})


@pytest.mark.parametrize(("output", "status", "compliant", "passed"), [
    ("false", 0, False, True), ("false\n", 0, False, True), ("true", 0, False, False), ("", 0, False, False),
    ("true", 0, True, True), ("false", 0, True, False), ("1 error occurred: policy.rego:3: rego_parse_error", 1, False, False),
    ('"false"', 0, False, False), ("0", 0, False, False),
])
def test_rego_output_must_be_exactly_the_expected_boolean(output: str, status: int, compliant: bool, passed: bool) -> None:
    assert grade_rego_output(output, status, compliant).passed is passed


def _ciso_record(agent: str, scenario: str, cls: str, run: int, passed: bool, ttp: float) -> EpisodeRecord:
    evaluation = {"passed": passed, "reward": float(passed), "domain": "ciso", "class": cls, "ttp_seconds": ttp}
    return EpisodeRecord(agent=agent, scenario=scenario, run=run, seed=run, scenario_version="v", domain="ciso", cls=cls,
                         complexity="easy", status="finished", error=None, wall_seconds=1.0, sim_seconds=ttp, agent_stats={},
                         steps=[], evaluation=evaluation)


def test_the_leaderboard_shows_the_papers_ciso_columns(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        store.register_agent(AgentInfo("a", "a", False, {}, "0"), resume=False)
        store.write(_ciso_record("a", "CISO-Kyverno-5.2.5-v0", "kyverno", 0, True, 120.0))
        store.write(_ciso_record("a", "CISO-Kyverno-5.2.5-v0", "kyverno", 1, False, 300.0))
        store.write(_ciso_record("a", "CISO-K8sOPA-5.2.5-v0", "k8s-opa", 0, True, 60.0))
    text = leaderboard.markdown_report(leaderboard.load([tmp_path]))
    assert "## CISO" in text and "## SRE" not in text
    header = next(line for line in text.splitlines() if line.startswith("| agent | episodes"))
    assert "kyverno pass@1 | k8s-opa pass@1 | rhel9-opa pass@1 | kyverno-update pass@1 | pass@1 | TTP (s)" in header
    row = next(line for line in text.splitlines() if line.startswith("| a |")).split(" | ")
    assert row[1:5] == ["3", "2", "0.500", "1.000"] and row[5] == "—"  # one scenario per class: no SE
    assert row[7] == "0.750 ± 0.250" and row[8].startswith("160.0")  # pass@1 over scenarios; TTP over episodes


def _ctx(tmp_path: Path) -> ToolContext:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    endpoints = Endpoints(kubeconfig=tmp_path / "kubeconfig", kube_cache_dir=tmp_path, prometheus=None)
    return ToolContext(endpoints, advance=lambda s: None, now=lambda: 0.0, time_left=lambda: 60.0, workspace=workspace,
                       scratch=tmp_path)


def test_the_agent_writes_reads_and_lists_its_files_in_the_workspace_only(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert WriteFileTool().run({"text": "policy.rego\npackage check\n"}, ctx).text == "wrote policy.rego (14 bytes)"
    WriteFileTool().run({"path": "sub/script.sh", "content": "kubectl get pods -o json > collected_data.json\n"}, ctx)
    assert ReadFileTool().run({"text": "policy.rego"}, ctx).text == "package check\n"
    listing = ListFilesTool().run({}, ctx).text
    assert "policy.rego" in listing and "sub/script.sh" in listing
    with pytest.raises(ToolInputError, match="leads outside your workspace"):
        WriteFileTool().run({"path": "../escape.txt", "content": "x"}, ctx)
    with pytest.raises(ToolInputError, match="absolute paths are not allowed"):
        WriteFileTool().run({"path": "/tmp/escape.txt", "content": "x"}, ctx)
    with pytest.raises(ToolInputError, match="path on the first line"):
        WriteFileTool().run({"text": "policy.rego"}, ctx)
    assert not (tmp_path / "escape.txt").exists()
    assert ReadFileTool().run({"path": "missing.json"}, ctx).exit_status == 1


def test_the_assessment_submit_takes_an_optional_posture(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    done = AssessmentSubmitTool().run({"text": '{"compliant": false, "summary": "hostNetwork"}'}, ctx)
    assert done.ends_episode and done.data["report"] == {"compliant": False, "summary": "hostNetwork"}
    assert AssessmentSubmitTool().run({}, ctx).ends_episode
    assert AssessmentSubmitTool().run({"text": "the cluster shares the host network"}, ctx).data["report"] == {
        "summary": "the cluster shares the host network"}
    rejected = AssessmentSubmitTool().run({"compliant": "no"}, ctx)
    assert not rejected.ends_episode and rejected.exit_status == 2


def test_an_unedited_policy_cannot_confirm_a_compliant_case_of_the_update_class() -> None:
    existing = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"}, "spec": {"rules": [{
        "name": "no-escalation", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "validate": {"message": "m", "pattern": {"spec": {"containers": [{"securityContext": {"allowPrivilegeEscalation": False}}]}}}}]}}
    edited = json.loads(json.dumps(existing))
    edited["spec"]["rules"].append({"name": "non-root", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                                    "validate": {"message": "m", "pattern": {"spec": {"containers": [{"securityContext": {"runAsNonRoot": True}}]}}}})
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": "paa"}, "spec": {"containers": [
        {"name": "c", "image": "nginx", "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": False}}]}}
    assert "was not updated" in grade_probes(existing, "p", [probe]).reasons[0]
    assert grade_probes(edited, "p", [probe]).passed
    assert "is gone" in grade_probes(None, "p", [probe]).reasons[0]
