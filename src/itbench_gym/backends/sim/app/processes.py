"""What a container's process does once it runs: the shell and programs the twin can follow.

The command line is read the way ``sh -c`` would run it (``lang/shell``, the parser of ``kubectl
exec``'s shell), far enough to know when and how the process ends: ``sleep N`` ends after N seconds
and ``sleep infinity`` never; ``nc -z HOST PORT`` succeeds once HOST:PORT answers; ``until COND; do
...; done`` ends once COND succeeds and runs on while it fails (``while`` the other way round), so a
wait for a dependency ends when it answers; ``python3[.x] FILE`` runs a program of ``programs.yaml``,
recognised by the digest of FILE as the container's volumes project it (a script on a volume the
twin does not know succeeds if it compiles; one the image holds succeeds); ``exit N``, ``true`` and
``false`` end with their status; other commands (``cp``, ``echo``, ...) succeed at once. Commands
joined by ``&&`` stop at the first failure, by ``||`` at the first success, by ``;`` run on; one
started with ``&`` runs beside the script, which goes on; a pipeline ends with its last command. The answer is the kubelet's: ``(seconds, exit code)``, or
None while the process runs on.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from itbench_gym.backends.sim.kube.runtime import FileReader
from itbench_gym.lang import shell as shellsyntax
from itbench_gym.lang import yamltext
from itbench_gym.lang.durations import sleep_seconds

_SHELLS = {"sh", "bash", "ash"}
_PYTHON = re.compile(r"python(3(\.\d+)?)?$")
#: nc's options that take a value as the next word (OpenBSD's and busybox's).
_NC_VALUED = frozenset({"-w", "-i", "-p", "-s", "-q", "-x", "-X", "-I", "-O", "-T", "-V", "-e"})
#: Seconds a program (an interpreter loading a script and its input, nc's connection) takes.
STEP_SECONDS = 1.0


@dataclass(frozen=True)
class Program:
    reads_json: str


def _script_of(argv: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT`` (any of the shells), else None."""
    if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1] == "-c":
        return argv[2]
    return None


@dataclass(frozen=True)
class _Step:
    """One command of a list: the operator before it (``;`` for the first) and whether ``&`` follows it."""

    joiner: str
    node: Any
    background: bool


def _steps(nodes: Sequence[Any]) -> list[_Step]:
    """The top-level commands of a parsed script."""
    steps: list[_Step] = []
    joiner = ";"
    for node in nodes:
        for part in node.parts if node.kind == "list" else [node]:
            if part.kind != "operator":
                steps.append(_Step(joiner, part, False))
                joiner = ";"
            elif part.op == "&" and steps:
                steps[-1] = _Step(steps[-1].joiner, steps[-1].node, True)
            else:
                joiner = part.op
    return steps


def _words(node: Any) -> list[str]:
    """A simple command's words as written (quotes removed, nothing expanded)."""
    return [str(p.word) for p in node.parts if p.kind == "word"]


def only_sleeps(argv: Sequence[str]) -> bool:
    """Whether the process does nothing but ``sleep`` (directly or as every command of ``sh -c``): it
    uses no CPU while it runs (ITBench's helper workloads run ``sleep infinity``)."""
    words = [str(a) for a in argv]
    script = _script_of(words)
    if script is None:
        return bool(words) and words[0].rsplit("/", 1)[-1] == "sleep"
    try:
        steps = [step.node for step in _steps(shellsyntax.parse(script))]
    except (shellsyntax.ShellSyntaxError, shellsyntax.UnsupportedSyntax):
        return False
    return bool(steps) and all(n.kind == "command" and _words(n)[:1] and _words(n)[0].rsplit("/", 1)[-1] == "sleep"
                               for n in steps)


@lru_cache(maxsize=1)
def programs() -> dict[str, Program]:
    raw = yamltext.load(Path(__file__).with_name("programs.yaml").read_text())
    return {str(p["sha256"]): Program(str(p["reads_json"])) for p in raw["programs"]}


@dataclass(frozen=True)
class Process:
    """One container's process: its argv, where ``~`` points, and what it can see."""

    argv: Sequence[str]
    home: str
    files: FileReader
    #: Whether ``host:port`` answers now (the app's network model).
    reachable: Callable[[str, int], bool]

    def outcome(self) -> tuple[float, int] | None:
        argv = [str(a) for a in self.argv]
        script = _script_of(argv)
        if script is None:
            return self._run(argv, 0.0)
        try:
            nodes = shellsyntax.parse(script)
        except shellsyntax.ShellSyntaxError:
            return 0.0, 2  # sh: syntax error (an unterminated quote, a missing ``done``)
        except shellsyntax.UnsupportedSyntax:
            return None  # a construct the twin does not read (``case``): the process runs on as its image's would
        return self._list(_steps(nodes), 0.0)

    def _list(self, steps: Sequence[_Step], elapsed: float) -> tuple[float, int] | None:
        code = 0
        for step in steps:
            if step.joiner in ("&&", "||") and (step.joiner == "&&") != (code == 0):
                continue
            if step.background:  # the shell goes on at once; the job's end is not the process'
                code = 0
                continue
            done = self._node(step.node, elapsed)
            if done is None:
                return None
            elapsed, code = done
            if step.node.kind == "command" and _words(step.node)[:1] == ["exit"]:
                return elapsed, code
        return elapsed, code

    def _node(self, node: Any, elapsed: float) -> tuple[float, int] | None:
        """``(time when it ended, status)`` of one command of a list started at ``elapsed``."""
        if node.kind == "command":
            return self._run(_words(node), elapsed)
        if node.kind == "pipeline":  # its commands run together; it ends with the last to end, with the last one's status
            ends: list[tuple[float, int]] = []
            for part in node.parts:
                if part.kind != "pipe":
                    done = self._node(part, elapsed)
                    if done is None:
                        return None
                    ends.append(done)
            return max(end for end, _ in ends), ends[-1][1]
        loop = node.list[0] if node.kind == "compound" and len(node.list) == 1 else None
        if loop is not None and loop.kind in ("until", "while"):
            # the body only passes time; the process ends once the condition lets the loop end
            condition = loop.parts[1]
            done = self._list(_steps([condition]), elapsed)
            if done is None or (done[1] == 0) != (loop.kind == "until"):
                return None
            return done[0], 0
        return elapsed, 0  # if, for, { }: what they run is not followed

    def _run(self, argv: list[str], elapsed: float) -> tuple[float, int] | None:
        """``(time when it ended, status)`` of one simple command started at ``elapsed``."""
        if not argv:
            return elapsed, 0
        name = argv[0].rsplit("/", 1)[-1]
        if name == "sleep":
            try:
                seconds = sleep_seconds(argv[1:]) if len(argv) > 1 else -1.0
            except ValueError:
                return elapsed, 1
            return None if math.isinf(seconds) else (elapsed, 1) if seconds < 0 else (elapsed + seconds, 0)
        if name == "exit":
            return elapsed, int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 0
        if name in ("true", "false"):
            return elapsed, int(name == "false")
        if name == "nc":
            return self._nc(argv[1:], elapsed)
        if _PYTHON.match(name) and len(argv) > 1 and not argv[1].startswith("-"):
            return elapsed + STEP_SECONDS, self._python(self._path(argv[1]))
        return elapsed, 0

    def _nc(self, args: list[str], elapsed: float) -> tuple[float, int]:
        """``nc -z HOST PORT``: whether HOST:PORT answers now; other uses of nc are not followed."""
        operands: list[str] = []
        scan, flags = iter(args), ""
        for word in scan:
            if word.startswith("-") and len(word) > 1:
                flags += word[1:]
                if word in _NC_VALUED:
                    next(scan, None)
            else:
                operands.append(word)
        if "z" not in flags or len(operands) != 2 or not operands[1].isdigit():
            return elapsed, 0
        return elapsed + STEP_SECONDS, 0 if self.reachable(operands[0], int(operands[1])) else 1

    def _path(self, path: str) -> str:
        return self.home.rstrip("/") + path[1:] if path == "~" or path.startswith("~/") else path

    def _python(self, path: str) -> int:
        source = self.files(path)
        if source is None:
            return 0  # a program of the image itself: it does what the image was built for
        program = programs().get(hashlib.sha256(source.encode()).hexdigest())
        if program is None:
            try:
                compile(source, path, "exec")
            except (SyntaxError, ValueError):
                return 1
            return 0
        data = self.files(self._path(program.reads_json))
        if data is None:
            return 1
        try:
            json.loads(data)
        except ValueError:
            return 1
        return 0
