"""Read a kubectl command line with kubectl's own grammar and allow only what the grammar data lists.

The grammar (``kubectl_grammar.yaml``) is kubectl's command tree and flags, so a flag's value is never
mistaken for the subcommand (``kubectl -n x config ...`` is ``config``, not ``x``), flags are parsed
as pflag parses them (``--f=v``, ``--f v``, ``-fv``, ``-f=v``, grouped shorthand booleans, ``--``),
and anything the data does not list — a command, a flag, an output format, a local file — is refused
with the reason, before kubectl runs.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import PurePosixPath
from typing import Any

from itbench_gym.lang import yamltext

#: Flags whose values name local files; their values are checked against the workspace.
PATH_KIND = "path"


class KubectlArgvError(ValueError):
    """A command line the tool will not run; the message says what and why."""


@dataclass(frozen=True)
class CommandGrammar:
    path: str
    flags: Mapping[str, str]
    short: Mapping[str, str]
    refused: Mapping[str, str]
    has_subcommands: bool
    subcommands_only: bool


@dataclass(frozen=True)
class Grammar:
    commands: Mapping[str, CommandGrammar]
    refused_commands: Mapping[str, str]
    global_flags: Mapping[str, str]
    global_short: Mapping[str, str]
    refused_global_flags: Mapping[str, str]
    refused_global_short: Mapping[str, str]
    output_formats: frozenset[str]
    refused_output_formats: Mapping[str, str]

    def top_level(self) -> list[str]:
        return sorted({c.path for c in self.commands.values() if " " not in c.path})


@functools.cache
def grammar() -> Grammar:
    doc: dict[str, Any] = yamltext.load(resources.files("itbench_gym.tools").joinpath("kubectl_grammar.yaml").read_text())
    commands: dict[str, CommandGrammar] = {}
    for path, entry in doc["commands"].items():
        command = CommandGrammar(
            path=path,
            flags=dict(entry.get("flags") or {}),
            short=dict(entry.get("short") or {}),
            refused=dict(entry.get("refused") or {}),
            has_subcommands=bool(entry.get("subcommands") or entry.get("subcommands_only")),
            subcommands_only=bool(entry.get("subcommands_only")),
        )
        commands[path] = command
        parent = path.rpartition(" ")[0]
        for alias in entry.get("aliases") or ():
            commands[f"{parent} {alias}".strip()] = command
    return Grammar(
        commands=commands,
        refused_commands=dict(doc["refused_commands"]),
        global_flags=dict(doc["global_flags"]),
        global_short=dict(doc["global_short"]),
        refused_global_flags=dict(doc["refused_global_flags"]),
        refused_global_short=dict(doc.get("refused_global_short") or {}),
        output_formats=frozenset(doc["output_formats"]),
        refused_output_formats=dict(doc["refused_output_formats"]),
    )


@dataclass
class KubectlInvocation:
    """A command line that passed the grammar: its command path, flags in order, and file arguments."""

    command: str
    flags: list[tuple[str, str | None]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)
    #: Values of file-valued flags (``-f``, ``--from-file``...), as typed.
    paths: list[str] = field(default_factory=list)

    @property
    def reads_stdin(self) -> bool:
        return "-" in self.paths


def parse_kubectl_argv(argv: list[str]) -> KubectlInvocation:
    """Check ``argv`` (after ``kubectl``) against the grammar; raise ``KubectlArgvError`` if refused."""
    g = grammar()
    path: list[str] = []
    node: CommandGrammar | None = None
    out = KubectlInvocation(command="")
    i = 0
    only_args = False
    while i < len(argv):
        token = argv[i]
        i += 1
        if only_args or token == "-" or not token.startswith("-"):
            if not only_args and (node is None or node.has_subcommands):
                candidate = " ".join([*path, token])
                if candidate in g.refused_commands:
                    raise KubectlArgvError(g.refused_commands[candidate])
                if candidate in g.commands:
                    node = g.commands[candidate]
                    path = node.path.split()
                    continue
                if node is None:
                    raise KubectlArgvError(_unknown_command(token, g))
            out.args.append(token)
            continue
        if token == "--":
            only_args = True
            continue
        i = _flag(token, argv, i, node, g, out)
    if node is None:
        if any(name == "help" for name, _ in out.flags):
            out.command = ""
            return out
        raise KubectlArgvError("kubectl needs a command, e.g. `kubectl get pods`; available: " + ", ".join(g.top_level()))
    if node.subcommands_only and not any(name == "help" for name, _ in out.flags):
        subs = sorted({c.path.split()[-1] for c in g.commands.values() if c.path.rpartition(" ")[0] == node.path})
        raise KubectlArgvError(f"`kubectl {' '.join(path)}` needs a subcommand: {', '.join(subs)}")
    out.command = " ".join(path)
    return out


def _flag(token: str, argv: list[str], i: int, node: CommandGrammar | None, g: Grammar, out: KubectlInvocation) -> int:
    """Consume one flag token (and its value); return the index of the next token."""
    where = f"`kubectl {node.path}`" if node else "kubectl (before the command)"
    if token.startswith("--"):
        name, eq, value = token[2:].partition("=")
        kind = _kind(name, node, g, where)
        if kind == "bool":
            if eq and value.lower() not in ("true", "false", "1", "0", "t", "f"):
                raise KubectlArgvError(f"flag --{name} is a boolean; got value {value!r}")
            _record(out, name, value if eq else None, kind, g)
            return i
        if not eq:
            if i >= len(argv):
                raise KubectlArgvError(f"flag --{name} needs a value")
            value = argv[i]
            i += 1
        _record(out, name, value, kind, g)
        return i
    # Shorthand: a cluster of booleans, then at most one flag that takes the rest (or the next token).
    letters = token[1:]
    pos = 0
    while pos < len(letters):
        letter = letters[pos]
        name = _short(letter, node, g, where)
        kind = _kind(name, node, g, where)
        pos += 1
        if kind == "bool":
            given: str | None = None
            if letters[pos : pos + 1] == "=":
                given = letters[pos + 1 :]
                pos = len(letters)
            _record(out, name, given, kind, g)
            continue
        rest = letters[pos:].removeprefix("=")
        if not rest:
            if i >= len(argv):
                raise KubectlArgvError(f"flag -{letter} (--{name}) needs a value")
            rest = argv[i]
            i += 1
        _record(out, name, rest, kind, g)
        break
    return i


def _short(letter: str, node: CommandGrammar | None, g: Grammar, where: str) -> str:
    if node is not None and letter in node.short:
        return node.short[letter]
    if letter in g.global_short:
        return g.global_short[letter]
    if letter in g.refused_global_short:
        name = g.refused_global_short[letter]
        raise KubectlArgvError(f"flag -{letter} (--{name}) is not allowed: {g.refused_global_flags[name]}")
    raise KubectlArgvError(f"unknown or unavailable shorthand flag -{letter} for {where}; see {_help(node)}")


def _kind(name: str, node: CommandGrammar | None, g: Grammar, where: str) -> str:
    if node is not None:
        if name in node.refused:
            raise KubectlArgvError(f"flag --{name} is not allowed: {node.refused[name]}")
        if name in node.flags:
            return node.flags[name]
    if name in g.refused_global_flags:
        raise KubectlArgvError(f"flag --{name} is not allowed: {g.refused_global_flags[name]}")
    if name in g.global_flags:
        return g.global_flags[name]
    raise KubectlArgvError(f"unknown or unavailable flag --{name} for {where}; see {_help(node)}")


def _help(node: CommandGrammar | None) -> str:
    return f"`kubectl {node.path} --help`" if node else "`kubectl options`"


def _record(out: KubectlInvocation, name: str, value: str | None, kind: str, g: Grammar) -> None:
    if kind == "output" and value is not None:
        fmt = value.split("=", 1)[0]
        if fmt in g.refused_output_formats:
            raise KubectlArgvError(f"output format {fmt!r} is not allowed: it {g.refused_output_formats[fmt]}")
        if fmt not in g.output_formats:
            raise KubectlArgvError(f"unknown output format {fmt!r}; allowed: {', '.join(sorted(g.output_formats))}")
    if kind == PATH_KIND and value is not None:
        # --from-file=[key=]source: the file is after the first '='.
        source = value.split("=", 1)[1] if name == "from-file" and "=" in value else value
        check_local_path(source, f"--{name}")
        out.paths.append(source)
    out.flags.append((name, value))


def check_local_path(value: str, flag: str) -> None:
    """File arguments: ``-`` (the action's stdin) or a relative path inside the workspace."""
    if value == "-":
        return
    if "://" in value:
        raise KubectlArgvError(f"{flag} {value}: remote URLs are not fetched; pass the manifest on stdin with `-f -`")
    p = PurePosixPath(value)
    if p.is_absolute() or ".." in p.parts or value.startswith("~"):
        raise KubectlArgvError(
            f"{flag} {value}: only files in the episode workspace can be read, and it holds none; "
            "pass the manifest on stdin with `-f -` (a heredoc or the 'stdin' argument)"
        )


def _unknown_command(token: str, g: Grammar) -> str:
    import difflib

    close = difflib.get_close_matches(token, g.top_level(), n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown or unavailable kubectl command {token!r}.{hint} Available: {', '.join(g.top_level())}"
