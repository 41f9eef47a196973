"""LogQL queries over the Loki HTTP API (the twin's or a real cluster's)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping

import requests

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, text_arg

_HTTP_TIMEOUT_SECONDS = 30.0
_MAX_POINTS_SHOWN = 12
_DEFAULT_RANGE = "15m"
_DEFAULT_LIMIT = 100
_MAX_LIMIT = 5000
#: Stream labels that identify where a line came from, in order of preference.
_SOURCE_LABELS = ("pod", "k8s_pod_name", "service_name", "container", "job")


def _duration(text: str, name: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        value = float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise ToolInputError(f"bad {name} {text!r}; use e.g. 30s, 15m, 1h") from None
    if value <= 0:
        raise ToolInputError(f"{name} must be positive, got {text!r}")
    return value


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


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
    return "\n".join([head] + [f"{_iso(ns / 1e9)} {tag} {line}" for ns, tag, line in entries])


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
        "first, default last 15m) or `logql sum by (service_name) (count_over_time({namespace=\"otel-demo\"} |= "
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
        query = text_arg(args, "query", "text").strip()
        if not query:
            raise ToolInputError('logql needs a query, e.g. `logql {service_name="frontend"} |= "error"`')
        url = ctx.endpoints.loki
        if url is None:
            return ToolResult(text="logs are not available in this scenario (no Loki endpoint)", exit_status=1)
        window = str(args.get("range", _DEFAULT_RANGE))
        span = _duration(window, "range")
        step = _duration(str(args.get("step", "60s")), "step")
        limit = args.get("limit", _DEFAULT_LIMIT)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= _MAX_LIMIT:
            raise ToolInputError(f"limit must be an integer between 1 and {_MAX_LIMIT}, got {limit!r}")
        if span / step > 11_000:
            raise ToolInputError("range / step gives more than 11,000 points; use a larger step")
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
        except (ValueError, KeyError, TypeError) as exc:
            return ToolResult(text=f"Loki sent an unreadable answer: {exc}", exit_status=1)
        kind = data.get("resultType")
        text = _format_streams(data.get("result", []), window, limit) if kind == "streams" else _format_series(data)
        return ToolResult(text=bound_output(text), data={"resultType": kind})
