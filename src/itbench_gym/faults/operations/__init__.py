"""The Kubernetes API operations behind each catalogue entry, one module per family of faults.

An operation is ``fn(ctx, args) -> log line``: it changes the cluster only through ``ctx`` (so the
journal can remove it) and returns a harness-side line that is never shown to the agent. Each module
exports ``OPERATIONS``, a mapping from the names that ``definitions/*.yaml`` use to functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from itbench_gym.faults.context import FaultContext
from itbench_gym.faults.operations import chaos, flags, waiters

Operation = Callable[[FaultContext, Mapping[str, Any]], str]

OPERATIONS: dict[str, Operation] = {}
for _module in (flags, waiters, chaos):
    _clash = OPERATIONS.keys() & _module.OPERATIONS.keys()
    if _clash:
        raise RuntimeError(f"operation names defined twice: {sorted(_clash)} ({_module.__name__})")
    OPERATIONS.update(_module.OPERATIONS)
