"""The twin's Loki HTTP API as a WSGI app (``/loki/api/v1/*`` and ``/ready``).

Envelopes follow Loki: ``{"status": "success", "data": ...}``; query results carry
``resultType`` ``streams`` (nanosecond string timestamps), ``matrix``, ``vector`` or ``scalar``
and a ``stats`` object. Bad requests get HTTP 400 with a plain-text body, as Loki's
``WriteError`` sends, e.g. ``parse error at line 1, col 12: syntax error: unexpected ...``;
limits answer with Loki's messages and statuses (see :mod:`.limits`): 400 for the query limits,
504 for the timeout, 413 for a response over ``MAX_RESPONSE_BYTES``. Times and durations must be
finite and fit Go's int64 nanoseconds, and parameters must be valid UTF-8.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
from werkzeug.wrappers import Request, Response

from itbench_gym.backends.sim.wsgi import RoutedApp, url_map
from itbench_gym.clock import Clock
from itbench_gym.lang.durations import DurationError, format_go_duration, parse_prometheus_duration
from itbench_gym.lang.gofloat import format_f
from itbench_gym.lang.timestamps import TimestampError, parse_loki_time

from . import ast as A
from .engine import Engine, LogSource, Series, Streams
from .errors import LogQLError
from .limits import MAX_ENTRIES, MAX_QUERY_LENGTH_S, MAX_RESPONSE_BYTES, LimitError, check_matchers, response_too_large
from .syntax import parse

BUILD_INFO = {"version": "3.4.2", "revision": "itbench-gym-twin", "branch": "HEAD", "buildUser": "itbench-gym",
              "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24"}
_DEFAULT_QUERY_RANGE_S = 3600.0
_DEFAULT_LABELS_RANGE_S = 6 * 3600.0
#: Largest time and duration magnitude in seconds: Go keeps both as int64 nanoseconds.
_MAX_SECONDS = 9_223_372_036.0


class BadRequest(LogQLError):
    """A request parameter Loki would reject."""


def parse_timestamp(value: str | None, default: float, name: str) -> float:
    """Loki's ``parseTimestamp``: float seconds, integer seconds (<= 10 digits) or nanoseconds, or RFC3339."""
    if value is None or value == "":
        return default
    invalid = BadRequest(f'invalid parameter "{name}": cannot parse "{value}" as a timestamp '
                         "(Unix seconds, Unix nanoseconds or RFC3339)")
    try:
        seconds = parse_loki_time(value)
    except (TimestampError, ValueError, OverflowError):
        raise invalid from None
    if not (math.isfinite(seconds) and abs(seconds) <= _MAX_SECONDS):
        raise invalid
    return seconds


def parse_seconds_or_duration(value: str, name: str) -> float:
    """Loki's ``parseSecondsOrDuration``: a number of seconds or a duration such as ``1m30s``."""
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise BadRequest(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration')
        if abs(seconds) > _MAX_SECONDS:
            raise BadRequest(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration. It overflows int64')
        return seconds
    try:
        seconds = parse_prometheus_duration(value)
    except DurationError:
        raise BadRequest(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration') from None
    if abs(seconds) > _MAX_SECONDS:
        raise BadRequest(f'invalid parameter "{name}": cannot parse "{value}" to a valid duration. It overflows int64')
    return seconds


def _ns(t: float) -> str:
    return str(int(round(t * 1e9)))


def _sec(t: float) -> float | int:
    ms = round(t * 1000)
    return ms // 1000 if ms % 1000 == 0 else ms / 1000




class LokiAPI(RoutedApp):
    """Request handlers; ``__call__`` makes it a WSGI app."""

    def __init__(self, source: LogSource, clock: Clock, lock: AbstractContextManager[Any], namespace: str) -> None:
        self.engine = Engine(source)  # each query runs under Loki's limits (see .limits)
        self.source = source
        self.clock = clock
        self.lock = lock
        self.namespace = namespace
        routes: list[tuple[str, Callable[..., Any]]] = [
            ("/loki/api/v1/query", self.query),
            ("/loki/api/v1/query_range", self.query_range),
            ("/loki/api/v1/labels", self.labels),
            ("/loki/api/v1/label", self.labels),
            ("/loki/api/v1/label/<name>/values", self.label_values),
            ("/loki/api/v1/series", self.series),
            ("/loki/api/v1/status/buildinfo", self.buildinfo),
        ]
        self.handlers = {f"{path}": fn for path, fn in routes}
        self.url_map = url_map((*((path, path, ("GET", "POST")) for path, _ in routes), ("/ready", "ready", ("GET", "HEAD"))))

    def handle(self, request: Request, endpoint: str, args: dict[str, Any]) -> Response:
        if endpoint == "ready":
            return Response("ready\n", mimetype="text/plain")
        try:
            with self.lock:
                body = self.handlers[endpoint](request, **args)
            text = json.dumps(body)
            if len(text) > MAX_RESPONSE_BYTES:
                raise response_too_large(len(text))
        except LogQLError as exc:
            return self.bad_request(request, exc.message, exc.status if isinstance(exc, LimitError) else 400)
        return Response(text, mimetype="application/json")

    def bad_request(self, request: Request, message: str, status: int = 400) -> Response:
        """Loki's ``WriteError``: the message as plain text."""
        return Response(message, status=status, mimetype="text/plain", headers={"X-Content-Type-Options": "nosniff"})

    def internal_error(self, request: Request, exc: Exception) -> Response:
        return self.bad_request(request, f"internal error: {exc}", status=500)

    # -- parameters -----------------------------------------------------------------------------
    @staticmethod
    def _param(request: Request, name: str) -> str | None:
        if name in request.form:
            return request.form[name]
        return request.args.get(name)

    def _window(self, request: Request, default_span: float) -> tuple[float, float]:
        end = parse_timestamp(self._param(request, "end"), self.clock.now(), "end")
        since = self._param(request, "since")
        span = parse_seconds_or_duration(since, "since") if since else default_span
        start = parse_timestamp(self._param(request, "start"), end - span, "start")
        return start, end

    def _limit(self, request: Request) -> int:
        raw = self._param(request, "limit")
        if raw in (None, ""):
            return 100
        try:
            limit = int(raw)
        except ValueError:
            raise BadRequest(f'invalid parameter "limit": cannot parse "{raw}" as an integer') from None
        if limit <= 0:
            raise BadRequest("limit must be a positive value")
        if limit > MAX_ENTRIES:
            raise BadRequest(f"max entries limit per query exceeded, limit > max_entries_limit_per_query ({limit} > {MAX_ENTRIES})")
        return limit

    def _direction(self, request: Request) -> str:
        raw = self._param(request, "direction") or "backward"
        if raw.lower() not in ("backward", "forward"):
            raise BadRequest(f"invalid direction '{raw}'")
        return raw.lower()

    def _query(self, request: Request) -> A.Expr:
        return parse(self._param(request, "query") or "")

    # -- endpoints -------------------------------------------------------------------------------
    def query_range(self, request: Request) -> dict[str, Any]:
        expr = self._query(request)
        start, end = self._window(request, _DEFAULT_QUERY_RANGE_S)
        if end < start:
            raise BadRequest("end timestamp must not be before or equal to start time")
        if end - start > MAX_QUERY_LENGTH_S:
            raise BadRequest(f"the query time range exceeds the limit (query length: {format_go_duration(math.floor(end - start))}, "
                             f"limit: {format_go_duration(MAX_QUERY_LENGTH_S)})")
        limit = self._limit(request)
        direction = self._direction(request)
        if isinstance(expr, A.LogSelector):
            return _streams_body(self.engine.logs(expr, start, end, limit, direction))
        raw_step = self._param(request, "step")
        step = parse_seconds_or_duration(raw_step, "step") if raw_step else max(math.ceil((end - start) / 250), 1)
        if step <= 0:
            raise BadRequest("zero or negative query resolution step widths are not accepted. Try a positive integer")
        return _matrix_body(self.engine.metrics(expr, start, end, step))

    def query(self, request: Request) -> dict[str, Any]:
        expr = self._query(request)
        t = parse_timestamp(self._param(request, "time"), self.clock.now(), "time")
        self._limit(request)
        self._direction(request)
        return _vector_body(self.engine.metrics(expr, t, t, 0.0), _sort_order(expr))

    def _selected(self, request: Request, start: float, end: float) -> list[dict[str, str]]:
        raw = self._param(request, "query")
        matchers: tuple[A.Matcher, ...] = ()
        if raw:
            expr = parse(raw)
            check_matchers(expr)
            if not isinstance(expr, A.LogSelector):
                raise BadRequest(f"the query parameter must be a stream selector such as {{namespace=\"{self.namespace}\"}}")
            matchers = expr.matchers
        return [labels for _, labels in self.engine.select_streams(matchers, start, end)]

    def labels(self, request: Request) -> dict[str, Any]:
        start, end = self._window(request, _DEFAULT_LABELS_RANGE_S)
        names = sorted({k for labels in self._selected(request, start, end) for k in labels})
        return {"status": "success", "data": names}

    def label_values(self, request: Request, name: str) -> dict[str, Any]:
        start, end = self._window(request, _DEFAULT_LABELS_RANGE_S)
        values = sorted({labels[name] for labels in self._selected(request, start, end) if name in labels})
        return {"status": "success", "data": values}

    def series(self, request: Request) -> dict[str, Any]:
        start, end = self._window(request, _DEFAULT_LABELS_RANGE_S)
        selectors = request.form.getlist("match[]") + request.args.getlist("match[]")
        selectors += request.form.getlist("match") + request.args.getlist("match")
        groups: list[tuple[A.Matcher, ...]] = []
        for text in selectors:
            expr = parse(text)
            if not isinstance(expr, A.LogSelector) or expr.stages:
                raise BadRequest(f"invalid match[] {text!r}: expected a stream selector such as {{namespace=\"{self.namespace}\"}}")
            groups.append(expr.matchers)
        seen: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        for _, labels in self.engine.select_streams((), start, end):
            if not groups or any(all(m.matches(labels.get(m.name, "")) for m in g) for g in groups):
                seen[tuple(sorted(labels.items()))] = labels
        return {"status": "success", "data": [seen[k] for k in sorted(seen)]}

    def buildinfo(self, request: Request) -> dict[str, Any]:
        return dict(BUILD_INFO)


class _Size:
    """A running lower bound of a response's JSON size, so a huge one is refused before it is built."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0

    def add(self, chars: int) -> None:
        self.total += chars
        if self.total > MAX_RESPONSE_BYTES:
            raise response_too_large(self.total)


def _streams_body(result: Streams) -> dict[str, Any]:
    entries = sum(len(v) for _, v in result.streams)
    size = _Size()
    out = []
    for labels, values in result.streams:
        size.add(sum(len(k) + len(v) + 6 for k, v in labels.items()))
        rows = []
        for t, line in values:
            size.add(len(line) + 26)  # 19 digits of nanoseconds, quotes, brackets and commas
            rows.append([_ns(t), line])
        out.append({"stream": labels, "values": rows})
    return {"status": "success", "data": {"resultType": "streams", "result": out, "stats": result.stats.to_api(entries)}}


def _matrix_body(result: Series) -> dict[str, Any]:
    steps = result.steps.tolist()
    series: dict[tuple[tuple[str, str], ...], np.ndarray] = {(): result.scalar} if result.scalar is not None else result.series
    size = _Size()
    out = []
    for key in sorted(series):
        values = series[key].tolist()
        points = []
        for t, v in zip(steps, values, strict=True):
            if not math.isnan(v):
                text = format_f(v)
                size.add(len(text) + 16)
                points.append([_sec(t), text])
        if points:
            size.add(sum(len(k) + len(v) + 6 for k, v in key))
            out.append({"metric": dict(key), "values": points})
    return {"status": "success", "data": {"resultType": "matrix", "result": out, "stats": result.stats.to_api(0)}}


def _sort_order(expr: A.Expr) -> int:
    """1 for ``sort(...)``, -1 for ``sort_desc(...)``, 0 otherwise (results ordered by labels)."""
    if isinstance(expr, A.VectorAggregation) and expr.op in ("sort", "sort_desc"):
        return 1 if expr.op == "sort" else -1
    return 0


def _vector_body(result: Series, order: int) -> dict[str, Any]:
    t = float(result.steps[0])
    if result.scalar is not None:
        return {"status": "success", "data": {"resultType": "scalar", "result": [_sec(t), format_f(float(result.scalar[0]))],
                                              "stats": result.stats.to_api(0)}}
    rows = [(key, float(v[0])) for key, v in sorted(result.series.items()) if not math.isnan(v[0])]
    if order:
        rows.sort(key=lambda row: order * row[1])
    out = [{"metric": dict(key), "value": [_sec(t), format_f(v)]} for key, v in rows]
    return {"status": "success", "data": {"resultType": "vector", "result": out, "stats": result.stats.to_api(0)}}


def make_loki_app(model: LogSource, clock: Clock, lock: AbstractContextManager[Any] | None, namespace: str) -> LokiAPI:
    """The WSGI app serving Loki's query API over ``model``'s logs for ``namespace``."""
    return LokiAPI(model, clock, lock if lock is not None else threading.RLock(), namespace)
