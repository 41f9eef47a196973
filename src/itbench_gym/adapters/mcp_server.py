"""``itbench-gym mcp SCENARIO``: one episode's tools over the Model Context Protocol (stdio, the official SDK).

Coding-agent CLIs and MCP clients benchmark without Python: the server resets the scenario, gives
the task prompt as its ``instructions``, lists the episode's tools (kubectl, promql, logql, traces,
alerts, topology, wait, submit) with their JSON Schemas, and runs each call as one ``env.step``.
A tool's error is a result with ``isError`` set, never a protocol failure; ``submit`` answers with the
evaluation (text and structured content) and ends the episode; later calls say it has ended.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from itbench_gym import __version__


class EpisodeTools:
    """The bridge between MCP calls and one env's episode (kept free of the SDK for clarity)."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        self.env = env
        observation, _info = env.reset(seed=seed)
        self.prompt = str(observation["text"])
        self.schemas: list[dict[str, Any]] = list(getattr(env.unwrapped, "tool_schemas", []))
        self.done = False
        self.evaluation: dict[str, Any] | None = None

    def call(self, name: str, arguments: dict[str, Any] | None) -> tuple[str, bool, dict[str, Any] | None]:
        """(text, is_error, structured result) of one tool call."""
        if self.done:
            return "the episode has ended (the report was submitted or the budget ran out); start a new server", True, None
        observation, _reward, terminated, truncated, info = self.env.step({"tool": name, "args": dict(arguments or {})})
        text, failed = str(observation["text"]), int(observation["exit_status"]) != 0
        if terminated or truncated:
            self.done = True
            self.evaluation = info.get("evaluation")
            summary = {"passed": (self.evaluation or {}).get("passed"), "evaluation": self.evaluation}
            ended = "episode submitted" if terminated else "episode out of budget"
            return f"{ended}: {json.dumps(summary, default=str)}", failed, json.loads(json.dumps(summary, default=str))
        return text, failed, None


def serve_stdio(scenario: str, seed: int) -> None:
    """Reset the scenario, then serve its tools on stdin/stdout until the client disconnects."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.models import InitializationOptions
    from mcp.server.stdio import stdio_server

    import itbench_gym

    env = itbench_gym.make(scenario)
    try:
        episode = EpisodeTools(env, seed)

        async def list_tools(_ctx: Any, _params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=[
                types.Tool(name=s["function"]["name"], description=s["function"]["description"],
                           input_schema=s["function"]["parameters"]) for s in episode.schemas])

        async def call_tool(_ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            text, failed, structured = await anyio.to_thread.run_sync(episode.call, params.name, params.arguments)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=failed,
                                        structured_content=structured)

        server: Server[Any] = Server(f"itbench-gym {scenario}", version=__version__, instructions=episode.prompt,
                                     on_list_tools=list_tools, on_call_tool=call_tool)
        options = InitializationOptions(server_name=f"itbench-gym {scenario}", server_version=__version__,
                                        instructions=episode.prompt,
                                        capabilities=types.ServerCapabilities(tools=types.ToolsCapability()))

        async def main() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, options)

        anyio.run(main)
    finally:
        env.close()
