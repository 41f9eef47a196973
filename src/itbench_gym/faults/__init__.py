"""Fault catalogue: each fault is a set of operations on the Kubernetes API, so it works on any backend."""

from itbench_gym.faults.catalogue import FaultDefinition, FaultError, catalogue, validate_fault_args
from itbench_gym.faults.inject import inject_faults

__all__ = ["FaultDefinition", "FaultError", "catalogue", "inject_faults", "validate_fault_args"]
