"""Container logs synthesised on demand from the recorded tick states.

Each tick records, per container, what it did (requests served per operation, failures with their
cause, fault-specific activity). A tick's lines are rendered as a whole with an RNG keyed by
(seed, tick, pod, container), so a line is the same whichever window a query asks for, and lines
cost nothing until someone reads them. Rendered ticks are memoised on the tick itself: the history
is append-only and shared between snapshots, so a baseline's lines are rendered once per process.

A line says what the real process would: a request's ``{path}`` is the URL the load generator
asked for (``/api/products/OLJCESPC7Z``, ``/api/recommendations?productIds=...``: route templates
filled from ``traces.yaml`` ``fields`` and ``requests``), and a failure's ``{message}`` /
``{details}`` are worded by the service's own runtime (:mod:`.errortext`), so a Node caller prints
grpc-js's text and a Go caller grpc-go's for the same refused connection.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import pickle
import re
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from string import Formatter
from typing import TYPE_CHECKING, Any

import numpy as np

from itbench_gym.backends.sim.traces.catalog import TraceCatalog, load_catalog

if TYPE_CHECKING:
    from .cluster_view import ClusterView
    from .flow import CallOutcome

from . import errortext
from .spec import AppSpec

MAX_LINES_PER_TICK = 60
#: Start-up lines are stamped a little after the tick that started the container.
_STARTUP_SPACING = 0.05
_STARTUP_SPILL = 5.0


Line = tuple[float, str]


@dataclass(frozen=True)
class FieldPools:
    """The app's values that generated fields draw from: the catalogue's product ids (app.yaml
    ``catalog``), e-mail users and categories, and the defaults of context fields (``log_values``);
    the request fields and query strings of ``traces.yaml``; each container's language; which
    request lines belong to one operation only; and each container's cache-hit line with the
    miss ratio of the cache it reports on."""

    products: tuple[str, ...]
    users: tuple[str, ...]
    categories: tuple[str, ...]
    defaults: Mapping[str, str]
    catalog: TraceCatalog = field(default_factory=TraceCatalog)
    languages: Mapping[str, str] = field(default_factory=dict)
    #: (container, template) -> the ``path`` context of the one operation the line is written for
    line_paths: Mapping[tuple[str, str], str] = field(default_factory=dict)
    #: container -> (cache-miss template, cache-hit template, miss ratio)
    cache_hits: Mapping[str, tuple[str, str, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: AppSpec, products: Sequence[str]) -> FieldPools:
        values = spec.log_values
        line_paths: dict[tuple[str, str], str] = {}
        hits: dict[str, tuple[str, str, float]] = {}
        for svc in spec.services.values():
            for line in svc.logs.request:
                if line.operation is not None:
                    line_paths[(svc.container, line.text)] = operation_path(line.operation)
            miss, hit = svc.logs.effect.get("cache_leak"), svc.logs.effect.get("cache_hit")
            leak = next((e for e in spec.effects if e.type == "cache_leak" and e.get("service") == svc.name), None)
            if miss and hit and leak is not None and 0 < float(leak.get("miss_ratio", 0)) < 1:
                hits[svc.container] = (miss, hit, float(leak.get("miss_ratio")))
        return cls(tuple(products), values.users, values.categories, dict(values.defaults), load_catalog(spec),
                   {svc.container: svc.language for svc in spec.services.values()}, line_paths, hits)


_ROUTE = re.compile(r"(GET|POST|PUT|PATCH|DELETE|HEAD) (\S+)$")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def operation_path(op_id: str) -> str:
    """The ``path`` context the model gives an operation's lines: its route, else ``/<op id>``."""
    m = _ROUTE.search(op_id)
    return m.group(2) if m else "/" + op_id


@dataclass(frozen=True)
class LogActivity:
    """One kind of line a container wrote during a tick, at ``rate`` lines per second."""

    template: str
    rate: float
    context: tuple[tuple[str, str], ...] = ()


class TickLog:
    """What every container did during one tick; ``rendered`` memoises its lines per container.

    The containers' activity is kept pickled: an incident keeps every tick, and one bytes object is
    nothing for the garbage collector to scan where a tick's activity records were a few hundred
    objects (``traces/packing.py`` says why that matters). It is unpickled when lines are rendered.
    """

    __slots__ = ("t", "dt", "keys", "starts", "rendered", "_activity")

    def __init__(self, t: float, dt: float, containers: dict[tuple[str, str], tuple[LogActivity, ...]],
                 starts: dict[tuple[str, str], float]) -> None:
        self.t, self.dt, self.starts = t, dt, starts
        #: the (pod, container) pairs that wrote during the tick
        self.keys = tuple(containers)
        self.rendered: dict[tuple[int, str, str], tuple[Line, ...]] = {}
        self._activity = pickle.dumps(containers, protocol=pickle.HIGHEST_PROTOCOL)

    @property
    def containers(self) -> dict[tuple[str, str], tuple[LogActivity, ...]]:
        activity: dict[tuple[str, str], tuple[LogActivity, ...]] = pickle.loads(self._activity)
        return activity


@dataclass(frozen=True)
class StreamInfo:
    """One container of one pod that wrote (or could have written) logs in a window."""

    namespace: str
    pod: str
    container: str
    service: str
    workload: str


class _Clock:
    """Second-resolution time strings, cached per second (a tick spans only a few)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], str] = {}

    def fmt(self, pattern: str, sec: int) -> str:
        key = (pattern, sec)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = time.strftime(pattern, time.gmtime(sec))
        return out


def _ms_parts(ts: np.ndarray) -> tuple[list[int], list[int]]:
    total = np.floor(ts * 1000.0).astype(np.int64)
    return (total // 1000).tolist(), (total % 1000).tolist()


def _uuids(rng: np.random.Generator, n: int) -> list[str]:
    raw = rng.bytes(16 * n).hex()
    out = []
    for i in range(n):
        h = raw[32 * i: 32 * i + 32]
        variant = "89ab"[int(h[16], 16) & 3]
        out.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}")
    return out


def _hex(rng: np.random.Generator, n: int, width: int) -> list[str]:
    raw = rng.bytes(width * n).hex()
    return [raw[2 * width * i: 2 * width * (i + 1)] for i in range(n)]


def _ints(rng: np.random.Generator, lo: int, hi: int, n: int) -> list[int]:
    values: list[int] = rng.integers(lo, hi, size=n).tolist()
    return values


def _field_values(name: str, rng: np.random.Generator, ts: np.ndarray, clock: _Clock, pools: FieldPools) -> list[str]:
    """``len(ts)`` values of one generated template field, drawn together."""
    n = len(ts)
    if name in ("iso", "valkey_ts", "clf", "pytime", "rubytime", "werkzeug_ts"):
        secs, millis = _ms_parts(ts)
        if name == "iso":
            return [f"{clock.fmt('%Y-%m-%dT%H:%M:%S', s)}.{m:03d}Z" for s, m in zip(secs, millis, strict=True)]
        if name == "rubytime":  # Time#strftime("%Y-%m-%d %H:%M:%S"), as Sinatra's dump_errors! stamps
            return [clock.fmt("%Y-%m-%d %H:%M:%S", s) for s in secs]
        if name == "pytime":  # Python logging's default asctime
            return [f"{clock.fmt('%Y-%m-%d %H:%M:%S', s)},{m:03d}" for s, m in zip(secs, millis, strict=True)]
        if name == "werkzeug_ts":  # http.server's log_date_time_string, which Werkzeug's access log uses
            return [clock.fmt("%d/%b/%Y %H:%M:%S", s) for s in secs]
        if name == "valkey_ts":
            return [f"{clock.fmt('%d %b %Y %H:%M:%S', s)}.{m:03d}" for s, m in zip(secs, millis, strict=True)]
        return [clock.fmt("%d/%b/%Y:%H:%M:%S +0000", s) for s in secs]
    if name == "epoch_ms":
        return [str(v) for v in np.floor(ts * 1000.0).astype(np.int64).tolist()]
    if name == "sec":
        return [f"{v:.4f}" for v in rng.uniform(0.005, 0.05, size=n).tolist()]
    if name == "ms":
        return [str(v) for v in _ints(rng, 1, 40, n)]
    if name == "n":
        return [str(v) for v in _ints(rng, 1, 500, n)]
    if name == "bytes":
        return [str(v) for v in _ints(rng, 200, 9000, n)]
    if name in ("uuid", "uuid2"):
        return _uuids(rng, n)
    if name == "trace":
        return _hex(rng, n, 16)
    if name == "span":
        return _hex(rng, n, 8)
    if name == "ip":
        return [f"10.244.{a}.{b}" for a, b in zip(_ints(rng, 1, 4, n), _ints(rng, 2, 250, n), strict=True)]
    if name == "email":
        users = pools.users
        return [f"{users[a]}_{b}@example.com" for a, b in zip(_ints(rng, 0, len(users), n), _ints(rng, 10, 99, n), strict=True)]
    if name == "category":
        return [pools.categories[a] for a in _ints(rng, 0, len(pools.categories), n)]
    if name == "quantity":  # traces.yaml fields.quantity: what the load generator adds to a cart
        choices = pools.catalog.fields.get("quantity", ("choice", [1]))[1]
        return [str(choices[a]) for a in _ints(rng, 0, len(choices), n)]
    if name.startswith("product"):
        return _product_slots(rng, n, pools)[int(name[len("product"):] or 1) - 1]
    raise KeyError(name)


def _product_slots(rng: np.random.Generator, n: int, pools: FieldPools) -> list[list[str]]:
    """Per line, distinct catalogue products for the slots {product} .. {product5} (a line lists
    several products of one response, which never repeats one)."""
    products = pools.products
    order = np.argsort(rng.random((n, len(products))), axis=1).tolist()
    slots = min(5, len(products))
    return [[products[row[k % len(products)]] for row in order] for k in range(slots)] + [[products[0]] * n] * (5 - slots)


def _template_fields(template: str) -> list[str]:
    return sorted({f for _, f, _, _ in Formatter().parse(template) if f})


def _is_json(template: str) -> bool:
    text = template.strip()
    return text.startswith("{{") and text.endswith("}}")


def _request_paths(path: str, method: str, rng: np.random.Generator, n: int, pools: FieldPools) -> list[str]:
    """``n`` concrete request paths for a route template: its fields (and the query string the load
    generator sends) drawn per line, as each line is a different request."""
    cat = pools.catalog
    names = set(_PLACEHOLDER.findall(path)) | set(_PLACEHOLDER.findall(cat.query(f"{method} {path}") or ""))
    names &= set(cat.fields)
    if not names:
        return [path] * n
    columns: dict[str, list[Any]] = {}
    for name in sorted(names):
        kind, param = cat.fields[name]
        if kind == "catalog":
            pool: Sequence[Any] = pools.products or ("{" + name + "}",)
            columns[name] = [pool[i] for i in _ints(rng, 0, len(pool), n)]
        elif kind == "uuid":
            columns[name] = list(_uuids(rng, n))
        else:
            columns[name] = [param[i] for i in _ints(rng, 0, len(param), n)]
    def row(i: int) -> Callable[[str], Any]:
        return lambda f: columns[f][i] if f in columns else None
    return [cat.target(path, method, row(i)) for i in range(n)]


def _failure(constants: Mapping[str, str], t: float) -> errortext.Failure:
    """The failure a line reports, from its context (the flow's cause and target when it gave them)."""
    host, _, port = constants.get("target", "").partition(":")
    callee = constants.get("call_to", "")
    route = _ROUTE.search(callee)
    return errortext.Failure(
        code=constants.get("grpc_code", "UNKNOWN") or "UNKNOWN", details=constants.get("error", ""),
        cause=constants.get("cause") or None, host=host, port=int(port) if port.isdigit() else None,
        ip=constants.get("target_ip", ""), protocol="http" if route else "grpc", method=route.group(1) if route else "POST",
        url=f"http://{host}:{port}{route.group(2)}" if route and port else (f"http://{host}{route.group(2)}" if route else ""),
        path=route.group(2) if route else "/", timeout=float(constants.get("timeout_s", "0") or 0), now=t)


def _fill(template: str, ts: np.ndarray, rng: np.random.Generator, clock: _Clock,
          constants: dict[str, str], pools: FieldPools, language: str = "") -> list[Line]:
    """Render ``template`` once per timestamp; JSON lines get their values JSON-escaped."""
    escape: Callable[[str], str] = (lambda v: json.dumps(v)[1:-1]) if _is_json(template) else (lambda v: v)
    fixed: dict[str, str] = {}
    columns: dict[str, list[str]] = {}
    slots: list[list[str]] | None = None
    for name in _template_fields(template):
        if name.startswith("product") and name not in constants and pools.products:
            slots = slots if slots is not None else _product_slots(rng, len(ts), pools)
            columns[name] = [escape(v) for v in slots[int(name[len("product"):] or 1) - 1]]
        elif name == "path" and "path" in constants:
            paths = _request_paths(constants["path"], constants.get("method", "GET"), rng, len(ts), pools)
            columns[name] = [escape(v) for v in paths]
        elif name in ("message", "details"):
            render = errortext.message if name == "message" else errortext.details
            columns[name] = [escape(render(language, _failure(constants, t))) for t in ts.tolist()]
        elif name in constants:
            fixed[name] = escape(constants[name])
        elif name in pools.defaults:
            fixed[name] = pools.defaults[name]
        else:
            columns[name] = [escape(v) for v in _field_values(name, rng, ts, clock, pools)]
    out: list[Line] = []
    names = list(columns)
    for i, t in enumerate(ts.tolist()):
        values = dict(fixed)
        for name in names:
            values[name] = columns[name][i]
        out.append((t, template.format_map(values)))
    return out


def _rng(seed: int, tick_t: float, pod: str, container: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{pod}/{container}".encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int(round(tick_t * 1000)), int.from_bytes(digest, "big"), zlib.crc32(b"logs")])


def _startup(spec: AppSpec, container: str) -> tuple[str, ...]:
    for svc in spec.services.values():
        if svc.container == container:
            return svc.logs.startup
    return ()


def _activities(pools: FieldPools, container: str, acts: Sequence[LogActivity]) -> list[LogActivity]:
    """What the container wrote: a request line written for one operation only counts for that
    operation's requests, and a cache that reports its misses reports its hits too (at the hit rate
    its miss ratio implies)."""
    out: list[LogActivity] = []
    hits = pools.cache_hits.get(container)
    for act in acts:
        only = pools.line_paths.get((container, act.template))
        if only is not None and dict(act.context).get("path") != only:
            continue
        out.append(act)
        if hits is not None and act.template == hits[0]:
            out.append(LogActivity(hits[1], act.rate * (1.0 - hits[2]) / hits[2], act.context))
    return out


def render_tick(spec: AppSpec, pools: FieldPools, seed: int, tick: TickLog, pod: str, container: str) -> tuple[Line, ...]:
    """Every line the container wrote during ``tick``, in time order."""
    memo_key = (seed, pod, container)
    cached = tick.rendered.get(memo_key)
    if cached is not None:
        return cached
    key = (pod, container)
    rng = _rng(seed, tick.t, pod, container)
    clock = _Clock()
    lines: list[Line] = []
    start_t = tick.starts.get(key)
    if start_t is not None:
        for i, text in enumerate(_startup(spec, container)):
            lines += _fill(text, np.array([start_t + _STARTUP_SPACING * i]), rng, clock, {"pod": pod}, pools)
    lo = tick.t - tick.dt
    language = pools.languages.get(container, "")
    for act in _activities(pools, container, tick.containers.get(key, ()) if key in tick.keys else ()):
        n = min(int(rng.poisson(act.rate * tick.dt)), MAX_LINES_PER_TICK)
        if n:
            ts = np.sort(rng.uniform(lo, tick.t, size=n))
            lines += _fill(act.template, ts, rng, clock, {"pod": pod, **dict(act.context)}, pools, language)
    lines.sort(key=lambda x: x[0])
    out = tuple(lines)
    tick.rendered[memo_key] = out
    return out


def ticks_between(history: list[TickLog], start: float, end: float) -> list[TickLog]:
    """The ticks that may hold lines stamped in [start, end] (history is in time order)."""
    lo = bisect.bisect_left(history, start - _STARTUP_SPILL, key=lambda tk: tk.t)
    hi = bisect.bisect_right(history, end, key=lambda tk: tk.t - tk.dt)
    return history[lo:hi]


def render(spec: AppSpec, pools: FieldPools, seed: int, history: list[TickLog], pod: str, container: str,
           start: float, end: float) -> list[Line]:
    lines: list[Line] = []
    for tick in ticks_between(history, start, end):
        lines += [ln for ln in render_tick(spec, pools, seed, tick, pod, container) if start <= ln[0] <= end]
    lines.sort(key=lambda x: x[0])
    return lines


def streams(spec: AppSpec, history: list[TickLog], start: float, end: float) -> list[StreamInfo]:
    """Every container that ran during [start, end], including those of pods deleted since."""
    by_container = {svc.container: svc for svc in spec.services.values()}
    seen: set[tuple[str, str]] = set()
    for tick in ticks_between(history, start, end):
        if tick.t - tick.dt <= end and tick.t >= start:
            seen.update(tick.keys)
        seen.update(k for k, t in tick.starts.items() if start <= t <= end)
    out = []
    for pod, container in sorted(seen):
        svc = by_container.get(container)
        if svc is not None:
            out.append(StreamInfo(spec.namespace, pod, container, svc.name, svc.workload))
    return out


def failure_context(outcome: CallOutcome | None, view: ClusterView | None = None) -> dict[str, str]:
    """What a failed call's log line needs to be worded by the caller's runtime: the flow's cause,
    the address dialled (and the Service's ClusterIP behind it), the callee and the deadline."""
    if outcome is None or not outcome.cause:
        return {}
    host = outcome.reach.target.split(":", 1)[0]
    service = (view.services.get(host) if view is not None else None) or {}
    ip = str((service.get("spec") or {}).get("clusterIP") or "")
    return {"cause": outcome.cause, "target": outcome.reach.target, "call_to": f"{outcome.call.service}/{outcome.call.operation}",
            "timeout_s": f"{outcome.call.timeout_ms / 1000.0:g}", **({"target_ip": ip} if ip and ip != "None" else {})}


def activity(template: str | None, rate: float, **context: Any) -> list[LogActivity]:
    if not template or rate <= 0:
        return []
    return [LogActivity(template, rate, tuple(sorted((k, str(v)) for k, v in context.items())))]
