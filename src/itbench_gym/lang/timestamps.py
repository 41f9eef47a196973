"""RFC 3339 timestamps and Unix times as the upstream APIs write and read them.

Each API prints its own precision, and the twin must print the same one:

* whole seconds (``2026-01-01T00:03:30Z``): Kubernetes ``metav1.Time``, Chaos Mesh records;
* fixed milliseconds (``...T00:03:30.120Z``): the times in the Loki and Jaeger tools' texts;
* fixed nanoseconds (``...T00:03:30.120000000Z``): ``kubectl logs --timestamps`` (kubelet's
  ``RFC3339NanoFixed``);
* trimmed nanoseconds (``...T00:03:30.12Z``): Go's ``time.Time`` JSON (``RFC3339Nano``), as in
  Prometheus' alert and rule APIs.

Go truncates, never rounds, when it prints fewer fraction digits than it holds; so do these. A
float time is first taken to the nearest microsecond (a float64 holds no finer detail at today's
epoch, and Python's ``datetime`` does the same), so ``1.3`` prints as ``.300`` rather than
``.299``; integer nanosecond times (:func:`rfc3339_ns`) are printed exactly.

Parsing follows Prometheus' ``parseTime`` (Unix seconds with a fraction, or RFC 3339) and Loki's
``parseTimestamp`` (a number with a point is seconds; an integer of up to 10 digits is seconds,
a longer one nanoseconds; or RFC 3339).
"""

from __future__ import annotations

import calendar
import math
import re
import time

NS_PER_S = 1_000_000_000
#: RFC 3339 as Go's ``time.RFC3339Nano`` layout parses it (fraction optional, ``Z`` or an offset).
_RFC3339 = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT = re.compile(r"[+-]?\d+")


class TimestampError(ValueError):
    """Text that is not a timestamp of the accepted forms."""


def split_ns(t: float) -> tuple[int, int]:
    """``t`` as (whole seconds, nanoseconds 0..999999999), the fraction rounded to the microsecond."""
    whole = math.floor(t)
    micros = round((t - whole) * 1_000_000)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    return int(whole), int(micros) * 1000


def _base(whole: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))


def rfc3339(t: float, digits: int = 0) -> str:
    """UTC RFC 3339 with exactly ``digits`` fraction digits (0, 3, 6 or 9), truncated as Go does."""
    whole, ns = split_ns(t)
    if digits <= 0:
        return _base(whole) + "Z"
    return f"{_base(whole)}.{ns // 10 ** (9 - digits):0{digits}d}Z"


def rfc3339_ns(ns: int, digits: int = 9) -> str:
    """:func:`rfc3339` of an integer nanosecond time (Loki entries), without float rounding."""
    whole, frac = divmod(ns, NS_PER_S)
    if digits <= 0:
        return _base(whole) + "Z"
    return f"{_base(whole)}.{frac // 10 ** (9 - digits):0{digits}d}Z"


def rfc3339_nano(t: float) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: nanoseconds with trailing zeros (and the point) trimmed."""
    whole, ns = split_ns(t)
    frac = f"{ns:09d}".rstrip("0")
    return f"{_base(whole)}{'.' + frac if frac else ''}Z"


def parse_rfc3339(text: str) -> float:
    """Seconds since the epoch in an RFC 3339 time (``Z`` or ``±hh:mm``; digits past ns ignored)."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise TimestampError(f"not an RFC 3339 time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if not (1 <= month <= 12 and 1 <= day <= calendar.monthrange(max(year, 1), month)[1]
            and hour < 24 and minute < 60 and second < 60):
        raise TimestampError(f"not an RFC 3339 time: {text!r}")
    offset = 0
    if m.group(9):
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise TimestampError(f"not an RFC 3339 time: {text!r}")
        offset = (oh * 3600 + om * 60) * (1 if m.group(9) == "+" else -1)
    whole = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) - offset
    frac = m.group(7) or ""
    return whole + (int(frac[:9].ljust(9, "0")) / NS_PER_S if frac else 0.0)


def parse_prometheus_time(text: str) -> float:
    """Prometheus' ``parseTime`` without its range checks: float Unix seconds, else RFC 3339."""
    if _FLOAT.fullmatch(text.strip()) or text.strip().lower().lstrip("+-") in ("inf", "infinity", "nan"):
        return float(text)
    return parse_rfc3339(text.strip())


def parse_loki_time(text: str) -> float:
    """Loki's ``parseTimestamp``: ``1.5`` seconds, ``1700000000`` seconds, 19 digits nanoseconds, RFC 3339."""
    s = text.strip()
    if "." in s and _FLOAT.fullmatch(s):
        return float(s)
    if _INT.fullmatch(s):
        number = int(s)
        if not -(1 << 63) <= number < 1 << 63:
            raise TimestampError(f"integer out of range: {text!r}")  # Go's strconv.ParseInt
        return float(number) if len(s) <= 10 else number / NS_PER_S
    return parse_rfc3339(s)
