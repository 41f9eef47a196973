"""Query text -> ``promql_parser`` tree, with the guards the native parser needs and Prometheus' errors.

Everything PromQL the twin parses goes through :func:`native_parse`: queries, rule expressions and
the ``match[]`` selectors of the series APIs. Before the Rust parser sees the text it must pass
:func:`~.limits.check_shape` (the parser overflows its stack on deep input); ``\\Q..\\E`` in regex
matchers, which Go accepts and the parser's Rust regex validation does not, is rewritten to the
equivalent quoted pattern. Regex errors are reported in Go's words at the label's position, as
Prometheus does: ``1:5: parse error: error parsing regexp: missing closing ): `(```.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import promql_parser

from itbench_gym.lang import regex

from ..tsdb import Matcher, selector_matchers
from .ast import line_col
from .errors import PromQLError
from .limits import Deadline, QueryShapeError, RegexLiteral, Shape, check_shape
from .syntax_position import locate

_QUOTED = re.compile(r"['\"`]([^'\"`]+)['\"`]")
_ILLEGAL_REGEX = "illegal regex for "


@dataclass(frozen=True)
class Prepared:
    """The text handed to the parser (``\\Q..\\E`` expanded) and what the shape scan found in it."""

    text: str
    shape: Shape

    def regex_literal(self, pattern: str) -> RegexLiteral | None:
        """The regex matcher literal whose value is ``pattern`` (as the parser saw it), if any."""
        return next((lit for lit in self.shape.regexes if lit.value == pattern), None)


def prepare(query: str) -> Prepared:
    """Check the query's size and shape and expand ``\\Q..\\E``; raises ``PromQLError`` (bad_data)."""
    try:
        shape = check_shape(query, language="promql")
    except QueryShapeError as exc:
        raise PromQLError(f"{line_col(query, exc.pos)}: parse error: {exc.message}", "bad_data") from None
    rewrites = [lit for lit in shape.regexes if "\\Q" in lit.value]
    if not rewrites:
        return Prepared(query, shape)
    parts, pos = [], 0
    for lit in rewrites:
        parts += [query[pos : lit.start], json.dumps(regex.expand_quoted(lit.value), ensure_ascii=False)]
        pos = lit.end
    text = "".join(parts) + query[pos:]
    # Positions in the rewritten text are what the parser and its messages refer to.
    return Prepared(text, check_shape(text, language="promql"))


def native_parse(query: str, deadline: Deadline | None = None) -> tuple[object, Prepared]:
    """The ``promql_parser`` tree of ``query``; every failure is a ``PromQLError`` with ``bad_data``."""
    prepared = prepare(query)
    text = prepared.text
    try:
        return promql_parser.parse(text), prepared
    except ValueError as exc:
        raise PromQLError(parse_error(prepared, str(exc), deadline), "bad_data") from None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the Rust binding panics on a few malformed inputs
        raise PromQLError(f"parse error: {exc}", "bad_data") from None


def regex_error(prepared: Prepared, err: regex.RegexError, pattern: str) -> PromQLError:
    """Prometheus' parse error for an invalid regex matcher."""
    lit = prepared.regex_literal(pattern)
    prefix = f"{line_col(prepared.text, lit.label_pos)}: " if lit is not None else ""
    return PromQLError(f"{prefix}parse error: {err}", "bad_data")


def parse_error(prepared: Prepared, message: str, deadline: Deadline | None = None) -> str:
    """Prometheus-style ``line:col: parse error: ...`` with a best-effort position."""
    query = prepared.text
    if message.startswith(_ILLEGAL_REGEX):
        pattern = message[len(_ILLEGAL_REGEX) :]
        lit = prepared.regex_literal(pattern)
        if lit is not None:
            try:
                regex.compile(lit.value)
            except regex.RegexError as exc:
                return f"{line_col(query, lit.label_pos)}: parse error: {exc}"
            return f"{line_col(query, lit.label_pos)}: parse error: {message}"
    pos = None
    if "end of input" in message or "unclosed" in message:
        pos = len(query)
    else:
        for frag in _QUOTED.findall(message):
            idx = query.find(frag)
            if idx >= 0:
                pos = idx
                break
    if pos is None:
        found = locate(query, deadline)
        if found is not None:
            pos, what = found
            if message.strip() == "invalid promql query":
                message = what
    prefix = f"{line_col(query, pos)}: " if pos is not None else ""
    return f"{prefix}parse error: {message}"


def parse_selector(text: str) -> list[Matcher]:
    """Matchers of a series selector such as ``up{job="x"}`` (``match[]``); ValueError with Prometheus' message."""
    try:
        node, prepared = native_parse(text)
        if not isinstance(node, promql_parser.VectorSelector):
            raise PromQLError(f'invalid series selector {text!r}: expected a vector selector like up{{job="x"}}')
        try:
            return selector_matchers(node)
        except regex.RegexError as exc:
            raise regex_error(prepared, exc, exc.pattern) from None
    except PromQLError as exc:
        raise ValueError(exc.message) from None
