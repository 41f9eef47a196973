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
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from itbench_gym.backends.sim.app.flow import NETWORK_HOP_S, CallOutcome, Moments, OpKey, lognormal
from itbench_gym.backends.sim.app.network import CAUSES
from itbench_gym.backends.sim.app.spec import AppSpec, Call, Consumer

from .record import PodRef, TraceTick

#: Most candidate traces kept per tick and root operation; above it a tick is represented by a sample.
CAP_PER_TICK = 200
#: Uniform draws reserved per trace; a larger trace continues on a keyed overflow stream.
_SLOTS = 256
_MEMO_ENTRIES = 50_000
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
    """One span; ``parent`` is the index of the parent span in its trace plus one (0: the root)."""

    parent: int
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


def span_id(trace_id: int, index: int) -> int:
    """The 64-bit id of the ``index``-th span of a trace (a SplitMix64 step, never zero)."""
    x = ((trace_id & 0xFFFFFFFFFFFFFFFF) + (index + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) or index + 1


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
class _OpInfo:
    """What every server span of one operation shares, worked out once per spec."""

    span: str
    kind: str
    traced: bool
    language: str
    internal: tuple[str, ...]
    attrs: tuple[tuple[str, Any], ...]
    status_key: str | None
    route: str | None


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
        if len(items) <= 1:
            return items[0] if items else None
        return items[min(int(self.u() * len(items)), len(items) - 1)]


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
        self.ops = {(svc.name, op.id): self._op_info(op.service, op.id) for svc in spec.services.values() for op in svc.operations.values()}
        self._client: dict[tuple[str, str, str, str], tuple[tuple[str, Any], ...]] = {}
        self._counts: dict[tuple[int, int], tuple[TraceTick, int]] = {}

    def _op_info(self, service: str, op_id: str) -> _OpInfo:
        op = self.spec.op(service, op_id)
        svc = self.spec.services[service]
        grpc, http = _GRPC.match(op_id), _HTTP.search(op_id)
        attrs: tuple[tuple[str, Any], ...] = ()
        status_key, route = None, None
        if grpc:
            attrs, status_key = (("rpc.system", "grpc"), ("rpc.service", grpc.group(1)), ("rpc.method", grpc.group(2))), "rpc.grpc.status_code"
        elif http:
            attrs, status_key, route = (("http.method", http.group(1)), ("http.route", http.group(2))), "http.status_code", http.group(2)
        elif op.kind == "CONSUMER":
            attrs = (("messaging.system", "kafka"), ("messaging.destination.name", self.topic_of.get((service, op_id), "")),
                     ("messaging.operation", op_id.rsplit(" ", 1)[-1]))
        return _OpInfo(op.span, op.kind.lower(), svc.traced, svc.language, op.internal_spans, attrs, status_key, route)

    def client_attrs(self, caller: str, op_id: str, call: Call, target: str) -> tuple[tuple[str, Any], ...]:
        """The attributes every client span of ``call`` to ``target`` shares (memoised)."""
        key = (caller, op_id, call.id, target)
        attrs = self._client.get(key)
        if attrs is None:
            host, port = _split_target(target)
            if port is None:
                port = self.spec.services[call.service].port
            grpc, http = _GRPC.match(call.operation), _HTTP.search(call.operation)
            out: list[tuple[str, Any]] = []
            if grpc:
                named = _GRPC.match(call.client_span.removeprefix("grpc."))
                service, method = (named or grpc).groups()
                out += [("rpc.system", "grpc"), ("rpc.service", service), ("rpc.method", method)]
            elif http:
                out += [("http.method", http.group(1))]
            elif call.client_kind == "PRODUCER":
                out += [("messaging.system", "kafka"), ("messaging.destination.name", self.topic_of.get((call.service, call.operation), "")),
                        ("messaging.operation", "publish")]
            elif port in _DB_PORTS:
                out += [("db.system", _DB_PORTS[port]), ("db.operation", call.operation.split(" ", 1)[0])]
            out += [("net.peer.name", host)] + ([("net.peer.port", port)] if port is not None else [])
            attrs = self._client[key] = tuple(out)
        return attrs

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
        memo = self._counts.get((id(tick), root_index))
        if memo is not None and memo[0] is tick:
            return memo[1]
        rate = tick.rates.get(self.roots[root_index], 0.0)
        n = 0
        if rate > 0 and self.roots[root_index][0] in tick.pods:
            n = min(int(np.random.default_rng(self._key(tick, root_index) + [1]).poisson(rate * tick.dt)), CAP_PER_TICK)
        if len(self._counts) >= _MEMO_ENTRIES:
            self._counts.clear()
        self._counts[(id(tick), root_index)] = (tick, n)
        return n

    def batch(self, tick: TraceTick, root_index: int, first: int | None = None) -> list[Trace]:
        """The tick's traces of this root; ``first`` keeps only a prefix (a uniform sample of them)."""
        n = self.count(tick, root_index)
        if first is not None:
            n = min(n, first)
        if n <= 0:
            return []
        rows = np.random.default_rng(self._key(tick, root_index) + [2]).random((n, _SLOTS)).tolist()
        return [self._trace(tick, root_index, i, rows[i]) for i in range(n)]

    def trace(self, tick: TraceTick, root_index: int, i: int) -> Trace | None:
        if i >= self.count(tick, root_index):
            return None
        bits = np.random.PCG64(self._key(tick, root_index) + [2])
        bits.advance(i * _SLOTS)  # one 64-bit output per double: row i without rows 0..i-1
        return self._trace(tick, root_index, i, np.random.Generator(bits).random(_SLOTS).tolist())

    def _trace(self, tick: TraceTick, root_index: int, i: int, row: list[float]) -> Trace:
        draws = _Draws(row, self._key(tick, root_index) + [3, i])
        trace_id = self.encode_id(tick.t, root_index, i)
        builder = _Builder(self, tick, draws)
        start = tick.t - tick.dt + draws.u() * tick.dt
        builder.server(self.roots[root_index], start, 0)
        return Trace(trace_id, self.roots[root_index], builder.spans)


class _Builder:
    """Walks the call graph for one request, emitting spans for traced services."""

    def __init__(self, synth: TraceSynth, tick: TraceTick, draws: _Draws) -> None:
        self.synth = synth
        self.tick = tick
        self.draws = draws
        self.spans: list[Span] = []
        self._fills: dict[str, str] = {}

    def _span(self, service: str, pod: PodRef | None, name: str, kind: str, start: float, parent: int) -> int:
        self.spans.append(Span(parent, service, pod, name, kind, start))
        return len(self.spans)

    def _path(self, template: str) -> str:
        """A concrete request path for a route template (placeholders filled once per trace)."""
        if "{" not in template:
            return template

        def fill(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in self._fills:
                self._fills[name] = self.draws.pick(self.synth.products) or m.group(0)
            return self._fills[name]
        return _PLACEHOLDER.sub(fill, template)

    def server(self, key: OpKey, start: float, parent: int) -> _Outcome:
        """Serve one request of operation ``key``; its spans are emitted when the service is traced."""
        info = self.synth.ops[key]
        st = self.tick.stats[key]
        knobs = self.tick.knobs
        draws = self.draws
        pod = draws.pick(self.tick.pods.get(key[0], ()))
        me = self._span(key[0], pod, info.span, info.kind, start, parent) if info.traced else parent
        op = st.op
        self_t = math.exp(math.log(op.median_ms / 1000.0) + op.sigma * draws.normal()) * knobs.slowdown.get(key[0], 1.0)
        if key in knobs.extra_latency:
            self_t += draws.sample(knobs.extra_latency[key])
        cursor = start + 0.6 * self_t
        failed: _Outcome | None = None
        for co in st.calls:
            n = int(co.count)
            if co.count > n and draws.u() < co.count - n:
                n += 1
            if n <= 0:
                continue
            if co.call.parallel and n > 1:
                results = [self.call(key, pod, co, cursor, me) for _ in range(n)]
                cursor += max(r.duration for r in results)
                bad = next((r for r in results if r.error), None)
                if bad is not None and co.call.on_error == "propagate":
                    failed = bad
            else:
                for _ in range(n):
                    r = self.call(key, pod, co, cursor, me)
                    cursor += r.duration
                    if r.error and co.call.on_error == "propagate":
                        failed = r
                        break
            if failed is not None:
                break
        if failed is None and st.self_error > 0 and draws.u() < st.self_error:
            failed = _Outcome(0.0, True, st.grpc_code, st.error_text, 500)
        duration = cursor + 0.4 * self_t - start
        status = 200 if failed is None else failed.http_status
        if info.traced:
            span = self.spans[me - 1]
            span.duration = duration
            span.attrs = list(info.attrs)
            if info.route is not None:
                span.attrs += [("http.target", self._path(info.route)), ("http.status_code", status)]
            elif info.status_key is not None:
                span.attrs.append((info.status_key, GRPC_CODES.get(failed.code, 2) if failed else 0))
            if failed is not None:
                self._fail(span, info.language, failed.code, failed.text)
            for name in info.internal:
                self._span(key[0], pod, name, "internal", start + 0.05 * duration, me)
                self.spans[-1].duration = 0.3 * duration
        if failed is None:
            return _Outcome(duration)
        return _Outcome(duration, True, failed.code, failed.text, status)

    @staticmethod
    def _fail(span: Span, language: str, code: str, text: str) -> None:
        span.error = True
        span.status_message = text
        fields: list[tuple[str, Any]] = [("event", "exception")]
        if language in _EXCEPTION_TYPES:
            fields.append(("exception.type", _EXCEPTION_TYPES[language]))
        fields.append(("exception.message", f"{code}: {text}" if code and code != "OK" else text))
        span.events.append((span.start + span.duration, fields))

    def call(self, caller: OpKey, pod: PodRef | None, co: CallOutcome, start: float, parent: int) -> _Outcome:
        """One outgoing call: a client span on the caller, the callee's server span under it."""
        c, r = co.call, co.reach
        info = self.synth.ops[caller]
        me = self._span(caller[0], pod, c.client_span, c.client_kind.lower(), start, parent) if info.traced else parent
        hop = NETWORK_HOP_S + r.delay_ms / 1000.0
        reached = r.ok_share >= 1.0 or self.draws.u() < r.ok_share
        origin = True
        if not reached:
            fast, code, shape = CAUSES.get(r.cause or "refused", CAUSES["refused"])
            if fast < 0:
                timeout = c.timeout_ms / 1000.0
                duration = self.draws.sample(Moments(timeout, (0.02 * timeout) ** 2))
            else:
                duration = self.draws.sample(Moments(fast, (fast / 2) ** 2))
            text = shape.format(host=r.target.split(":")[0], target=r.target)
            status = (504 if code == "DEADLINE_EXCEEDED" else 503) if self.synth.ops[(c.service, c.operation)].route else 500
            out = _Outcome(duration, True, code, text, status)
        else:
            inner = self.server((c.service, c.operation), start + hop / 2, me)
            duration = inner.duration + hop
            injected = r.server_error_share * self.tick.knobs.server_error.get(c.service, 1.0)
            if injected > 0 and self.draws.u() < injected:
                out = _Outcome(duration, True, "INTERNAL", f"unexpected HTTP status 500 from {r.target} (response patched)", 500)
            else:
                out = _Outcome(duration, inner.error, inner.code, inner.text, inner.http_status)
                origin = False
            if not inner.error and (c.service, c.operation) in self.synth.consumers:
                self._consume(c.service, c.operation, start + duration, me)
        if info.traced:
            span = self.spans[me - 1]
            span.duration = out.duration
            span.attrs = list(self.synth.client_attrs(caller[0], caller[1], c, r.target))
            callee = self.synth.ops[(c.service, c.operation)]
            if callee.route is not None:
                span.attrs.append(("http.url", f"http://{r.target}{self._path(callee.route)}"))
                if reached:
                    span.attrs.append(("http.status_code", out.http_status))
            elif callee.status_key == "rpc.grpc.status_code":
                span.attrs.append(("rpc.grpc.status_code", GRPC_CODES.get(out.code, 2) if out.error else 0))
            if out.error:
                span.error = True
                span.status_message = out.text
                if origin:
                    self._fail(span, info.language, out.code, out.text)
        return out

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
