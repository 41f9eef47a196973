"""Scenario specs: the typed model, its JSON Schema, the loader and the checks against the app."""

from itbench_gym.spec.loader import (
    SpecError,
    SpecProblem,
    check_document,
    check_spec_files,
    load_all_specs,
    load_spec,
    spec_files,
)
from itbench_gym.spec.model import AlertMatcher, Budget, Complexity, FaultRef, ScenarioSpec

__all__ = [
    "AlertMatcher",
    "Budget",
    "Complexity",
    "FaultRef",
    "ScenarioSpec",
    "SpecError",
    "SpecProblem",
    "check_document",
    "check_spec_files",
    "load_all_specs",
    "load_spec",
    "spec_files",
]
