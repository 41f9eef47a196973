"""Grading of CISO episodes as ITBench grades them, plus the compliant case.

ITBench's evaluators (itbench-hub/ITBench-Scenarios ``ciso/*/evaluation``, ``playbooks/evaluate.yml``):

- kyverno: pass when a ``wgpolicyk8s.io/v1alpha2`` PolicyReport or ClusterPolicyReport whose ``scope``
  is the injected resource (apiVersion, kind, namespace, name) has ``summary.fail > 0``;
- k8s-opa and rhel9-opa: the agent's fetcher (``script.sh`` / ``playbook.yml``) runs again, then
  ``opa eval --data policy.rego --input collected_data.json data.check.result --format raw``; pass when
  the output is exactly ``false``;
- kyverno-update: the graded policy's result for the injected resource is ``fail`` (from any of its
  rules), and the rules of each policy that must stay untouched still hold every field they had
  (ITBench's ``compare_dicts``).

ITBench always injects a misconfiguration. Here a seed may set up a compliant case, where the same
check must show compliance: a scoped report with passes and no failure, ``true`` from the Rego query,
the graded policy's ``pass`` (a report must exist: no result is not evidence of compliance) — and, since
an unedited policy passes a resource that meets the new requirement too, the policy as deployed must
fail the resources of the scenario's non-compliant cases (evaluated with the package's Kyverno engine).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Verdict:
    """The outcome of one grading check: passed or not, and why."""

    passed: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class CISOEvaluation:
    """One CISO episode's grade; ``passed`` is the paper's pass@1 for the scenario's class."""

    scenario_id: str
    cls: str
    case: str
    compliant: bool
    passed: bool
    reasons: tuple[str, ...]
    #: ITBench's sub-tasks (kyverno: generate_assessment_posture, generate_policy, evidence_available).
    tasks: Mapping[str, bool] = field(default_factory=dict)
    #: Time to process: simulated seconds from the hand-over to the submit (None without a submit).
    ttp_seconds: float | None = None
    submitted: bool = False
    report_error: str | None = None

    #: What the ``"score"`` reward weighs: the assessment, ITBench's pass@1.
    score_weights: ClassVar[Mapping[str, float]] = {"assessment": 1.0}

    def parts(self) -> Mapping[str, float | None]:
        return {"assessment": 1.0 if self.passed else 0.0}

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario_id": self.scenario_id,
            "domain": "ciso",
            "class": self.cls,
            "case": self.case,
            "compliant": self.compliant,
            "passed": self.passed,
            "success": self.passed,
            "reasons": list(self.reasons),
            "tasks": dict(self.tasks),
            "ttp_seconds": self.ttp_seconds,
            "submitted": self.submitted,
            "report_error": self.report_error,
        }


def _scoped(reports: Iterable[Obj], target: Mapping[str, str]) -> list[Obj]:
    """Reports whose ``scope`` is ``target`` (a cluster report's scope has no namespace: it matches any)."""
    out = []
    for report in reports:
        scope = report.get("scope") or {}
        if (scope.get("apiVersion"), scope.get("kind"), scope.get("name")) != (target["apiVersion"], target["kind"], target["name"]):
            continue
        if "namespace" in scope and scope["namespace"] != target.get("namespace"):
            continue
        out.append(report)
    return out


def _ref(target: Mapping[str, str]) -> str:
    where = f"{target['namespace']}/" if target.get("namespace") else ""
    return f"{target['kind']} {where}{target['name']}"


def grade_reports(reports: Sequence[Obj], target: Mapping[str, str], compliant: bool) -> Verdict:
    """The kyverno class: the PolicyReports scoped to the case's resource."""
    scoped = _scoped(reports, target)
    fails = sum(int((r.get("summary") or {}).get("fail", 0) or 0) for r in scoped)
    passes = sum(int((r.get("summary") or {}).get("pass", 0) or 0) for r in scoped)
    ref = _ref(target)
    if not scoped:
        return Verdict(False, (f"no PolicyReport is scoped to {ref}: no policy of the cluster evaluated it",))
    if not compliant:
        if fails > 0:
            return Verdict(True, (f"the PolicyReport of {ref} has {fails} failed result(s): the violation is detected",))
        return Verdict(False, (f"{ref} violates the requirement, but its PolicyReport has no failed result "
                               f"({passes} passed): the policy does not detect the violation",))
    if fails > 0:
        return Verdict(False, (f"{ref} complies with the requirement, but its PolicyReport has {fails} failed result(s): "
                               "the policy reports a violation that is not there",))
    if passes == 0:
        return Verdict(False, (f"{ref} complies, but its PolicyReport has no passed result: nothing confirms compliance",))
    return Verdict(True, (f"the PolicyReport of {ref} has {passes} passed and no failed result: compliance confirmed",))


def grade_policy_result(reports: Sequence[Obj], target: Mapping[str, str], policy: str, compliant: bool) -> Verdict:
    """kyverno-update: the results the graded ``policy`` gives the case's resource — a ``fail`` from one of
    its rules detects the violation (an edited policy may keep its old rules beside a new one); a
    compliant resource must pass every rule."""
    expected = "pass" if compliant else "fail"
    results = [r for report in _scoped(reports, target) for r in report.get("results") or [] if r.get("policy") == policy]
    ref = _ref(target)
    if not results:
        return Verdict(False, (f"policy {policy!r} reports no result for {ref} (expected {expected!r})",))
    got = sorted({str(r.get("result")) for r in results})
    ok = "fail" in got if not compliant else got == ["pass"]
    if ok:
        return Verdict(True, (f"policy {policy!r} reports {expected!r} for {ref}, as expected",))
    return Verdict(False, (f"policy {policy!r} reports {', '.join(repr(g) for g in got)} for {ref}, expected {expected!r}",))


def grade_probes(policy: Obj | None, name: str, probes: Sequence[Obj]) -> Verdict:
    """kyverno-update, compliant case: the graded policy as deployed must detect the violations the
    requirement is about — each probe (a non-compliant case's resource) fails one of its rules.
    Otherwise a compliant resource passes an unedited policy and doing nothing would pass."""
    from itbench_gym.policy.kyverno import Admission, PolicyError, evaluate_policy, load_policy

    if policy is None:
        return Verdict(False, (f"policy {name!r} is gone",))
    try:
        loaded = load_policy(dict(policy))
    except PolicyError as exc:
        return Verdict(False, (f"policy {name!r} cannot be evaluated: {exc}",))
    missed = [f"{o['kind']} {o['metadata']['name']}" for o in probes
              if not any(r.matched and r.status == "fail" for r in evaluate_policy(loaded, dict(o), Admission(), {}, {}))]
    if missed:
        return Verdict(False, (f"policy {name!r} as deployed does not detect {', '.join(missed)} (resources violating the new "
                               "requirement): it was not updated",))
    return Verdict(True, (f"policy {name!r} as deployed detects the violations of the new requirement",))


def holds_fields(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` still has every field of ``expected`` with the same value (maps may gain
    fields, as the API server's and Kyverno's defaulting add them; lists keep their length and order)."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return all(k in actual and holds_fields(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(holds_fields(e, a) for e, a in zip(expected, actual, strict=True))
    return bool(expected == actual)


def grade_unchanged(existing: Sequence[Obj], current: Sequence[Obj], names: Sequence[str]) -> Verdict:
    """kyverno-update: each named policy's rules as they were deployed."""
    reasons: list[str] = []
    ok = True
    for name in names:
        before = next((p for p in existing if (p.get("metadata") or {}).get("name") == name), None)
        now = next((p for p in current if (p.get("metadata") or {}).get("name") == name), None)
        if before is None or now is None:
            ok = False
            reasons.append(f"policy {name!r} is gone" if before is not None else f"policy {name!r} was never deployed")
            continue
        if not holds_fields((before.get("spec") or {}).get("rules") or [], (now.get("spec") or {}).get("rules") or []):
            ok = False
            reasons.append(f"the rules of policy {name!r}, which the requirement did not concern, were changed")
        else:
            reasons.append(f"policy {name!r} is unchanged")
    return Verdict(ok, tuple(reasons))


def grade_rego_output(output: str, status: int, compliant: bool, detail: str = "") -> Verdict:
    """The OPA classes: ``opa eval ... data.check.result --format raw`` printed exactly ``false``
    (a non-compliant case) or ``true`` (a compliant one)."""
    expected = "true" if compliant else "false"
    shown = output.strip() or "(nothing: data.check.result is undefined)"
    suffix = f" ({detail})" if detail else ""
    if status != 0:
        return Verdict(False, (f"opa eval failed (exit status {status}): {output.strip()[:500]}{suffix}",))
    if output.strip() == expected:
        what = "compliant" if compliant else "non-compliant"
        return Verdict(True, (f"data.check.result is {expected}: the {what} state is detected{suffix}",))
    return Verdict(False, (f"data.check.result printed {shown[:200]}, expected exactly {expected}{suffix}",))
