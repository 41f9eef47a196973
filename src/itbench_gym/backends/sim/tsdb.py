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
whole scrape, where a write per series cost ~7 ms for the shop's ~8,500 series); a series takes its
rows out of closed blocks into its own arrays when something next reads or writes it, and most are
never read between two snapshots. Snapshots share closed blocks and the label index.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

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
#: Fewer series than this to settle for a selection are settled one by one (``TSDB._settle_many``).
_SETTLE_ONE_BY_ONE = 16
#: Series settled together (``TSDB._settle_many``): a chunk's matrix is at most this many rows of the
#: closed blocks' rows (at most ``_CLOSED_ROWS_MAX``), ~4 MB.
_SETTLE_CHUNK = 4096
_MIN_MS = -(2**62)
_MAX_MS = 2**62


def is_stale(values: np.ndarray) -> np.ndarray:
    """Boolean mask of staleness markers (ordinary NaNs are *not* stale)."""
    return np.equal(np.asarray(values, dtype=np.float64).view(np.uint64), STALE_NAN_BITS)


#: Label pairs handed out before: the series of a set-up share most names and values with others
#: (a new pod's series repeat its metric names, namespace and job), so sharing one tuple per pair
#: leaves the collector a few thousand new pairs to walk instead of a hundred thousand. Emptied when
#: it holds too many (pod names and ids come and go with the seeds).
_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}
_PAIRS_KEPT = 100_000


def make_labels(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> Labels:
    """Normalise a mapping or pair list to the canonical :data:`Labels` tuple (empty values dropped)."""
    items = labels.items() if isinstance(labels, Mapping) else labels
    pairs = _PAIRS
    if len(pairs) > _PAIRS_KEPT:
        pairs.clear()
    shared = pairs.setdefault
    return tuple(sorted(shared(pair, pair) for pair in ((str(k), str(v)) for k, v in items if v != "")))


def items_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A label dict's items, in its order, as a key that a cache keeps (made of shared pairs, as
    :func:`make_labels`' are)."""
    shared = _PAIRS.setdefault
    return tuple(shared(pair, pair) for pair in labels.items())


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

    Appending a scrape to the live block is one row write. Reads take the live block's rows as they
    are; a closed block is never written again (snapshots share it), and a series takes all its rows
    out of it into its own arrays (:meth:`TSDB._settle`) when it is next read or written.
    """

    __slots__ = ("sids", "members", "jobs", "seq", "columns", "_column_list", "ts", "values", "rows", "last")

    def __init__(self, sids: list[int], members: frozenset[int], jobs: frozenset[str], seq: int, series: int) -> None:
        self.sids = sids
        self.members = members
        self.jobs = jobs
        #: blocks are numbered in the order they start (a series remembers up to which it has read)
        self.seq = seq
        #: series id -> column (-1: not in the block), for the ``series`` ids there were
        self.columns = np.full(series, -1, dtype=np.int32)
        self.columns[np.asarray(sids, dtype=np.int64)] = np.arange(len(sids), dtype=np.int32)
        self._column_list: list[int] | None = None
        self.ts = np.empty(_BLOCK_ROWS, dtype=np.int64)
        self.values = np.empty((_BLOCK_ROWS, len(sids)), dtype=np.float64)
        self.rows = 0
        #: the last row's timestamp
        self.last = _MIN_MS

    def column(self, sid: int) -> int:
        return int(self.columns[sid]) if sid < len(self.columns) else -1

    def column_list(self) -> list[int]:
        """``columns`` as a list (a selection's reads of the live block look a column up per series)."""
        if self._column_list is None:
            self._column_list = self.columns.tolist()
        return self._column_list

    def drop_column_list(self) -> None:
        """Forget :meth:`column_list` (a closed block, which snapshots keep, needs none)."""
        self._column_list = None

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
    """One series' samples. A snapshot holds the store's series objects themselves (``frozen``): a
    store that changes one first puts a copy in its place (:meth:`TSDB._writable`), and a copy's
    arrays are copied in turn on its first write (``owned``), so a restore costs one list copy."""

    __slots__ = ("labels", "ts", "vs", "n", "owned", "last", "unread", "frozen")

    def __init__(self, labels: Labels, unread: int) -> None:
        self.labels = labels
        #: the first block (by ``seq``) whose rows the series has not taken into its arrays
        self.unread = unread
        self.ts = np.empty(_INITIAL_CAPACITY, dtype=np.int64)
        self.vs = np.empty(_INITIAL_CAPACITY, dtype=np.float64)
        self.n = 0
        self.owned = True
        #: held by a snapshot: never changed again
        self.frozen = False
        #: the last sample's timestamp (``ts[n - 1]``) as a Python int, read on every append
        self.last = _MIN_MS

    def thawed(self) -> _MemSeries:
        """A changeable copy sharing the arrays (copied on its first write)."""
        out = _MemSeries.__new__(_MemSeries)
        out.labels, out.unread, out.ts, out.vs, out.n, out.last = self.labels, self.unread, self.ts, self.vs, self.n, self.last
        out.owned, out.frozen = False, False
        return out

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
        self._reserve(n + 1)
        self.ts[n] = t
        self.vs[n] = v
        self.n = n + 1
        self.last = t

    def extend(self, ts: np.ndarray, vs: np.ndarray) -> None:
        """Append samples whose times are in order and after the last sample's."""
        n, k = self.n, len(ts)
        self._reserve(n + k)
        self.ts[n:n + k] = ts
        self.vs[n:n + k] = vs
        self.n = n + k
        self.last = int(ts[-1])

    def _reserve(self, size: int) -> None:
        """Own arrays with room for ``size`` samples (doubling when they grow; a shared pair is copied
        with room for a few more samples only: most series of a shared baseline take an episode's
        samples, far fewer than the history they share)."""
        if size <= len(self.ts) and self.owned:
            return
        if self.owned:
            cap = max(_INITIAL_CAPACITY, size, 2 * len(self.ts))
        else:
            cap = max(size, self.n + _INITIAL_CAPACITY)
        ts, vs = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.float64)
        ts[:self.n], vs[:self.n] = self.ts[:self.n], self.vs[:self.n]
        self.ts, self.vs, self.owned = ts, vs, True

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


@dataclass
class _LabelIndex:
    """What finds a store's series by their labels; shared by a store and its snapshots, copied before a change."""

    by_labels: dict[Labels, int]
    postings: dict[str, dict[str, set[int]]]
    #: each series' ``job`` label as an index into ``jobs`` (staleness is kept per job)
    job_of: np.ndarray
    jobs: list[str]
    job_index: dict[str, int]
    #: the postings sets this index made itself (by id), which it may change; the others it shares
    #: with the index it was copied from
    owned: set[int] = field(default_factory=set)

    @classmethod
    def empty(cls) -> _LabelIndex:
        return cls({}, {}, np.zeros(_INITIAL_CAPACITY, dtype=np.int64), [], {})

    def copy(self) -> _LabelIndex:
        """A changeable copy sharing the postings sets (each copied when the copy first adds to it:
        a new incident's series touch a few hundred of the baseline's tens of thousands)."""
        return _LabelIndex(dict(self.by_labels), {k: dict(d) for k, d in self.postings.items()},
                           self.job_of.copy(), list(self.jobs), dict(self.job_index))

    def post(self, name: str, value: str, sid: int) -> None:
        """Add ``sid`` to the postings of ``name=value``."""
        by_value = self.postings.setdefault(name, {})
        sids = by_value.get(value)
        if sids is None or id(sids) not in self.owned:
            sids = by_value[value] = set() if sids is None else set(sids)
            self.owned.add(id(sids))
        sids.add(sid)


@dataclass(frozen=True)
class TSDBSnapshot:
    """An O(series) copy of the store: arrays, closed blocks and the label index are shared, copied on the next write."""

    #: the series, frozen (a store that restores them copies one before changing it)
    series: tuple[_MemSeries, ...]
    last_scrape: dict[str, frozenset[int]]
    #: closed blocks, oldest first, and the number the next block gets
    blocks: tuple[_Block, ...]
    next_block: int
    index: _LabelIndex
    #: the label order of the series (``TSDB._label_order``): ids, label sets, ranks
    order: tuple[np.ndarray, np.ndarray, np.ndarray]
    #: the selections matched so far (``TSDB._selection``)
    selections: dict[tuple[Matcher, ...], tuple[int, list[int]]]


MatchersLike = Sequence[Matcher] | Mapping[str, str] | str | None
Check = Callable[[], None]
"""A callback long loops call now and then; it raises to stop them (a query deadline)."""
#: How many series or label values a loop handles between two ``check()`` calls.
_CHECK_EVERY = 256
#: How many selections :meth:`TSDB._selection` keeps (the twin's rules have a few hundred selectors).
_SELECTIONS_KEPT = 1024
#: Above this many new series a kept selection is matched afresh from the postings.
_REMATCH_AFTER = 256
#: New series are merged into the label order one by one while fewer than 1/this of those ranked.
_MERGE_ABOVE = 16



def _to_ms(t: float | None, default: int) -> int:
    return default if t is None else int(round(float(t) * 1000.0))


class TSDB:
    """The metrics store shared by the twin's scraper, the PromQL engine and the rule manager."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._series: list[_MemSeries] = []
        self._index = _LabelIndex.empty()
        #: whether a snapshot shares ``_index`` (it is then copied before a new series changes it)
        self._index_shared = False
        self._last_scrape: dict[str, frozenset[int]] = {}
        self._ref_cache: dict[tuple[tuple[str, str], ...], int] = {}
        self._rank = np.zeros(0, dtype=np.int64)
        #: the ranked series' ids and label sets in label order (what ``_rank`` was built from; never changed in place)
        self._sorted_ids = np.zeros(0, dtype=np.int64)
        self._sorted_labels = np.zeros(0, dtype=object)
        #: matcher list -> (series count when computed, matching ids in label order)
        self._selections: dict[tuple[Matcher, ...], tuple[int, list[int]]] = {}
        self._generation = 0
        #: the block the next scrape of the same layout adds a row to, and closed blocks with rows to read
        self._live: _Block | None = None
        self._closed: list[_Block] = []
        self._next_block = 0

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
        key = items_key(labels)
        sid = self._ref_cache.get(key)
        if sid is None:
            sid = self._get_or_create(make_labels(labels))
            self._ref_cache[key] = sid
        return sid

    def _get_or_create(self, labels: Labels) -> int:
        sid = self._index.by_labels.get(labels)
        if sid is None:
            if self._index_shared:
                self._index, self._index_shared = self._index.copy(), False
            index = self._index
            sid = len(self._series)
            self._series.append(_MemSeries(labels, self._next_block))
            index.by_labels[labels] = sid
            for k, v in labels:
                index.post(k, v, sid)
            job = labels_get(labels, "job")
            code = index.job_index.get(job)
            if code is None:
                code = index.job_index[job] = len(index.jobs)
                index.jobs.append(job)
            if sid == len(index.job_of):
                index.job_of = np.concatenate((index.job_of, np.zeros(sid, dtype=np.int64)))
            index.job_of[sid] = code
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
        if not sids or len(members) != len(sids) or self._last_of(members - continued) >= tm:
            self._ingest(tm, zip(sids, values, strict=True), jobs)  # out of order or repeated: as append does
            return
        block = _Block(sids, members, declared, self._next_block, len(series))
        self._next_block += 1
        block.add(tm, values)
        self._live = block
        self._mark_stale(tm, self._seen_by_job(sids, jobs))

    def _last_of(self, sids: Iterable[int]) -> int:
        """The last timestamp of any of the series, counting rows in closed blocks they have not read."""
        series = self._series
        arr = np.fromiter(sids, dtype=np.int64)
        if not len(arr):
            return _MIN_MS
        last: int = max(series[i].last for i in arr.tolist())
        unread = np.fromiter((series[i].unread for i in arr.tolist()), dtype=np.int64, count=len(arr))
        for block in self._closed:
            known = arr < len(block.columns)
            if block.last > last and (block.columns[arr[known]] >= 0)[unread[known] <= block.seq].any():
                last = block.last
        return last

    def _close_live(self) -> None:
        """No more rows for the live block; once closed blocks hold too many, their series take their rows."""
        if self._live is None:
            return
        self._live.drop_column_list()  # read only while the block is live
        self._closed.append(self._live)
        self._live = None
        if sum(b.rows for b in self._closed) > _CLOSED_ROWS_MAX:
            self._settle_many(sorted({sid for block in self._closed for sid in block.sids}))
            self._closed = []

    def _writable(self, sid: int) -> _MemSeries:
        """The series, made the store's own if a snapshot holds it (see :class:`_MemSeries`)."""
        s = self._series[sid]
        if s.frozen:
            s = self._series[sid] = s.thawed()
        return s

    def _settled(self, sid: int) -> _MemSeries:
        """The series, with the rows of every closed block it has not read taken into its arrays."""
        s = self._series[sid]
        closed = self._closed
        if closed and s.unread <= closed[-1].seq:
            s = self._writable(sid)
            # closed blocks are numbered one after another: skip those already read, take the rest at once
            parts = [(block.ts[:block.rows], block.values[:block.rows, col])
                     for block in closed[max(s.unread - closed[0].seq, 0):] if (col := block.column(sid)) >= 0]
            if len(parts) == 1:
                s.extend(*parts[0])
            elif parts:
                s.extend(np.concatenate([ts for ts, _ in parts]), np.concatenate([vs for _, vs in parts]))
            s.unread = closed[-1].seq + 1
        return s

    def _settle_many(self, sids: list[int]) -> None:
        """Settle the series of a selection (as :meth:`_settled`): the closed blocks' rows of a chunk of
        series gathered into one (series x rows) matrix, read out series by series in one pass."""
        closed, series = self._closed, self._series
        if not closed:
            return
        last_seq = closed[-1].seq
        todo = [sid for sid in sids if series[sid].unread <= last_seq]
        if len(todo) < _SETTLE_ONE_BY_ONE:
            for sid in todo:
                self._settled(sid)
            return
        first = min(series[sid].unread for sid in todo)
        blocks = [b for b in closed if b.seq >= first and b.rows]
        times = np.concatenate([b.ts[:b.rows] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
        for at in range(0, len(todo), _SETTLE_CHUNK):
            chunk = todo[at:at + _SETTLE_CHUNK]
            arr = np.asarray(chunk, dtype=np.int64)
            unread = np.fromiter((series[sid].unread for sid in chunk), dtype=np.int64, count=len(chunk))
            values = np.empty((len(chunk), len(times)), dtype=np.float64)
            present = np.zeros((len(chunk), len(times)), dtype=bool)
            offset = 0
            for block in blocks:
                cols = np.full(len(arr), -1, dtype=np.int32)
                known = arr < len(block.columns)
                cols[known] = block.columns[arr[known]]
                take = np.flatnonzero((cols >= 0) & (unread <= block.seq))
                if len(take):
                    values[take, offset:offset + block.rows] = block.values[:block.rows, cols[take]].T
                    present[take, offset:offset + block.rows] = True
                offset += block.rows
            # row-major order: each series' rows in block order, one series after another
            flat_ts, flat_vs = np.broadcast_to(times, present.shape)[present], values[present]
            ends = np.cumsum(present.sum(axis=1)).tolist()
            begin = 0
            for sid, end in zip(chunk, ends, strict=True):
                s = self._writable(sid)
                if end > begin:
                    s.extend(flat_ts[begin:end], flat_vs[begin:end])
                s.unread = last_seq + 1
                begin = end

    def _to_write(self, sid: int) -> _MemSeries:
        """The series, ready for a sample written directly: its rows taken, and the live block closed if
        it has the series (no row may follow the sample)."""
        if self._live is not None and self._live.column(sid) >= 0:
            self._close_live()
        self._settled(sid)
        return self._writable(sid)

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
        done: list[int] = []
        for sid, value in samples:
            s = self._to_write(sid)
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
            codes = self._index.job_of[arr]
            order = np.argsort(codes, kind="stable")
            arr, codes = arr[order], codes[order]
            cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
            for code, group in zip(codes[np.concatenate(([0], cuts))].tolist(), np.split(arr, cuts), strict=True):
                seen.setdefault(self._index.jobs[code], set()).update(group.tolist())
        return seen

    def _mark_stale(self, tm: int, seen: dict[str, set[int]]) -> None:
        for job, sids in seen.items():
            for gone in self._last_scrape.get(job, frozenset()) - sids:
                s = self._to_write(gone)
                if s.n and s.last < tm:
                    s.append(tm, STALE_NAN)
            self._last_scrape[job] = frozenset(sids)

    def append_sample(self, labels: Mapping[str, str] | Labels, t: float, v: float) -> None:
        """Store one sample without any staleness bookkeeping (used by promqltest ``load``)."""
        self.append_ms(make_labels(labels), _to_ms(t, 0), v)

    def append_ms(self, labels: Labels, t_ms: int, v: float) -> None:
        with self._lock:
            self._to_write(self._get_or_create(labels)).append(int(t_ms), float(v))

    def append_many_ms(self, labels: Labels, ts: np.ndarray, vs: np.ndarray) -> int:
        """Store one series' samples (times increasing) as :meth:`append_ms` one after the other would,
        with each sample it refuses left out: one at the series' last time replaces that sample's
        value, earlier ones are not stored. Returns how many were left out (what a rule's writes of
        a rewound store lose, as Prometheus' do)."""
        with self._lock:
            s = self._to_write(self._get_or_create(labels))
            first = int(np.searchsorted(ts, s.last, side="right")) if s.n else 0
            if first and int(ts[first - 1]) == s.last:
                s.append(s.last, float(vs[first - 1]))
                refused = first - 1
            else:
                refused = first
            if first < len(ts):
                s.extend(np.asarray(ts[first:], dtype=np.int64), np.asarray(vs[first:], dtype=np.float64))
            return refused

    def rebase(self, refs: Iterable[SeriesRef]) -> None:
        """Make handles from before a restore (or :meth:`clear`) valid for this generation: a handle
        keeps its id when that id still names a series with its labels, else it gets one again at
        its next append. A writer that keeps its handles this way resolves none of its series again."""
        with self._lock:
            series = self._series
            n = len(series)
            for ref in refs:  # a handle met twice passes the identity test the second time
                sid = ref.sid
                if sid < 0:
                    continue
                if sid < n:
                    labels = series[sid].labels
                    if labels is ref.labels:
                        continue
                    if labels == ref.labels:
                        ref.labels = labels  # the store's own tuple: the next rebase compares identities
                        continue
                ref.sid = -1

    def clear(self) -> None:
        with self._lock:
            self._series = []
            self._index, self._index_shared = _LabelIndex.empty(), False
            self._last_scrape = {}
            self._ref_cache = {}
            self._rank = np.zeros(0, dtype=np.int64)
            self._sorted_ids, self._sorted_labels = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
            self._selections = {}
            self._live, self._closed, self._next_block = None, [], 0
            self._generation += 1

    # ------------------------------------------------------------- snapshots
    def snapshot(self, *, compact: bool = False) -> TSDBSnapshot:
        """The store's state; with ``compact``, every series first takes its rows out of the blocks
        into arrays of its own, cut to size (a snapshot many restores read: each restore then finds
        its series settled instead of settling them again)."""
        with self._lock:
            self._close_live()
            if compact and self._closed:
                self._settle_many(list(range(len(self._series))))
                self._closed = []
                for sid in range(len(self._series)):
                    s = self._writable(sid)
                    s.ts, s.vs = s.ts[:s.n].copy(), s.vs[:s.n].copy()
            for s in self._series:
                s.owned = False
                s.frozen = True
            self._index_shared = True
            self._label_order([])  # the snapshot keeps the label order of all its series
            return TSDBSnapshot(
                series=tuple(self._series),
                last_scrape=dict(self._last_scrape),
                blocks=tuple(self._closed),
                next_block=self._next_block,
                index=self._index,
                order=(self._sorted_ids, self._sorted_labels, self._rank),
                selections=dict(self._selections),
            )

    def restore(self, snap: TSDBSnapshot) -> None:
        if not isinstance(snap, TSDBSnapshot):
            raise TypeError(f"restore() needs a TSDBSnapshot from TSDB.snapshot(), got {type(snap).__name__}")
        with self._lock:
            self.clear()
            self._series = list(snap.series)
            self._index, self._index_shared = snap.index, True
            self._sorted_ids, self._sorted_labels, self._rank = snap.order
            self._selections = dict(snap.selections)
            self._last_scrape = dict(snap.last_scrape)
            self._closed, self._next_block = list(snap.blocks), snap.next_block

    # ---------------------------------------------------------------- reads
    def __len__(self) -> int:
        return len(self._series)

    def _match_ids(self, matchers: Sequence[Matcher], check: Check | None = None) -> list[int]:
        if not matchers:
            return list(range(len(self._series)))
        ids: set[int] | None = None
        # Cheapest first: positive equality matchers narrow the candidate set fastest.
        for m in sorted(matchers, key=lambda m: (m.op != "=", m.op.startswith("!"))):
            by_value = self._index.postings.get(m.name, {})
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
        """``sids`` sorted by label set, via a rank table brought up to date when series were added."""
        if len(self._rank) != len(self._series):
            self._rank_new_series()
        arr = np.asarray(sids, dtype=np.int64)
        ordered: list[int] = arr[np.argsort(self._rank[arr], kind="stable")].tolist()  # tolist() is typed Any
        return ordered

    def _rank_new_series(self) -> None:
        """Put the series added since the rank table was built into the label order.

        Only the first build sorts every series: later ones sort the new series among themselves and
        merge them into the kept order, a few at the places bisection finds (a new incident's few
        hundred series against the baseline's ten thousand), many in one merge of the two sorted
        runs (the series of a scaled-out deployment). The kept arrays are replaced, never changed in
        place: snapshots share them.
        """
        series, done, n = self._series, len(self._rank), len(self._series)
        new = sorted(range(done, n), key=lambda i: series[i].labels)
        new_labels = np.fromiter((series[i].labels for i in new), dtype=object, count=len(new))
        if done == 0:
            order, labels = np.asarray(new, dtype=np.int64), new_labels
        elif len(new) * _MERGE_ABOVE < done:
            at = [bisect.bisect(self._sorted_labels, lb) for lb in new_labels]
            order = np.insert(self._sorted_ids, at, new)
            labels = np.insert(self._sorted_labels, at, new_labels)
        else:  # Python's sort finds the two runs and merges them
            labels = np.concatenate((self._sorted_labels, new_labels))
            merged = np.asarray(sorted(range(n), key=labels.__getitem__), dtype=np.int64)
            order, labels = np.concatenate((self._sorted_ids, np.asarray(new, dtype=np.int64)))[merged], labels[merged]
        self._sorted_ids, self._sorted_labels = order, labels
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        self._rank = rank

    def _matched_since(self, matchers: Sequence[Matcher], since: int) -> list[int] | None:
        """The series from id ``since`` on that match ``matchers``, or None when that would cost
        about as much as matching every series: a few new series are checked one by one; many, only
        those an equality matcher's postings hold (the smallest such list)."""
        n = len(self._series)
        candidates: Iterable[int]
        if n - since <= _REMATCH_AFTER:
            candidates = range(since, n)
        else:
            # (``name=""`` matches series without the label, which no postings list holds)
            postings = [self._index.postings.get(m.name, {}).get(m.value, set()) for m in matchers if m.op == "=" and m.value]
            if not postings:
                return None
            candidates = sorted(sid for sid in min(postings, key=len) if sid >= since)
        # each matcher once per label value (as Prometheus matches values, not series): new series
        # repeat a few values (services, namespaces) and a regex costs far more than a lookup
        series, verdicts, out = self._series, [dict[str, bool]() for _ in matchers], []
        for sid in candidates:
            labels = series[sid].labels
            for m, seen in zip(matchers, verdicts, strict=True):
                value = labels_get(labels, m.name)
                hit = seen.get(value)
                if hit is None:
                    hit = seen[value] = m.matches(value)
                if not hit:
                    break
            else:
                out.append(sid)
        return out

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
        new = self._matched_since(matchers, hit[0]) if hit is not None else None
        if hit is not None and new is not None:
            sids = self._label_order(hit[1] + new) if new else hit[1]
        else:
            sids = self._label_order(self._match_ids(matchers, check))
        if len(self._selections) >= _SELECTIONS_KEPT:
            self._selections.clear()
        self._selections[key] = (len(self._series), sids)
        return sids

    def _gather(self, matchers: Sequence[Matcher], mint: int, maxt: int, check: Check | None
                ) -> tuple[list[tuple[Labels, np.ndarray, np.ndarray, int]], np.ndarray, np.ndarray]:
        """The selected series' own samples in ``[mint, maxt]`` (views), each with its column of the
        live block (-1: none), and the live block's rows in the window: times and values by column.
        Call with the lock held."""
        sids = self._selection(matchers, check)
        self._settle_many(sids)
        series, live = self._series, self._live
        # the live block's rows in the window follow each of its series' own samples
        cols: list[int] = []
        live_ts, live_values = np.zeros(0, dtype=np.int64), np.zeros((0, 0))
        if live is not None:
            rows = live.ts[:live.rows]
            first = int(rows.searchsorted(mint))
            end = live.rows if live.last <= maxt else int(rows.searchsorted(maxt, "right"))
            if first < end:
                cols, live_ts, live_values = live.column_list(), rows[first:end], live.values[first:end]
        known = len(cols)
        out = []
        for k, sid in enumerate(sids):
            if check is not None and k % _CHECK_EVERY == 0:
                check()
            s = series[sid]
            n, ts = s.n, s.ts
            # A window reaching back past the first sample, and ``last`` for the usual query that
            # ends at or after the newest one, spare a search.
            lo = 0 if not n or ts[0] >= mint else int(ts[:n].searchsorted(mint))
            hi = n if s.last <= maxt else int(ts[:n].searchsorted(maxt, "right"))
            out.append((s.labels, ts[lo:hi], s.vs[lo:hi], cols[sid] if sid < known else -1))
        return out, live_ts, live_values

    def select_raw(
        self, matchers: Sequence[Matcher], mint: int, maxt: int, check: Check | None = None
    ) -> list[tuple[Labels, np.ndarray, np.ndarray]]:
        """Like :meth:`select_ms` but returns plain ``(labels, ts, vs)`` tuples.

        ``check`` is called every few hundred series or label values; it may raise to abandon the
        selection (the engines pass their query deadline).
        """
        with self._lock:
            found, live_ts, live_values = self._gather(matchers, mint, maxt, check)
            return [(labels, ts, vs) if col < 0 else
                    (labels, np.concatenate((ts, live_ts)), np.concatenate((vs, live_values[:, col])))
                    for labels, ts, vs, col in found]

    def select_flat(
        self, matchers: Sequence[Matcher], mint: int, maxt: int, check: Check | None = None
    ) -> tuple[list[Labels], np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`select_raw`'s series as the engine's hot path reads them: labels, every series'
        times and values one after the other in two flat arrays, and each series' offset (one more
        at the end), without an array per series."""
        with self._lock:
            found, live_ts, live_values = self._gather(matchers, mint, maxt, check)
            ts_parts: list[np.ndarray] = []
            vs_parts: list[np.ndarray] = []
            lens = np.empty(len(found) + 1, dtype=np.int64)
            lens[0] = 0
            n_live = len(live_ts)
            for i, (_, ts, vs, col) in enumerate(found, 1):
                ts_parts.append(ts)
                vs_parts.append(vs)
                if col >= 0:
                    ts_parts.append(live_ts)
                    vs_parts.append(live_values[:, col])
                    lens[i] = len(ts) + n_live
                else:
                    lens[i] = len(ts)
            starts = np.cumsum(lens)
            if not ts_parts:
                return [], np.zeros(0, dtype=np.int64), np.zeros(0), starts
            return [labels for labels, _, _, _ in found], np.concatenate(ts_parts), np.concatenate(vs_parts), starts

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
                return sorted(k for k, vals in self._index.postings.items() if any(vals.values()))
        names: set[str] = set()
        for s in self.select(matchers, start, end):
            names.update(k for k, _ in s.labels)
        return sorted(names)

    def label_values(
        self, name: str, matchers: MatchersLike = None, start: float | None = None, end: float | None = None
    ) -> list[str]:
        if matchers is None and start is None and end is None:
            with self._lock:
                return sorted(v for v, sids in self._index.postings.get(name, {}).items() if sids)
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
