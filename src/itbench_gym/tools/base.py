"""What every agent-facing tool provides, and how its output is bounded."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.programs import RunningPrograms

#: Largest tool output shown to the agent; longer output is cut with an explicit marker.
MAX_OUTPUT_CHARS = 16_000


@dataclass
class ToolContext:
    """What a tool may use: the agent's endpoints, its episode's directories and a way to let time pass."""

    endpoints: Endpoints
    advance: Callable[[float], None]
    now: Callable[[], float]
    time_left: Callable[[], float]
    #: The agent's own files: empty when the episode starts; cwd, HOME and TMPDIR of programs run.
    workspace: Path
    #: Tool-private files outside the workspace (per-call credential copies); never agent-readable.
    scratch: Path
    #: Where a tool registers the programs it starts (the twin lets time pass in a stream only while they wait).
    programs: RunningPrograms = field(default_factory=RunningPrograms)


@dataclass
class ToolResult:
    text: str
    exit_status: int = 0
    #: Modelled seconds this call took on the environment's clock (added by the env).
    cost_seconds: float = 0.0
    data: Mapping[str, Any] = field(default_factory=dict)
    ends_episode: bool = False


class ToolInputError(ValueError):
    """Arguments a tool cannot use; the message is the agent's observation."""


class Tool(Protocol):
    name: str
    description: str
    #: JSON Schema of the tool-call ``args`` (for LLM function calling).
    parameters: Mapping[str, Any]
    #: Modelled duration of one call in seconds (kubectl round trips, query latency).
    cost_seconds: float

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult: ...


def bound_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the head and tail of long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    head = text[: limit * 3 // 4]
    tail = text[-(limit // 4) :]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n... [output truncated: {cut:,} characters omitted] ...\n{tail}"


def require_text(value: Any, name: str, *, allow_nul: bool = True) -> str:
    """``value`` if it is a string a program or an API can receive; otherwise ToolInputError naming ``name``.

    Lone surrogates (``"\\ud800"``) are not Unicode text and cannot be encoded; NUL cannot be part of
    a program argument.
    """
    if not isinstance(value, str):
        raise ToolInputError(f"argument {name!r} must be a string, got {type(value).__name__}")
    if not allow_nul and "\x00" in value:
        raise ToolInputError(f"argument {name!r} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolInputError(
            f"argument {name!r} is not valid text: it contains a lone surrogate ({value[exc.start]!r}) at "
            f"position {exc.start}; send UTF-8 text") from None
    return value


def text_arg(args: Mapping[str, Any], *names: str) -> str:
    """The first of ``names`` present in ``args`` as a string."""
    for name in names:
        if name in args:
            return require_text(args[name], name)
    raise ToolInputError(f"missing argument: one of {', '.join(repr(n) for n in names)}")
