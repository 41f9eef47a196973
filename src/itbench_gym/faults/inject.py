"""Apply a scenario's faults and waiters in order through the admin credentials, and remove them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from itbench_gym.faults.catalogue import WAITER, catalogue
from itbench_gym.faults.context import FaultContext
from itbench_gym.faults.operations import OPERATIONS

if TYPE_CHECKING:
    from itbench_gym.backends.base import Backend
    from itbench_gym.spec import FaultRef
    from itbench_gym.spec.appfacts import AppFacts


def fault_context(backend: Backend, app: AppFacts, seed: int = 0) -> FaultContext:
    """A context on ``backend``'s admin client and clock; close it with ``ctx.close()``."""
    return FaultContext(api=backend.admin_client(), app=app, now=backend.clock.now, advance=backend.advance, seed=seed,
                        discovery_cache=backend.admin_kubeconfig.parent / "discovery.json")


def inject_faults(faults: Sequence[FaultRef], ctx: FaultContext) -> list[str]:
    """Run each fault's or waiter's operation in order; returns a harness-side log (never shown to
    the agent). ``ctx.journal`` then holds what :func:`remove_faults` reverts, and
    ``ctx.injected_at`` when the first fault (not a waiter such as a preparatory scale) went in."""
    log = []
    for fault in faults:
        definition = catalogue()[fault.id]
        if definition.category != WAITER and ctx.injected_at is None:
            ctx.injected_at = ctx.now()
        log.append(OPERATIONS[definition.operation](ctx, fault.args))
    return log


def remove_faults(ctx: FaultContext) -> list[str]:
    """Revert every change the injections made through ``ctx`` (waiters' edits stay)."""
    return ctx.undo()
