"""The machinery every controller shares: an informer cache, work queues and timed requeues.

Real controllers never poll: they keep a local cache fed by watch events, map each event to the
keys of the objects they own, and reconcile those keys from a work queue. Doing the same here
keeps a quiet cluster free (a tick with nothing to do touches nothing) and makes ``reconcile()``
a fixed-point iteration over dirty keys.
"""

from __future__ import annotations

import builtins
import heapq
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import ApiError, is_storage_error
from ..events import EventRecorder
from ..store import ObjectStore, clone
from .util import controller_of

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
#: workqueue.DefaultControllerRateLimiter's per-item exponential back-off.
RETRY_BASE_SECONDS, RETRY_MAX_SECONDS = 0.005, 1000.0

#: Kinds the controllers watch, in storage form.
WATCHED_KINDS = (
    "Namespace", "Node", "Pod", "Service", "Endpoints", "ReplicaSet", "Deployment", "StatefulSet",
    "DaemonSet", "Job", "CronJob", "HorizontalPodAutoscaler", "ResourceQuota", "PriorityClass",
    "ControllerRevision", "EndpointSlice", "PersistentVolumeClaim", "PersistentVolume", "StorageClass",
    "ServiceAccount", "ConfigMap", "Secret",
)


class Cache:
    """The informer cache: the latest version of every watched object, by kind and key.

    The objects are the store's own (shared, as the watch log shares them), so whatever reads
    them must not modify them: controllers copy what they mean to change.

    Indexed by controller uid and by namespace (client-go's namespace indexer), so a controller
    looking at one namespace or one owner does not walk every object in the cluster.
    """

    def __init__(self) -> None:
        self._objs: dict[str, dict[Key, Obj]] = {k: {} for k in WATCHED_KINDS}
        #: kind -> controller uid -> keys of the objects it controls
        self._owned: dict[str, dict[str, dict[Key, None]]] = {k: {} for k in WATCHED_KINDS}
        #: kind -> namespace -> keys of the objects in it
        self._by_ns: dict[str, dict[str, dict[Key, None]]] = {k: {} for k in WATCHED_KINDS}

    def _index(self, kind: str, key: Key, obj: Obj | None, add: bool) -> None:
        ref = controller_of(obj) if obj is not None else None
        if ref is None:
            return
        bucket = self._owned[kind]
        uid = str(ref.get("uid", ""))
        if add:
            bucket.setdefault(uid, {})[key] = None
        elif uid in bucket:
            bucket[uid].pop(key, None)
            if not bucket[uid]:
                del bucket[uid]

    @staticmethod
    def key_of(obj: Obj) -> Key:
        meta = obj["metadata"]
        return (meta.get("namespace") or "", meta["name"])

    def apply(self, event: str, obj: Obj) -> Obj | None:
        """Record a watch event; returns the previous version of the object (if any)."""
        bucket = self._objs.get(obj.get("kind", ""))
        if bucket is None:
            return None
        kind = obj["kind"]
        key = self.key_of(obj)
        old = bucket.get(key)
        self._index(kind, key, old, add=False)
        spaces = self._by_ns[kind]
        if event == "DELETED":
            bucket.pop(key, None)
            keys = spaces.get(key[0])
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del spaces[key[0]]
        else:
            bucket[key] = obj
            spaces.setdefault(key[0], {})[key] = None
            self._index(kind, key, obj, add=True)
        return old

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        return self._objs[kind].get((namespace or "", name))

    def list(self, kind: str, namespace: str | None = None) -> Iterator[Obj]:
        bucket = self._objs[kind]
        if namespace is None:
            return iter(list(bucket.values()))
        return iter([bucket[k] for k in self._by_ns[kind].get(namespace, ())])

    def owned(self, kind: str, owner: Obj) -> builtins.list[Obj]:
        """Objects of ``kind`` whose controller reference points at ``owner``."""
        keys = self._owned[kind].get(str(owner["metadata"].get("uid", "")), {})
        bucket = self._objs[kind]
        return [bucket[k] for k in keys if k in bucket]

    def snapshot(self) -> dict[str, dict[Key, Obj]]:
        return {k: dict(v) for k, v in self._objs.items()}

    def restore(self, snap: dict[str, dict[Key, Obj]]) -> None:
        self._objs = {k: dict(v) for k, v in snap.items()}
        self._owned = {k: {} for k in WATCHED_KINDS}
        self._by_ns = {k: {} for k in WATCHED_KINDS}
        for kind, bucket in self._objs.items():
            for key, obj in bucket.items():
                self._index(kind, key, obj, add=True)
                self._by_ns[kind].setdefault(key[0], {})[key] = None


@dataclass
class Timers:
    """Requeue-after: (due time, controller, key), earliest first; duplicates collapse."""

    heap: list[tuple[float, int, str, Key]] = field(default_factory=list)
    due: dict[tuple[str, Key], float] = field(default_factory=dict)
    seq: int = 0

    def add(self, controller: str, key: Key, at: float) -> None:
        known = self.due.get((controller, key))
        if known is not None and known <= at:
            return
        self.due[(controller, key)] = at
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, controller, key))

    def next_due(self) -> float | None:
        while self.heap:
            at, _, controller, key = self.heap[0]
            if self.due.get((controller, key)) == at:
                return at
            heapq.heappop(self.heap)
        return None

    def pop_due(self, now: float) -> list[tuple[str, Key]]:
        out = []
        while self.heap and self.heap[0][0] <= now:
            at, _, controller, key = heapq.heappop(self.heap)
            if self.due.get((controller, key)) == at:
                del self.due[(controller, key)]
                out.append((controller, key))
        return out

    def copy(self) -> Timers:
        return Timers(list(self.heap), dict(self.due), self.seq)


class Context:
    """What a controller may use: the store, the cache, the recorder, the time, its queue."""

    def __init__(
        self,
        store: ObjectStore,
        cache: Cache,
        recorder: EventRecorder,
        now: Callable[[], float],
        seed: int = 0,
    ) -> None:
        self.store = store
        self.cache = cache
        self.recorder = recorder
        self.now = now
        self.timers = Timers()
        #: Feeds deterministic generated names (pods, endpoint slices).
        self.name_counter = 0
        #: The cluster's seed: generated names and random choices derive from it (``KubeCluster.reseed``).
        self.seed = seed

    def requeue_at(self, controller: str, key: Key, at: float) -> None:
        self.timers.add(controller, key, at)


class Controller(ABC):
    """A reconciler for one primary kind; subclasses map events to keys and sync a key."""

    name = "controller"

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.queue: dict[Key, None] = {}
        #: failed syncs per key, for the work queue's exponential back-off
        self.retries: dict[Key, int] = {}

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        """Keys of this controller's objects that ``event`` on ``obj`` (previously ``old``) may affect."""
        return ()

    def enqueue(self, key: Key) -> None:
        self.queue[key] = None

    def requeue_at(self, key: Key, at: float) -> None:
        self.ctx.requeue_at(self.name, key, at)

    @abstractmethod
    def sync(self, key: Key) -> None:
        """Bring the object named by ``key`` (and what it owns) to its desired state."""

    def snapshot_state(self) -> Any:
        """A copy of what the controller remembers beyond the store (None: nothing)."""
        return None

    def restore_state(self, state: Any) -> None:
        """Take back what ``snapshot_state`` returned."""
        return None

    def drain(self) -> int:
        n = 0
        while self.queue:
            key = next(iter(self.queue))
            del self.queue[key]
            self.sync_with_retry(key)
            n += 1
        return n

    def sync_with_retry(self, key: Key) -> None:
        """``processNextWorkItem``: a sync the API refused is retried after the queue's back-off
        (``DefaultControllerRateLimiter``: 5 ms doubling to 1000 s) instead of failing the tick."""
        try:
            self.sync(key)
        except ApiError as e:
            n = self.retries.get(key, 0)
            self.retries[key] = n + 1
            log.debug("%s: sync of %s failed (%s); retry %d", self.name, key, e.message, n + 1)
            self.requeue_at(key, self.ctx.now() + min(RETRY_BASE_SECONDS * 2**n, RETRY_MAX_SECONDS))
        else:
            self.retries.pop(key, None)

    # helpers -------------------------------------------------------------------------------

    def owner_key(self, obj: Obj, kind: str) -> Key | None:
        ref = controller_of(obj)
        if ref is None or ref.get("kind") != kind:
            return None
        return (obj["metadata"].get("namespace") or "", ref.get("name", ""))

    def remove_finalizer(self, obj: Obj, finalizer: str) -> None:
        """Store ``obj`` without ``finalizer`` (its last: the store ends the deletion). Gone or changed
        meanwhile (404, 409) is no failure: that change's event syncs the object again."""
        freed = clone(obj)
        freed["metadata"]["finalizers"] = [f for f in freed["metadata"].get("finalizers") or [] if f != finalizer]
        try:
            self.ctx.store.update(freed)
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    def write_status(self, obj: Obj, status: Obj) -> Obj | None:
        """Store ``status`` when it differs from what the object has: the object as stored (read-only,
        like the cache's), or None if it is gone."""
        if obj.get("status") == status:
            return obj
        new = dict(obj)
        new["status"] = status
        try:
            return self.ctx.store.update(new, subresource="status", copy_result=False)
        except ApiError as e:
            if e.code in (404, 409) or is_storage_error(e):
                return None  # gone, raced, or the store is full: the next sync writes it again
            raise


class NamespaceController(Controller):
    """A controller keyed by namespace (``("", name)``): every namespace at start (the informer's
    initial list: namespaces made before it ran), each namespace added or changed, and the namespace
    of an object for which :meth:`resyncs` says so."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        for namespace in ctx.store.namespaces():
            self.enqueue(("", namespace))

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj.get("metadata") or {}
        if kind == "Namespace" and event != "DELETED":
            return [("", str(meta.get("name", "")))]
        if kind != "Namespace" and self.resyncs(event, kind, meta):
            return [("", str(meta.get("namespace", "")))]
        return []

    def resyncs(self, event: str, kind: str, meta: Obj) -> bool:
        """Whether ``event`` on an object of ``kind`` (its metadata ``meta``) sends its namespace to sync."""
        return False
