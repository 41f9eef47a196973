"""The POSIX shell a container's ``sh``/``ash``/``bash``/``dash`` runs, interpreting a script over
the emulated programs.

bashlex gives the structure (lists, pipelines, simple and compound commands, redirections); words
are expanded here from their source text (quotes, parameters, field splitting, tildes, globs over
the directories the twin models). Messages follow the shell the image has: busybox ash, dash
(Debian's /bin/sh) or bash; a command substitution runs its script in a subshell. What the twin
cannot run faithfully (here-documents, functions, background jobs...) is refused by name
rather than run approximately.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.lang import shell as shellsyntax

from . import programs
from .context import EXEC_WORK_CEILING, MISSING, NOT_KEPT, BeyondTwin, Container, ExecResult, OutOfMemory, ProcessWaits

SUPPORTED = ("simple commands, pipelines, ; && || lists, if, for, while, until, { } groups, ( ) subshells, variables and parameter expansions, "
             "command substitution, quoting, redirections (< FILE, > FILE and >> FILE in the pod's emptyDir volumes, > /dev/null, 2>&1)")
#: Builtins every one of these shells has that the twin's shell does not run.
_UNSUPPORTED_BUILTINS = frozenset({"alias", "bg", "command", "declare", "eval", "fg", "getopts", "hash", "jobs", "kill", "let",
                                   "local", "readonly", "return", "source", ".", "times", "trap", "type", "typeset", "ulimit",
                                   "umask", "unalias", "wait", "shopt", "pushd", "popd", "dirs", "disown", "suspend"})
_PROGRAM_BUILTINS = frozenset({"echo", "printf", "pwd", "true", "false", "test", "["})
_LOOP_LIMIT = 10_000
_GLOB_CHARS = frozenset("*?[")
#: Words and values up to this many bytes are not checked against the process's memory one by one:
#: a script names few variables, so small ones cannot add up to much (and the check sums them all).
_SMALL = 4096
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def flavour(shell: str, container: Container) -> str:
    """Which shell ``shell`` (argv[0] as invoked) is in this image: ``bash``, ``busybox`` (ash) or ``dash``.
    A bare ``sh`` is busybox's on Alpine, bash on Red Hat UBI/Amazon Linux (bash and no dash), else dash."""
    executables = container.executables or ()
    if posixpath.basename(shell) == "bash":
        return "bash"
    if "ash" in executables:
        return "busybox"
    return "bash" if "bash" in executables and "dash" not in executables else "dash"


class _Exit(Exception):
    """The shell ends (``exit``, ``set -e``, a fatal expansion error) with ``code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class _Work:
    """The bytes a shell and its subshells have moved: words expanded, output written."""

    moved: int = 0

    def add(self, size: int) -> None:
        self.moved += size
        if self.moved > EXEC_WORK_CEILING:
            raise BeyondTwin(f"itbench_gym: the twin's shell moves at most {EXEC_WORK_CEILING // 2**20} MiB of data for one "
                             "exec'd process (it runs within one step); this command went past it")


class _Unsupported(Exception):
    """A construct the twin's shell does not run; the message names it."""


class _Loop(Exception):
    """``break`` (or ``continue`` when ``again``) out of ``levels`` enclosing loops."""

    def __init__(self, levels: int, again: bool) -> None:
        super().__init__(levels)
        self.levels, self.again = levels, again


@dataclass
class _Input:
    """A command's standard input: what is left of it is shared by the commands of a compound command."""

    data: bytes
    pos: int = 0

    def rest(self) -> bytes:
        taken, self.pos = self.data[self.pos:], len(self.data)
        return taken

    def line(self) -> bytes | None:
        if self.pos >= len(self.data):
            return None
        end = self.data.find(b"\n", self.pos)
        end = len(self.data) if end < 0 else end + 1
        taken, self.pos = self.data[self.pos:end], end
        return taken


@dataclass
class _IO:
    """Where a command reads and writes: its stdin and the sinks fds 1 and 2 point at."""

    stdin: _Input
    out: bytearray
    err: bytearray


@dataclass
class _Piece:
    """Part of an expanded word: ``kind`` is ``lit`` (unquoted source text), ``quoted`` or ``split``
    (an unquoted expansion, subject to field splitting); ``break`` ends a field ("$@")."""

    text: str
    kind: str


@dataclass
class _State:
    """What a subshell copies: variables, which are exported, the working directory, options, positional parameters."""

    vars: dict[str, str]
    exported: set[str]
    cwd: str
    options: set[str]
    positional: list[str]

    def copy(self) -> _State:
        """What a subshell starts from: everything copied, so its changes stay its own."""
        return _State(dict(self.vars), set(self.exported), self.cwd, set(self.options), list(self.positional))


@dataclass
class _Shell:
    script: str
    container: Container
    name: str
    kind: str
    state: _State
    zero: str
    from_stdin: bool
    status: int = 0
    line: int = 1
    iterations: int = 0
    quiet_errexit: int = 0
    #: The diagnostic of an expansion error that ends the shell, written when it has ended.
    pending_error: bytes = b""
    #: What command substitutions wrote to stderr, passed on with the command that expanded them.
    spill: bytearray = field(default_factory=bytearray)
    #: The status of the last command substitution of the command being expanded (None: it had none).
    substituted: int | None = None
    #: The bytes of the words of the command being expanded.
    words_held: int = 0
    #: What this shell and its subshells have moved.
    work: _Work = field(default_factory=_Work)
    builtins: dict[str, Callable[[_Shell, list[str], _IO], int]] = field(default_factory=dict)

    # --- diagnostics ---------------------------------------------------------------------------------

    def prefix(self) -> str:
        """How this shell starts a diagnostic about the command on the current line."""
        if self.kind == "dash":
            return f"{self.name}: {self.line}: "
        if self.kind == "bash":
            return f"{self.name}: line {self.line}: "
        return f"{self.name}: "

    def say(self, io: _IO, message: str) -> None:
        io.err += (self.prefix() + message + "\n").encode("utf-8", "surrogateescape")

    # --- structure -----------------------------------------------------------------------------------

    def run(self, nodes: Sequence[Any], io: _IO) -> int:
        for node in nodes:
            self.execute(node, io)
        return self.status

    def execute(self, node: Any, io: _IO) -> int:
        """Run one node of bashlex's tree; sets and returns ``$?``."""
        kind = node.kind
        if kind == "list":
            self._list(node.parts, io)
        elif kind == "pipeline":
            self._pipeline(node.parts, io)
        elif kind == "command":
            self.status = self._simple(node, io)
        elif kind == "compound":
            self._compound(node, io)
        elif kind in ("if", "for", "while", "until"):
            getattr(self, "_" + kind)(node.parts, io)
        else:
            raise _Unsupported(kind)
        return self.status

    def _list(self, parts: Sequence[Any], io: _IO) -> None:
        """``a && b || c ; d``: each and-or list runs its commands by the previous status; ``set -e``
        ends the shell when the last command run of an and-or list is its last one and fails."""
        groups: list[list[Any]] = [[]]
        for part in parts:
            if part.kind == "operator" and part.op in (";", "\n"):
                groups.append([])
            else:
                groups[-1].append(part)
        for group in groups:
            if not group:
                continue
            commands = group[0::2]
            operators = [op.op for op in group[1::2]]
            self.quiet_errexit += 1
            last = 0
            try:
                for index, command in enumerate(commands):
                    if index and (operators[index - 1] == "&&") != (self.status == 0):
                        continue
                    if index == len(commands) - 1:
                        self.quiet_errexit -= 1
                    try:
                        self.execute(command, io)
                    finally:
                        if index == len(commands) - 1:
                            self.quiet_errexit += 1
                    last = index
            finally:
                self.quiet_errexit -= 1
            if last == len(commands) - 1:
                self._errexit()

    def _errexit(self) -> None:
        if self.status and "e" in self.state.options and not self.quiet_errexit:
            raise _Exit(self.status)

    def _pipeline(self, parts: Sequence[Any], io: _IO) -> None:
        """Each stage's stdout feeds the next; in a pipe every stage runs in a subshell. The status is
        the last stage's (the last failing one's with ``pipefail``), negated after ``!``."""
        negate = bool(parts) and parts[0].kind == "reservedword" and parts[0].word == "!"
        stages = [p for p in parts if p.kind not in ("pipe", "reservedword")]
        statuses: list[int] = []
        feed = io.stdin
        if negate:
            self.quiet_errexit += 1
        try:
            for index, stage in enumerate(stages):
                last = index == len(stages) - 1
                out = io.out if last else bytearray()
                stage_io = _IO(feed, out, io.err)
                if len(stages) == 1:
                    self.execute(stage, stage_io)
                else:
                    self._subshell([stage], stage_io)
                statuses.append(self.status)
                feed = _Input(bytes(out))
        finally:
            if negate:
                self.quiet_errexit -= 1
        failed = [s for s in statuses if s]
        self.status = failed[-1] if failed and "pipefail" in self.state.options else statuses[-1] if statuses else 0
        if negate:
            self.status = int(not self.status)
        elif len(stages) > 1:
            self._errexit()

    def _subshell(self, nodes: Sequence[Any], io: _IO) -> None:
        """``nodes`` run in a copy of the shell's state: what they set, ``cd`` or ``exit`` stays theirs."""
        saved = self.state
        self.state = saved.copy()
        try:
            for node in nodes:
                self.execute(node, io)
        except _Exit as ended:
            self.status = ended.code
        except _Loop:
            pass
        except OutOfMemory:  # the OOM killer ends the subshell, the largest process, and the shell goes on
            self.status = programs.OOM_KILLED
        finally:
            self.state = saved

    def _compound(self, node: Any, io: _IO) -> None:
        inner = _IO(io.stdin, io.out, io.err)
        if not self._redirect(node.redirects, inner):
            self.status = 1
            return
        body = [p for p in node.list if p.kind != "reservedword"]
        if node.list and getattr(node.list[0], "word", "") == "(":
            self._subshell(body, inner)
            return
        for part in body:
            self.execute(part, inner)

    def _if(self, parts: Sequence[Any], io: _IO) -> None:
        index, ran = 0, False
        self.status = 0
        while index < len(parts) and not ran:
            word = parts[index].word if parts[index].kind == "reservedword" else ""
            if word in ("if", "elif"):
                self.quiet_errexit += 1
                try:
                    self.execute(parts[index + 1], io)
                finally:
                    self.quiet_errexit -= 1
                if self.status == 0:
                    self.execute(parts[index + 3], io)
                    ran = True
                else:
                    self.status = 0
                index += 4
            elif word == "else":
                self.execute(parts[index + 1], io)
                ran = True
            else:
                index += 1

    def _body(self, parts: Sequence[Any]) -> Any:
        start = next(i for i, p in enumerate(parts) if p.kind == "reservedword" and p.word == "do")
        return parts[start + 1]

    def _iterate(self, io: _IO, body: Any) -> bool:
        """Run a loop's body once; False when the loop should stop (``break``)."""
        self.iterations += 1
        if self.iterations > _LOOP_LIMIT:
            self.say(io, f"the itbench_gym twin's shell stops loops after {_LOOP_LIMIT} iterations")
            raise _Exit(2)
        try:
            self.execute(body, io)
        except _Loop as jump:
            if jump.levels > 1:
                raise _Loop(jump.levels - 1, jump.again) from None
            return jump.again
        return True

    def _for(self, parts: Sequence[Any], io: _IO) -> None:
        variable = parts[1].word
        words: list[str] = []
        if len(parts) > 2 and parts[2].kind == "reservedword" and parts[2].word == "in":
            for part in parts[3:]:
                if part.kind == "reservedword":
                    break
                words += self.expand(part)
        else:
            words = list(self.state.positional)
        body = self._body(parts)
        self.status = 0
        for word in words:
            self.state.vars[variable] = word
            if not self._iterate(io, body):
                break

    def _while(self, parts: Sequence[Any], io: _IO, until: bool = False) -> None:
        body = self._body(parts)
        status = 0
        while True:
            self.quiet_errexit += 1
            try:
                self.execute(parts[1], io)
            finally:
                self.quiet_errexit -= 1
            if (self.status == 0) == until:
                break
            if not self._iterate(io, body):
                status = self.status
                break
            status = self.status
        self.status = status

    def _until(self, parts: Sequence[Any], io: _IO) -> None:
        self._while(parts, io, until=True)

    # --- simple commands -----------------------------------------------------------------------------

    def _simple(self, node: Any, io: _IO) -> int:
        """Expand a simple command's words, apply its assignments and redirections, and run it."""
        self.line = self.script.count("\n", 0, node.pos[0]) + 1
        self.substituted = None
        self.words_held = 0
        assignments: list[tuple[str, str]] = []
        words: list[str] = []
        redirects: list[Any] = []
        for part in node.parts:
            if part.kind == "assignment" and not words:
                name, _, value = self.source(part).partition("=")
                assignments.append((name, self.expand(None, value, split=False, assignment=True)[0]))
            elif part.kind in ("word", "assignment"):
                words += self.expand(part)
            elif part.kind == "redirect":
                redirects.append(part)
        io.err += self.spill
        self.spill.clear()
        cmd_io = _IO(io.stdin, io.out, io.err)
        if not words:
            for name, value in assignments:
                self.state.vars[name] = value
            if any(len(value) > _SMALL for _, value in assignments):
                self.words_held = 0
                self.hold_data()
            if not self._redirect(redirects, cmd_io):
                return 1
            return self.substituted or 0
        if not self._redirect(redirects, cmd_io):
            return 1
        env = {k: v for k, v in self.state.vars.items() if k in self.state.exported}
        env.update(assignments)
        builtin = self.builtins.get(words[0])
        if builtin is not None:
            return builtin(self, words, cmd_io)
        if words[0] in _UNSUPPORTED_BUILTINS:
            raise _Unsupported(f"the {words[0]} builtin")
        if words[0] in _PROGRAM_BUILTINS:
            result = programs.invoke(words[0], words, self.container, b"", env, self.state.cwd, style=self.kind,
                                     prefix=self.prefix() + f"{words[0]}: ")
            return self._emit(result, cmd_io)
        if programs.find(words[0], self.container, env, cwd=self.state.cwd) is None:
            if self.kind == "bash":
                self.say(cmd_io, f"{words[0]}: " + ("No such file or directory" if "/" in words[0] else "command not found"))
            else:
                self.say(cmd_io, f"{words[0]}: not found")
            return 127
        return self._emit(programs.run(words, self.container, cmd_io.stdin.rest(), env, self.state.cwd), cmd_io)

    def _emit(self, result: ExecResult, io: _IO) -> int:
        self.container.keep(len(io.out) + len(result.stdout))
        self.container.keep(len(io.err) + len(result.stderr))
        self.work.add(len(result.stdout) + len(result.stderr))
        io.out += result.stdout
        io.err += result.stderr
        return result.code

    def hold_data(self) -> None:
        """Check what the shell holds: its variables, positional parameters and the words of the
        command it is expanding (a real shell's heap, which its container's memory limit bounds)."""
        held = sum(map(len, self.state.vars.values())) + sum(map(len, self.state.positional)) + self.words_held
        self.container.hold(held)

    def source(self, node: Any) -> str:
        return self.script[node.pos[0]:node.pos[1]]

    # --- redirections --------------------------------------------------------------------------------

    def _redirect(self, redirects: Sequence[Any], io: _IO) -> bool:
        """Point ``io`` where the redirections say, left to right; False (after saying why) when one fails."""
        for redirect in redirects:
            kind = redirect.type
            if kind in ("<<", "<<-") or getattr(redirect, "heredoc", None) is not None:
                raise _Unsupported("here-documents")
            target = redirect.output
            fd = redirect.input if isinstance(redirect.input, int) else (0 if kind.startswith("<") else 1)
            if kind in (">&", "<&") and not hasattr(target, "kind"):
                sink = bytearray() if target == "-" else io.out if target == 1 else io.err if target == 2 else None
                if sink is None or fd == 0:
                    raise _Unsupported(f"file descriptor {target}")
                if fd == 1:
                    io.out = sink
                elif fd == 2:
                    io.err = sink
                else:
                    raise _Unsupported(f"file descriptor {fd}")
                continue
            word = " ".join(self.expand(target))
            if kind == "<<<":
                io.stdin = _Input((word + "\n").encode("utf-8", "surrogateescape"))
                continue
            if kind == "<" or fd == 0:
                found = programs.stat(self.container, self.container.path(word, self.state.cwd), io.stdin.rest())
                if found.kind == "file":
                    io.stdin = _Input(found.data)
                    continue
                self._open_error(io, word, found)
                return False
            sink = self._sink(word, io, append=kind == ">>")
            if sink is None:
                return False
            if kind == "&>" or (kind == ">&" and fd == 1):
                io.out = io.err = sink
            elif fd == 1:
                io.out = sink
            elif fd == 2:
                io.err = sink
            else:
                raise _Unsupported(f"file descriptor {fd}")
        return True

    def _sink(self, word: str, io: _IO, *, append: bool) -> bytearray | None:
        """Where an output redirection writes: a stream, or a file opened (created, truncated unless
        ``append``) in one of the pod's emptyDir volumes; None after saying why it cannot be opened."""
        path = self.container.path(word, self.state.cwd)
        if path == "/dev/null":
            return bytearray()
        if path in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
            return io.out
        if path in ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2"):
            return io.err
        tree = self.container.files
        error = tree.write_error(path)
        if error is None:
            return tree.open_write(path, append=append)
        if error == NOT_KEPT:
            io.err += f"{self.name}: {word}: {NOT_KEPT}\n".encode("utf-8", "surrogateescape")
        elif self.kind == "bash":
            self.say(io, f"{word}: {error}")
        elif self.kind == "dash":
            self.say(io, f"cannot create {word}: {'Directory nonexistent' if error == MISSING else error}")
        else:
            self.say(io, f"can't create {word}: {'nonexistent directory' if error == MISSING else error}")
        return None

    def _open_error(self, io: _IO, word: str, found: programs.Stat) -> None:
        if found.kind == "unmodelled":
            io.err += f"{self.name}: {word}: {programs.UNMODELLED}\n".encode("utf-8", "surrogateescape")
            return
        error = found.error
        if self.kind == "dash":
            self.say(io, f"cannot open {word}: {'No such file' if found.kind == 'missing' else error}")
        elif self.kind == "bash":
            self.say(io, f"{word}: {error}")
        else:
            self.say(io, f"can't open '{word}': {error}")

    # --- word expansion ------------------------------------------------------------------------------

    def expand(self, node: Any, text: str | None = None, *, split: bool = True, assignment: bool = False) -> list[str]:
        """A word (a node's source text, or ``text``) as the fields it expands to: parameters,
        quotes, tildes, then field splitting and globbing of what is unquoted (only when ``split``)."""
        src = self.source(node) if text is None else text
        pieces = self._pieces(src, quoted=False, assignment=assignment)
        size = sum(len(p.text) for p in pieces)
        self.words_held += size
        self.work.add(size)
        if self.words_held > _SMALL:
            self.hold_data()
        if not split:
            return ["".join(p.text for p in pieces if p.kind != "break")]
        if pieces and all(p.kind == "quoted" or (p.kind == "lit" and not _GLOB_CHARS.intersection(p.text)) for p in pieces):
            return ["".join(p.text for p in pieces)]  # nothing to split or glob: the one field splitting would give
        return [f for fields in [self._glob(field) for field in self._split(pieces)] for f in fields]

    def _pieces(self, src: str, quoted: bool, assignment: bool = False) -> list[_Piece]:
        """Scan ``src`` (in double quotes when ``quoted``) into pieces, expanding ``$`` forms."""
        pieces: list[_Piece] = []
        i = 0
        if not quoted and src.startswith("~"):
            end = src.find("/") if "/" in src else len(src)
            if end == 1:
                pieces.append(_Piece(self.state.vars.get("HOME", "~"), "quoted"))
                i = 1
        while i < len(src):
            c = src[i]
            if c == "\\":
                nxt = src[i + 1:i + 2]
                if nxt == "\n":
                    i += 2
                elif quoted and nxt not in ("$", "`", '"', "\\"):
                    pieces.append(_Piece("\\", "quoted"))
                    i += 1
                else:
                    pieces.append(_Piece(nxt or "\\", "quoted"))
                    i += 2
            elif c == "'" and not quoted:
                end = src.find("'", i + 1)
                end = len(src) if end < 0 else end
                pieces.append(_Piece(src[i + 1:end], "quoted"))
                i = end + 1
            elif c == '"' and not quoted:
                end = shellsyntax.closing_quote(src, i + 1)
                inner = self._pieces(src[i + 1:end], quoted=True)
                only_at = src[i + 1:end] in ("$@", "${@}") and not self.state.positional
                pieces += inner if only_at else [_Piece("", "quoted"), *inner]
                i = end + 1
            elif c == "`":
                end = shellsyntax.closing_backquote(src, i + 1)
                script = re.sub(r"\\([$`\\])", r"\1", src[i + 1:end])
                pieces.append(_Piece(self._substitute(script), "quoted" if quoted else "split"))
                i = end + 1
            elif c == "$":
                more, i = self._dollar(src, i, quoted)
                pieces += more
            elif c == "~" and assignment and not quoted and src[i - 1:i] == ":" and src[i + 1:i + 2] in ("", "/", ":"):
                pieces.append(_Piece(self.state.vars.get("HOME", "~"), "quoted"))
                i += 1
            else:
                pieces.append(_Piece(c, "quoted" if quoted else "lit"))
                i += 1
        return pieces

    def _dollar(self, src: str, i: int, quoted: bool) -> tuple[list[_Piece], int]:
        """The expansion of the ``$`` form at ``src[i]`` and the index after it."""
        kind = "quoted" if quoted else "split"
        nxt = src[i + 1:i + 2]
        if nxt == "{":
            end = shellsyntax.closing_brace(src, i + 2)
            return self._braced(src[i + 2:end], quoted), end + 1
        if nxt == "(":
            if src[i + 2:i + 3] == "(":
                raise _Unsupported("arithmetic expansion $((...))")
            end = shellsyntax.closing_paren(src, i + 2)
            return [_Piece(self._substitute(src[i + 2:end]), kind)], end + 1
        if nxt == "'" and not quoted and self.kind == "bash":
            end = src.find("'", i + 2)
            end = len(src) if end < 0 else end
            return [_Piece(programs.escapes(src[i + 2:end], octal_needs_zero=False)[0], "quoted")], end + 1
        match = _NAME.match(src, i + 1)
        name = match.group(0) if match else nxt if nxt and (nxt.isdigit() or nxt in "?#@*$!-") else ""
        if not name:
            return [_Piece("$", kind if quoted else "lit")], i + 1
        return self._value_pieces(name, quoted), i + 1 + len(name)

    def _substitute(self, script: str) -> str:
        """A command substitution: ``script`` run in a subshell, its stdout less trailing newlines; its
        status is what a command made only of assignments reports."""
        try:
            nodes = shellsyntax.parse(script)
        except (shellsyntax.ShellSyntaxError, shellsyntax.UnsupportedSyntax):
            raise self._fatal("syntax error in a command substitution", 2) from None
        for node in nodes:
            refused = _refused(node)
            if refused:
                raise _Unsupported(refused)
        sub = _Shell(script, self.container, self.name, self.kind, self.state.copy(), self.zero, False, builtins=self.builtins,
                     work=self.work)
        io = _IO(_Input(b""), bytearray(), self.spill)
        try:
            sub.run(nodes, io)
        except _Exit as ended:
            sub.status = ended.code
        except _Loop:
            pass
        except OutOfMemory:
            sub.status = programs.OOM_KILLED
        self.spill += sub.pending_error
        self.substituted = sub.status
        return bytes(io.out).decode("utf-8", "surrogateescape").rstrip("\n")

    def _value_pieces(self, name: str, quoted: bool) -> list[_Piece]:
        if name in ("@", "*"):
            if quoted and name == "@":
                out: list[_Piece] = []
                for index, arg in enumerate(self.state.positional):
                    out += ([_Piece("", "break")] if index else []) + [_Piece(arg, "quoted")]
                return out
            ifs = self.state.vars.get("IFS", " \t\n")
            joiner = ifs[:1] if quoted else " "
            return [_Piece(joiner.join(self.state.positional), "quoted" if quoted else "split")]
        value = self._param(name)
        if value is None:
            self._nounset(name)
        return [_Piece(value or "", "quoted" if quoted else "split")]

    def _nounset(self, name: str) -> None:
        if "u" in self.state.options and name not in ("@", "*", "!"):
            raise self._fatal(f"{name}: " + ("unbound variable" if self.kind == "bash" else "parameter not set"),
                              127 if self.kind == "bash" else 2)

    def _fatal(self, message: str, code: int) -> _Exit:
        self.pending_error = (self.prefix() + message + "\n").encode("utf-8", "surrogateescape")
        return _Exit(code)

    def _param(self, name: str) -> str | None:
        """The value of parameter ``name``; None when it is unset."""
        if name == "?":
            return str(self.status)
        if name == "#":
            return str(len(self.state.positional))
        if name == "0":
            return self.zero
        if name == "-":
            return "".join(sorted(o for o in self.state.options if len(o) == 1))
        if name == "$":
            raise _Unsupported("the shell's process id $$")
        if name == "!":
            return None
        if name.isdigit():
            index = int(name)
            return self.state.positional[index - 1] if index <= len(self.state.positional) else None
        return self.state.vars.get(name)

    def _braced(self, inner: str, quoted: bool) -> list[_Piece]:
        """``${...}``: NAME, #NAME, and the -, =, +, ? (with or without :) and #, ##, %, %% forms."""
        kind = "quoted" if quoted else "split"
        if inner.startswith("#") and len(inner) > 1:
            value = self._param(inner[1:]) if _is_param(inner[1:]) else None
            if not _is_param(inner[1:]):
                return self._bad_substitution(inner)
            if value is None:
                self._nounset(inner[1:])
            return [_Piece(str(len(value or "")), kind)]
        match = re.match(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[?#@*$!\-0])(:?[-=+?]|##?|%%?)?(.*)\Z", inner, re.DOTALL)
        if not match or (match.group(3) and not match.group(2)):
            return self._bad_substitution(inner)
        name, op, word = match.group(1), match.group(2), match.group(3)
        if op is None:
            return self._value_pieces(name, quoted)
        value = self._param(name)
        if name in ("@", "*"):
            value = " ".join(self.state.positional) if self.state.positional else None
        empty = value is None or (op.startswith(":") and value == "")
        if op.lstrip(":") in "-=+?" and len(op.lstrip(":")) == 1:
            letter = op[-1]
            if letter == "+":
                return self._pieces(word, quoted) if not empty else []
            if not empty:
                return self._value_pieces(name, quoted)
            if letter == "-":
                return self._pieces(word, quoted)
            pieces = self._pieces(word, quoted)
            self.container.hold(sum(len(p.text) for p in pieces))
            text = "".join(p.text for p in pieces)
            if letter == "=":
                if not _NAME.fullmatch(name):
                    raise self._fatal(f"{name}: cannot assign in this way" if self.kind == "bash" else f"{inner}: bad variable name", 2)
                self.state.vars[name] = text
                return [_Piece(text, kind)]
            message = text or ("parameter null or not set" if op.startswith(":") or self.kind == "bash" else "parameter not set")
            raise self._fatal(f"{name}: {message}", 1 if self.kind == "bash" else 2)
        if value is None:
            self._nounset(name)
        atoms = _glob_atoms([(c, p.kind != "quoted") for p in self._pieces(word, quoted=False) for c in p.text])
        value = value or ""
        if op.startswith("#"):
            return [_Piece(value[_matched_prefix(atoms, value, longest=op == "##"):], kind)]
        # a suffix of the value is a prefix of it reversed, matched by the pattern's atoms reversed
        return [_Piece(value[:len(value) - _matched_prefix(atoms[::-1], value[::-1], longest=op == "%%")], kind)]

    def _bad_substitution(self, inner: str) -> list[_Piece]:
        if self.kind == "bash" and re.match(r"[A-Za-z_]\w*(\[|/|:\d|:-?\s*\d|\^|,|@)", inner):
            raise _Unsupported(f"the bash parameter expansion ${{{inner}}}")
        raise self._fatal(("${" + inner + "}: bad substitution") if self.kind == "bash" else "Bad substitution"
                          if self.kind == "dash" else "syntax error: bad substitution", 1 if self.kind == "bash" else 2)

    def _split(self, pieces: list[_Piece]) -> list[list[tuple[str, bool]]]:
        """Field splitting: unquoted expansions split on IFS; each field is (character, glob-active) pairs."""
        ifs = self.state.vars.get("IFS", " \t\n")
        fields: list[list[tuple[str, bool]]] = []
        current: list[tuple[str, bool]] = []
        exists = False
        for piece in pieces:
            if piece.kind == "break":
                fields.append(current)
                current, exists = [], False
            elif piece.kind == "split":
                for ch in piece.text:
                    if ch in ifs:
                        if ch not in " \t\n" or current or exists:
                            fields.append(current)
                        current, exists = [], False
                    else:
                        current.append((ch, True))
            else:
                exists = True
                current += [(ch, piece.kind == "lit") for ch in piece.text]
        if current or exists:
            fields.append(current)
        return fields

    def _glob(self, chars: list[tuple[str, bool]]) -> list[str]:
        """Pathname expansion of one field over a directory the twin models; the field itself when
        nothing matches or the directory is the image's own (what sh does when nothing matches)."""
        word = "".join(c for c, _ in chars)
        if not any(active and c in "*?[" for c, active in chars):
            return [word]
        slash = word.rfind("/")
        directory, last = chars[:slash + 1], chars[slash + 1:]
        if any(active and c in "*?[" for c, active in directory):
            return [word]
        prefix = "".join(c for c, _ in directory)
        where = self.container.path(prefix or ".", self.state.cwd)
        tree = self.container.files
        names = tree.entries(where) if tree.is_modelled(tree.resolve(where)) else None
        pattern = _glob_regex(last)
        hidden = bool(last) and last[0][0] == "."
        matches = [prefix + n for n in names or [] if (hidden or not n.startswith(".")) and re.fullmatch(pattern, n, re.DOTALL)]
        return matches or [word]

    # --- builtins ------------------------------------------------------------------------------------

    def _exit(self, args: list[str], io: _IO) -> int:
        if len(args) > 1:
            if not re.fullmatch(r"\d+", args[1]) and not (self.kind == "bash" and re.fullmatch(r"-\d+", args[1])):
                self.say(io, f"exit: {args[1]}: numeric argument required" if self.kind == "bash" else f"exit: Illegal number: {args[1]}")
                raise _Exit(2)
            raise _Exit(int(args[1]) & 0xFF)
        raise _Exit(self.status)

    def _cd(self, args: list[str], io: _IO) -> int:
        target = args[1] if len(args) > 1 else self.state.vars.get("HOME", "/")
        if target == "-":
            target = self.state.vars.get("OLDPWD", self.state.cwd)
            io.out += (target + "\n").encode("utf-8", "surrogateescape")
        path = self.container.path(target, self.state.cwd)
        found = programs.stat(self.container, path)
        if found.kind == "unmodelled":
            self.say(io, f"cd: {target}: {programs.UNMODELLED}")
        elif found.kind != "dir":
            error = "Not a directory" if found.kind in ("file", "notdir") else "No such file or directory"
            if self.kind == "bash":
                self.say(io, f"cd: {target}: {error}")
                return 1
            self.say(io, f"cd: can't cd to {target}" + ("" if self.kind == "dash" else f": {error}"))
            return 2
        self.state.vars["OLDPWD"], self.state.cwd = self.state.cwd, path
        self.state.vars["PWD"] = path
        return 0

    def _export(self, args: list[str], io: _IO) -> int:
        names = [a for a in args[1:] if a != "-p"]
        if not names:
            for name in sorted(self.state.exported & set(self.state.vars)):
                value = self.state.vars[name]
                line = f'declare -x {name}="{value}"' if self.kind == "bash" else f"export {name}='{value}'"
                io.out += (line + "\n").encode("utf-8", "surrogateescape")
            return 0
        code = 0
        for arg in names:
            name, eq, value = arg.partition("=")
            if not _NAME.fullmatch(name):
                self.say(io, f"export: `{arg}': not a valid identifier" if self.kind == "bash" else f"export: {arg}: bad variable name")
                code = 1 if self.kind == "bash" else 2
                continue
            if eq:
                self.state.vars[name] = value
            self.state.exported.add(name)
        return code

    def _unset(self, args: list[str], io: _IO) -> int:
        for name in args[1:]:
            if name not in ("-v", "-f"):
                self.state.vars.pop(name, None)
                self.state.exported.discard(name)
        return 0

    def _colon(self, args: list[str], io: _IO) -> int:
        return 0

    def _set(self, args: list[str], io: _IO) -> int:
        words = args[1:]
        if not words:
            for name, value in sorted(self.state.vars.items()):
                io.out += f"{name}='{value}'\n".encode("utf-8", "surrogateescape")
            return 0
        while words and words[0][:1] in ("-", "+") and words[0] != "--":
            flag = words.pop(0)
            enable = flag[0] == "-"
            letters = [_LONG_OPTIONS.get(words.pop(0), "?") if words else "?"] if flag[1:] == "o" else list(flag[1:])
            for letter in letters:
                if letter not in ("e", "u", "pipefail"):
                    raise _Unsupported(f"set {flag[0]}{'o ' if flag[1:] == 'o' else ''}{letter if letter != '?' else ''}".strip())
                (self.state.options.add if enable else self.state.options.discard)(letter)
        if words[:1] == ["--"]:
            words = words[1:]
            self.state.positional = list(words)
        elif words:
            self.state.positional = list(words)
        return 0

    def _shift(self, args: list[str], io: _IO) -> int:
        count = int(args[1]) if len(args) > 1 and args[1].isdigit() else 1
        if count > len(self.state.positional):
            self.say(io, "shift: shift count out of range" if self.kind == "bash" else "shift: can't shift that many")
            return 1 if self.kind == "bash" else 2
        self.state.positional = self.state.positional[count:]
        return 0

    def _loop(self, args: list[str], io: _IO) -> int:
        levels = int(args[1]) if len(args) > 1 and args[1].isdigit() and int(args[1]) > 0 else 1
        raise _Loop(levels, again=args[0] == "continue")

    def _read(self, args: list[str], io: _IO) -> int:
        """read [-r] [NAME...]: one line of stdin split on IFS into the names (REPLY when none)."""
        raw = "-r" in args[1:]
        names = [a for a in args[1:] if a != "-r"] or ["REPLY"]
        data = io.stdin.line()
        if data is None:
            for name in names:
                self.state.vars[name] = ""
            return 1
        line = programs.text(data)
        ended = line.endswith("\n")
        line = line[:-1] if ended else line
        if not raw:
            line = re.sub(r"\\(.)", r"\1", line)
        ifs = self.state.vars.get("IFS", " \t\n")
        fields = [f for f in re.split("[" + re.escape(ifs) + "]+", line.strip(ifs))] if ifs else [line]
        for index, name in enumerate(names):
            self.state.vars[name] = " ".join(fields[index:]) if index == len(names) - 1 else (fields[index] if index < len(fields) else "")
        if len(line) > _SMALL:
            self.hold_data()
        return 0 if ended else 1

    def _exec(self, args: list[str], io: _IO) -> int:
        if len(args) == 1:
            raise _Unsupported("exec without a command")
        words = args[1:]
        env = {k: v for k, v in self.state.vars.items() if k in self.state.exported}
        if programs.find(words[0], self.container, env, cwd=self.state.cwd) is None:
            self.say(io, f"exec: {words[0]}: not found")
            raise _Exit(127)
        raise _Exit(self._emit(programs.run(words, self.container, io.stdin.rest(), env, self.state.cwd), io))


_LONG_OPTIONS = {"errexit": "e", "nounset": "u", "pipefail": "pipefail"}
_BUILTINS: dict[str, Callable[[_Shell, list[str], _IO], int]] = {
    "exit": _Shell._exit, "cd": _Shell._cd, "export": _Shell._export, "unset": _Shell._unset, ":": _Shell._colon,
    "set": _Shell._set, "shift": _Shell._shift, "break": _Shell._loop, "continue": _Shell._loop, "read": _Shell._read,
    "exec": _Shell._exec,
}


def _is_param(name: str) -> bool:
    return bool(_NAME.fullmatch(name) or name.isdigit() or (len(name) == 1 and name in "?#@*$!-"))


def _glob_regex(chars: Sequence[tuple[str, bool]]) -> str:
    """A shell pattern (characters with whether they are active, i.e. unquoted) as a regular expression."""
    return "".join(_glob_atoms(chars))


def _matched_prefix(atoms: Sequence[str], value: str, *, longest: bool) -> int:
    """The length of the longest (else the shortest) prefix of ``value`` the pattern of ``atoms``
    matches, 0 when none does. The pattern is a sequence of ``.*``, one-character atoms and literals,
    so the first match of a greedy (lazy) backtracking search ends as late (early) as any can: one
    search, where trying every prefix in turn took quadratic time."""
    regex = "".join(atoms) if longest else "".join(".*?" if a == ".*" else a for a in atoms)
    found = re.match(regex, value, re.DOTALL)
    return found.end() if found else 0


def _glob_atoms(chars: Sequence[tuple[str, bool]]) -> list[str]:
    """A shell pattern as regular expressions, one per atom: ``.*``, ``.``, a bracket class or a literal."""
    out: list[str] = []
    i = 0
    while i < len(chars):
        c, active = chars[i]
        i += 1
        if active and c == "*":
            out.append(".*")
        elif active and c == "?":
            out.append(".")
        elif active and c == "[":
            j = i + (1 if i < len(chars) and chars[i][0] in "!^" else 0)
            j += 1 if j < len(chars) and chars[j][0] == "]" else 0
            while j < len(chars) and chars[j][0] != "]":
                j += 1
            if j >= len(chars):
                out.append(r"\[")
                continue
            body = "".join(ch for ch, _ in chars[i:j])
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\").replace("[", "\\[") + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
    return out


def _syntax_error(error: shellsyntax.ShellSyntaxError, script: str, name: str, kind: str, from_stdin: bool) -> str:
    """The message the shell gives for a script bashlex cannot parse."""
    position = len(script) if error.position is None else min(error.position, len(script))
    line = script.count("\n", 0, position) + 1
    message = str(error)
    token = re.search(r"unexpected token '(.*)' \(position", message, re.DOTALL)
    quote = re.search(r"matching '(.)'", message)
    if kind == "dash":
        what = (f'"{token.group(1)}" unexpected' if token else "Unterminated quoted string" if quote else "end of file unexpected")
        return f"{name}: {line}: Syntax error: {what}"
    if kind == "busybox":
        what = (f'unexpected "{token.group(1)}"' if token else "unterminated quoted string" if quote else "unexpected end of file")
        return f"{name}: syntax error: {what}"
    where = f"{name}: line {line}: " if from_stdin else f"{name}: -c: line {line}: "
    if token:
        text = script.split("\n")[line - 1] if line <= script.count("\n") + 1 else ""
        return f"{where}syntax error near unexpected token `{token.group(1)}'\n{where}`{text}'"
    if quote:
        return f"{where}unexpected EOF while looking for matching `{quote.group(1)}'"
    return f"{where}syntax error: unexpected end of file"


def _refused(node: Any) -> str | None:
    """The first construct under ``node`` the twin's shell does not run, named; None when all are supported."""
    kind = getattr(node, "kind", None)
    if kind == "processsubstitution":
        return "process substitution <(...)"
    if kind == "function":
        return "functions"
    if kind == "heredoc" or (kind == "redirect" and node.type in ("<<", "<<-")):
        return "here-documents"
    if kind == "operator" and node.op == "&":
        return "background jobs (&)"
    for attribute in ("parts", "list", "redirects"):
        for child in getattr(node, attribute, None) or []:
            found = _refused(child)
            if found:
                return found
    for attribute in ("command", "output", "heredoc"):
        child = getattr(node, attribute, None)
        if hasattr(child, "kind"):
            found = _refused(child)
            if found:
                return found
    return None


def _unsupported(name: str, what: str) -> ExecResult:
    return ExecResult(stderr=f"{name}: the itbench_gym twin's shell does not support {what} (supported: {SUPPORTED})\n"
                      .encode("utf-8", "surrogateescape"), code=2)


def run_script(script: str, container: Container, *, shell: str, stdin: bytes, env: Mapping[str, str],
               args: Sequence[str] = (), cwd: str | None = None, options: frozenset[str] = frozenset(),
               from_stdin: bool = False) -> ExecResult:
    """Run ``script`` as shell ``shell`` (argv[0] as invoked) would: ``args`` are the operands after
    the script (``$0``, then ``$1``...), ``options`` the shell options set (``e``, ``u``, ``pipefail``),
    ``from_stdin`` whether the script was read from stdin rather than given with ``-c``."""
    kind = flavour(shell, container)
    name = shell
    try:
        try:
            nodes = shellsyntax.parse(script)
        except shellsyntax.UnsupportedSyntax as missing:
            return _unsupported(name, str(missing))
        except shellsyntax.ShellSyntaxError as bad:
            if kind == "bash" and re.search(r"(^|[\s;&|(!])\[\[(\s|$)", script):
                return _unsupported(name, "[[ ... ]]")
            message = _syntax_error(bad, script, name, kind, from_stdin)
            return ExecResult(stderr=(message + "\n").encode("utf-8", "surrogateescape"), code=2)
        for node in nodes:
            refused = _refused(node)
            if refused:
                return _unsupported(name, refused)
        positional = list(args[1:])
        state = _State(dict(env), set(env), cwd or container.cwd, set(options), positional)
        if state.vars.get("PWD") != state.cwd:  # every one of these shells sets and exports PWD as it starts
            state.vars["PWD"] = state.cwd
            state.exported.add("PWD")
        runner = _Shell(script, container, name, kind, state, args[0] if args else shell, from_stdin, builtins=dict(_BUILTINS))
        io = _IO(_Input(stdin), bytearray(), bytearray())
        try:
            code = runner.run(nodes, io)
        except _Exit as ended:
            code = ended.code
        except _Loop:
            code = runner.status
        except _Unsupported as what:
            io.err += _unsupported(name, str(what)).stderr
            code = 2
        except OutOfMemory:
            code = programs.OOM_KILLED
        except BeyondTwin as beyond:
            io.err += f"{beyond}\n".encode()
            code = programs.BEYOND_TWIN
        except ProcessWaits as waits:
            raise waits.printed_before(bytes(io.out), bytes(io.err + runner.spill + runner.pending_error)) from None
        io.err += runner.spill + runner.pending_error
        return ExecResult(bytes(io.out), bytes(io.err), code)
    except ProcessWaits:
        raise
    except Exception as failure:  # a failing emulation is a crashed process to the caller, never its exception
        return ExecResult(stderr=f"itbench_gym: the twin's shell failed on this script: {failure!r}\n".encode(), code=70)


def run_shell(argv: Sequence[str], container: Container, *, stdin: bytes, env: Mapping[str, str], cwd: str) -> ExecResult:
    """Start shell ``argv``: ``[-eu] [-o OPTION] -c SCRIPT [NAME [ARG...]]``, ``FILE [ARG...]`` or
    (neither) the script on stdin. ``-l`` is taken without reading profile files: the twin has none."""
    name = argv[0]
    kind = flavour(name, container)
    options: set[str] = set()
    command = False
    words = list(argv[1:])
    while words and words[0][:1] in ("-", "+") and len(words[0]) > 1:
        flag = words.pop(0)
        if flag in ("--", "-"):
            break
        if flag in ("--login", "--noprofile", "--norc", "--posix"):
            continue
        enable = flag[0] == "-"
        for letter in flag[1:]:
            if letter == "o":
                letter = _LONG_OPTIONS.get(words.pop(0) if words else "") or "?"
            if letter == "c":
                command = enable
            elif letter in ("e", "u", "pipefail"):
                (options.add if enable else options.discard)(letter)
            elif letter not in ("l", "s", "i"):
                return _bad_option(name, kind, flag)
    if command:
        if not words:
            message = {"bash": f"{name}: -c: option requires an argument", "dash": f"{name}: 0: -c requires an argument",
                       "busybox": f"{name}: -c requires an argument"}[kind]
            return ExecResult(stderr=(message + "\n").encode(), code=2)
        return run_script(words[0], container, shell=name, stdin=stdin, env=env, args=words[1:], cwd=cwd, options=frozenset(options))
    if words:
        found = programs.stat(container, container.path(words[0], cwd), stdin)
        if found.kind == "file":
            return run_script(programs.text(found.data), container, shell=name, stdin=stdin, env=env, args=words, cwd=cwd,
                              options=frozenset(options), from_stdin=True)
        if found.kind == "unmodelled":
            return ExecResult(stderr=f"{name}: {words[0]}: {programs.UNMODELLED}\n".encode("utf-8", "surrogateescape"), code=127)
        message = {"bash": f"{name}: {words[0]}: No such file or directory", "dash": f"{name}: 0: cannot open {words[0]}: No such file",
                   "busybox": f"{name}: can't open '{words[0]}': No such file or directory"}[kind]
        return ExecResult(stderr=(message + "\n").encode("utf-8", "surrogateescape"), code=127 if kind == "bash" else 2)
    return run_script(programs.text(stdin), container, shell=name, stdin=b"", env=env, args=[name], cwd=cwd,
                      options=frozenset(options), from_stdin=True)


def _bad_option(name: str, kind: str, flag: str) -> ExecResult:
    message = {"bash": f"{name}: {flag}: invalid option", "dash": f"{name}: 0: Illegal option {flag}",
               "busybox": f"{name}: illegal option {flag}"}[kind]
    return ExecResult(stderr=(message + "\n").encode("utf-8", "surrogateescape"), code=2)
