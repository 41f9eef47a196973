"""Recorded ticks kept as pickles: one bytes object a tick instead of several hundred small objects.

CPython's cyclic garbage collector scans every container object the process holds each time it
collects its oldest generation. A tick's recorded flow (``record.py``: per-operation statistics, call
outcomes, latency moments, reachability) is ~500 such objects, and an incident keeps every tick of
its history, so the records of a few incidents were most of what each full collection scanned (~0.4 s
a collection; ~10 % of a new seed's reset). A bytes object is not tracked at all.

The spec's operations and calls a record refers to are pickled as references (:class:`SpecRef`) and
resolved against the spec when the tick is unpacked, so an unpacked tick shares the spec's objects as
the recorded one did. Unpacked ticks are kept (a bounded number): traces are synthesised from the same
ticks query after query.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections import OrderedDict
from typing import Any, NamedTuple

from itbench_gym.backends.sim.app.spec import AppSpec, Call, Operation

from .record import TraceTick

#: Unpacked ticks a packer keeps (an episode's worth and more).
UNPACKED_KEPT = 2048


class SpecRef(NamedTuple):
    """An operation of the app's spec (``call`` None) or one of its calls."""

    service: str
    operation: str
    call: str | None


class TickPacker:
    """Packs the ticks of one app's model and unpacks them against its spec."""

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        #: the spec's own operations and calls by identity, with their references
        self._refs: dict[int, tuple[object, SpecRef]] = {}
        for svc in spec.services.values():
            for op in svc.operations.values():
                self._refs[id(op)] = (op, SpecRef(op.service, op.id, None))
                for c in op.calls:
                    self._refs[id(c)] = (c, SpecRef(svc.name, op.id, c.id))
        self._table = copyreg.dispatch_table.copy()
        self._table[Operation] = self._table[Call] = self._reduce
        self._unpacked: OrderedDict[int, tuple[bytes, TraceTick]] = OrderedDict()

    def pack(self, tick: TraceTick) -> bytes:
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = self._table
        pickler.dump(tick)
        return out.getvalue()

    def unpack(self, blob: bytes) -> TraceTick:
        kept = self._unpacked.get(id(blob))
        if kept is not None and kept[0] is blob:
            self._unpacked.move_to_end(id(blob))
            return kept[1]
        tick = _Unpickler(io.BytesIO(blob), self.spec).load()
        if not isinstance(tick, TraceTick):
            raise TypeError(f"a packed tick holds a {type(tick).__name__}")
        self._unpacked[id(blob)] = (blob, tick)
        while len(self._unpacked) > UNPACKED_KEPT:
            self._unpacked.popitem(last=False)
        return tick

    def _reduce(self, obj: Operation | Call) -> Any:
        known = self._refs.get(id(obj))
        if known is not None and known[0] is obj:
            return SpecRef, tuple(known[1])
        return obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)  # not the spec's own: by value


def _spec_object(spec: AppSpec, ref: SpecRef) -> Operation | Call | None:
    """The operation or call ``ref`` names in ``spec`` (None when the spec has no such thing)."""
    svc = spec.services.get(ref.service)
    op = svc.operations.get(ref.operation) if svc is not None else None
    if op is None or ref.call is None:
        return op
    return next((c for c in op.calls if c.id == ref.call), None)


class _Unpickler(pickle.Unpickler):
    """Loads a packed tick, turning each :class:`SpecRef` into the spec's object."""

    def __init__(self, file: io.BytesIO, spec: AppSpec) -> None:
        super().__init__(file)
        self._spec = spec

    def find_class(self, module: str, name: str) -> Any:
        if module == SpecRef.__module__ and name == SpecRef.__qualname__:
            return self._resolve
        return super().find_class(module, name)

    def _resolve(self, service: str, operation: str, call: str | None) -> Operation | Call:
        found = _spec_object(self._spec, SpecRef(service, operation, call))
        if found is None:
            raise pickle.UnpicklingError(f"the app's spec has no {'/'.join(p for p in (service, operation, call) if p)}")
        return found
