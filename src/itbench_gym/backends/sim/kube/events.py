"""core/v1 Events as the real components emit them.

Agents read ``kubectl get events`` and the Events section of ``kubectl describe``; both rely on
real reasons, messages, sources and on repeated occurrences being folded into one Event with a
growing ``count`` (client-go's EventCorrelator), not on a flood of identical objects. Events
expire an hour after their last occurrence, like the API server's event TTL.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable

from .controllers.util import rfc3339
from .errors import ApiError
from .store import ObjectStore

Obj = dict[str, Any]

#: The API server's default ``--event-ttl``.
EVENT_TTL_SECONDS = 3600.0

_Key = tuple[str, str, str, str, str, str, str, str]


@dataclass
class EventState:
    #: correlation key -> (namespace, event name, last occurrence)
    index: dict[_Key, tuple[str, str, float]] = field(default_factory=dict)
    seq: int = 0


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
        known = self._state.index.get(key)
        if known is not None and self._bump(known[0], known[1], now, count):
            self._state.index[key] = (known[0], known[1], now)
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

    def _bump(self, namespace: str, name: str, now: float, count: int) -> bool:
        try:
            event = self._store.get("Event", namespace, name)
        except ApiError:
            return False
        event["count"] = int(event.get("count") or 1) + count
        event["lastTimestamp"] = rfc3339(now)
        try:
            self._store.update(event)
        except ApiError:
            return False
        return True

    def expire(self) -> None:
        """Delete Events whose last occurrence is older than the TTL."""
        cutoff = self._now() - EVENT_TTL_SECONDS
        stale = [k for k, (_, _, last) in self._state.index.items() if last < cutoff]
        for key in stale:
            namespace, name, _ = self._state.index.pop(key)
            try:
                self._store.delete("Event", namespace, name)
            except ApiError:
                pass

    def snapshot(self) -> EventState:
        return copy.deepcopy(self._state)

    def restore(self, snap: EventState) -> None:
        self._state = copy.deepcopy(snap)
