"""Fault catalogue: each fault is a set of operations on the Kubernetes API, so it works on any backend."""

from itbench_gym.faults.catalogue import FaultDefinition, FaultError, catalogue, validate_fault_args
from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.inject import fault_context, inject_faults, remove_faults

__all__ = ["FaultContext", "FaultDefinition", "FaultError", "ObjectRef", "catalogue", "fault_context", "inject_faults",
           "remove_faults", "validate_fault_args"]
