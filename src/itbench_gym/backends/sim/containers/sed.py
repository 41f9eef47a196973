"""sed: the stream editor's common language (GNU sed 4, or busybox's), over the files the twin models.

Addresses (a line number, ``$``, ``/RE/`` with ``I``, ``\\cREc``, a ``first,last`` range, ``!``) select
the lines the commands ``s`` (flags ``g``, ``p``, ``N``, ``I``), ``y``, ``d``, ``p``, ``=``, ``a``, ``i``,
``c``, ``q``, ``Q`` and ``{ }`` blocks act on; ``-n``, ``-e``, ``-E``/``-r``, ``-s`` and ``-i[SUFFIX]``
(written back through the pod's emptyDir volumes, :mod:`.fileops`) as sed has them. The hold space
and the branching commands are refused by name, not run approximately.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from .context import NOT_KEPT, ExecResult
from .programs import Invocation, Usage, getopt, posix_regex, read_operand, usage_error

#: Commands that take no argument, those that take the rest of the line as text, and sed's commands the
#: twin does not run (the hold space, branches, files, the next-line commands).
_PLAIN, _TEXT = frozenset("dp="), frozenset("aic")
_NOT_EMULATED = frozenset("gGhHxlnNDPzbtT:wWrRvFeM")
_EMULATED = "s, y, d, p, =, a, i, c, q, Q, { }"


class SedError(Exception):
    """A script sed refuses: the message after ``-e expression #1, char N:`` (GNU), and N."""

    def __init__(self, message: str, at: int) -> None:
        super().__init__(message)
        self.at = at


@dataclass
class Address:
    line: int | None = None
    last: bool = False
    regex: re.Pattern[str] | None = None

    def matches(self, number: int, text: str, is_last: bool) -> bool:
        if self.regex is not None:
            return self.regex.search(text) is not None
        return is_last if self.last else number == self.line


@dataclass
class Command:
    name: str
    first: Address | None = None
    second: Address | None = None
    negated: bool = False
    regex: re.Pattern[str] | None = None
    replacement: str = ""
    occurrence: int = 1
    every: bool = False
    print_: bool = False
    text: str = ""
    table: dict[int, int] = field(default_factory=dict)
    code: int = 0
    #: For ``{``: the index of its ``}``; for a range, whether it is open.
    end: int = 0
    active: bool = False


class _Parser:
    def __init__(self, script: str, extended: bool) -> None:
        self.s, self.i, self.extended = script, 0, extended
        self.commands: list[Command] = []

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip(self, chars: str = " \t") -> None:
        while self.peek() and self.peek() in chars:
            self.i += 1

    def delimited(self, delimiter: str, what: str) -> str:
        """The text up to an unescaped ``delimiter`` (consumed); ``\\delimiter`` is the delimiter itself."""
        out = []
        while True:
            c = self.peek()
            if not c or c == "\n":
                raise SedError(f"unterminated `{what}' command", self.i)
            self.i += 1
            if c == "\\" and self.peek():
                n = self.s[self.i]
                self.i += 1
                out.append(n if n == delimiter else "\\" + n)
            elif c == delimiter:
                return "".join(out)
            else:
                out.append(c)

    def regex(self, source: str, flags: int) -> re.Pattern[str]:
        try:
            return re.compile(posix_regex(source, self.extended), flags)
        except (re.error, RecursionError) as bad:
            raise SedError(str(getattr(bad, "msg", bad)), self.i) from None

    def address(self) -> Address | None:
        c = self.peek()
        if c.isdigit():
            start = self.i
            while self.peek().isdigit():
                self.i += 1
            return Address(line=int(self.s[start:self.i]))
        if c == "$":
            self.i += 1
            return Address(last=True)
        if c in ("/", "\\"):
            self.i += 1
            delimiter = "/" if c == "/" else self.s[self.i:self.i + 1]
            if c == "\\":
                self.i += 1
            source = self.delimited(delimiter, "address regex")
            flags = 0
            if self.peek() == "I":
                self.i, flags = self.i + 1, re.IGNORECASE
            return Address(regex=self.regex(source, flags))
        return None

    def parse(self) -> list[Command]:
        opened: list[int] = []
        while True:
            self.skip(" \t\n;")
            if not self.peek():
                break
            first = self.address()
            second = None
            if first is not None and self.peek() == ",":
                self.i += 1
                second = self.address()
                if second is None:
                    raise SedError("unexpected `,'", self.i)
            self.skip()
            negated = self.peek() == "!"
            if negated:
                self.i += 1
                self.skip()
            name = self.peek()
            if not name:
                raise SedError("missing command", self.i)
            self.i += 1
            cmd = Command(name, first, second, negated)
            if name == "}":
                if not opened or first is not None:
                    raise SedError("unexpected `}'", self.i)
                self.commands[opened.pop()].end = len(self.commands)
            elif name == "{":
                opened.append(len(self.commands))
            elif name == "s":
                self._substitute(cmd)
            elif name == "y":
                self._transliterate(cmd)
            elif name in _TEXT:
                self._text(cmd)
            elif name in "qQ":
                self.skip()
                start = self.i
                while self.peek().isdigit():
                    self.i += 1
                cmd.code = int(self.s[start:self.i] or 0)
            elif name in _NOT_EMULATED:
                raise SedError(f"the itbench_gym twin does not emulate sed's `{name}' command (it emulates {_EMULATED})", self.i)
            elif name not in _PLAIN:
                raise SedError(f"unknown command: `{name}'", self.i)
            self.commands.append(cmd)
            self.skip()
            if name != "{" and self.peek() and self.peek() not in ";\n}":
                raise SedError("extra characters after command", self.i)
        if opened:
            raise SedError("unmatched `{'", 0)
        return self.commands

    def _substitute(self, cmd: Command) -> None:
        delimiter = self.peek()
        if not delimiter or delimiter in "\n\\":
            raise SedError("unterminated `s' command", self.i)
        self.i += 1
        source = self.delimited(delimiter, "s")
        cmd.replacement = self.delimited(delimiter, "s")
        flags = 0
        while self.peek() and self.peek() not in ";\n} \t":
            c = self.peek()
            self.i += 1
            if c == "g":
                cmd.every = True
            elif c == "p":
                cmd.print_ = True
            elif c in "iI":
                flags |= re.IGNORECASE
            elif c.isdigit():
                start = self.i - 1
                while self.peek().isdigit():
                    self.i += 1
                cmd.occurrence = int(self.s[start:self.i])
            else:
                raise SedError("unknown option to `s'", self.i)
        cmd.regex = self.regex(source, flags) if source else None

    def _transliterate(self, cmd: Command) -> None:
        delimiter = self.peek()
        self.i += 1
        source, target = self.delimited(delimiter, "y"), self.delimited(delimiter, "y")
        source, target = (_unescape(x) for x in (source, target))
        if len(source) != len(target):
            raise SedError("strings for `y' command are different lengths", self.i)
        cmd.table = {ord(a): ord(b) for a, b in zip(source, target, strict=True)}

    def _text(self, cmd: Command) -> None:
        """``a text``, ``a\\`` then text on the next line (GNU's one-line form too)."""
        self.skip()
        if self.s.startswith("\\\n", self.i):
            self.i += 2
        elif self.peek() == "\\":
            self.i += 1
        end = self.s.find("\n", self.i)
        end = len(self.s) if end < 0 else end
        cmd.text = _unescape(self.s[self.i:end])
        self.i = end


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else "\t" if m.group(1) == "t" else m.group(1), text)


def _expand(replacement: str, match: re.Match[str]) -> str:
    """The ``s`` replacement for one match: ``&``, ``\\1``-``\\9``, ``\\n`` and escaped characters."""
    out, i = [], 0
    while i < len(replacement):
        c = replacement[i]
        if c == "&":
            out.append(match.group(0))
        elif c == "\\" and i + 1 < len(replacement):
            i += 1
            n = replacement[i]
            out.append((match.group(int(n)) or "") if n.isdigit() and int(n) <= (match.re.groups or 0)
                       else "\n" if n == "n" else "\t" if n == "t" else n)
        else:
            out.append(c)
        i += 1
    return "".join(out)


class _Run:
    """One pass of the script over a stream of lines."""

    def __init__(self, commands: list[Command], quiet: bool, hold: Callable[[int], None]) -> None:
        """``hold``: checks the bytes sed holds (its output so far and the pattern space), which a
        substitution can multiply."""
        self.commands, self.quiet, self.hold = commands, quiet, hold
        self.out: list[str] = []
        self.held = 0
        self.code: int | None = None
        self.last_regex: re.Pattern[str] | None = None

    def _selected(self, cmd: Command, number: int, text: str, is_last: bool) -> bool:
        if cmd.first is None:
            return not cmd.negated
        if cmd.second is None:
            hit = cmd.first.matches(number, text, is_last)
        elif cmd.active:
            second = cmd.second
            done = second.matches(number, text, is_last) if second.regex is not None or second.last else number >= (second.line or 0)
            cmd.active = not done
            hit = True
        else:
            hit = cmd.first.matches(number, text, is_last)
            if hit:
                second = cmd.second
                cmd.active = not (second.line is not None and second.regex is None and second.line <= number) and not (
                    second.last and is_last)
        return hit != cmd.negated

    def line(self, number: int, text: str, is_last: bool) -> None:
        """Run the script over one line, writing what sed prints."""
        appended: list[str] = []
        pc, deleted, kept = 0, False, len(self.out)
        while pc < len(self.commands) and self.code is None:
            cmd = self.commands[pc]
            pc += 1
            if cmd.name == "}":
                continue
            if not self._selected(cmd, number, text, is_last):
                if cmd.name == "{":
                    pc = cmd.end + 1
                continue
            name = cmd.name
            if name == "s":
                text = self._substitute(cmd, text)
            elif name == "y":
                text = text.translate(cmd.table)
            elif name == "p":
                self.out.append(text + "\n")
            elif name == "=":
                self.out.append(f"{number}\n")
            elif name == "a":
                appended.append(cmd.text + "\n")
            elif name == "i":
                self.out.append(cmd.text + "\n")
            elif name in ("c", "d"):
                if name == "c" and not cmd.active:
                    self.out.append(cmd.text + "\n")
                deleted = True
                break
            elif name in "qQ":
                self.code = cmd.code
                deleted = name == "Q"
        if not deleted and not self.quiet:
            self.out.append(text + "\n")
        self.out += appended
        self.held += sum(map(len, self.out[kept:]))
        self.hold(self.held)

    def _substitute(self, cmd: Command, text: str) -> str:
        regex = cmd.regex or self.last_regex
        if regex is None:
            raise SedError("no previous regular expression", 0)
        self.last_regex = regex
        count, pieces, at, changed, size = 0, [], 0, False, 0
        for match in regex.finditer(text):
            count += 1
            if count < cmd.occurrence or (changed and not cmd.every):
                continue
            pieces += [text[at:match.start()], _expand(cmd.replacement, match)]
            at, changed = match.end(), True
            size += len(pieces[-2]) + len(pieces[-1])
            self.hold(self.held + size + len(text) - at)
        if not changed:
            return text
        text = "".join(pieces) + text[at:]
        if cmd.print_:
            self.out.append(text + "\n")
        return text


def _options(inv: Invocation) -> tuple[list[str], list[str], set[str], str | None]:
    """sed's command line: the script pieces, the files, the flags set and the -i suffix (None: not in place)."""
    opts, files = getopt(inv, "nErs", "ei", {"quiet": "n", "silent": "n", "regexp-extended": "E", "separate": "s",
                                            "expression": "e", "in-place": "i"}, optional="i")
    scripts = [value for letter, value in opts if letter == "e"]
    on = {"E" if letter == "r" else letter for letter, _ in opts if letter in "nErs"}
    suffix = next((value for letter, value in reversed(opts) if letter == "i"), None)
    if not scripts and files:
        scripts.append(files.pop(0))
    return scripts, files, on, suffix


def sed(inv: Invocation) -> ExecResult:
    """sed [-nEs] [-i[SUFFIX]] [-e SCRIPT]... [SCRIPT] [FILE...]."""
    try:
        scripts, files, on, suffix = _options(inv)
    except Usage as bad:
        return usage_error(inv, str(bad), "nErs", "ei", 1)
    try:
        if not scripts:
            usage = ("Usage: sed [OPTION]... {script-only-if-no-other-script} [input-file]..." if inv.gnu
                     else "Usage: sed [-i[SFX]] [-nrE] [-f FILE]... [-e CMD]... [FILE]...")
            inv.err += (usage + "\n").encode()
            return inv.done(1)
        commands = _Parser("\n".join(scripts), "E" in on).parse()
    except SedError as bad:
        if bad.at < 0 or not inv.gnu:
            inv.say(str(bad))
        else:
            inv.say(f"-e expression #1, char {bad.at}: {bad}")
        return inv.done(1)
    if suffix is not None and not files:
        inv.say("no input files")
        return inv.done(1 if inv.gnu else 4)
    streams = [[f] for f in files] if suffix is not None or "s" in on else [files or ["-"]]
    code = 0
    for stream in streams:
        run = _Run(commands, "n" in on, inv.container.hold)
        contents = [read_operand(inv, operand, "sed") for operand in stream]
        code = 2 if any(data is None for data in contents) else code
        lines: list[str] = []
        for data in contents:
            text = (data or b"").decode("utf-8", "surrogateescape")
            lines += text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []
        try:
            for number, line in enumerate(lines, 1):
                run.line(number, line, number == len(lines))
                if run.code is not None:
                    break
        except SedError as bad:
            inv.say(str(bad))
            return inv.done(4)
        output = "".join(run.out).encode("utf-8", "surrogateescape")
        if contents and contents[-1] and not contents[-1].endswith(b"\n") and output.endswith(b"\n"):
            output = output[:-1]  # sed ends its output as the input ended: without a newline there was none
        if suffix is None:
            inv.write(output)
        elif contents[0] is not None:
            error = _write_back(inv, stream[0], suffix, output)
            if error:
                return inv.done(4)
        if run.code is not None:
            return inv.done(run.code)
    return inv.done(code)


def _write_back(inv: Invocation, operand: str, suffix: str, output: bytes) -> bool:
    """``-i``: the file replaced by the output (a backup under ``SUFFIX`` first); True after saying why it failed."""
    tree = inv.container.files
    path = inv.path(operand)
    error = tree.write_error(path)
    if error is None and suffix:
        backup = posixpath.join(posixpath.dirname(path), suffix.replace("*", posixpath.basename(path))) if "*" in suffix else path + suffix
        error = tree.write_error(backup)
        if error is None:
            tree.open_write(backup).extend(tree.read(path) or b"")
    if error is None:
        tree.open_write(path).extend(output)
        return False
    if error == NOT_KEPT:
        inv.say(f"{operand}: {error}")
    else:
        temp = "sed" + hashlib.sha256(path.encode()).hexdigest()[:6]
        inv.say(f"couldn't open temporary file {posixpath.join(posixpath.dirname(operand) or '.', temp)}: {error}" if inv.gnu
                else f"can't create temp file '{path}': {error}")
    return True
