"""PromQL queries over the Prometheus HTTP API (the twin's or a real cluster's).

No argument value makes the tool raise anything but ``ToolInputError``: the query must be UTF-8
text, ``range`` and ``step`` go through the shared duration parser, and whatever Prometheus answers
(an error envelope, an HTML error page, a malformed body) becomes a ToolResult saying so.

The text names every time in RFC 3339 (UTC), because an agent reasons about "when" in the same
terms as the alerts, events and logs it reads. A range result shows every point of every series
while the output fits the tools' output bound; beyond it, each series keeps its newest points and
a marker says how many points (and, if even that does not fit, how many series) were left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import requests

from itbench_gym.lang.timestamps import rfc3339
from itbench_gym.tools.base import MAX_OUTPUT_CHARS, ToolContext, ToolInputError, ToolResult, bound_output, require_text, text_arg
from itbench_gym.tools.durations import count, parse_duration

_HTTP_TIMEOUT_SECONDS = 30.0
#: Prometheus' limit on the points of one range query.
_MAX_POINTS = 11_000
#: Characters kept free under the output bound for the header and truncation markers.
_RESERVE = 400


def _labels(metric: Mapping[str, str]) -> str:
    name = metric.get("__name__", "")
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{inner}}}"


def timestamp(t: Any) -> str:
    """A Prometheus sample time (float seconds) as RFC 3339: whole seconds, or milliseconds when it has them."""
    try:
        seconds = float(t)
        if not math.isfinite(seconds):
            return str(t)
        whole = abs(seconds - round(seconds)) < 5e-7
        return rfc3339(seconds, 0 if whole else 3)
    except (OverflowError, OSError, ValueError, TypeError):
        return str(t)


def _value(v: Any) -> str:
    """A sample value as the API sent it (a string such as ``"0.25"`` or ``"NaN"``), or a native histogram."""
    if isinstance(v, Mapping):
        return f"histogram(count={v.get('count')}, sum={v.get('sum')})"
    return str(v)


def _points(series: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    return [(p[0], p[1]) for p in list(series.get("values") or []) + list(series.get("histograms") or [])]


def _point_line(t: Any, v: Any) -> str:
    return f"  {timestamp(t)} {_value(v)}"


def format_series(result: Sequence[Mapping[str, Any]], *, limit: int = MAX_OUTPUT_CHARS) -> str:
    """A matrix as one header line per series and one line per point, within ``limit`` characters.

    When everything does not fit, every series keeps the same number of its newest points (as many
    as fit) and says how many earlier points it left out; if not even one point per series fits,
    the trailing series are dropped and a last line counts them and their points.
    """
    series = [(_labels(s.get("metric") or {}), sorted(_points(s), key=lambda p: float(p[0]))) for s in result]
    total = sum(len(pts) for _, pts in series)
    times = [float(p[0]) for _, pts in series for p in pts]
    head = f"{len(series)} series, {total} points" + (f", {timestamp(min(times))} to {timestamp(max(times))}" if times else "")
    blocks = [(f"{name} ({len(pts)} points)", [_point_line(t, v) for t, v in pts]) for name, pts in series]
    budget = max(limit - _RESERVE, 0)

    def render(header: str, points: list[str], keep: int) -> list[str]:
        kept = points[-keep:] if keep else []
        cut = [f"  ... {len(points) - len(kept)} earlier points not shown"] if len(kept) < len(points) else []
        return [header] + cut + kept

    def size(keep: int) -> int:
        return sum(len(x) + 1 for h, pts in blocks for x in render(h, pts, keep))

    keep = max((len(pts) for _, pts in blocks), default=0)
    if size(keep) > budget:
        lo, hi = 1, keep  # the largest per-series count that fits (size grows with it)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if size(mid) <= budget else (lo, mid - 1)
        keep = lo
    out, used, shown = [head], len(head) + 1, 0
    for i, (h, pts) in enumerate(blocks):
        block = render(h, pts, keep)
        cost = sum(len(x) + 1 for x in block)
        if i > 0 and used + cost > budget:
            rest = series[i:]
            hidden = total - shown - sum(len(p) for _, p in rest)
            partial = f", and {hidden} earlier points of the series above" if hidden else ""
            out.append(f"... [{len(rest)} more series with {sum(len(p) for _, p in rest)} points not shown{partial}; "
                       "narrow the query (by labels or with topk) or use a larger step]")
            return "\n".join(out)
        out += block
        used += cost
        shown += min(keep, len(pts))
    if shown < total:
        out.append(f"... [{total - shown} of {total} points not shown: each series shows its newest {keep}; "
                   "shorten the range or use a larger step]")
    return "\n".join(out)


def format_result(data: Mapping[str, Any]) -> str:
    """Prometheus ``data`` -> lines an LLM reads easily (one series per line, one point per line for ranges)."""
    kind = data.get("resultType")
    result: Any = data.get("result")
    if kind in ("scalar", "string"):
        return f"{kind}: {result[1]} at {timestamp(result[0])}"
    if not result:
        return "empty result (no series matched)"
    if kind == "vector":
        at = {timestamp(s["value"][0]) for s in result if s.get("value")}
        head = f"{len(result)} series at {', '.join(sorted(at))}" if at else f"{len(result)} series"
        lines = [head]
        for sample in result:
            value = sample.get("value") or sample.get("histogram") or [None, ""]
            lines.append(f"{_labels(sample['metric'])} {_value(value[1])}")
        return "\n".join(lines)
    return format_series(result)


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


