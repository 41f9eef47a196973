"""LogQL queries over the Loki HTTP API (the twin's or a real cluster's).

No argument value makes the tool raise anything but ``ToolInputError``: the query must be UTF-8
text, ``range`` and ``step`` go through the shared duration parser (``range`` at most Loki's
``max_query_length``, 721h), ``limit`` must be a whole number within Loki's 5,000, and whatever
Loki answers becomes a ToolResult.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import requests

from itbench_gym.lang.timestamps import rfc3339
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, require_text, text_arg
from itbench_gym.tools.durations import count, parse_duration, shown

_HTTP_TIMEOUT_SECONDS = 30.0
_MAX_POINTS_SHOWN = 12
_DEFAULT_RANGE = "15m"
_DEFAULT_LIMIT = 100
_MAX_LIMIT = 5000
#: Loki's ``max_query_length``.
_MAX_RANGE_SECONDS = 721 * 3600.0
#: Stream labels that identify where a line came from, in order of preference.
_SOURCE_LABELS = ("pod", "k8s_pod_name", "service_name", "container", "job")


def _iso(seconds: float) -> str:
    try:
        return rfc3339(seconds, 3)
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g}"


def _labels(metric: Mapping[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"


def _format_streams(result: list[Mapping[str, Any]], window: str, limit: int) -> str:
    entries = []
    for stream in result:
        labels = stream.get("stream", {})
        source = next((labels[k] for k in _SOURCE_LABELS if labels.get(k)), _labels(labels))
        level = labels.get("detected_level")
        tag = f"{source} [{level}]" if level else source
        entries += [(int(ns), tag, line) for ns, line in stream.get("values", [])]
    if not entries:
        return f"no log lines matched in the last {window}"
    entries.sort()
    head = f"{len(entries)} line(s) from {len(result)} stream(s) in the last {window}"
    if len(entries) >= limit:
        head += f" (the newest {limit}; pass limit for more, up to {_MAX_LIMIT})"
    return "\n".join([head] + _pipeline_errors(result) + [f"{_iso(ns / 1e9)} {tag} {line}" for ns, tag, line in entries])


def _pipeline_errors(result: list[Mapping[str, Any]]) -> list[str]:
    """One note per distinct ``__error__`` the pipeline set (Loki keeps such lines, unformatted/unparsed)."""
    seen: dict[tuple[str, str], int] = {}
    for stream in result:
        labels = stream.get("stream", {})
        if labels.get("__error__"):
            key = (str(labels["__error__"]), str(labels.get("__error_details__", "")))
            seen[key] = seen.get(key, 0) + len(stream.get("values", []))
    return [f"note: {n} line(s) carry __error__={err}" + (f" ({details})" if details else "")
            + '; add | __error__="" to drop them' for (err, details), n in seen.items()]


def _format_series(data: Mapping[str, Any]) -> str:
    kind, result = data.get("resultType"), data.get("result") or []
    if kind == "scalar":
        return f"scalar: {result[1]}"
    if not result:
        return "empty result (no series matched)"
    lines = []
    for series in result:
        values = series.get("values") or [series.get("value")]
        shown = values[-_MAX_POINTS_SHOWN:]
        points = ", ".join(f"{v}@{_iso(float(t))[:-5]}Z" for t, v in shown)
        more = f" (last {len(shown)} of {len(values)} points)" if len(values) > len(shown) else ""
        lines.append(f"{_labels(series.get('metric', {}))}: {points}{more}")
    return "\n".join(lines)


class LogQLTool:
    name = "logql"
    description = (
        "Query logs in Loki with LogQL, e.g. `logql {service_name=\"frontend\"} |= \"error\"` (log lines, newest "
        "first, default last 15m) or `logql sum by (service_name) (count_over_time({service_name=~\".+\"} |= "
        "\"error\" [5m]))` (metric). Stream labels: service_name, namespace, pod, container, app, job, k8s_* and "
        "per-line detected_level. Args: {query, range: '15m', limit: 100, step: '60s'}."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "LogQL log or metric query."},
            "range": {"type": "string", "description": "How far back to look (default 15m), e.g. 10m, 1h."},
            "limit": {"type": "integer", "description": f"Most log lines to return (default {_DEFAULT_LIMIT}, max {_MAX_LIMIT})."},
            "step": {"type": "string", "description": "Resolution of a metric query (default 60s)."},
        },
        "required": ["query"],
    }
    cost_seconds = 3.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        query = require_text(text_arg(args, "query", "text"), "query").strip()
        if not query:
            raise ToolInputError('logql needs a query, e.g. `logql {service_name="frontend"} |= "error"`')
        url = ctx.endpoints.loki
        if url is None:
            return ToolResult(text="logs are not available in this scenario (no Loki endpoint)", exit_status=1)
        raw_window = args.get("range", _DEFAULT_RANGE)
        span = parse_duration(raw_window, "range", maximum=_MAX_RANGE_SECONDS)
        window = raw_window.strip() if isinstance(raw_window, str) else f"{span:g}s"
        step = parse_duration(args.get("step", "60s"), "step")
        limit = args.get("limit", _DEFAULT_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= _MAX_LIMIT:
            raise ToolInputError(f"limit must be an integer between 1 and {_MAX_LIMIT}, got {shown(limit)}")
        if span / step > 11_000:
            raise ToolInputError(f"range / step gives {count(span / step)} points; Loki allows at most 11,000, so use a "
                                 f"larger step (at least {span / 11_000:g}s)")
        now = ctx.now()
        params: dict[str, str | int | float] = {"query": query, "start": str(int((now - span) * 1e9)), "end": str(int(now * 1e9)),
                  "limit": limit, "direction": "backward", "step": step}
        try:
            resp = requests.get(url + "/loki/api/v1/query_range", params=params, timeout=_HTTP_TIMEOUT_SECONDS)
        except requests.RequestException as exc:
            return ToolResult(text=f"Loki request failed: {exc}", exit_status=1)
        if resp.status_code != 200:
            return ToolResult(text=f"LogQL error: {resp.text.strip() or resp.reason}", exit_status=1)
        try:
            data = resp.json()["data"]
            kind = data.get("resultType")
            text = _format_streams(data.get("result", []), window, limit) if kind == "streams" else _format_series(data)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            return ToolResult(text=f"Loki sent an unreadable answer: {exc!r}", exit_status=1)
        return ToolResult(text=bound_output(text), data={"resultType": kind})
