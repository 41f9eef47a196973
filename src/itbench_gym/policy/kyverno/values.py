"""Scalar comparisons Kyverno applies to pattern leaves and condition operands.

Kyverno compares strings with `*`/`?` wildcards, and numbers, Kubernetes quantities and Go durations
numerically; these helpers keep that logic in one place for patterns and conditions alike.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_QUANTITY_SUFFIX = {
    None: Decimal(1),
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def wildcard_match(pattern: str, value: str) -> bool:
    """`*` matches any run of characters and `?` exactly one; everything else is literal (Kyverno's wildcard package)."""
    if "*" not in pattern and "?" not in pattern:
        return pattern == value
    return _wildcard_regex(pattern).fullmatch(value) is not None


@lru_cache(maxsize=4096)
def _wildcard_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.S)


def has_wildcard(text: str) -> bool:
    return "*" in text or "?" in text


def parse_quantity(text: Any) -> Decimal | None:
    """A Kubernetes resource quantity (`500m`, `2Gi`, `1e3`) as a number, or None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return Decimal(str(text))
    if not isinstance(text, str):
        return None
    m = _QUANTITY.match(text.strip())
    if not m:
        return None
    try:
        return Decimal(m.group(1)) * _QUANTITY_SUFFIX[m.group(2)]
    except InvalidOperation:
        return None


def parse_duration(text: Any) -> float | None:
    """A Go duration (`1h30m`, `-5s`, `300ms`, `0`) in seconds, or None; other bare numbers are not durations."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    if s == "0":
        return 0.0
    if not s:
        return None
    pos = 0
    total = 0.0
    for m in _DURATION_PART.finditer(s):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _DURATION_UNIT[m.group(2)]
        pos = m.end()
    return sign * total if pos == len(s) and pos > 0 else None


def as_number(value: Any) -> float | None:
    """Plain numbers, including numeric strings, as float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def scalar_to_string(value: Any) -> str | None:
    """How Kyverno renders a scalar resource value before a string comparison (None: not a scalar)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return value
    return None


def compare(left: Any, right: Any) -> int | None:
    """Order two operands as numbers, durations or quantities (in that order); None when they are not comparable."""
    ln, rn = as_number(left), as_number(right)
    if ln is not None and rn is not None:
        return (ln > rn) - (ln < rn)
    ld, rd = parse_duration(left), parse_duration(right)
    if ld is not None and rd is not None:
        return (ld > rd) - (ld < rd)
    lq, rq = parse_quantity(left), parse_quantity(right)
    if lq is not None and rq is not None:
        return (lq > rq) - (lq < rq)
    return None
