"""PromQL queries over the Prometheus HTTP API (the twin's or a real cluster's).

No argument value makes the tool raise anything but ``ToolInputError``: the query must be UTF-8
text, ``range`` and ``step`` go through the shared duration parser, and whatever Prometheus answers
(an error envelope, an HTML error page, a malformed body) becomes a ToolResult saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import requests

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, require_text, text_arg
from itbench_gym.tools.durations import count, parse_duration

_HTTP_TIMEOUT_SECONDS = 30.0
_MAX_POINTS_SHOWN = 12
#: Prometheus' limit on the points of one range query.
_MAX_POINTS = 11_000


def _labels(metric: Mapping[str, str]) -> str:
    name = metric.get("__name__", "")
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{inner}}}"


def format_result(data: Mapping[str, Any]) -> str:
    """Prometheus ``data`` -> lines an LLM reads easily (one series per line)."""
    kind = data.get("resultType")
    result: Any = data.get("result")
    if kind in ("scalar", "string"):
        return f"{kind}: {result[1]}"
    if not result:
        return "empty result (no series matched)"
    lines = []
    if kind == "vector":
        for sample in result:
            lines.append(f"{_labels(sample['metric'])} {sample['value'][1]}")
    else:
        for series in result:
            values = series.get("values", [])
            shown = values[-_MAX_POINTS_SHOWN:]
            points = ", ".join(f"{v}@{t:g}" for t, v in shown)
            more = f" (last {len(shown)} of {len(values)} points)" if len(values) > len(shown) else ""
            lines.append(f"{_labels(series['metric'])}: {points}{more}")
    return "\n".join(lines)


class PromQLTool:
    name = "promql"
    description = (
        "Evaluate a PromQL expression on Prometheus, e.g. "
        "`promql sum by (service_name) (rate(traces_span_metrics_calls_total{status_code=\"STATUS_CODE_ERROR\"}[2m]))`. "
        "Instant query at the current time; pass args {query, range: '30m', step: '60s'} for a range query."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "PromQL expression."},
            "range": {"type": "string", "description": "Look back this far for a range query (e.g. 30m)."},
            "step": {"type": "string", "description": "Resolution of a range query (default 60s)."},
        },
        "required": ["query"],
    }
    cost_seconds = 3.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        query = require_text(text_arg(args, "query", "text"), "query").strip()
        if not query:
            raise ToolInputError("promql needs an expression, e.g. `promql up`")
        url = ctx.endpoints.prometheus
        if url is None:
            return ToolResult(text="metrics are not available in this scenario (no Prometheus endpoint)", exit_status=1)
        now = ctx.now()
        if "range" in args:
            window = parse_duration(args["range"], "range")
            step = parse_duration(args.get("step", "60s"), "step")
            if window / step > _MAX_POINTS:
                raise ToolInputError(f"range / step gives {count(window / step)} points; Prometheus allows at most "
                                     f"{_MAX_POINTS:,}, so use a larger step (at least {window / _MAX_POINTS:g}s)")
            path, params = "/api/v1/query_range", {"query": query, "start": now - window, "end": now, "step": step}
        else:
            path, params = "/api/v1/query", {"query": query, "time": now}
        try:
            resp = requests.post(url + path, data=params, timeout=_HTTP_TIMEOUT_SECONDS)
            body = resp.json()
        except (requests.RequestException, ValueError) as exc:
            return ToolResult(text=f"Prometheus request failed: {exc}", exit_status=1)
        if not isinstance(body, dict):
            return ToolResult(text=f"Prometheus sent an unreadable answer (HTTP {resp.status_code})", exit_status=1)
        if body.get("status") != "success":
            return ToolResult(text=f"Error executing query: {body.get('errorType', 'error')}: {body.get('error', '')}", exit_status=1)
        data = body.get("data")
        try:
            if not isinstance(data, Mapping):
                raise TypeError(f"data is {type(data).__name__}, not an object")
            text = format_result(data)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            return ToolResult(text=f"Prometheus sent an unreadable answer: {exc}", exit_status=1)
        return ToolResult(text=bound_output(text), data={"resultType": data.get("resultType")})


