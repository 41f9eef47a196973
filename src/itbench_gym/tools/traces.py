"""Trace search over the Jaeger query API (the twin's or a real cluster's).

``traces service=frontend error=true limit=20 lookback=10m`` lists matching traces, one line each
(root operation, duration, span count, error flag and the first failing span's message);
``traces trace_id=<id>`` prints one trace as an indented span tree. The tool sends explicit
``start``/``end`` microseconds, so it works unchanged against any Jaeger.

No argument value makes the tool raise anything but ``ToolInputError``: text must be UTF-8,
``lookback`` goes through the shared duration parser, ``limit`` must be a whole number in range,
and whatever Jaeger answers becomes a ToolResult.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

import requests

from itbench_gym.lang.timestamps import rfc3339_ns
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, require_text
from itbench_gym.tools.durations import parse_duration, shown

_HTTP_TIMEOUT_SECONDS = 30.0
_DEFAULT_LIMIT = 20
_DEFAULT_LOOKBACK = "1h"
#: Traces fetched to rank by duration (Jaeger itself returns the most recent first).
_RANKING_FETCH = 100
_KEYS = {
    "service": "service", "operation": "operation", "tags": "tags", "tag": "tags", "min_duration": "min_duration",
    "minduration": "min_duration", "max_duration": "max_duration", "maxduration": "max_duration", "lookback": "lookback",
    "limit": "limit", "trace_id": "trace_id", "traceid": "trace_id", "sort": "sort", "error": "error",
}
_HEX_ID = re.compile(r"^[0-9a-fA-F]{16,32}$")
_SHOWN_TAGS = ("http.method", "http.url", "http.target", "http.status_code", "rpc.grpc.status_code", "db.system",
               "messaging.destination.name")


def _tags(value: Any) -> dict[str, str]:
    """``{"k": "v"}``, a JSON object string, or ``k:v,k2:v2``."""
    if isinstance(value, Mapping):
        return {require_text(str(k), "tags"): require_text(_tag_value(v), "tags") for k, v in value.items()}
    text = require_text(_tag_value(value), "tags").strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ToolInputError(f"tags is not valid JSON: {exc}") from None
        except RecursionError:
            raise ToolInputError("tags is not valid JSON: nested too deeply") from None
        if not isinstance(doc, dict):
            raise ToolInputError("tags must be a JSON object such as {\"error\": \"true\"}")
        return {str(k): _tag_value(v) for k, v in doc.items()}
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, val = part.partition(":")
        if not sep:
            key, sep, val = part.partition("=")
        if not sep or not key:
            raise ToolInputError(f"bad tag {part!r}; write key:value, e.g. http.status_code:500")
        out[key.strip()] = val.strip()
    return out


def _tag_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    return shown(v) if isinstance(v, int) and abs(v) > 10**100 else str(v)


def parse_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """Tool-call args or the ``text`` of ``traces k=v ...`` -> normalised query fields."""
    raw: dict[str, Any] = {str(k): v for k, v in args.items() if k != "text"}
    tags: dict[str, str] = {}
    if "text" in args:
        try:
            tokens = shlex.split(require_text(args["text"], "text"))
        except ValueError as exc:
            raise ToolInputError(f"cannot parse the traces command: {exc}") from None
        for tok in tokens:
            key, sep, value = tok.partition("=")
            if not sep:
                if _HEX_ID.match(tok):
                    raw["trace_id"] = tok
                elif "service" not in raw:
                    raw["service"] = tok
                else:
                    raise ToolInputError(f"unexpected word {shown(tok)}; write key=value, e.g. service=frontend error=true")
                continue
            raw[key] = value
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = _KEYS.get(key.lower().replace("-", "_"))
        if name == "tags":
            tags.update(_tags(value))
        elif name == "error":
            tags["error"] = require_text(_tag_value(value), "error").lower()
        elif name is not None:
            out[name] = value
        elif "." in key:
            tags[require_text(key, "tag name")] = require_text(_tag_value(value), key)
        else:
            raise ToolInputError(f"unknown argument {shown(key)}; use {', '.join(sorted(set(_KEYS.values())))} "
                                 "or a dotted tag such as http.status_code=500")
    out["tags"] = tags
    return out


def _ms(micros: float) -> str:
    ms = micros / 1000.0
    return f"{ms / 1000.0:.2f}s" if ms >= 1000 else f"{ms:.2f}ms"


def _tag_map(tags: list[dict[str, Any]]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in tags}


def _first_error(trace: Mapping[str, Any]) -> str:
    """Where the trace's failure started: the last failing span that recorded an exception."""
    origin = None
    for span in trace["spans"]:
        tags = _tag_map(span.get("tags", []))
        if tags.get("error") is True and (span.get("logs") or origin is None):
            origin = (span, tags)
    if origin is None:
        return ""
    span, tags = origin
    service = trace["processes"][span["processID"]]["serviceName"]
    return f"{service} {span['operationName']}: {tags.get('otel.status_description', 'error')}"


def _summary(trace: Mapping[str, Any]) -> tuple[str, float, int]:
    spans = trace["spans"]
    root = min(spans, key=lambda s: (bool(s.get("references")), s["startTime"]))
    start = min(s["startTime"] for s in spans)
    duration = max(s["startTime"] + s["duration"] for s in spans) - start
    error = any(_tag_map(s.get("tags", [])).get("error") is True for s in spans)
    when = rfc3339_ns(int(start) * 1000, 3)
    service = trace["processes"][root["processID"]]["serviceName"]
    line = (f"{trace['traceID']}  {when}  {service}: {root['operationName']}  {_ms(duration)}  "
            f"{len(spans)} spans  {'ERROR' if error else 'ok'}")
    if error:
        line += f"\n    error: {_first_error(trace)}"
    return line, duration, start


def format_traces(traces: list[Mapping[str, Any]], sort: str, limit: int, what: str) -> str:
    rows = [_summary(t) for t in traces]
    if sort == "duration":
        rows.sort(key=lambda r: -r[1])
        order = "slowest first"
    else:
        rows.sort(key=lambda r: -r[2])
        order = "most recent first"
    if not rows:
        return f"no traces found ({what})"
    shown = rows[:limit]
    head = f"{len(shown)} trace{'s' if len(shown) != 1 else ''} ({what}), {order}:"
    return "\n".join([head] + [r[0] for r in shown])


def format_trace(trace: Mapping[str, Any]) -> str:
    """One trace as an indented span tree with offsets, durations and the telling tags."""
    spans = trace["spans"]
    by_id = {s["spanID"]: s for s in spans}
    children: dict[str | None, list[Mapping[str, Any]]] = {}
    for s in spans:
        parent = next((r["spanID"] for r in s.get("references", []) if r["spanID"] in by_id), None)
        children.setdefault(parent, []).append(s)
    line, _, start = _summary(trace)
    out = [line.split("\n")[0]]

    def walk(span: Mapping[str, Any], depth: int) -> None:
        tags = _tag_map(span.get("tags", []))
        service = trace["processes"][span["processID"]]["serviceName"]
        shown = " ".join(f"{k}={tags[k]}" for k in _SHOWN_TAGS if k in tags)
        text = (f"{'  ' * depth}+{_ms(span['startTime'] - start)} {_ms(span['duration'])}  {service}  "
                f"{span['operationName']} [{tags.get('span.kind', '?')}]")
        if shown:
            text += f"  {shown}"
        if tags.get("error") is True:
            text += f"  ERROR: {tags.get('otel.status_description', '')}".rstrip()
        out.append(text)
        for child in sorted(children.get(span["spanID"], []), key=lambda s: s["startTime"]):
            walk(child, depth + 1)

    for root in sorted(children.get(None, []), key=lambda s: s["startTime"]):
        walk(root, 1)
    return "\n".join(out)


def _limit(value: Any) -> int:
    """``limit`` as a whole number of traces in [1, 1500] (strings of digits accepted)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ToolInputError(f"limit must be a whole number, got {type(value).__name__}")
    if isinstance(value, str):
        text = require_text(value, "limit").strip()
        if not re.fullmatch(r"[+-]?\d{1,18}", text):
            raise ToolInputError(f"limit must be a whole number between 1 and 1500, got {shown(value)}")
        number: int | float = int(text)
    else:
        number = value
    if isinstance(number, float) and not number.is_integer():
        raise ToolInputError(f"limit must be a whole number between 1 and 1500, got {shown(value)}")
    if not 1 <= number <= 1500:
        raise ToolInputError(f"limit must be between 1 and 1500, got {shown(value)}")
    return int(number)


def _jaeger_error(resp: requests.Response) -> str:
    try:
        errors = resp.json().get("errors") or []
        return "; ".join(str(e.get("msg", e)) for e in errors) or resp.text.strip()
    except (AttributeError, TypeError, ValueError):
        return resp.text.strip()


class TracesTool:
    name = "traces"
    description = (
        "Search distributed traces in Jaeger, e.g. `traces service=frontend error=true limit=20 lookback=10m`, "
        "`traces service=checkout sort=duration` (slowest first), `traces service=frontend http.status_code=500`, "
        "or show one trace as a span tree with `traces trace_id=<id>`. Tags: error=true, key=value or tags='k:v,k2:v2'; "
        "durations: min_duration=500ms max_duration=2s."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "service": {"type": "string", "description": "Service whose spans must match (required unless trace_id)."},
            "operation": {"type": "string", "description": "Span name within the service."},
            "tags": {"type": "object", "additionalProperties": {"type": "string"},
                     "description": "Span/process tags that must all match, e.g. {\"error\": \"true\"}."},
            "min_duration": {"type": "string", "description": "Matching span lasts at least this (Go duration: 500ms, 1.5s)."},
            "max_duration": {"type": "string", "description": "Matching span lasts at most this."},
            "lookback": {"type": "string", "description": "How far back to search (default 1h)."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1500, "description": "Traces to show (default 20)."},
            "sort": {"type": "string", "enum": ["recent", "duration"], "description": "recent (default) or duration (slowest first)."},
            "trace_id": {"type": "string", "description": "Show this trace as a span tree."},
        },
    }
    cost_seconds = 2.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        q = parse_args(args)
        url = ctx.endpoints.jaeger
        if url is None:
            return ToolResult(text="traces are not available in this scenario (no Jaeger endpoint)", exit_status=1)
        if q.get("trace_id"):
            return self._one(url, q["trace_id"])
        service = require_text(_tag_value(q.get("service", "")), "service").strip()
        if not service:
            raise ToolInputError("traces needs service=<name> (or trace_id=<id>), e.g. `traces service=frontend error=true`")
        limit = _limit(q.get("limit", _DEFAULT_LIMIT))
        sort = _tag_value(q.get("sort", "recent"))
        if sort not in ("recent", "duration"):
            raise ToolInputError(f"sort must be 'recent' or 'duration', got {shown(sort)}")
        raw_lookback = q.get("lookback", _DEFAULT_LOOKBACK)
        lookback_s = parse_duration(raw_lookback, "lookback")
        lookback = raw_lookback.strip() if isinstance(raw_lookback, str) else f"{lookback_s:g}s"
        now = ctx.now()
        params: dict[str, Any] = {
            "service": service,
            "start": int((now - lookback_s) * 1e6),
            "end": int(now * 1e6),
            "limit": max(limit, _RANKING_FETCH) if sort == "duration" else limit,
        }
        if q.get("operation"):
            params["operation"] = require_text(_tag_value(q["operation"]), "operation")
        if q["tags"]:
            params["tags"] = json.dumps(q["tags"])
        for key, param in (("min_duration", "minDuration"), ("max_duration", "maxDuration")):
            if q.get(key):
                params[param] = require_text(_tag_value(q[key]), key)
        try:
            resp = requests.get(url + "/api/traces", params=params, timeout=_HTTP_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            return ToolResult(text=f"Jaeger request failed: {exc}", exit_status=1)
        if resp.status_code != 200:
            return ToolResult(text=f"Jaeger error ({resp.status_code}): {_jaeger_error(resp)}", exit_status=1)
        what = ", ".join([f"service={service}"] + [f"{k}={params[k]}" for k in ("operation", "minDuration", "maxDuration") if k in params]
                         + [f"{k}={v}" for k, v in q["tags"].items()] + [f"last {lookback}"])
        try:
            traces = resp.json().get("data") or []
            text = format_traces(traces, sort, limit, what)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            return ToolResult(text=f"Jaeger sent an unreadable answer: {exc!r}", exit_status=1)
        return ToolResult(text=bound_output(text), data={"count": min(len(traces), limit)})

    def _one(self, url: str, raw_id: Any) -> ToolResult:
        trace_id = _tag_value(raw_id)
        if not re.fullmatch(r"[0-9a-fA-F]{1,32}", trace_id):
            raise ToolInputError(f"trace_id must be up to 32 hex digits, got {shown(trace_id)}")
        try:
            resp = requests.get(f"{url}/api/traces/{trace_id}", timeout=_HTTP_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            return ToolResult(text=f"Jaeger request failed: {exc}", exit_status=1)
        if resp.status_code == 404:
            return ToolResult(text=f"trace {trace_id} not found", exit_status=1)
        if resp.status_code != 200:
            return ToolResult(text=f"Jaeger error ({resp.status_code}): {_jaeger_error(resp)}", exit_status=1)
        try:
            data = resp.json().get("data") or []
            if not data:
                return ToolResult(text=f"trace {trace_id} not found", exit_status=1)
            return ToolResult(text=bound_output(format_trace(data[0])), data={"spans": len(data[0]["spans"])})
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            return ToolResult(text=f"Jaeger sent an unreadable answer: {exc!r}", exit_status=1)
