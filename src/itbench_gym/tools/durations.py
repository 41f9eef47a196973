"""How the query tools (promql, logql, traces) read their arguments: one duration parser, and text checks.

A duration is a number of seconds (``90``, ``1.5``, or the same as a string) or amounts with units
``ms s m h d w y`` (``30s``, ``15m``, ``1h30m``, ``1.5h``, ``2d``; a year is 365 days), as Prometheus
and Jaeger users write them. Whatever the agent sends, :func:`parse_duration` either returns a
finite number of seconds in range or raises ``ToolInputError`` saying what was wrong, so the times
the tools compute from it are always representable.

Text sent to an API must be encodable as UTF-8 (``tools.base.require_text``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from itbench_gym.tools.base import ToolInputError, require_text

#: Longest duration accepted by default: ten years, far beyond any episode's history.
MAX_SECONDS = 10 * 365 * 86400.0
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d|w|y)")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_EXAMPLES = "use e.g. 30s, 15m, 1h30m or 2d"


def shown(value: Any) -> str:
    """``value`` for an error message: its repr cut to a readable length (never raises)."""
    try:
        text = repr(value)
    except ValueError:  # ints beyond Python's digit limit refuse str()
        return f"a {type(value).__name__} too large to print"
    return text if len(text) <= 60 else text[:57] + "..."


def parse_duration(value: Any, name: str, *, maximum: float = MAX_SECONDS, positive: bool = True) -> float:
    """Seconds in ``value`` (see the module docstring); ToolInputError if it is not a usable duration.

    ``positive`` refuses zero; negative durations are always refused.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ToolInputError(f"{name} must be a duration string such as 15m, got {type(value).__name__}")
    if isinstance(value, str):
        text = require_text(value, name).strip()
        seconds = _seconds(text)
        if seconds is None:
            raise ToolInputError(f"bad {name} {shown(value)}; {_EXAMPLES}")
    elif isinstance(value, int) and not -maximum <= value <= maximum:
        seconds = math.inf if value > 0 else -math.inf  # too big for float(); refused just below
    else:
        seconds = float(value)
    if math.isnan(seconds) or (math.isinf(seconds) and not isinstance(value, int)):
        raise ToolInputError(f"{name} must be a finite duration, got {shown(value)}; {_EXAMPLES}")
    if seconds < 0 or (positive and seconds == 0):
        raise ToolInputError(f"{name} must be positive, got {shown(value)}")
    if seconds > maximum:
        raise ToolInputError(f"{name} {shown(value)} is too long; the most accepted is {_describe(maximum)}")
    return seconds


def count(n: float) -> str:
    """A (possibly astronomical) number of points, readable: 12,345 or 1.8e+303."""
    return f"{n:,.0f}" if n < 1e15 else f"{n:.3g}"


def _seconds(text: str) -> float | None:
    """Seconds in a number or a sequence of amounts with units, or None (a linear scan)."""
    if not text:
        return None
    if _NUMBER.fullmatch(text):
        return float(text)
    total, pos = 0.0, 0
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return total


def _describe(seconds: float) -> str:
    for unit, size in (("y", _UNITS["y"]), ("d", _UNITS["d"]), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
