"""Parse LogQL with a Lark LALR(1) grammar (``logql.lark``) into the ``ast`` nodes.

Syntax errors carry Loki's wording and 1-based positions (``parse error at line 1, col 12:
syntax error: unexpected IDENTIFIER, expecting STRING``); semantic checks Loki does at parse time
(empty-compatible selectors, unwrap rules, parameters, regexes, templates) fail here too.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

from itbench_gym.backends.sim.promql.limits import QueryShapeError, check_shape
from itbench_gym.lang import gostrings, regex

from . import ast as A
from .errors import ParseError
from .matching import compile_pattern, ip_range, parse_bytes, parse_duration
from .template import Template, TemplateError

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
#: Terminals shown by name in syntax errors; every other one is shown as its text.
_VALUE_TOKENS = {"IDENTIFIER", "STRING", "NUMBER", "DURATION", "RANGE", "BYTES", "FLAG"}


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = resources.files(__package__).joinpath("logql.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=False, cache=False)


@functools.lru_cache(maxsize=1)
def _terminal_text() -> dict[str, str]:
    out = {"$END": "$end"}
    for term in _parser().terminals:
        if term.name in _VALUE_TOKENS:
            out[term.name] = term.name
        elif term.pattern.type == "str":
            out[term.name] = term.pattern.value
        else:
            out[term.name] = term.name
    return out


def _err(tok: Token, message: str) -> ParseError:
    return ParseError(message, tok.line or 1, tok.column or 1)


def unquote(tok: Token) -> str:
    """A string token's value (Go ``strconv.Unquote``); a bad escape is a parse error at the token."""
    try:
        return gostrings.unquote(str(tok))
    except gostrings.UnquoteError:
        raise _err(tok, "invalid char escape") from None


def _regex(tok: Token, pattern: str, *, anchored: bool) -> regex.Regex:
    """A Go regex (RE2); ``anchored`` ones are label matchers, ``^(?s:pattern)$`` as in Prometheus."""
    try:
        return regex.compile(pattern, anchored=anchored)
    except regex.RegexError as exc:
        raise _err(tok, str(exc)) from None


def _template(tok: Token, text: str) -> Template:
    try:
        return Template(text)
    except TemplateError as exc:
        raise _err(tok, str(exc)) from None


def _number(tok: Token) -> float:
    try:
        return float(str(tok))
    except ValueError:
        raise _err(tok, f"syntax error: invalid number {tok}") from None


def _matcher(name: Token, op: Token, value: Token) -> A.Matcher:
    text = unquote(value)
    regex = _regex(value, text, anchored=True) if str(op) in (A.RE, A.NRE) else None
    return A.Matcher(str(name), str(op), text, regex)


@dataclass(frozen=True)
class _RangeStages:
    """Stages of a log range, split at ``| unwrap`` (``post`` are the label filters after it)."""

    stages: tuple[A.Stage, ...]
    unwrap: A.Unwrap | None


@v_args(inline=False)
class _Build(Transformer[Token, A.Expr | Tree[Token]]):
    """Tree -> ast; raises ParseError for what Loki rejects after parsing."""

    # -- selectors and log pipelines ---------------------------------------------------------
    def matcher(self, items: list[Token]) -> A.Matcher:
        return _matcher(items[0], items[1], items[2])

    def selector(self, items: list[A.Matcher]) -> tuple[A.Matcher, ...]:
        return tuple(items)

    def log_expr(self, items: list[Any]) -> A.LogSelector:
        matchers = items[0]
        stages = items[1] if len(items) > 1 else ()
        return _log_selector(matchers, stages)

    def pipeline(self, items: list[A.Stage]) -> tuple[A.Stage, ...]:
        return tuple(items)

    def stage(self, items: list[Any]) -> A.Stage:
        stage: A.Stage = items[1]  # after the "|" token: the stage its own rule built
        return stage

    def filter_value(self, items: list[Token]) -> tuple[bool, Token]:
        if len(items) == 2:
            return True, items[1]
        return False, items[0]

    def line_filter(self, items: list[Any]) -> A.LineFilter:
        op = str(items[0])
        values = [v for v in items[1:] if isinstance(v, tuple)]
        is_ip = values[0][0]
        texts = tuple(unquote(tok) for _, tok in values)
        compiled: tuple[object, ...] = ()
        if any(ip for ip, _ in values) and not all(ip for ip, _ in values):
            raise _err(values[0][1], "syntax error: ip() filters cannot be combined with string filters by or")
        if is_ip:
            for (_, tok), text in zip(values, texts, strict=True):
                try:
                    ip_range(text)
                except ValueError as exc:
                    raise _err(tok, str(exc)) from None
        elif op in (A.PIPE_MATCH, A.NRE):
            compiled = tuple(_regex(tok, text, anchored=False) for (_, tok), text in zip(values, texts, strict=True))
        elif op in (A.PIPE_PATTERN, A.NOT_PATTERN):
            compiled_p = []
            for (_, tok), text in zip(values, texts, strict=True):
                try:
                    compiled_p.append(compile_pattern(text, need_capture=False))
                except ValueError as exc:
                    raise _err(tok, str(exc)) from None
            compiled = tuple(compiled_p)
        return A.LineFilter(op, texts, compiled, is_ip)

    def extraction(self, items: list[Token]) -> A.Extraction:
        label = str(items[0])
        return A.Extraction(label, unquote(items[2]) if len(items) > 2 else label)

    def extractions(self, items: list[A.Extraction]) -> tuple[A.Extraction, ...]:
        return tuple(items)

    def json(self, items: list[Any]) -> A.ParserStage:
        return A.ParserStage("json", extractions=items[1] if len(items) > 1 else ())

    def logfmt(self, items: list[Any]) -> A.ParserStage:
        flags = tuple(str(t) for t in items[1:] if isinstance(t, Token) and t.type == "FLAG")
        for t in items[1:]:
            if isinstance(t, Token) and t.type == "FLAG" and str(t) not in ("--strict", "--keep-empty"):
                raise _err(t, f"invalid logfmt flag {t}: only --strict and --keep-empty are supported")
        extractions = next((x for x in items[1:] if isinstance(x, tuple)), ())
        return A.ParserStage("logfmt", flags=flags, extractions=extractions)

    def regexp(self, items: list[Token]) -> A.ParserStage:
        text = unquote(items[1])
        rx = _regex(items[1], text, anchored=False)
        if not rx.groupindex:
            raise _err(items[1], "at least one named capture must be supplied")
        for name in rx.groupindex:
            if not _LABEL_NAME.match(name):
                raise _err(items[1], f"invalid extracted label name '{name}'")
        return A.ParserStage("regexp", argument=text, compiled=rx)

    def pattern(self, items: list[Token]) -> A.ParserStage:
        text = unquote(items[1])
        try:
            compiled = compile_pattern(text, need_capture=True)
        except ValueError as exc:
            raise _err(items[1], str(exc)) from None
        return A.ParserStage("pattern", argument=text, compiled=compiled)

    def unpack(self, items: list[Token]) -> A.ParserStage:
        return A.ParserStage("unpack")

    def label_filter_stage(self, items: list[Any]) -> A.LabelFilterStage:
        return A.LabelFilterStage(items[1])

    def line_format(self, items: list[Token]) -> A.LineFormat:
        text = unquote(items[2])
        return A.LineFormat(text, _template(items[2], text))

    def label_fmt(self, items: list[Token]) -> A.LabelFormatItem:
        target, source = items[0], items[2]
        if source.type == "IDENTIFIER":
            return A.LabelFormatItem(str(target), str(source), False)
        text = unquote(source)
        return A.LabelFormatItem(str(target), text, True, _template(source, text))

    def label_format(self, items: list[Any]) -> A.LabelFormat:
        fmts = tuple(x for x in items if isinstance(x, A.LabelFormatItem))
        targets = [f.target for f in fmts]
        if len(set(targets)) != len(targets):
            raise _err(items[1], "syntax error: multiple label format with the same target")
        return A.LabelFormat(fmts)

    def named_matcher(self, items: list[Token]) -> A.NamedMatcher:
        if len(items) == 1:
            return A.NamedMatcher(str(items[0]))
        return A.NamedMatcher(str(items[0]), _matcher(items[0], items[1], items[2]))

    def drop(self, items: list[Any]) -> A.DropKeep:
        return A.DropKeep(False, tuple(x for x in items if isinstance(x, A.NamedMatcher)))

    def keep(self, items: list[Any]) -> A.DropKeep:
        return A.DropKeep(True, tuple(x for x in items if isinstance(x, A.NamedMatcher)))

    def decolorize(self, items: list[Any]) -> A.Decolorize:
        return A.Decolorize()

    # -- label filters ----------------------------------------------------------------------
    def lf_value(self, items: list[Token]) -> tuple[str, object, Token]:
        tok = items[-1]
        if len(items) == 2 and items[0].type == "IP":
            return "ip", unquote(items[1]), items[1]
        if tok.type == "STRING":
            return "string", unquote(tok), tok
        if tok.type == "DURATION":
            return "duration", parse_duration(str(tok)), tok
        if tok.type == "BYTES":
            return "bytes", parse_bytes(str(tok)), tok
        value = _number(tok)
        return "number", -value if items[0].type == "SUB" else value, tok

    def lf_compare(self, items: list[Any]) -> A.LabelCompare:
        name, op = items[0], str(items[1])
        kind, value, tok = items[2]
        if kind == "string":
            if op not in (A.EQ, A.NEQ, A.RE, A.NRE):
                raise _err(tok, f"syntax error: unexpected STRING after {op}, expecting NUMBER, DURATION or BYTES")
            regex = _regex(tok, str(value), anchored=True) if op in (A.RE, A.NRE) else None
            return A.LabelCompare(str(name), op, "string", value, regex)
        if op in (A.RE, A.NRE):
            raise _err(tok, f"syntax error: unexpected {tok.type}, expecting STRING")
        if kind == "ip":
            if op not in (A.EQ, A.NEQ):
                raise _err(tok, "syntax error: ip() label filters support only = and !=")
            try:
                ip_range(str(value))
            except ValueError as exc:
                raise _err(tok, str(exc)) from None
        return A.LabelCompare(str(name), "==" if op == A.EQ else op, kind, value)

    def lf_and(self, items: list[Any]) -> A.LabelAnd:
        parts = [x for x in items if not isinstance(x, Token)]
        return A.LabelAnd(parts[0], parts[1])

    def lf_or(self, items: list[Any]) -> A.LabelOr:
        parts = [x for x in items if not isinstance(x, Token)]
        return A.LabelOr(parts[0], parts[1])

    # -- metric queries ---------------------------------------------------------------------
    def range_op(self, items: list[Token]) -> Token:
        return items[0]

    def vector_op(self, items: list[Token]) -> Token:
        return items[0]

    def conv_op(self, items: list[Token]) -> str:
        return str(items[0])

    def offset(self, items: list[Token]) -> float:
        return parse_duration(str(items[1]))

    def unwrap(self, items: list[Any]) -> A.Unwrap:
        rest = items[2:]
        conversion = ""
        if len(rest) == 2:
            conversion, rest = str(rest[0]), rest[1:]
        return A.Unwrap(str(rest[0]), conversion)

    def range_stages(self, items: list[Any]) -> _RangeStages:
        stages: list[A.Stage] = []
        unwrap: A.Unwrap | None = None
        post: list[A.LabelFilter] = []
        for item in items:
            if isinstance(item, A.Unwrap):
                if unwrap is not None:
                    raise ParseError("syntax error: unexpected unwrap, a range takes one unwrap")
                unwrap = item
            elif unwrap is None:
                stages.append(item)
            elif isinstance(item, A.LabelFilterStage):
                post.append(item.filter)
            else:
                raise ParseError("syntax error: only label filters may follow unwrap")
        if unwrap is not None:
            unwrap = A.Unwrap(unwrap.label, unwrap.conversion, tuple(post))
        return _RangeStages(tuple(stages), unwrap)

    def log_range(self, items: list[Any]) -> A.LogRange:
        if len(items) == 1 and isinstance(items[0], A.LogRange):
            return items[0]
        matchers = items[0]
        at = next(i for i, x in enumerate(items) if isinstance(x, Token) and x.type == "RANGE")
        range_tok: Token = items[at]
        offset = next((x for x in items if isinstance(x, float)), 0.0)
        parts = [x for x in items if isinstance(x, _RangeStages)]
        if len(parts) > 1:
            raise _err(range_tok, "syntax error: unexpected |, a pipeline goes either before or after the range")
        stages = parts[0].stages if parts else ()
        unwrap = parts[0].unwrap if parts else None
        range_s = parse_duration(str(range_tok).strip("[] \t\n"))
        if range_s <= 0:
            raise _err(range_tok, "syntax error: the range must be positive")
        return A.LogRange(_log_selector(matchers, stages), range_s, offset, unwrap)

    def grouping(self, items: list[Any]) -> A.Grouping:
        labels = items[1] if len(items) > 1 else ()
        return A.Grouping(items[0].type == "WITHOUT", tuple(labels))

    def label_list(self, items: list[Token]) -> tuple[str, ...]:
        return tuple(str(t) for t in items)

    def range_agg(self, items: list[Any]) -> A.RangeAggregation:
        op_tok: Token = items[0]
        op = str(op_tok)
        param_tok = next((x for x in items[1:] if isinstance(x, Token) and x.type == "NUMBER"), None)
        log_range = next(x for x in items if isinstance(x, A.LogRange))
        grouping = next((x for x in items if isinstance(x, A.Grouping)), None)
        param = _number(param_tok) if param_tok is not None else None
        if op == "quantile_over_time":
            if param is None:
                raise _err(op_tok, "parameter required for operation quantile_over_time")
        elif param is not None:
            raise _err(param_tok or op_tok, f"syntax error: unexpected NUMBER, {op} takes no parameter")
        if op in A.LINE_RANGE_OPS and log_range.unwrap is not None and op != "rate":
            raise _err(op_tok, f"invalid aggregation {op} with unwrap")
        if op not in A.LINE_RANGE_OPS and log_range.unwrap is None:
            raise _err(op_tok, f"invalid aggregation {op} without unwrap")
        if grouping is not None and log_range.unwrap is None and op != "absent_over_time":
            raise _err(op_tok, f"grouping not allowed for {op} aggregation")
        return A.RangeAggregation(op, log_range, param, grouping)

    def vector_agg(self, items: list[Any]) -> A.VectorAggregation:
        op_tok: Token = items[0]
        op = str(op_tok)
        groupings = [x for x in items if isinstance(x, A.Grouping)]
        param_tok = next((x for x in items[1:] if isinstance(x, Token) and x.type == "NUMBER"), None)
        expr = next(x for x in items[1:] if not isinstance(x, (Token, A.Grouping)))
        _require_metric(expr, op_tok, f"{op} aggregation")
        param = _number(param_tok) if param_tok is not None else None
        if op in ("topk", "bottomk"):
            if param is None:
                raise _err(op_tok, f"parameter required for operation {op}")
            if param != int(param) or param <= 0:
                raise _err(param_tok or op_tok, f"invalid parameter (must be a positive integer) {op}({param_tok},")
        elif param is not None:
            raise _err(param_tok or op_tok, f"unsupported parameter for operation {op}({param_tok},")
        return A.VectorAggregation(op, expr, groupings[0] if groupings else None, param)

    def literal(self, items: list[Token]) -> A.Literal:
        value = _number(items[-1])
        return A.Literal(-value if items[0].type == "SUB" else value)

    def vector_expr(self, items: list[Token]) -> A.VectorLiteral:
        return A.VectorLiteral(_number(items[1]))

    def label_replace(self, items: list[Any]) -> A.LabelReplace:
        expr, dst, repl, src, regex = items[1], items[2], items[3], items[4], items[5]
        _require_metric(expr, items[0], "label_replace")
        if not _LABEL_NAME.match(unquote(dst)):
            raise _err(dst, f"invalid destination label name in label_replace(): {unquote(dst)}")
        return A.LabelReplace(expr, unquote(dst), unquote(repl), unquote(src), _regex(regex, unquote(regex), anchored=True))

    def bin_mod(self, items: list[Any]) -> tuple[bool, A.VectorMatching]:
        return_bool = any(isinstance(x, Token) and x.type == "BOOL" for x in items)
        matching = next((x for x in items if isinstance(x, A.VectorMatching)), A.VectorMatching())
        group = next((x for x in items if isinstance(x, tuple)), None)
        if group is not None:
            matching = A.VectorMatching(matching.on, matching.labels, group[0], group[1])
        return return_bool, matching

    def matching(self, items: list[Any]) -> A.VectorMatching:
        labels = items[1] if len(items) > 1 else ()
        return A.VectorMatching(items[0].type == "ON", tuple(labels))

    def group(self, items: list[Any]) -> tuple[str, tuple[str, ...]]:
        card = "many-to-one" if items[0].type == "GROUP_LEFT" else "one-to-many"
        return card, tuple(items[1]) if len(items) > 1 else ()

    def binop(self, items: list[Any]) -> A.BinaryOp:
        lhs, op_tok, (return_bool, matching), rhs = items
        op = str(op_tok)
        _require_metric(lhs, op_tok, f"left leg of binary operation ({op})")
        _require_metric(rhs, op_tok, f"right leg of binary operation ({op})")
        if return_bool and op not in A.COMPARISONS:
            raise _err(op_tok, "bool modifier can only be used on comparison operators")
        if op in ("and", "or", "unless"):
            if isinstance(lhs, A.Literal) or isinstance(rhs, A.Literal):
                raise _err(op_tok, f"set operator {op} not allowed in binary scalar expression")
            if matching.card != "one-to-one":
                raise _err(op_tok, f"no grouping allowed for {op} operation")
            matching = A.VectorMatching(matching.on, matching.labels, "many-to-many")
        return A.BinaryOp(op, lhs, rhs, return_bool, matching)


def _log_selector(matchers: tuple[A.Matcher, ...], stages: tuple[A.Stage, ...]) -> A.LogSelector:
    if not any(not m.matches("") for m in matchers):
        raise ParseError(
            'queries require at least one regexp or equality matcher that does not have an empty-compatible value. '
            'For instance, app=~".*" does not meet this requirement, but app=~".+" will'
        )
    return A.LogSelector(matchers, stages)


def _require_metric(expr: Any, tok: Token, where: str) -> None:
    if isinstance(expr, A.LogSelector):
        raise _err(tok, f"unexpected type for {where}: a log query; wrap it in a range aggregation such as count_over_time(...[5m])")


def parse(query: str) -> A.Expr:
    """Parse a LogQL query; raises ``ParseError`` with Loki's message and position.

    The text must first pass the twin's size and shape limits (the tree is built and evaluated
    recursively, so nesting and operator chains are bounded before Lark sees the query).
    """
    if not isinstance(query, str):
        raise ParseError(f"query must be a string, got {type(query).__name__}")
    try:
        check_shape(query, language="logql")
    except QueryShapeError as exc:
        line, col = _position(query, exc.pos)
        raise ParseError(exc.message, line, col) from None
    try:
        tree = _parser().parse(query)
    except UnexpectedToken as exc:
        raise _syntax_error(exc, query) from None
    except UnexpectedCharacters as exc:
        raise _char_error(exc, query) from None
    except UnexpectedInput as exc:
        raise ParseError("syntax error", getattr(exc, "line", 1) or 1, getattr(exc, "column", 1) or 1) from None
    try:
        expr = _Build().transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, ParseError):
            raise exc.orig_exc from None
        raise
    if isinstance(expr, Tree):
        raise ParseError("syntax error: unexpected expression")
    return expr


def _syntax_error(exc: UnexpectedToken, query: str) -> ParseError:
    names = _terminal_text()
    tok = exc.token
    if tok.type == "$END":
        got = "$end"
        line, col = _end_position(query)
    else:
        got = names.get(tok.type, str(tok))
        line, col = tok.line or 1, tok.column or 1
    expected = sorted({names.get(t, t) for t in exc.expected if not t.startswith("__")})
    message = f"syntax error: unexpected {got}"
    if 0 < len(expected) <= 4:
        message += ", expecting " + " or ".join(expected)
    return ParseError(message, line, col)


def _char_error(exc: UnexpectedCharacters, query: str) -> ParseError:
    char = exc.char
    if char in ('"', "`"):
        return ParseError("literal not terminated", exc.line, exc.column)
    if char == "[":
        return ParseError("syntax error: invalid range, expecting a duration such as [5m]", exc.line, exc.column)
    return ParseError(f"syntax error: unexpected character {char!r}", exc.line, exc.column)


def _position(query: str, pos: int) -> tuple[int, int]:
    """1-based line and column of offset ``pos``."""
    before = query[:pos]
    return before.count("\n") + 1, pos - (before.rfind("\n") + 1) + 1


def _end_position(query: str) -> tuple[int, int]:
    lines = query.split("\n")
    return len(lines), len(lines[-1]) + 1
