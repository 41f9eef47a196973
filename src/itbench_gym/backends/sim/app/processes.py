"""What a container's process does once it runs: the shell and programs the twin can follow.

The command line is read the way ``sh -c`` would run it, far enough to know when and how the
process ends: ``sleep N`` ends after N seconds and ``sleep infinity`` never; ``until nc -z HOST
PORT; do ...; done`` ends once HOST:PORT answers; ``python3[.x] FILE`` runs a program of
``programs.yaml``, recognised by the digest of FILE as the container's volumes project it (a
script on a volume the twin does not know succeeds if it compiles; one the image holds succeeds);
``exit N``, ``true`` and ``false`` end with their status; other commands (``cp``, ``echo``, ...)
succeed at once. Commands joined by ``&&`` stop at the first failure, by ``||`` at the first
success, by ``;`` run on. The answer is the kubelet's: ``(seconds, exit code)``, or None while
the process runs on.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from itbench_gym.backends.sim.kube.runtime import FileReader

_NC = re.compile(r"nc\s+-z\s+(?:-v\s+)?(?:-w\s*\d+\s+)?(?P<host>[A-Za-z0-9.-]+)\s+(?P<port>\d+)")
_SHELLS = {"sh", "bash", "ash"}
_PYTHON = re.compile(r"python(3(\.\d+)?)?$")
#: Seconds a program (an interpreter loading a script and its input) takes.
STEP_SECONDS = 1.0


@dataclass(frozen=True)
class Program:
    reads_json: str


def only_sleeps(argv: Sequence[str]) -> bool:
    """Whether the process does nothing but ``sleep`` (directly or as every command of ``sh -c``): it
    uses no CPU while it runs (ITBench's helper workloads run ``sleep infinity``)."""
    words = [str(a) for a in argv]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1] in _SHELLS and words[1] == "-c":
        try:
            lexer = shlex.shlex(words[2], posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            return False
        commands: list[list[str]] = [[]]
        for token in tokens:
            if token in (";", "&&", "||"):
                commands.append([])
            else:
                commands[-1].append(token)
        return any(commands) and all(c[0].rsplit("/", 1)[-1] == "sleep" for c in commands if c)
    return bool(words) and words[0].rsplit("/", 1)[-1] == "sleep"


@lru_cache(maxsize=1)
def programs() -> dict[str, Program]:
    raw = yaml.safe_load(Path(__file__).with_name("programs.yaml").read_text())
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
        if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in _SHELLS and argv[1] == "-c":
            return self._script(argv[2])
        return self._run(argv, 0.0)

    def _script(self, script: str) -> tuple[float, int] | None:
        wait = _NC.search(script)
        if wait is not None and "until" in script:
            return (STEP_SECONDS, 0) if self.reachable(wait.group("host"), int(wait.group("port"))) else None
        try:
            lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            return (0.0, 2)  # sh: syntax error (an unterminated quote)
        elapsed, code, command, joiner = 0.0, 0, [], ";"
        for token in [*tokens, ";"]:
            if token not in (";", "&&", "||"):
                command.append(token)
                continue
            if command and (joiner == ";" or (joiner == "&&") == (code == 0)):
                done = self._run(command, elapsed)
                if done is None:
                    return None
                elapsed, code = done
                if command[0] == "exit":
                    return elapsed, code
            command, joiner = [], token
        return elapsed, code

    def _run(self, argv: list[str], elapsed: float) -> tuple[float, int] | None:
        """``(time when it ended, status)`` of one simple command started at ``elapsed``."""
        if not argv:
            return elapsed, 0
        name = argv[0].rsplit("/", 1)[-1]
        if name == "sleep":
            if len(argv) < 2 or argv[1] == "infinity":
                return None
            try:
                return elapsed + float(argv[1].rstrip("s")), 0
            except ValueError:
                return elapsed, 1
        if name == "exit":
            return elapsed, int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 0
        if name in ("true", "false"):
            return elapsed, int(name == "false")
        if _PYTHON.match(name) and len(argv) > 1 and not argv[1].startswith("-"):
            return elapsed + STEP_SECONDS, self._python(self._path(argv[1]))
        return elapsed, 0

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
