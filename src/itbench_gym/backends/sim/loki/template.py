"""Loki's template functions for ``line_format`` and ``label_format``, on the shared Go template engine.

The engine (:mod:`itbench_gym.lang.gotemplate`) parses and runs the templates; this module holds
Loki's function table (Go's builtins, the sprig subset Loki registers, ``__line__`` and
``__timestamp__``) and Loki's limits. The data is the entry's labels (a ``map[string]string``, so
missing labels render as ""). A function that rejects its arguments yields "", as before.

Rendering is bounded: no value, and no template output, may exceed ``MAX_TEMPLATE_OUTPUT``
characters. Functions that could build a bigger value from small arguments (``repeat``,
``printf`` widths, ``alignLeft``, ``replace``, ``regexReplaceAll``...) check the size before they
allocate, and fail the render with a ``TemplateError`` instead (Loki's ``TemplateFormatErr``).
Integer functions use Go's int64 arithmetic; regexes are Go's (RE2).
"""

from __future__ import annotations

import base64
import math
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime

from itbench_gym.lang import gotemplate, regex
from itbench_gym.lang.gotemplate import TemplateError, Value
from itbench_gym.lang.gotemplate import go_str as _go_str
from itbench_gym.lang.gotemplate import num as _num
from itbench_gym.lang.gotemplate import to_int as _int
from itbench_gym.lang.gotemplate import truthy as _truthy
from itbench_gym.lang.gotemplate import wrap64 as _wrap64

from .limits import MAX_TEMPLATE_DEPTH, MAX_TEMPLATE_OUTPUT

__all__ = ["FUNCTIONS", "LIMITS", "Template", "TemplateError"]

#: Loki's bounds on one render (``max_line_size`` and the twin's nesting limit).
LIMITS = gotemplate.Limits(max_output=MAX_TEMPLATE_OUTPUT, max_depth=MAX_TEMPLATE_DEPTH)


def _too_large(what: str) -> TemplateError:
    return gotemplate.too_large(what, MAX_TEMPLATE_OUTPUT)


def _bounded(size: int, what: str) -> None:
    """Refuse to build a value of ``size`` characters beyond the render limit."""
    gotemplate.bounded(size, what, MAX_TEMPLATE_OUTPUT)


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
    **gotemplate.builtins(MAX_TEMPLATE_OUTPUT),
    "__line__": lambda: "", "__timestamp__": lambda: datetime.fromtimestamp(0, tz=UTC),
    "ToLower": lambda s: _go_str(s).lower(), "ToUpper": lambda s: _go_str(s).upper(),
    "lower": lambda s: _go_str(s).lower(), "upper": lambda s: _go_str(s).upper(),
    "title": lambda s: gotemplate.strings_title(_go_str(s)),
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
    "unixEpoch": lambda t: _unix(t, 1), "unixEpochMillis": lambda t: _unix(t, 1000), "unixEpochNanos": lambda t: _unix(t, 10**9),
    "date": lambda fmt, t: _date(_go_str(fmt), t),
    "urlencode": lambda s: urllib.parse.quote_plus(_go_str(s)), "urldecode": lambda s: urllib.parse.unquote_plus(_go_str(s)),
    "b64enc": lambda s: base64.b64encode(_go_str(s).encode()).decode(),
    "b64dec": lambda s: base64.b64decode(_go_str(s).encode() + b"===").decode(errors="replace"),
}


class Template:
    """A compiled ``line_format``/``label_format`` template over Loki's function table.

    ``render`` tolerates data it was not written for (missing labels, non-numbers), and raises
    ``TemplateError`` only when a value or the output would exceed ``MAX_TEMPLATE_OUTPUT`` or a
    function fails outright (a bad regex, a negative ``repeat``).
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self._template = gotemplate.Template(source, FUNCTIONS, name="line", limits=LIMITS, lenient_calls=True)

    def render(self, labels: dict[str, str], line: str, ts: float) -> str:
        return self._template.render(labels, {"__line__": lambda: line,
                                              "__timestamp__": lambda: datetime.fromtimestamp(ts, tz=UTC)})
