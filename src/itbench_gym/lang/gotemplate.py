"""One Go ``text/template`` engine for the twin's template languages (Loki's and Prometheus').

Callers supply what differs between the systems that embed Go templates: the function table
(``Template(source, functions)``), the data (``render(dot, functions=...)``; per-render functions
such as Loki's ``__line__`` overlay the table), the error policy (every failure raises
``TemplateError``; ``lenient_calls`` makes a function that rejects its arguments yield "" instead, as
the twin's Loki does) and the size limits (:class:`Limits`).

Supported: text, ``{{ pipeline }}`` with ``{{-``/``-}}`` trimming, comments, fields and field
chains (``.``, ``.a.b``, ``$``, ``$x.a``), variables (``{{ $x := pipeline }}``, ``{{ $x = ... }}``,
scoped to the enclosing ``if``), string/number/bool literals, parenthesised pipelines, ``|``
chaining (the piped value becomes the last argument) and ``if``/``else if``/``else``/``end``.
Missing map keys give "" (Go's ``missingkey=zero`` on ``map[string]string``). ``BUILTINS`` holds
Go's predefined functions (``and``, ``eq``, ``printf``...), bounded by the caller's output limit.
"""

from __future__ import annotations

import html
import json
import math
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from itbench_gym.lang import gostrings
from itbench_gym.lang.gofloat import format_g

Value = Any
Function = Callable[..., Value]


class TemplateError(ValueError):
    """A template that cannot be parsed or executed; worded like Go's ``template:`` errors."""


@dataclass(frozen=True)
class Limits:
    """Bounds on one render: the longest output or value, and the deepest nesting."""

    max_output: int = 256 * 1024
    max_depth: int = 50


def too_large(what: str, limit: int, name: str = "line") -> TemplateError:
    """The error for a value that would exceed ``limit`` characters."""
    return TemplateError(f"template: {name}:1: {what} would exceed {limit} characters "
                         "(the twin's limit on one rendered value)")


def bounded(size: int, what: str, limit: int) -> None:
    """Refuse to build a value of ``size`` characters beyond ``limit``."""
    if size > limit:
        raise too_large(what, limit)


# ------------------------------------------------------------------------------- values


def go_str(v: Value) -> str:
    """How a template prints a value (Go's ``fmt.Print``); ``None`` (no value) prints as ""."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return format_g(v)
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".") + " +0000 UTC"
    if isinstance(v, Mapping):
        return "map[" + " ".join(f"{k}:{go_str(x)}" for k, x in sorted(v.items())) + "]"
    if v is None:
        return ""
    return str(v)


def truthy(v: Value) -> bool:
    """Go's template truth: false, 0, "", nil and empty maps are false."""
    if isinstance(v, (int, float)):
        return v != 0
    return bool(v)


def num(v: Value) -> float:
    """A value as a float64 (0 for what does not parse)."""
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v).strip())
    except ValueError:
        return 0.0


_INT64_MIN, _INT64_SPAN = -(1 << 63), 1 << 64


def wrap64(i: int) -> int:
    """Go's int64 overflow: wrap around."""
    return (i - _INT64_MIN) % _INT64_SPAN + _INT64_MIN


def to_int(v: Value) -> int:
    """sprig's ``toInt64``: out-of-range floats give Go's (amd64) ``MinInt64``, as a conversion does."""
    if isinstance(v, int) and not isinstance(v, bool):
        return wrap64(v)
    f = num(v)
    if not math.isfinite(f) or not -(2.0**63) <= f < 2.0**63:
        return 0 if math.isnan(f) else _INT64_MIN
    return int(f)


_PRINTF_VERB = re.compile(r"%([-+ #0]*)(\d+)?(?:\.(\d+))?([sdvfqxXteEgt%])")


def sprintf(fmt: str, args: tuple[Value, ...], limit: int) -> str:
    """Go's ``fmt.Sprintf`` for the common verbs, refusing outputs beyond ``limit`` before building them."""
    out, i, k = [], 0, 0
    size = 0
    for m in _PRINTF_VERB.finditer(fmt):
        out.append(fmt[i:m.start()])
        size += m.start() - i
        i = m.end()
        flags, width, prec, verb = m.groups()
        # Widths and precisions are padding Python would allocate before anything could check it.
        bounded(size + int(width or 0) + int(prec or 0), "printf output", limit)
        if verb == "%":
            out.append("%")
            continue
        if k >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        a = args[k]
        k += 1
        pyspec = f"%{flags}{width or ''}{'.' + prec if prec else ''}"
        if verb in "sv":
            out.append((pyspec + "s") % go_str(a))
        elif verb == "q":
            out.append((pyspec + "s") % json.dumps(go_str(a)))
        elif verb == "t":
            out.append(go_str(truthy(a)))
        elif verb in "dxX":
            out.append((pyspec + verb) % to_int(a))
        else:
            out.append((pyspec + verb) % num(a))
        size += len(out[-1])
        bounded(size, "printf output", limit)
    out.append(fmt[i:])
    bounded(size + len(out[-1]), "printf output", limit)
    return "".join(out)


def _title_separator(c: str) -> bool:
    """Go's ``strings.Title`` word boundary: ASCII non-alphanumerics (but ``_``) and spaces."""
    if c.isascii():
        return not (c.isalnum() or c == "_")
    if c.isalpha() or c.isdigit():
        return False
    return c.isspace()


def strings_title(s: str) -> str:
    """Go's ``strings.Title`` (sprig's and Prometheus' ``title``): upper-case each word's first letter only."""
    out, prev = [], " "
    for c in s:
        out.append(c.upper() if _title_separator(prev) else c)
        prev = c
    return "".join(out)


def _cmp_pair(a: Value, b: Value) -> tuple[Value, Value]:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a, b
    return go_str(a), go_str(b)


def _index(item: Value, *keys: Value) -> Value:
    for key in keys:
        if isinstance(item, Mapping):
            item = item.get(go_str(key), "")
        elif isinstance(item, (list, tuple, str)):
            item = item[to_int(key)]
        else:
            raise TemplateError(f"template: line:1: can't index item of type {type(item).__name__}")
    return item


def builtins(limit: int) -> dict[str, Function]:
    """Go ``text/template``'s predefined functions, with ``printf`` bounded by ``limit``."""
    return {
        "and": lambda *a: next((x for x in a if not truthy(x)), a[-1]),
        "or": lambda *a: next((x for x in a if truthy(x)), a[-1]),
        "not": lambda a: not truthy(a),
        "len": lambda s: len(s) if isinstance(s, (Mapping, list, tuple)) else len(go_str(s)),
        "index": _index,
        "print": lambda *a: sprintf(" ".join(["%v"] * len(a)), a, limit),
        "println": lambda *a: sprintf(" ".join(["%v"] * len(a)), a, limit) + "\n",
        "printf": lambda fmt, *a: sprintf(go_str(fmt), a, limit),
        "html": lambda *a: html.escape("".join(go_str(x) for x in a)).replace("&#x27;", "&#39;"),
        "urlquery": lambda *a: urllib.parse.quote_plus("".join(go_str(x) for x in a)),
        "eq": lambda a, *bs: any(x == y for x, y in (_cmp_pair(a, b) for b in bs)),
        "ne": lambda a, b: (lambda x, y: x != y)(*_cmp_pair(a, b)),
        "lt": lambda a, b: (lambda x, y: x < y)(*_cmp_pair(a, b)),
        "le": lambda a, b: (lambda x, y: x <= y)(*_cmp_pair(a, b)),
        "gt": lambda a, b: (lambda x, y: x > y)(*_cmp_pair(a, b)),
        "ge": lambda a, b: (lambda x, y: x >= y)(*_cmp_pair(a, b)),
    }


# ------------------------------------------------------------------------------- syntax
@dataclass(frozen=True)
class _Field:
    """``.a.b`` on dot (``base`` None) or on a variable (``base`` its name, ``$`` for the root)."""

    base: str | None
    path: tuple[str, ...]


@dataclass(frozen=True)
class _Const:
    value: Value


@dataclass(frozen=True)
class _Ident:
    name: str


@dataclass(frozen=True)
class _Command:
    args: tuple[_Arg, ...]


@dataclass(frozen=True)
class _Pipeline:
    commands: tuple[_Command, ...]
    declare: str = ""
    assign: bool = False


_Arg = _Field | _Const | _Ident | _Pipeline


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Action:
    pipeline: _Pipeline


@dataclass(frozen=True)
class _If:
    branches: tuple[tuple[_Pipeline, tuple[_Node, ...]], ...]
    otherwise: tuple[_Node, ...]


_Node = _Text | _Action | _If

_TOKEN = re.compile(r"""\s*(?:(?P<str>"(?:[^"\\]|\\.)*"|`[^`]*`)|(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?![A-Za-z0-9_]))"""
                    r"""|(?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"""
                    r"""|(?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"""
                    r"""|(?P<punct>:=|=|[|()]))""")
_DECL = re.compile(r"\s*(\$[A-Za-z0-9_]*)\s*(:=|=)(?!=)")


class _Parser:
    def __init__(self, source: str, names: frozenset[str], name: str, limits: Limits) -> None:
        self.source, self.names, self.name, self.limits = source, names, name, limits
        self.line = 1

    def error(self, what: str) -> TemplateError:
        return TemplateError(f"template: {self.name}:{self.line}: {what}")

    def parse(self) -> tuple[_Node, ...]:
        items = self._items()
        nodes, _, end = self._nodes(items, 0, 0, {"$"})
        if end is not None:
            raise self.error(f"unexpected {{{{{end}}}}}")
        return nodes

    def _items(self) -> list[tuple[str, str, int]]:
        """Text and action bodies (with their line) in order, ``{{-``/``-}}`` trimming applied."""
        source = self.source
        items: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        pending_trim = False
        while True:
            open_at = source.find("{{", pos)
            if open_at < 0:
                break
            line += source.count("\n", pos, open_at)
            close_at = source.find("}}", open_at + 2)
            if close_at < 0:
                self.line = line
                raise self.error("unclosed action")
            body = source[open_at + 2:close_at]
            trim_left = body[:1] == "-" and body[1:2].isspace()
            trim_right = body[-1:] == "-" and body[-2:-1].isspace() and len(body) >= 3
            if trim_left:
                body = body[2:]
            if trim_right:
                body = body[:-2]
            text = source[pos:open_at]
            if pending_trim:
                text = text.lstrip()
            if trim_left:
                text = text.rstrip()
            items.append(("text", text, line))
            items.append(("action", body.strip(), line))
            line += body.count("\n")
            pending_trim = trim_right
            pos = close_at + 2
        tail = source[pos:]
        items.append(("text", tail.lstrip() if pending_trim else tail, line))
        return items

    def _nodes(self, items: list[tuple[str, str, int]], i: int, depth: int,
               scope: set[str]) -> tuple[tuple[_Node, ...], int, str | None]:
        if depth > self.limits.max_depth:
            raise self.error("max expression depth exceeded")
        out: list[_Node] = []
        while i < len(items):
            kind, body, self.line = items[i]
            i += 1
            if kind == "text":
                if body:
                    out.append(_Text(body))
                continue
            word = body.split(None, 1)[0] if body else ""
            if word in ("end", "else"):
                return tuple(out), i, body
            if word == "if":
                node, i = self._if(items, i, body[2:].strip(), depth + 1, scope)
                out.append(node)
                continue
            if word in ("range", "with", "define", "template", "block", "break", "continue"):
                raise self.error(f"{{{{{word}}}}} is not supported by the twin's templates")
            if body.startswith("/*"):
                continue
            out.append(_Action(self._pipeline(body, scope, allow_decl=True)))
        return tuple(out), i, None

    def _if(self, items: list[tuple[str, str, int]], i: int, cond: str, depth: int,
            scope: set[str]) -> tuple[_If, int]:
        branches: list[tuple[_Pipeline, tuple[_Node, ...]]] = []
        while True:
            test = self._pipeline(cond, scope, allow_decl=False)
            body, i, end = self._nodes(items, i, depth, set(scope))
            branches.append((test, body))
            if end is None:
                raise self.error("unexpected EOF in if")
            if end == "end":
                return _If(tuple(branches), ()), i
            rest = end[4:].strip()
            if rest.startswith("if "):
                cond = rest[3:].strip()
                continue
            otherwise, i, end = self._nodes(items, i, depth, set(scope))
            if end != "end":
                raise self.error("expected {{end}} after {{else}}")
            return _If(tuple(branches), otherwise), i

    def _pipeline(self, text: str, scope: set[str], allow_decl: bool) -> _Pipeline:
        declare, assign = "", False
        m = _DECL.match(text)
        if m and allow_decl:
            declare, assign = m.group(1), m.group(2) == "="
            if assign and declare not in scope:
                raise self.error(f'undefined variable "{declare}"')
            text = text[m.end():]
        tokens = self._tokens(text)
        pipe, pos = self._parse_pipeline(tokens, 0, 0, scope)
        if pos != len(tokens):
            raise self.error(f"unexpected {tokens[pos][1]!r} in command")
        if declare:
            scope.add(declare)
        return _Pipeline(pipe.commands, declare, assign)

    def _tokens(self, text: str) -> list[tuple[str, str]]:
        out, pos = [], 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise self.error(f"unexpected {text[pos:].strip()[:1]!r} in operand")
            kind = m.lastgroup or ""
            out.append((kind, m.group(kind)))
            pos = m.end()
        return out

    def _parse_pipeline(self, tokens: list[tuple[str, str]], pos: int, depth: int,
                        scope: set[str]) -> tuple[_Pipeline, int]:
        if depth > self.limits.max_depth:
            raise self.error("max expression depth exceeded")
        commands: list[_Command] = []
        args: list[_Arg] = []
        while pos < len(tokens):
            kind, value = tokens[pos]
            if kind == "punct" and value == ")":
                break
            pos += 1
            if kind == "punct" and value == "|":
                if not args:
                    raise self.error("missing value for command")
                commands.append(_Command(tuple(args)))
                args = []
            elif kind == "punct" and value == "(":
                inner, pos = self._parse_pipeline(tokens, pos, depth + 1, scope)
                if pos >= len(tokens) or tokens[pos][1] != ")":
                    raise self.error("unclosed left paren")
                pos += 1
                args.append(inner)
            elif kind == "punct":
                raise self.error(f"unexpected {value!r} in operand")
            elif kind == "str":
                args.append(_Const(self._unquote(value)))
            elif kind == "num":
                args.append(_Const(float(value) if any(c in value for c in ".eE") else int(value)))
            elif kind == "field":
                args.append(_Field(None, tuple(value[1:].split(".")) if value != "." else ()))
            elif kind == "var":
                base, *path = value.split(".")
                if base not in scope:
                    raise self.error(f'undefined variable "{base}"')
                args.append(_Field(base, tuple(path)))
            elif value in ("true", "false"):
                args.append(_Const(value == "true"))
            elif value == "nil":
                args.append(_Const(None))
            elif value in self.names:
                args.append(_Ident(value))
            else:
                raise self.error(f'function "{value}" not defined')
        if not args:
            raise self.error("missing value for command")
        commands.append(_Command(tuple(args)))
        return _Pipeline(tuple(commands)), pos

    def _unquote(self, text: str) -> str:
        """A string constant's value: Go templates unquote them with ``strconv.Unquote``."""
        try:
            return gostrings.unquote(text)
        except gostrings.UnquoteError:
            raise self.error(f"malformed string constant {text}") from None


# ---------------------------------------------------------------------------- execution
#: Variable frames, innermost last: an ``if`` body declares into its own frame, ``=`` assigns where declared.
_Scope = list[dict[str, Value]]


class _Table:
    """The template's functions with one render's overrides in front (no per-render copy)."""

    __slots__ = ("base", "extra")

    def __init__(self, base: Mapping[str, Function], extra: Mapping[str, Function]) -> None:
        self.base, self.extra = base, extra

    def __getitem__(self, name: str) -> Function:
        fn = self.extra.get(name)
        return self.base[name] if fn is None else fn


class Template:
    """A compiled template: ``source`` parsed against the names in ``functions``.

    ``name`` appears in errors (``template: NAME:LINE: ...``). ``render`` raises ``TemplateError``
    for every failure; with ``lenient_calls`` a function that rejects its arguments (``TypeError``,
    ``ValueError``...) yields "" instead of failing the render.
    """

    def __init__(self, source: str, functions: Mapping[str, Function], *, name: str = "line",
                 limits: Limits = Limits(), lenient_calls: bool = False) -> None:
        self.source, self.name, self.limits = source, name, limits
        self.functions = functions
        self.lenient_calls = lenient_calls
        self._nodes = _Parser(source, frozenset(functions), name, limits).parse()

    def render(self, dot: Value, functions: Mapping[str, Function] | None = None) -> str:
        """Execute with ``dot`` as ``.`` and ``$``; ``functions`` override the table for this render."""
        return self._join(self._nodes, _Table(self.functions, functions or {}), [{"$": dot}])

    def error(self, what: str) -> TemplateError:
        return TemplateError(f"template: {self.name}:1: {what}")

    def _join(self, nodes: tuple[_Node, ...], table: _Table, scope: _Scope) -> str:
        parts: list[str] = []
        size = 0
        for n in nodes:
            text = self._run(n, table, scope)
            size += len(text)
            if size > self.limits.max_output:
                raise too_large("the template output", self.limits.max_output, self.name)
            parts.append(text)
        return "".join(parts)

    def _run(self, node: _Node, table: _Table, scope: _Scope) -> str:
        if isinstance(node, _Text):
            return node.text
        if isinstance(node, _Action):
            value = self._pipe(node.pipeline, table, scope)
            name = node.pipeline.declare
            if name:
                frame = scope[-1]
                if node.pipeline.assign:
                    frame = next(f for f in reversed(scope) if name in f)
                frame[name] = value
                return ""
            return go_str(value)
        for cond, body in node.branches:
            if truthy(self._pipe(cond, table, scope)):
                return self._join(body, table, [*scope, {}])
        return self._join(node.otherwise, table, [*scope, {}])

    def _pipe(self, pipe: _Pipeline, table: _Table, scope: _Scope) -> Value:
        value: Value = None
        for i, cmd in enumerate(pipe.commands):
            value = self._command(cmd, table, scope, value, i > 0)
        return value

    def _command(self, cmd: _Command, table: _Table, scope: _Scope, piped: Value,
                 has_piped: bool) -> Value:
        head = cmd.args[0]
        if isinstance(head, _Ident):
            args = [self._arg(a, table, scope) for a in cmd.args[1:]]
            if has_piped:
                args.append(piped)
            try:
                result = table[head.name](*args)
            except TemplateError:
                raise
            except (TypeError, ValueError, ZeroDivisionError, OverflowError, IndexError) as exc:
                if self.lenient_calls:
                    return ""
                raise self.error(f"error calling {head.name}: {exc}") from None
            if isinstance(result, str) and len(result) > self.limits.max_output:
                raise too_large(f"the value of {head.name}", self.limits.max_output, self.name)
            return result
        if len(cmd.args) > 1 or has_piped:
            raise self.error(f"can't give argument to non-function {self._describe(head)}")
        return self._arg(head, table, scope)

    def _arg(self, arg: _Arg, table: _Table, scope: _Scope) -> Value:
        if isinstance(arg, _Const):
            return arg.value
        if isinstance(arg, _Pipeline):
            return self._pipe(arg, table, scope)
        if isinstance(arg, _Ident):
            return table[arg.name]()
        name = "$" if arg.base is None else arg.base
        value = next(f[name] for f in reversed(scope) if name in f)
        for key in arg.path:
            if isinstance(value, Mapping):
                value = value.get(key, "")
            else:
                raise self.error(f"can't evaluate field {key} in type {type(value).__name__}")
        return value

    @staticmethod
    def _describe(arg: _Arg) -> str:
        if isinstance(arg, _Field):
            return (arg.base or "") + "".join("." + p for p in arg.path) or "."
        if isinstance(arg, _Const):
            return repr(arg.value)
        return "pipeline"
