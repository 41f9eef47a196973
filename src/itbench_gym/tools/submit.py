"""End the episode with the agent's report (ITBench's diagnosis shape); evaluation follows."""

from __future__ import annotations

import json
from typing import Any, Mapping

from itbench_gym.tools.base import ToolContext, ToolResult


class SubmitTool:
    name = "submit"
    description = (
        "Finish the episode with your report: JSON {\"entities\": [{\"id\": \"otel-demo/ConfigMap/flagd-config\", "
        "\"root_cause\": true}, ...], \"propagations\": [{\"source\": ..., \"target\": ..., \"condition\": ..., "
        "\"effect\": ...}]}. Mitigation is judged from the cluster's state after you submit."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "entities": {"type": "array", "items": {"type": "object"}},
            "propagations": {"type": "array", "items": {"type": "object"}},
            "text": {"type": "string", "description": "The report as a JSON string."},
        },
    }
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        if "text" in args and len(args) == 1:
            raw = str(args["text"]).strip()
            try:
                report: Any = json.loads(raw)
            except json.JSONDecodeError as exc:
                error = f"report is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
                return ToolResult(text=f"report submitted; {error}", data={"report": None, "report_error": error}, ends_episode=True)
        else:
            report = dict(args)
        return ToolResult(text="report submitted; evaluating", data={"report": report, "report_error": None}, ends_episode=True)
