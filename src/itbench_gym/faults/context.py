"""What a fault operation works with: the admin API, the app's facts, the clock, and a journal.

Every change an operation makes goes through :class:`FaultContext` (``create``, ``patch``,
``replace``, ``delete``), which records the object as it was before the first change. Removing the
faults (:func:`itbench_gym.faults.remove_faults`) replays that journal backwards — delete what was
created, put back what was changed or deleted — so removal is the same Kubernetes API calls on the
twin and on a real cluster, for every fault, without per-fault undo code.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.spec.appfacts import AppFacts

Obj = dict[str, Any]

#: Patch types an operation may send (the ``Content-Type`` of each).
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}
#: Metadata the API server owns; a restored object is sent without it.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink",
                    "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    namespace: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind} {where}{self.name}"


@dataclass(frozen=True)
class Change:
    """One object an injection touched: ``before`` is None when the injection created it."""

    ref: ObjectRef
    before: Obj | None


@dataclass
class FaultContext:
    """The harness side of an injection (never the agent's): admin API, app facts, clock, seed."""

    api: client.ApiClient
    app: AppFacts
    now: Callable[[], float]
    #: Lets time pass (the twin's clock jumps; a real cluster's wall clock sleeps).
    advance: Callable[[float], None]
    seed: int = 0
    journal: list[Change] = field(default_factory=list)
    #: When the first fault (not a waiter) was applied; None until then.
    injected_at: float | None = None
    #: Where discovery is cached: the cluster's own file (one per backend, so a reset does not discover
    #: again; a kind it lacks is looked up afresh), or None for a file of this context's own.
    discovery_cache: Path | None = None
    _dynamic: dynamic.DynamicClient | None = field(default=None, repr=False)

    _cache_dir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def resource(self, api_version: str, kind: str) -> Any:
        if self._dynamic is None:
            cache_file = self.discovery_cache
            if cache_file is None:
                self._cache_dir = tempfile.TemporaryDirectory(prefix="itbench-gym-discovery-")
                cache_file = Path(self._cache_dir.name) / "discovery.json"
            self._dynamic = dynamic.DynamicClient(self.api, cache_file=str(cache_file))
        try:
            return self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            raise FaultError(f"the cluster serves no {kind} in {api_version}") from None

    def close(self) -> None:
        """Forget discovery (the API client belongs to whoever made the context)."""
        if self._cache_dir is not None:
            self._cache_dir.cleanup()
            self._cache_dir = None
        self._dynamic = None

    def get(self, ref: ObjectRef) -> Obj | None:
        """The object as plain JSON, or None when it does not exist."""
        try:
            found = self.resource(ref.api_version, ref.kind).get(name=ref.name, namespace=ref.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise FaultError(f"cannot read {ref}: {exc.reason}") from None
        return dict(found.to_dict())

    def require(self, ref: ObjectRef) -> Obj:
        obj = self.get(ref)
        if obj is None:
            raise FaultError(f"{ref} does not exist")
        return obj

    def create(self, obj: Mapping[str, Any]) -> Obj:
        ref = ObjectRef.of(obj)
        try:
            made = self.resource(ref.api_version, ref.kind).create(body=dict(obj), namespace=ref.namespace)
        except ApiException as exc:
            raise FaultError(f"cannot create {ref}: {exc.reason}: {_message(exc)}") from None
        self._record(ref, None)
        return dict(made.to_dict())

    def patch(self, ref: ObjectRef, body: Any, patch_type: str = "strategic", *, record: bool = True) -> Obj:
        """``record=False`` for a waiter's edit (a restart, a scale): removal does not revert those."""
        before = self.require(ref)
        try:
            done = self.resource(ref.api_version, ref.kind).patch(
                name=ref.name, namespace=ref.namespace, body=body, content_type=PATCH_TYPES[patch_type])
        except ApiException as exc:
            raise FaultError(f"cannot patch {ref}: {exc.reason}: {_message(exc)}") from None
        if record:
            self._record(ref, before)
        return dict(done.to_dict())

    def replace(self, obj: Mapping[str, Any]) -> Obj:
        ref = ObjectRef.of(obj)
        before = self.require(ref)
        try:
            done = self.resource(ref.api_version, ref.kind).replace(body=dict(obj), namespace=ref.namespace)
        except ApiException as exc:
            raise FaultError(f"cannot replace {ref}: {exc.reason}: {_message(exc)}") from None
        self._record(ref, before)
        return dict(done.to_dict())

    def delete(self, ref: ObjectRef) -> None:
        before = self.require(ref)
        try:
            self.resource(ref.api_version, ref.kind).delete(name=ref.name, namespace=ref.namespace)
        except ApiException as exc:
            raise FaultError(f"cannot delete {ref}: {exc.reason}: {_message(exc)}") from None
        self._record(ref, before)

    def wait_for(self, done: Callable[[], bool], timeout: float, interval: float = 5.0) -> bool:
        """Let time pass until ``done()`` holds or ``timeout`` seconds went by; whether it held."""
        deadline = self.now() + timeout
        while not done():
            if self.now() >= deadline:
                return False
            self.advance(min(interval, deadline - self.now()))
        return True

    def _record(self, ref: ObjectRef, before: Obj | None) -> None:
        """Keep the state before the *first* change: that is what removal restores."""
        if not any(change.ref == ref for change in self.journal):
            self.journal.append(Change(ref, copy.deepcopy(before)))

    def undo(self) -> list[str]:
        """Revert the journal, newest change first; returns what was done (a harness-side log)."""
        log = []
        for change in reversed(self.journal):
            current = self.get(change.ref)
            resource = self.resource(change.ref.api_version, change.ref.kind)
            try:
                if change.before is None:
                    if current is not None:
                        resource.delete(name=change.ref.name, namespace=change.ref.namespace)
                        log.append(f"deleted {change.ref}")
                elif current is None:
                    resource.create(body=restorable(change.before), namespace=change.ref.namespace)
                    log.append(f"recreated {change.ref}")
                else:
                    body = restorable(change.before)
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    resource.replace(body=body, namespace=change.ref.namespace)
                    log.append(f"restored {change.ref}")
            except ApiException as exc:
                raise FaultError(f"cannot restore {change.ref}: {exc.reason}: {_message(exc)}") from None
        self.journal.clear()
        return log


def restorable(obj: Mapping[str, Any]) -> Obj:
    """``obj`` as a client sends it to create or replace it: no status, no server-owned metadata."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in _SERVER_METADATA:
        meta.pop(key, None)
    return out


def _message(exc: ApiException) -> str:
    """The Status message the server sent, else its raw body."""
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.body)
    except ValueError:
        return str(exc.body)
