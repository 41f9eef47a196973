"""What the policy CLIs (``opa``, ``kyverno``) share: taking a command line without a shell, pflag-style
flags (``--f=v``, ``--f v``, ``-fv``, repeated flags) with cobra's error wording, and paths that must stay
inside the agent's workspace, symlinks included."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from itbench_gym.tools.base import ToolInputError, ToolResult, bound_output, require_text

_SHELL_TOKENS = {"|", "||", "&&", ";", ">", ">>", "<", "&", "2>&1"}
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class CommandLineError(Exception):
    """A command line the CLI itself rejects; the message is what cobra prints after ``Error: ``."""


def command_parameters(program: str, example: str) -> dict[str, Any]:
    """The tool-call schema of a CLI tool: its command line as ``text`` or its arguments as ``argv``."""
    return {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": f"The command line, e.g. `{example}`."},
            "argv": {"type": "array", "items": {"type": "string"}, "description": f"Arguments after `{program}` as a list."},
        },
    }


def command_argv(args: Mapping[str, Any], program: str) -> list[str]:
    """The arguments after ``program`` from ``text`` (split as a shell would, never run by one) or ``argv``."""
    if "argv" in args:
        argv = args["argv"]
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ToolInputError("argument 'argv' must be a list of strings")
        tokens = list(argv)
    else:
        text = require_text(args.get("text", args.get("command", "")), "text")
        try:
            tokens = shlex.split(text)
        except ValueError as exc:
            raise ToolInputError(f"cannot parse the command line: {exc} (check your quotes)") from None
    if tokens and tokens[0] == program:
        tokens = tokens[1:]
    for position, token in enumerate(tokens, start=1):
        require_text(token, str(position), allow_nul=False)
        if token in _SHELL_TOKENS or token.startswith("$(") or token.startswith("`"):
            raise ToolInputError(f"shell syntax {token!r} is not supported: the tool runs `{program}` directly, without a shell")
    return tokens


@dataclass
class ParsedFlags:
    """Flag values in the order given (booleans as ``"true"``/``"false"``) and the positional arguments."""

    values: dict[str, list[str]] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)

    def given(self, name: str) -> bool:
        return name in self.values

    def enabled(self, name: str) -> bool:
        return self.values.get(name, ["false"])[-1] == "true"

    def last(self, name: str, default: str) -> str:
        return self.values.get(name, [default])[-1]

    def every(self, *names: str) -> list[str]:
        return [v for n in names for v in self.values.get(n, [])]


def parse_flags(argv: list[str], flags: Mapping[str, str], short: Mapping[str, str]) -> ParsedFlags:
    """Read ``argv`` as pflag does; ``flags`` maps long names to ``bool`` or ``value``, ``short`` letters to long names.

    Raises ``CommandLineError`` with pflag's wording for unknown flags and missing or invalid values.
    """
    out = ParsedFlags()
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            out.args.extend(argv[i:])
            break
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            if name not in flags:
                raise CommandLineError(f"unknown flag: --{name}")
            if flags[name] == "bool":
                out.values.setdefault(name, []).append(_bool(value, f"--{name}") if eq else "true")
                continue
            if not eq:
                if i >= len(argv):
                    raise CommandLineError(f"flag needs an argument: --{name}")
                value, i = argv[i], i + 1
            out.values.setdefault(name, []).append(value)
        elif token.startswith("-") and token != "-":
            i = _shorthand(token, argv, i, flags, short, out)
        else:
            out.args.append(token)
    return out


def _shorthand(token: str, argv: list[str], i: int, flags: Mapping[str, str], short: Mapping[str, str], out: ParsedFlags) -> int:
    """A cluster of shorthand booleans ending in at most one flag that takes the rest or the next token."""
    letters = token[1:]
    pos = 0
    while pos < len(letters):
        letter = letters[pos]
        pos += 1
        if letter not in short:
            raise CommandLineError(f"unknown shorthand flag: '{letter}' in {token}")
        name = short[letter]
        if flags[name] == "bool":
            given = letters[pos + 1 :] if letters[pos : pos + 1] == "=" else None
            out.values.setdefault(name, []).append("true" if given is None else _bool(given, f"-{letter}"))
            if given is not None:
                break
            continue
        value = letters[pos:].removeprefix("=")
        if not value:
            if i >= len(argv):
                raise CommandLineError(f"flag needs an argument: '{letter}' in {token}")
            value, i = argv[i], i + 1
        out.values.setdefault(name, []).append(value)
        break
    return i


def _bool(value: str, flag: str) -> str:
    if value in _TRUE:
        return "true"
    if value in _FALSE:
        return "false"
    raise CommandLineError(f'invalid argument "{value}" for "{flag}" flag: strconv.ParseBool: parsing "{value}": invalid syntax')


def workspace_path(workspace: Path, value: str) -> Path:
    """``value`` resolved inside the workspace (symlinks followed); ``ToolInputError`` if it points outside."""
    if "://" in value:
        raise ToolInputError(f"{value}: remote locations are not fetched; only files in your workspace can be read")
    if PurePosixPath(value).is_absolute() or value.startswith("~"):
        raise ToolInputError(f"{value}: absolute paths are not allowed; give a path relative to your workspace")
    root = workspace.resolve()
    target = (root / value).resolve()
    if target != root and root not in target.parents:
        raise ToolInputError(f"{value}: this path leads outside your workspace; only files in your workspace can be read")
    return target


def walk_files(workspace: Path, value: str, suffixes: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    """(name as the CLI shows it, resolved path) of ``value`` itself or of the files under it with ``suffixes``, sorted.

    Every file found under a folder is checked against the workspace too, so a symlink inside a folder
    cannot lead out of it. A missing path raises ``FileNotFoundError`` naming ``value``.
    """
    target = workspace_path(workspace, value)
    if not target.exists():
        raise FileNotFoundError(value)
    if not target.is_dir():
        yield value, target
        return
    for folder, dirs, files in os.walk(target):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(suffixes):
                shown = str(PurePosixPath(value) / Path(folder, name).relative_to(target).as_posix())
                yield shown, workspace_path(workspace, shown)


def read_text(path: Path, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise OSError(f"{shown}: not UTF-8 text") from None
    except IsADirectoryError:
        raise OSError(f"read {shown}: is a directory") from None


# --- opa ------------------------------------------------------------------------------------------------


def run_cli(program: str, argv: list[str], usage: str, commands: Mapping[str, Callable[[list[str]], tuple[str, int]]]) -> ToolResult:
    """A CLI's dispatch as cobra does it: help, an unknown command, a command line the command rejects
    (``Error: ...``, exit status 1), and the command's own text and exit status, bounded."""
    data = {"argv": [program, *argv]}
    if not argv or argv[0] in ("help", "-h", "--help"):
        return ToolResult(text=usage, data=data)
    handler = commands.get(argv[0])
    if handler is None:
        return ToolResult(text=f"Error: unknown command \"{argv[0]}\" for \"{program}\"\nRun '{program} --help' for usage.",
                          exit_status=1, data=data)
    try:
        text, status = handler(argv[1:])
    except CommandLineError as exc:
        text, status = f"Error: {exc}", 1
    return ToolResult(text=bound_output(text.rstrip("\n")), exit_status=status, data=data)

