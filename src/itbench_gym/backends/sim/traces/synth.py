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

What the app's own code adds (``traces.yaml``: ``app.*`` attributes, span events, the flags each
operation evaluates) is applied from the same walk: a trace draws its request's fields (product,
user, category) once, so the load generator's URL, the frontend's route and product-catalog's
``app.product.id`` agree; flag evaluations become the OpenFeature hooks' span events and, for a
provider that asks flagd every time, a gRPC call with flagd's own spans.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import weakref
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from itbench_gym.backends.sim.app import errortext
from itbench_gym.backends.sim.app.flow import NETWORK_HOP_S, CallOutcome, Moments, OpKey, lognormal, lognormal_params
from itbench_gym.backends.sim.app.network import CAUSES, Reach
from itbench_gym.backends.sim.app.spec import AppSpec, Call, Consumer

from .catalog import Attribute, Evaluation, OperationDef, SpanDef, TraceCatalog, flag_variants, load_catalog
from .record import PodRef, TraceTick

if TYPE_CHECKING:
    from itbench_gym.backends.sim.app.model import AppModel

#: Most candidate traces kept per tick and root operation; above it a tick is represented by a sample.
CAP_PER_TICK = 200
#: Uniform draws reserved per trace; a larger trace continues on a keyed overflow stream.
_SLOTS = 256
_MEMO_ENTRIES = 50_000
_PAYLOAD_BITS = 72
_HTTP = re.compile(r"(?:^|\s)(GET|POST|PUT|PATCH|DELETE|HEAD) (/\S*)$")
_GRPC = re.compile(r"^/?([\w.]+)/(\w+)$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: Database system by well-known port, for client spans to uninstrumented stores.
_DB_PORTS = {6379: "redis", 5432: "postgresql", 3306: "mysql", 27017: "mongodb", 9042: "cassandra"}
#: An attribute whose value this tick cannot say (a flag or cache the model did not record).
_UNKNOWN: Any = object()
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
    method: str = ""
    code: OperationDef = OperationDef()


@dataclass(frozen=True)
class _Outcome:
    duration: float
    error: bool = False
    code: str = "OK"
    text: str = ""
    http_status: int = 200
    #: How the failure reached this span: the call that never got an answer, for the runtimes' wording.
    failure: errortext.Failure | None = None


@dataclass(frozen=True)
class FlagResult:
    """One evaluation as the provider returned it."""

    value: Any
    variant: str | None
    reason: str
    error: str | None = None


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
        mu, sigma = lognormal_params(max(m.mean, 1e-9), max(m.var, 0.0))
        return math.exp(mu + sigma * self.normal())

    def pick(self, items: Sequence[Any]) -> Any:
        if len(items) <= 1:
            return items[0] if items else None
        return items[min(int(self.u() * len(items)), len(items) - 1)]


def _split_target(target: str) -> tuple[str, int | None]:
    host, _, port = target.partition(":")
    return host, int(port) if port.isdigit() else None


class TraceSynth:
    """Traces of one app model (spec + seed) from its recorded ticks."""

    def __init__(self, spec: AppSpec, seed: int, products: Sequence[str] = (),
                 variants: Mapping[str, Sequence[tuple[str, Any]]] | None = None) -> None:
        self.spec = spec
        self.seed = seed
        self.products = tuple(products)
        self.catalog: TraceCatalog = load_catalog(spec)
        #: flag -> (variant name, value) of the flag definitions flagd was given (for the variant of a served value)
        self.variants = {k: tuple(v) for k, v in (variants or {}).items()}
        self._flagd_calls: dict[OpKey, list[tuple[str, str, str, int]]] = {}
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
        code = self.catalog.operations.get((service, op_id), OperationDef())
        return _OpInfo(op.span, op.kind.lower(), svc.traced, svc.language, op.internal_spans, attrs, status_key, route,
                       http.group(1) if http else "", code)

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
                named = _GRPC.match((call.client_span or "").removeprefix("grpc."))
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
            out.update((svc, c.client_span) for c in op.calls if c.client_span)
            out.update((a, b) for a, b, _ in self.flagd_spans(svc, op_id))
        return frozenset(out)

    def flagd_spans(self, service: str, op_id: str) -> set[tuple[str, str, str]]:
        """(service, span name, kind) of the flagd calls one request of an operation makes: a provider
        without a cache asks flagd for every evaluation (its client span; flagd's server, evaluation
        service and evaluator spans)."""
        return {(svc, name, kind) for svc, name, kind, _ in self.flagd_calls(service, op_id)}

    def flagd_calls(self, service: str, op_id: str) -> list[tuple[str, str, str, int]]:
        """(service, span name, kind, evaluations per request) behind :meth:`flagd_spans` (memoised)."""
        memo = self._flagd_calls.get((service, op_id))
        if memo is None:
            memo = self._flagd_calls[(service, op_id)] = self._flagd_call_spans(service, op_id)
        return memo

    def _flagd_call_spans(self, service: str, op_id: str) -> list[tuple[str, str, str, int]]:
        provider, flagd = self.catalog.providers.get(service), self.catalog.flagd
        code = self.catalog.operations.get((service, op_id))
        if provider is None or provider.cache or flagd is None or code is None:
            return []
        counts: dict[tuple[str, str, str], int] = {}
        for ev in [e for d in (code.span, *code.internal.values()) for e in d.flags]:
            method, inner = flagd.methods[ev.type]
            name = f"{flagd.rpc_service}/{method}"
            spans = [(service, name, "client")]
            if self.spec.services[flagd.service].traced:
                spans += [(flagd.service, name, "server"), (flagd.service, inner, "server"), (flagd.service, inner, "internal")]
            for k in spans:
                counts[k] = counts.get(k, 0) + 1
        return [(svc, name, kind, n) for (svc, name, kind), n in counts.items()]

    def variant(self, flag: str, value: Any) -> str | None:
        """The name of the variant with this value (type and value equal), as flagd reports it."""
        for name, v in self.variants.get(flag, ()):
            if type(v) is type(value) and v == value:
                return name
        return None

    def evaluate(self, tick: TraceTick, service: str, ev: Evaluation, first: bool) -> FlagResult | None:
        """What the provider of ``service`` returns for ``ev`` this tick (None: the tick does not say what
        flagd served). A provider without a cache asks flagd, so it fails while flagd has no ready pod."""
        if tick.flags is None:
            return None
        provider = self.catalog.providers.get(service)
        flagd = self.catalog.flagd
        cached = provider is not None and provider.cache and not first
        if not cached and flagd is not None and flagd.service not in tick.pods:
            return FlagResult(ev.default, None, "error", "general")
        if ev.flag not in tick.flags:
            return FlagResult(ev.default, None, "error", "flag_not_found")
        raw = tick.flags[ev.flag]
        value: Any = bool(raw) if ev.type == "boolean" else int(raw) if ev.type == "integer" else float(raw)
        if isinstance(raw, bool) != (ev.type == "boolean") or isinstance(raw, str):
            return FlagResult(ev.default, None, "error", "type_mismatch")
        return FlagResult(value, self.variant(ev.flag, raw), "cached" if cached else "static")


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

    def serve(self, tick: TraceTick, key: OpKey, at: float, stream: Sequence[int],
              product: str | None = None) -> tuple[float, int, str | None]:
        """One more request of operation ``key`` arriving at ``at`` in ``tick``'s state, served as a
        traced request is (its calls, their failures, the faults' delays and aborts): (seconds it
        takes, HTTP status: 200, or the status its failure answers with, and the cause when a call of
        its never got an answer: the flow's cause name). ``stream`` seeds its draws."""
        draws = _Draws(np.random.default_rng(list(stream)).random(_SLOTS).tolist(), [*stream, 1])
        out = _Builder(self, tick, draws).server(key, at, 0, product)
        if not out.error:
            return out.duration, 200, None
        return out.duration, out.http_status, out.failure.cause if out.failure is not None else None

    def _trace(self, tick: TraceTick, root_index: int, i: int, row: list[float]) -> Trace:
        draws = _Draws(row, self._key(tick, root_index) + [3, i])
        trace_id = self.encode_id(tick.t, root_index, i)
        builder = _Builder(self, tick, draws)
        start = tick.t - tick.dt + draws.u() * tick.dt
        builder.server(self.roots[root_index], start, 0)
        return Trace(trace_id, self.roots[root_index], builder.spans)


#: Each app model's synthesiser (building one reads the spec's whole call graph: ~0.1 s).
_SYNTHS: weakref.WeakKeyDictionary[AppModel, TraceSynth] = weakref.WeakKeyDictionary()


def synth_of(model: AppModel) -> TraceSynth:
    """``model``'s trace synthesiser, remade when its seed or spec changes (a reseeded incident)."""
    synth = _SYNTHS.get(model)
    if synth is None or synth.seed != model.seed or synth.spec is not model.spec:
        synth = TraceSynth(model.spec, model.seed, model.products, flag_variants(model.spec, model.manifests()))
        _SYNTHS[model] = synth
    return synth


class _Builder:
    """Walks the call graph for one request, emitting spans for traced services."""

    def __init__(self, synth: TraceSynth, tick: TraceTick, draws: _Draws) -> None:
        self.synth = synth
        self.tick = tick
        self.draws = draws
        self.spans: list[Span] = []
        self._fills: dict[str, Any] = {}
        self._recommended: list[str] | None = None
        #: services whose provider already resolved a flag in this trace (a cache serves the rest)
        self._asked: set[tuple[str, str]] = set()

    def _span(self, service: str, pod: PodRef | None, name: str, kind: str, start: float, parent: int) -> int:
        self.spans.append(Span(parent, service, pod, name, kind, start))
        return len(self.spans)

    # -- the request's values ---------------------------------------------------------------------

    def field(self, name: str) -> Any:
        """A trace-wide field (traces.yaml ``fields``), drawn the first time a span needs it."""
        if name not in self._fills:
            kind, param = self.synth.catalog.fields.get(name, ("catalog", True))
            if kind == "catalog":
                value: Any = self.draws.pick(self.synth.products) or "{" + name + "}"
            elif kind == "uuid":
                bits = [min(int(self.draws.u() * 65536), 65535) for _ in range(8)]
                h = "".join(f"{b:04x}" for b in bits)
                value = f"{h[:8]}-{h[8:12]}-{param}{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:32]}"
            else:
                value = self.draws.pick(param)
            self._fills[name] = value
        return self._fills[name]

    def recommended(self) -> list[str]:
        """The products this request's recommendation returns: up to 5 distinct catalogue products
        other than the one asked about (recommendation_server.py: random.sample of the filtered list)."""
        if self._recommended is None:
            asked = self.field("productId") if "productId" in self.synth.catalog.fields else None
            pool = [p for p in self.synth.products if p != asked]
            chosen: list[str] = []
            while pool and len(chosen) < 5:
                chosen.append(pool.pop(min(int(self.draws.u() * len(pool)), len(pool) - 1)))
            self._recommended = chosen
        return self._recommended

    def _product(self, passed: str | None) -> str | None:
        """The product a request is about: what its caller passed, else the trace's productId."""
        if passed is not None or "productId" not in self.synth.catalog.fields:
            return passed
        value: str = self.field("productId")
        return value

    def _target(self, info: _OpInfo) -> str:
        return self.synth.catalog.target(info.route or "/", info.method, self.field)

    # -- spans ---------------------------------------------------------------------------------------

    def server(self, key: OpKey, start: float, parent: int, product: str | None = None) -> _Outcome:
        """Serve one request of operation ``key``; its spans are emitted when the service is traced."""
        info = self.synth.ops[key]
        st = self.tick.stats[key]
        knobs = self.tick.knobs
        draws = self.draws
        code = info.code
        pod = draws.pick(self.tick.pods.get(key[0], ()))
        me = self._span(key[0], pod, info.span, info.kind, start, parent) if info.traced else parent
        op = st.op
        self_t = math.exp(math.log(op.median_ms / 1000.0) + op.sigma * draws.normal()) * knobs.slowdown.get(key[0], 1.0)
        if key[0] in knobs.queue_wait:
            self_t += draws.sample(knobs.queue_wait[key[0]])
        if key in knobs.extra_latency:
            self_t += draws.sample(knobs.extra_latency[key])
        if key in knobs.fault_delay and draws.u() < knobs.fault_delay[key][0]:
            self_t += knobs.fault_delay[key][1]
        wrapping: dict[str, int] = {}
        inner: dict[str, int] = {}
        if info.traced:
            self._evaluations(key, code.span, me, pod, start, self_t, product)
            for name in info.internal:
                d = code.internal.get(name)
                if d is not None and d.wraps:
                    inner[name] = self._span(key[0], pod, name, "internal", start + 0.05 * self_t, me)
                    wrapping.update((c, inner[name]) for c in d.wraps)
                    self._evaluations(key, d, inner[name], pod, start + 0.05 * self_t, self_t, product)
        cursor = start + 0.6 * self_t
        failed: _Outcome | None = None
        made: dict[str, int] = {}
        #: the span around a failed ``return`` call (the code that caught it marks it) and the failure
        caught: tuple[int, _Outcome] | None = None
        for co in st.calls:
            n = int(co.count)
            if co.count > n and draws.u() < co.count - n:
                n += 1
            if n <= 0:
                continue
            made[co.call.id] = n
            under = wrapping.get(co.call.id, me)
            args = self.recommended() if code.args.get(co.call.id) == "recommended" else None
            if not co.call.awaited:
                for k in range(n):
                    self.call(key, pod, co, cursor, under, args[k] if args and k < len(args) else None)
            elif co.call.parallel and n > 1:
                results = [self.call(key, pod, co, cursor, under, args[k] if args and k < len(args) else None) for k in range(n)]
                cursor += max(r.duration for r in results)
                bad = next((r for r in results if r.error), None)
                if bad is not None and co.call.on_error == "propagate":
                    failed = bad
                elif bad is not None and co.call.on_error == "return":
                    caught = (under, bad)
            else:
                for k in range(n):
                    r = self.call(key, pod, co, cursor, under, args[k] if args and k < len(args) else None)
                    cursor += r.duration
                    if r.error and co.call.on_error == "propagate":
                        failed = r
                        break
                    if r.error and co.call.on_error == "return":
                        caught = (under, r)
                        break
            if failed is not None or caught is not None:
                break
        if failed is None and caught is None and st.self_error > 0:
            fails = self._product(product) == code.fails_for if code.fails_for is not None else draws.u() < st.self_error
            if fails:
                failed = _Outcome(0.0, True, st.grpc_code, st.error_text, op.error_status)
        duration = cursor + 0.4 * self_t - start
        status = 200 if failed is None else failed.http_status
        if info.traced:
            span = self.spans[me - 1]
            span.duration = duration
            span.attrs = list(info.attrs)
            if info.route is not None:
                span.attrs += [("http.target", self._target(info)), ("http.status_code", status)]
            elif info.status_key is not None:
                span.attrs.append((info.status_key, errortext.code_number(failed.code) if failed else 0))
            span.attrs += self._attributes(code.span, key, pod, made, product)
            self._events(span, code.span, failed is not None)
            if failed is not None:
                self._fail(span, info.language, failed)
            for name in info.internal:
                d = code.internal.get(name, SpanDef())
                if name in inner:
                    sub = self.spans[inner[name] - 1]
                    sub.duration = max(cursor - sub.start, 0.3 * self_t)
                else:
                    index = self._span(key[0], pod, name, "internal", start + 0.05 * duration, me)
                    sub = self.spans[index - 1]
                    sub.duration = 0.3 * duration
                    self._evaluations(key, d, index, pod, sub.start, sub.duration, product)
                sub.attrs += self._attributes(d, key, pod, made, product)
                self._events(sub, d, failed is not None)
            if caught is not None and caught[0] != me:
                self._fail(self.spans[caught[0] - 1], info.language, caught[1])
        if failed is None:
            return _Outcome(duration)
        return _Outcome(duration, True, failed.code, failed.text, status, failed.failure)

    def _attributes(self, d: SpanDef, key: OpKey, pod: PodRef | None, made: dict[str, int], product: str | None) -> list[tuple[str, Any]]:
        """The traces.yaml attributes of one span, from this request's values and the tick's flags."""
        out: list[tuple[str, Any]] = []
        for a in d.attributes:
            if a.when is not None or a.unless is not None:
                on = self._flag_on(key[0], a.when or a.unless or "")
                if on is None or on != (a.when is not None):
                    continue
            value = self._value(a, key, pod, made, product)
            if value is _UNKNOWN:
                continue
            mapped = a.mapping.get("null" if value is None else str(value).lower() if isinstance(value, bool) else str(value),
                                   a.mapping.get("*", _UNKNOWN))
            if mapped is not _UNKNOWN:
                value = mapped
            elif a.format is not None:
                value = a.format.replace("{}", str(value))
            if value is not None:
                out.append((a.key, value))
        return out

    def _value(self, a: Attribute, key: OpKey, pod: PodRef | None, made: dict[str, int], product: str | None) -> Any:
        source, param = a.source, a.param
        if source == "value":
            return param
        if source == "field":
            return self.field(param)
        if source == "arg":
            return self._product(product)
        if source == "flag":
            ev = Evaluation(param, "boolean" if isinstance(self.tick.flags and self.tick.flags.get(param), bool) else "float", False)
            result = self.synth.evaluate(self.tick, key[0], ev, first=False)
            if result is None:
                return _UNKNOWN
            v = result.value
            return int(v) if isinstance(v, float) and v.is_integer() else v
        if source in ("called", "not_called"):
            return (made.get(param, 0) > 0) == (source == "called")
        if source == "calls":
            return made.get(param, 0)
        if source == "catalog":
            return len(self.synth.products) + int(param)
        if source == "cache":
            entries = self.tick.cache.get(pod.name) if pod is not None else None
            return _UNKNOWN if entries is None else int(round(entries))
        if source == "recommended":
            chosen = self.recommended()
            return len(chosen) if param == "count" else json.dumps(chosen, separators=(",", ":"))
        return _UNKNOWN

    def _flag_on(self, service: str, flag: str) -> bool | None:
        if self.tick.flags is None:
            return None
        value = self.tick.flags.get(flag)
        return bool(value) and value != "off"

    @staticmethod
    def _events(span: Span, d: SpanDef, failed: bool) -> None:
        """The span's own events (success ones spread over its life, error ones near its end)."""
        chosen = [name for name, on_error in d.events if on_error == failed]
        for k, name in enumerate(chosen):
            at = 0.9 if failed else (k + 1) / (len(chosen) + 1)
            span.events.append((span.start + span.duration * at, [("event", name)]))

    def _evaluations(self, key: OpKey, d: SpanDef, span_index: int, pod: PodRef | None, start: float, window: float,
                     product: str | None) -> None:
        """The flags evaluated while this span is current: the hook's events and, for a provider
        that does not cache, the gRPC call to flagd with flagd's spans under it."""
        synth = self.synth
        provider = synth.catalog.providers.get(key[0])
        if provider is None:
            return
        hook = synth.catalog.hooks.get(provider.hook)
        span = self.spans[span_index - 1]
        for k, ev in enumerate(d.flags):
            if ev.only_for is not None and self._product(product) != ev.only_for:
                continue
            first = (key[0], ev.flag) not in self._asked
            self._asked.add((key[0], ev.flag))
            result = synth.evaluate(self.tick, key[0], ev, first)
            if result is None:
                continue
            at = start + window * 0.1 * (k + 1) / (len(d.flags) + 1)
            if not provider.cache:
                self._flagd_call(key[0], pod, ev, result, at, window * 0.1 / (len(d.flags) + 1), span_index)
            if hook is None:
                continue
            fields: list[tuple[str, Any]] = [("event", hook.event), (hook.keys["key"], ev.flag)]
            for role, attr in hook.keys.items():
                if role == "provider":
                    fields.append((attr, provider.name))
                elif role == "variant" and result.error is None:
                    variant = result.variant
                    if variant is None and provider.hook == "python":
                        variant = json.dumps(result.value)
                    if variant is not None:
                        fields.append((attr, variant))
                elif role == "reason":
                    fields.append((attr, result.reason))
                elif role == "value":
                    fields.append((attr, result.value))
            if result.error is not None and provider.hook == "dotnet":
                fields.append(("error.type", result.error.replace("_", "")))
            if result.error is None or provider.hook == "dotnet":
                span.events.append((at, fields))

    def _flagd_call(self, service: str, pod: PodRef | None, ev: Evaluation, result: FlagResult, at: float, width: float,
                    parent: int) -> None:
        """A provider's gRPC evaluation: its client span, and flagd's server, service and evaluator spans."""
        flagd = self.synth.catalog.flagd
        if flagd is None:
            return
        method, inner = flagd.methods[ev.type]
        name = f"{flagd.rpc_service}/{method}"
        rpc = [("rpc.system", "grpc"), ("rpc.service", flagd.rpc_service), ("rpc.method", method)]
        port = self.synth.spec.services[flagd.service].port
        client = self._span(service, pod, name, "client", at, parent)
        took = min(self.draws.sample(lognormal(flagd.median_ms / 1000.0, flagd.sigma)), max(width, 1e-6))
        cspan = self.spans[client - 1]
        cspan.duration = took
        cspan.attrs = rpc + [("net.peer.name", flagd.service)] + ([("net.peer.port", port)] if port else [])
        flagd_pod = self.draws.pick(self.tick.pods.get(flagd.service, ()))
        if result.error == "general" or flagd_pod is None:
            f = errortext.Failure("UNAVAILABLE", "", "refused", flagd.service, port, self.tick.addresses.get(flagd.service, ""),
                                  now=at + took)
            cspan.attrs.append(("rpc.grpc.status_code", errortext.code_number("UNAVAILABLE")))
            self._fail(cspan, self.synth.spec.services[service].language,
                       _Outcome(took, True, "UNAVAILABLE", "", 500, f))
            return
        cspan.attrs.append(("rpc.grpc.status_code", 0))
        if not self.synth.spec.services[flagd.service].traced:
            return
        outer = self._span(flagd.service, flagd_pod, name, "server", at + 0.1 * took, client)
        self.spans[outer - 1].duration = 0.8 * took
        self.spans[outer - 1].attrs = rpc + [("rpc.grpc.status_code", 0)]
        svc = self._span(flagd.service, flagd_pod, inner, "server", at + 0.15 * took, outer)
        self.spans[svc - 1].duration = 0.6 * took
        a = flagd.attributes
        self.spans[svc - 1].attrs = [(a["key"], ev.flag), (a["provider"], a["provider_name"])] + (
            [(a["variant"], result.variant)] if result.variant else [])
        evaluator = self._span(flagd.service, flagd_pod, inner, "internal", at + 0.2 * took, svc)
        self.spans[evaluator - 1].duration = 0.4 * took

    @staticmethod
    def _fail(span: Span, language: str, failed: _Outcome) -> None:
        """Mark a span failed; its exception event words the failure as the span's runtime does."""
        span.error = True
        if failed.failure is not None:
            span.status_message = errortext.details(language, failed.failure)
            text = errortext.message(language, failed.failure)
        else:
            span.status_message = failed.text
            code = failed.code
            text = errortext.message(language, errortext.Failure(code, failed.text)) if errortext.runtime_of(language) and code != "OK" \
                else (f"{code}: {failed.text}" if code and code != "OK" else failed.text)
        fields: list[tuple[str, Any]] = [("event", "exception")]
        if language in _EXCEPTION_TYPES:
            fields.append(("exception.type", _EXCEPTION_TYPES[language]))
        fields.append(("exception.message", text))
        span.events.append((span.start + span.duration, fields))

    def _failed(self, c: Call, r: Reach, callee: _OpInfo, cause: str, start: float, duration: float) -> _Outcome:
        """A call that got no answer, for ``cause`` (:data:`CAUSES`), as its span and its runtime's wording say."""
        _, code, shape = CAUSES.get(cause, CAUSES["refused"])
        text = shape.format(host=r.target.split(":")[0], target=r.target)
        status = (504 if code == "DEADLINE_EXCEEDED" else 503) if callee.route else 500
        host, port = _split_target(r.target)
        failure = errortext.Failure(code, text, cause, host, port, self.tick.addresses.get(host, ""),
                                    "http" if callee.route is not None else "grpc", callee.method or "POST",
                                    f"http://{r.target}{self._target(callee)}" if callee.route is not None else "",
                                    self._target(callee) if callee.route is not None else "/", c.timeout_ms / 1000.0, start + duration)
        return _Outcome(duration, True, code, text, status, failure)

    def call(self, caller: OpKey, pod: PodRef | None, co: CallOutcome, start: float, parent: int, product: str | None = None) -> _Outcome:
        """One outgoing call: a client span on the caller, the callee's server span under it."""
        c, r = co.call, co.reach
        info = self.synth.ops[caller]
        callee = self.synth.ops[(c.service, c.operation)]
        me = self._span(caller[0], pod, c.client_span, c.client_kind.lower(), start, parent) if info.traced and c.client_span else parent
        hop = NETWORK_HOP_S + r.delay_ms / 1000.0
        reached = r.ok_share >= 1.0 or self.draws.u() < r.ok_share
        origin = True
        if not reached:
            fast, _, _ = CAUSES.get(r.cause or "refused", CAUSES["refused"])
            if fast < 0:
                timeout = c.timeout_ms / 1000.0
                duration = self.draws.sample(Moments(timeout, (0.02 * timeout) ** 2))
            else:
                duration = self.draws.sample(Moments(fast, (fast / 2) ** 2))
            out = self._failed(c, r, callee, r.cause or "refused", start, duration)
        else:
            inner = self.server((c.service, c.operation), start + hop / 2, me, product)
            duration = inner.duration + hop
            injected = r.server_error_share * self.tick.knobs.server_error.get(c.service, 1.0)
            if injected > 0 and self.draws.u() < injected:
                out = _Outcome(duration, True, "INTERNAL", f"unexpected HTTP status 500 from {r.target} (response patched)", 500)
            elif r.answer_lost > 0 and self.draws.u() < r.answer_lost:
                out = self._failed(c, r, callee, "http_abort", start, duration)  # served, but the answer was reset
            else:
                out = _Outcome(duration, inner.error, inner.code, inner.text, inner.http_status)
                origin = False
            if not inner.error and (c.service, c.operation) in self.synth.consumers:
                self._consume(c.service, c.operation, start + duration, me)
        if info.traced:
            span = self.spans[me - 1]
            span.duration = out.duration
            span.attrs = list(self.synth.client_attrs(caller[0], caller[1], c, r.target))
            if callee.route is not None:
                span.attrs.append(("http.url", f"http://{r.target}{self._target(callee)}"))
                if reached:
                    span.attrs.append(("http.status_code", out.http_status))
            elif callee.status_key == "rpc.grpc.status_code":
                span.attrs.append(("rpc.grpc.status_code", errortext.code_number(out.code) if out.error else 0))
            if out.error:
                span.error = True
                span.status_message = out.text
                if origin:
                    self._fail(span, info.language, out)
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
