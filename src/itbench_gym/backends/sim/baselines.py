"""Healthy baselines shared by every twin in the process: one build per app, any number of seeds.

Deploying ITBench's whole cluster and running its healthy baseline used to be most of what a new seed
cost, and nothing in it needs the episode's seed: a baseline is built once per (app, baseline length,
load) with ``BASELINE_SEED``, and each episode's twin restores it and reseeds (``Twin.reseed``), so
from the injection on noise, new pods' names, connection pins, chaos picks, logs and traces follow
the episode's seed. Snapshots are immutable, so twins of different envs (a vector env's threads)
share one safely; a twin restores it in milliseconds (copy on write).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from itbench_gym.backends.sim.twin import TwinSnapshot
from itbench_gym.spec.model import LoadOptions

#: The seed every shared baseline is built with.
BASELINE_SEED = 0
#: Baselines kept (least recently used dropped first): one per app and scenario environment.
CACHED_BASELINES = 4


@dataclass(frozen=True)
class BaselineKey:
    """What a healthy baseline depends on: the app's folder, how long it runs, how its load generator
    runs, whether the app was installed with its HPAs."""

    app_dir: str
    seconds: float
    load: LoadOptions
    hpa: bool = False


class BaselineCache:
    """Baseline snapshots by key, built at most once each while they stay cached."""

    def __init__(self, size: int = CACHED_BASELINES) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._snapshots: OrderedDict[BaselineKey, TwinSnapshot] = OrderedDict()

    def get(self, key: BaselineKey, build: Callable[[], TwinSnapshot]) -> TwinSnapshot:
        """The baseline of ``key``, calling ``build`` when it is not cached (one builder at a time)."""
        with self._lock:
            snap = self._snapshots.get(key)
            if snap is None:
                snap = self._snapshots[key] = build()
                while len(self._snapshots) > self._size:
                    self._snapshots.popitem(last=False)
            self._snapshots.move_to_end(key)
            return snap

    def clear(self) -> None:
        with self._lock:
            self._snapshots.clear()


#: The process' baselines.
SHARED_BASELINES = BaselineCache()
