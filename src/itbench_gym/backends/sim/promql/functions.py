"""Instant-vector and scalar PromQL functions on :class:`~.values.Block` (all steps at once)."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from itbench_gym.lang import regex
from itbench_gym.lang.timestamps import rfc3339

from ..tsdb import Labels, Matcher, labels_get
from .errors import Annotations, PromQLError
from .values import LABEL_CACHE_SIZE, Block
from .window_funcs import quantile_rows


def valid_label_name(name: str) -> bool:
    # Prometheus 3 accepts any valid UTF-8 label name except the empty string.
    return name != "" and _is_utf8(name)


def _is_utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _sgn(x: np.ndarray) -> np.ndarray:
    return np.where(x < 0, -1.0, np.where(x > 0, 1.0, x))


MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs,
    "ceil": np.ceil,
    "floor": np.floor,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "ln": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "rad": lambda x: x * (math.pi / 180),
    "deg": lambda x: x * (180 / math.pi),
    "sgn": _sgn,
}


def math_func(name: str, block: Block) -> Block:
    with np.errstate(all="ignore"):
        vals = MATH[name](block.values)
    return Block(block.labels, vals, block.present, np.ones(len(block), dtype=bool))


def round_func(block: Block, to_nearest: np.ndarray | None) -> Block:
    with np.errstate(all="ignore"):
        inv = 1.0 / (to_nearest if to_nearest is not None else np.ones(block.values.shape[1]))
        vals = np.floor(block.values * inv + 0.5) / inv
    return Block(block.labels, vals, block.present, np.ones(len(block), dtype=bool))


def clamp(block: Block, lo: np.ndarray, hi: np.ndarray) -> Block:
    vals = np.maximum(lo, np.minimum(hi, block.values))
    present = block.present & ~(hi < lo)[None, :]
    return Block(block.labels, vals, present, np.ones(len(block), dtype=bool))


def scalar_of(block: Block) -> np.ndarray:
    n = block.values.shape[1]
    cnt = block.present.sum(axis=0)
    out = np.full(n, np.nan)
    if len(block):
        first = np.argmax(block.present, axis=0)
        single = cnt == 1
        out[single] = block.values[first[single], np.nonzero(single)[0]]
    return out


def vector_of(values: np.ndarray) -> Block:
    n = len(values)
    return Block([()], values[None, :].copy(), np.ones((1, n), dtype=bool), np.zeros(1, dtype=bool))


def absent_labels(matchers: Sequence[Matcher]) -> Labels:
    """Labels for ``absent()``: equality matchers except ``__name__``, dropping names seen twice."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for m in matchers:
        name, op, value = m.name, m.op, m.value
        if name == "__name__":
            continue
        if op == "=" and name not in seen:
            out[name] = value
            seen.add(name)
        else:
            out.pop(name, None)
    return tuple(sorted((k, v) for k, v in out.items() if v != ""))


def date_func(name: str, secs: np.ndarray) -> np.ndarray:
    out = np.full(secs.shape, np.nan)
    flat = secs.ravel()
    res = out.ravel()
    for i, x in enumerate(flat):
        if not math.isfinite(x):
            continue
        t = int(x)
        try:
            dt = datetime.fromtimestamp(t, tz=UTC)
        except (OverflowError, OSError, ValueError):
            continue
        res[i] = _DATE[name](dt)
    return res.reshape(secs.shape)


def _days_in_month(dt: datetime) -> int:
    import calendar

    return calendar.monthrange(dt.year, dt.month)[1]


_DATE: dict[str, Callable[[datetime], float]] = {
    "minute": lambda d: d.minute,
    "hour": lambda d: d.hour,
    "day_of_month": lambda d: d.day,
    "day_of_week": lambda d: (d.weekday() + 1) % 7,
    "day_of_year": lambda d: d.timetuple().tm_yday,
    "days_in_month": _days_in_month,
    "month": lambda d: d.month,
    "year": lambda d: d.year,
}
DATE_FUNCS = frozenset(_DATE)


def date_block(name: str, block: Block) -> Block:
    return Block(block.labels, date_func(name, block.values), block.present, np.ones(len(block), dtype=bool))


def label_replace(block: Block, dst: str, repl: str, src: str, pattern: str) -> Block:
    """Prometheus' ``label_replace``: ``pattern`` is a Go regex anchored as ``^(?s:pattern)$``."""
    try:
        rx = regex.compile(pattern, anchored=True)
    except regex.RegexError:
        raise PromQLError(f"invalid regular expression in label_replace(): {pattern}") from None
    if not valid_label_name(dst):
        raise PromQLError(f"invalid destination label name in label_replace(): {dst}")
    labels = list(block.labels)
    drop = block.drop_name.copy()
    for i, lb in enumerate(labels):
        m = rx.fullmatch(labels_get(lb, src))
        if m is None:
            continue
        value = rx.expand(m, repl)
        labels[i] = _set_label(lb, dst, value)
        drop[i] = False if dst == "__name__" else block.drop_name[i]
    return Block(labels, block.values, block.present, drop)


def label_join(block: Block, dst: str, sep: str, srcs: list[str]) -> Block:
    for s in srcs:
        if not valid_label_name(s):
            raise PromQLError(f"invalid source label name in label_join(): {s}")
    if not valid_label_name(dst):
        raise PromQLError(f"invalid destination label name in label_join(): {dst}")
    labels = []
    drop = block.drop_name.copy()
    for i, lb in enumerate(block.labels):
        labels.append(_set_label(lb, dst, sep.join(labels_get(lb, s) for s in srcs)))
        if dst == "__name__":
            drop[i] = False
    return Block(labels, block.values, block.present, drop)


def _set_label(lb: Labels, name: str, value: str) -> Labels:
    rest = [p for p in lb if p[0] != name]
    if value != "":
        rest.append((name, value))
    return tuple(sorted(rest))


def sort_rows(block: Block, descending: bool) -> Block:
    """Order rows by their value at the first step (sort only matters for instant queries)."""
    if len(block) == 0:
        return block
    v = block.values[:, 0]
    nan = np.isnan(v)
    key = np.where(nan, 0.0, v)
    order = np.lexsort((-key if descending else key, nan))
    return block.take(order)


def _natural_key(s: str) -> list[object]:
    return [(0, int(t), t) if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", s) if t != ""]


def sort_by_label(block: Block, names: list[str], descending: bool) -> Block:
    idx = list(range(len(block)))

    def key(i: int) -> tuple[object, ...]:
        lb = block.labels[i]
        return (tuple(_natural_key(labels_get(lb, n)) for n in names), lb)

    idx.sort(key=key, reverse=descending)
    return block.take(idx)


_BUCKET_TOL = 1e-12


def _almost_equal(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64], eps: float) -> npt.NDArray[np.bool_]:
    with np.errstate(all="ignore"):
        diff = np.abs(a - b)
        both_zero_ish = (a == 0) | (b == 0) | (diff < 2.2250738585072014e-308)
        rel = diff / np.minimum(np.abs(a) + np.abs(b), np.finfo(float).max)
        return np.equal(a, b) | np.where(both_zero_ish, diff < eps * 2.2250738585072014e-308, rel < eps)


@dataclass
class _Fix:
    """Per column of :func:`bucket_quantile`: where buckets had to be fixed for monotonicity.

    ``forced`` flags columns whose quantile used a fixed bucket (and a valid ``q``); ``min_b`` and
    ``max_b`` are the lowest and highest upper bounds fixed in each column (``inf``/``-inf``: none),
    ``max_d`` the largest decrease fixed.
    """

    forced: np.ndarray
    min_b: np.ndarray
    max_b: np.ndarray
    max_d: np.ndarray

    def stats(self, cols: slice) -> tuple[float, float, float]:
        """(min bucket, max bucket, max diff) over some columns, as Prometheus reports them."""
        if not len(self.min_b[cols]):
            return math.inf, -math.inf, 0.0
        return float(self.min_b[cols].min()), float(self.max_b[cols].max()), float(self.max_d[cols].max())


def bucket_quantile(q: np.ndarray, ub: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, _Fix]:
    """Classic-histogram quantile for K columns; ``counts`` is (B, K) with ``ub`` sorted ascending.

    Columns are independent, so one call serves every histogram with the same buckets. Returns the
    quantiles and what was fixed for monotonicity, per column.
    """
    k = counts.shape[1]
    out = np.full(k, np.nan)
    fix = _Fix(np.zeros(k, dtype=bool), np.full(k, math.inf), np.full(k, -math.inf), np.zeros(k))
    # Coalesce equal upper bounds ("1" and "1.0").
    uniq, inv = np.unique(ub, return_inverse=True)
    if len(uniq) != len(ub):
        merged = np.zeros((len(uniq), k))
        np.add.at(merged, inv, counts)
        ub, counts = uniq, merged
    else:
        counts = counts.copy()
    with np.errstate(all="ignore"):
        if not math.isinf(ub[-1]) or ub[-1] < 0:
            res = out
        else:
            prev = counts[0].copy()
            for i in range(1, len(ub)):
                curr = counts[i]
                same = curr == prev
                close = ~same & _almost_equal(prev, curr, _BUCKET_TOL)
                lower = ~same & ~close & (curr < prev)
                if lower.any():
                    fix.forced |= lower
                    fix.min_b = np.where(lower, np.minimum(fix.min_b, ub[i]), fix.min_b)
                    fix.max_b = np.where(lower, np.maximum(fix.max_b, ub[i]), fix.max_b)
                    fix.max_d = np.where(lower, np.maximum(fix.max_d, prev - curr), fix.max_d)
                counts[i] = np.where(close | lower, prev, curr)
                prev = np.where(close | lower, prev, curr)
            res = np.full(k, np.nan)
            if len(ub) >= 2:
                obs = counts[-1]
                rank = q * obs
                ge = counts[:-1] >= rank[None, :]
                b = np.where(ge.any(axis=0), np.argmax(ge, axis=0), len(ub) - 1)
                cb = counts[b, np.arange(k)]
                cprev = np.where(b > 0, counts[np.maximum(b - 1, 0), np.arange(k)], 0.0)
                start = np.where(b > 0, ub[np.maximum(b - 1, 0)], 0.0)
                end = ub[np.minimum(b, len(ub) - 1)]
                interp = start + (end - start) * ((rank - cprev) / (cb - cprev))
                res = np.where(b == len(ub) - 1, ub[-2], np.where((b == 0) & (ub[0] <= 0), ub[0], interp))
                res = np.where(obs == 0, np.nan, res)
                res = np.where(np.isnan(obs), np.nan, res)
        res = np.where(q > 1, np.inf, np.where(q < 0, -np.inf, res))
        res = np.where(np.isnan(q), np.nan, res)
        fix.forced &= ~np.isnan(q) & (q >= 0) & (q <= 1)
        return res, fix


@dataclass
class _Job:
    """The columns of one histogram that share a set of present buckets."""

    group: int
    cols: np.ndarray  # step indices
    rows: np.ndarray  # bucket rows of the block, by ascending bound
    ub: np.ndarray  # their upper bounds


def histogram_quantile(
    q: np.ndarray, block: Block, annos: Annotations, pos: str, delayed: bool, step_times: np.ndarray
) -> Block:
    groups: dict[Labels, list[tuple[float, int]]] = {}
    live_rows = np.asarray(block.present.any(axis=1)).tolist()
    for i, lb in enumerate(block.labels):
        if not live_rows[i]:
            continue
        key, le, bound = _bucket_of(lb)
        if bound is None:
            name = labels_get(lb, "__name__") if delayed else ""
            msg = f'PromQL warning: bucket label "le" is missing or has a malformed value of "{le}"'
            if name:
                msg += f' for metric name "{name}"'
            annos.warn(f"{msg} ({pos})")
            continue
        groups.setdefault(key, []).append((bound, i))
    n = block.values.shape[1]
    keys = list(groups)
    values = np.full((len(keys), n), np.nan)
    present = np.zeros((len(keys), n), dtype=bool)
    jobs: list[_Job] = []
    for g, members in enumerate(groups.values()):
        members.sort()
        ub = np.array([b for b, _ in members])
        rows = np.array([i for _, i in members])
        pres = block.present[rows]
        ok = pres.any(axis=0)
        present[g] = ok
        live = np.nonzero(ok)[0]
        if len(live) and pres[:, live].all():
            jobs.append(_Job(g, live, rows, ub))
            continue
        # Columns (steps) sharing the same set of present buckets are computed together.
        patterns, inverse = np.unique(pres[:, live].T, axis=0, return_inverse=True)
        for p_idx, sel in enumerate(patterns):
            jobs.append(_Job(g, live[inverse.ravel() == p_idx], rows[sel], ub[sel]))
    # Jobs with the same buckets are one bucket_quantile call (its columns are independent).
    batches: dict[bytes, list[int]] = {}
    for j, job in enumerate(jobs):
        batches.setdefault(job.ub.tobytes(), []).append(j)
    fixes: dict[int, tuple[_Fix, slice]] = {}
    for members_j in batches.values():
        cols = [jobs[j].cols for j in members_j]
        counts = np.concatenate([block.values[jobs[j].rows][:, c] for j, c in zip(members_j, cols, strict=True)], axis=1)
        res, fix = bucket_quantile(np.concatenate([q[c] for c in cols]), jobs[members_j[0]].ub, counts)
        at = 0
        for j, c in zip(members_j, cols, strict=True):
            values[jobs[j].group, c] = res[at:at + len(c)]
            fixes[j] = (fix, slice(at, at + len(c)))
            at += len(c)
    mono_msgs: dict[str, list[float]] = {}
    for j, job in enumerate(jobs):
        fix, part = fixes[j]
        forced = fix.forced[part]
        if not forced.any():
            continue
        mn, mx, md = fix.stats(part)
        name = labels_get(keys[job.group], "__name__") if delayed else ""
        base = (
            "PromQL info: input to histogram_quantile needed to be fixed for monotonicity "
            "(see https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile)"
        )
        if name:
            base += f' for metric name "{name}"'
        ts = step_times[job.cols[forced]]
        acc = mono_msgs.setdefault(base, [math.inf, -math.inf, 0.0, 0, math.inf, -math.inf])
        acc[0], acc[1], acc[2] = min(acc[0], mn), max(acc[1], mx), max(acc[2], md)
        acc[3] += int(forced.sum())
        acc[4], acc[5] = min(acc[4], float(ts.min())), max(acc[5], float(ts.max()))
    for base, (mn, mx, md, count, t0, t1) in mono_msgs.items():
        start, end = rfc3339(int(t0 // 1000)), rfc3339(int(t1 // 1000))
        annos.info(
            f"{base}, from buckets {_g(mn)} to {_g(mx)}, with a max diff of {_g2(md)}, over {count} samples "
            f"from {start} to {end} ({pos})"
        )
    if not keys:
        return Block.empty(n)
    return Block(keys, values, present, np.ones(len(keys), dtype=bool))


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def _bucket_of(lb: Labels) -> tuple[Labels, str, float | None]:
    """A bucket series' histogram (its labels without ``le``), ``le`` and its bound (None: malformed).

    Cached: a histogram_quantile rule reads the same bucket series at every evaluation.
    """
    le = labels_get(lb, "le")
    try:
        bound: float | None = _parse_go_float(le)
    except ValueError:
        bound = None
    return tuple(p for p in lb if p[0] != "le"), le, bound


def _parse_go_float(s: str) -> float:
    t = s.strip() if s == s.strip() else None
    if t is None or t == "":
        raise ValueError(s)
    low = t.lower()
    if low in ("inf", "+inf", "infinity", "+infinity"):
        return math.inf
    if low in ("-inf", "-infinity"):
        return -math.inf
    if low == "nan":
        return math.nan
    if "_" in t:
        raise ValueError(s)
    if low.startswith(("0x", "-0x", "+0x")):
        return float.fromhex(t)
    return float(t)


def _g(x: float) -> str:
    """Go's ``%g`` for the values used in annotations."""
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    r = repr(float(x))
    if r.endswith(".0"):
        r = r[:-2]
    return r


def _g2(x: float) -> str:
    s = f"{x:.2g}"
    return s


def quantile_agg(q: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``quantile`` aggregation over a (members, steps) matrix -> (steps,)."""
    return quantile_rows(values.T, mask.T, q)
