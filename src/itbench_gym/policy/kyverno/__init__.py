"""A Kyverno validation engine (ClusterPolicy/Policy validate rules) and a `kyverno test` suite runner."""

from .conformance import find_suites, run_kyverno_suites, run_suite
from .engine import Policy, PolicyError, RuleResult, evaluate_policy, evaluate_rule, load_policy
from .match import Admission

__all__ = [
    "Admission",
    "Policy",
    "PolicyError",
    "RuleResult",
    "evaluate_policy",
    "evaluate_rule",
    "find_suites",
    "load_policy",
    "run_kyverno_suites",
    "run_suite",
]
