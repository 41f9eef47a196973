"""Turn an agent's action (a command string or a tool-call dict) into a ``ToolCall``.

Parsing never raises to the caller of ``step``: problems become ``ActionError``s whose message is
shown to the agent as the observation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Longest action accepted; longer ones are rejected with a clear message, not truncated.
MAX_ACTION_CHARS = 65_536


class ActionError(ValueError):
    """An action the env cannot run; the message is the agent's observation."""


@dataclass(frozen=True)
class ToolCall:
    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""

    def describe(self) -> str:
        if self.text:
            return self.text
        call = {"tool": self.tool, "args": dict(self.args)}
        try:
            return json.dumps(call, sort_keys=True, default=str)
        except TypeError:  # keys of mixed types cannot be sorted
            return json.dumps(call, default=str)


def parse_action(action: object, tool_names: tuple[str, ...]) -> ToolCall:
    """``"kubectl get pods"`` or ``{"tool": "kubectl", "args": {...}}`` -> ``ToolCall``.

    String actions are ``<tool> <rest>``; the tool turns ``rest`` into its arguments.
    """
    if isinstance(action, str):
        return _parse_text(action, tool_names)
    if isinstance(action, Mapping):
        return _parse_mapping(action, tool_names)
    raise ActionError(
        f"action must be a string such as 'kubectl get pods' or a dict "
        f"{{'tool': ..., 'args': {{...}}}}, got {type(action).__name__}"
    )


def _check_tool(name: str, tool_names: tuple[str, ...]) -> str:
    if name in tool_names:
        return name
    import difflib

    close = difflib.get_close_matches(name, tool_names, n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ActionError(f"unknown tool {name!r}.{hint} Available tools: {', '.join(tool_names)}.")


def _parse_text(text: str, tool_names: tuple[str, ...]) -> ToolCall:
    if len(text) > MAX_ACTION_CHARS:
        raise ActionError(f"action is {len(text):,} characters long; the limit is {MAX_ACTION_CHARS:,}. Send a shorter command.")
    if "\x00" in text:
        raise ActionError("action contains a NUL character")
    stripped = text.strip()
    if not stripped:
        raise ActionError(f"empty action. Start with a tool name: {', '.join(tool_names)}.")
    head, _, rest = stripped.partition(" ")
    if "\n" in head:
        head, _, more = head.partition("\n")
        rest = more + " " + rest
    return ToolCall(tool=_check_tool(head, tool_names), args={"text": rest.strip()}, text=stripped)


def _parse_mapping(action: Mapping[str, Any], tool_names: tuple[str, ...]) -> ToolCall:
    unknown = set(action) - {"tool", "args"}
    if "tool" not in action or unknown:
        raise ActionError(
            "a tool-call action is {'tool': <name>, 'args': {...}}"
            + (f"; unexpected keys: {sorted(unknown)}" if unknown else "; 'tool' is missing")
        )
    tool = action["tool"]
    if not isinstance(tool, str):
        raise ActionError(f"'tool' must be a string, got {type(tool).__name__}")
    args = action.get("args", {})
    if isinstance(args, str):
        args = {"text": args}
    if not isinstance(args, Mapping):
        raise ActionError(f"'args' must be an object, got {type(args).__name__}")
    try:
        size = len(json.dumps(args, default=str))
    except RecursionError:
        raise ActionError("tool-call args are nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise ActionError(f"tool-call args are not JSON data: {exc}") from None
    if size > MAX_ACTION_CHARS:
        raise ActionError(f"tool-call args are {size:,} characters long; the limit is {MAX_ACTION_CHARS:,}")
    return ToolCall(tool=_check_tool(tool, tool_names), args=dict(args))
