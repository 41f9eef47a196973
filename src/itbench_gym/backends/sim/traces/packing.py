"""Recorded ticks kept as pickles: two bytes objects a tick instead of several hundred small objects.

CPython's cyclic garbage collector scans every container object the process holds each time it
collects its oldest generation. A tick's recorded flow (``record.py``: per-operation statistics, call
outcomes, latency moments, reachability) is ~500 such objects, and an incident keeps every tick of
its history, so the records of a few incidents were most of what each full collection scanned (~0.4 s
a collection; ~10 % of a new seed's reset). A bytes object is not tracked at all, nor (after the first
collection that sees it) a tuple of them.

The spec's operations and calls a record refers to are pickled as references (:class:`SpecRef`) and
resolved against the spec when the tick is unpacked, so an unpacked tick shares the spec's objects as
the recorded one did. Unpacked ticks are kept (a bounded number): traces are synthesised from the same
ticks query after query.

A tick's per-operation statistics are most of its pickle, and a steady cluster's flow solver hands out
the same statistics object tick after tick (``FlowSolver.stats``; nobody modifies it), so from the
second tick of one statistics object on they are pickled apart, once, and those ticks share the bytes.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections import OrderedDict
from dataclasses import fields
from typing import Any, NamedTuple

from itbench_gym.backends.sim.app.spec import AppSpec, Call, Operation

from .record import TraceTick

#: Unpacked ticks a packer keeps (an episode's worth and more).
UNPACKED_KEPT = 2048

#: A packed tick: the whole tick and b"", or its fields but the statistics and its statistics (bytes
#: shared between the ticks of one statistics object).
PackedTick = tuple[bytes, bytes]
_FIELDS = tuple(f.name for f in fields(TraceTick) if f.name != "stats")


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
        self._unpacked: OrderedDict[int, tuple[PackedTick, TraceTick]] = OrderedDict()
        #: the last statistics packed and unpacked, with their bytes
        self._packed_stats: tuple[object, bytes | None] | None = None
        self._unpacked_stats: tuple[bytes, Any] | None = None

    def pack(self, tick: TraceTick) -> PackedTick:
        """The tick whole while its statistics are new (one pickle shares what the fields have in
        common), its other fields apart once a second tick brings the same statistics object."""
        last = self._packed_stats
        if last is None or last[0] is not tick.stats:
            self._packed_stats = (tick.stats, None)
            return self._dumps(tick), b""
        stats_blob = last[1]
        if stats_blob is None:
            stats_blob = self._dumps(tick.stats)
            self._packed_stats = (tick.stats, stats_blob)
        return self._dumps(tuple(getattr(tick, name) for name in _FIELDS)), stats_blob

    def unpack(self, packed: PackedTick) -> TraceTick:
        kept = self._unpacked.get(id(packed))
        if kept is not None and kept[0] is packed:
            self._unpacked.move_to_end(id(packed))
            return kept[1]
        tick = self._unpacked_tick(*packed)
        self._unpacked[id(packed)] = (packed, tick)
        while len(self._unpacked) > UNPACKED_KEPT:
            self._unpacked.popitem(last=False)
        return tick

    def _unpacked_tick(self, blob: bytes, stats_blob: bytes) -> TraceTick:
        if not stats_blob:
            whole = self._loads(blob)
            if not isinstance(whole, TraceTick):
                raise TypeError(f"a packed tick holds a {type(whole).__name__}")
            return whole
        last = self._unpacked_stats
        if last is None or last[0] is not stats_blob:
            last = self._unpacked_stats = (stats_blob, self._loads(stats_blob))
        values = self._loads(blob)
        if not isinstance(values, tuple) or len(values) != len(_FIELDS) or not isinstance(last[1], dict):
            raise TypeError("a packed tick holds something else than a tick's fields and statistics")
        return TraceTick(**dict(zip(_FIELDS, values, strict=True)), stats=last[1])

    def _dumps(self, obj: object) -> bytes:
        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = self._table
        pickler.dump(obj)
        return out.getvalue()

    def _loads(self, blob: bytes) -> Any:
        return _Unpickler(io.BytesIO(blob), self.spec).load()

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
