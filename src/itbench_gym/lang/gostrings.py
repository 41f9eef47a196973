"""Go string literals, unquoted as PromQL, LogQL and Go templates read them.

Prometheus' lexer hands ``"..."``, ``'...'`` and raw ```...``` literals to ``strutil.Unquote``
(Go's ``strconv.Unquote``, except that a single-quoted literal may hold any number of characters);
Loki's lexer and Go's ``text/template`` use ``strconv.Unquote`` on ``"..."`` and ```...``` only,
which this function accepts identically. Escapes are Go's: ``\\a \\b \\f \\n \\r \\t \\v \\\\``,
the literal's own quote character (``\\'`` only inside '...', ``\\"`` only inside "..."), ``\\xHH``
and three-digit octal bytes, ``\\uHHHH`` and ``\\UHHHHHHHH`` code points (no surrogates).

Go strings are bytes: ``"\\xc3\\xa9"`` is ``é``. Escaped bytes are therefore collected and decoded
as UTF-8; a byte sequence that is not UTF-8 becomes U+FFFD, as Go writes it into JSON.
"""

from __future__ import annotations

_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_HEX = frozenset("0123456789abcdefABCDEF")


class UnquoteError(ValueError):
    """Not a valid Go string literal (Go's ``strconv.ErrSyntax``: ``invalid syntax``)."""

    def __init__(self) -> None:
        super().__init__("invalid syntax")


def unquote(text: str) -> str:
    """The value of a Go string literal ``text`` (quotes included); UnquoteError if it is not one."""
    if len(text) < 2 or text[0] != text[-1] or text[0] not in "\"'`":
        raise UnquoteError
    quote, body = text[0], text[1:-1]
    if quote == "`":
        if "`" in body:
            raise UnquoteError
        return body.replace("\r", "")  # Go drops carriage returns from raw strings
    if "\\" not in body:
        if quote in body or "\n" in body:
            raise UnquoteError
        return body
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            if c == quote or c == "\n":
                raise UnquoteError
            out += c.encode("utf-8", "surrogatepass")
            i += 1
            continue
        nxt = body[i + 1 : i + 2]
        if nxt in _SIMPLE:
            out += _SIMPLE[nxt].encode()
            i += 2
        elif nxt in ("'", '"'):
            if nxt != quote:
                raise UnquoteError
            out += nxt.encode()
            i += 2
        elif nxt in ("x", "u", "U"):
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or not set(digits) <= _HEX:
                raise UnquoteError
            code = int(digits, 16)
            if nxt == "x":
                out.append(code)
            else:
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise UnquoteError
                out += chr(code).encode()
            i += 2 + width
        elif nxt and nxt in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(d not in "01234567" for d in digits) or int(digits, 8) > 255:
                raise UnquoteError
            out.append(int(digits, 8))
            i += 4
        else:
            raise UnquoteError
    return out.decode("utf-8", errors="replace")
