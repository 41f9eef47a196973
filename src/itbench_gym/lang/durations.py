"""Durations as the upstream systems parse and print them.

Two grammars exist upstream and both are needed:

* Prometheus' ``model.ParseDuration`` / ``Duration.String``: integer amounts of ``y w d h m s ms``
  in that order (``1h30m``, ``2w``), used by PromQL, rule files and the Prometheus and Loki HTTP APIs.
* Go's ``time.ParseDuration`` / ``Duration.String``: signed decimal amounts of ``h m s ms us µs
  ns`` in any order (``1.5h``, ``-2m3.4s``), used by Jaeger, Chaos Mesh, Kubernetes and LogQL's
  ``duration`` conversion.

and, for the processes in containers, ``sleep``'s operands (coreutils and busybox: a decimal number
with an optional ``s m h d`` suffix, or ``inf``; several are added up).

Both are computed in integer nanoseconds, as Go holds a ``time.Duration``, so limits and rounding
match upstream exactly. For display there are Kubernetes' ``HumanDuration`` /
``ShortHumanDuration`` (the ages kubectl prints) and Prometheus' ``humanizeDuration`` template
function.
"""

from __future__ import annotations

import json
import math
import re

from itbench_gym.lang.gofloat import printf

#: Go's time.Duration range: int64 nanoseconds.
MAX_NS = (1 << 63) - 1
MIN_NS = -(1 << 63)
NS_PER_S = 1_000_000_000

_PROM_UNITS = {"y": 365 * 86400 * NS_PER_S, "w": 7 * 86400 * NS_PER_S, "d": 86400 * NS_PER_S,
               "h": 3600 * NS_PER_S, "m": 60 * NS_PER_S, "s": NS_PER_S, "ms": 1_000_000}
_PROM_ORDER = tuple(_PROM_UNITS)
_GO_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000, "s": NS_PER_S,
             "m": 60 * NS_PER_S, "h": 3600 * NS_PER_S}
_DIGITS = re.compile(r"[0-9]*")
_NON_DIGITS = re.compile(r"[^0-9.]*")


class DurationError(ValueError):
    """Text that is not a duration; the message is the upstream library's."""


class DurationOverflow(DurationError):
    """A well-formed duration beyond int64 nanoseconds (about 292 years), which Go cannot hold."""


def _strconv_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``) for Prometheus' messages; printable text stays as it is."""
    return json.dumps(text, ensure_ascii=False)


def _time_quote(text: str) -> str:
    """The ``time`` package's own quoting: non-ASCII and control characters as ``\\x`` bytes."""
    out = ['"']
    for ch in text:
        if ord(ch) >= 0x80 or ch < " ":
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            out.append("\\" + ch if ch in '"\\' else ch)
    out.append('"')
    return "".join(out)


# -- Prometheus ---------------------------------------------------------------------------------


def parse_prometheus_duration_ns(text: str) -> int:
    """``model.ParseDuration``: nanoseconds in ``1y2w3d4h5m6s7ms`` (units in that order, integers)."""
    if text == "0":
        return 0
    if text == "":
        raise DurationError("empty duration string")
    invalid = DurationError(f"not a valid duration string: {_strconv_quote(text)}")
    total, pos, last = 0, 0, -1
    while pos < len(text):
        digits = _DIGITS.match(text, pos)
        assert digits is not None  # [0-9]* always matches
        if digits.end() == pos:
            raise invalid
        if len(digits.group().lstrip("0")) > 20:
            raise DurationOverflow(str(invalid))  # beyond uint64: strconv.ParseUint refuses it
        amount = int(digits.group())
        pos = digits.end()
        unit_end = pos
        while unit_end < len(text) and not text[unit_end].isdigit():
            unit_end += 1
        unit = text[pos:unit_end]
        if not unit:
            raise invalid
        if unit not in _PROM_UNITS:
            raise DurationError(f"unknown unit {_strconv_quote(unit)} in duration {_strconv_quote(text)}")
        rank = _PROM_ORDER.index(unit)
        if rank <= last:
            raise invalid  # units must go from the largest to the smallest, each at most once
        last, pos = rank, unit_end
        mult = _PROM_UNITS[unit]
        if amount > (1 << 63) // mult:
            raise DurationOverflow("duration out of range")
        total += amount * mult
        if total > MAX_NS:
            raise DurationOverflow("duration out of range")
    return total


def parse_prometheus_duration(text: str) -> float:
    """``model.ParseDuration`` in seconds."""
    return parse_prometheus_duration_ns(text) / NS_PER_S


def format_prometheus_duration(seconds: float) -> str:
    """``model.Duration.String``: whole milliseconds; years and weeks only when they divide exactly."""
    ms = int(seconds * 1000) if abs(seconds) < 1e15 else int(round(seconds)) * 1000
    if ms == 0:
        return "0s"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    out = []
    for unit, exact in (("y", True), ("w", True), ("d", False), ("h", False), ("m", False), ("s", False), ("ms", False)):
        mult = _PROM_UNITS[unit] // 1_000_000
        if exact and ms % mult:
            continue
        amount, ms = divmod(ms, mult)
        if amount:
            out.append(f"{amount}{unit}")
    return sign + "".join(out)


# -- Go -----------------------------------------------------------------------------------------


def parse_go_duration_ns(text: str) -> int:
    """``time.ParseDuration``: nanoseconds in ``[-+]`` decimal amounts with units (``1h15m30.5s``)."""
    invalid = DurationError(f"time: invalid duration {_time_quote(text)}")
    overflow = DurationOverflow(str(invalid))  # Go words an overflow as an invalid duration
    s = text
    neg = s[:1] == "-"
    if s[:1] in ("-", "+"):
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        lead = _DIGITS.match(s)
        assert lead is not None
        whole_text, s = lead.group(), s[lead.end():]
        if len(whole_text.lstrip("0")) > 20:
            raise overflow  # Go's leadingInt stops at 1<<63; never build a huge int from the text
        frac_text = ""
        if s[:1] == ".":
            frac = _DIGITS.match(s, 1)
            assert frac is not None
            frac_text, s = frac.group(), s[frac.end():]
        if not whole_text and not frac_text:
            raise invalid  # no digits at all (".s", "s")
        unit_match = _NON_DIGITS.match(s)
        assert unit_match is not None
        unit, s = unit_match.group(), s[unit_match.end():]
        if not unit:
            raise DurationError(f"time: missing unit in duration {_time_quote(text)}")
        if unit not in _GO_UNITS:
            raise DurationError(f"time: unknown unit {_time_quote(unit)} in duration {_time_quote(text)}")
        mult = _GO_UNITS[unit]
        whole = int(whole_text) if whole_text else 0
        if whole > (1 << 63) // mult:
            raise overflow
        value = whole * mult
        if frac_text:
            # Go keeps the fraction's leading digits while they fit in int64, then scales in float64.
            f, scale = 0, 1
            for ch in frac_text:
                candidate = f * 10 + int(ch)
                if f > ((1 << 63) - 1) // 10 or candidate > 1 << 63:
                    break
                f, scale = candidate, scale * 10
            value += int(float(f) * (float(mult) / float(scale)))
            if value > 1 << 63:
                raise overflow
        total += value
        if total > 1 << 63:
            raise overflow
    if neg:
        return -total
    if total > MAX_NS:
        raise overflow
    return total


def parse_go_duration(text: str) -> float:
    """``time.ParseDuration`` in seconds."""
    return parse_go_duration_ns(text) / NS_PER_S


def _fraction(value: int, precision: int) -> str:
    whole, frac = divmod(value, 10**precision)
    digits = f"{frac:0{precision}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def format_go_duration_ns(ns: int) -> str:
    """``time.Duration.String``: ``1h2m3.5s``, ``1.5µs``, ``0s``."""
    sign, u = ("-", -ns) if ns < 0 else ("", ns)
    if u < NS_PER_S:
        if u == 0:
            return "0s"
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{_fraction(u, 3)}\u00b5s"
        return f"{sign}{_fraction(u, 6)}ms"
    secs, frac = divmod(u, NS_PER_S)
    out = _fraction((secs % 60) * NS_PER_S + frac, 9) + "s"
    minutes = secs // 60
    if minutes:
        out = f"{minutes % 60}m" + out
        hours = minutes // 60
        if hours:
            out = f"{hours}h" + out
    return sign + out


def format_go_duration(seconds: float) -> str:
    """``time.Duration.String`` of a number of seconds (rounded to the nanosecond)."""
    return format_go_duration_ns(round(seconds * NS_PER_S))


_SLEEP_OPERAND = re.compile(r"(\d+\.?\d*|\.\d+)(e[-+]?\d+)?([smhd]?)|inf(inity)?", re.IGNORECASE)
_SLEEP_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def sleep_seconds(operands: list[str]) -> float:
    """Seconds ``sleep OPERAND...`` waits (``math.inf`` for ``infinity``); ValueError naming the first
    operand that is not a duration."""
    total = 0.0
    for raw in operands:
        match = _SLEEP_OPERAND.fullmatch(raw)
        if match is None:
            raise ValueError(raw)
        total += math.inf if match.group(1) is None else float(match.group(1) + (match.group(2) or "")) * _SLEEP_UNITS[match.group(3).lower()]
    return total


# -- ages and humanized durations ----------------------------------------------------------------


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``: the AGE column of ``kubectl get``, ``3m10s``, ``2d1h``."""
    s = math.trunc(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def short_human_duration(seconds: float) -> str:
    """apimachinery's ``duration.ShortHumanDuration``: one unit only (``59s``, ``1m``, ``23h``, ``2y``)."""
    s = math.trunc(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h"
    if s < 86400 * 365:
        return f"{s // 86400}d"
    return f"{s // (86400 * 365)}y"


def humanize_duration(value: float) -> str:
    """Prometheus' ``humanizeDuration`` template function: ``1d 2h 3m 4s``, ``12.35s``, ``100ms``."""
    if math.isnan(value) or math.isinf(value):
        return printf(value, '.4g')
    if value == 0:
        return f"{printf(value, '.4g')}s"
    if abs(value) >= 1:
        sign = "-" if value < 0 else ""
        v = abs(value)
        whole = int(v)
        secs, minutes, hours, days = whole % 60, whole // 60 % 60, whole // 3600 % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {secs}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {secs}s"
        if minutes:
            return f"{sign}{minutes}m {secs}s"
        return f"{sign}{printf(v, '.4g')}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(value) >= 1:
            break
        prefix = p
        value *= 1000
    return f"{printf(value, '.4g')}{prefix}s"
