"""Rego evaluation with OPA semantics for v0 and v1 syntax, behind one adapter (see ``engine``)."""

from itbench_gym.policy.rego.engine import RegoBackend, RegoError, RegoVersion
from itbench_gym.policy.rego.isolated import RegoEngine

__all__ = ["RegoBackend", "RegoEngine", "RegoError", "RegoVersion"]
