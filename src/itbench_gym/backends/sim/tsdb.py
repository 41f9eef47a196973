"""In-memory, append-only, columnar time-series store for the twin's metrics.

Each series keeps two numpy arrays (timestamps in integer milliseconds, float64 values) grown
geometrically, so one scrape is a handful of array writes and a query slices views without
copying. Label sets are interned: a series is identified by its sorted tuple of ``(name, value)``
pairs, and an inverted index (label name -> value -> series ids) answers matchers.

Staleness follows Prometheus: when a scrape (:meth:`TSDB.append`) of a ``job`` no longer contains
a series that the previous scrape of that job contained, the series receives a *staleness
marker* (a special NaN bit pattern) at the scrape time, so instant queries stop returning it
immediately instead of after the 5 minute lookback.

The scraper hands each scrape over as a :class:`SampleBatch` of :class:`SeriesRef` handles it keeps
from one scrape to the next, so storing a sample costs no label sorting or hashing. While scrapes keep
the same series in the same order, each is one row of a :class:`_Block` (one array write for the
whole scrape); a series reads its rows into its own arrays when something reads or writes it, and a
snapshot reads them all. Most series are never read between two snapshots.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from itbench_gym.lang import regex

Labels = tuple[tuple[str, str], ...]
"""A label set: ``(name, value)`` pairs sorted by name; hashable and ordered like Prometheus."""

#: Prometheus' staleness marker: a NaN with a distinctive payload (``value.StaleNaN``).
STALE_NAN_BITS = np.uint64(0x7FF0000000000002)
STALE_NAN: float = float(np.array([STALE_NAN_BITS], dtype=np.uint64).view(np.float64)[0])

_INITIAL_CAPACITY = 16
#: Rows a block starts with (it doubles as scrapes arrive).
_BLOCK_ROWS = 8
#: Rows a block holds before it is closed (a new one then starts).
_BLOCK_ROWS_MAX = 32
#: Rows closed blocks may hold before every series reads its rows out of them: an hour of scrapes at
#: 30 s, so the blocks of an incident's start (baseline, injection, alerts) stay shared by snapshots.
_CLOSED_ROWS_MAX = 128
_MIN_MS = -(2**62)
_MAX_MS = 2**62


def is_stale(values: np.ndarray) -> np.ndarray:
    """Boolean mask of staleness markers (ordinary NaNs are *not* stale)."""
    return np.equal(np.asarray(values, dtype=np.float64).view(np.uint64), STALE_NAN_BITS)


def make_labels(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> Labels:
    """Normalise a mapping or pair list to the canonical :data:`Labels` tuple (empty values dropped)."""
    items = labels.items() if isinstance(labels, Mapping) else labels
    return tuple(sorted((str(k), str(v)) for k, v in items if v != ""))


def labels_get(labels: Labels, name: str) -> str:
    for k, v in labels:
        if k == name:
            return v
    return ""


def format_labels(labels: Labels) -> str:
    """Render like Go's ``labels.Labels.String()``: ``{a="b", c="d"}``."""
    import json

    return "{" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in labels) + "}"


@dataclass(frozen=True)
class Matcher:
    """A label matcher (``=``, ``!=``, ``=~``, ``!~``) with Prometheus semantics.

    Regexes are Go's (RE2, linear time) and fully anchored, ``^(?s:value)$``, as Prometheus
    compiles them; an invalid one raises :class:`~itbench_gym.lang.regex.RegexError`
    (a ValueError) with Go's message.
    """

    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if self.op not in ("=", "!=", "=~", "!~"):
            raise ValueError(f"unknown matcher operator {self.op!r} for label {self.name!r}")
        if self.op in ("=~", "!~"):
            regex.compile(self.value, anchored=True)  # refuse invalid patterns now, in Go's words

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        # Looked up in the regex module's bounded cache rather than held here, so cached query
        # trees never pin compiled patterns (each RE2 object may use up to its max_mem).
        hit = regex.compile(self.value, anchored=True).matches(value)
        return hit if self.op == "=~" else not hit


@dataclass(frozen=True)
class Series:
    """One stored series restricted to a time range.

    ``ts`` are int64 milliseconds since the epoch, ``vs`` float64 values (staleness markers
    included; see :func:`is_stale`). Both are read-only views.
    """

    labels: Labels
    ts: np.ndarray
    vs: np.ndarray

    @property
    def metric(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def times(self) -> np.ndarray:
        """Timestamps in seconds (float64)."""
        return self.ts / 1000.0


class _Block:
    """Successive scrapes of the same series in the same order: a row of values per scrape.

    A series takes its rows into its own arrays (:meth:`TSDB._settle`) when it is read or written
    directly; until then appending a scrape is one row write. A closed block is never written
    again, so snapshots share it.
    """

    __slots__ = ("sids", "members", "jobs", "ts", "values", "rows", "last")

    def __init__(self, sids: list[int], members: frozenset[int], jobs: frozenset[str]) -> None:
        self.sids = sids
        self.members = members
        self.jobs = jobs
        self.ts = np.empty(_BLOCK_ROWS, dtype=np.int64)
        self.values = np.empty((_BLOCK_ROWS, len(sids)), dtype=np.float64)
        self.rows = 0
        #: the last row's timestamp
        self.last = _MIN_MS

    def add(self, tm: int, values: Sequence[float]) -> None:
        rows = self.rows
        if rows == len(self.ts):
            self.ts = np.concatenate((self.ts, np.empty(rows, dtype=np.int64)))
            self.values = np.concatenate((self.values, np.empty_like(self.values)))
        self.values[rows] = values
        self.ts[rows] = tm
        self.rows = rows + 1
        self.last = tm


class _MemSeries:
    __slots__ = ("labels", "ts", "vs", "n", "owned", "last", "pending")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self.ts = np.empty(_INITIAL_CAPACITY, dtype=np.int64)
        self.vs = np.empty(_INITIAL_CAPACITY, dtype=np.float64)
        self.n = 0
        self.owned = True
        #: the last sample's timestamp (``ts[n - 1]``) as a Python int, read on every append
        self.last = _MIN_MS
        #: rows of blocks not yet read into the arrays: ``(block, column, first row not read)``, oldest first
        self.pending: list[tuple[_Block, int, int]] = []

    def share(self, ts: np.ndarray, vs: np.ndarray, n: int) -> None:
        """Take over a snapshot's arrays, copied on the next write."""
        self.ts, self.vs, self.n, self.owned = ts, vs, n, False
        self.last = int(ts[n - 1]) if n else _MIN_MS

    def append(self, t: int, v: float) -> None:
        n = self.n
        if n and t < self.last:
            raise ValueError(
                f"out-of-order sample for {format_labels(self.labels)}: t={t / 1000} s is before the "
                f"last sample at {self.last / 1000} s"
            )
        if n and t == self.last:
            self._own()
            self.vs[n - 1] = v
            return
        if n == len(self.ts) or not self.owned:
            cap = max(_INITIAL_CAPACITY, len(self.ts) * 2 if n == len(self.ts) else len(self.ts))
            ts = np.empty(cap, dtype=np.int64)
            vs = np.empty(cap, dtype=np.float64)
            ts[:n] = self.ts[:n]
            vs[:n] = self.vs[:n]
            self.ts, self.vs, self.owned = ts, vs, True
        self.ts[n] = t
        self.vs[n] = v
        self.n = n + 1
        self.last = t

    def extend(self, ts: np.ndarray, vs: np.ndarray) -> None:
        """Append samples whose times are in order and after the last sample's."""
        n, k = self.n, len(ts)
        if n + k > len(self.ts) or not self.owned:
            cap = max(_INITIAL_CAPACITY, len(self.ts), n + k)
            if n + k > len(self.ts):
                cap = max(cap, 2 * len(self.ts))
            grown_ts, grown_vs = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.float64)
            grown_ts[:n], grown_vs[:n] = self.ts[:n], self.vs[:n]
            self.ts, self.vs, self.owned = grown_ts, grown_vs, True
        self.ts[n:n + k] = ts
        self.vs[n:n + k] = vs
        self.n = n + k
        self.last = int(ts[-1])

    def _own(self) -> None:
        if not self.owned:
            self.ts = self.ts.copy()
            self.vs = self.vs.copy()
            self.owned = True


class SeriesRef:
    """A writer's handle on one series: its labels, and its id once a :class:`TSDB` stored it.

    A scraper that sends the same series every scrape keeps one handle per series and puts it in
    each :class:`SampleBatch`, so the store neither sorts nor hashes labels per sample. The store
    fills ``sid`` when it first appends the handle; it is valid for the batch's store and
    :attr:`TSDB.generation` only (:attr:`SampleBatch.owner`), so a writer drops its handles when
    either changes.
    """

    __slots__ = ("labels", "sid")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self.sid = -1


class SampleBatch:
    """One scrape's samples for :meth:`TSDB.append`, as series handles and values.

    Iterating gives ``(labels, value)`` pairs like any other scrape, with the labels as stored
    (sorted, empty values dropped).
    """

    __slots__ = ("tsdb", "generation", "series", "values")

    def __init__(self, tsdb: TSDB) -> None:
        self.tsdb = tsdb
        self.generation = tsdb.generation
        self.series: list[SeriesRef] = []
        self.values: list[float] = []

    @property
    def owner(self) -> tuple[TSDB, int]:
        """The store and generation the batch's handles belong to (what a writer's cache is valid for)."""
        return self.tsdb, self.generation

    def add(self, ref: SeriesRef, value: float) -> None:
        self.series.append(ref)
        self.values.append(value)

    def __len__(self) -> int:
        return len(self.series)

    def __iter__(self) -> Iterator[tuple[dict[str, str], float]]:
        return ((dict(r.labels), v) for r, v in zip(self.series, self.values, strict=True))


@dataclass(frozen=True)
class TSDBSnapshot:
    """An O(series) copy of the store: arrays and closed blocks are shared, arrays copied on the next write."""

    #: labels, the series' own arrays and sample count, and its rows in blocks: (block, column, first row)
    series: tuple[tuple[Labels, np.ndarray, np.ndarray, int, tuple[tuple[_Block, int, int], ...]], ...]
    last_scrape: dict[str, frozenset[int]]
    blocks: tuple[_Block, ...] = ()


MatchersLike = Sequence[Matcher] | Mapping[str, str] | str | None
Check = Callable[[], None]
"""A callback long loops call now and then; it raises to stop them (a query deadline)."""
#: How many series or label values a loop handles between two ``check()`` calls.
_CHECK_EVERY = 256
#: How many selections :meth:`TSDB._selection` keeps (the twin's rules have a few hundred selectors).
_SELECTIONS_KEPT = 1024
#: Above this many new series a kept selection is matched afresh from the postings.
_REMATCH_AFTER = 256
#: Up to this many new series are inserted into the label order; more and it is sorted afresh.
_INSERT_AT_MOST = 64



def _to_ms(t: float | None, default: int) -> int:
    return default if t is None else int(round(float(t) * 1000.0))


class TSDB:
    """The metrics store shared by the twin's scraper, the PromQL engine and the rule manager."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._series: list[_MemSeries] = []
        self._by_labels: dict[Labels, int] = {}
        self._postings: dict[str, dict[str, set[int]]] = {}
        self._last_scrape: dict[str, frozenset[int]] = {}
        self._ref_cache: dict[tuple[tuple[str, str], ...], int] = {}
        self._rank = np.zeros(0, dtype=np.int64)
        #: the ranked series' ids and label sets in label order (what ``_rank`` was built from)
        self._sorted_ids: list[int] = []
        self._sorted_labels: list[Labels] = []
        #: matcher list -> (series count when computed, matching ids in label order)
        self._selections: dict[tuple[Matcher, ...], tuple[int, list[int]]] = {}
        #: each series' ``job`` label as an index into ``_jobs`` (staleness is kept per job)
        self._job_of = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
        self._jobs: list[str] = []
        self._job_index: dict[str, int] = {}
        self._generation = 0
        #: the block the next scrape of the same layout adds a row to, and closed blocks with rows to read
        self._live: _Block | None = None
        self._closed: list[_Block] = []

    @property
    def generation(self) -> int:
        """Changes whenever series ids are handed out afresh (:meth:`clear`, :meth:`restore`)."""
        return self._generation

    # ----------------------------------------------------------------- writes
    def ref(self, labels: Mapping[str, str] | Labels) -> int:
        """Stable id of a series (created if new) for the fast :meth:`append_refs` path."""
        with self._lock:
            return self._get_or_create(make_labels(labels))

    def _ref_of(self, labels: Mapping[str, str]) -> int:
        key = tuple(labels.items())
        sid = self._ref_cache.get(key)
        if sid is None:
            sid = self._get_or_create(make_labels(labels))
            self._ref_cache[key] = sid
        return sid

    def _get_or_create(self, labels: Labels) -> int:
        sid = self._by_labels.get(labels)
        if sid is None:
            sid = len(self._series)
            self._series.append(_MemSeries(labels))
            self._by_labels[labels] = sid
            for k, v in labels:
                self._postings.setdefault(k, {}).setdefault(v, set()).add(sid)
            job = labels_get(labels, "job")
            code = self._job_index.get(job)
            if code is None:
                code = self._job_index[job] = len(self._jobs)
                self._jobs.append(job)
            if sid == len(self._job_of):
                self._job_of = np.concatenate((self._job_of, np.zeros(sid, dtype=np.int64)))
            self._job_of[sid] = code
        return sid

    def _batch_sids(self, batch: SampleBatch) -> list[int]:
        """The ids of a batch's series in order, creating new ones in order of appearance."""
        if batch.tsdb is not self or batch.generation != self._generation:
            return [self._get_or_create(r.labels) for r in batch.series]
        sids = [r.sid for r in batch.series]
        if sids and min(sids) < 0:
            for i, r in enumerate(batch.series):
                if r.sid < 0:
                    r.sid = self._get_or_create(r.labels)
                sids[i] = r.sid
        return sids

    def append(
        self,
        t: float,
        samples: Iterable[tuple[Mapping[str, str], float]],
        jobs: Iterable[str] | None = None,
    ) -> None:
        """Store one scrape taken at ``t`` seconds.

        Staleness: for every job present in this scrape (the ``job`` label; series without one
        belong to job ``""``), series that were in that job's previous scrape but are missing now
        get a staleness marker at ``t``. Jobs absent from this call are left untouched, so a
        caller may append different jobs in separate calls; list a job in ``jobs`` to declare
        that it was scraped and returned nothing (all its series then go stale).

        A :class:`SampleBatch` of this store skips the label handling of each sample.
        """
        tm = _to_ms(t, 0)
        with self._lock:
            if isinstance(samples, SampleBatch):
                self._ingest_batch(tm, self._batch_sids(samples), samples.values, jobs)
            else:
                self._ingest(tm, ((self._ref_of(labels), value) for labels, value in samples), jobs)

    def _ingest_batch(self, tm: int, sids: list[int], values: list[float], jobs: Iterable[str] | None) -> None:
        """A scrape as a row of the live block when it has that block's series and jobs (nothing goes
        stale then); else in a new block, or sample by sample where a block cannot hold it."""
        if len(sids) != len(values):
            raise ValueError(f"a batch of {len(sids)} series has {len(values)} values")
        declared = frozenset(jobs or ())
        live = self._live
        if live is not None and live.sids == sids and live.jobs == declared and tm > live.last:
            live.add(tm, values)
            if live.rows >= _BLOCK_ROWS_MAX:
                self._close_live()
            return
        # The live block's series were written only through it (a direct write closes it), so only
        # series new to this layout can have samples at or after ``tm``.
        continued = live.members if live is not None and live.last < tm else frozenset()
        self._close_live()
        series, members = self._series, frozenset(sids)
        if not sids or len(members) != len(sids) or any(self._last_of(series[sid]) >= tm for sid in members - continued):
            self._ingest(tm, zip(sids, values, strict=True), jobs)  # out of order or repeated: as append does
            return
        block = _Block(sids, members, declared)
        block.add(tm, values)
        for col, sid in enumerate(sids):
            series[sid].pending.append((block, col, 0))
        self._live = block
        self._mark_stale(tm, self._seen_by_job(sids, jobs))

    @staticmethod
    def _last_of(s: _MemSeries) -> int:
        """The series' last timestamp, counting the rows it has in blocks."""
        return s.pending[-1][0].last if s.pending else s.last

    def _close_live(self) -> None:
        """No more rows for the live block; once closed blocks hold too many, their series read them."""
        if self._live is None:
            return
        self._closed.append(self._live)
        self._live = None
        if sum(b.rows for b in self._closed) > _CLOSED_ROWS_MAX:
            for block in self._closed:
                for sid in block.sids:
                    self._settle(self._series[sid])
            self._closed = []

    def _settle(self, s: _MemSeries) -> None:
        """Read the series' rows out of its blocks into its arrays."""
        if not s.pending:
            return
        for block, col, first in s.pending:
            if block.rows > first:
                s.extend(block.ts[first:block.rows], block.values[first:block.rows, col])
        block, col, _first = s.pending[-1]
        s.pending = [(block, col, block.rows)] if block is self._live else []

    def _settle_to_write(self, s: _MemSeries) -> None:
        """Before a sample is written to the series directly: its rows first, and no more rows after it."""
        if s.pending[-1][0] is self._live:
            self._close_live()
        self._settle(s)

    def append_refs(
        self,
        t: float,
        refs: Sequence[int] | np.ndarray,
        values: Sequence[float] | np.ndarray,
        jobs: Iterable[str] | None = None,
    ) -> None:
        """Like :meth:`append` for series ids from :meth:`ref` (no label handling per sample)."""
        tm = _to_ms(t, 0)
        refs_l = [int(r) for r in refs]
        vals = np.asarray(values, dtype=np.float64).tolist()
        if len(refs_l) != len(vals):
            raise ValueError(f"append_refs: {len(refs_l)} refs but {len(vals)} values")
        with self._lock:
            for sid in refs_l:
                if not 0 <= sid < len(self._series):
                    raise ValueError(f"append_refs: unknown series ref {sid}")
            self._ingest(tm, zip(refs_l, vals, strict=True), jobs)

    def _ingest(self, tm: int, samples: Iterable[tuple[int, float]], jobs: Iterable[str] | None) -> None:
        """Append each ``(series id, value)`` at ``tm`` in order, then mark what each scraped job lost stale."""
        series = self._series
        done: list[int] = []
        for sid, value in samples:
            s = series[sid]
            if s.pending:
                self._settle_to_write(s)
            n = s.n
            if s.last < tm and n < len(s.ts) and s.owned:  # _MemSeries.append without its rare cases
                s.ts[n] = tm
                s.vs[n] = float(value)
                s.n = n + 1
                s.last = tm
            else:
                s.append(tm, float(value))
            done.append(sid)
        self._mark_stale(tm, self._seen_by_job(done, jobs))

    def _seen_by_job(self, sids: list[int], jobs: Iterable[str] | None) -> dict[str, set[int]]:
        """The series of a scrape per job, with every declared job (an empty set when it returned nothing)."""
        seen: dict[str, set[int]] = {j: set() for j in (jobs or ())}
        if sids:
            arr = np.asarray(sids, dtype=np.int64)
            codes = self._job_of[arr]
            order = np.argsort(codes, kind="stable")
            arr, codes = arr[order], codes[order]
            cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
            for code, group in zip(codes[np.concatenate(([0], cuts))].tolist(), np.split(arr, cuts), strict=True):
                seen.setdefault(self._jobs[code], set()).update(group.tolist())
        return seen

    def _mark_stale(self, tm: int, seen: dict[str, set[int]]) -> None:
        for job, sids in seen.items():
            for gone in self._last_scrape.get(job, frozenset()) - sids:
                s = self._series[gone]
                if s.pending:
                    self._settle_to_write(s)
                if s.n and s.last < tm:
                    s.append(tm, STALE_NAN)
            self._last_scrape[job] = frozenset(sids)

    def append_sample(self, labels: Mapping[str, str] | Labels, t: float, v: float) -> None:
        """Store one sample without any staleness bookkeeping (used by promqltest ``load``)."""
        self.append_ms(make_labels(labels), _to_ms(t, 0), v)

    def append_ms(self, labels: Labels, t_ms: int, v: float) -> None:
        with self._lock:
            s = self._series[self._get_or_create(labels)]
            if s.pending:
                self._settle_to_write(s)
            s.append(int(t_ms), float(v))

    def clear(self) -> None:
        with self._lock:
            self._series = []
            self._by_labels = {}
            self._postings = {}
            self._last_scrape = {}
            self._ref_cache = {}
            self._rank = np.zeros(0, dtype=np.int64)
            self._sorted_ids, self._sorted_labels = [], []
            self._selections = {}
            self._job_of = np.zeros(_INITIAL_CAPACITY, dtype=np.int64)
            self._jobs = []
            self._job_index = {}
            self._live, self._closed = None, []
            self._generation += 1

    # ------------------------------------------------------------- snapshots
    def snapshot(self) -> TSDBSnapshot:
        with self._lock:
            self._close_live()
            for s in self._series:
                s.owned = False
            return TSDBSnapshot(
                series=tuple((s.labels, s.ts, s.vs, s.n, tuple(s.pending)) for s in self._series),
                last_scrape=dict(self._last_scrape),
                blocks=tuple(self._closed),
            )

    def restore(self, snap: TSDBSnapshot) -> None:
        if not isinstance(snap, TSDBSnapshot):
            raise TypeError(f"restore() needs a TSDBSnapshot from TSDB.snapshot(), got {type(snap).__name__}")
        with self._lock:
            self.clear()
            for labels, ts, vs, n, pending in snap.series:
                s = self._series[self._get_or_create(labels)]
                s.share(ts, vs, n)
                s.pending = list(pending)
            self._last_scrape = dict(snap.last_scrape)
            self._closed = list(snap.blocks)

    # ---------------------------------------------------------------- reads
    def __len__(self) -> int:
        return len(self._series)

    def _match_ids(self, matchers: Sequence[Matcher], check: Check | None = None) -> list[int]:
        if not matchers:
            return list(range(len(self._series)))
        ids: set[int] | None = None
        # Cheapest first: positive equality matchers narrow the candidate set fastest.
        for m in sorted(matchers, key=lambda m: (m.op != "=", m.op.startswith("!"))):
            by_value = self._postings.get(m.name, {})
            if check is not None:
                check()
            if m.matches(""):
                excluded: set[int] = set()
                for k, (value, sids) in enumerate(by_value.items()):
                    if check is not None and k % _CHECK_EVERY == 0:
                        check()
                    if not m.matches(value):
                        excluded |= sids
                cand = (set(range(len(self._series))) if ids is None else ids) - excluded
            else:
                if m.op == "=":
                    hit = set(by_value.get(m.value, ()))
                else:
                    hit = set()
                    for k, (value, sids) in enumerate(by_value.items()):
                        if check is not None and k % _CHECK_EVERY == 0:
                            check()
                        if m.matches(value):
                            hit |= sids
                cand = hit if ids is None else ids & hit
            ids = cand
            if not ids:
                return []
        return sorted(ids or ())

    def _label_order(self, sids: list[int]) -> list[int]:
        """``sids`` sorted by label set, via a rank table brought up to date when series were added.

        A few new series (a rule's first output, a new pod) are inserted into the kept order by
        bisection instead of sorting every series again.
        """
        n, done = len(self._series), len(self._rank)
        if done != n:
            if done == 0 or n - done > _INSERT_AT_MOST:
                order = sorted(range(n), key=lambda i: self._series[i].labels)
                self._sorted_labels = [self._series[i].labels for i in order]
            else:
                order = self._sorted_ids
                for sid in range(done, n):
                    at = bisect.bisect(self._sorted_labels, self._series[sid].labels)
                    self._sorted_labels.insert(at, self._series[sid].labels)
                    order.insert(at, sid)
            self._sorted_ids = order
            rank = np.empty(n, dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(n)
            self._rank = rank
        arr = np.asarray(sids, dtype=np.int64)
        ordered: list[int] = arr[np.argsort(self._rank[arr], kind="stable")].tolist()  # tolist() is typed Any
        return ordered

    def _selection(self, matchers: Sequence[Matcher], check: Check | None) -> list[int]:
        """Ids of the series matching ``matchers``, in label order.

        Kept per matcher list: a rule's selectors ask the same at every evaluation, and matching
        regexes against every label value is the costly part. A few series added since are matched
        one by one (series are never removed, except all at once by :meth:`clear`).
        """
        key = tuple(matchers)
        hit = self._selections.get(key)
        n = len(self._series)
        if hit is not None and hit[0] == n:
            return hit[1]
        if hit is not None and n - hit[0] <= _REMATCH_AFTER:
            new = [sid for sid in range(hit[0], n)
                   if all(m.matches(labels_get(self._series[sid].labels, m.name)) for m in matchers)]
            sids = self._label_order(hit[1] + new) if new else hit[1]
        else:
            sids = self._label_order(self._match_ids(matchers, check))
        if len(self._selections) >= _SELECTIONS_KEPT:
            self._selections.clear()
        self._selections[key] = (len(self._series), sids)
        return sids

    def select_raw(
        self, matchers: Sequence[Matcher], mint: int, maxt: int, check: Check | None = None
    ) -> list[tuple[Labels, np.ndarray, np.ndarray]]:
        """Like :meth:`select_ms` but returns plain ``(labels, ts, vs)`` tuples (the engine's hot path).

        ``check`` is called every few hundred series or label values; it may raise to abandon the
        selection (the engines pass their query deadline).
        """
        with self._lock:
            out = []
            series = self._series
            for k, sid in enumerate(self._selection(matchers, check)):
                if check is not None and k % _CHECK_EVERY == 0:
                    check()
                s = series[sid]
                if s.pending:
                    self._settle(s)
                n, ts = s.n, s.ts
                # ``last`` spares a search for the usual query that ends at or after the newest sample.
                lo = int(ts[:n].searchsorted(mint)) if n else 0
                hi = n if s.last <= maxt else int(ts[:n].searchsorted(maxt, "right"))
                out.append((s.labels, ts[lo:hi], s.vs[lo:hi]))
            return out

    def select_ms(self, matchers: Sequence[Matcher], mint: int, maxt: int) -> list[Series]:
        """Series matching all ``matchers`` with their samples in ``[mint, maxt]`` ms, sorted by labels.

        Series without samples in the range are still returned (with empty arrays) so callers
        can distinguish "no such series" from "no data in range" when they need to.
        """
        out = []
        for labels, ts, vs in self.select_raw(matchers, mint, maxt):
            ts, vs = ts.view(), vs.view()
            ts.flags.writeable = False
            vs.flags.writeable = False
            out.append(Series(labels, ts, vs))
        return out

    def select(self, matchers: MatchersLike, start: float | None = None, end: float | None = None) -> list[Series]:
        """Series matching ``matchers`` with samples in ``[start, end]`` seconds (None = unbounded)."""
        ms = parse_matchers(matchers)
        return [
            s
            for s in self.select_ms(ms, _to_ms(start, _MIN_MS), _to_ms(end, _MAX_MS))
            if start is None and end is None or len(s.ts)
        ]

    def series(self, matchers: MatchersLike, start: float | None = None, end: float | None = None) -> list[dict[str, str]]:
        return [s.metric for s in self.select(matchers, start, end)]

    def label_names(
        self, matchers: MatchersLike = None, start: float | None = None, end: float | None = None
    ) -> list[str]:
        if matchers is None and start is None and end is None:
            with self._lock:
                return sorted(k for k, vals in self._postings.items() if any(vals.values()))
        names: set[str] = set()
        for s in self.select(matchers, start, end):
            names.update(k for k, _ in s.labels)
        return sorted(names)

    def label_values(
        self, name: str, matchers: MatchersLike = None, start: float | None = None, end: float | None = None
    ) -> list[str]:
        if matchers is None and start is None and end is None:
            with self._lock:
                return sorted(v for v, sids in self._postings.get(name, {}).items() if sids)
        return sorted({v for s in self.select(matchers, start, end) if (v := labels_get(s.labels, name))})


def parse_matchers(matchers: MatchersLike) -> list[Matcher]:
    """Accept matcher objects, an equality mapping, or a PromQL selector string like ``up{job="x"}``."""
    if matchers is None:
        return []
    if isinstance(matchers, str):
        from .promql.parsing import parse_selector  # the PromQL package imports this module

        return parse_selector(matchers)
    if isinstance(matchers, Mapping):
        return [Matcher(k, "=", v) for k, v in matchers.items()]
    return list(matchers)


_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def selector_matchers(node: object) -> list[Matcher]:
    """Matchers of a ``promql_parser.VectorSelector`` (its name becomes ``__name__=...``)."""
    out: list[Matcher] = []
    name = getattr(node, "name", None)
    if name:
        out.append(Matcher("__name__", "=", name))
    return out + convert_matchers(node.matchers.matchers)  # type: ignore[attr-defined]


def convert_matchers(raw: Iterable[object]) -> list[Matcher]:
    """Convert ``promql_parser.Matcher`` objects."""
    return [Matcher(m.name, _OPS[str(m.op).rsplit(".", 1)[-1]], m.value) for m in raw]  # type: ignore[attr-defined]
