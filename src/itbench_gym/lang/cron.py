"""Cron schedules as robfig/cron v3's parser reads them.

Kubernetes' CronJob controller and validation parse with ``cron.ParseStandard``: five fields (minute,
hour, day of month, month, day of week: 0-6, names ``jan``/``sun``), ``*``/``?``, ranges, steps and
lists, and the descriptors ``@yearly`` ... ``@hourly`` and ``@every <duration>``. Chaos Mesh's
Schedule adds an optional leading seconds field (``SecondOptional``: ``seconds=True``). Errors carry
robfig's words (``end of range (99) above maximum (59): 99``). A day matches when the day of month
*and* the day of week do if either field is ``*`` (or ``?``), else when either does. A ``TZ=ZONE`` or
``CRON_TZ=ZONE`` prefix reads the fields as that IANA zone's wall clock (the CronJob controller
prefixes its ``timeZone`` so); without one they are UTC, the local time of the controllers' containers.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import zoneinfo

from .durations import DurationError, parse_go_duration_ns

#: Zone names Go's LoadLocation reads as UTC here ("" and "UTC" always; "Local" in the controllers' containers).
_UTC_NAMES = frozenset({"", "UTC", "Local"})
#: The descriptors robfig's ``parseDescriptor`` knows, as the fields they stand for.
_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
                "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_MONTHS = {name: i for i, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_DAYS = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
#: (minimum, maximum, names) of each field.
_BOUNDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}), (0, 59, {}), (0, 23, {}), (1, 31, {}), (1, 12, _MONTHS), (0, 6, _DAYS))


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A parsed schedule: the allowed values of each field, or a constant delay (``@every``)."""

    seconds: frozenset[int] = frozenset({0})
    minutes: frozenset[int] = frozenset()
    hours: frozenset[int] = frozenset()
    days: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    weekdays: frozenset[int] = frozenset()
    #: whether the day-of-month and day-of-week fields were ``*`` or ``?`` (robfig's star bit)
    any_day: bool = True
    any_weekday: bool = True
    #: ``@every``: seconds between runs, whole seconds and at least one
    every: float | None = None
    #: the IANA zone whose wall clock the fields read (None: UTC)
    zone: str | None = None

    def day_matches(self, day: _dt.datetime) -> bool:
        """robfig's ``dayMatches``: both day fields must match when either is a star, else either."""
        dom, dow = day.day in self.days, (day.weekday() + 1) % 7 in self.weekdays
        return dom and dow if self.any_day or self.any_weekday else dom or dow

    def next_after(self, after: float, limit_minutes: int = 366 * 24 * 60) -> float | None:
        """The first run strictly after ``after`` (UTC seconds), or None within ``limit_minutes``.

        Walks days, then the allowed hours and minutes of a matching day, so a schedule that never
        fires (``0 0 30 2 *``) costs a year of days, not half a million minutes.
        """
        if self.every is not None:
            return float(int(after) + self.every)
        seconds, minutes, hours = sorted(self.seconds), sorted(self.minutes), sorted(self.hours)
        start = int(after) + 1
        end = start + limit_minutes * 60
        clock = zoneinfo.ZoneInfo(self.zone) if self.zone is not None else _dt.UTC
        day = _dt.datetime.fromtimestamp(start, clock).replace(hour=0, minute=0, second=0, microsecond=0)
        while day.timestamp() < end:
            if day.month in self.months and self.day_matches(day):
                for h in hours:
                    for m in minutes:
                        minute = day.replace(hour=h, minute=m).timestamp()
                        if minute + 59 < start:
                            continue
                        for sec in seconds:
                            if minute + sec >= end:
                                return None
                            if minute + sec >= start:
                                return minute + sec
            day += _dt.timedelta(days=1)  # on the zone's wall clock: a day of 23 or 25 hours too
        return None


def parse(spec: str, *, seconds: bool = False) -> Schedule:
    """``cron.ParseStandard(spec)`` (with ``seconds``: a parser that also takes a leading seconds
    field); ValueError with robfig's message when it does not parse."""
    if not spec:
        raise ValueError("empty spec string")
    zone, spec = _zone(spec)
    schedule = _parse_fields(spec, seconds)
    return dataclasses.replace(schedule, zone=None if zone is None or zone in _UTC_NAMES else zone)


def zone_error(name: str) -> str | None:
    """What Go's ``time.LoadLocation(name)`` says of a zone it cannot load (None: it loads; ``Local``
    is the controllers' own clock, UTC)."""
    if name in _UTC_NAMES:
        return None
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name}"
    return None


def _zone(spec: str) -> tuple[str | None, str]:
    """robfig's ``TZ=``/``CRON_TZ=`` prefix: the zone and the rest of the spec."""
    if not spec.startswith(("TZ=", "CRON_TZ=")):
        return None, spec
    head, space, rest = spec.partition(" ")
    name = head.partition("=")[2]
    if not space:
        raise ValueError(f"provided bad location {name}: no schedule follows the time zone")
    problem = zone_error(name)
    if problem is not None:
        raise ValueError(f"provided bad location {name}: {problem}")
    return name, rest.strip()


def _parse_fields(spec: str, seconds: bool) -> Schedule:
    if spec.startswith("@"):
        return _descriptor(spec)
    fields = spec.split()
    if seconds and len(fields) not in (5, 6):
        raise ValueError(f"expected 5 to 6 fields, found {len(fields)}: [{' '.join(fields)}]")
    if not seconds and len(fields) != 5:
        raise ValueError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    if len(fields) == 5:
        fields = ["0", *fields]
    (secs, _), (minutes, _), (hours, _), (days, any_day), (months, _), (weekdays, any_weekday) = (
        _field(text, bounds) for text, bounds in zip(fields, _BOUNDS, strict=True))
    return Schedule(secs, minutes, hours, days, months, weekdays, any_day=any_day, any_weekday=any_weekday)


def _descriptor(spec: str) -> Schedule:
    if spec in _DESCRIPTORS:
        return parse(_DESCRIPTORS[spec])
    if spec.startswith("@every "):
        text = spec[len("@every "):]
        try:
            ns = parse_go_duration_ns(text)
        except DurationError as e:
            raise ValueError(f"failed to parse duration {spec}: {e}") from None
        # robfig's Every: at least a second, truncated to whole seconds
        return Schedule(every=float(max(ns, 10**9) // 10**9))
    raise ValueError(f"unrecognized descriptor: {spec}")


def _field(text: str, bounds: tuple[int, int, dict[str, int]]) -> tuple[frozenset[int], bool]:
    """``getField``: the values a comma-separated field allows, and whether it was a bare star."""
    values: set[int] = set()
    star = False
    for expr in [e for e in text.split(",") if e]:
        more, is_star = _range(expr, bounds)
        values |= more
        star = star or is_star
    return frozenset(values), star


def _range(expr: str, bounds: tuple[int, int, dict[str, int]]) -> tuple[set[int], bool]:
    """``getRange``: ``*``, ``N``, ``N-M``, each with an optional ``/step``."""
    lo, hi, names = bounds
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    star = low_and_high[0] in ("*", "?")
    if star:
        start, end = lo, hi
    else:
        start = _int_or_name(low_and_high[0], names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], names)
        else:
            raise ValueError(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _int(range_and_step[1])
        if len(low_and_high) == 1:
            end = hi  # "N/step" means "N-max/step"
        star = star and step <= 1
    else:
        raise ValueError(f"too many slashes: {expr}")
    if start < lo:
        raise ValueError(f"beginning of range ({start}) below minimum ({lo}): {expr}")
    if end > hi:
        raise ValueError(f"end of range ({end}) above maximum ({hi}): {expr}")
    if start > end:
        raise ValueError(f"beginning of range ({start}) beyond end of range ({end}): {expr}")
    if step == 0:
        raise ValueError(f"step of range should be a positive number: {expr}")
    return set(range(start, end + 1, step)), star


def _int_or_name(expr: str, names: dict[str, int]) -> int:
    return names[expr.lower()] if expr.lower() in names else _int(expr)


def _int(expr: str) -> int:
    """``mustParseInt``: strconv.Atoi's decimal, not negative."""
    body = expr[1:] if expr[:1] in "+-" else expr
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(f'failed to parse int from {expr}: strconv.Atoi: parsing "{expr}": invalid syntax')
    num = int(expr)
    if num < 0:
        raise ValueError(f"negative number ({num}) not allowed: {expr}")
    return num
