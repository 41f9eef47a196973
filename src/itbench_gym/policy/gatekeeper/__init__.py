"""Gatekeeper (OPA) policies without Gatekeeper: templates, constraints, match, reviews and gator suites."""

from itbench_gym.policy.gatekeeper.errors import GatekeeperError, Unsupported
from itbench_gym.policy.gatekeeper.match import review_matches, selector_matches, wildcard_matches
from itbench_gym.policy.gatekeeper.review import inventory_document, review_of
from itbench_gym.policy.gatekeeper.suites import run_gatekeeper_suites
from itbench_gym.policy.gatekeeper.template import Constraint, ConstraintEvaluator, ConstraintTemplate, Violation

__all__ = [
    "Constraint", "ConstraintEvaluator", "ConstraintTemplate", "GatekeeperError", "Unsupported", "Violation",
    "inventory_document", "review_matches", "review_of", "run_gatekeeper_suites", "selector_matches", "wildcard_matches",
]
