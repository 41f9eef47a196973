"""Trace search and the trace store's catalogue (services, operations, dependencies) over the ticks.

Search follows Jaeger's span stores: a trace matches when one of its spans belongs to the service,
has the operation name, started in the window, lasted within [minDuration, maxDuration] and carries
every tag (in its span tags, its process tags or its log fields); results are the most recent
traces first. Ticks are scanned newest first and a root operation is skipped when its traces
cannot contain the service or operation asked for (or, for ``error=true``, when nothing it calls
could fail in that tick), which keeps queries over an hour of history fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from itbench_gym.backends.sim.app.spec import AppSpec

from .jaeger_json import as_string, process_tags, span_tags
from .record import TraceTick
from .synth import Span, Trace, TraceSynth

#: How long after its root a span of a trace may start (ticks this far before the window are scanned too).
_SPAN_SLACK_SECONDS = 60.0
#: Most candidate traces one search generates and filters.
MAX_CANDIDATES = 6000


@dataclass(frozen=True)
class TraceQuery:
    service: str
    start: float
    end: float
    limit: int
    operation: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    min_duration: float = 0.0
    max_duration: float = 0.0


def _span_matches(spec: AppSpec, span: Span, q: TraceQuery) -> bool:
    if span.service != q.service or (q.operation and span.name != q.operation):
        return False
    if not q.start <= span.start <= q.end:
        return False
    if (q.min_duration and span.duration < q.min_duration) or (q.max_duration and span.duration > q.max_duration):
        return False
    if not q.tags:
        return True
    found: dict[str, set[str]] = {}
    sources = [span_tags(span), process_tags(spec, span.service, span.pod)] + [fields for _, fields in span.events]
    for kvs in sources:
        for k, v in kvs:
            if k in q.tags:
                found.setdefault(k, set()).add(as_string(v))
    return all(v in found.get(k, ()) for k, v in q.tags.items())


def find_traces(synth: TraceSynth, ticks: Sequence[TraceTick], q: TraceQuery) -> list[Trace]:
    """The ``q.limit`` most recent traces matching ``q`` among at most ``MAX_CANDIDATES`` scanned.

    When the window holds more traces than that, every (tick, root) contributes the same share of
    its traces (a prefix, which is a uniform sample because trace ``i`` does not depend on the others).
    """
    roots = [i for i, root in enumerate(synth.roots)
             if any(svc == q.service and (not q.operation or name == q.operation) for svc, name in synth.span_names[root])]
    wants_error = q.tags.get("error") == "true"
    plan: list[tuple[TraceTick, int, int]] = []
    for tick in reversed(ticks):
        if tick.t <= q.start - _SPAN_SLACK_SECONDS:
            break
        if tick.t - tick.dt > q.end:
            continue
        for i in roots:
            if wants_error and not synth.may_fail(tick, i):
                continue
            n = synth.count(tick, i)
            if n:
                plan.append((tick, i, n))
    total = sum(n for _, _, n in plan)
    share = min(1.0, MAX_CANDIDATES / total) if total else 1.0
    found: list[Trace] = []
    for k, (tick, i, n) in enumerate(plan):
        for trace in synth.batch(tick, i, max(1, math.ceil(n * share))):
            if any(_span_matches(synth.spec, s, q) for s in trace.spans):
                found.append(trace)
        last_of_tick = k + 1 == len(plan) or plan[k + 1][0] is not tick
        if last_of_tick and len(found) >= q.limit and tick.t - tick.dt <= q.end:
            break
    found.sort(key=lambda tr: (-tr.start, tr.trace_id))
    return found[: q.limit]


def find_trace(synth: TraceSynth, ticks: Sequence[TraceTick], trace_id: int) -> Trace | None:
    where = synth.decode_id(trace_id)
    if where is None:
        return None
    t, root_index, i = where
    tick = _tick_at(ticks, t)
    return synth.trace(tick, root_index, i) if tick is not None else None


def _tick_at(ticks: Sequence[TraceTick], t: float) -> TraceTick | None:
    lo, hi = 0, len(ticks)
    while lo < hi:
        mid = (lo + hi) // 2
        if ticks[mid].t < t - 1e-4:
            lo = mid + 1
        else:
            hi = mid
    return ticks[lo] if lo < len(ticks) and abs(ticks[lo].t - t) < 1e-3 else None


def operations(spec: AppSpec, ticks: Sequence[TraceTick], synth: TraceSynth | None = None) -> dict[str, set[tuple[str, str]]]:
    """service -> {(span name, span kind)} of every span the store has received (with ``synth``,
    also the spans of the flag evaluations that asked flagd)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for tick in ticks:
        for (svc, op_id), rate in tick.rates.items():
            service = spec.services.get(svc)
            if rate <= 0 or service is None or not service.traced or svc not in tick.pods:
                continue
            op = spec.op(svc, op_id)
            names = out.setdefault(svc, set())
            names.add((op.span, op.kind.lower()))
            names.update((n, "internal") for n in op.internal_spans)
            for c in op.calls:
                ok, err = tick.client.get((svc, op_id, c.id), (0.0, 0.0))
                if ok + err > 0 and c.client_span:
                    names.add((c.client_span, c.client_kind.lower()))
            if synth is not None and tick.flags is not None:
                for who, name, kind, _ in synth.flagd_calls(svc, op_id):
                    if who == svc or who in tick.pods:
                        out.setdefault(who, set()).add((name, kind))
    return out


def dependencies(synth: TraceSynth, ticks: Sequence[TraceTick], start: float, end: float) -> list[tuple[str, str, int]]:
    """(parent, child, call count) for spans whose parent span is in another service, as Jaeger's
    dependency store derives them, counted from the flow of the ticks ending in (start, end]."""
    spec = synth.spec
    flagd = synth.catalog.flagd.service if synth.catalog.flagd is not None else None
    counts: dict[tuple[str, str], float] = {}
    for tick in ticks:
        if not start < tick.t <= end:
            continue
        for key, rate in tick.rates.items():
            svc, op_id = key
            if rate <= 0 or not spec.services[svc].traced or svc not in tick.pods:
                continue
            stats = tick.stats.get(key)
            if tick.flags is not None and flagd is not None and flagd in tick.pods and spec.services[flagd].traced:
                asks = sum(n for service, _, kind, n in synth.flagd_calls(svc, op_id) if service == svc and kind == "client")
                if asks and svc != flagd:
                    counts[(svc, flagd)] = counts.get((svc, flagd), 0.0) + rate * asks * tick.dt
            for co in stats.calls if stats else ():
                callee = co.call.service
                reached = rate * co.frac * co.count * co.reach.ok_share * tick.dt
                if callee != svc and spec.services[callee].traced and reached > 0:
                    counts[(svc, callee)] = counts.get((svc, callee), 0.0) + reached
        for topic in spec.topics.values():
            for cons in topic.consumers:
                consumed = tick.rates.get((cons.service, cons.operation), 0.0) * tick.dt
                if consumed > 0 and spec.services[topic.producer_service].traced and spec.services[cons.service].traced:
                    edge = (topic.producer_service, cons.service)
                    counts[edge] = counts.get(edge, 0.0) + consumed
    return sorted((p, c, int(round(n))) for (p, c), n in counts.items() if round(n) > 0)
