"""ReplicaSet controller: keep ``spec.replicas`` active pods, report ready/available counts.

Mirrors ``pkg/controller/replicaset``: one sync creates or deletes at most ``BurstReplicas``
(500) pods, creations go out in slow-start batches that stop after a failing batch, the failure
becomes a ``ReplicaFailure`` condition and a ``FailedCreate`` event, scale-down deletes the least
valuable pods first (unscheduled, pending, not ready, most recently ready, most restarts, newest),
and failures are retried with exponential back-off. A sync that leaves work undone comes back
when the controller's client has sent its requests (see ``ratelimit``), so ``--replicas=1000000``
grows by 500 pods per 25 simulated seconds instead of all at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.timestamps import rfc3339

from ..errors import ApiError
from .base import Cache, Context, Controller, Key
from .podcontrol import PodControl
from .util import condition, is_pod_active, is_pod_available, is_pod_ready, parse_time, pod_phase, pod_template_labels

Obj = dict[str, Any]

#: workqueue.DefaultControllerRateLimiter: 5 ms doubling up to 1000 s.
_BACKOFF_BASE, _BACKOFF_MAX = 0.005, 1000.0
#: ``replicaset.BurstReplicas``: creations or deletions of one sync.
BURST_REPLICAS = 500


def _phase_rank(pod: Obj) -> int:
    return {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod_phase(pod), 3)


def _restarts(pod: Obj) -> int:
    return max((c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or []), default=0)


def deletion_order(pods: list[Obj]) -> list[Obj]:
    """Upstream ``ActivePods`` ordering: the pods to delete first come first."""

    def key(p: Obj) -> tuple[Any, ...]:
        ready_since = parse_time((condition(p, "Ready") or {}).get("lastTransitionTime")) or 0.0
        created = parse_time(p["metadata"].get("creationTimestamp")) or 0.0
        return (
            bool((p.get("spec") or {}).get("nodeName")),
            _phase_rank(p),
            is_pod_ready(p),
            -ready_since if is_pod_ready(p) else 0.0,
            -_restarts(p),
            -created,
            p["metadata"]["name"],
        )

    return sorted(pods, key=key)


class ReplicaSetController(Controller):
    name = "replicaset"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.pods = PodControl(ctx, "replicaset-controller")
        self.failures: dict[Key, int] = {}

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "ReplicaSet":
            return [Cache.key_of(obj)]
        if kind == "Pod":
            key = self.owner_key(obj, "ReplicaSet")
            return [key] if key else ()
        if kind == "ResourceQuota":  # a raised quota lets blocked ReplicaSets retry at once
            return [k for k in self.failures if k[0] == (obj["metadata"].get("namespace") or "")]
        return ()

    def snapshot_state(self) -> tuple[dict[Key, int], Any]:
        return dict(self.failures), self.pods.snapshot()

    def restore_state(self, state: tuple[dict[Key, int], Any] | None) -> None:
        failures, limiter = state if state is not None else ({}, None)
        self.failures = dict(failures)
        self.pods.restore(limiter)

    def sync(self, key: Key) -> None:
        rs = self.ctx.cache.get("ReplicaSet", *key)
        if rs is None:
            self.failures.pop(key, None)
            return
        now = self.ctx.now()
        spec = rs.get("spec") or {}
        pods = [
            p for p in self.ctx.cache.owned("Pod", rs)
            if is_pod_active(p)
        ]
        error = None
        if not rs["metadata"].get("deletionTimestamp"):
            error = self._manage(rs, pods, int(spec.get("replicas", 1)))
            pods = [p for p in self.ctx.cache.owned("Pod", rs) if is_pod_active(p)]
        min_ready = int(spec.get("minReadySeconds", 0) or 0)
        template_labels = pod_template_labels(spec.get("template") or {})
        ready = [p for p in pods if is_pod_ready(p)]
        available = [p for p in ready if is_pod_available(p, min_ready, now)]
        if min_ready > 0:
            for p in ready:
                if p not in available:
                    since = parse_time((condition(p, "Ready") or {}).get("lastTransitionTime")) or now
                    self.requeue_at(key, since + min_ready)
        status: Obj = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(1 for p in pods if _fully_labeled(template_labels, p)),
            "readyReplicas": len(ready),
            "availableReplicas": len(available),
            "observedGeneration": rs["metadata"].get("generation", 1),
        }
        conditions = [c for c in (rs.get("status") or {}).get("conditions") or [] if c.get("type") != "ReplicaFailure"]
        if error is not None:
            old = condition(rs, "ReplicaFailure") or {}
            # Upstream's SetCondition keeps a condition whose status and reason are unchanged, message
            # and all: a refusal naming each new pod does not rewrite the status (and resync) every time.
            kept = old if (old.get("status"), old.get("reason")) == ("True", "FailedCreate") else None
            conditions.append(kept or {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": error,
                "lastTransitionTime": rfc3339(now),
            })
        if conditions:
            status["conditions"] = conditions
        self.write_status(rs, _drop_zero(status))

    def _manage(self, rs: Obj, pods: list[Obj], want: int) -> str | None:
        key = Cache.key_of(rs)
        diff = len(pods) - want
        if diff and not self.pods.can_send():
            self.requeue_at(key, self.pods.ready_at())  # the client is still sending an earlier burst
            return None
        if diff < 0:
            template = (rs.get("spec") or {}).get("template") or {}
            ns = rs["metadata"].get("namespace") or ""

            def create_one() -> ApiError | None:
                name = self.pods.generated_name(ns, rs["metadata"]["name"] + "-")
                pod = self.pods.pod_from_template(rs, template, name)
                pod["metadata"]["generateName"] = rs["metadata"]["name"] + "-"
                return self.pods.create(rs, pod)

            batch = min(-diff, BURST_REPLICAS)
            _, err = self.pods.slow_start(batch, create_one)
            if err is not None:
                n = self.failures.get(key, 0)
                self.failures[key] = n + 1
                self.requeue_at(key, self.ctx.now() + min(_BACKOFF_BASE * 2 ** min(n, 32), _BACKOFF_MAX))  # capped: no float overflow
                return err.message
            if batch < -diff:
                self.requeue_at(key, self.pods.ready_at())
        elif diff > 0:
            batch = min(diff, BURST_REPLICAS)
            for pod in deletion_order(pods)[:batch]:
                self.pods.delete(rs, pod)
            if batch < diff:
                self.requeue_at(key, self.pods.ready_at())
        self.failures.pop(key, None)
        return None


def _fully_labeled(template_labels: dict[str, str], pod: Obj) -> bool:
    labels = pod["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in template_labels.items())


def _drop_zero(status: Obj) -> Obj:
    """The API omits zero counts (``omitempty``) except ``replicas``."""
    return {k: v for k, v in status.items() if k in ("replicas", "observedGeneration") or v}
