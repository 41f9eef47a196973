"""PromQL queries over the Prometheus HTTP API (the twin's or a real cluster's)."""

from __future__ import annotations

from typing import Any, Mapping

import requests

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, text_arg

_HTTP_TIMEOUT_SECONDS = 30.0
_MAX_POINTS_SHOWN = 12


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


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text[-1] in units:
            return float(text[:-1]) * units[text[-1]]
        return float(text)
    except (ValueError, IndexError):
        raise ToolInputError(f"bad duration {text!r}; use e.g. 30s, 15m, 1h") from None


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
        query = text_arg(args, "query", "text").strip()
        if not query:
            raise ToolInputError("promql needs an expression, e.g. `promql up`")
        url = ctx.endpoints.prometheus
        if url is None:
            return ToolResult(text="metrics are not available in this scenario (no Prometheus endpoint)", exit_status=1)
        now = ctx.now()
        if "range" in args:
            window = _duration(str(args["range"]))
            step = _duration(str(args.get("step", "60s")))
            if step <= 0 or window <= 0 or window / step > 11_000:
                raise ToolInputError("range and step must be positive and give at most 11,000 points")
            path, params = "/api/v1/query_range", {"query": query, "start": now - window, "end": now, "step": step}
        else:
            path, params = "/api/v1/query", {"query": query, "time": now}
        try:
            resp = requests.post(url + path, data=params, timeout=_HTTP_TIMEOUT_SECONDS)
            body = resp.json()
        except (requests.RequestException, ValueError) as exc:
            return ToolResult(text=f"Prometheus request failed: {exc}", exit_status=1)
        if body.get("status") != "success":
            return ToolResult(text=f"Error executing query: {body.get('errorType', 'error')}: {body.get('error', '')}", exit_status=1)
        return ToolResult(text=bound_output(format_result(body["data"])), data={"resultType": body["data"].get("resultType")})


