"""The shape both policy engines' conformance runners report (Kyverno and Gatekeeper suites).

A case is one expected result for one resource. Failures name the suite file, policy, rule and resource
with expected vs got; skipped cases carry the reason (an unsupported feature or missing input);
suite-level errors (unreadable files) are listed as lines naming the file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CaseFailure:
    suite: str
    policy: str
    rule: str
    resource: str
    expected: str
    got: str
    detail: str = ""


@dataclass(frozen=True)
class SkippedCase:
    suite: str
    policy: str
    rule: str
    resource: str
    reason: str


@dataclass
class SuiteOutcome:
    """What one suite file produced."""

    suite: str
    passed: int = 0
    failures: list[CaseFailure] = field(default_factory=list)
    skipped: list[SkippedCase] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class ConformanceResult:
    """All suites of a run, with totals over them."""

    suites: list[SuiteOutcome] = field(default_factory=list)

    @property
    def passed(self) -> int:
        return sum(s.passed for s in self.suites)

    @property
    def failures(self) -> list[CaseFailure]:
        return [f for s in self.suites for f in s.failures]

    @property
    def skipped(self) -> list[SkippedCase]:
        return [k for s in self.suites for k in s.skipped]

    @property
    def errors(self) -> list[str]:
        return [f"{s.suite}: {e}" for s in self.suites for e in s.errors]

    @property
    def pass_ratio(self) -> float:
        """Passed over evaluated (non-skipped) cases; 1.0 when nothing was evaluated."""
        evaluated = self.passed + len(self.failures)
        return self.passed / evaluated if evaluated else 1.0


def format_report(result: ConformanceResult) -> str:
    """Errors, then failures, then skip reasons with counts; the last line is `N passed, M failed, K skipped`."""
    lines = [f"ERROR {e}" for e in result.errors]
    for f in result.failures:
        detail = f" ({f.detail})" if f.detail else ""
        lines.append(f"FAIL {f.suite}: policy={f.policy} rule={f.rule} resource={f.resource} expected={f.expected} got={f.got}{detail}")
    for reason, count in sorted(Counter(k.reason for k in result.skipped).items()):
        lines.append(f"SKIP {count} case(s): {reason}")
    lines.append(f"{result.passed} passed, {len(result.failures)} failed, {len(result.skipped)} skipped")
    return "\n".join(lines)
