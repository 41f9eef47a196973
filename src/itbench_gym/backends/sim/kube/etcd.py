"""etcd's disk: its WAL syncs and backend commits, their latency under IOChaos, and their metrics.

Each write the API server sends is a raft proposal the single member saves to its WAL (a write and
an fdatasync) before it applies it; the backend commits its batch (writes and syncs of bbolt's file)
every batch interval while writes are pending (``etcd.yaml``). A running IOChaos ``latency``
experiment whose record says it was injected into the etcd pod delays each file operation it covers
(``volumePath`` and ``path`` over the file under the member's ``--data-dir``, ``methods``, and
``containerNames``) by ``delay`` with probability ``percent``. One save or commit then takes a
distribution of times (each of its operations delayed or not), which etcd's histograms
(``etcd_disk_wal_fsync_duration_seconds``, ``etcd_disk_backend_commit_duration_seconds``) integrate;
a write request waits for its save, so the API server's write verbs hold their seat longer
(:class:`~.apiload.ApiLoad`), which the agent's kubectl feels.

Gaps: only ``latency`` is modelled (IOChaos ``fault``/``attrOverride``/``mistake`` would make etcd's
WAL writes fail, which it treats as fatal); reads are served from memory and are not delayed.
"""

from __future__ import annotations

import fnmatch
import math
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext

from ..chaos.kinds import API_VERSION as CHAOS_API
from ..chaos.kinds import active, parse_duration
from ..chaos.selection import pod_matches
from . import errors
from .exposition import LabelSets, Sample, histogram_samples
from .store import ObjectStore

Obj = dict[str, Any]
#: (seconds, probability) pairs, probabilities summing to 1
Distribution = tuple[tuple[float, float], ...]
CONFIG = Path(__file__).with_name("etcd.yaml")
MEMBER_LABELS = {"component": "etcd"}
WAL_FSYNC = "etcd_disk_wal_fsync_duration_seconds"
BACKEND_COMMIT = "etcd_disk_backend_commit_duration_seconds"


@dataclass(frozen=True)
class DiskWork:
    """One unit of disk work: the file it touches, its operations in order, and those its metric times."""

    path: str
    operations: tuple[str, ...]
    timed: tuple[str, ...]


@dataclass(frozen=True)
class EtcdConfig:
    data_dir_flag: str
    wal: DiskWork
    backend: DiskWork
    batch_interval: float
    operation_seconds: float
    buckets: tuple[float, ...]


@cache
def load_etcd_config(path: Path = CONFIG) -> EtcdConfig:
    raw = yamltext.load(path.read_text(encoding="utf-8"))

    def work(r: Mapping[str, Any]) -> DiskWork:
        ops = tuple(str(o) for o in r["operations"])
        return DiskWork(str(r["path"]), ops, tuple(str(o) for o in r.get("timed", ops)))

    start, factor = float(raw["bucketStart"]), float(raw["bucketFactor"])
    return EtcdConfig(str(raw["dataDirFlag"]), work(raw["wal"]), work(raw["backend"]),
                      float(raw["backend"]["batchIntervalSeconds"]), float(raw["operationSeconds"]),
                      tuple(start * factor**i for i in range(int(raw["bucketCount"]))))


def convolve(parts: Sequence[Distribution]) -> Distribution:
    """The distribution of the sum of independent parts (times rounded to the microsecond)."""
    out: dict[float, float] = {0.0: 1.0}
    for part in parts:
        nxt: dict[float, float] = {}
        for t, p in out.items():
            for u, q in part:
                key = round(t + u, 6)
                nxt[key] = nxt.get(key, 0.0) + p * q
        out = nxt
    return tuple(sorted(out.items()))


def mean(dist: Distribution) -> float:
    return sum(t * p for t, p in dist)


@dataclass(frozen=True)
class _Delay:
    """One running latency experiment on the member: what it covers and what it adds."""

    volume: str
    path_glob: str
    methods: frozenset[str]
    delay: float
    hit: float

    def covers(self, file: str, method: str) -> bool:
        volume = self.volume.rstrip("/") or "/"
        under = volume == "/" or file == volume or file.startswith(volume + "/")
        return under and (not self.path_glob or fnmatch.fnmatch(file, self.path_glob)) and (not self.methods or method in self.methods)


@dataclass(frozen=True)
class EtcdSnapshot:
    histograms: tuple[tuple[str, tuple[float, ...]], ...]
    proposals: float
    write_delay: float


class Etcd:
    """The member's disk on the simulated clock: histograms of its syncs and commits, and the mean
    extra seconds a write waits for its WAL save (0 without a fault)."""

    def __init__(self, store: ObjectStore, config: EtcdConfig | None = None) -> None:
        self.store = store
        self.config = config or load_etcd_config()
        #: metric name -> cumulative bucket counts, then count and sum
        self.histograms: dict[str, list[float]] = {}
        self.proposals = 0.0
        self.write_delay = 0.0
        self._labels = LabelSets()

    def _member(self) -> Obj | None:
        pods = self.store.list_stored(self.store.registry.by_kind("Pod"), "kube-system")
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if all(labels.get(k) == v for k, v in MEMBER_LABELS.items()):
                return pod
        return None

    def _data_dir(self, container: Obj) -> str:
        """``--data-dir``, else etcd's default ``<--name>.etcd`` (relative: no volume covers it)."""
        words = [str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])]]
        flags = dict(w.split("=", 1) for w in words if w.startswith("--") and "=" in w)
        return flags.get(self.config.data_dir_flag) or f"{flags.get('--name', 'default')}.etcd"

    def _delays(self, pod: Obj, now: float) -> list[_Delay]:
        try:
            kind = self.store.registry.by_kind("IOChaos", CHAOS_API)
        except errors.ApiError:  # no Chaos Mesh on this cluster (its CRD was never installed, or removed)
            return []
        member = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
        out: list[_Delay] = []
        for exp in active(self.store.list_stored(kind, None), now):
            spec = exp.get("spec") or {}
            records = ((exp.get("status") or {}).get("experiment") or {}).get("containerRecords") or []
            if spec.get("action") != "latency" or not any(r.get("id") == member and r.get("phase") == "Injected" for r in records):
                continue
            if not pod_matches(spec.get("selector"), pod, exp["metadata"].get("namespace", "")):
                continue
            names = spec.get("containerNames")
            if names and container not in names:
                continue
            try:
                delay = parse_duration(str(spec.get("delay", "0")))
            except ValueError:
                continue
            hit = min(max(float(spec.get("percent", 100)), 0.0), 100.0) / 100.0
            out.append(_Delay(str(spec.get("volumePath", "")), str(spec.get("path") or ""),
                              frozenset(str(m) for m in spec.get("methods") or ()), delay, hit))
        return out

    def _operation(self, delays: Sequence[_Delay], file: str, method: str) -> Distribution:
        dist: Distribution = ((self.config.operation_seconds, 1.0),)
        for d in delays:
            if d.covers(file, method) and d.delay > 0 and d.hit > 0:
                dist = convolve([dist, ((0.0, 1.0 - d.hit), (d.delay, d.hit))])
        return dist

    def _work(self, delays: Sequence[_Delay], data_dir: str, work: DiskWork, operations: Sequence[str]) -> Distribution:
        file = posixpath.join(data_dir, work.path)
        return convolve([self._operation(delays, file, op) for op in operations])

    # -- time -----------------------------------------------------------------------------------
    def tick(self, now: float, dt: float, writes_per_s: float) -> None:
        """Count ``dt`` seconds of saves (one per write) and commits (one per batch interval with
        writes pending), and work out what a write now waits."""
        pod = self._member()
        running = pod is not None and any("running" in (s.get("state") or {})
                                          for s in (pod.get("status") or {}).get("containerStatuses") or [])
        if pod is None or not running:
            self.write_delay = 0.0
            return
        container = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        data_dir = self._data_dir(container)
        delays = self._delays(pod, now)
        cfg = self.config
        save = self._work(delays, data_dir, cfg.wal, cfg.wal.operations)
        fault_free = cfg.operation_seconds * len(cfg.wal.operations)
        self.write_delay = max(0.0, mean(save) - fault_free)
        # Proposals arriving while a save is in flight share the next one (raft batches its Ready).
        saves = min(writes_per_s, 1.0 / max(mean(save), 1e-9)) * dt
        commits = min(writes_per_s, 1.0 / cfg.batch_interval) * dt
        self.proposals += writes_per_s * dt
        self._observe(WAL_FSYNC, self._work(delays, data_dir, cfg.wal, cfg.wal.timed), saves)
        self._observe(BACKEND_COMMIT, self._work(delays, data_dir, cfg.backend, cfg.backend.timed), commits)

    def _observe(self, name: str, dist: Distribution, n: float) -> None:
        buckets = self.config.buckets
        counts = self.histograms.get(name)
        if counts is None:
            counts = self.histograms[name] = [0.0] * (len(buckets) + 2)
        if n <= 0:
            return
        for i, le in enumerate(buckets):
            counts[i] += n * sum(p for t, p in dist if t <= le)
        counts[-2] += n
        counts[-1] += n * mean(dist)

    # -- metrics --------------------------------------------------------------------------------
    def samples(self) -> list[Sample]:
        """The member's /metrics (its disk histograms, leadership, proposals), counts floored."""
        get = self._labels.get
        out: list[Sample] = [
            (get("leader", lambda: {"__name__": "etcd_server_has_leader"}), 1.0),
            (get("is_leader", lambda: {"__name__": "etcd_server_is_leader"}), 1.0),
            (get("changes", lambda: {"__name__": "etcd_server_leader_changes_seen_total"}), 0.0),
            (get("committed", lambda: {"__name__": "etcd_server_proposals_committed_total"}), float(math.floor(self.proposals))),
            (get("applied", lambda: {"__name__": "etcd_server_proposals_applied_total"}), float(math.floor(self.proposals))),
            (get("failed", lambda: {"__name__": "etcd_server_proposals_failed_total"}), 0.0),
        ]
        for name, counts in sorted(self.histograms.items()):
            out.extend(histogram_samples(self._labels, name, name, {}, self.config.buckets, counts))
        return out

    # -- snapshots ------------------------------------------------------------------------------
    def snapshot(self) -> EtcdSnapshot:
        return EtcdSnapshot(tuple((k, tuple(v)) for k, v in self.histograms.items()), self.proposals, self.write_delay)

    def restore(self, snap: EtcdSnapshot) -> None:
        self.histograms = {k: list(v) for k, v in snap.histograms}
        self.proposals, self.write_delay = snap.proposals, snap.write_delay
