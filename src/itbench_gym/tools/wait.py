"""Let time pass, e.g. to watch whether a fix holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult
from itbench_gym.tools.durations import parse_duration

MAX_WAIT_SECONDS = 3600.0


class WaitTool:
    name = "wait"
    description = "Wait N seconds (at most 3600), e.g. `wait 60` or `wait 5m`, so the system can react to a change."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS}},
        "required": ["seconds"],
    }
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        raw = args.get("seconds", args.get("text", ""))
        if isinstance(raw, str) and not raw.strip():
            raise ToolInputError("wait needs a number of seconds, e.g. `wait 60` or `wait 2m`")
        seconds = parse_duration(raw, "wait", maximum=MAX_WAIT_SECONDS, positive=False)
        granted = min(seconds, max(0.0, ctx.time_left()))
        ctx.advance(granted)
        note = "" if granted == seconds else f" (the episode's time budget allowed only {granted:g} s)"
        return ToolResult(text=f"waited {granted:g} s{note}", data={"seconds": granted})
