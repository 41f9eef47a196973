"""The twin's Jaeger query API (``/api/...`` of jaeger-query) as a WSGI app.

Semantics and messages follow Jaeger's ``cmd/query/app`` HTTP handler and query parser: every
answer is the ``{"data", "total", "limit", "offset", "errors"}`` envelope; bad parameters are a 400
whose ``errors`` carry Jaeger's message (``unable to parse param 'minDuration': time: invalid
duration "x"``); ``start``/``end`` are Unix microseconds, ``minDuration``/``maxDuration`` Go
durations, ``endTs``/``lookback`` of ``/api/dependencies`` milliseconds. Beyond Jaeger, ``lookback``
on ``/api/traces`` (the UI's ``1h``, ``2d``...) sets the start when ``start`` is absent.

Scenarios whose traces are masked (``-NoTraces``) have no Jaeger at all: the backend gives the
agent no Jaeger endpoint and does not serve this app for them.

Bad input is always a 400 in Jaeger's shape, never a 500: parameters must be valid UTF-8, durations
must fit Go's int64 nanoseconds (Go's ``time: invalid duration`` otherwise), and a ``tags`` JSON
too deeply nested to decode is malformed like any other.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from werkzeug.wrappers import Request, Response

from itbench_gym.backends.sim.wsgi import RoutedApp, url_map
from itbench_gym.clock import Clock
from itbench_gym.lang import durations

from .jaeger_json import trace_json
from .record import TraceTick
from .search import TraceQuery, dependencies, find_trace, find_traces, operations
from .synth import TraceSynth, synth_of

if TYPE_CHECKING:
    from itbench_gym.backends.sim.app.model import AppModel

DEFAULT_LIMIT = 100
#: Largest ``limit`` served (the Jaeger UI's own maximum); keeps a query's cost bounded.
MAX_LIMIT = 1500
DEFAULT_TRACE_LOOKBACK_S = 2 * 86400.0
DEFAULT_DEPENDENCY_LOOKBACK_S = 86400.0
_SPAN_KINDS = ("server", "client", "producer", "consumer", "internal")
_INT = re.compile(r"^[+-]?\d+$")
#: Go's time.Duration is int64 nanoseconds.
_MAX_DURATION_S = 9_223_372_036.854775807


class ApiFailure(Exception):
    """An answer in Jaeger's error shape: HTTP ``status`` and Jaeger's message."""

    status = 500


class BadParam(ApiFailure, ValueError):
    """A request parameter Jaeger would reject with 400; the message is Jaeger's."""

    status = 400


class TraceNotFound(ApiFailure):
    status = 404

    def __init__(self) -> None:
        super().__init__("trace not found")


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def parse_int(text: str, bits: int = 64) -> int:
    """Go's ``strconv.ParseInt(text, 10, bits)``."""
    if not _INT.match(text):
        raise BadParam(f"strconv.ParseInt: parsing {_quote(text)}: invalid syntax")
    value = int(text)
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise BadParam(f"strconv.ParseInt: parsing {_quote(text)}: value out of range")
    return value


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds (``1.5s``, ``300ms``, ``1h15m``); BadParam with Go's message."""
    try:
        return durations.parse_go_duration(text)
    except durations.DurationError as exc:
        raise BadParam(str(exc)) from None


def _lookback(text: str) -> float:
    """The UI's lookback values: Go durations plus days (``2d``)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)d", text)
    if not m:
        return parse_go_duration(text)
    seconds = float(m.group(1)) * 86400.0
    if seconds > _MAX_DURATION_S:
        raise BadParam(f"time: invalid duration {_quote(text)}")
    return seconds


def _param_error(name: str, exc: BadParam) -> BadParam:
    return BadParam(f"unable to parse param '{name}': {exc}")


class JaegerAPI(RoutedApp):
    """Request handlers over the app's instances (each copy of the app exports its traces to the one
    Jaeger, told apart by their ids and pods); :func:`make_jaeger_app` builds it."""

    def __init__(self, models: Callable[[], Sequence[AppModel]], clock: Clock, lock: threading.RLock | threading.Lock) -> None:
        self.models = models
        self.clock = clock
        self.lock = lock
        self.url_map = url_map((
            ("/api/services", "services", ("GET",)),
            ("/api/services/<service>/operations", "service_operations", ("GET",)),
            ("/api/operations", "operations", ("GET",)),
            ("/api/traces", "search", ("GET",)),
            ("/api/traces/<trace_id>", "trace", ("GET",)),
            ("/api/dependencies", "dependencies", ("GET",)),
        ))

    def bad_request(self, request: Request, message: str, status: int = 400) -> Response:
        return _error(status, message)

    def internal_error(self, request: Request, exc: Exception) -> Response:
        return _error(500, f"internal error: {exc}")

    def handle(self, request: Request, endpoint: str, args: dict[str, Any]) -> Response:
        with self.lock:
            stores = [_Store(synth_of(m), m.trace_ticks()) for m in self.models()]
            now = self.clock.now()
        try:
            body, status = getattr(self, endpoint)(request, stores, now, **args)
        except ApiFailure as exc:
            return _error(exc.status, str(exc))
        indent = 4 if request.args.get("prettyPrint", "") not in ("", "false") else None
        return Response(json.dumps(body, indent=indent), status=status, mimetype="application/json")

    # ------------------------------------------------------------------ endpoints

    def services(self, request: Request, stores: list[_Store], now: float) -> tuple[dict[str, Any], int]:
        names = sorted(_operations(stores))
        return _envelope(names, total=len(names)), 200

    def service_operations(self, request: Request, stores: list[_Store], now: float, service: str) -> tuple[dict[str, Any], int]:
        names = sorted({name for name, _ in _operations(stores).get(service, ())})
        return _envelope(names, total=len(names)), 200

    def operations(self, request: Request, stores: list[_Store], now: float) -> tuple[dict[str, Any], int]:
        service = request.args.get("service", "")
        if not service:
            raise BadParam("parameter 'service' is required")
        kind = request.args.get("spanKind", "")
        ops = sorted(_operations(stores).get(service, ()))
        data = [{"name": name, "spanKind": k} for name, k in ops if not kind or k == kind]
        return _envelope(data, total=len(data)), 200

    def trace(self, request: Request, stores: list[_Store], now: float, trace_id: str) -> tuple[dict[str, Any], int]:
        found = _find_trace(stores, parse_trace_id(trace_id))
        if found is None:
            raise TraceNotFound()
        return _envelope([found]), 200

    def search(self, request: Request, stores: list[_Store], now: float) -> tuple[dict[str, Any], int]:
        args = request.args
        end = self._micros(args.get("end", ""), "end", now)
        lookback = args.get("lookback", "")
        default_start = now - DEFAULT_TRACE_LOOKBACK_S
        if lookback and lookback != "custom":
            try:
                default_start = end - _lookback(lookback)
            except BadParam as exc:
                raise _param_error("lookback", exc) from None
        start = self._micros(args.get("start", ""), "start", default_start)
        tags = parse_tags(args.getlist("tag"), args.getlist("tags"))
        limit = DEFAULT_LIMIT
        if args.get("limit", ""):
            limit = parse_int(args["limit"], 32)
        limit = min(limit if limit > 0 else DEFAULT_LIMIT, MAX_LIMIT)
        min_d = self._duration(args.get("minDuration", ""), "minDuration")
        max_d = self._duration(args.get("maxDuration", ""), "maxDuration")
        ids = []
        for raw in args.getlist("traceID"):
            try:
                ids.append(parse_trace_id(raw))
            except BadParam as exc:
                raise BadParam(f"cannot parse traceID param: {exc}") from None
        service = args.get("service", "")
        if not ids and not service:
            raise BadParam("parameter 'service' is required")
        if min_d and max_d and max_d < min_d:
            raise BadParam("'maxDuration' should be greater than 'minDuration'")
        if ids:
            found, errors = [], []
            for tid in ids:
                trace = _find_trace(stores, tid)
                if trace is None:
                    errors.append({"msg": "trace not found", "traceID": f"{tid:032x}"})
                else:
                    found.append(trace)
            return _envelope(found, errors=errors or None), 200
        query = TraceQuery(service=service, operation=args.get("operation", ""), tags=tags, start=start, end=end,
                           min_duration=min_d, max_duration=max_d, limit=limit)
        # each store's most recent, then the most recent of all (one store: its own order, unchanged)
        traces = [(t.start, store, t) for store in stores for t in find_traces(store.synth, store.ticks, query)]
        if len(stores) > 1:
            traces = sorted(traces, key=lambda x: x[0], reverse=True)[:limit]
        return _envelope([trace_json(store.synth.spec, t) for _, store, t in traces]), 200

    def dependencies(self, request: Request, stores: list[_Store], now: float) -> tuple[dict[str, Any], int]:
        end = now
        if request.args.get("endTs", ""):
            try:
                end = parse_int(request.args["endTs"]) / 1000.0
            except BadParam as exc:
                raise _param_error("endTs", exc) from None
        lookback = DEFAULT_DEPENDENCY_LOOKBACK_S
        if request.args.get("lookback", ""):
            try:
                lookback = parse_int(request.args["lookback"]) / 1000.0
            except BadParam as exc:
                raise _param_error("lookback", exc) from None
        service = request.args.get("service", "")
        counts: dict[tuple[str, str], int] = {}
        for store in stores:
            for p, c, n in dependencies(store.synth, store.ticks, end - lookback, end):
                counts[(p, c)] = counts.get((p, c), 0) + n
        links = [{"parent": p, "child": c, "callCount": n} for (p, c), n in counts.items() if not service or service in (p, c)]
        return _envelope(links), 200

    # ------------------------------------------------------------------ parameters

    @staticmethod
    def _micros(raw: str, name: str, default: float) -> float:
        if not raw:
            return default
        try:
            return parse_int(raw) / 1_000_000.0
        except BadParam as exc:
            raise _param_error(name, exc) from None

    @staticmethod
    def _duration(raw: str, name: str) -> float:
        if not raw:
            return 0.0
        try:
            return parse_go_duration(raw)
        except BadParam as exc:
            raise _param_error(name, exc) from None


def parse_trace_id(text: str) -> int:
    """Jaeger's ``TraceIDFromString``: up to 32 hex digits (shorter ids are the low bits)."""
    if len(text) > 32:
        raise BadParam(f"TraceID cannot be longer than 32 hex characters: {text}")
    parts = [text[:-16], text[-16:]] if len(text) > 16 else [text]
    for part in parts:
        if not re.fullmatch(r"[0-9a-fA-F]+", part):
            raise BadParam(f"strconv.ParseUint: parsing {_quote(part)}: invalid syntax")
    return int(text, 16)


def parse_tags(simple: list[str], json_maps: list[str]) -> dict[str, str]:
    """``tag=k:v`` parameters and ``tags={"k":"v"}`` JSON maps, as Jaeger's query parser reads them."""
    out: dict[str, str] = {}
    for tag in simple:
        key, sep, value = tag.partition(":")
        if not sep:
            raise BadParam(f"malformed 'tag' parameter, expecting key:value, received: {tag}")
        out[key] = value
    for text in json_maps:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadParam(f"malformed 'tags' parameter, cannot unmarshal JSON: {exc}") from None
        except RecursionError:
            raise BadParam("malformed 'tags' parameter, cannot unmarshal JSON: exceeded max depth") from None
        if not isinstance(doc, dict):
            raise BadParam(f"malformed 'tags' parameter, cannot unmarshal JSON: json: cannot unmarshal {_json_kind(doc)} "
                           "into Go value of type map[string]string")
        for key, value in doc.items():
            if not isinstance(value, str):
                raise BadParam(f"malformed 'tags' parameter, cannot unmarshal JSON: json: cannot unmarshal {_json_kind(value)} "
                               f"into Go value of type string (tag {key!r}: quote the value, e.g. \"{key}\":\"{json.dumps(value)}\")")
            out[key] = value
    return out


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "string" if isinstance(value, str) else "object"


def _envelope(data: Any, total: int = 0, errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"data": data, "total": total, "limit": 0, "offset": 0, "errors": errors}


def _error(status: int, message: str) -> Response:
    body = json.dumps(_envelope(None, errors=[{"code": status, "msg": message}]))
    return Response(body + "\n", status=status, mimetype="text/plain", headers={"X-Content-Type-Options": "nosniff"})


class _Store(NamedTuple):
    """One app instance's traces: its synthesiser and its recorded ticks."""

    synth: TraceSynth
    ticks: tuple[TraceTick, ...]


def _operations(stores: list[_Store]) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for store in stores:
        for service, names in operations(store.synth.spec, store.ticks, store.synth).items():
            out.setdefault(service, set()).update(names)
    return out


def _find_trace(stores: list[_Store], trace_id: int) -> dict[str, Any] | None:
    """The trace as Jaeger's JSON, from the instance whose synthesiser made the id."""
    for store in stores:
        trace = find_trace(store.synth, store.ticks, trace_id)
        if trace is not None:
            return trace_json(store.synth.spec, trace)
    return None


def make_jaeger_app(models: Callable[[], Sequence[AppModel]], clock: Clock, lock: threading.RLock | threading.Lock) -> JaegerAPI:
    """The Jaeger query API over the recorded ticks of the instances ``models`` gives (``AppFleet.instances``)."""
    return JaegerAPI(models, clock, lock)
