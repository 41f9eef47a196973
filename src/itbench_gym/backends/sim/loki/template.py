"""The Go ``text/template`` subset that ``line_format`` and ``label_format`` accept.

Supported: text, ``{{ pipeline }}`` actions with ``{{-``/``-}}`` trimming, fields ``.label``,
``__line__`` and ``__timestamp__``, string/number/bool literals, parenthesised pipelines, ``|``
chaining (the piped value becomes the last argument), ``if``/``else if``/``else``/``end``, and the
Loki template functions listed in ``FUNCTIONS``. Missing labels render as the empty string, as in
Loki (its template data is a ``map[string]string``).
"""

from __future__ import annotations

import base64
import json
import math
import re
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Union


class TemplateError(ValueError):
    """A template that cannot be parsed or executed; worded like Go's ``template:`` errors."""


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
    args: tuple["_Arg", ...]


@dataclass(frozen=True)
class _Pipeline:
    commands: tuple[_Command, ...]


_Arg = Union[_Field, _Const, _Ident, _Pipeline]


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Action:
    pipeline: _Pipeline


@dataclass(frozen=True)
class _If:
    branches: tuple[tuple[_Pipeline, tuple["_Node", ...]], ...]
    otherwise: tuple["_Node", ...]


_Node = Union[_Text, _Action, _If]

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)
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


def _int(v: Value) -> int:
    f = _num(v)
    return int(f) if math.isfinite(f) else 0


def _cmp_pair(a: Value, b: Value) -> tuple[Value, Value]:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a, b
    return _go_str(a), _go_str(b)


def _printf(fmt: str, *args: Value) -> str:
    out, i, k = [], 0, 0
    spec = re.compile(r"%([-+ #0]*)(\d+)?(?:\.(\d+))?([sdvfqxXteEgt%])")
    for m in spec.finditer(fmt):
        out.append(fmt[i:m.start()])
        i = m.end()
        flags, width, prec, verb = m.groups()
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
    out.append(fmt[i:])
    return "".join(out)


def _sub_re(pattern: str, text: str, repl: str, literal: bool) -> str:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise TemplateError(f"error calling regexReplaceAll: {exc}") from None
    if literal:
        return rx.sub(lambda _m: repl, text)
    return rx.sub(re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", repl), text)


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
    "Replace": lambda s, old, new, n: _go_str(s).replace(_go_str(old), _go_str(new), _int(n)),
    "replace": lambda old, new, s: _go_str(s).replace(_go_str(old), _go_str(new)),
    "Trim": lambda s, cut: _go_str(s).strip(_go_str(cut)), "TrimLeft": lambda s, cut: _go_str(s).lstrip(_go_str(cut)),
    "TrimRight": lambda s, cut: _go_str(s).rstrip(_go_str(cut)), "TrimSpace": lambda s: _go_str(s).strip(),
    "TrimPrefix": lambda s, p: _go_str(s).removeprefix(_go_str(p)), "TrimSuffix": lambda s, p: _go_str(s).removesuffix(_go_str(p)),
    "trim": lambda s: _go_str(s).strip(), "trimAll": lambda cut, s: _go_str(s).strip(_go_str(cut)),
    "trimPrefix": lambda p, s: _go_str(s).removeprefix(_go_str(p)), "trimSuffix": lambda p, s: _go_str(s).removesuffix(_go_str(p)),
    "trunc": _trunc, "substr": _substr, "repeat": lambda n, s: _go_str(s) * max(_int(n), 0),
    "contains": lambda sub, s: _go_str(sub) in _go_str(s), "hasPrefix": lambda p, s: _go_str(s).startswith(_go_str(p)),
    "hasSuffix": lambda p, s: _go_str(s).endswith(_go_str(p)),
    "default": lambda d, v: v if _truthy(v) else d,
    "count": lambda pattern, s: len(re.findall(_go_str(pattern), _go_str(s))),
    "regexReplaceAll": lambda pattern, s, repl: _sub_re(_go_str(pattern), _go_str(s), _go_str(repl), False),
    "regexReplaceAllLiteral": lambda pattern, s, repl: _sub_re(_go_str(pattern), _go_str(s), _go_str(repl), True),
    "alignLeft": lambda n, s: _go_str(s)[:_int(n)].ljust(_int(n)), "alignRight": lambda n, s: _go_str(s)[-_int(n):].rjust(_int(n)),
    "int": _int, "float64": _num,
    "add": lambda *a: sum(_int(x) for x in a), "sub": lambda a, b: _int(a) - _int(b), "mul": lambda *a: math.prod(_int(x) for x in a),
    "div": lambda a, b: int(_int(a) / _int(b)) if _int(b) else 0, "mod": lambda a, b: _int(a) % _int(b) if _int(b) else 0,
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
    if text.startswith("`"):
        return text[1:-1]
    return json.loads(text)


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source

    def parse(self) -> tuple[_Node, ...]:
        items: list[tuple[str, str]] = []
        pos = 0
        pending_trim = False
        for m in _ACTION.finditer(self.source):
            text = self.source[pos:m.start()]
            if pending_trim:
                text = text.lstrip()
            if m.group(1):
                text = text.rstrip()
            items.append(("text", text))
            items.append(("action", m.group(2).strip()))
            pending_trim = bool(m.group(3))
            pos = m.end()
        tail = self.source[pos:]
        if "{{" in tail:
            raise TemplateError("template: line:1: unclosed action")
        items.append(("text", tail.lstrip() if pending_trim else tail))
        nodes, rest, end = self._nodes(items, 0)
        if end is not None:
            raise TemplateError(f"template: line:1: unexpected {{{{{end}}}}}")
        return nodes

    def _nodes(self, items: list[tuple[str, str]], i: int) -> tuple[tuple[_Node, ...], int, str | None]:
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
                node, i = self._if(items, i, body[2:].strip())
                out.append(node)
                continue
            if word in ("range", "with", "define", "template", "block"):
                raise TemplateError(f"template: line:1: {{{{{word}}}}} is not supported by the twin's templates")
            if body.startswith("/*"):
                continue
            out.append(_Action(self._pipeline(body)))
        return tuple(out), i, None

    def _if(self, items: list[tuple[str, str]], i: int, cond: str) -> tuple[_If, int]:
        branches: list[tuple[_Pipeline, tuple[_Node, ...]]] = []
        while True:
            body, i, end = self._nodes(items, i)
            branches.append((self._pipeline(cond), body))
            if end is None:
                raise TemplateError("template: line:1: unexpected EOF in if")
            if end == "end":
                return _If(tuple(branches), ()), i
            rest = end[4:].strip()
            if rest.startswith("if "):
                cond = rest[3:].strip()
                continue
            otherwise, i, end = self._nodes(items, i)
            if end != "end":
                raise TemplateError("template: line:1: expected {{end}} after {{else}}")
            return _If(tuple(branches), otherwise), i

    def _pipeline(self, text: str) -> _Pipeline:
        tokens = self._tokens(text)
        pipe, pos = self._parse_pipeline(tokens, 0)
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

    def _parse_pipeline(self, tokens: list[tuple[str, str]], pos: int) -> tuple[_Pipeline, int]:
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
                inner, pos = self._parse_pipeline(tokens, pos)
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
    """A compiled template; ``render`` never raises for data it was not written for."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._nodes = _Parser(source).parse()

    def render(self, labels: dict[str, str], line: str, ts: float) -> str:
        env = (labels, line, ts)
        return "".join(self._run(n, env) for n in self._nodes)

    def _run(self, node: _Node, env: tuple[dict[str, str], str, float]) -> str:
        if isinstance(node, _Text):
            return node.text
        if isinstance(node, _Action):
            return _go_str(self._pipe(node.pipeline, env))
        for cond, body in node.branches:
            if _truthy(self._pipe(cond, env)):
                return "".join(self._run(n, env) for n in body)
        return "".join(self._run(n, env) for n in node.otherwise)

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
                return FUNCTIONS[head.name](*args)
            except TypeError:
                return ""
            except (ValueError, ZeroDivisionError, OverflowError, re.error):
                return ""
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
            return datetime.fromtimestamp(ts, tz=timezone.utc)
        return FUNCTIONS[arg.name]()

    @staticmethod
    def _describe(arg: _Arg) -> str:
        if isinstance(arg, _Field):
            return "." + arg.name
        if isinstance(arg, _Const):
            return repr(arg.value)
        return "pipeline"
