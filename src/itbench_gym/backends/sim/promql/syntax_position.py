"""Where a PromQL syntax error is, when the parser only says "invalid promql query".

``promql-parser`` reports no position for many errors. We find it the way a person would: extend
the query token by token and keep the longest prefix that some completion (a closing bracket, an
operand, a duration...) still turns into a valid query; the first token that no completion can save
is the error, and a query whose every prefix can be completed is missing its end.

That costs about a hundred parses per token, so it only runs on short queries and stops at the
query's deadline; longer ones get the parser's message without a position.
"""

from __future__ import annotations

import re
from itertools import product

import promql_parser

from .limits import Deadline

_TOKEN = re.compile(
    r"""\s*(
        "(?:[^"\\]|\\.)*"? | '(?:[^'\\]|\\.)*'? | `[^`]*`?      # strings (possibly unterminated)
      | [0-9]+(?:ms|[smhdwy])(?:[0-9]+(?:ms|[smhdwy]))*         # durations
      | 0x[0-9a-fA-F]+ | [0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?     # numbers
      | [A-Za-z_:][A-Za-z0-9_:]*                                 # identifiers and keywords
      | ==|!=|>=|<=|=~|!~|[-+*/%^=<>,(){}\[\]@:]                 # operators and brackets
      | \S                                                       # anything else is a token of its own
    )""",
    re.X,
)
_OPENERS = {"(": ")", "[": "]", "{": "}"}
#: What may follow a prefix before its brackets close (an operand, a range, a matcher value, ...) ...
_FILLERS = ("", "[5m]", " x", " x[5m]", ' "x"', " 1", "5m", "1m", "a", 'a="x"', '="x"', '"x"', " (a) (x)", "(a) x", "(x)")
#: ... and after they close (the operand of a binary operator, the body of an aggregation).
_TAILS = ("", " x", " (x)", " 1")
#: Longest query located token by token (the scan is quadratic: ~0.3 s at this length).
MAX_SCAN_CHARS = 512


def tokens(query: str) -> list[tuple[int, int]]:
    """(start, end) of every token."""
    spans = []
    pos = 0
    while pos < len(query):
        match = _TOKEN.match(query, pos)
        if match is None or match.end(1) == match.start(1):
            break
        spans.append((match.start(1), match.end(1)))
        pos = match.end()
    return spans


def _closers(prefix: str, spans: list[tuple[int, int]]) -> str:
    stack: list[str] = []
    for start, end in spans:
        tok = prefix[start:end]
        if tok in _OPENERS:
            stack.append(_OPENERS[tok])
        elif stack and tok == stack[-1]:
            stack.pop()
    return "".join(reversed(stack))


def _valid(text: str) -> bool:
    try:
        promql_parser.parse(text)
    except BaseException:  # the Rust binding raises ValueError, and panics on a few inputs
        return False
    return True


def _completable(prefix: str, spans: list[tuple[int, int]]) -> bool:
    closers = _closers(prefix, spans)
    # A selector closed inside a range function still needs its range: rate(x{a="b"}[5m]).
    endings = ("", closers, closers[:1] + "[5m]" + closers[1:]) if closers else ("",)
    return any(_valid(prefix + filler + close + tail) for filler, close, tail in product(_FILLERS, endings, _TAILS))


def locate(query: str, deadline: Deadline | None = None) -> tuple[int, str] | None:
    """(0-based offset, description) of the first token no completion can save, or None.

    None too when the query is longer than ``MAX_SCAN_CHARS`` or ``deadline`` passes first.
    """
    if len(query) > MAX_SCAN_CHARS:
        return None
    spans = tokens(query)
    for i, (start, end) in enumerate(spans):
        if deadline is not None and deadline.expired:
            return None
        if not _completable(query[:end], spans[: i + 1]):
            return start, f"unexpected {query[start:end]!r}"
    return len(query), "unexpected end of input"
