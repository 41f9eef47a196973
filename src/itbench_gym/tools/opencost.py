"""OpenCost's allocation API (``GET /allocation/compute``) for FinOps agents: cost by namespace, pod, ...

The agent gives OpenCost's own parameters (``window``, ``aggregate``, ``step``, ``accumulate``) and reads
OpenCost's JSON answer, compact: without spaces, and without the fields of an allocation that are zero,
null or empty (the GPU, network, load-balancer, shared and adjustment costs the twin's clusters never
have), so that a namespace breakdown fits the tools' output bound. An OpenCost error (400 naming the
parameter) is an error observation with its message. Nothing the agent sends makes the tool raise
anything but ``ToolInputError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import requests

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output, require_text

_HTTP_TIMEOUT_SECONDS = 60.0
#: Longest parameter text sent; OpenCost's windows and aggregations are short.
_MAX_PARAM_CHARS = 1_000


def _param(args: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    if name not in args or args[name] is None:
        if required:
            raise ToolInputError(f"opencost needs {name!r}, e.g. {{\"window\": \"1h\", \"aggregate\": \"namespace\"}}")
        return None
    value = require_text(args[name], name, allow_nul=False).strip()
    if len(value) > _MAX_PARAM_CHARS:
        raise ToolInputError(f"argument {name!r} is {len(value):,} characters long; at most {_MAX_PARAM_CHARS:,} are accepted")
    if required and not value:
        raise ToolInputError(f"argument {name!r} is empty; e.g. 1h, 24h, 7d, today or yesterday")
    return value


def _accumulate(value: Any) -> str | None:
    """``true``/``false`` from a boolean or its text; None when not given."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower()
    raise ToolInputError("argument 'accumulate' must be true or false")


def _kept(value: Any) -> bool:
    return value not in (None, 0, 0.0, {}, [], "")


def compact(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` without the zero, null or empty fields of its allocations (and of their properties)."""
    sets = []
    for allocations in body.get("data") or []:
        out = {}
        for name, allocation in allocations.items():
            fields = {k: v for k, v in allocation.items() if _kept(v)}
            if isinstance(fields.get("properties"), Mapping):
                fields["properties"] = {k: v for k, v in fields["properties"].items() if _kept(v)}
            out[name] = fields
        sets.append(out)
    return {**body, "data": sets}


class OpenCostTool:
    name = "opencost"
    description = (
        "Query OpenCost's cost allocation API (GET /allocation/compute): e.g. args {window: '1h', aggregate: 'namespace'}. "
        "window: 10m, 1h, 24h, 7d, today, yesterday, week, month, or start,end (RFC 3339 or Unix seconds). "
        "aggregate: namespace, pod, container, controller, controllerKind, node, cluster, service or label:<name>, "
        "comma-separated to combine. step: one set per step (e.g. 1h); accumulate: true sums the steps. "
        "Returns OpenCost's JSON (fields that are 0 or null left out): per allocation cpuCost, ramCost, pvCost, "
        "totalCost, requests, usage and efficiencies."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "window": {"type": "string", "description": "Time window, e.g. 1h, 24h, 7d, today, or start,end."},
            "aggregate": {"type": "string", "description": "Aggregation, e.g. namespace, pod, controller, label:app."},
            "step": {"type": "string", "description": "Duration of each set, e.g. 1h (default: the whole window)."},
            "accumulate": {"type": "boolean", "description": "Sum every step into one set."},
        },
        "required": ["window"],
    }
    cost_seconds = 3.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        params = {"window": _param(args, "window", required=True)}
        for name in ("aggregate", "step"):
            value = _param(args, name)
            if value:
                params[name] = value
        accumulate = _accumulate(args.get("accumulate"))
        if accumulate is not None:
            params["accumulate"] = accumulate
        url = ctx.endpoints.opencost
        if url is None:
            return ToolResult(text="cost data is not available in this scenario (no OpenCost endpoint)", exit_status=1)
        try:
            resp = requests.get(url + "/allocation/compute", params=params, timeout=_HTTP_TIMEOUT_SECONDS)
            body = resp.json()
        except (requests.RequestException, ValueError) as exc:
            return ToolResult(text=f"OpenCost request failed: {exc}", exit_status=1)
        if not isinstance(body, dict):
            return ToolResult(text=f"OpenCost sent an unreadable answer (HTTP {resp.status_code})", exit_status=1)
        if resp.status_code != 200 or body.get("code") != 200:
            return ToolResult(text=f"OpenCost error (HTTP {resp.status_code}): {body.get('message', '')}", exit_status=1)
        try:
            text = json.dumps(compact(body), separators=(",", ":"))
        except (AttributeError, TypeError) as exc:
            return ToolResult(text=f"OpenCost sent an unreadable answer: {exc}", exit_status=1)
        return ToolResult(text=bound_output(text), data={"sets": len(body.get("data") or [])})
