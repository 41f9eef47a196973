r"""Go regular expressions (RE2 syntax, as Prometheus and Loki accept them), matched by google-re2.

Python's ``re`` backtracks: one agent-written pattern such as ``(.*.*)*X`` holds the GIL for
minutes and freezes every thread of the process. Prometheus and Loki use Go's ``regexp``, which
is RE2 and runs in time linear in the text; so does every pattern here. This module is the twin's
single entry point for patterns that come from queries (label matchers, line filters, ``regexp``
parsers, ``label_replace``, template functions):

- it accepts Go's syntax: ``(?P<n>..)`` and ``(?<n>..)``, ``\z``, ``\Q..\E``, ``(?i)``/``(?s)``
  flags anywhere, Unicode classes; and refuses what Go refuses (lookarounds, backreferences,
  ``\C``) with the text of Go's ``regexp/syntax`` errors, e.g. ``error parsing regexp: invalid or
  unsupported Perl syntax: `(?=```;
- ``anchored`` patterns behave like Prometheus' label matchers, ``^(?s:pattern)$``;
- replacements follow Go's ``Regexp.Expand`` (``$1``, ``${name}``, ``$$``) and ``ReplaceAll``
  (empty matches abutting a previous match are skipped), and can be bounded in output size.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import re2

#: RE2's error texts -> Go's ``regexp/syntax`` ErrorCode texts (Go's parser is a port of RE2's).
_GO_CODES = {
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "missing )": "missing closing )",
    "missing ]": "missing closing ]",
    "unexpected )": "unexpected )",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "no argument for repetition operator": "missing argument to repetition operator",
    "trailing \\": "trailing backslash at end of expression",
    "invalid named capture group": "invalid named capture",
    "invalid character class range": "invalid character class range",
    "invalid character class": "invalid character class",
    "invalid escape sequence": "invalid escape sequence",
    "invalid UTF-8": "invalid UTF-8",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}
#: Go's ``syntax.Parse`` refuses deeper nesting (``maxHeight``); RE2 would accept it.
_MAX_NESTING = 1000
#: Memory one RE2 object may use for its program and DFA cache (RE2's default); past it RE2
#: refuses the pattern as too large, or falls back to its slower, still linear, NFA.
_MAX_MEM = 8 << 20
#: Compiled patterns kept (two RE2 objects each): typical patterns take kilobytes, and even
#: adversarial ones cannot pin more than 128 x 8 MiB. Compiling again costs microseconds.
_CACHE_SIZE = 64


class RegexError(ValueError):
    """A pattern Go's ``regexp`` rejects; ``str()`` is Go's message, ``pattern`` the whole pattern."""

    def __init__(self, code: str, expr: str, pattern: str = "") -> None:
        super().__init__(f"error parsing regexp: {code}: `{expr}`")
        self.code = code
        self.expr = expr
        self.pattern = pattern


class OutputTooLarge(ValueError):
    """A replacement whose output would exceed the caller's bound (checked while it is built)."""


class Match(Protocol):
    """What a successful match offers (google-re2's match objects)."""

    def group(self, *groups: int | str) -> Any: ...

    def groupdict(self, default: str | None = None) -> dict[str, str | None]: ...

    def start(self, group: int = 0) -> int: ...

    def end(self, group: int = 0) -> int: ...


class _Pattern(Protocol):
    """What is used of a compiled google-re2 object (google-re2 ships no type information)."""

    @property
    def groups(self) -> int: ...

    @property
    def groupindex(self) -> Mapping[str, int]: ...

    def search(self, text: str) -> Match | None: ...

    def fullmatch(self, text: str) -> Match | None: ...

    def finditer(self, text: str) -> Iterator[Match]: ...


def _options(*, dot_nl: bool, capture: bool) -> Any:
    opts = re2.Options()
    opts.log_errors = False
    opts.dot_nl = dot_nl
    opts.never_capture = not capture
    opts.max_mem = _MAX_MEM
    return opts


def _go_error(message: str, pattern: str) -> RegexError:
    """RE2's ``"<code>: <arg>"`` as Go's error (Go names the whole pattern where RE2 names nothing)."""
    code, sep, arg = message.partition(": ")
    if not sep:
        code, arg = message, ""
    go_code = _GO_CODES.get(code, code)
    return RegexError(go_code, pattern if go_code == "expression too large" else arg)


def _check_go_syntax(pattern: str) -> None:
    """Refuse what Go refuses but RE2 accepts (``\\C``, lookbehind spelled as a named group, depth)."""
    depth = 0
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt == "C":
                raise RegexError("invalid escape sequence", "\\C")
            if nxt == "Q" and not in_class:
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            i += 2
            continue
        if in_class:
            if ch == "[" and pattern.startswith("[:", i):
                close = pattern.find(":]", i + 2)
                i = i + 2 if close < 0 else close + 2
                continue
            if ch == "]":
                in_class = False
            i += 1
            continue
        if ch == "[":
            in_class = True
            i += 1
            if pattern[i : i + 1] == "^":
                i += 1
            if pattern[i : i + 1] == "]":  # a leading ']' is a literal
                i += 1
            continue
        if ch == "(":
            if pattern.startswith("(?<", i) and pattern[i + 3 : i + 4] in ("=", "!"):
                # Go reads (?<...> as a named group (Go 1.22+), so lookbehind fails as a bad name.
                close = pattern.find(">", i)
                raise RegexError("invalid named capture", pattern[i:] if close < 0 else pattern[i : close + 1])
            depth += 1
            if depth > _MAX_NESTING:
                raise RegexError("expression nests too deeply", pattern)
        elif ch == ")":
            depth = max(0, depth - 1)
        i += 1


def _utf8(text: str) -> str:
    """``text`` with lone surrogates (which UTF-8 cannot encode) as U+FFFD, as Go reads bad bytes."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _build(pattern: str, anchored: bool) -> tuple[_Pattern, _Pattern]:
    """RE2 objects with and without capture groups (the latter is faster for yes/no matching)."""
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = pattern[exc.start :].encode("utf-8", "surrogatepass").decode("utf-8", "replace")
        raise RegexError("invalid UTF-8", bad) from None
    _check_go_syntax(pattern)
    try:
        return (re2.compile(pattern, _options(dot_nl=anchored, capture=True)),
                re2.compile(pattern, _options(dot_nl=anchored, capture=False)))
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b""
        raise _go_error(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw), pattern) from None


class Regex:
    """A compiled Go pattern. ``anchored`` ones match whole values with ``.`` matching newlines."""

    __slots__ = ("pattern", "anchored", "_re", "_probe")

    def __init__(self, pattern: str, anchored: bool) -> None:
        try:
            self._re, self._probe = _build(pattern, anchored)
        except RegexError as exc:
            exc.pattern = pattern
            raise
        self.pattern = pattern
        self.anchored = anchored

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r}, anchored={self.anchored})"

    @property
    def groups(self) -> int:
        return int(self._re.groups)

    @property
    def groupindex(self) -> dict[str, int]:
        return dict(self._re.groupindex)

    def matches(self, text: str) -> bool:
        """Whole-value match for anchored patterns, a match anywhere otherwise."""
        find = self._probe.fullmatch if self.anchored else self._probe.search
        try:
            return find(text) is not None
        except UnicodeEncodeError:  # rare: only text with lone surrogates pays for the copy
            return find(_utf8(text)) is not None

    def search(self, text: str) -> Match | None:
        try:
            found: Match | None = self._re.search(text)
        except UnicodeEncodeError:
            found = self._re.search(_utf8(text))
        return found

    def fullmatch(self, text: str) -> Match | None:
        try:
            found: Match | None = self._re.fullmatch(text)
        except UnicodeEncodeError:
            found = self._re.fullmatch(_utf8(text))
        return found

    def finditer(self, text: str) -> Iterator[Match]:
        """Successive non-overlapping matches; an empty match right after a match is skipped (Go)."""
        last_end = -1
        for m in self._re.finditer(_utf8(text)):
            if m.start() == m.end() == last_end:
                continue
            last_end = m.end()
            yield m

    def expand(self, match: Match, template: str) -> str:
        """Go's ``Regexp.Expand``: ``$1``/``${1}``, ``$name``/``${name}``, ``$$``; unknown groups expand to ''."""
        out = []
        for kind, value in _template_parts(template):
            if kind == "text":
                out.append(value)
                continue
            group = self._group_of(value)
            text = match.group(group) if group is not None else None
            if text:
                out.append(text)
        return "".join(out)

    def _group_of(self, name: str) -> int | None:
        if name.isdigit() and not (name[0] == "0" and len(name) > 1) and len(name) <= 8:
            num = int(name)
            return num if num <= self.groups else None
        return self._re.groupindex.get(name)

    def replace_all(self, text: str, repl: str, *, literal: bool = False, max_len: int | None = None) -> str:
        """Go's ``ReplaceAllString`` (``literal``: ``ReplaceAllLiteralString``); ``max_len`` bounds the output.

        The output is built piece by piece, so a replacement that would be huge raises
        :class:`OutputTooLarge` before it is allocated.
        """
        text = _utf8(text)
        pieces: list[str] = []
        size = 0
        pos = 0
        for m in self.finditer(text):
            head = text[pos : m.start()]
            new = repl if literal else self.expand(m, repl)
            size += len(head) + len(new)
            if max_len is not None and size > max_len:
                raise OutputTooLarge(f"replacement output exceeds {max_len} characters")
            pieces += (head, new)
            pos = m.end()
        tail = text[pos:]
        if max_len is not None and size + len(tail) > max_len:
            raise OutputTooLarge(f"replacement output exceeds {max_len} characters")
        pieces.append(tail)
        return "".join(pieces)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _template_parts(template: str) -> tuple[tuple[str, str], ...]:
    """Split an ``Expand`` template into ("text", s) and ("ref", name) parts, as Go's ``extract`` reads refs."""
    parts: list[tuple[str, str]] = []
    buf: list[str] = []
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if ch != "$":
            buf.append(ch)
            i += 1
            continue
        if template.startswith("$$", i):
            buf.append("$")
            i += 2
            continue
        j = i + 1
        brace = template[j : j + 1] == "{"
        if brace:
            j += 1
        start = j
        while j < n and (template[j].isalnum() or template[j] == "_"):
            j += 1
        name = template[start:j]
        if not name or (brace and template[j : j + 1] != "}"):
            buf.append("$")  # malformed: the '$' is literal text
            i += 1
            continue
        if brace:
            j += 1
        if buf:
            parts.append(("text", "".join(buf)))
            buf = []
        parts.append(("ref", name))
        i = j
    if buf:
        parts.append(("text", "".join(buf)))
    return tuple(parts)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(pattern: str, anchored: bool) -> Regex:
    return Regex(pattern, anchored)


def compile(pattern: str, *, anchored: bool = False) -> Regex:
    """A compiled Go pattern (cached); raises :class:`RegexError` with Go's message if it is invalid.

    ``anchored=True`` gives Prometheus' label-matcher semantics, ``^(?s:pattern)$``.
    """
    return _compile(pattern, anchored)


def quote_meta(text: str) -> str:
    """Go's ``regexp.QuoteMeta``: ``text`` as a pattern matching itself literally."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def expand_quoted(pattern: str) -> str:
    r"""``pattern`` with every ``\Q..\E`` span replaced by its quoted equivalent (same language).

    For engines whose own regex dialect lacks ``\Q..\E`` (the PromQL parser validates matchers
    with Rust's ``regex``); the result means exactly what Go reads in ``pattern``.
    """
    if "\\Q" not in pattern:
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            if pattern[i + 1 : i + 2] == "Q" and not in_class:
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2 :] if end < 0 else pattern[i + 2 : end]
                out.append(quote_meta(literal))
                i = n if end < 0 else end + 2
                continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            for lead in ("^", "]"):
                if pattern[i : i + 1] == lead:
                    out.append(lead)
                    i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)
