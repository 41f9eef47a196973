"""PolicyExceptions: a matching exception turns a rule's result into a skip.

Shared by `kyverno test` suites and the twin's Kyverno, which both apply the same rule: an exception
names the policy and (wildcarded) rule names, and its own match block must hold for the resource.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .engine import Policy, RuleResult
from .match import Admission, block_matches
from .values import wildcard_match


def apply_exceptions(
    exceptions: Iterable[dict[str, Any]], policy: Policy, result: RuleResult, resource: dict[str, Any], admission: Admission,
    policy_key: str | None = None,
) -> RuleResult:
    """`result`, or a skip when an exception for `policy_key` (default the policy's name) covers it."""
    key = policy.name if policy_key is None else policy_key
    for exception in exceptions:
        spec = exception.get("spec") or {}
        named = any(
            e.get("policyName") == key and any(wildcard_match(str(r), result.rule) for r in e.get("ruleNames") or [])
            for e in spec.get("exceptions") or []
        )
        if named and block_matches(spec.get("match"), resource, admission):
            return RuleResult(result.rule, "skip", "rule skipped due to policy exception", result.matched)
    return result
