"""What bounds one query in the twin: its text, its shape, and its wall-clock time.

The twin serves agents from the same Python process as the environment, so one query must never
take the process down. Three things used to: the native PromQL parser overflows its stack on deep
input (``1+1+...+1`` with 5,000 terms), the Python evaluators recurse once per nesting level, and a
query can run unboundedly long. The checks here run before any parser sees the text:

- :func:`check_shape` is a linear scan (strings and comments skipped) that measures bracket
  nesting and the number of operators and arguments. The native parser crashed at about 4,000
  levels on an 8 MiB stack and the evaluators recurse a few frames per level under Python's
  1,000-frame limit, so the limits (64 levels, 128 terms) keep every query far below both.
- :class:`Deadline` is a cooperative wall-clock budget that the engines check inside their loops;
  regexes are RE2 (linear) and inputs are bounded, so no native call runs long between checks.

PromQL and LogQL share the scanner (``language`` selects their quote characters).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from itbench_gym.lang.gofloat import printf
from itbench_gym.lang.gostrings import UnquoteError, unquote

#: Longest query text accepted, in characters.
MAX_QUERY_CHARS = 16_384
#: Deepest bracket nesting accepted: (), [] and {} all count.
MAX_NESTING_DEPTH = 64
#: Most operators (binary, unary, set and pipeline operators) plus argument separators accepted.
MAX_TERMS = 128
#: Largest ``@`` timestamp magnitude (seconds) whose milliseconds fit int64 with room for offsets.
MAX_AT_SECONDS = 9.2e15

_KEYWORD_OPERATORS = frozenset({"and", "or", "unless", "atan2"})
_TWO_CHAR_OPERATORS = frozenset({"==", "!=", ">=", "<=", "=~", "!~", "|=", "|~", "|>", "!>"})
_ONE_CHAR_OPERATORS = frozenset("+-*/%^<>|,")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:.")


class QueryShapeError(ValueError):
    """A query refused before parsing; ``pos`` is the 0-based offset the message is about."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


class QueryTimeout(Exception):
    """A query that ran past its :class:`Deadline` (each engine words it like its upstream)."""


class Deadline:
    """A wall-clock budget; :meth:`check` raises :class:`QueryTimeout` once it is spent."""

    __slots__ = ("seconds", "_end")

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + max(0.0, seconds)

    @property
    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def check(self) -> None:
        """Raise once the budget is spent (a zero budget is spent from the start)."""
        if self._end is not None and time.monotonic() >= self._end:
            raise QueryTimeout(f"query exceeded its {self.seconds:g}s deadline")


@dataclass(frozen=True)
class RegexLiteral:
    """A string literal right after ``=~`` or ``!~``: where its label name and the literal are, and its value."""

    label_pos: int
    start: int
    end: int
    value: str


@dataclass
class Shape:
    """What the scan measured."""

    depth: int = 0
    terms: int = 0
    regexes: list[RegexLiteral] = field(default_factory=list)


def _string_end(query: str, i: int, quote: str) -> int:
    """Index just past the literal starting at ``i``, or -1 if it is not terminated."""
    n = len(query)
    j = i + 1
    if quote == "`":
        end = query.find("`", j)
        return -1 if end < 0 else end + 1
    while j < n:
        c = query[j]
        if c == "\\":
            j += 2
            continue
        if c == quote:
            return j + 1
        if c == "\n":
            return -1
        j += 1
    return -1


def _regex_literal(quoted: str) -> str | None:
    """A matcher's regex text, or None when the literal is malformed (the parser then reports where)."""
    try:
        return unquote(quoted)
    except UnquoteError:
        return None


def _label_start(query: str, op_pos: int) -> int:
    """Start of the label name (an identifier or a quoted name) just before the matcher at ``op_pos``."""
    j = op_pos
    while j > 0 and query[j - 1].isspace():
        j -= 1
    end = j
    if j > 0 and query[j - 1] in "\"'`":
        quote = query[j - 1]
        k = query.rfind(quote, 0, j - 1)
        return k if k >= 0 else j - 1
    while j > 0 and (query[j - 1].isalnum() or query[j - 1] in "_:"):
        j -= 1
    return j if j < end else op_pos


def _at_value(query: str, i: int) -> tuple[str, int]:
    """The number literal after an ``@`` at ``i`` (empty for ``start()``/``end()``) and where it ends."""
    n = len(query)
    j = i + 1
    while j < n and query[j].isspace():
        j += 1
    k = j
    if k < n and query[k] in "+-":
        k += 1
    while k < n and (query[k].isalnum() or query[k] in "._"):
        if query[k] in "eE" and k + 1 < n and query[k + 1] in "+-" and query[j:k].replace(".", "").lstrip("+-").isdigit():
            k += 2
            continue
        k += 1
    return query[j:k], k




def check_shape(query: str, *, language: str) -> Shape:
    """Scan ``query`` (``language`` ``"promql"`` or ``"logql"``); raise :class:`QueryShapeError` if it is too big.

    The scan does not validate syntax: an unterminated string or unbalanced bracket ends or skews
    it harmlessly and is left for the parser to report.
    """
    if len(query) > MAX_QUERY_CHARS:
        raise QueryShapeError(
            f"the query is {len(query):,} characters long; the limit is {MAX_QUERY_CHARS:,} characters", 0)
    quotes = "\"'`" if language == "promql" else '"`'
    shape = Shape()
    stack: list[str] = []
    last_op = ""  # the previous significant token, to spot regex matchers
    last_op_pos = 0
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c.isspace():
            i += 1
            continue
        if c == "#":
            nl = query.find("\n", i)
            i = n if nl < 0 else nl + 1
            continue
        if c in quotes:
            end = _string_end(query, i, c)
            if end < 0:
                break
            literal = _regex_literal(query[i:end]) if last_op in ("=~", "!~") else None
            if literal is not None:
                shape.regexes.append(RegexLiteral(_label_start(query, last_op_pos), i, end, literal))
            last_op = "string"
            i = end
            continue
        if c in _OPENERS:
            stack.append(c)
            shape.depth = max(shape.depth, len(stack))
            if len(stack) > MAX_NESTING_DEPTH:
                raise QueryShapeError(
                    f"the expression nests too deeply: more than {MAX_NESTING_DEPTH} levels of brackets", i)
            last_op = c
            i += 1
            continue
        if c in ")]}":
            if stack:
                stack.pop()
            last_op = c
            i += 1
            continue
        in_selector = bool(stack) and stack[-1] in "{["
        two = query[i : i + 2]
        if two in _TWO_CHAR_OPERATORS:
            if not in_selector:
                shape.terms += 1
            last_op, last_op_pos = two, i
            i += 2
        elif c in _WORD_CHARS:
            j = i
            while j < n and query[j] in _WORD_CHARS:
                if query[j] in "eE" and j + 1 < n and query[j + 1] in "+-" and query[i].isdigit():
                    j += 2
                    continue
                j += 1
            word = query[i:j]
            if not in_selector and word.lower() in _KEYWORD_OPERATORS:
                shape.terms += 1
            last_op = "word"
            i = j
        elif c == "@" and language == "promql":
            text, end = _at_value(query, i)
            if text and text[-1] != "(":
                try:
                    value = float(text)
                except ValueError:
                    value = 0.0  # not a number (start(), end() or a syntax error for the parser)
                if not math.isfinite(value) or abs(value) > MAX_AT_SECONDS:
                    raise QueryShapeError(f"timestamp out of bounds for @ modifier: {printf(value, 'f')}", i)
            last_op = "@"
            i = max(end, i + 1)
        else:
            if c in _ONE_CHAR_OPERATORS and not in_selector:
                shape.terms += 1
            last_op, last_op_pos = c, i
            i += 1
        if shape.terms > MAX_TERMS:
            raise QueryShapeError(
                f"the expression has too many terms: more than {MAX_TERMS} operators and arguments; "
                "split it into several queries", i - 1)
    return shape


@dataclass(frozen=True)
class QueryLimits:
    """Per-query bounds of the PromQL engine.

    ``max_samples`` counts every sample a query materialises (selected points, per-step values of
    every intermediate result), cumulatively, like Prometheus' ``--query.max-samples``; ``timeout``
    is the wall-clock budget in seconds (Prometheus' ``--query.timeout``), None for no deadline.
    """

    max_samples: int
    timeout: float | None


#: What engine callers get by default (rule evaluation, promqltest): Prometheus' defaults minus the
#: deadline, so a long simulated fast-forward never fails its alert rules on wall time.
DEFAULT_LIMITS = QueryLimits(max_samples=50_000_000, timeout=None)
#: What the twin's Prometheus HTTP API applies to every agent query. 5M samples keep one query's
#: numpy working set to roughly 250 MB (about 50 bytes per sample at peak); 10 s of wall time keeps
#: every call well inside the tools' 30 s HTTP timeout.
API_LIMITS = QueryLimits(max_samples=5_000_000, timeout=10.0)
