"""In-memory, append-only, columnar time-series store for the twin's metrics.

Each series keeps two numpy arrays (timestamps in integer milliseconds, float64 values) grown
geometrically, so one scrape is a handful of array writes and a query slices views without
copying. Label sets are interned: a series is identified by its sorted tuple of ``(name, value)``
pairs, and an inverted index (label name -> value -> series ids) answers matchers.

Staleness follows Prometheus: when a scrape (:meth:`TSDB.append`) of a ``job`` no longer contains
a series that the previous scrape of that job contained, the series receives a *staleness
marker* (a special NaN bit pattern) at the scrape time, so instant queries stop returning it
immediately instead of after the 5 minute lookback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from itbench_gym.lang import regex

Labels = tuple[tuple[str, str], ...]
"""A label set: ``(name, value)`` pairs sorted by name; hashable and ordered like Prometheus."""

#: Prometheus' staleness marker: a NaN with a distinctive payload (``value.StaleNaN``).
STALE_NAN_BITS = np.uint64(0x7FF0000000000002)
STALE_NAN: float = float(np.array([STALE_NAN_BITS], dtype=np.uint64).view(np.float64)[0])

_INITIAL_CAPACITY = 16


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


class _MemSeries:
    __slots__ = ("labels", "ts", "vs", "n", "owned")

    def __init__(self, labels: Labels) -> None:
        self.labels = labels
        self.ts = np.empty(_INITIAL_CAPACITY, dtype=np.int64)
        self.vs = np.empty(_INITIAL_CAPACITY, dtype=np.float64)
        self.n = 0
        self.owned = True

    def append(self, t: int, v: float) -> None:
        n = self.n
        if n and t < self.ts[n - 1]:
            raise ValueError(
                f"out-of-order sample for {format_labels(self.labels)}: t={t / 1000} s is before the "
                f"last sample at {self.ts[n - 1] / 1000} s"
            )
        if n and t == self.ts[n - 1]:
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

    def _own(self) -> None:
        if not self.owned:
            self.ts = self.ts.copy()
            self.vs = self.vs.copy()
            self.owned = True


@dataclass(frozen=True)
class TSDBSnapshot:
    """An O(series) copy of the store: arrays are shared and copied on the next write."""

    series: tuple[tuple[Labels, np.ndarray, np.ndarray, int], ...]
    last_scrape: dict[str, frozenset[int]]


MatchersLike = Sequence[Matcher] | Mapping[str, str] | str | None
Check = Callable[[], None]
"""A callback long loops call now and then; it raises to stop them (a query deadline)."""
#: How many series or label values a loop handles between two ``check()`` calls.
_CHECK_EVERY = 256

_MIN_MS = -(2**62)
_MAX_MS = 2**62


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
        return sid

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
        """
        tm = _to_ms(t, 0)
        with self._lock:
            seen: dict[str, set[int]] = {j: set() for j in (jobs or ())}
            for labels, value in samples:
                sid = self._ref_of(labels)
                self._series[sid].append(tm, float(value))
                seen.setdefault(labels.get("job", ""), set()).add(sid)
            self._mark_stale(tm, seen)

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
            seen: dict[str, set[int]] = {j: set() for j in (jobs or ())}
            series = self._series
            for sid, v in zip(refs_l, vals, strict=True):
                if not 0 <= sid < len(series):
                    raise ValueError(f"append_refs: unknown series ref {sid}")
                s = series[sid]
                s.append(tm, v)
                seen.setdefault(labels_get(s.labels, "job"), set()).add(sid)
            self._mark_stale(tm, seen)

    def _mark_stale(self, tm: int, seen: dict[str, set[int]]) -> None:
        for job, sids in seen.items():
            for gone in self._last_scrape.get(job, frozenset()) - sids:
                s = self._series[gone]
                if s.n and s.ts[s.n - 1] < tm:
                    s.append(tm, STALE_NAN)
            self._last_scrape[job] = frozenset(sids)

    def append_sample(self, labels: Mapping[str, str] | Labels, t: float, v: float) -> None:
        """Store one sample without any staleness bookkeeping (used by promqltest ``load``)."""
        self.append_ms(make_labels(labels), _to_ms(t, 0), v)

    def append_ms(self, labels: Labels, t_ms: int, v: float) -> None:
        with self._lock:
            self._series[self._get_or_create(labels)].append(int(t_ms), float(v))

    def clear(self) -> None:
        with self._lock:
            self._series = []
            self._by_labels = {}
            self._postings = {}
            self._last_scrape = {}
            self._ref_cache = {}
            self._rank = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------- snapshots
    def snapshot(self) -> TSDBSnapshot:
        with self._lock:
            for s in self._series:
                s.owned = False
            return TSDBSnapshot(
                series=tuple((s.labels, s.ts, s.vs, s.n) for s in self._series),
                last_scrape=dict(self._last_scrape),
            )

    def restore(self, snap: TSDBSnapshot) -> None:
        if not isinstance(snap, TSDBSnapshot):
            raise TypeError(f"restore() needs a TSDBSnapshot from TSDB.snapshot(), got {type(snap).__name__}")
        with self._lock:
            self.clear()
            for labels, ts, vs, n in snap.series:
                sid = self._get_or_create(labels)
                s = self._series[sid]
                s.ts, s.vs, s.n, s.owned = ts, vs, n, False
            self._last_scrape = dict(snap.last_scrape)

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
        """``sids`` sorted by label set, via a rank table rebuilt only when series were added."""
        if len(self._rank) != len(self._series):
            order = sorted(range(len(self._series)), key=lambda i: self._series[i].labels)
            rank = np.empty(len(order), dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
            self._rank = rank
        arr = np.asarray(sids, dtype=np.int64)
        ordered: list[int] = arr[np.argsort(self._rank[arr], kind="stable")].tolist()  # tolist() is typed Any
        return ordered

    def select_raw(
        self, matchers: Sequence[Matcher], mint: int, maxt: int, check: Check | None = None
    ) -> list[tuple[Labels, np.ndarray, np.ndarray]]:
        """Like :meth:`select_ms` but returns plain ``(labels, ts, vs)`` tuples (the engine's hot path).

        ``check`` is called every few hundred series or label values; it may raise to abandon the
        selection (the engines pass their query deadline).
        """
        with self._lock:
            out = []
            for k, sid in enumerate(self._label_order(self._match_ids(matchers, check))):
                if check is not None and k % _CHECK_EVERY == 0:
                    check()
                s = self._series[sid]
                ts = s.ts[: s.n]
                lo = int(ts.searchsorted(mint)) if s.n and ts[0] < mint else 0
                hi = s.n if s.n and ts[s.n - 1] <= maxt else int(ts.searchsorted(maxt, "right"))
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
