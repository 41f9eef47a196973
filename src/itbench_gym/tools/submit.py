"""End the episode with the agent's report (ITBench's diagnosis shape); evaluation follows.

Only a valid report ends the episode. A report that cannot be read (not JSON, not an object, a field
of the wrong type, too deep or too large, ...) is an error observation (exit status 2) that says
what is wrong, where, and how to fix it; the agent can submit again. Reading is
:func:`itbench_gym.evaluation.report.parse_report`, the same function the grader uses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from itbench_gym.evaluation.report import describe_rejection, parse_report
from itbench_gym.tools.base import ToolContext, ToolResult

#: Exit status of a rejected report (the convention for bad tool input).
REJECTED = 2


class SubmitTool:
    name = "submit"
    description = (
        "Finish the episode with your report: JSON {\"entities\": [{\"id\": \"<namespace>/<Kind>/<name>\", "
        "\"root_cause\": true}, ...], \"propagations\": [{\"source\": ..., \"target\": ..., \"condition\": ..., "
        "\"effect\": ...}]}, as tool-call arguments or as text (plain JSON, or a ```json fenced block). "
        "A report that cannot be read is rejected with the reason and the episode goes on. "
        "Mitigation is judged from the cluster's state after you submit."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "entities": {"type": "array", "items": {"type": "object"}},
            "propagations": {"type": "array", "items": {"type": "object"}},
            "text": {"type": "string", "description": "The report as text: JSON, or prose with a ```json fenced block."},
            "report": {"description": "The report object (or its text), when it is not given as the arguments themselves."},
        },
    }
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        result = parse_report(_payload(args))
        if not result.valid:
            return ToolResult(
                text=describe_rejection(result),
                exit_status=REJECTED,
                data={"report": None, "report_error": "; ".join(result.errors), "report_errors": list(result.errors)},
                ends_episode=False,
            )
        where = f" (read from {result.source})" if result.source not in ("", "object", "JSON text") else ""
        return ToolResult(
            text=f"report accepted{where}; the episode ends and is evaluated",
            data={"report": result.document, "report_error": None, "report_source": result.source},
            ends_episode=True,
        )


def _payload(args: Any) -> Any:
    """What to read: ``text`` or ``report`` when it is the only argument, else the arguments object."""
    if not isinstance(args, Mapping):
        return args
    try:
        keys = list(args.keys())
        if len(keys) == 1 and isinstance(keys[0], str) and keys[0] in ("text", "report"):
            return args[keys[0]]
    except Exception:  # an exotic mapping: let parse_report say what it cannot read
        pass
    return args


class CostReportSubmitTool:
    """``submit`` for FinOps episodes: ITBench's FinOps report, the resources at fault by name and kind."""

    name = "submit"
    description = (
        "Finish the episode with the resources at fault: JSON {\"resource\": [{\"name\": \"<name>\", \"type\": \"<Kind>\"}, ...]} "
        "(type: a Kubernetes kind such as Deployment, HorizontalPodAutoscaler, PrometheusRule, PersistentVolumeClaim, "
        "Namespace), as tool-call arguments or as text. Mitigation is judged from the cluster's state after you submit."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "resource": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                                                     "required": ["name", "type"]}},
            "text": {"type": "string", "description": "The report as JSON text."},
        },
    }
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        report, error = _decoded(_payload(args))
        if error:
            return _rejected(f"the report is not JSON ({error})")
        problem = cost_report_problem(report)
        if problem:
            return _rejected(problem)
        return ToolResult(text="report accepted; the episode ends and is evaluated",
                          data={"report": {"resource": [dict(r) for r in report["resource"]]}, "report_error": None},
                          ends_episode=True)


def cost_report_problem(report: Any) -> str:
    """Why ``report`` is not a FinOps report ("" when it is one)."""
    if not isinstance(report, Mapping):
        return f"the report must be a JSON object with a \"resource\" list, got {type(report).__name__}"
    resources = report.get("resource")
    if not isinstance(resources, list):
        return "the report needs \"resource\": a list of {\"name\", \"type\"} objects"
    for i, item in enumerate(resources):
        if not isinstance(item, Mapping):
            return f"resource[{i}] must be an object with \"name\" and \"type\", got {item!r}"
        for key in ("name", "type"):
            if not isinstance(item.get(key), str) or not str(item.get(key)).strip():
                return f"resource[{i}].{key} must be a non-empty string, got {item.get(key)!r}"
    return ""


def _decoded(payload: Any) -> tuple[Any, str]:
    """The payload, parsed when it is JSON text (blank text: an empty object), and why it is not ("" when it is)."""
    if not isinstance(payload, str):
        return payload, ""
    try:
        return (json.loads(payload) if payload.strip() else {}), ""
    except ValueError as exc:
        return payload, str(exc)


def _rejected(problem: str) -> ToolResult:
    return ToolResult(text=f"submit: {problem}; submit again", exit_status=REJECTED,
                      data={"report": None, "report_error": problem})


class AssessmentSubmitTool:
    """``submit`` for compliance (CISO) episodes: ITBench grades the policies, scripts and playbooks the
    agent produced, so the report is the agent's stated posture and any notes, never required."""

    name = "submit"
    description = (
        "Finish the episode when your policy (and script or playbook) is in place: optionally state the posture you "
        "found, e.g. `submit {\"compliant\": false, \"summary\": \"nginx-deployment shares the host network\"}`. "
        "Grading runs your artefacts against the system as it is now."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "compliant": {"type": "boolean", "description": "Whether the system meets the requirement, as you found it."},
            "summary": {"type": "string"},
            "text": {"type": "string", "description": "The same as text: JSON, or prose."},
        },
    }
    cost_seconds = 0.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        payload = _payload(args)
        report, error = _decoded(payload)
        if error:
            report = {"summary": str(payload).strip()}
        if not isinstance(report, Mapping):
            report = {"summary": str(report)}
        claim = report.get("compliant")
        if claim is not None and not isinstance(claim, bool):
            return ToolResult(text=f"submit: \"compliant\" must be true or false, got {claim!r}; submit again",
                              exit_status=REJECTED, data={"report": None, "report_error": "compliant is not a boolean"})
        return ToolResult(text="submitted; the episode ends and your artefacts are evaluated",
                          data={"report": dict(report), "report_error": None}, ends_episode=True)
