"""Creating and deleting pods on behalf of a workload controller (upstream ``controller.PodControl``).

Every workload controller creates pods the same way: from its pod template, owned by it, named
``<owner>-<5 chars>``, admitted against ResourceQuota, with ``SuccessfulCreate`` / ``FailedCreate``
/ ``SuccessfulDelete`` events on the owner.

The pace is upstream's too: creations go out in slow-start batches (``controller.SlowStartInitialBatchSize``
= 1, doubling after every batch that fully succeeded, stopping after one that did not), a sync
sends at most its controller's burst (``BurstReplicas`` and friends), and every request spends a
token of the controller's client rate limiter, which says when the next batch may go.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ApiError
from ..store import clone
from .base import Context
from .quota import check_pod
from .ratelimit import CONTROLLER_BURST, CONTROLLER_QPS, TokenBucket
from .util import controller_ref, name_suffix

Obj = dict[str, Any]

#: ``controller.SlowStartInitialBatchSize``: the first batch of a sync's creations.
SLOW_START_INITIAL_BATCH_SIZE = 1


class PodControl:
    """Pod creation/deletion with deterministic names, the real controllers' events and pacing."""

    def __init__(self, ctx: Context, component: str) -> None:
        self.ctx = ctx
        self.component = component
        self.limiter = TokenBucket.full(CONTROLLER_QPS, CONTROLLER_BURST, ctx.now())

    # -- pacing ------------------------------------------------------------------------------

    def can_send(self) -> bool:
        """Whether the client has caught up with its earlier requests (holds a token now)."""
        return self.limiter.ready(self.ctx.now())

    def ready_at(self) -> float:
        """When the client may send again: the time a sync that found it busy should be retried."""
        return self.limiter.ready_at(self.ctx.now())

    def slow_start(self, count: int, create_one: Callable[[], ApiError | None]) -> tuple[int, ApiError | None]:
        """Upstream ``slowStartBatch``: call ``create_one`` ``count`` times in batches of 1, 2, 4, ...

        A batch runs whole (its requests are concurrent upstream); after a batch with a failure the
        rest is skipped and the first error returned. Returns (successes, first error).
        """
        remaining, successes = count, 0
        batch = min(remaining, SLOW_START_INITIAL_BATCH_SIZE)
        while batch > 0:
            errs = [e for e in [create_one() for _ in range(batch)] if e is not None]
            self.spend(batch)
            successes += batch - len(errs)
            if errs:
                return successes, errs[0]
            remaining -= batch
            batch = min(2 * batch, remaining)
        return successes, None

    def spend(self, requests: int) -> None:
        """Charge ``requests`` API calls to the client's rate limiter."""
        self.limiter.take(requests, self.ctx.now())

    def snapshot(self) -> TokenBucket:
        return self.limiter.copy()

    def restore(self, state: TokenBucket | None) -> None:
        self.limiter = state.copy() if state is not None else TokenBucket.full(
            CONTROLLER_QPS, CONTROLLER_BURST, self.ctx.now())

    # -- pods --------------------------------------------------------------------------------

    def pod_from_template(self, owner: Obj, template: Obj, name: str) -> Obj:
        tmeta = template.get("metadata") or {}
        meta: Obj = {
            "name": name,
            "namespace": owner["metadata"].get("namespace"),
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [controller_ref(owner)],
        }
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        if tmeta.get("finalizers"):
            meta["finalizers"] = list(tmeta["finalizers"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": clone(template.get("spec") or {})}

    def generated_name(self, namespace: str, prefix: str) -> str:
        """``<prefix><5 chars>`` unused in the namespace, derived from the seed and a counter."""
        while True:
            self.ctx.name_counter += 1
            suffix = name_suffix(self.ctx.seed, namespace, prefix, self.ctx.name_counter)
            name = prefix[: 63 - len(suffix)] + suffix
            if self.ctx.cache.get("Pod", namespace, name) is None:
                return name

    def create(self, owner: Obj, pod: Obj) -> ApiError | None:
        """Admit and create ``pod``; on failure record ``FailedCreate`` and return the error."""
        try:
            check_pod(self.ctx.store, pod, self.ctx.now())
            created = self.ctx.store.create(pod)
        except ApiError as e:
            self.ctx.recorder.record(owner, "Warning", "FailedCreate", f"Error creating: {e.message}",
                                     component=self.component)
            return e
        self.ctx.recorder.record(owner, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}",
                                 component=self.component)
        return None

    def delete(self, owner: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        self.spend(1)
        try:
            self.ctx.store.delete("Pod", meta.get("namespace"), meta["name"])
        except ApiError as e:
            if e.code != 404:
                self.ctx.recorder.record(owner, "Warning", "FailedDelete", f"Error deleting: {e.message}",
                                         component=self.component)
            return
        self.ctx.recorder.record(owner, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}",
                                 component=self.component)
