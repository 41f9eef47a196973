"""POSIX shell syntax, read once for the twin: the script ``kubectl exec`` runs in a container's shell
(``backends/sim/containers/shell.py``) and the command line the process model follows to know when a
container's process ends (``backends/sim/app/processes.py``).

bashlex (a port of bash's own grammar) gives the structure: lists with their ``;``/``&&``/``||``/``&``
operators, pipelines, compound commands (``if``, ``for``, ``while``, ``until``, ``{ }``), simple
commands of words, assignments and redirections. What it cannot parse is told apart: a syntax error
(:class:`ShellSyntaxError`, with the position) from a construct it does not implement
(:class:`UnsupportedSyntax`: arithmetic expansion, ``case``). The scanners find where a quoted string
or a substitution ends, for the expansion of words from their source text.
"""

from __future__ import annotations

import re
from typing import Any

import bashlex  # type: ignore[import-untyped]


class ShellSyntaxError(ValueError):
    """A script the shell would refuse to run; ``position`` is the offset bashlex stopped at."""

    def __init__(self, message: str, position: int | None) -> None:
        super().__init__(message)
        self.position = position


class UnsupportedSyntax(ValueError):
    """A construct bashlex does not parse (its name is the message)."""


def parse(script: str) -> list[Any]:
    """bashlex's nodes for ``script`` (none for one of blank lines and comments only)."""
    if not re.search(r"^[ \t]*[^#\s]", script, re.MULTILINE):
        return []
    try:
        return list(bashlex.parse(_shield(script)))
    except NotImplementedError as missing:
        text = str(missing)
        raise UnsupportedSyntax("arithmetic expansion $((...))" if "arithmetic" in text else "case" if "pattern" in text
                                else re.sub(r"type = \{(.*?)\}.*", r"\1", text, flags=re.DOTALL)) from None
    except _PARSE_ERRORS as bad:
        position = getattr(bad, "position", None)
        raise ShellSyntaxError(str(bad), position if isinstance(position, int) else None) from None


#: What bashlex raises for a script it cannot parse (its own error, and the internal errors some
#: malformed inputs reach).
_PARSE_ERRORS = (bashlex.errors.ParsingError, AssertionError, AttributeError, IndexError, TypeError)


def closing_quote(src: str, i: int) -> int:
    """The index of the ``"`` closing a double-quoted string whose text starts at ``src[i]``."""
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i
        elif c == "$" and src[i + 1:i + 2] == "{":
            i = closing_brace(src, i + 2) + 1
        elif c == "$" and src[i + 1:i + 2] == "(":
            i = closing_paren(src, i + 2) + 1
        elif c == "`":
            i = closing_backquote(src, i + 1) + 1
        else:
            i += 1
    return len(src)


def closing_paren(src: str, i: int) -> int:
    """The index of the ``)`` closing a ``$(`` whose text starts at ``src[i]``."""
    return _closing(src, i, "(", ")")


def closing_backquote(src: str, i: int) -> int:
    """The index of the backquote closing one whose text starts at ``src[i]``."""
    while i < len(src):
        if src[i] == "\\":
            i += 2
        elif src[i] == "`":
            return i
        else:
            i += 1
    return len(src)


def closing_brace(src: str, i: int) -> int:
    """The index of the ``}`` closing a ``${`` whose text starts at ``src[i]``."""
    return _closing(src, i, "${", "}")


def _closing(src: str, i: int, opening: str, closing: str) -> int:
    """The index of the ``closing`` character ending a construct whose text starts at ``src[i]``:
    quotes and escapes skipped, nested ``opening`` ones counted."""
    depth = 1
    while i < len(src):
        c = src[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            end = src.find("'", i + 1)
            i = len(src) if end < 0 else end + 1
            continue
        if c == '"':
            i = closing_quote(src, i + 1) + 1
            continue
        if c == opening[-1] and i >= len(opening) - 1 and src.startswith(opening, i - len(opening) + 1):
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(src)




def _shield(script: str) -> str:
    """``script`` with each ``${`` inside single quotes made ``_{`` (same length, so bashlex's
    positions still index the script): bashlex 0.18 loops forever on a ``${`` without ``}`` in a
    single-quoted word that also holds ``=`` or ``~``, and single-quoted text is literal anyway."""
    out = list(script)
    i, word_start = 0, True
    while i < len(script):
        c = script[i]
        if c == "\\":
            i, word_start = i + 2, False
        elif c == "#" and word_start:
            end = script.find("\n", i)
            i = len(script) if end < 0 else end
        elif c == "'":
            ansi = script[i - 1:i] == "$"
            i += 1
            while i < len(script) and script[i] != "'":
                if script.startswith("${", i):
                    out[i] = "_"
                i += 2 if ansi and script[i] == "\\" else 1
            i, word_start = i + 1, False
        elif c == '"':
            i, word_start = closing_quote(script, i + 1) + 1, False
        else:
            word_start = c in " \t\n;&|()<>"
            i += 1
    return "".join(out)
