"""``environment.load.shape``: how many users the load generator runs over time.

A shape is the scenario's data for a Locust ``LoadTestShape`` (the app ships the Locust program,
which reads these values as JSON). The same values drive the twin's generator, so the functions
here are the meaning of the field: what Locust's ``tick()`` returns at each run time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Seconds between Locust's calls of ``tick()`` (its shape worker sleeps 1 s between them).
TICK_SECONDS = 1.0


@dataclass(frozen=True)
class LoadStep:
    """From ``at`` seconds after the generator started, ``users`` users, started or stopped at
    ``spawn_rate`` a second (None: the generator's own, Locust's ``-r``)."""

    at: float
    users: int
    spawn_rate: float | None = None


@dataclass(frozen=True)
class StepsShape:
    """Users constant between steps: a surge is a step up and a step back down."""

    steps: tuple[LoadStep, ...]

    def tick(self, run_time: float) -> tuple[int, float | None]:
        step = next(s for s in reversed(self.steps) if s.at <= run_time)
        return step.users, step.spawn_rate


    def document(self) -> dict[str, Any]:
        return {"kind": "steps", "steps": [_drop_none({"at": s.at, "users": s.users, "spawn_rate": s.spawn_rate}) for s in self.steps]}


@dataclass(frozen=True)
class DailyShape:
    """A day's cycle: ``max_users`` at ``peak_at`` seconds into each period, ``min_users`` half a period
    later, a cosine between them."""

    min_users: int
    max_users: int
    peak_at: float = 0.0
    period: float = 86400.0
    spawn_rate: float | None = None

    def tick(self, run_time: float) -> tuple[int, float | None]:
        phase = 2.0 * math.pi * (run_time - self.peak_at) / self.period
        # Locust takes a whole number of users; Python's round, as the Locust program computes it
        users = round(self.min_users + (self.max_users - self.min_users) * (1.0 + math.cos(phase)) / 2.0)
        return users, self.spawn_rate


    def document(self) -> dict[str, Any]:
        return _drop_none({"kind": "daily", "min_users": self.min_users, "max_users": self.max_users, "peak_at": self.peak_at,
                           "period": self.period, "spawn_rate": self.spawn_rate})


#: A shape with a schedule (``steady``, the generator's constant users, is no shape: None).
LoadShape = StepsShape | DailyShape


def _drop_none(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if v is not None}


def _rate(value: Any) -> float | None:
    return None if value is None else float(value)


def parse_shape(doc: Mapping[str, Any] | None) -> LoadShape | None:
    """The shape a schema-valid ``environment.load.shape`` (or the JSON the Locust program reads)
    describes; None for ``steady`` or no shape."""
    if doc is None or doc["kind"] == "steady":
        return None
    if doc["kind"] == "steps":
        return StepsShape(tuple(LoadStep(float(s["at"]), int(s["users"]), _rate(s.get("spawn_rate"))) for s in doc["steps"]))
    return DailyShape(int(doc["min_users"]), int(doc["max_users"]), float(doc.get("peak_at", 0.0)),
                      float(doc.get("period", 86400.0)), _rate(doc.get("spawn_rate")))


def shape_problems(doc: Mapping[str, Any], where: str) -> list[tuple[str, str]]:
    """What the schema cannot say about a schema-valid shape at field path ``where`` (empty: the
    shape is the document): steps in time order from the start, a daily range the right way round
    and a peak inside the period."""
    out: list[tuple[str, str]] = []
    prefix = f"{where}." if where else ""
    if doc["kind"] == "steps":
        steps = doc["steps"]
        if steps[0]["at"] != 0:
            out.append((f"{prefix}steps[0].at", f"{steps[0]['at']!r}: the first step must be at 0 (the users from the start)"))
        for i in range(1, len(steps)):
            if steps[i]["at"] <= steps[i - 1]["at"]:
                out.append((f"{prefix}steps[{i}].at",
                            f"{steps[i]['at']!r}: steps must be in increasing time order (steps[{i - 1}].at is {steps[i - 1]['at']!r})"))
    elif doc["kind"] == "daily":
        if doc["min_users"] > doc["max_users"]:
            out.append((f"{prefix}min_users", f"{doc['min_users']!r} is more than max_users ({doc['max_users']!r})"))
        period = doc.get("period", 86400.0)
        if doc.get("peak_at", 0.0) >= period:
            out.append((f"{prefix}peak_at", f"{doc['peak_at']!r}: must be within the period ({period!r} s)"))
    return out


def run_ticks(shape: LoadShape, since: float, until: float) -> list[tuple[float, int, float | None]]:
    """Locust's ``tick()`` calls whose values hold during ``since``..``until`` seconds of run time:
    (run time of the call, users, spawn rate), the first one the call in force at ``since``."""
    first = math.floor(max(since, 0.0) / TICK_SECONDS) * TICK_SECONDS
    out: list[tuple[float, int, float | None]] = []
    t = first
    while t < until:
        users, rate = shape.tick(t)
        if not out or (users, rate) != out[-1][1:]:
            out.append((t, users, rate))
        t += TICK_SECONDS
    return out
