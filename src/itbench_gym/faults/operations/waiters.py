"""ITBench's waiters: steps around an injection that prepare it or let it take effect.

They edit workloads the way ITBench's waiter role does (``kubectl rollout restart``,
``kubernetes.core.k8s_scale`` with its waits) but are not faults: removal does not revert them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.operations.common import target
from itbench_gym.lang.timestamps import rfc3339

#: ``k8s_scale``'s ``wait_timeout`` in ITBench's scale waiter and in its delete-pods waiter.
SCALE_WAIT_SECONDS = 60.0
DELETE_PODS_WAIT_SECONDS = 120.0


def restart_workload(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Same patch as ``kubectl rollout restart``: a new ``restartedAt`` template annotation."""
    ref = target(args)
    stamp = rfc3339(ctx.now())
    body = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}}
    ctx.patch(ref, body, record=False)
    return f"{ref} restarted at {stamp}"


def _scaled(ctx: FaultContext, ref: ObjectRef, replicas: int) -> bool:
    """``k8s_scale``'s wait: the controller reports exactly ``replicas`` pods, all ready."""
    obj = ctx.get(ref)
    status = (obj or {}).get("status") or {}
    return (status.get("replicas") or 0) == replicas and (status.get("readyReplicas") or 0) == replicas


def _scale(ctx: FaultContext, ref: ObjectRef, replicas: int, wait: float | None) -> None:
    ctx.patch(ref, {"spec": {"replicas": replicas}}, "merge", record=False)
    if wait is not None and not ctx.wait_for(lambda: _scaled(ctx, ref, replicas), wait):
        raise FaultError(f"{ref} did not reach {replicas} ready replica(s) within {wait:.0f} s")


def scale_workload(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Scale to ``args.replicas`` and wait until that many pods are ready (runs before injection)."""
    ref = target(args)
    _scale(ctx, ref, args["replicas"], SCALE_WAIT_SECONDS)
    return f"{ref} scaled to {args['replicas']}"


def delete_workload_pods(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Scale to zero, wait until the pods are gone, scale back to the replicas it had (no wait):
    every pod is replaced by one made from the faulted template."""
    ref = target(args)
    replicas = int((ctx.require(ref).get("spec") or {}).get("replicas", 1))
    _scale(ctx, ref, 0, DELETE_PODS_WAIT_SECONDS)
    _scale(ctx, ref, replicas, None)
    return f"{ref}: pods deleted, scaled back to {replicas}"


def pause_execution(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ctx.advance(float(args["seconds"]))
    return f"paused {args['seconds']} s"


OPERATIONS = {
    "restart_workload": restart_workload,
    "scale_workload": scale_workload,
    "delete_workload_pods": delete_workload_pods,
    "pause_execution": pause_execution,
}
