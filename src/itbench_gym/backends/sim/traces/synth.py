"""Individual traces, synthesised on demand from a tick's solved request flow.

The fluid model knows, per tick, how often each operation runs, how likely each call is to fail
(unreachable target, chaos, the callee's own errors) and how long operations take. A trace replays
one request through the same call graph with those numbers: the callee's span is drawn first and
the caller's duration is its own time plus its calls, failures short-circuit the calls after them
exactly where the model's error policy does, so sampled traces agree with the span metrics.

Determinism: the number of traces of a root operation in a tick is a Poisson draw keyed by
(seed, tick, root); trace ``i`` reads row ``i`` of a uniform stream keyed the same way, so it does
not depend on how many traces the tick has. The trace id encodes (tick, root, i) under a keyed
mask, which makes ``/api/traces/{id}`` a direct lookup.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from itbench_gym.backends.sim.app.flow import NETWORK_HOP_S, CallOutcome, Moments, OpKey, lognormal
from itbench_gym.backends.sim.app.network import CAUSES
from itbench_gym.backends.sim.app.spec import AppSpec, Consumer

from .record import PodRef, TraceTick

#: Most candidate traces kept per tick and root operation; above it a tick is represented by a sample.
CAP_PER_TICK = 200
#: Uniform draws reserved per trace; a larger trace continues on a keyed overflow stream.
_SLOTS = 256
_PAYLOAD_BITS = 72
_HTTP = re.compile(r"(?:^|\s)(GET|POST|PUT|PATCH|DELETE|HEAD) (/\S*)$")
_GRPC = re.compile(r"^/?([\w.]+)/(\w+)$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
GRPC_CODES = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10,
    "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16,
}
#: Database system by well-known port, for client spans to uninstrumented stores.
_DB_PORTS = {6379: "redis", 5432: "postgresql", 3306: "mysql", 27017: "mongodb", 9042: "cassandra"}
#: Exception type the language's OpenTelemetry SDK records for a failed request.
_EXCEPTION_TYPES = {
    "typescript": "Error", "javascript": "Error", "python": "grpc.RpcError", "java": "io.grpc.StatusRuntimeException",
    "kotlin": "io.grpc.StatusRuntimeException", "csharp": "Grpc.Core.RpcException", "ruby": "StandardError",
    "php": "Exception", "go": "*status.Error", "rust": "tonic::Status", "cpp": "grpc::Status",
}


@dataclass(slots=True)
class Span:
    span_id: int
    parent_id: int
    service: str
    pod: PodRef | None
    name: str
    kind: str
    start: float
    duration: float = 0.0
    error: bool = False
    status_message: str = ""
    attrs: list[tuple[str, Any]] = field(default_factory=list)
    events: list[tuple[float, list[tuple[str, Any]]]] = field(default_factory=list)


@dataclass(slots=True)
class Trace:
    trace_id: int
    root: OpKey
    spans: list[Span]

    @property
    def hex_id(self) -> str:
        return f"{self.trace_id:032x}"

    @property
    def start(self) -> float:
        return self.spans[0].start

    @property
    def duration(self) -> float:
        return max(s.start + s.duration for s in self.spans) - self.spans[0].start

    @property
    def error(self) -> bool:
        return any(s.error for s in self.spans)


@dataclass(frozen=True)
class _Outcome:
    duration: float
    error: bool = False
    code: str = "OK"
    text: str = ""
    http_status: int = 200


class _Draws:
    """The uniform stream of one trace."""

    __slots__ = ("_u", "_i", "_key")

    def __init__(self, row: list[float], key: list[int]) -> None:
        self._u = row
        self._i = 0
        self._key = key

    def u(self) -> float:
        if self._i >= len(self._u):
            self._u += np.random.default_rng(self._key + [len(self._u)]).random(_SLOTS).tolist()
        v = self._u[self._i]
        self._i += 1
        return v

    def normal(self) -> float:
        return math.sqrt(-2.0 * math.log(1.0 - self.u())) * math.cos(2.0 * math.pi * self.u())

    def sample(self, m: Moments) -> float:
        """A lognormal draw with these moments, as the span-metrics histograms assume."""
        mean = max(m.mean, 1e-9)
        s2 = math.log1p(max(m.var, 0.0) / (mean * mean))
        return math.exp(math.log(mean) - s2 / 2 + math.sqrt(s2) * self.normal())

    def pick(self, items: Sequence[Any]) -> Any:
        return items[min(int(self.u() * len(items)), len(items) - 1)] if items else None


def product_ids(manifests: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """Product ids of the catalogue the shop serves (a ConfigMap's ``products.json``), for URLs."""
    out: list[str] = []
    for obj in manifests:
        if obj.get("kind") != "ConfigMap":
            continue
        for key, text in (obj.get("data") or {}).items():
            if not key.endswith("products.json"):
                continue
            try:
                doc = json.loads(text)
            except (TypeError, json.JSONDecodeError):
                continue
            out += [str(p["id"]) for p in doc.get("products", []) if isinstance(p, dict) and "id" in p]
    return tuple(out)


def _split_target(target: str) -> tuple[str, int | None]:
    host, _, port = target.partition(":")
    return host, int(port) if port.isdigit() else None


class TraceSynth:
    """Traces of one app model (spec + seed) from its recorded ticks."""

    def __init__(self, spec: AppSpec, seed: int, products: Sequence[str] = ()) -> None:
        self.spec = spec
        self.seed = seed
        self.products = tuple(products)
        self.roots: tuple[OpKey, ...] = tuple(dict.fromkeys((spec.load_service, t.operation) for t in spec.tasks))
        self._root_keys = [zlib.crc32("/".join(r).encode()) for r in self.roots]
        self.consumers: dict[OpKey, tuple[tuple[str, Consumer], ...]] = {}
        self.topic_of: dict[OpKey, str] = {}
        for topic in spec.topics.values():
            self.consumers[topic.producer_call_to] = tuple((topic.name, c) for c in topic.consumers)
            self.topic_of[topic.producer_call_to] = topic.name
            self.topic_of.update(((c.service, c.operation), topic.name) for c in topic.consumers)
        self.reachable: dict[OpKey, frozenset[OpKey]] = {r: self._reach(r) for r in self.roots}
        self.span_names: dict[OpKey, frozenset[tuple[str, str]]] = {r: self._names(r) for r in self.roots}
        self._secret = hashlib.blake2b(f"itbench-gym-traces/{seed}".encode(), digest_size=16).digest()

    # -- the call graph, statically ---------------------------------------------------------------

    def _reach(self, root: OpKey) -> frozenset[OpKey]:
        seen: set[OpKey] = set()
        todo = [root]
        while todo:
            key = todo.pop()
            if key in seen:
                continue
            seen.add(key)
            for c in self.spec.op(*key).calls:
                todo.append((c.service, c.operation))
                todo += [(cons.service, cons.operation) for _, cons in self.consumers.get((c.service, c.operation), ())]
        return frozenset(seen)

    def _names(self, root: OpKey) -> frozenset[tuple[str, str]]:
        """(service, span name) pairs a trace of ``root`` can contain."""
        out: set[tuple[str, str]] = set()
        for svc, op_id in self.reachable[root]:
            if not self.spec.services[svc].traced:
                continue
            op = self.spec.op(svc, op_id)
            out.add((svc, op.span))
            out.update((svc, n) for n in op.internal_spans)
            out.update((svc, c.client_span) for c in op.calls)
        return frozenset(out)

    def may_fail(self, tick: TraceTick, root_index: int) -> bool:
        """Whether any span of this root's traces in this tick can carry an error."""
        for key in self.reachable[self.roots[root_index]]:
            st = tick.stats.get(key)
            if st is not None and (st.p_err > 0 or any(co.q > 0 for co in st.calls)):
                return True
        return False

    # -- ids ----------------------------------------------------------------------------------------

    def _hash(self, payload: int) -> int:
        h = hashlib.blake2b(payload.to_bytes(9, "big"), key=self._secret, digest_size=7)
        return int.from_bytes(h.digest(), "big")

    def _mask(self, h: int) -> int:
        m = hashlib.blake2b(h.to_bytes(7, "big"), key=self._secret, digest_size=9)
        return int.from_bytes(m.digest(), "big")

    def encode_id(self, tick_t: float, root_index: int, i: int) -> int:
        payload = (int(round(tick_t * 1000)) << 24) | (root_index << 16) | i
        h = self._hash(payload)
        return (h << _PAYLOAD_BITS) | (payload ^ self._mask(h))

    def decode_id(self, trace_id: int) -> tuple[float, int, int] | None:
        """(tick time, root index, i) of an id this synthesiser made, else None."""
        h = trace_id >> _PAYLOAD_BITS
        if h >= 1 << 56:
            return None
        payload = (trace_id & ((1 << _PAYLOAD_BITS) - 1)) ^ self._mask(h)
        if self._hash(payload) != h:
            return None
        root_index = (payload >> 16) & 0xFF
        if root_index >= len(self.roots):
            return None
        return (payload >> 24) / 1000.0, root_index, payload & 0xFFFF

    # -- traces -------------------------------------------------------------------------------------

    def _key(self, tick: TraceTick, root_index: int) -> list[int]:
        return [self.seed, int(round(tick.t * 1000)), self._root_keys[root_index]]

    def count(self, tick: TraceTick, root_index: int) -> int:
        """How many traces of this root the tick holds (capped at ``CAP_PER_TICK``)."""
        rate = tick.rates.get(self.roots[root_index], 0.0)
        if rate <= 0 or self.roots[root_index][0] not in tick.pods:
            return 0
        n = int(np.random.default_rng(self._key(tick, root_index) + [1]).poisson(rate * tick.dt))
        return min(n, CAP_PER_TICK)

    def batch(self, tick: TraceTick, root_index: int) -> list[Trace]:
        n = self.count(tick, root_index)
        if n == 0:
            return []
        rows = np.random.default_rng(self._key(tick, root_index) + [2]).random((n, _SLOTS)).tolist()
        return [self._trace(tick, root_index, i, rows[i]) for i in range(n)]

    def trace(self, tick: TraceTick, root_index: int, i: int) -> Trace | None:
        if i >= self.count(tick, root_index):
            return None
        rng = np.random.default_rng(self._key(tick, root_index) + [2])
        rng.bit_generator.advance(i * _SLOTS)
        return self._trace(tick, root_index, i, rng.random(_SLOTS).tolist())

    def _trace(self, tick: TraceTick, root_index: int, i: int, row: list[float]) -> Trace:
        draws = _Draws(row, self._key(tick, root_index) + [3, i])
        trace_id = self.encode_id(tick.t, root_index, i)
        builder = _Builder(self, tick, trace_id, draws)
        start = tick.t - tick.dt + draws.u() * tick.dt
        builder.server(self.roots[root_index], start, 0)
        return Trace(trace_id, self.roots[root_index], builder.spans)


class _Builder:
    """Walks the call graph for one request, emitting spans for traced services."""

    def __init__(self, synth: TraceSynth, tick: TraceTick, trace_id: int, draws: _Draws) -> None:
        self.synth = synth
        self.spec = synth.spec
        self.tick = tick
        self.draws = draws
        self.spans: list[Span] = []
        self._id_base = trace_id & 0xFFFFFFFFFFFFFFFF
        self._products: dict[str, str] = {}

    def _span(self, service: str, pod: PodRef | None, name: str, kind: str, start: float, parent: int) -> Span:
        n = len(self.spans) + 1
        x = (self._id_base + n * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        span = Span((x ^ (x >> 31)) or n, parent, service, pod, name, kind, start)
        self.spans.append(span)
        return span

    def _self_time(self, key: OpKey) -> float:
        op = self.spec.op(*key)
        k = self.tick.knobs
        t = math.exp(math.log(op.median_ms / 1000.0) + op.sigma * self.draws.normal()) * k.slowdown.get(op.service, 1.0)
        if key in k.extra_latency:
            t += self.draws.sample(k.extra_latency[key])
        return t

    def _path(self, template: str) -> str:
        """A concrete request path for a route template (placeholders filled once per trace)."""
        def fill(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in self._products:
                self._products[name] = self.draws.pick(self.synth.products) or m.group(0)
            return self._products[name]
        return _PLACEHOLDER.sub(fill, template)

    def server(self, key: OpKey, start: float, parent: int) -> _Outcome:
        """Serve one request of operation ``key``; its spans are emitted when the service is traced."""
        spec = self.spec
        op = spec.op(*key)
        svc = spec.services[op.service]
        st = self.tick.stats[key]
        pod = self.draws.pick(self.tick.pods.get(op.service, ()))
        span = self._span(op.service, pod, op.span, op.kind.lower(), start, parent) if svc.traced else None
        sid = span.span_id if span else parent
        self_t = self._self_time(key)
        cursor = start + 0.6 * self_t
        failed: _Outcome | None = None
        for co in st.calls:
            n = int(co.count)
            if self.draws.u() < co.count - n:
                n += 1
            if n <= 0:
                continue
            if co.call.parallel and n > 1:
                results = [self.call(op.service, pod, co, cursor, sid) for _ in range(n)]
                cursor += max(r.duration for r in results)
                bad = next((r for r in results if r.error), None)
                if bad is not None and co.call.on_error == "propagate":
                    failed = bad
            else:
                for _ in range(n):
                    r = self.call(op.service, pod, co, cursor, sid)
                    cursor += r.duration
                    if r.error and co.call.on_error == "propagate":
                        failed = r
                        break
            if failed is not None:
                break
        if failed is None and st.self_error > 0 and self.draws.u() < st.self_error:
            failed = _Outcome(0.0, True, st.grpc_code, st.error_text, 500)
        duration = cursor + 0.4 * self_t - start
        status = 200 if failed is None else failed.http_status
        if span is not None:
            span.duration = duration
            self._server_attrs(span, op.kind, op.id, failed, status)
            if failed is not None:
                self._fail(span, svc.language, failed.code, failed.text)
            for name in op.internal_spans:
                inner = self._span(op.service, pod, name, "internal", start + 0.05 * duration, sid)
                inner.duration = 0.3 * duration
        if failed is None:
            return _Outcome(duration)
        return _Outcome(duration, True, failed.code, failed.text, status)

    def _server_attrs(self, span: Span, kind: str, op_id: str, failed: _Outcome | None, status: int) -> None:
        http = _HTTP.search(op_id)
        grpc = _GRPC.match(op_id)
        if grpc:
            span.attrs += [("rpc.system", "grpc"), ("rpc.service", grpc.group(1)), ("rpc.method", grpc.group(2)),
                           ("rpc.grpc.status_code", GRPC_CODES.get(failed.code if failed else "OK", 2))]
        elif http:
            span.attrs += [("http.method", http.group(1)), ("http.route", http.group(2)),
                           ("http.target", self._path(http.group(2))), ("http.status_code", status)]
        elif kind == "CONSUMER":
            span.attrs += [("messaging.system", "kafka"), ("messaging.destination.name", self.synth.topic_of.get((span.service, op_id), "")),
                           ("messaging.operation", op_id.rsplit(" ", 1)[-1])]

    def _fail(self, span: Span, language: str, code: str, text: str) -> None:
        span.error = True
        span.status_message = text
        fields: list[tuple[str, Any]] = [("event", "exception")]
        if language in _EXCEPTION_TYPES:
            fields.append(("exception.type", _EXCEPTION_TYPES[language]))
        fields.append(("exception.message", f"{code}: {text}" if code and code != "OK" else text))
        span.events.append((span.start + span.duration, fields))

    def call(self, caller: str, pod: PodRef | None, co: CallOutcome, start: float, parent: int) -> _Outcome:
        """One outgoing call: a client span on the caller, the callee's server span under it."""
        c, r = co.call, co.reach
        traced = self.spec.services[caller].traced
        span = self._span(caller, pod, c.client_span, c.client_kind.lower(), start, parent) if traced else None
        sid = span.span_id if span else parent
        hop = NETWORK_HOP_S + r.delay_ms / 1000.0
        injected = r.server_error_share * self.tick.knobs.server_error.get(c.service, 1.0)
        reached = self.draws.u() < r.ok_share
        origin = True
        if not reached:
            fast, code, shape = CAUSES.get(r.cause or "refused", CAUSES["refused"])
            if fast < 0:
                timeout = c.timeout_ms / 1000.0
                duration = self.draws.sample(Moments(timeout, (0.02 * timeout) ** 2))
            else:
                duration = self.draws.sample(Moments(fast, (fast / 2) ** 2))
            text = shape.format(host=r.target.split(":")[0], target=r.target)
            status = (504 if code == "DEADLINE_EXCEEDED" else 503) if _HTTP.search(c.operation) else 500
            out = _Outcome(duration, True, code, text, status)
        else:
            inner = self.server((c.service, c.operation), start + hop / 2, sid)
            duration = inner.duration + hop
            if injected > 0 and self.draws.u() < injected:
                out = _Outcome(duration, True, "INTERNAL", f"unexpected HTTP status 500 from {r.target} (response patched)", 500)
            else:
                out = _Outcome(duration, inner.error, inner.code, inner.text, inner.http_status)
                origin = False
            if not inner.error and (c.service, c.operation) in self.synth.consumers:
                self._consume(c.service, c.operation, start + duration, sid)
        if span is not None:
            span.duration = out.duration
            self._client_attrs(span, co, out, reached)
            if out.error:
                span.error = True
                span.status_message = out.text
                if origin:
                    self._fail(span, self.spec.services[caller].language, out.code, out.text)
        return out

    def _client_attrs(self, span: Span, co: CallOutcome, out: _Outcome, reached: bool) -> None:
        c = co.call
        host, port = _split_target(co.reach.target)
        http = _HTTP.search(c.operation)
        grpc = _GRPC.match(c.operation)
        if grpc:
            named = _GRPC.match(c.client_span.removeprefix("grpc."))
            service, method = (named or grpc).groups()
            span.attrs += [("rpc.system", "grpc"), ("rpc.service", service), ("rpc.method", method),
                           ("rpc.grpc.status_code", GRPC_CODES.get(out.code if out.error else "OK", 2))]
        elif http:
            span.attrs += [("http.method", http.group(1)), ("http.url", f"http://{co.reach.target}{self._path(http.group(2))}")]
            if reached:
                span.attrs.append(("http.status_code", out.http_status))
        elif c.client_kind == "PRODUCER":
            span.attrs += [("messaging.system", "kafka"), ("messaging.destination.name", self.synth.topic_of.get((c.service, c.operation), "")),
                           ("messaging.operation", "publish")]
        elif port in _DB_PORTS:
            span.attrs += [("db.system", _DB_PORTS[port]), ("db.operation", c.operation.split(" ", 1)[0])]
        span.attrs += [("net.peer.name", host)] + ([("net.peer.port", port)] if port is not None else [])

    def _consume(self, service: str, operation: str, produced_at: float, parent: int) -> None:
        """Consumer spans of a message this request produced, for the share the consumers kept up with."""
        tick = self.tick
        produced = tick.rates.get((service, operation), 0.0)
        for topic, cons in self.synth.consumers[(service, operation)]:
            consumed = tick.rates.get((cons.service, cons.operation), 0.0)
            if produced <= 0 or consumed <= 0 or self.draws.u() >= min(consumed / produced, 1.0):
                continue
            lag = tick.backlog.get((topic, cons.group), 0.0) / consumed + self.draws.sample(lognormal(0.003, 0.5))
            self.server((cons.service, cons.operation), produced_at + lag, parent)
