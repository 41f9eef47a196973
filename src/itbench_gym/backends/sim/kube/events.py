"""core/v1 Events as the real components emit them.

Agents read ``kubectl get events`` and the Events section of ``kubectl describe``; both rely on
real reasons, messages, sources and on repeated occurrences being folded into one Event with a
growing ``count`` (client-go's EventCorrelator), not on a flood of identical objects. Like the
correlator's aggregator, once one source reports ten different messages with the same reason
about one object within ten minutes, further ones fold into a single
``(combined from similar events): ...`` Event, so a ReplicaSet creating a million pods leaves ten
``SuccessfulCreate`` Events, not a million. Events expire an hour after their last occurrence,
like the API server's event TTL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.lang.timestamps import rfc3339

from .errors import ApiError
from .store import ObjectStore

Obj = dict[str, Any]

#: The API server's default ``--event-ttl``.
EVENT_TTL_SECONDS = 3600.0
#: client-go ``tools/record/events_cache.go``: ``defaultAggregateMaxEvents`` distinct messages within
#: ``defaultAggregateIntervalInSeconds`` turn into one combined Event.
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL_SECONDS = 600.0
AGGREGATE_PREFIX = "(combined from similar events): "

_Key = tuple[str, str, str, str, str, str, str, str]
_AggregateKey = tuple[str, str, str, str, str, str, str, str, str]


@dataclass
class EventState:
    #: correlation key -> (namespace, event name, last occurrence)
    index: dict[_Key, tuple[str, str, float]] = field(default_factory=dict)
    seq: int = 0
    #: aggregation key (source, object, type, reason) -> (last occurrence, distinct messages, oldest first)
    similar: dict[_AggregateKey, tuple[float, dict[str, None]]] = field(default_factory=dict)
    #: Lower bounds of the last occurrences in ``index`` / ``similar`` (every record lowers them if
    #: need be), so ``expire`` scans them only when something may have aged out, not every tick.
    index_floor: float = float("-inf")
    similar_floor: float = float("-inf")

    def copy(self) -> EventState:
        """A copy that later records leave alone (the message sets are changed in place)."""
        return EventState(dict(self.index), self.seq, {k: (t, dict(m)) for k, (t, m) in self.similar.items()},
                          self.index_floor, self.similar_floor)


class EventRecorder:
    """Records, deduplicates and expires Events in the object store."""

    def __init__(self, store: ObjectStore, now: Callable[[], float]) -> None:
        self._store = store
        self._now = now
        self._state = EventState()

    def record(
        self,
        involved: Obj,
        type_: str,
        reason: str,
        message: str,
        *,
        component: str,
        host: str | None = None,
        field_path: str | None = None,
        count: int = 1,
    ) -> None:
        """One occurrence (or ``count`` occurrences) of ``reason`` on ``involved``."""
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        now = self._now()
        key: _Key = (
            component, host or "", involved.get("kind", ""), namespace, meta.get("name", ""),
            meta.get("uid", ""), type_, reason + "\x00" + message + "\x00" + (field_path or ""),
        )
        aggregate: _AggregateKey = (component, host or "", involved.get("kind", ""), namespace, meta.get("name", ""),
                                    meta.get("uid", ""), involved.get("apiVersion", "v1"), type_, reason)
        last, messages = self._state.similar.get(aggregate, (float("-inf"), {}))
        if now - last > AGGREGATE_INTERVAL_SECONDS:
            messages = {}
        messages[message] = None
        self._state.similar[aggregate] = (now, messages)
        self._state.similar_floor = min(self._state.similar_floor, now)
        if len(messages) >= AGGREGATE_MAX_EVENTS:
            del messages[next(iter(messages))]  # upstream drops one (any) to stay below the threshold
            message = AGGREGATE_PREFIX + message
            key = (*key[:7], reason + "\x00" + AGGREGATE_PREFIX)
        known = self._state.index.get(key)
        if known is not None and self._bump(known[0], known[1], now, count, message):
            self._state.index[key] = (known[0], known[1], now)
            self._state.index_floor = min(self._state.index_floor, now)
            return
        ref: Obj = {
            "apiVersion": involved.get("apiVersion", "v1"),
            "kind": involved.get("kind", ""),
            "name": meta.get("name", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if meta.get("namespace"):
            ref["namespace"] = meta["namespace"]
        if field_path:
            ref["fieldPath"] = field_path
        source: Obj = {"component": component}
        if host:
            source["host"] = host
        self._state.seq += 1
        name = f"{meta.get('name', 'event')}.{int(now * 1e9) + self._state.seq:x}"
        event: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": rfc3339(now),
            "lastTimestamp": rfc3339(now),
            "count": count,
            "type": type_,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host or "",
        }
        try:
            self._store.create(event)
        except ApiError:
            return  # the namespace is being deleted: the real recorder drops the event too
        self._state.index[key] = (namespace, name, now)
        self._state.index_floor = min(self._state.index_floor, now)

    def _bump(self, namespace: str, name: str, now: float, count: int, message: str) -> bool:
        try:
            event = self._store.get("Event", namespace, name)
        except ApiError:
            return False
        event["count"] = int(event.get("count") or 1) + count
        event["lastTimestamp"] = rfc3339(now)
        event["message"] = message  # a combined Event shows the latest of the similar messages
        try:
            self._store.update(event)
        except ApiError:
            return False
        return True

    def expire(self) -> None:
        """Delete Events whose last occurrence is older than the TTL."""
        now = self._now()
        state = self._state
        if now - state.similar_floor > AGGREGATE_INTERVAL_SECONDS:
            state.similar = {k: v for k, v in state.similar.items() if now - v[0] <= AGGREGATE_INTERVAL_SECONDS}
            state.similar_floor = min((v[0] for v in state.similar.values()), default=now)
        cutoff = now - EVENT_TTL_SECONDS
        if state.index_floor >= cutoff:
            return
        stale = [k for k, (_, _, last) in state.index.items() if last < cutoff]
        for key in stale:
            namespace, name, _ = state.index.pop(key)
            try:
                self._store.delete("Event", namespace, name)
            except ApiError:
                pass
        state.index_floor = min((last for _, _, last in state.index.values()), default=now)

    def snapshot(self) -> EventState:
        return self._state.copy()

    def restore(self, snap: EventState) -> None:
        self._state = snap.copy()
