"""The twin's Prometheus HTTP API (plus Grafana's and Alertmanager's alert endpoints) as a WSGI app.

Response envelopes, error types and HTTP codes follow Prometheus (``web/api/v1``): success is
``{"status": "success", "data": ...}`` with optional ``warnings``/``infos``; failures are
``{"status": "error", "errorType": ..., "error": ...}`` with 400 (bad_data), 422 (execution),
503 (timeout) or 404 (not_found). Times accept Unix seconds or RFC 3339; durations accept
seconds or Prometheus durations.

Every query runs under :data:`~.promql.limits.API_LIMITS` (samples and wall time, capped further
by a ``timeout`` parameter) and every answer is at most :data:`MAX_RESPONSE_BYTES` of JSON; times
and durations that are not finite or do not fit Prometheus' int64 range are ``bad_data``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from werkzeug.exceptions import MethodNotAllowed
from werkzeug.wrappers import Request, Response

from itbench_gym.lang.durations import DurationError, parse_prometheus_duration
from itbench_gym.lang.timestamps import TimestampError, parse_prometheus_time, rfc3339_nano

from ...clock import Clock
from .alerting import Alert, RuleManager
from .promql.engine import MAX_TIME_SECONDS, Engine
from .promql.errors import PromQLError
from .promql.limits import API_LIMITS, QueryLimits
from .tsdb import TSDB, Matcher, parse_matchers
from .wsgi import RoutedApp, url_map

_STATUS = {"bad_data": 400, "execution": 422, "timeout": 503, "canceled": 503, "not_found": 404, "internal": 500}
_MIN_TIME = -MAX_TIME_SECONDS
#: Largest duration in seconds: Go's time.Duration is int64 nanoseconds.
_MAX_DURATION = 9_223_372_036.854775807
#: Largest JSON answer served; a bigger result is an ``execution`` error telling how to narrow it.
MAX_RESPONSE_BYTES = 8 << 20

BUILD_INFO = {
    "version": "3.5.0",
    "revision": "itbench-gym-twin",
    "branch": "HEAD",
    "buildUser": "itbench-gym",
    "buildDate": "20260101-00:00:00",
    "goVersion": "go1.24",
}


class ApiError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


def parse_time(value: str, name: str) -> float:
    """Prometheus' ``parseTime``: Unix seconds (fractional allowed) or RFC 3339.

    Unlike Prometheus, which wraps silently, times whose milliseconds do not fit int64 are refused.
    """
    invalid = ApiError("bad_data", f'invalid parameter "{name}": cannot parse "{value}" to a valid timestamp')
    text = value.strip()
    if text == "-292273086-05-16T16:47:06Z":  # Prometheus' minTime and maxTime, outside Python's calendar
        return _MIN_TIME
    if text == "292277025-08-18T07:12:54.999999999Z":
        return MAX_TIME_SECONDS
    try:
        t = parse_prometheus_time(value)
    except (TimestampError, ValueError, OverflowError):
        raise invalid from None
    if not (math.isfinite(t) and abs(t) <= MAX_TIME_SECONDS):
        raise invalid
    return t


def parse_duration(value: str, name: str) -> float:
    """Prometheus' ``parseDuration``: seconds (fractional allowed) or a duration such as ``1h30m``."""
    invalid = ApiError("bad_data", f'invalid parameter "{name}": cannot parse "{value}" to a valid duration')
    try:
        d = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(d):
            raise invalid
        if abs(d) > _MAX_DURATION:
            raise ApiError("bad_data",
                           f'invalid parameter "{name}": cannot parse "{value}" to a valid duration. It overflows int64')
        return d
    try:
        return parse_prometheus_duration(value)
    except DurationError:
        raise invalid from None


def _alertmanager_fingerprint(labels: Mapping[str, str]) -> str:
    """Alertmanager's label-set fingerprint (FNV-1a 64 over sorted name/value pairs)."""
    h = 14695981039346656037
    for k in sorted(labels):
        for part in (k, labels[k]):
            for b in part.encode():
                h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
            h = ((h ^ 0xFF) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class PrometheusAPI(RoutedApp):
    """Request handlers; :func:`make_prometheus_app` wraps one in a WSGI callable."""

    def __init__(
        self,
        engine: Engine,
        tsdb: TSDB,
        rules: RuleManager | None,
        clock: Clock,
        metadata: Mapping[str, Mapping[str, str]] | None = None,
        external_url: str = "http://127.0.0.1:9090",
        limits: QueryLimits = API_LIMITS,
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.tsdb = tsdb
        self.rules = rules
        self.clock = clock
        self.metadata = dict(metadata or {})
        self.external_url = external_url
        api: list[tuple[str, Callable[..., Any]]] = [
            ("/api/v1/query", self.query),
            ("/api/v1/query_range", self.query_range),
            ("/api/v1/series", self.series),
            ("/api/v1/labels", self.labels),
            ("/api/v1/label/<path:name>/values", self.label_values),
            ("/api/v1/metadata", self.metadata_endpoint),
            ("/api/v1/alerts", self.alerts),
            ("/api/v1/rules", self.rules_endpoint),
            ("/api/v1/status/buildinfo", self.buildinfo),
            ("/api/prometheus/grafana/api/v1/alerts", self.grafana_alerts),
        ]
        self.handlers: dict[str, Callable[..., Any]] = {fn.__name__: fn for _, fn in api}
        self.url_map = url_map((
            *((path, fn.__name__, ("GET", "POST")) for path, fn in api),
            ("/api/v2/alerts", "am_alerts", ("GET",)),
            ("/-/ready", "ready", ("GET", "HEAD")),
            ("/-/healthy", "healthy", ("GET", "HEAD")),
            ("/", "root", ("GET", "HEAD")),
            ("/query", "ui", ("GET", "HEAD")),
        ))

    # ------------------------------------------------------------- plumbing
    def method_not_allowed(self, request: Request, exc: MethodNotAllowed) -> Response:
        return _error("bad_data", f"method {request.method} not allowed", status=405, headers=exc.get_headers())

    def bad_request(self, request: Request, message: str, status: int = 400) -> Response:
        return _error("bad_data", message, status=status)

    def internal_error(self, request: Request, exc: Exception) -> Response:
        return _error("internal", f"internal error: {exc}")

    def handle(self, request: Request, endpoint: str, args: dict[str, Any]) -> Response:
        if endpoint == "ready":
            return Response("Prometheus Server is Ready.\n", mimetype="text/plain")
        if endpoint == "healthy":
            return Response("Prometheus Server is Healthy.\n", mimetype="text/plain")
        if endpoint == "root":
            return Response("", status=302, headers={"Location": "/query"})
        if endpoint == "ui":
            return Response("<!doctype html><title>Prometheus (itbench-gym twin)</title>", mimetype="text/html")
        if endpoint == "am_alerts":
            try:
                return _json(self.alertmanager_alerts(request))
            except ApiError as exc:
                return Response(json.dumps(exc.message), status=400, mimetype="application/json")
        try:
            data, warnings, infos = self._call(endpoint, request, args)
            text = _success(data, warnings, infos)
        except ApiError as exc:
            return _error(exc.error_type, exc.message)
        except PromQLError as exc:
            return _error(exc.error_type, exc.message)
        return Response(text, mimetype="application/json")

    def _call(self, endpoint: str, request: Request, args: Mapping[str, Any]) -> tuple[Any, list[str], list[str]]:
        out = self.handlers[endpoint](request, **args)
        if isinstance(out, tuple):
            return out
        return out, [], []

    @staticmethod
    def _param(request: Request, name: str) -> str | None:
        if name in request.form:
            return request.form[name]
        return request.args.get(name)

    @staticmethod
    def _params(request: Request, name: str) -> list[str]:
        return request.form.getlist(name) + request.args.getlist(name)

    def _time(self, request: Request, name: str, default: float) -> float:
        raw = self._param(request, name)
        return default if raw in (None, "") else parse_time(raw, name)

    def _limits(self, request: Request) -> QueryLimits:
        """The API's limits, with the deadline shortened by a ``timeout`` parameter (never lengthened)."""
        raw = self._param(request, "timeout")
        if not raw:
            return self.limits
        timeout = max(0.0, parse_duration(raw, "timeout"))
        if self.limits.timeout is not None:
            timeout = min(timeout, self.limits.timeout)
        return QueryLimits(self.limits.max_samples, timeout)

    def _result_limit(self, request: Request) -> int:
        """Prometheus' ``limit`` parameter of the metadata endpoints (0: no limit)."""
        raw = self._param(request, "limit")
        if not raw:
            return 0
        try:
            limit = int(raw)
        except ValueError:
            raise ApiError("bad_data", f'invalid parameter "limit": cannot parse "{raw}" to an integer') from None
        if limit < 0:
            raise ApiError("bad_data", 'invalid parameter "limit": limit must be non-negative')
        return limit

    def _matchers(self, request: Request, required: bool) -> list[list[Matcher]] | None:
        raw = self._params(request, "match[]")
        if not raw:
            if required:
                raise ApiError("bad_data", "no match[] parameter provided")
            return None
        out = []
        for sel in raw:
            try:
                ms = parse_matchers(sel)
            except ValueError as exc:
                raise ApiError("bad_data", str(exc)) from None
            if not any(not m.matches("") for m in ms):
                raise ApiError("bad_data", f"match[] must contain at least one non-empty matcher: {sel}")
            out.append(ms)
        return out

    # ------------------------------------------------------------ endpoints
    def query(self, request: Request) -> tuple[Any, list[str], list[str]]:
        expr = self._param(request, "query") or ""
        t = self._time(request, "time", self.clock.now())
        res = self.engine.instant(expr, t, limits=self._limits(request))
        return _RawJSON(res.to_api_json(MAX_RESPONSE_BYTES)), res.warnings, res.infos

    def query_range(self, request: Request) -> tuple[Any, list[str], list[str]]:
        expr = self._param(request, "query") or ""
        for name in ("start", "end", "step"):
            if not self._param(request, name):
                raise ApiError("bad_data", f'invalid parameter "{name}": missing')
        start = parse_time(self._param(request, "start") or "", "start")
        end = parse_time(self._param(request, "end") or "", "end")
        if end < start:
            raise ApiError("bad_data", 'invalid parameter "end": end timestamp must not be before start time')
        step = parse_duration(self._param(request, "step") or "", "step")
        if step <= 0:
            raise ApiError(
                "bad_data",
                'invalid parameter "step": zero or negative query resolution step widths are not accepted. Try a positive integer',
            )
        if (end - start) / step > 11_000:
            raise ApiError(
                "bad_data",
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
            )
        res = self.engine.range(expr, start, end, step, limits=self._limits(request))
        return _RawJSON(res.to_api_json(MAX_RESPONSE_BYTES)), res.warnings, res.infos

    def _range(self, request: Request) -> tuple[float | None, float | None]:
        start = self._param(request, "start")
        end = self._param(request, "end")
        return (
            parse_time(start, "start") if start else None,
            parse_time(end, "end") if end else None,
        )

    def series(self, request: Request) -> tuple[Any, list[str], list[str]]:
        matcher_sets = self._matchers(request, required=True)
        start, end = self._range(request)
        limit = self._result_limit(request)
        seen: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
        for ms in matcher_sets or []:
            for s in self.tsdb.select(ms, start, end):
                seen[s.labels] = s.metric
        return _truncated([seen[k] for k in sorted(seen)], limit)

    def labels(self, request: Request) -> tuple[Any, list[str], list[str]]:
        matcher_sets = self._matchers(request, required=False)
        start, end = self._range(request)
        limit = self._result_limit(request)
        if matcher_sets is None:
            return _truncated(self.tsdb.label_names(None, start, end), limit)
        names: set[str] = set()
        for ms in matcher_sets:
            names.update(self.tsdb.label_names(ms, start, end))
        return _truncated(sorted(names), limit)

    def label_values(self, request: Request, name: str) -> tuple[Any, list[str], list[str]]:
        if name.startswith("U__"):
            name = _unescape_label_name(name)
        matcher_sets = self._matchers(request, required=False)
        start, end = self._range(request)
        limit = self._result_limit(request)
        if matcher_sets is None:
            return _truncated(self.tsdb.label_values(name, None, start, end), limit)
        values: set[str] = set()
        for ms in matcher_sets:
            values.update(self.tsdb.label_values(name, ms, start, end))
        return _truncated(sorted(values), limit)

    def metadata_endpoint(self, request: Request) -> dict[str, list[dict[str, str]]]:
        metric = self._param(request, "metric")
        limit_raw = self._param(request, "limit")
        try:
            limit = int(limit_raw) if limit_raw else -1
        except ValueError:
            raise ApiError("bad_data", f'invalid parameter "limit": cannot parse "{limit_raw}" to an integer') from None
        out: dict[str, list[dict[str, str]]] = {}
        for name in sorted(self.metadata):
            if metric and name != metric:
                continue
            if 0 <= limit <= len(out):
                break
            md = self.metadata[name]
            out[name] = [{"type": md.get("type", "unknown"), "help": md.get("help", ""), "unit": md.get("unit", "")}]
        return out

    def _alerts(self) -> list[Alert]:
        return self.rules.alerts() if self.rules is not None else []

    def alerts(self, request: Request) -> dict[str, Any]:
        return {"alerts": [a.to_api() for a in self._alerts()]}

    def rules_endpoint(self, request: Request) -> dict[str, Any]:
        kind = self._param(request, "type")
        if kind not in (None, "", "alert", "record"):
            raise ApiError("bad_data", f'invalid parameter "type": not supported value "{kind}"')
        names, group_names = self._params(request, "rule_name[]"), self._params(request, "rule_group[]")
        groups = self.rules.groups(kind or None, rule_names=names, group_names=group_names) if self.rules is not None else []
        if names:
            groups = [g for g in groups if g["rules"]]
        return {"groups": groups}

    def buildinfo(self, request: Request) -> dict[str, str]:
        return dict(BUILD_INFO)

    def grafana_alerts(self, request: Request) -> dict[str, Any]:
        """Grafana's Prometheus-compatible alert list: states ``Alerting``, ``Pending``, ``Normal``."""
        state = {"firing": "Alerting", "pending": "Pending", "inactive": "Normal"}
        alerts = self.rules.all_alerts() if self.rules is not None else []
        return {
            "alerts": [
                {
                    "labels": dict(a.labels),
                    "annotations": dict(a.annotations),
                    "state": state[a.state],
                    "activeAt": rfc3339_nano(a.active_at),
                    "value": a.to_api()["value"],
                }
                for a in alerts
            ]
        }

    def alertmanager_alerts(self, request: Request) -> list[dict[str, Any]]:
        """Alertmanager ``GET /api/v2/alerts``: firing alerts (Prometheus never sends pending ones)."""
        active = request.args.get("active", "true").lower() != "false"
        filters: list[Matcher] = []
        for f in request.args.getlist("filter"):
            try:
                filters.extend(parse_matchers("{" + f.strip().strip("{}") + "}"))
            except ValueError as exc:
                raise ApiError("bad_data", f"bad matcher format: {f}: {exc}") from None
        now = self.clock.now()
        out: list[dict[str, Any]] = []
        if self.rules is None or not active:
            return out
        interval = max((g.interval for g in self.rules.rule_groups()), default=60.0)
        for a in self.rules.firing():
            if not all(m.matches(a.labels.get(m.name, "")) for m in filters):
                continue
            starts = a.fired_at if a.fired_at is not None else a.active_at
            out.append(
                {
                    "labels": dict(a.labels),
                    "annotations": dict(a.annotations),
                    "startsAt": rfc3339_nano(starts),
                    "updatedAt": rfc3339_nano(a.last_eval or now),
                    "endsAt": rfc3339_nano(a.last_eval + 4 * max(interval, 60.0)),
                    "generatorURL": f"{self.external_url}/graph?g0.expr=&g0.tab=1",
                    "fingerprint": _alertmanager_fingerprint(a.labels),
                    "receivers": [{"name": "default"}],
                    "status": {"state": "active", "silencedBy": [], "inhibitedBy": [], "mutedBy": []},
                }
            )
        return out


def _unescape_label_name(name: str) -> str:
    """Prometheus' ``U__`` label-name escaping (``_2e_`` = '.', ``__`` = '_')."""
    body = name[3:]
    out, i = [], 0
    while i < len(body):
        if body.startswith("__", i):
            out.append("_")
            i += 2
        elif body[i] == "_":
            end = body.find("_", i + 1)
            if end < 0:
                return name
            try:
                out.append(chr(int(body[i + 1 : end], 16)))
            except ValueError:
                return name
            i = end + 1
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


class _RawJSON:
    """A ``data`` member already serialised (query results are built with a size bound)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _success(data: Any, warnings: list[str], infos: list[str]) -> str:
    """The success envelope as JSON text; an ``execution`` error if it exceeds ``MAX_RESPONSE_BYTES``."""
    parts = ['"status": "success"', f'"data": {data.text if isinstance(data, _RawJSON) else json.dumps(data)}']
    if warnings:
        parts.append(f'"warnings": {json.dumps(warnings)}')
    if infos:
        parts.append(f'"infos": {json.dumps(infos)}')
    text = "{" + ", ".join(parts) + "}"
    if len(text) > MAX_RESPONSE_BYTES:
        raise ApiError("execution", f"the response exceeds the {MAX_RESPONSE_BYTES >> 20} MiB limit; narrow the query")
    return text


def _truncated(items: list[Any], limit: int) -> tuple[list[Any], list[str], list[str]]:
    """Prometheus' ``limit`` handling: at most ``limit`` items, with a warning when some were cut."""
    if limit and len(items) > limit:
        return items[:limit], ["results truncated due to limit"], []
    return items, [], []


def _json(body: Any, status: int = 200, headers: Any = None) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json", headers=headers)


def _error(error_type: str, message: str, status: int | None = None, headers: Any = None) -> Response:
    return _json(
        {"status": "error", "errorType": error_type, "error": message},
        status=status or _STATUS.get(error_type, 422),
        headers=headers,
    )


def make_prometheus_app(
    engine: Engine,
    tsdb: TSDB,
    rules: RuleManager | None,
    clock: Clock,
    metadata: Mapping[str, Mapping[str, str]] | None = None,
) -> PrometheusAPI:
    """Build the WSGI app serving the Prometheus, Grafana-alert and Alertmanager-alert APIs."""
    return PrometheusAPI(engine, tsdb, rules, clock, metadata)
