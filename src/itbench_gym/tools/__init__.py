"""Agent-facing tools. Each speaks a real protocol, so it runs unchanged on either backend."""

from typing import Any

from itbench_gym.tools.alerts import AlertsTool
from itbench_gym.tools.base import MAX_OUTPUT_CHARS, Tool, ToolContext, ToolInputError, ToolResult
from itbench_gym.tools.kubectl import KubectlTool
from itbench_gym.tools.kyverno_cli import KyvernoCliTool
from itbench_gym.tools.logql import LogQLTool
from itbench_gym.tools.opa import OpaTool
from itbench_gym.tools.opencost import OpenCostTool
from itbench_gym.tools.promql import PromQLTool
from itbench_gym.tools.submit import SubmitTool
from itbench_gym.tools.topology import TopologyTool
from itbench_gym.tools.traces import TracesTool
from itbench_gym.tools.wait import WaitTool


def default_tools(*, opencost: bool = False) -> list[Tool]:
    """The SRE toolbox; with ``opencost`` (a cluster that runs OpenCost) also the cost allocation API."""
    costs: list[Tool] = [OpenCostTool()] if opencost else []
    return [KubectlTool(), PromQLTool(), LogQLTool(), TracesTool(), AlertsTool(), TopologyTool(), *costs, WaitTool(), SubmitTool()]


def tool_schemas(tools: list[Tool]) -> list[dict[str, Any]]:
    """OpenAI-style function descriptions for LLM tool calling."""
    return [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
        for t in tools
    ]


__all__ = [
    "MAX_OUTPUT_CHARS",
    "AlertsTool",
    "KubectlTool",
    "KyvernoCliTool",
    "LogQLTool",
    "OpaTool",
    "OpenCostTool",
    "PromQLTool",
    "SubmitTool",
    "Tool",
    "ToolContext",
    "ToolInputError",
    "ToolResult",
    "TopologyTool",
    "TracesTool",
    "WaitTool",
    "default_tools",
    "tool_schemas",
]
