"""Incidents shared by every twin in the process: a (scenario, seed) set up once replays in any env.

A task's incident (its faults injected, its alerts waited for) is the twin's state at that moment plus
the task's record of it. Both are immutable: a :class:`~itbench_gym.backends.sim.twin.TwinSnapshot` (or a cluster-only twin's)
restores copy-on-write into any twin of the same app, as a shared baseline does. So a vector env's other
copies, a second env in a notebook or a batch worker's next episode reset a seed the process has already
set up in milliseconds instead of injecting it again. Keys name the apps' folder and the task's key,
which covers every field of the spec and the seed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from itbench_gym.backends.sim.clustertwin import AnySnapshot
from itbench_gym.spec import ScenarioSpec

#: Incidents kept (least recently used dropped first): a vector env's copies and gymnasium's env checker
#: (seeded and unseeded resets in turn) replay theirs. Each holds its own copy of the series written since
#: the baseline, ~35 MB for the Astronomy Shop.
CACHED_INCIDENTS = 8


@dataclass(frozen=True)
class SavedIncident:
    """The scenario served, the twin's state when its incident began, and the task's record of it."""

    spec: ScenarioSpec
    snapshot: AnySnapshot
    record: object


class IncidentCache:
    """Saved incidents by key, least recently used dropped first; thread-safe (a vector env's threads)."""

    def __init__(self, size: int = CACHED_INCIDENTS) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._saved: OrderedDict[Hashable, SavedIncident] = OrderedDict()

    def put(self, key: Hashable, saved: SavedIncident) -> None:
        with self._lock:
            self._saved[key] = saved
            self._saved.move_to_end(key)
            while len(self._saved) > self._size:
                self._saved.popitem(last=False)

    def get(self, key: Hashable) -> SavedIncident | None:
        with self._lock:
            saved = self._saved.get(key)
            if saved is not None:
                self._saved.move_to_end(key)
            return saved

    def clear(self) -> None:
        with self._lock:
            self._saved.clear()


#: The process' incidents.
SHARED_INCIDENTS = IncidentCache()
