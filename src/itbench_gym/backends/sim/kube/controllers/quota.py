"""ResourceQuota: admission of new pods and the ``status.used`` the quota controller keeps.

A quota fault shows up as pods that never appear: the ReplicaSet's ``FailedCreate`` event carries
the admission error ("exceeded quota: ..., requested: ..., used: ..., limited: ..."), and
``kubectl describe quota`` shows used against hard. Both come from the same accounting here.

Admission works as upstream's quota plugin does: it checks the request against ``status.used``
and writes the new total back, so admitting a pod costs the same in a namespace of ten pods or of
ten thousand; the controller recounts from the pods (replenishment) whenever they change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any

from itbench_gym.lang.timestamps import parse_rfc3339

from .. import errors
from ..store import ObjectStore
from .base import Cache, Context, Controller, Key
from .util import container_limits, container_requests, format_quantity, quantity

Obj = dict[str, Any]

#: quota resource name -> (which accounting, resource)
_COMPUTE = {
    "cpu": ("requests", "cpu"),
    "memory": ("requests", "memory"),
    "requests.cpu": ("requests", "cpu"),
    "requests.memory": ("requests", "memory"),
    "requests.ephemeral-storage": ("requests", "ephemeral-storage"),
    "limits.cpu": ("limits", "cpu"),
    "limits.memory": ("limits", "memory"),
    "limits.ephemeral-storage": ("limits", "ephemeral-storage"),
}


def pod_charged(pod: Obj, now: float) -> bool:
    """Upstream ``QuotaV1Pod``: terminal pods and pods past their grace period are free."""
    if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
        return False
    meta = pod.get("metadata") or {}
    deleted = meta.get("deletionTimestamp")
    return not (deleted and now > parse_rfc3339(deleted))


def _containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return list(spec.get("containers") or []) + list(spec.get("initContainers") or [])


def pod_usage(pod: Obj) -> dict[str, Decimal]:
    """What one pod charges against each quota resource name."""
    spec = pod.get("spec") or {}
    usage: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for name, (which, res) in _COMPUTE.items():
        getter = container_requests if which == "requests" else container_limits
        app = sum((getter(c).get(res, Decimal(0)) for c in spec.get("containers") or []), Decimal(0))
        init = max((getter(c).get(res, Decimal(0)) for c in spec.get("initContainers") or []), default=Decimal(0))
        usage[name] = max(app, init)
    return usage


def _missing(pod: Obj, hard: Iterable[str]) -> list[str]:
    """``must specify`` complaints for constrained compute resources the pod leaves unset."""
    out = []
    for name in sorted(hard):
        if name not in _COMPUTE:
            continue
        which, res = _COMPUTE[name]
        getter = container_requests if which == "requests" else container_limits
        lacking = [c.get("name", "") for c in _containers(pod) if res not in getter(c)]
        if lacking:
            out.append(f"{name} for: {','.join(lacking)}")
    return out


def namespace_usage(pods: Iterable[Obj], now: float,
                    usage_of: Callable[[Obj], dict[str, Decimal]] = pod_usage) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for p in pods:
        if pod_charged(p, now):
            for k, v in usage_of(p).items():
                total[k] = total.get(k, Decimal(0)) + v
    return total


def _observed_used(quota: Obj) -> dict[str, Decimal] | None:
    """``status.used`` once the controller has seen the quota's current ``spec.hard``, else None."""
    status = quota.get("status") or {}
    hard = (quota.get("spec") or {}).get("hard") or {}
    if "used" not in status or (status.get("hard") or {}) != hard:
        return None
    return {k: quantity(v) for k, v in (status.get("used") or {}).items()}


def check_pod(store: ObjectStore, pod: Obj, now: float) -> None:
    """Raise the API server's 403 when creating ``pod`` would break a ResourceQuota; otherwise
    charge it to every quota's ``status.used`` (upstream admission's compare-and-swap)."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or ""
    # Admission runs before name generation, so upstream names the object by its generateName.
    name = meta.get("generateName") or meta.get("name") or ""
    quotas = store.list_stored(store.registry.by_kind("ResourceQuota"), ns)
    if not quotas:
        return
    wanted = pod_usage(pod)
    counted: dict[str, Decimal] | None = None
    charged: list[tuple[Obj, dict[str, Decimal]]] = []
    for q in quotas:
        hard = {k: quantity(v) for k, v in ((q.get("spec") or {}).get("hard") or {}).items()}
        qname = q["metadata"]["name"]
        used = _observed_used(q)
        if used is None:  # not yet seen by the controller: count the pods as its first sync will
            if counted is None:
                counted = namespace_usage(store.list_stored(store.registry.by_kind("Pod"), ns), now)
            used = counted
        missing = _missing(pod, hard)
        if missing:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: failed quota: {qname}: must specify {"; ".join(missing)}',
                "", "pods", name,
            )
        over = sorted(
            r for r, limit in hard.items()
            if r in wanted and wanted[r] > 0 and used.get(r, Decimal(0)) + wanted[r] > limit
        )
        if over:
            def fmt(values: dict[str, Decimal], over: list[str] = over) -> str:
                return ",".join(f"{r}={format_quantity(values.get(r, Decimal(0)), r)}" for r in over)

            raise errors.forbidden(
                f'pods "{name}" is forbidden: exceeded quota: {qname}, requested: {fmt(wanted)}, '
                f"used: {fmt(used)}, limited: {fmt(hard)}",
                "", "pods", name,
            )
        if _observed_used(q) is not None:
            charged.append((q, {r: used.get(r, Decimal(0)) + wanted.get(r, Decimal(0)) for r in hard}))
    for q, total in charged:
        status = dict(q.get("status") or {})
        status["used"] = {r: format_quantity(v, r) for r, v in sorted(total.items())}
        store.update({**q, "status": status}, subresource="status")


class QuotaController(Controller):
    """Keeps ``status.hard`` / ``status.used`` of every ResourceQuota current."""

    name = "resourcequota"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        #: pod uid -> its charges (a pod's resources are immutable, so parse them once)
        self._usage: dict[str, dict[str, Decimal]] = {}

    def _usage_of(self, pod: Obj) -> dict[str, Decimal]:
        uid = str(pod["metadata"].get("uid", ""))
        out = self._usage.get(uid)
        if out is None:
            out = self._usage[uid] = pod_usage(pod)
        return out

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "ResourceQuota":
            return [Cache.key_of(obj)]
        if kind == "Pod":
            if event == "DELETED":
                self._usage.pop(str(obj["metadata"].get("uid", "")), None)
            ns = obj["metadata"].get("namespace") or ""
            return [Cache.key_of(q) for q in self.ctx.cache.list("ResourceQuota", ns)]
        return ()

    def sync(self, key: Key) -> None:
        quota = self.ctx.cache.get("ResourceQuota", *key)
        if quota is None:
            return
        hard_raw = dict((quota.get("spec") or {}).get("hard") or {})
        used = namespace_usage(self.ctx.cache.list("Pod", key[0]), self.ctx.now(), self._usage_of)
        status = {
            "hard": hard_raw,
            "used": {r: format_quantity(used.get(r, Decimal(0)), r) for r in sorted(hard_raw)},
        }
        self.write_status(quota, status)
