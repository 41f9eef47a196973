"""Evaluation-time values: every instant vector is evaluated for all query steps at once.

A :class:`Block` holds one row per output series and one column per evaluation step, with a
presence mask (a series can be absent at some steps). Range vectors are :class:`Windows`: all
selected samples flattened into two arrays plus per-(series, step) index bounds, so range
functions are numpy reductions over windows instead of Python loops.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ..tsdb import Labels, labels_get
from .errors import PromQLError

SAME_LABELSET = "vector cannot contain metrics with the same labelset"


@dataclass
class Block:
    labels: list[Labels]
    values: np.ndarray  # (S, N) float64
    present: np.ndarray  # (S, N) bool
    drop_name: np.ndarray  # (S,) bool: __name__ is to be removed (delayed name removal)

    @staticmethod
    def empty(n: int) -> Block:
        return Block([], np.zeros((0, n)), np.zeros((0, n), dtype=bool), np.zeros(0, dtype=bool))

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, rows: np.ndarray | list[int]) -> Block:
        rows = np.asarray(rows, dtype=np.int64)
        return Block([self.labels[i] for i in rows], self.values[rows], self.present[rows], self.drop_name[rows])

    def compact(self) -> Block:
        """Drop rows that are absent at every step."""
        keep = self.present.any(axis=1)
        if keep.all():
            return self
        return self.take(np.nonzero(keep)[0])


METADATA_LABELS = frozenset({"__name__", "__type__", "__unit__"})


#: How many label sets the per-label-set caches below keep (rule evaluation meets the same few
#: thousand series at every evaluation).
LABEL_CACHE_SIZE = 1 << 14


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def without_name(labels: Labels) -> Labels:
    """Drop the metric name together with the type/unit metadata labels (Prometheus' ``DropReserved``).

    Cached: every evaluation of a rule drops the names of the same series again.
    """
    return tuple(p for p in labels if p[0] not in METADATA_LABELS)


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def metric_name(labels: Labels) -> str:
    """The ``__name__`` of a label set ("" when it has none); cached like :func:`without_name`."""
    return labels_get(labels, "__name__")


def drop_names_now(block: Block) -> Block:
    """Remove ``__name__`` from flagged rows and merge rows that collide."""
    if not block.drop_name.any():
        return block
    if block.drop_name.all():
        labels = list(map(without_name, block.labels))
    else:
        labels = [without_name(lb) if d else lb for lb, d in zip(block.labels, block.drop_name.tolist(), strict=True)]
    return merge_same_labels(Block(labels, block.values, block.present, np.zeros(len(labels), dtype=bool)))


def merge_same_labels(block: Block, message: str = SAME_LABELSET) -> Block:
    """Merge rows with identical labels; two of them present at the same step is an error."""
    if len(set(block.labels)) == len(block.labels):
        return block
    index: dict[Labels, int] = {}
    groups: list[list[int]] = []
    for i, lb in enumerate(block.labels):
        j = index.get(lb)
        if j is None:
            index[lb] = len(groups)
            groups.append([i])
        else:
            groups[j].append(i)
    if len(groups) == len(block.labels):
        return block
    n = block.values.shape[1]
    values = np.zeros((len(groups), n))
    present = np.zeros((len(groups), n), dtype=bool)
    drop = np.zeros(len(groups), dtype=bool)
    labels = []
    for g, rows in enumerate(groups):
        labels.append(block.labels[rows[0]])
        if len(rows) == 1:
            values[g], present[g], drop[g] = block.values[rows[0]], block.present[rows[0]], block.drop_name[rows[0]]
            continue
        cnt = block.present[rows].sum(axis=0)
        if (cnt > 1).any():
            raise PromQLError(message)
        for r in rows:
            m = block.present[r]
            values[g][m] = block.values[r][m]
        present[g] = cnt > 0
        drop[g] = block.drop_name[rows].any()
    return Block(labels, values, present, drop)


@dataclass
class Windows:
    """Range-vector samples for every (series, step): ``ts[lo[s, i]:hi[s, i]]`` is one window."""

    labels: list[Labels]
    drop_name: np.ndarray  # (S,)
    ts: np.ndarray  # flat int64 ms
    vs: np.ndarray  # flat float64
    starts: np.ndarray  # (S+1,) offsets of each series in the flat arrays
    lo: npt.NDArray[np.int64]  # (S, N)
    hi: npt.NDArray[np.int64]  # (S, N)
    end: np.ndarray  # (N,) window end (inclusive) per step, ms
    range: int  # window length, ms

    @property
    def count(self) -> npt.NDArray[np.int64]:
        return self.hi - self.lo


def flatten(arrays: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate per-series ``(ts, vs)`` arrays, returning flat arrays and series offsets."""
    lens = np.fromiter((len(t) for t, _ in arrays), dtype=np.int64, count=len(arrays))
    starts = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    if not arrays:
        return np.zeros(0, dtype=np.int64), np.zeros(0), starts
    return np.concatenate([t for t, _ in arrays]), np.concatenate([v for _, v in arrays]), starts


def search(
    ts: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], query: npt.NDArray[np.int64], side: Literal["left", "right"]
) -> npt.NDArray[np.intp]:
    """Per-series ``searchsorted``: for each series s and query time q[s, i] (or q[i])."""
    n_series = len(starts) - 1
    q = np.broadcast_to(query, (n_series,) + np.shape(query)[-1:]) if np.ndim(query) == 1 else query
    if len(ts) == 0 or n_series == 0:
        return np.broadcast_to(starts[:-1, None], q.shape).copy()
    base = int(ts.min()) - 1
    span = int(ts.max()) - base + 2
    if n_series * span < 2**62:
        sid = np.repeat(np.arange(n_series, dtype=np.int64), np.diff(starts))
        keys = sid * span + (ts - base)
        qk = np.arange(n_series, dtype=np.int64)[:, None] * span + np.clip(q - base, 0, span - 1)
        return np.searchsorted(keys, qk, side=side)
    out = np.empty(q.shape, dtype=np.int64)
    for s in range(n_series):
        a, b = starts[s], starts[s + 1]
        out[s] = a + np.searchsorted(ts[a:b], q[s], side=side)
    return out


