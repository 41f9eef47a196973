"""An MCP client (the SDK's own) lists the episode's tools, runs kubectl, and submits."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SCENARIO = "SRE-CorruptImage-v0"
REPORT = {"entities": [{"id": "otel-demo/Deployment/product-catalog", "root_cause": True}], "propagations": []}


async def session_transcript() -> dict[str, Any]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "itbench_gym.cli", "mcp", SCENARIO, "--seed", "0"],
                                   env=dict(os.environ))
    out: dict[str, Any] = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        out["instructions"] = init.instructions
        out["tools"] = {t.name: t.input_schema for t in (await session.list_tools()).tools}
        out["pods"] = await session.call_tool("kubectl", {"argv": ["get", "pods", "-n", "otel-demo"]})
        out["bad"] = await session.call_tool("kubectl", {"argv": ["exec", "-it", "x", "--", "sh"]})
        out["submit"] = await session.call_tool("submit", REPORT)
        out["after"] = await session.call_tool("alerts", {})
    return out


@pytest.fixture(scope="module")
def transcript() -> dict[str, Any]:
    return anyio.run(session_transcript)


def test_the_client_sees_the_task_and_the_tools(transcript: dict[str, Any]) -> None:
    assert "on-call SRE" in transcript["instructions"] and "KubePodNotReady" in transcript["instructions"]
    assert set(transcript["tools"]) == {"kubectl", "promql", "logql", "traces", "alerts", "topology", "wait", "submit"}
    assert transcript["tools"]["kubectl"]["properties"]["argv"]["type"] == "array"


def test_kubectl_runs_and_a_refused_command_is_a_tool_error(transcript: dict[str, Any]) -> None:
    pods = transcript["pods"]
    assert not pods.is_error and "product-catalog-" in pods.content[0].text and "ImagePullBackOff" in pods.content[0].text
    assert transcript["bad"].is_error


def test_submit_returns_the_evaluation_and_ends_the_episode(transcript: dict[str, Any]) -> None:
    submit = transcript["submit"]
    assert not submit.is_error
    evaluation = submit.structured_content["evaluation"]
    assert evaluation["diagnosis"]["fl_pass"] is True and evaluation["mitigation"]["passed"] is False
    assert json.loads(submit.content[0].text.split(": ", 1)[1])["passed"] is False
    assert transcript["after"].is_error and "the episode has ended" in transcript["after"].content[0].text
