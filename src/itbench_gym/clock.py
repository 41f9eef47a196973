"""Clocks the environment and its backends share.

The twin runs on a simulated clock so episodes are deterministic and an hour of incident can be
fast-forwarded in milliseconds; the real backend runs on the wall clock. Both expose the same API.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

#: Start of simulated time (2026-01-01T00:00:00Z). Fixed so that timestamps in observations are
#: identical across runs; kubectl computes some ages (e.g. in ``describe``) from the host clock.
SIM_EPOCH = 1_767_225_600.0


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass (the simulated clock jumps; the wall clock sleeps)."""
        ...


class SimClock:
    """A monotonic simulated clock; thread-safe because API server threads read it."""

    def __init__(self, start: float = SIM_EPOCH) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot move the clock backwards by {seconds} s")
        with self._lock:
            self._now += seconds

    def set(self, t: float) -> None:
        """Jump forward to ``t``."""
        with self._lock:
            if t < self._now:
                raise ValueError(f"cannot move the clock backwards from {self._now} to {t}")
            self._now = float(t)

    def reset(self, t: float) -> None:
        """Put the clock at ``t``, earlier or later; only for restoring a snapshot of the whole twin."""
        with self._lock:
            self._now = float(t)


class WallClock:
    """The real backend's clock."""

    def now(self) -> float:
        return time.time()

    def advance(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))
