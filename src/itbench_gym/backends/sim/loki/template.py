"""The Go ``text/template`` subset that ``line_format`` and ``label_format`` accept.

Supported: text, ``{{ pipeline }}`` actions with ``{{-``/``-}}`` trimming, fields ``.label``,
``__line__`` and ``__timestamp__``, string/number/bool literals, parenthesised pipelines, ``|``
chaining (the piped value becomes the last argument), ``if``/``else if``/``else``/``end``, and the
Loki template functions listed in ``FUNCTIONS``. Missing labels render as the empty string, as in
Loki (its template data is a ``map[string]string``).

Rendering is bounded: no value, and no template output, may exceed ``MAX_TEMPLATE_OUTPUT``
characters. Functions that could build a bigger value from small arguments (``repeat``,
``printf`` widths, ``alignLeft``, ``replace``, ``regexReplaceAll``...) check the size before they
allocate, and fail the render with a ``TemplateError`` instead (Loki's ``TemplateFormatErr``).
Integer functions use Go's int64 arithmetic; regexes are Go's (RE2).
"""

from __future__ import annotations

import base64
import json
import math
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from itbench_gym.lang import gostrings, regex

from .limits import MAX_TEMPLATE_DEPTH, MAX_TEMPLATE_OUTPUT


class TemplateError(ValueError):
    """A template that cannot be parsed or executed; worded like Go's ``template:`` errors."""


def _too_large(what: str) -> TemplateError:
    return TemplateError(f"template: line:1: {what} would exceed {MAX_TEMPLATE_OUTPUT} characters "
                         "(the twin's limit on one rendered value)")


def _bounded(size: int, what: str) -> None:
    """Refuse to build a value of ``size`` characters beyond the render limit."""
    if size > MAX_TEMPLATE_OUTPUT:
        raise _too_large(what)


Value = Any


@dataclass(frozen=True)
class _Field:
    name: str


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

_TOKEN = re.compile(r"""\s*(?:(?P<str>"(?:[^"\\]|\\.)*"|`[^`]*`)|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"""
                    r"""|(?P<field>\.[A-Za-z_][A-Za-z0-9_]*|\.)|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[|()]))""")


def _go_str(v: Value) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isinf(v):
            return "+Inf" if v > 0 else "-Inf"
        if v == int(v) and abs(v) < 1e21:
            return str(int(v))
        return repr(v)
    if isinstance(v, datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S.%f").rstrip("0").rstrip(".") + " +0000 UTC"
    if v is None:
        return ""
    return str(v)


def _truthy(v: Value) -> bool:
    if isinstance(v, (int, float)):
        return v != 0
    return bool(v)


def _num(v: Value) -> float:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v).strip())
    except ValueError:
        return 0.0


_INT64_MIN, _INT64_SPAN = -(1 << 63), 1 << 64


def _wrap64(i: int) -> int:
    """Go's int64 overflow: wrap around."""
    return (i - _INT64_MIN) % _INT64_SPAN + _INT64_MIN


def _int(v: Value) -> int:
    """sprig's ``toInt64``: out-of-range floats give Go's (amd64) ``MinInt64``, as a conversion does."""
    if isinstance(v, int) and not isinstance(v, bool):
        return _wrap64(v)
    f = _num(v)
    if not math.isfinite(f) or not -(2.0**63) <= f < 2.0**63:
        return 0 if math.isnan(f) else _INT64_MIN
    return int(f)


def _div(a: int, b: int) -> int:
    """Go's truncated int64 division (0 for a zero divisor, where Go would panic)."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return _wrap64(q if (a < 0) == (b < 0) else -q)


def _mod(a: int, b: int) -> int:
    """Go's ``%``: the remainder has the dividend's sign."""
    if b == 0:
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _add(*a: Value) -> int:
    return _wrap64(sum(_int(x) for x in a))


def _mul(*a: Value) -> int:
    out = 1
    for x in a:
        out = _wrap64(out * _int(x))
    return out


def _cmp_pair(a: Value, b: Value) -> tuple[Value, Value]:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a, b
    return _go_str(a), _go_str(b)


_PRINTF_VERB = re.compile(r"%([-+ #0]*)(\d+)?(?:\.(\d+))?([sdvfqxXteEgt%])")


def _printf(fmt: str, *args: Value) -> str:
    out, i, k = [], 0, 0
    size = 0
    for m in _PRINTF_VERB.finditer(fmt):
        out.append(fmt[i:m.start()])
        size += m.start() - i
        i = m.end()
        flags, width, prec, verb = m.groups()
        # Widths and precisions are padding Python would allocate before anything could check it.
        _bounded(size + int(width or 0) + int(prec or 0), "printf output")
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
            out.append((pyspec + "s") % _go_str(a))
        elif verb == "q":
            out.append((pyspec + "s") % json.dumps(_go_str(a)))
        elif verb == "t":
            out.append(_go_str(_truthy(a)))
        elif verb in "dxX":
            out.append((pyspec + verb) % _int(a))
        else:
            out.append((pyspec + verb) % _num(a))
        size += len(out[-1])
        _bounded(size, "printf output")
    out.append(fmt[i:])
    _bounded(size + len(out[-1]), "printf output")
    return "".join(out)


def _compile(pattern: str, func: str) -> regex.Regex:
    try:
        return regex.compile(pattern)
    except regex.RegexError as exc:
        raise TemplateError(f"template: line:1: error calling {func}: {exc}") from None


def _sub_re(pattern: str, text: str, repl: str, literal: bool) -> str:
    """sprig's ``regexReplaceAll(Literal)``: Go's ``ReplaceAllString``, built within the output bound."""
    func = "regexReplaceAllLiteral" if literal else "regexReplaceAll"
    try:
        return _compile(pattern, func).replace_all(text, repl, literal=literal, max_len=MAX_TEMPLATE_OUTPUT)
    except regex.OutputTooLarge:
        raise _too_large(f"{func} output") from None


def _count(pattern: str, text: str) -> int:
    """The number of non-overlapping matches of a Go regex."""
    return sum(1 for _ in _compile(pattern, "count").finditer(text))


def _repeat(n: Value, s: Value) -> str:
    text, count = _go_str(s), _int(n)
    if count < 0:
        raise TemplateError("template: line:1: error calling repeat: strings: negative Repeat count")
    _bounded(len(text) * count, "repeat output")
    return text * count


def _replace(s: str, old: str, new: str, n: int = -1) -> str:
    """Go's ``strings.Replace``, refusing outputs beyond the render limit before building them."""
    hits = len(s) + 1 if old == "" else s.count(old)
    if n >= 0:
        hits = min(hits, n)
    _bounded(len(s) + hits * (len(new) - len(old)), "replace output")
    return s.replace(old, new, n)


def _align(n: Value, s: Value, left: bool) -> str:
    width, text = _int(n), _go_str(s)
    _bounded(width, "alignment width")
    if width <= 0:
        return ""
    return text[:width].ljust(width) if left else text[-width:].rjust(width)


def _substr(start: Value, end: Value, s: Value) -> str:
    text, a, b = _go_str(s), _int(start), _int(end)
    if a < 0:
        return text[:b]
    if b < 0 or b > len(text):
        return text[a:]
    return text[a:b]


def _trunc(n: Value, s: Value) -> str:
    text, k = _go_str(s), _int(n)
    return text[:k] if k >= 0 else text[k:]


def _unix(v: Value, scale: int) -> int:
    if isinstance(v, datetime):
        return int(v.timestamp() * scale)
    return 0


def _date(fmt: str, v: Value) -> str:
    """Go reference-time layouts for the common fields."""
    if not isinstance(v, datetime):
        return ""
    table = [("2006", "%Y"), ("01", "%m"), ("02", "%d"), ("15", "%H"), ("04", "%M"), ("05", "%S"), ("Jan", "%b"),
             ("Mon", "%a"), ("MST", "UTC"), ("-0700", "+0000"), ("Z07:00", "Z")]
    out = fmt
    for go, py in table:
        out = out.replace(go, py)
    return v.strftime(out)


FUNCTIONS: dict[str, Callable[..., Value]] = {
    "ToLower": lambda s: _go_str(s).lower(), "ToUpper": lambda s: _go_str(s).upper(),
    "lower": lambda s: _go_str(s).lower(), "upper": lambda s: _go_str(s).upper(),
    "title": lambda s: _go_str(s).title(),
    "Replace": lambda s, old, new, n: _replace(_go_str(s), _go_str(old), _go_str(new), _int(n)),
    "replace": lambda old, new, s: _replace(_go_str(s), _go_str(old), _go_str(new)),
    "Trim": lambda s, cut: _go_str(s).strip(_go_str(cut)), "TrimLeft": lambda s, cut: _go_str(s).lstrip(_go_str(cut)),
    "TrimRight": lambda s, cut: _go_str(s).rstrip(_go_str(cut)), "TrimSpace": lambda s: _go_str(s).strip(),
    "TrimPrefix": lambda s, p: _go_str(s).removeprefix(_go_str(p)), "TrimSuffix": lambda s, p: _go_str(s).removesuffix(_go_str(p)),
    "trim": lambda s: _go_str(s).strip(), "trimAll": lambda cut, s: _go_str(s).strip(_go_str(cut)),
    "trimPrefix": lambda p, s: _go_str(s).removeprefix(_go_str(p)), "trimSuffix": lambda p, s: _go_str(s).removesuffix(_go_str(p)),
    "trunc": _trunc, "substr": _substr, "repeat": _repeat,
    "contains": lambda sub, s: _go_str(sub) in _go_str(s), "hasPrefix": lambda p, s: _go_str(s).startswith(_go_str(p)),
    "hasSuffix": lambda p, s: _go_str(s).endswith(_go_str(p)),
    "default": lambda d, v: v if _truthy(v) else d,
    "count": lambda pattern, s: _count(_go_str(pattern), _go_str(s)),
    "regexReplaceAll": lambda pattern, s, repl: _sub_re(_go_str(pattern), _go_str(s), _go_str(repl), False),
    "regexReplaceAllLiteral": lambda pattern, s, repl: _sub_re(_go_str(pattern), _go_str(s), _go_str(repl), True),
    "alignLeft": lambda n, s: _align(n, s, True), "alignRight": lambda n, s: _align(n, s, False),
    "int": _int, "float64": _num,
    "add": _add, "sub": lambda a, b: _wrap64(_int(a) - _int(b)), "mul": _mul,
    "div": lambda a, b: _div(_int(a), _int(b)), "mod": lambda a, b: _mod(_int(a), _int(b)),
    "addf": lambda *a: sum(_num(x) for x in a), "subf": lambda a, b: _num(a) - _num(b), "mulf": lambda *a: math.prod(_num(x) for x in a),
    "divf": lambda a, b: _num(a) / _num(b) if _num(b) else math.inf, "max": lambda *a: max(_int(x) for x in a),
    "min": lambda *a: min(_int(x) for x in a), "maxf": lambda *a: max(_num(x) for x in a), "minf": lambda *a: min(_num(x) for x in a),
    "ceil": lambda v: float(math.ceil(_num(v))), "floor": lambda v: float(math.floor(_num(v))), "round": lambda v, p=0: round(_num(v), _int(p)),
    "printf": lambda fmt, *a: _printf(_go_str(fmt), *a),
    "eq": lambda a, *bs: any(x == y for x, y in (_cmp_pair(a, b) for b in bs)),
    "ne": lambda a, b: (lambda x, y: x != y)(*_cmp_pair(a, b)), "lt": lambda a, b: (lambda x, y: x < y)(*_cmp_pair(a, b)),
    "le": lambda a, b: (lambda x, y: x <= y)(*_cmp_pair(a, b)), "gt": lambda a, b: (lambda x, y: x > y)(*_cmp_pair(a, b)),
    "ge": lambda a, b: (lambda x, y: x >= y)(*_cmp_pair(a, b)),
    "and": lambda *a: next((x for x in a if not _truthy(x)), a[-1]), "or": lambda *a: next((x for x in a if _truthy(x)), a[-1]),
    "not": lambda a: not _truthy(a), "len": lambda s: len(_go_str(s)),
    "unixEpoch": lambda t: _unix(t, 1), "unixEpochMillis": lambda t: _unix(t, 1000), "unixEpochNanos": lambda t: _unix(t, 10**9),
    "date": lambda fmt, t: _date(_go_str(fmt), t),
    "urlencode": lambda s: urllib.parse.quote_plus(_go_str(s)), "urldecode": lambda s: urllib.parse.unquote_plus(_go_str(s)),
    "b64enc": lambda s: base64.b64encode(_go_str(s).encode()).decode(),
    "b64dec": lambda s: base64.b64decode(_go_str(s).encode() + b"===").decode(errors="replace"),
}


def _unquote(text: str) -> str:
    """A string constant's value: Go templates unquote them with ``strconv.Unquote``."""
    try:
        return gostrings.unquote(text)
    except gostrings.UnquoteError:
        raise TemplateError(f"template: line:1: malformed string constant {text}") from None


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def parse(self) -> tuple[_Node, ...]:
        items = self._items()
        nodes, rest, end = self._nodes(items, 0, 0)
        if end is not None:
            raise TemplateError(f"template: line:1: unexpected {{{{{end}}}}}")
        return nodes

    def _items(self) -> list[tuple[str, str]]:
        """Text and action bodies in order, with ``{{-``/``-}}`` trimming applied (a linear scan)."""
        source = self.source
        items: list[tuple[str, str]] = []
        pos = 0
        pending_trim = False
        while True:
            open_at = source.find("{{", pos)
            if open_at < 0:
                break
            close_at = source.find("}}", open_at + 2)
            if close_at < 0:
                raise TemplateError("template: line:1: unclosed action")
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
            items.append(("text", text))
            items.append(("action", body.strip()))
            pending_trim = trim_right
            pos = close_at + 2
        tail = source[pos:]
        items.append(("text", tail.lstrip() if pending_trim else tail))
        return items

    def _nodes(self, items: list[tuple[str, str]], i: int, depth: int) -> tuple[tuple[_Node, ...], int, str | None]:
        if depth > MAX_TEMPLATE_DEPTH:
            raise TemplateError("template: line:1: max expression depth exceeded")
        out: list[_Node] = []
        while i < len(items):
            kind, body = items[i]
            i += 1
            if kind == "text":
                if body:
                    out.append(_Text(body))
                continue
            word = body.split(None, 1)[0] if body else ""
            if word in ("end", "else"):
                return tuple(out), i, body
            if word == "if":
                node, i = self._if(items, i, body[2:].strip(), depth + 1)
                out.append(node)
                continue
            if word in ("range", "with", "define", "template", "block"):
                raise TemplateError(f"template: line:1: {{{{{word}}}}} is not supported by the twin's templates")
            if body.startswith("/*"):
                continue
            out.append(_Action(self._pipeline(body)))
        return tuple(out), i, None

    def _if(self, items: list[tuple[str, str]], i: int, cond: str, depth: int) -> tuple[_If, int]:
        branches: list[tuple[_Pipeline, tuple[_Node, ...]]] = []
        while True:
            body, i, end = self._nodes(items, i, depth)
            branches.append((self._pipeline(cond), body))
            if end is None:
                raise TemplateError("template: line:1: unexpected EOF in if")
            if end == "end":
                return _If(tuple(branches), ()), i
            rest = end[4:].strip()
            if rest.startswith("if "):
                cond = rest[3:].strip()
                continue
            otherwise, i, end = self._nodes(items, i, depth)
            if end != "end":
                raise TemplateError("template: line:1: expected {{end}} after {{else}}")
            return _If(tuple(branches), otherwise), i

    def _pipeline(self, text: str) -> _Pipeline:
        tokens = self._tokens(text)
        pipe, pos = self._parse_pipeline(tokens, 0, 0)
        if pos != len(tokens):
            raise TemplateError(f"template: line:1: unexpected {tokens[pos][1]!r} in command")
        return pipe

    def _tokens(self, text: str) -> list[tuple[str, str]]:
        out, pos = [], 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise TemplateError(f"template: line:1: unexpected {text[pos:].strip()[:1]!r} in operand")
            kind = m.lastgroup or ""
            out.append((kind, m.group(kind)))
            pos = m.end()
        return out

    def _parse_pipeline(self, tokens: list[tuple[str, str]], pos: int, depth: int) -> tuple[_Pipeline, int]:
        if depth > MAX_TEMPLATE_DEPTH:
            raise TemplateError("template: line:1: max expression depth exceeded")
        commands: list[_Command] = []
        args: list[_Arg] = []
        while pos < len(tokens):
            kind, value = tokens[pos]
            if kind == "punct" and value == ")":
                break
            pos += 1
            if kind == "punct" and value == "|":
                if not args:
                    raise TemplateError("template: line:1: missing value for command")
                commands.append(_Command(tuple(args)))
                args = []
            elif kind == "punct" and value == "(":
                inner, pos = self._parse_pipeline(tokens, pos, depth + 1)
                if pos >= len(tokens) or tokens[pos][1] != ")":
                    raise TemplateError("template: line:1: unclosed left paren")
                pos += 1
                args.append(inner)
            elif kind == "str":
                args.append(_Const(_unquote(value)))
            elif kind == "num":
                args.append(_Const(float(value) if any(c in value for c in ".eE") else int(value)))
            elif kind == "field":
                args.append(_Field(value[1:]))
            elif value in ("true", "false"):
                args.append(_Const(value == "true"))
            elif value in ("__line__", "__timestamp__") or value in FUNCTIONS:
                args.append(_Ident(value))
            else:
                raise TemplateError(f'template: line:1: function "{value}" not defined')
        if not args:
            raise TemplateError("template: line:1: missing value for command")
        commands.append(_Command(tuple(args)))
        return _Pipeline(tuple(commands)), pos


class Template:
    """A compiled template.

    ``render`` tolerates data it was not written for (missing labels, non-numbers), and raises
    ``TemplateError`` only when a value or the output would exceed ``MAX_TEMPLATE_OUTPUT``.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._nodes = _Parser(source).parse()

    def render(self, labels: dict[str, str], line: str, ts: float) -> str:
        return self._join(self._nodes, (labels, line, ts))

    def _join(self, nodes: tuple[_Node, ...], env: tuple[dict[str, str], str, float]) -> str:
        parts: list[str] = []
        size = 0
        for n in nodes:
            text = self._run(n, env)
            size += len(text)
            _bounded(size, "the template output")
            parts.append(text)
        return "".join(parts)

    def _run(self, node: _Node, env: tuple[dict[str, str], str, float]) -> str:
        if isinstance(node, _Text):
            return node.text
        if isinstance(node, _Action):
            return _go_str(self._pipe(node.pipeline, env))
        for cond, body in node.branches:
            if _truthy(self._pipe(cond, env)):
                return self._join(body, env)
        return self._join(node.otherwise, env)

    def _pipe(self, pipe: _Pipeline, env: tuple[dict[str, str], str, float]) -> Value:
        value: Value = None
        for i, cmd in enumerate(pipe.commands):
            value = self._command(cmd, env, value if i else None, i > 0)
        return value

    def _command(self, cmd: _Command, env: tuple[dict[str, str], str, float], piped: Value, has_piped: bool) -> Value:
        head = cmd.args[0]
        if isinstance(head, _Ident) and head.name in FUNCTIONS:
            args = [self._arg(a, env) for a in cmd.args[1:]]
            if has_piped:
                args.append(piped)
            try:
                result = FUNCTIONS[head.name](*args)
            except TemplateError:
                raise
            except (TypeError, ValueError, ZeroDivisionError, OverflowError):
                return ""
            if isinstance(result, str):
                _bounded(len(result), f"the value of {head.name}")
            return result
        if len(cmd.args) > 1 or has_piped:
            raise TemplateError(f"template: line:1: can't give argument to non-function {self._describe(head)}")
        return self._arg(head, env)

    def _arg(self, arg: _Arg, env: tuple[dict[str, str], str, float]) -> Value:
        labels, line, ts = env
        if isinstance(arg, _Const):
            return arg.value
        if isinstance(arg, _Field):
            return labels.get(arg.name, "") if arg.name else labels
        if isinstance(arg, _Pipeline):
            return self._pipe(arg, env)
        if arg.name == "__line__":
            return line
        if arg.name == "__timestamp__":
            return datetime.fromtimestamp(ts, tz=UTC)
        return FUNCTIONS[arg.name]()

    @staticmethod
    def _describe(arg: _Arg) -> str:
        if isinstance(arg, _Field):
            return "." + arg.name
        if isinstance(arg, _Const):
            return repr(arg.value)
        return "pipeline"
