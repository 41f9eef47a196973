"""Healthy baselines shared by every twin in the process, and by every process through a disk cache.

Deploying ITBench's whole cluster and running its healthy baseline used to be most of what a new seed
cost, and nothing in it needs the episode's seed: a baseline is built once per (app, baseline length,
load) with ``BASELINE_SEED``, and each episode's twin restores it and reseeds (``Twin.reseed``), so
from the injection on noise, new pods' names, connection pins, chaos picks, logs and traces follow
the episode's seed. Snapshots are immutable, so twins of different envs (a vector env's threads)
share one safely; a twin restores it in milliseconds (copy on write).

A batch run's worker processes, ``itbench-gym serve`` and every new notebook kernel would each build
the same baseline again (the first reset of a process: ~10 s more than a new seed). :class:`BaselineStore`
keeps them on disk instead, under a digest of everything a baseline depends on (the key, the app's
files, the package's code and data, the Python and numpy versions, the cluster CA), so a changed file never meets an
old baseline; a file lock makes concurrent processes wait for one builder.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import platform
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from filelock import FileLock

import itbench_gym
from itbench_gym.backends.sim.clustertwin import AnySnapshot, ClusterTwinSnapshot
from itbench_gym.backends.sim.kube.auth import tls_material
from itbench_gym.backends.sim.twin import TwinSnapshot
from itbench_gym.paths import cache_dir, tree_digest
from itbench_gym.spec.model import LoadOptions

#: The seed every shared baseline is built with.
BASELINE_SEED = 0
#: Baselines kept in memory (least recently used dropped first): one per app and scenario environment.
CACHED_BASELINES = 4
#: Baselines kept on disk (least recently used removed first); each is ~10 MB for the Astronomy Shop.
STORED_BASELINES = 16
_SUFFIX = ".baseline.pickle"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BaselineKey:
    """What a healthy baseline depends on: the app's folder, how long it runs, how its load generator
    runs, whether the app was installed with its HPAs and whether the cluster runs OpenCost."""

    app_dir: str
    seconds: float
    load: LoadOptions
    hpa: bool = False
    finops: bool = False
    #: what the scenario deploys on top of the healthy baseline (``Provisioning.key``; empty: nothing)
    provisioned: str = ""


@cache
def _code_digest() -> str:
    """The package's code and data, and the interpreter and numpy the snapshot's pickle depends on."""
    package = Path(itbench_gym.__file__).resolve().parent
    return f"{itbench_gym.__version__}-{platform.python_version()}-{np.__version__}-{tree_digest(package)}"


@cache
def _envs_digest(envs_root: Path) -> str:
    """The apps' folder: an app's cluster may list files of another app (Istio is in every cluster)."""
    package = Path(itbench_gym.__file__).resolve().parent
    return "" if envs_root.is_relative_to(package) else tree_digest(envs_root)


def key_digest(key: BaselineKey) -> str:
    """The name a baseline is stored under: changes whenever anything that could change it does (the
    cluster CA too: its ``kube-root-ca.crt`` ConfigMaps hold it)."""
    app_dir = Path(key.app_dir)
    parts = (_code_digest(), _envs_digest(app_dir.parent), app_dir.name, repr(key.seconds), repr(key.load), repr(key.hpa), repr(key.finops),
             key.provisioned, tls_material().ca_pem.decode())
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=20).hexdigest()


class BaselineStore:
    """Baseline snapshots as pickle files in ``directory``, shared by the processes of one user.

    The folder is the user's own cache (like pip's): its files are trusted as the user's code is.
    A file that cannot be read (truncated, from another build) is built again and replaced.
    """

    def __init__(self, directory: Path, keep: int = STORED_BASELINES) -> None:
        self.directory = directory
        self._keep = keep

    def get(self, key: BaselineKey, build: Callable[[], AnySnapshot]) -> AnySnapshot:
        """The stored baseline of ``key``, or ``build()``'s, stored; one process builds, the others wait."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{key_digest(key)}{_SUFFIX}"
        with FileLock(str(path.with_suffix(".lock"))):
            snap = self._load(path)
            if snap is None:
                snap = build()
                self._save(path, snap)
        return snap

    def _load(self, path: Path) -> AnySnapshot | None:
        try:
            with path.open("rb") as f:
                snap = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception as exc:  # any unreadable file is rebuilt, whatever broke it
            log.warning("baseline cache %s is unreadable (%s); building it again", path, exc)
            return None
        if not isinstance(snap, (TwinSnapshot, ClusterTwinSnapshot)):
            log.warning("baseline cache %s holds a %s, not a baseline; building it again", path, type(snap).__name__)
            return None
        os.utime(path)  # recently used: kept longest
        return snap

    def _save(self, path: Path, snap: AnySnapshot) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._prune()

    def _prune(self) -> None:
        """Remove the least recently used baselines beyond ``keep`` (their lock files stay: they are empty)."""
        stored = sorted(self.directory.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in stored[self._keep:]:
            old.unlink(missing_ok=True)


def default_store() -> BaselineStore:
    """``baselines/`` in the project's cache folder (``paths.cache_dir``: ``$ITBENCH_GYM_CACHE``...)."""
    return BaselineStore(cache_dir() / "baselines")


class BaselineCache:
    """Baseline snapshots by key, built at most once each while they stay cached (in memory, then on disk)."""

    def __init__(self, size: int = CACHED_BASELINES, store: Callable[[], BaselineStore | None] = default_store) -> None:
        self._size = size
        self._store = store
        self._lock = threading.RLock()
        self._snapshots: OrderedDict[BaselineKey, AnySnapshot] = OrderedDict()

    def get(self, key: BaselineKey, build: Callable[[], AnySnapshot]) -> AnySnapshot:
        """The baseline of ``key``, calling ``build`` when no cache has it (one builder at a time; a
        build may get the baseline it starts from)."""
        with self._lock:
            snap = self._snapshots.get(key)
            if snap is None:
                store = self._store()
                snap = self._snapshots[key] = build() if store is None else store.get(key, build)
                while len(self._snapshots) > self._size:
                    self._snapshots.popitem(last=False)
            self._snapshots.move_to_end(key)
            return snap

    def clear(self) -> None:
        """Forget the baselines held in memory (the disk cache keeps its own)."""
        with self._lock:
            self._snapshots.clear()


#: The process' baselines.
SHARED_BASELINES = BaselineCache()
