"""The programs a process exec'd into a container can run, emulated from what the twin knows.

Each program answers from the container's env and the files the twin models, with the output and
the error messages of the real one: GNU coreutils/grep, or busybox when the image is a busybox one
(it has ``ash``). A path the twin does not model (the image's own files) is never answered as
missing: the program says the twin does not know it. Files are written only into the pod's emptyDir
volumes (:mod:`.fileops`): the twin keeps no image layer.
"""

from __future__ import annotations

import math
import posixpath
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from itbench_gym.lang.durations import sleep_seconds

from .context import IS_DIR, MISSING, NOT_DIR, NOT_KEPT, BeyondTwin, Container, ExecResult, OutOfMemory, ProcessWaits

#: Every message in which the twin speaks for itself (what it does not model or emulate) names it.
TWIN_WORD = "itbench_gym"
#: Exit statuses of a program the image has but the twin does not emulate, and of an emulation that failed.
NOT_EMULATED, EMULATION_FAILED = 126, 70
#: A process the OOM killer ended (128 + SIGKILL); a process stopped for passing what the twin holds.
OOM_KILLED, BEYOND_TWIN = 137, 2
UNMODELLED = ("the itbench_gym twin does not model what is here (it knows the container's ConfigMap, Secret and downward-API "
              "volumes and the kubelet's files: /etc/hosts, /etc/hostname, /etc/resolv.conf, /dev/termination-log; not the "
              "image's own files, nor what processes it does not emulate write to emptyDir and persistent volumes)")
SHELLS = frozenset({"sh", "ash", "bash", "dash"})


def busybox(container: Container) -> bool:
    """Whether the image's programs are busybox applets (Alpine and busybox images have ``ash``)."""
    return "ash" in (container.executables or ())


@dataclass
class Invocation:
    """One run of a program: its arguments, input and surroundings, and what it has written so far.

    ``style`` is whose behaviour to follow: ``gnu`` or ``busybox`` for a program of the image,
    ``bash``, ``dash`` or ``busybox`` for a shell's builtin. ``prefix`` starts every diagnostic
    (``cat: `` or a shell's ``sh: 1: echo: ``)."""

    argv: list[str]
    container: Container
    stdin: bytes
    env: Mapping[str, str]
    cwd: str
    style: str
    prefix: str
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)

    @property
    def gnu(self) -> bool:
        return self.style != "busybox"

    def say(self, message: str) -> None:
        """Write one diagnostic line to stderr."""
        self.err += (self.prefix + message + "\n").encode("utf-8", "surrogateescape")

    def write(self, text: str | bytes) -> None:
        self.container.keep(len(self.out) + len(text))
        self.out += text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")

    def done(self, code: int) -> ExecResult:
        return ExecResult(bytes(self.out), bytes(self.err), code)

    def path(self, raw: str) -> str:
        return self.container.path(raw, self.cwd)


Program = Callable[[Invocation], ExecResult]


def text(data: bytes) -> str:
    """Bytes as text that round-trips any byte (programs see bytes; Python's ``re`` wants one type)."""
    return data.decode("utf-8", "surrogateescape")


def lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` without their newlines (a last line without one still counts)."""
    parts = data.split(b"\n")
    return parts[:-1] if parts[-1] == b"" else parts


# --- files -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """What is at a path: ``file``, ``dir``, ``missing``, ``notdir`` (a parent is a file) or ``unmodelled``."""

    kind: str
    data: bytes = b""

    @property
    def error(self) -> str:
        """The kind as strerror words what opening the path met (``unmodelled`` stays as it is)."""
        return {"missing": MISSING, "notdir": NOT_DIR, "dir": IS_DIR}.get(self.kind, self.kind)


def stat(container: Container, path: str, stdin: bytes = b"") -> Stat:
    """What the twin knows at absolute ``path`` (symbolic links followed)."""
    tree = container.files
    if path == "/dev/null":
        return Stat("file")
    if path in ("/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"):
        return Stat("file", stdin)
    real = tree.resolve(path)
    if real in tree.files:
        return Stat("file", bytes(tree.files[real]))
    if real in tree.directories:
        return Stat("dir")
    head = posixpath.dirname(real)
    while head != "/":
        if head in tree.files:
            return Stat("notdir")
        head = posixpath.dirname(head)
    return Stat("missing") if tree.is_modelled(path) or tree.is_modelled(real) else Stat("unmodelled")


#: How each program reports a file it cannot read: (GNU, busybox) formats of ``{f}`` (the operand) and ``{e}`` (the error).
_OPEN_ERRORS: dict[str, tuple[str, str]] = {
    "cat": ("{f}: {e}", "can't open '{f}': {e}"),
    "head": ("cannot open '{f}' for reading: {e}", "{f}: {e}"),
    "tail": ("cannot open '{f}' for reading: {e}", "can't open '{f}': {e}"),
    "sort": ("cannot read: {f}: {e}", "can't open '{f}': {e}"),
    "uniq": ("{f}: {e}", "can't open '{f}': {e}"),
    "sed": ("can't read {f}: {e}", "{f}: {e}"),
    "wget": ("{f}: {e}", "can't open '{f}': {e}"),
}
_DIR_ERRORS: dict[str, str] = {"head": "error reading '{f}': Is a directory", "tail": "error reading '{f}': Is a directory",
                               "sort": "read failed: {f}: Is a directory"}


def read_operand(inv: Invocation, operand: str, program: str) -> bytes | None:
    """The content of file operand ``operand`` (``-`` is stdin); None after reporting why it cannot be read."""
    if operand == "-":
        return inv.stdin
    found = stat(inv.container, inv.path(operand), inv.stdin)
    if found.kind == "file":
        return found.data
    if found.kind == "unmodelled":
        inv.say(f"{operand}: {UNMODELLED}")
    elif found.kind == "dir":
        inv.say((_DIR_ERRORS.get(program, "{f}: Is a directory") if inv.gnu else "read error: Is a directory").format(f=operand))
    else:
        gnu, bb = _OPEN_ERRORS.get(program, ("{f}: {e}", "{f}: {e}"))
        inv.say((gnu if inv.gnu else bb).format(f=operand, e=found.error))
    return None


# --- options -----------------------------------------------------------------------------------------


class Usage(Exception):
    """A command line the program (or the twin's emulation of it) does not accept."""


def getopt(inv: Invocation, flags: str, valued: str = "", longs: Mapping[str, str] | None = None,
           permute: bool = True, optional: str = "") -> tuple[list[tuple[str, str]], list[str]]:
    """Parse ``inv.argv[1:]`` like getopt: clustered ``flags``, ``valued`` options taking a value
    (``-n 5``, ``-n5``), ``optional`` ones taking only an attached one (``-i``, ``-i.bak``,
    ``--in-place=.bak``), long options mapped to short ones, ``--`` ending options. Raises Usage
    for an option outside the emulated set, naming the ones that are."""
    longs = longs or {}
    opts: list[tuple[str, str]] = []
    operands: list[str] = []
    args = inv.argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            operands += args[i:]
            break
        if arg.startswith("--") and longs:
            name, eq, value = arg[2:].partition("=")
            matches = [k for k in longs if k.startswith(name)]
            if name not in longs and len(matches) != 1:
                raise Usage(arg)
            short = longs[name if name in longs else matches[0]]
            if short in valued and short not in optional and not eq:
                if i >= len(args):
                    raise Usage(arg)
                value, i = args[i], i + 1
            opts.append((short, value))
        elif arg.startswith("-") and arg != "-":
            j = 1
            while j < len(arg):
                letter = arg[j]
                if letter in optional:
                    opts.append((letter, arg[j + 1:]))
                    break
                if letter in valued:
                    value = arg[j + 1:]
                    if not value:
                        if i >= len(args):
                            raise Usage("-" + letter)
                        value, i = args[i], i + 1
                    opts.append((letter, value))
                    break
                if letter not in flags:
                    raise Usage("-" + letter)
                opts.append((letter, ""))
                j += 1
        else:
            operands.append(arg)
            if not permute:
                operands += args[i:]
                break
    return opts, operands


def usage_error(inv: Invocation, option: str, flags: str, valued: str, code: int,
                longs: Mapping[str, str] | None = None) -> ExecResult:
    """The twin's word for an option it does not emulate, listing those it does: the short letters, and
    the long options that have none (``longs`` maps each to a character no short option uses)."""
    emulated = " ".join([*(f"-{c}" for c in sorted(flags + valued) if c.isalnum()),
                         *(f"--{name}" for name, c in sorted((longs or {}).items()) if not c.isalnum())])
    inv.say(f"the itbench_gym twin does not emulate {option!r} (it emulates {emulated or 'no options'})")
    return inv.done(code)


# --- the programs ------------------------------------------------------------------------------------


def _true(inv: Invocation) -> ExecResult:
    return inv.done(0)


def _false(inv: Invocation) -> ExecResult:
    return inv.done(1)


def _pwd(inv: Invocation) -> ExecResult:
    inv.write(inv.cwd + "\n")
    return inv.done(0)


def _hostname(inv: Invocation) -> ExecResult:
    """``hostname`` and ``hostname -s``; setting the name fails as in a container without CAP_SYS_ADMIN."""
    args = inv.argv[1:]
    if not args:
        inv.write(inv.container.hostname + "\n")
    elif args == ["-s"]:
        inv.write(inv.container.hostname.split(".")[0] + "\n")
    elif not args[0].startswith("-"):
        inv.say("you must be root to change the host name" if inv.gnu else "sethostname: Operation not permitted")
        return inv.done(1)
    else:
        return usage_error(inv, args[0], "s", "", 1)
    return inv.done(0)


def _uname(inv: Invocation) -> ExecResult:
    """uname [-asnrvmpio]: the node's kernel (its nodeInfo) and the container's hostname."""
    flags = "asnrvmpio"
    try:
        opts, operands = getopt(inv, flags, "", {"all": "a", "kernel-name": "s", "nodename": "n", "kernel-release": "r",
                                                 "kernel-version": "v", "machine": "m", "processor": "p",
                                                 "hardware-platform": "i", "operating-system": "o"})
    except Usage as bad:
        return usage_error(inv, str(bad), flags, "", 1)
    if operands:
        inv.say(f"extra operand '{operands[0]}'" if inv.gnu else "usage: uname [-amnrspvio]")
        return inv.done(1)
    release, build, machine = inv.container.kernel
    if not release:
        inv.say("the itbench_gym twin does not know the kernel of this container's node")
        return inv.done(1)
    on = {letter for letter, _ in opts} or {"s"}
    every = "a" in on
    fields = [("s", "Linux"), ("n", inv.container.hostname), ("r", release), ("v", build), ("m", machine),
              ("p", "unknown"), ("i", "unknown"), ("o", "GNU/Linux")]
    inv.write(" ".join(value for letter, value in fields
                       if letter in on or (every and value != "unknown")) + "\n")
    return inv.done(0)


_ESCAPES = {"\\": "\\", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def escapes(s: str, octal_needs_zero: bool = True) -> tuple[str, bool]:
    """``s`` with echo -e / printf %b backslash escapes done; True when ``\\c`` stopped the output."""
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 == len(s):
            out.append(c)
            i += 1
            continue
        n = s[i + 1]
        if n == "c":
            return "".join(out), True
        if n in _ESCAPES:
            out.append(_ESCAPES[n])
            i += 2
        elif n == "0" or (n in "1234567" and not octal_needs_zero):
            start = i + 2 if n == "0" else i + 1
            digits = re.match(r"[0-7]{0,3}", s[start:start + 3])
            octal = digits.group(0) if digits else ""
            out.append(chr(int(octal or "0", 8) & 0xFF))
            i = start + len(octal)
        elif n == "x" and re.match(r"[0-9a-fA-F]", s[i + 2:i + 3]):
            hexa = re.match(r"[0-9a-fA-F]{1,2}", s[i + 2:])
            assert hexa is not None
            out.append(chr(int(hexa.group(0), 16)))
            i += 2 + len(hexa.group(0))
        else:
            out.append(c + n)
            i += 2
    return "".join(out), False


def _echo(inv: Invocation) -> ExecResult:
    """GNU, bash and busybox echo take -n/-e/-E; dash's takes only -n and always does escapes."""
    args = inv.argv[1:]
    newline, interpret = True, inv.style == "dash"
    while args and (args[0] == "-n" if inv.style == "dash" else re.fullmatch(r"-[neE]+", args[0])):
        for letter in args[0][1:]:
            newline = newline and letter != "n"
            interpret = letter == "e" if letter in "eE" else interpret
        args = args[1:]
    body = " ".join(args)
    if interpret:
        body, stopped = escapes(body, octal_needs_zero=inv.style != "busybox")
        newline = newline and not stopped
    inv.write(body + ("\n" if newline else ""))
    return inv.done(0)


_PRINTF_SPEC = re.compile(r"%([-+ #0]*)(\*|\d+)?(?:\.(\*|\d*))?([a-zA-Z%])?")


def _printf_number(inv: Invocation, arg: str, integer: bool) -> tuple[float | int, bool]:
    """An argument of a numeric conversion (``'c`` is the character's code); False after reporting a bad one."""
    if arg[:1] in ("'", '"'):
        return (ord(arg[1]) if len(arg) > 1 else 0), True
    try:
        return (int(arg, 0) if re.fullmatch(r"\s*[-+]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)", arg) else
                int(arg) if integer else float(arg)), True
    except ValueError:
        pass
    messages = {"gnu": f"'{arg}': expected a numeric value", "bash": f"{arg}: invalid number",
                "dash": f"{arg}: expected numeric value", "busybox": f"invalid number '{arg}'"}
    inv.say(messages[inv.style])
    match = re.match(r"\s*[-+]?\d+", arg)
    return (int(match.group(0)) if match else 0), False


def _printf(inv: Invocation) -> ExecResult:
    """printf FORMAT [ARG...]: the format is reused while arguments remain."""
    if len(inv.argv) < 2:
        inv.say("missing operand" if inv.style == "gnu" else "usage: printf [-v var] format [arguments]"
                if inv.style == "bash" else "usage: printf format [arg ...]")
        return inv.done(2 if inv.style in ("bash", "dash") else 1)
    fmt, args = inv.argv[1], inv.argv[2:]
    if fmt == "--" and len(inv.argv) > 2:
        fmt, args = inv.argv[2], inv.argv[3:]
    code = 0
    pending = list(args)
    taken = 0

    def take() -> str:
        nonlocal taken
        taken += 1
        return pending.pop(0) if pending else ""

    while True:
        taken = 0
        out: list[str] = []
        pos = 0
        for spec in _PRINTF_SPEC.finditer(fmt):
            literal, stop = escapes(fmt[pos:spec.start()], octal_needs_zero=False)
            out.append(literal)
            if stop:
                inv.write("".join(out))
                return inv.done(code)
            pos = spec.end()
            flags, width, precision, conv = spec.groups()
            if conv == "%":
                out.append("%")
                continue
            if width == "*":
                width = str(_printf_number(inv, take() or "0", True)[0])
            if precision == "*":
                precision = str(_printf_number(inv, take() or "0", True)[0])
            # a field is as wide as its width, a number as long as its precision: held before it is made
            inv.container.hold(sum(map(len, out)) + max((abs(int(n)) for n in (width, precision) if n and n.lstrip("-").isdigit()), default=0))
            if conv is None or conv not in "sbcdiouxXfFeEgG":
                inv.say({"gnu": f"%{conv or ''}: invalid conversion specification", "bash": f"`{conv or ''}': invalid format character",
                         "dash": f"%{conv or ''}: invalid directive", "busybox": f"%{conv or ''}: invalid format"}[inv.style])
                inv.write("".join(out))
                return inv.done(1)
            arg = take()
            pyspec = "%" + flags + (width or "") + ("." + precision if precision is not None else "")
            if conv in "sb":
                value = escapes(arg)[0] if conv == "b" else arg
                out.append((pyspec + "s") % value)
            elif conv == "c":
                out.append((pyspec + "s") % arg[:1])
            else:
                number, ok = _printf_number(inv, arg or "0", conv in "diouxX")
                code = code if ok else 1
                out.append((pyspec + ("d" if conv in "iu" else conv)) % (int(number) if conv in "diouxX" else float(number)))
        literal, stop = escapes(fmt[pos:], octal_needs_zero=False)
        inv.write("".join(out) + literal)
        if stop or taken == 0 or not pending:
            return inv.done(code)


def _env_lines(env: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in env.items())


def _env(inv: Invocation) -> ExecResult:
    """env [-i] [-u NAME] [NAME=VALUE...] [COMMAND [ARG...]]: print the env, or run COMMAND in the changed one."""
    try:
        opts, rest = getopt(inv, "i", "u", {"ignore-environment": "i", "unset": "u"}, permute=False)
    except Usage as bad:
        return usage_error(inv, str(bad), "i", "u", 125)
    env = dict(inv.env)
    for letter, value in opts:
        if letter == "i":
            env.clear()
        else:
            env.pop(value, None)
    if rest[:1] == ["-"]:
        env.clear()
        rest = rest[1:]
    while rest and "=" in rest[0] and not rest[0].startswith("="):
        name, _, value = rest.pop(0).partition("=")
        env.pop(name, None)
        env[name] = value
    if not rest:
        inv.write(_env_lines(env))
        return inv.done(0)
    if find(rest[0], inv.container, env, cwd=inv.cwd) is None:
        inv.say(f"'{rest[0]}': No such file or directory" if inv.gnu else f"can't execute '{rest[0]}': No such file or directory")
        return inv.done(127)
    ran = run(rest, inv.container, inv.stdin, env, inv.cwd)
    return ExecResult(bytes(inv.out) + ran.stdout, bytes(inv.err) + ran.stderr, ran.code)


def _printenv(inv: Invocation) -> ExecResult:
    """printenv [NAME...]: exit 1 when a NAME is not set."""
    names = inv.argv[1:]
    if not names:
        inv.write(_env_lines(inv.env))
        return inv.done(0)
    missing = False
    for name in names:
        if name in inv.env:
            inv.write(inv.env[name] + "\n")
        else:
            missing = True
    return inv.done(1 if missing else 0)


def _cat(inv: Invocation) -> ExecResult:
    """cat [-n] [FILE...]."""
    try:
        opts, operands = getopt(inv, "n", "", {"number": "n"})
    except Usage as bad:
        return usage_error(inv, str(bad), "n", "", 1)
    number = bool(opts)
    code, count = 0, 0
    for operand in operands or ["-"]:
        data = read_operand(inv, operand, "cat")
        if data is None:
            code = 1
            continue
        if not number:
            inv.write(data)
            continue
        for line in re.findall(rb"[^\n]*\n|[^\n]+\Z", data):
            count += 1
            inv.write(f"{count:6d}\t".encode() + line)
    return inv.done(code)


def _count(inv: Invocation, raw: str, what: str) -> int:
    """A ``-n``/``-c`` count of head/tail; ValueError (after saying so) for a bad one."""
    value = raw[1:] if raw[:1] in "+-" else raw
    if not value.isdigit():
        inv.say(f"invalid number of {what}: '{raw}'" if inv.gnu else f"invalid number '{raw}'")
        raise ValueError(raw)
    return int(value)


def _head_tail(inv: Invocation, tail: bool) -> ExecResult:
    """head/tail [-n N] [-c N] [-q] [-v] [FILE...]; tail's ``-n +N`` starts at line N. ``tail -f``
    prints the tail and ends: the twin's files do not change while an exec runs."""
    args = inv.argv[1:]
    if args and re.fullmatch(r"[-+]\d+", args[0]) and (tail or args[0][0] == "-"):
        args = ["-n", args[0] if args[0][0] == "+" else args[0][1:], *args[1:]]
    flags = "qvfF" if tail else "qv"
    inv.argv = [inv.argv[0], *args]
    try:
        opts, operands = getopt(inv, flags, "nc", {"lines": "n", "bytes": "c", "quiet": "q", "silent": "q", "verbose": "v",
                                                   **({"follow": "f"} if tail else {})})
    except Usage as bad:
        return usage_error(inv, str(bad), flags, "nc", 1)
    unit, raw, headers = "n", "10", None
    for letter, value in opts:
        if letter in "nc":
            unit, raw = letter, value
        elif letter in "qv":
            headers = letter == "v"
    try:
        count = _count(inv, raw, "lines" if unit == "n" else "bytes")
    except ValueError:
        return inv.done(1)
    from_start, all_but = raw.startswith("+") and tail, raw.startswith("-") and not tail
    operands = operands or ["-"]
    show = len(operands) > 1 if headers is None else headers
    code = 0
    for index, operand in enumerate(operands):
        data = read_operand(inv, operand, "tail" if tail else "head")
        if data is None:
            code = 1
            continue
        if show:
            inv.write(("\n" if index else "") + f"==> {'standard input' if operand == '-' else operand} <==\n")
        if unit == "c":
            chunk = (data[max(count - 1, 0):] if from_start else data[len(data) - count:] if count else b"") if tail else \
                (data[:len(data) - count] if all_but else data[:count])
        else:
            pieces = re.findall(rb"[^\n]*\n|[^\n]+\Z", data)
            picked = (pieces[max(count - 1, 0):] if from_start else pieces[len(pieces) - count:] if count else []) if tail else \
                (pieces[:len(pieces) - count] if all_but else pieces[:count])
            chunk = b"".join(picked)
        inv.write(chunk)
    return inv.done(code)


def _head(inv: Invocation) -> ExecResult:
    return _head_tail(inv, tail=False)


def _tail(inv: Invocation) -> ExecResult:
    return _head_tail(inv, tail=True)


def _wc(inv: Invocation) -> ExecResult:
    """wc [-l] [-w] [-c] [FILE...], with GNU's or busybox's column widths."""
    try:
        opts, operands = getopt(inv, "lwcm", "", {"lines": "l", "words": "w", "bytes": "c", "chars": "m"})
    except Usage as bad:
        return usage_error(inv, str(bad), "lwcm", "", 1)
    chosen = {letter for letter, _ in opts} or {"l", "w", "c"}
    order = [c for c in "lwmc" if c in chosen]
    rows: list[tuple[list[int], str | None]] = []
    code, total, regular_size, piped = 0, [0] * len(order), 0, not operands
    for operand in operands or ["-"]:
        data = read_operand(inv, operand, "wc")
        if data is None:
            code = 1
            continue
        piped = piped or operand == "-"
        regular_size += len(data)
        counts = {"l": data.count(b"\n"), "w": len(data.split()), "c": len(data), "m": len(text(data))}
        row = [counts[c] for c in order]
        total = [a + b for a, b in zip(total, row, strict=True)]
        rows.append((row, None if operand == "-" and not operands else operand))
    if len(operands) > 1:
        rows.append((total, "total"))
    if inv.gnu:
        width = 1 if len(order) == 1 and len(operands) <= 1 else max(len(str(regular_size)), 7 if piped else 1)
        cells = [" ".join(f"{n:>{width}}" for n in row) for row, _ in rows]
    else:
        cells = [str(row[0]) if len(order) == 1 else " ".join(f"{n:9d}" for n in row) for row, _ in rows]
    for cell, (_, name) in zip(cells, rows, strict=True):
        inv.write(cell + (f" {name}" if name else "") + "\n")
    return inv.done(code)


# --- grep --------------------------------------------------------------------------------------------

_CLASSES = {"alpha": "a-zA-Z", "digit": "0-9", "alnum": "a-zA-Z0-9", "upper": "A-Z", "lower": "a-z", "space": " \\t\\n\\r\\f\\v",
            "blank": " \\t", "punct": "!-/:-@\\[-`{-~", "xdigit": "0-9A-Fa-f", "cntrl": "\\x00-\\x1f\\x7f", "print": " -~",
            "graph": "!-~"}


def _bracket(pattern: str, i: int) -> tuple[str, int]:
    """The POSIX bracket expression starting at ``pattern[i] == '['`` as a Python class, and the index after it."""
    j = i + 1
    out = "["
    if pattern[j:j + 1] == "^":
        out, j = "[^", j + 1
    first = True
    while j < len(pattern):
        c = pattern[j]
        if c == "]" and not first:
            return out + "]", j + 1
        if pattern.startswith("[:", j):
            end = pattern.find(":]", j + 2)
            if end < 0 or pattern[j + 2:end] not in _CLASSES:
                raise re.error("Invalid character class name")
            out += _CLASSES[pattern[j + 2:end]]
            j = end + 2
        else:
            out += "\\" + c if c in "\\[]^" else c
            j += 1
        first = False
    raise re.error("Unmatched [, [^, [:, [., or [=")


def posix_regex(pattern: str, extended: bool) -> str:
    """A POSIX basic (or extended) regular expression, with GNU's extensions, as a Python one. In a
    BRE ``\\( \\) \\| \\{ \\} \\+ \\?`` are operators and the bare characters literals; in an ERE the reverse."""
    out: list[str] = []
    i = 0
    depth = 0
    at_start = True
    while i < len(pattern):
        c = pattern[i]
        starting = at_start
        at_start = False
        if c == "\\":
            if i + 1 == len(pattern):
                raise re.error("Trailing backslash")
            n = pattern[i + 1]
            i += 2
            if not extended and n in "(){}|+?":
                if n == "(":
                    depth += 1
                    at_start = True
                elif n == ")":
                    if depth == 0:
                        raise re.error("Unmatched ) or \\)")
                    depth -= 1
                at_start = n in "(|"
                out.append(n)
            elif n in "wWsSbB" or n.isdigit():
                out.append("\\" + n)
            elif n == "<":
                out.append(r"\b(?=\w)")
            elif n == ">":
                out.append(r"\b(?<=\w)")
            else:
                out.append(re.escape(n))
            continue
        i += 1
        if c == "[":
            cls, i = _bracket(pattern, i - 1)
            out.append(cls)
        elif c == "*" and starting:
            out.append(r"\*")
        elif c == "^":
            out.append("^" if starting or extended else r"\^")
            at_start = True
        elif c == "$":
            ends = i == len(pattern) or pattern.startswith("\\)", i) or pattern.startswith("\\|", i)
            out.append("$" if extended or ends else r"\$")
        elif c in "(){}|+?":
            if not extended:
                out.append("\\" + c)
            else:
                if c == "(":
                    depth += 1
                elif c == ")":
                    if depth == 0:
                        raise re.error("Unmatched ) or \\)")
                    depth -= 1
                at_start = c in "(|"
                out.append(c)
        else:
            out.append(re.escape(c) if c not in ".*" else c)
    if depth:
        raise re.error("Unmatched ( or \\(")
    return "".join(out)


def _grep(inv: Invocation) -> ExecResult:
    """grep [-iEFvcnoqlhHsrR] [-A N] [-B N] [-C N] [-e PATTERN] PATTERN [FILE...]: exit 0 on a match, 1
    on none, 2 on an error."""
    flags, valued = "iyEFGvcnoqlLhHswrR", "eABC"
    name = posixpath.basename(inv.argv[0])
    try:
        opts, operands = getopt(inv, flags, valued, {"ignore-case": "i", "extended-regexp": "E", "fixed-strings": "F",
                                                      "invert-match": "v", "count": "c", "line-number": "n", "only-matching": "o",
                                                      "quiet": "q", "silent": "q", "files-with-matches": "l", "regexp": "e",
                                                      "no-filename": "h", "with-filename": "H", "no-messages": "s",
                                                      "word-regexp": "w", "after-context": "A", "before-context": "B",
                                                      "context": "C", "recursive": "r", "dereference-recursive": "R"})
    except Usage as bad:
        return usage_error(inv, str(bad), flags, valued, 2)
    on = {letter for letter, _ in opts}
    context = {letter: value for letter, value in opts if letter in "ABC"}
    try:
        after = int(context.get("A", context.get("C", "0")))
        before = int(context.get("B", context.get("C", "0")))
        if after < 0 or before < 0:
            raise ValueError
    except ValueError:
        inv.say(f"{next(iter(context.values()))}: invalid context length argument")
        return inv.done(2)
    patterns = [value for letter, value in opts if letter == "e"]
    if not patterns:
        if not operands:
            inv.say("Usage: grep [OPTION]... PATTERNS [FILE]..." if inv.gnu else "usage: grep [-HhnlLoqvsriwFE] PATTERN [FILE]...")
            return inv.done(2)
        patterns = [operands.pop(0)]
    extended = "E" in on or name == "egrep"
    fixed = "F" in on or name == "fgrep"
    try:
        alternatives = [re.escape(p) if fixed else posix_regex(p, extended)
                        for pattern in patterns for p in pattern.split("\n")]
        source = "|".join(f"(?:{a})" for a in alternatives)
        if "w" in on:
            source = rf"(?<!\w)(?:{source})(?!\w)"
        regex = re.compile(source, re.IGNORECASE if on & {"i", "y"} else 0)
    except (re.error, RecursionError, OverflowError) as bad:
        inv.say(str(getattr(bad, "msg", bad)) if isinstance(bad, re.error) else "Invalid regular expression")
        return inv.done(2)
    recursive = bool(on & {"r", "R"})
    operands = operands or (["."] if recursive else ["-"])
    named = ("H" in on or len(operands) > 1 or recursive) and "h" not in on
    matched, errored = False, False
    if recursive:
        operands, errored = _walk(inv, operands, follow="R" in on)
    quiet = bool(on & {"q", "l", "L", "c", "o"})  # prints no lines, so no context lines either
    shown_any = False  # a line was printed: the next group of context lines starts with "--"
    for operand in operands:
        data = read_operand(inv, operand, "grep")
        if data is None:
            errored = True
            continue
        label = "(standard input)" if operand == "-" else operand
        count = 0
        all_lines = [text(raw) for raw in lines(data)]
        shown, trailing = 0, 0  # the last line printed of this file (0: none), after-context lines still owed
        for number, line in enumerate(all_lines, 1):
            hits = [m.group(0) for m in regex.finditer(line) if m.group(0)] if "o" in on else []
            selected = bool(regex.search(line)) != ("v" in on)
            if not selected:
                if trailing and not quiet:
                    inv.write((label + "-" if named else "") + (f"{number}-" if "n" in on else "") + line + "\n")
                    shown, trailing = number, trailing - 1
                continue
            count += 1
            matched = True
            if on & {"q", "l", "L", "c"}:
                continue
            if (after or before) and "o" not in on:
                first = max(shown + 1, number - before)
                if shown_any and (shown == 0 or first > shown + 1):
                    inv.write("--\n")
                for k in range(first, number):
                    inv.write((label + "-" if named else "") + (f"{k}-" if "n" in on else "") + all_lines[k - 1] + "\n")
                shown, trailing, shown_any = number, after, True
            lead = (label + ":" if named else "") + (f"{number}:" if "n" in on else "")
            if "o" in on:
                if "v" not in on:
                    inv.write("".join(lead + hit + "\n" for hit in hits))
            else:
                inv.write(lead + line + "\n")
        if "q" in on and matched:
            return ExecResult(bytes(inv.out), bytes(inv.err), 0)
        if "c" in on:
            inv.write((label + ":" if named else "") + f"{count}\n")
        if ("l" in on and count) or ("L" in on and not count):
            inv.write(label + "\n")
    if "s" in on:
        inv.err.clear()
    return inv.done(2 if errored and not ("q" in on and matched) else 0 if matched else 1)


def _walk(inv: Invocation, operands: list[str], *, follow: bool) -> tuple[list[str], bool]:
    """``grep -r``'s files: each operand, and the files under each directory operand, depth first in
    name order; symbolic links met on the way are skipped unless ``follow`` (-R). A directory the twin
    does not model is searched as far as it knows it, and says so (the second value: one did)."""
    tree = inv.container.files
    out: list[str] = []
    partial = False

    def visit(shown: str) -> None:
        nonlocal partial
        real = tree.resolve(inv.path(shown))
        if not tree.is_modelled(real):
            inv.say(f"{shown}: {UNMODELLED}")
            partial = True
        for name in tree.entries(real) or []:
            child = posixpath.join(shown, name) if shown != "." else name
            path = posixpath.join(real, name)
            if path in tree.links and not follow:
                continue
            if tree.is_dir(path):
                visit(child)
            else:
                out.append(child)

    for operand in operands:
        if stat(inv.container, inv.path(operand)).kind == "dir":
            visit(operand)
        else:
            out.append(operand)
    return out, partial


# --- sort, uniq --------------------------------------------------------------------------------------


def _numeric(line: bytes) -> float:
    match = re.match(rb"\s*(-?(?:\d+(?:\.\d*)?|\.\d+))", line)
    return float(match.group(1)) if match else 0.0


def _sort(inv: Invocation) -> ExecResult:
    """sort [-r] [-n] [-u] [FILE...], comparing bytes (the C locale a container's shell runs in)."""
    try:
        opts, operands = getopt(inv, "rnu", "", {"reverse": "r", "numeric-sort": "n", "unique": "u"})
    except Usage as bad:
        return usage_error(inv, str(bad), "rnu", "", 2)
    on = {letter for letter, _ in opts}
    data: list[bytes] = []
    for operand in operands or ["-"]:
        content = read_operand(inv, operand, "sort")
        if content is None:
            return inv.done(2)
        data += lines(content)
    if "n" in on:
        ordered = sorted(data, key=lambda line: (_numeric(line), line), reverse="r" in on)
    else:
        ordered = sorted(data, reverse="r" in on)
    kept: list[bytes] = []
    for line in ordered:
        if "u" in on and kept and (_numeric(kept[-1]) == _numeric(line) if "n" in on else kept[-1] == line):
            continue
        kept.append(line)
    inv.write(b"".join(line + b"\n" for line in kept))
    return inv.done(0)


def _uniq(inv: Invocation) -> ExecResult:
    """uniq [-c] [-d] [-u] [-i] [INPUT]; an OUTPUT operand is refused (the twin keeps no written files)."""
    try:
        opts, operands = getopt(inv, "cdui", "", {"count": "c", "repeated": "d", "unique": "u", "ignore-case": "i"})
    except Usage as bad:
        return usage_error(inv, str(bad), "cdui", "", 1)
    on = {letter for letter, _ in opts}
    if len(operands) > 1:
        inv.say(f"{operands[1]}: {NOT_KEPT}")
        return inv.done(1)
    data = read_operand(inv, operands[0] if operands else "-", "uniq")
    if data is None:
        return inv.done(1)
    groups: list[list[bytes]] = []
    for line in lines(data):
        if groups and (groups[-1][0].lower() == line.lower() if "i" in on else groups[-1][0] == line):
            groups[-1].append(line)
        else:
            groups.append([line])
    for group in groups:
        if ("d" in on and len(group) < 2) or ("u" in on and len(group) > 1):
            continue
        inv.write((f"{len(group):7d} ".encode() if "c" in on else b"") + group[0] + b"\n")
    return inv.done(0)


# --- ls ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One line of a listing: its name as shown and the absolute path it stands for."""

    name: str
    path: str
    follow: bool = False


def _human(size: int) -> str:
    value = float(size)
    for unit in ("", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            if not unit:
                return str(int(value))
            return f"{math.ceil(value * 10) / 10:.1f}{unit}" if value < 10 else f"{math.ceil(value)}{unit}"
        value /= 1024
    return str(size)


def _ls(inv: Invocation) -> ExecResult:
    """ls [-laA1Rdhrt] [PATH...], one name a line (stdout is not a terminal). A directory above the
    twin's mounts is listed with the entries the twin knows and a note that the image's are missing."""
    flags = "laA1Rdhrt"
    try:
        opts, operands = getopt(inv, flags, "", {"all": "a", "almost-all": "A", "directory": "d", "human-readable": "h",
                                                 "recursive": "R", "reverse": "r"})
    except Usage as bad:
        return usage_error(inv, str(bad), flags, "", 2)
    on = {letter for letter, _ in opts}
    long, tree = "l" in on, inv.container.files
    code = 0
    files: list[_Entry] = []
    dirs: list[_Entry] = []
    for operand in operands or ["."]:
        path = inv.path(operand)
        found = stat(inv.container, path)
        if path in tree.links and (long or "d" in on):
            files.append(_Entry(operand, path))
        elif found.kind == "dir" and "d" not in on:
            dirs.append(_Entry(operand, path))
        elif found.kind in ("file", "dir"):
            files.append(_Entry(operand, path))
        elif found.kind == "unmodelled":
            inv.say(f"{operand}: {UNMODELLED}")
            code = 1
        else:
            inv.say(f"cannot access '{operand}': {found.error}" if inv.gnu else f"{operand}: {found.error}")
            code = 2 if inv.gnu else 1
    files.sort(key=lambda e: e.name, reverse="r" in on)
    dirs.sort(key=lambda e: e.name, reverse="r" in on)
    blocks: list[str] = []
    if files:
        blocks.append(_listing(inv, files, long, "h" in on, total=False))
    headers = len(operands) > 1 or "R" in on
    queue = list(dirs)
    while queue:
        top = queue.pop(0)
        names = tree.entries(top.path) or []
        if "a" in on:
            names = [".", "..", *names]
        elif "A" not in on:
            names = [n for n in names if not n.startswith(".")]
        names = sorted(names, reverse="r" in on)
        entries = [_Entry(n, posixpath.normpath(posixpath.join(top.path, n))) for n in names]
        block = (f"{top.name}:\n" if headers else "") + _listing(inv, entries, long, "h" in on, total=True)
        blocks.append(block)
        if not tree.is_modelled(tree.resolve(top.path)):
            inv.say(f"{top.name}: {UNMODELLED}")
            code = max(code, 1)
        if "R" in on:
            sub = [_Entry(posixpath.join(top.name, e.name), e.path) for e in entries
                   if e.name not in (".", "..") and e.path not in tree.links and tree.is_dir(e.path)]
            queue[0:0] = sub
    inv.write("\n".join(blocks))
    return inv.done(code)


def _listing(inv: Invocation, entries: Sequence[_Entry], long: bool, human: bool, total: bool) -> str:
    """The lines listing ``entries`` (names only, or ``ls -l``'s columns with GNU's or busybox's layout)."""
    if not long:
        return "".join(e.name + "\n" for e in entries)
    tree = inv.container.files
    rows: list[tuple[str, int, int, int, str]] = []
    for e in entries:
        target = tree.links.get(e.path)
        real = tree.resolve(e.path)
        if target is not None:
            rows.append(("lrwxrwxrwx", 1, len(target), 0, f"{e.name} -> {target}"))
        elif real in tree.directories:
            subdirs = [n for n in tree.entries(real) or [] if posixpath.join(real, n) in tree.directories]
            rows.append(("drwxr-xr-x", 2 + len(subdirs), 4096, 4, e.name))
        else:
            size = len(tree.files.get(real, b""))
            rows.append(("-rw-r--r--", 1, size, 4 * math.ceil(size / 4096), e.name))
    when = time.strftime("%b %e %H:%M", time.gmtime(inv.container.now))
    sizes = [_human(r[2]) if human else str(r[2]) for r in rows]
    head = f"total {sum(r[3] for r in rows)}\n" if total else ""
    if not inv.gnu:
        return head + "".join(f"{mode:<10} {links:4d} {'root':<8.8} {'root':<8.8} {size:>9} {when} {name}\n"
                              for (mode, links, _, _, name), size in zip(rows, sizes, strict=True))
    wl = max((len(str(r[1])) for r in rows), default=1)
    ws = max((len(s) for s in sizes), default=1)
    return head + "".join(f"{mode} {links:>{wl}} root root {size:>{ws}} {when} {name}\n"
                          for (mode, links, _, _, name), size in zip(rows, sizes, strict=True))


# --- small ones --------------------------------------------------------------------------------------


def _missing_operand(inv: Invocation) -> ExecResult:
    name = posixpath.basename(inv.argv[0])
    if inv.gnu:
        inv.say(f"missing operand\nTry '{name} --help' for more information.")
    else:
        inv.err += f"BusyBox v1.36.1 multi-call binary.\n\nUsage: {name} {'SECONDS' if name == 'sleep' else 'FILE'}...\n".encode()
    return inv.done(1)


def _sleep(inv: Invocation) -> ExecResult:
    """sleep DURATION...: returns at once in an exec (the twin's clock does not run during one); a
    container's own process waits (``Container.wait``)."""
    durations = inv.argv[1:]
    if not durations:
        return _missing_operand(inv)
    try:
        seconds = sleep_seconds(durations)
    except ValueError as bad:
        if inv.gnu:
            inv.say(f"invalid time interval '{bad}'\nTry '{posixpath.basename(inv.argv[0])} --help' for more information.")
        else:
            inv.say(f"invalid number '{bad}'")
        return inv.done(1)
    inv.container.wait(seconds)
    return inv.done(0)


def _date(inv: Invocation) -> ExecResult:
    """date [-u] [-R] [-I] [+FORMAT] at the twin's time, in UTC (a container's zone unless TZ says otherwise)."""
    try:
        opts, operands = getopt(inv, "uRI", "", {"utc": "u", "universal": "u", "rfc-email": "R", "iso-8601": "I"})
    except Usage as bad:
        return usage_error(inv, str(bad), "uRI", "", 1)
    letters = {letter for letter, _ in opts}
    fmt = "%a %b %e %H:%M:%S %Z %Y"
    if "R" in letters:
        fmt = "%a, %d %b %Y %H:%M:%S %z"
    elif "I" in letters:
        fmt = "%Y-%m-%d"
    if operands:
        if not operands[0].startswith("+") or len(operands) > 1:
            wrong = operands[0] if not operands[0].startswith("+") else operands[1]
            inv.say(f"invalid date '{wrong}'")
            return inv.done(1)
        fmt = operands[0][1:]
    now = inv.container.now
    moment = time.gmtime(now)

    def directive(match: re.Match[str]) -> str:
        letter = match.group(0)[-1]
        fixed = {"s": str(math.floor(now)), "N": f"{int(round((now % 1) * 1e9)):09d}", "Z": "UTC", "z": "+0000", "%": "%"}
        return fixed.get(letter) or time.strftime(match.group(0), moment)

    inv.write(re.sub(r"%[-_0^#]?[a-zA-Z%]", directive, fmt) + "\n")
    return inv.done(0)


def _basename(inv: Invocation) -> ExecResult:
    """basename NAME [SUFFIX]."""
    args = inv.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        return _missing_operand(inv)
    name = args[0].rstrip("/")
    name = "/" if not name and args[0] else posixpath.basename(name)
    if len(args) > 1 and name.endswith(args[1]) and name != args[1]:
        name = name[:-len(args[1])]
    inv.write(name + "\n")
    return inv.done(0)


def _dirname(inv: Invocation) -> ExecResult:
    """dirname NAME...."""
    args = inv.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        return _missing_operand(inv)
    for raw in args:
        stripped = raw.rstrip("/")
        if not stripped:
            inv.write(("/" if raw else ".") + "\n")
            continue
        head = stripped.rpartition("/")[0] if "/" in stripped else "."
        inv.write((head.rstrip("/") or "/") + "\n")
    return inv.done(0)


# --- test / [ ----------------------------------------------------------------------------------------


class _TestError(Exception):
    """A malformed test expression: the shell's or program's diagnostic, exit 2."""


_INT_OPS = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__, "-gt": int.__gt__, "-ge": int.__ge__}
_UNARY = frozenset({"-n", "-z", "-e", "-f", "-d", "-s", "-r", "-x", "-L", "-h", "-t"})


def _integer(inv: Invocation, raw: str) -> int:
    if re.fullmatch(r"\s*[-+]?\d+\s*", raw):
        return int(raw)
    raise _TestError({"bash": f"{raw}: integer expression expected", "dash": f"Illegal number: {raw}",
                      "busybox": f"{raw}: bad number", "gnu": f"invalid integer '{raw}'"}[inv.style])


def _unary(inv: Invocation, op: str, arg: str) -> bool:
    if op in ("-n", "-z"):
        return bool(arg) == (op == "-n")
    if op == "-t":
        return False
    path = inv.path(arg)
    tree = inv.container.files
    if op in ("-L", "-h"):
        parent = tree.resolve(posixpath.dirname(path))
        if posixpath.join(parent, posixpath.basename(path)) in tree.links or path in tree.links:
            return True
    if op == "-x" and path in (inv.container.executables or ()):
        return True
    found = stat(inv.container, path)
    if found.kind == "unmodelled":
        raise _TestError(f"{arg}: {UNMODELLED}")
    exists = found.kind in ("file", "dir")
    return {"-e": exists, "-r": exists, "-f": found.kind == "file", "-d": found.kind == "dir",
            "-s": found.kind == "dir" or bool(found.data), "-x": found.kind == "dir"}.get(op, False)


def _binary(inv: Invocation, left: str, op: str, right: str) -> bool | None:
    """The value of ``left op right``; None when ``op`` is not a binary operator."""
    if op in _INT_OPS:
        return bool(_INT_OPS[op](_integer(inv, left), _integer(inv, right)))
    if op == "=" or (op == "==" and inv.style != "dash"):
        return left == right
    if op == "!=":
        return left != right
    if op in ("<", ">") and inv.style != "dash":
        return left < right if op == "<" else left > right
    return None


def _evaluate(inv: Invocation, args: list[str]) -> bool:
    """POSIX test: the 0-4 argument rules, then a precedence parser for ``!``, ``-a``, ``-o`` and ``( )``."""
    n = len(args)
    if n == 0:
        return False
    if n == 1:
        return bool(args[0])
    if n == 2:
        if args[0] == "!":
            return not args[1]
        if args[0] in _UNARY:
            return _unary(inv, args[0], args[1])
        raise _TestError(_unexpected(inv, args[0]))
    if n == 3:
        value = _binary(inv, *args)
        if value is not None:
            return value
        if args[0] == "!":
            return not _evaluate(inv, args[1:])
        if args[0] == "(" and args[2] == ")":
            return bool(args[1])
        if args[1] in ("-a", "-o"):
            return (bool(args[0]) and bool(args[2])) if args[1] == "-a" else (bool(args[0]) or bool(args[2]))
        raise _TestError(_unexpected(inv, args[1]))
    if n == 4 and args[0] == "!":
        return not _evaluate(inv, args[1:])
    if n == 4 and args[0] == "(" and args[3] == ")":
        return _evaluate(inv, args[1:3])
    value, rest = _disjunction(inv, args)
    if rest:
        raise _TestError(_unexpected(inv, rest[0]))
    return value


def _unexpected(inv: Invocation, word: str) -> str:
    return {"bash": f"{word}: binary operator expected", "dash": f"{word}: unexpected operator",
            "busybox": f"{word}: unknown operand", "gnu": f"extra argument '{word}'"}[inv.style]


def _disjunction(inv: Invocation, args: list[str]) -> tuple[bool, list[str]]:
    value, rest = _conjunction(inv, args)
    while rest[:1] == ["-o"]:
        right, rest = _conjunction(inv, rest[1:])
        value = value or right
    return value, rest


def _conjunction(inv: Invocation, args: list[str]) -> tuple[bool, list[str]]:
    value, rest = _primary(inv, args)
    while rest[:1] == ["-a"]:
        right, rest = _primary(inv, rest[1:])
        value = value and right
    return value, rest


def _primary(inv: Invocation, args: list[str]) -> tuple[bool, list[str]]:
    if not args:
        raise _TestError("argument expected")
    if args[0] == "!":
        value, rest = _primary(inv, args[1:])
        return not value, rest
    if args[0] == "(":
        value, rest = _disjunction(inv, args[1:])
        if rest[:1] != [")"]:
            raise _TestError("')' expected")
        return value, rest[1:]
    if len(args) >= 3:
        binary = _binary(inv, args[0], args[1], args[2])
        if binary is not None:
            return binary, args[3:]
    if args[0] in _UNARY and len(args) >= 2:
        return _unary(inv, args[0], args[1]), args[2:]
    return bool(args[0]), args[1:]


def _test(inv: Invocation) -> ExecResult:
    """test EXPR / [ EXPR ]: 0 true, 1 false, 2 for a malformed expression or a file the twin does not model."""
    args = inv.argv[1:]
    if posixpath.basename(inv.argv[0]) == "[":
        if args[-1:] != ["]"]:
            inv.say("missing `]'" if inv.style == "bash" else "missing ]")
            return inv.done(2)
        args = args[:-1]
    try:
        return inv.done(0 if _evaluate(inv, args) else 1)
    except _TestError as bad:
        inv.say(str(bad))
        return inv.done(2)


def _shell(inv: Invocation) -> ExecResult:
    """sh/ash/bash/dash [-eu] [-c SCRIPT [NAME [ARG...]] | FILE [ARG...]]; with neither, the script is stdin."""
    from . import shell  # shell.py runs programs through this module, so it is imported when a shell runs

    return shell.run_shell(inv.argv, inv.container, stdin=inv.stdin, env=inv.env, cwd=inv.cwd)


def _network(inv: Invocation) -> ExecResult:
    """nslookup, getent, nc and wget: the pod's network (:mod:`.netclients`)."""
    from .netclients import PROGRAMS as NETWORK  # it builds on this module's Invocation and getopt

    return NETWORK[posixpath.basename(inv.argv[0])](inv)


def _file_change(inv: Invocation) -> ExecResult:
    """cp, mv, mkdir, rm, touch and tee: the pod's emptyDir volumes (:mod:`.fileops`)."""
    from .fileops import PROGRAMS as FILE_CHANGES  # it builds on this module's Invocation and getopt

    return FILE_CHANGES[posixpath.basename(inv.argv[0])](inv)


def _sed(inv: Invocation) -> ExecResult:
    """sed (:mod:`.sed`)."""
    from .sed import sed  # it builds on this module's Invocation and regular expressions

    return sed(inv)


def _curl(inv: Invocation) -> ExecResult:
    """curl (:mod:`.curl`)."""
    from .curl import curl  # it builds on this module's Invocation and getopt

    return curl(inv)


#: The programs the twin emulates, by name (a name of the image's catalogue or a shell builtin).
PROGRAMS: dict[str, Program] = {
    "[": _test, "basename": _basename, "cat": _cat, "date": _date, "dirname": _dirname, "echo": _echo, "egrep": _grep,
    "env": _env, "false": _false, "fgrep": _grep, "grep": _grep, "head": _head, "hostname": _hostname, "ls": _ls,
    "printenv": _printenv, "printf": _printf, "pwd": _pwd, "sleep": _sleep, "sort": _sort, "tail": _tail, "test": _test,
    "true": _true, "uname": _uname, "uniq": _uniq, "wc": _wc, **dict.fromkeys(SHELLS, _shell),
    **dict.fromkeys(("nslookup", "getent", "nc", "wget"), _network),
    **dict.fromkeys(("cp", "mv", "mkdir", "rm", "touch", "tee"), _file_change), "sed": _sed, "curl": _curl,
}


def find(name: str, container: Container, env: Mapping[str, str] | None = None, *, cwd: str | None = None) -> str | None:
    """The program a command word starts, as execve with a PATH search finds it: a bare name when the
    image has it (the name), a path when the image lists that path (the path) or the path is a PATH
    directory holding a program the image has (the name); None when not found."""
    executables = container.executables or ()
    if not name:
        return None
    if "/" not in name:
        return name if name in executables else None
    path = container.path(name, cwd)
    if path in executables:
        return path
    search = (container.env if env is None else env).get("PATH", "")
    directories = {container.path(d or ".", cwd) for d in search.split(":")}
    base = posixpath.basename(path)
    return base if base in executables and posixpath.dirname(path) in directories else None


#: Programs emulated as busybox's applets only: in a GNU image the program of that name is another one
#: (GNU Wget's output, retries and exit codes are not busybox wget's), which the twin does not emulate.
BUSYBOX_ONLY = frozenset({"wget"})


def emulated(container: Container) -> list[str]:
    """The emulated programs this container's image has, sorted."""
    names = set(PROGRAMS) if busybox(container) else set(PROGRAMS) - BUSYBOX_ONLY
    return sorted(names & {posixpath.basename(e) for e in container.executables or ()})


def invoke(name: str, argv: list[str], container: Container, stdin: bytes, env: Mapping[str, str], cwd: str, *,
           style: str, prefix: str) -> ExecResult:
    """Run emulated program ``name`` (a key of PROGRAMS) with no PATH lookup: a shell's builtins come here."""
    return PROGRAMS[name](Invocation(list(argv), container, stdin, env, cwd, style, prefix))


def runtime_refusal(word: str) -> str:
    """runc's refusal to start ``word`` when the image holds no such program (containerd's wording)."""
    reason = f"stat {word}: no such file or directory" if "/" in word else "executable file not found in $PATH"
    return f'OCI runtime exec failed: exec failed: unable to start container process: exec: "{word}": {reason}: unknown'


def run(argv: list[str], container: Container, stdin: bytes = b"", env: Mapping[str, str] | None = None,
        cwd: str | None = None) -> ExecResult:
    """Start ``argv`` in ``container`` as the container runtime would, and run it to its end."""
    env = container.env if env is None else env
    cwd = cwd or container.cwd
    word = argv[0] if argv else ""
    name = find(word, container, env, cwd=cwd)
    if name is None:
        return ExecResult(stderr=f"{runtime_refusal(word)}\n".encode("utf-8", "surrogateescape"), code=127)
    program = PROGRAMS.get(name) if name not in BUSYBOX_ONLY or busybox(container) else None
    if program is None:
        listed = ", ".join(emulated(container)) or "none"
        return ExecResult(stderr=f"itbench_gym: {word} is in this container's image, but the twin does not emulate it "
                                 f"(emulated: {listed})\n".encode("utf-8", "surrogateescape"), code=NOT_EMULATED)
    style = "busybox" if busybox(container) else "gnu"
    prefix = (posixpath.basename(word) if style == "busybox" else word) + ": "
    inv = Invocation(list(argv), container, stdin, env, cwd, style, prefix)
    try:
        return program(inv)
    except OutOfMemory:
        return ExecResult(bytes(inv.out), bytes(inv.err), OOM_KILLED)
    except BeyondTwin as beyond:
        return ExecResult(bytes(inv.out), bytes(inv.err) + f"{beyond}\n".encode(), BEYOND_TWIN)
    except ProcessWaits as waits:
        raise waits.printed_before(bytes(inv.out), bytes(inv.err)) from None
    except Exception as failure:  # a failing emulation is a crashed process to the caller, never its exception
        return ExecResult(stderr=f"itbench_gym: the twin's emulation of {word} failed: {failure!r}\n".encode(),
                          code=EMULATION_FAILED)
