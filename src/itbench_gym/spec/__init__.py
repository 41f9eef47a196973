"""Scenario specs: the typed model, its JSON Schema and the loader."""

from itbench_gym.spec.loader import SpecError, load_all_specs, load_spec
from itbench_gym.spec.model import AlertMatcher, Budget, Complexity, FaultRef, ScenarioSpec

__all__ = [
    "AlertMatcher",
    "Budget",
    "Complexity",
    "FaultRef",
    "ScenarioSpec",
    "SpecError",
    "load_all_specs",
    "load_spec",
]
