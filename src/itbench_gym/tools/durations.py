"""How the query tools (promql, logql, traces) read their arguments: one duration parser, and text checks.

A duration is a number of seconds (``90``, ``1.5``, or the same as a string) or a duration as
Prometheus writes it (``30s``, ``1h30m``, ``2d``, ``1w``; a year is 365 days) or as Go does
(``1.5h``, ``500ms``, ``250us``): the two grammars the queried systems use, both from
:mod:`itbench_gym.lang.durations`. Signs are refused (a look-back is never negative). Whatever the agent sends, :func:`parse_duration` either returns a
finite number of seconds in range or raises ``ToolInputError`` saying what was wrong, so the times
the tools compute from it are always representable.

Text sent to an API must be encodable as UTF-8 (``tools.base.require_text``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from itbench_gym.lang import durations
from itbench_gym.tools.base import ToolInputError, require_text

#: Longest duration accepted by default: ten years, far beyond any episode's history.
MAX_SECONDS = 10 * 365 * 86400.0
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
    """Seconds in a number, a Prometheus duration or an unsigned Go duration; None if it is none of them."""
    if not text:
        return None
    if _NUMBER.fullmatch(text):
        return float(text)
    if text[0] in "+-":
        return None
    overflow = False
    for parse in (durations.parse_prometheus_duration, durations.parse_go_duration):
        try:
            return parse(text)
        except durations.DurationOverflow:
            overflow = True
        except durations.DurationError:
            pass
    return math.inf if overflow else None  # too long for either system: refused as not finite


def _describe(seconds: float) -> str:
    for unit, size in (("y", 365 * 86400.0), ("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
