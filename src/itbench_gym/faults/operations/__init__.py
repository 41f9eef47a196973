"""The Kubernetes API operations behind each catalogue entry, one module per family of faults.

An operation is ``fn(ctx, args) -> log line``: it changes the cluster only through ``ctx`` (so the
journal can remove it) and returns a harness-side line that is never shown to the agent. Each module
of this package (but ``common``) exports ``OPERATIONS``, a mapping from the names that
``definitions/*.yaml`` use to functions; they are collected here.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import Any

from itbench_gym.faults.context import FaultContext

Operation = Callable[[FaultContext, Mapping[str, Any]], str]


def _collect() -> dict[str, Operation]:
    out: dict[str, Operation] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "common":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        clash = out.keys() & module.OPERATIONS.keys()
        if clash:
            raise RuntimeError(f"operation names defined twice: {sorted(clash)} ({module.__name__})")
        out.update(module.OPERATIONS)
    return out


OPERATIONS: dict[str, Operation] = _collect()
