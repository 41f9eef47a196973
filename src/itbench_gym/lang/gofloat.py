"""Go's float printing (``strconv.FormatFloat`` and the ``fmt`` verbs built on it), which the
Prometheus, Loki and template outputs copy: ``NaN``, ``+Inf``/``-Inf``, then the verb's digits."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np


def _special(v: float) -> str | None:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return None


def format_f(v: float) -> str:
    """``FormatFloat(v, 'f', -1, 64)``: the shortest positional form (sample values in API JSON)."""
    return _special(v) or np.format_float_positional(v, trim="-")


def format_e(v: float) -> str:
    """``FormatFloat(v, 'e', -1, 64)``: the shortest scientific form, a two-digit exponent at least."""
    special = _special(v)
    if special:
        return special
    mant, exp = np.format_float_scientific(v, trim="-", unique=True).split("e")
    e = int(exp)
    return f"{mant}e{'+' if e >= 0 else '-'}{abs(e):02d}"


def format_g(v: float) -> str:
    """``FormatFloat(v, 'g', -1, 64)``, Go's ``%v``: ``0.5``, ``1e+06``."""
    special = _special(v)
    if special:
        return special
    if v == 0:
        return "-0" if math.copysign(1.0, v) < 0 else "0"
    sign, digits, exponent = Decimal(repr(v)).normalize().as_tuple()
    assert isinstance(exponent, int)
    ds = "".join(map(str, digits))
    exp = len(ds) + exponent - 1
    neg = "-" if sign else ""
    if exp < -4 or exp >= 6:  # the shortest form switches to %e at exponent 6, as strconv does
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp < 0:
        return f"{neg}0.{'0' * (-exp - 1)}{ds}"
    if len(ds) <= exp + 1:
        return f"{neg}{ds}{'0' * (exp + 1 - len(ds))}"
    return f"{neg}{ds[:exp + 1]}.{ds[exp + 1:]}"


def printf(v: float, spec: str) -> str:
    """Go's ``%<spec>`` of a float for a fixed-precision spec such as ``.4g`` or ``f`` (which, for
    finite values, Python formats alike)."""
    return _special(v) or format(v, spec)
