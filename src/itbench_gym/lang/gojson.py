"""JSON as Go's ``encoding/json`` marshals values decoded from JSON into ``interface{}``, and how it
decodes a ``[]byte`` field (standard base64).

Go servers the twin stands in for (flagd's OFREP answers) write their JSON this way: compact, HTML-safe
(``<``, ``>``, ``&`` and U+2028/U+2029 escaped), control characters other than ``\\b``, ``\\f``,
``\\n``, ``\\r`` and ``\\t`` as ``\\u00XX`` (Go 1.22 on), and every number a float64 (``1`` for ``1.0``, ``1e+21`` and ``1e-7`` at the
ends of the range). Objects keep the order they are given in: a Go struct's fields come in their
declared order, a map's keys sorted (:func:`sorted_maps` sorts every dict of a decoded document).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

#: Characters Go's encoder writes as escapes besides ``"`` and ``\\`` (encoding/json encode.go).
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f", "<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
            "\u2028": "\\u2028", "\u2029": "\\u2029", '"': '\\"', "\\": "\\\\"}


class UnsupportedValue(ValueError):
    """A value Go's encoder refuses (a NaN or an infinity: ``json: unsupported value``)."""


def marshal(value: Any) -> str:
    """``json.Marshal(value)``'s text for a value decoded from JSON (dicts, lists, strings, numbers, bools, None)."""
    out: list[str] = []
    _encode(value, out)
    return "".join(out)


def sorted_maps(value: Any) -> Any:
    """``value`` with every dict's keys in Go's map order (sorted), for values Go holds as maps."""
    if isinstance(value, Mapping):
        return {k: sorted_maps(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_maps(v) for v in value]
    return value


def _encode(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True or value is False:
        out.append("true" if value else "false")
    elif isinstance(value, (int, float)):
        out.append(_number(float(value)))
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, Mapping):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            out.append(("," if i else "") + _string(str(k)) + ":")
            _encode(v, out)
        out.append("}")
    elif isinstance(value, Sequence):
        out.append("[")
        for i, v in enumerate(value):
            if i:
                out.append(",")
            _encode(v, out)
        out.append("]")
    else:
        raise TypeError(f"json: unsupported type: {type(value).__name__}")


def _number(f: float) -> str:
    """A float64 as encoding/json's floatEncoder writes it: shortest digits, positional within
    [1e-6, 1e21), else exponent form with a one-digit negative exponent unpadded."""
    if math.isnan(f) or math.isinf(f):
        raise UnsupportedValue(f"json: unsupported value: {f}")
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        mantissa, exponent = repr(f).split("e")
        sign, digits = exponent[0], exponent[1:].lstrip("0")
        return f"{mantissa}e{sign}{digits.rjust(2, '0') if sign == '+' else digits}"
    text = format(Decimal(repr(f)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _string(s: str) -> str:
    chars = []
    for ch in s:
        escaped = _ESCAPES.get(ch)
        if escaped is not None:
            chars.append(escaped)
        elif ch < " " or 0xD800 <= ord(ch) <= 0xDFFF:
            # control characters as \u00XX; a lone surrogate is not valid UTF-8, which Go replaces
            chars.append(f"\\u{ord(ch):04x}" if ch < " " else "\ufffd")
        else:
            chars.append(ch)
    return '"' + "".join(chars) + '"'


_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def base64_error(text: str) -> int | None:
    """Where ``base64.StdEncoding`` stops decoding ``text`` (Go's ``CorruptInputError``: the byte offset
    of ``illegal base64 data at input byte N``), or None when it decodes. As Go's ``decodeQuantum``:
    newlines are skipped, a quantum ends in ``=`` or ``==`` padding only at the end of the input, and a
    quantum cut short needs its padding."""
    src = text.encode("utf-8", "surrogateescape")
    si = 0
    while si < len(src):
        j = 0
        while j < 4:
            if si == len(src):
                return None if j == 0 else si - j
            c = src[si]
            si += 1
            if c in _BASE64:
                j += 1
                continue
            if c in b"\r\n":
                continue
            if c != ord("=") or j < 2:
                return si - 1
            if j == 2:  # "==" expected, the first "=" consumed
                while si < len(src) and src[si] in b"\r\n":
                    si += 1
                if si == len(src):
                    return len(src)
                if src[si] != ord("="):
                    return si - 1
                si += 1
            while si < len(src) and src[si] in b"\r\n":
                si += 1
            return si if si < len(src) else None
    return None
