"""Range-vector functions (``rate``, ``*_over_time``, ...) evaluated over all windows at once.

Windows are gathered into a padded ``(windows, max_len)`` matrix in bounded chunks; sequential
algorithms from Prometheus (Kahan summation, extrapolation, Welford variance) run column by column
across all windows, so the results match Prometheus bit for bit where it matters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import PromQLError
from .values import Windows

_CHUNK_ELEMS = 2_000_000


@dataclass
class Win:
    """One chunk of gathered windows."""

    v: np.ndarray  # (M, W) values, padded with NaN
    t: np.ndarray  # (M, W) int64 timestamps (ms), padded with the last valid one
    mask: np.ndarray  # (M, W) bool
    cnt: np.ndarray  # (M,) samples per window
    end: np.ndarray  # (M,) window end, ms
    step_t: np.ndarray  # (M,) evaluation time of the step, ms
    range: int  # ms
    args: list[np.ndarray]  # scalar arguments per window (M,) each

    def last(self) -> np.ndarray:
        idx = np.maximum(self.cnt - 1, 0)
        return np.take_along_axis(self.v, idx[:, None], axis=1)[:, 0]

    def last_t(self) -> np.ndarray:
        idx = np.maximum(self.cnt - 1, 0)
        return np.take_along_axis(self.t, idx[:, None], axis=1)[:, 0]

    def prev(self) -> tuple[np.ndarray, np.ndarray]:
        idx = np.maximum(self.cnt - 2, 0)
        return (
            np.take_along_axis(self.v, idx[:, None], axis=1)[:, 0],
            np.take_along_axis(self.t, idx[:, None], axis=1)[:, 0],
        )


WindowFn = Callable[[Win], tuple[np.ndarray, np.ndarray]]


def apply(w: Windows, fn: WindowFn, step_t: np.ndarray, args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Run ``fn`` over every (series, step) window; returns ``(values, present)`` shaped (S, N)."""
    fast = _FAST.get(fn)
    if fast is not None and len(w.ts):
        quick = fast(w)
        if quick is not None:
            return quick
    s, n = w.lo.shape
    lo = w.lo.ravel()
    cnt = (w.hi - w.lo).ravel()
    m = len(lo)
    values = np.full(m, np.nan)
    present = np.zeros(m, dtype=bool)
    nonempty = np.nonzero(cnt > 0)[0]
    if len(nonempty) == 0 or len(w.ts) == 0:
        return values.reshape(s, n), present.reshape(s, n)
    width = int(cnt.max())
    chunk = max(1, _CHUNK_ELEMS // max(width, 1))
    ends = np.broadcast_to(w.end, (s, n)).ravel()
    steps = np.broadcast_to(step_t, (s, n)).ravel()
    flat_args = [np.broadcast_to(a, (s, n)).ravel() for a in args]
    cols = np.arange(width)
    for a in range(0, len(nonempty), chunk):
        sel = nonempty[a : a + chunk]
        c = cnt[sel]
        wmax = int(c.max())
        mask = cols[None, :wmax] < c[:, None]
        idx = lo[sel][:, None] + cols[None, :wmax]
        idx = np.where(mask, idx, (lo[sel] + c - 1)[:, None])
        v = np.where(mask, w.vs[idx], np.nan)
        win = Win(v, w.ts[idx], mask, c, ends[sel], steps[sel], w.range, [x[sel] for x in flat_args])
        out, ok = fn(win)
        values[sel] = out
        present[sel] = ok
    return values.reshape(s, n), present.reshape(s, n)


def kahan_inc(inc: np.ndarray, total: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised Kahan–Neumaier step, as Prometheus' ``kahansum.Inc``."""
    t = total + inc
    big = np.abs(total) >= np.abs(inc)
    c2 = np.where(big, c + ((total - t) + inc), c + ((inc - t) + total))
    c2 = np.where(np.isinf(t), 0.0, c2)
    return t, c2


def kahan_cumsum(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Every running Kahan–Neumaier sum along the last axis from 0, bit for bit what :func:`kahan_inc`
    gives element by element in order: (totals, compensations), each with a leading 0 entry.

    ``np.cumsum`` adds in order, so the running totals are the loop's; each step's compensation term
    follows from two consecutive totals, and a second ``cumsum`` adds the terms in order. None when a
    total is not finite (there the loop resets its compensation): callers fold element by element.
    """
    zeros = np.zeros((*x.shape[:-1], 1))
    with np.errstate(all="ignore"):
        total = np.cumsum(np.concatenate([zeros, x], axis=-1), axis=-1)
        if not np.isfinite(total).all():
            return None
        before, after = total[..., :-1], total[..., 1:]
        term = np.where(np.abs(before) >= np.abs(x), (before - after) + x, (x - after) + before)
        return total, np.cumsum(np.concatenate([zeros, term], axis=-1), axis=-1)


def _windows_sums(win: Win, columns: tuple[np.ndarray, ...]) -> list[np.ndarray] | None:
    """Each (windows, samples) array's compensated sum over every window's samples (a prefix of its
    row), as the column-by-column fold computes it; None where only that fold is exact."""
    rows = np.arange(len(win.cnt))
    out = []
    for x in columns:
        sums = kahan_cumsum(x)
        if sums is None:
            return None
        total, comp = sums
        out.append(total[rows, win.cnt] + comp[rows, win.cnt])
    return out


def _errstate() -> np.errstate:
    return np.errstate(all="ignore")


def _extrapolate(
    result: np.ndarray, v0: np.ndarray, t0: np.ndarray, tl: np.ndarray, end: Any, range_ms: Any,
    cnt: np.ndarray, is_counter: bool, is_rate: bool,
) -> np.ndarray:
    """Prometheus' extrapolation of a window's delta to the window edges (times in ms)."""
    dur_start = (t0 - (end - range_ms)) / 1000.0
    dur_end = (end - tl) / 1000.0
    sampled = (tl - t0) / 1000.0
    avg = sampled / np.maximum(cnt - 1, 1)
    threshold = avg * 1.1
    dur_start = np.where(dur_start >= threshold, avg / 2, dur_start)
    if is_counter:
        to_zero = np.where((result > 0) & (v0 >= 0), sampled * (v0 / result), dur_start)
        dur_start = np.where(to_zero < dur_start, to_zero, dur_start)
    dur_end = np.where(dur_end >= threshold, avg / 2, dur_end)
    factor = np.where(sampled != 0, (sampled + dur_start + dur_end) / np.where(sampled != 0, sampled, 1), 1.0)
    if is_rate:
        factor = factor / (range_ms / 1000.0)
    return result * factor


# --------------------------------------------------------------------------- rates
def _extrapolated(win: Win, is_counter: bool, is_rate: bool) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        v0 = win.v[:, 0]
        t0 = win.t[:, 0]
        vl, tl = win.last(), win.last_t()
        result = vl - v0
        if is_counter:
            drops = (win.v[:, 1:] < win.v[:, :-1]) & win.mask[:, 1:]
            result = result + np.where(drops, win.v[:, :-1], 0.0).sum(axis=1)
        return _extrapolate(result, v0, t0, tl, win.end, win.range, win.cnt, is_counter, is_rate), win.cnt >= 2


def rate(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _extrapolated(win, True, True)


def increase(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _extrapolated(win, True, False)


def delta(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _extrapolated(win, False, False)


def _instant(win: Win, is_rate: bool) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        v1, t1 = win.last(), win.last_t()
        v0, t0 = win.prev()
        dt = t1 - t0
        if is_rate:
            out = np.where(v1 < v0, v1, v1 - v0) / (dt / 1000.0)
        else:
            out = v1 - v0
        return out, (win.cnt >= 2) & (dt != 0)


def irate(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _instant(win, True)


def idelta(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _instant(win, False)


def _regression(win: Win, intercept_t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        init = win.v[:, 0]
        const = (~win.mask[:, 1:] | (win.v[:, 1:] == init[:, None])).all(axis=1)
        f = np.where(win.mask, win.v, 0.0)
        x = np.where(win.mask, (win.t - intercept_t[:, None]) / 1e3, 0.0)
        sums = _windows_sums(win, (x, f, x * f, x * x))
        sx, sy, sxy, sx2 = sums if sums is not None else _regression_sums(win, intercept_t)
        n = win.cnt.astype(np.float64)
        cov = sxy - sx * sy / n
        var = sx2 - sx * sx / n
        slope = cov / var
        intercept = sy / n - slope * sx / n
        inf0 = np.isinf(init)
        slope = np.where(const, np.where(inf0, np.nan, 0.0), slope)
        intercept = np.where(const, np.where(inf0, np.nan, init), intercept)
        return slope, intercept


def _regression_sums(win: Win, intercept_t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Σx, Σy, Σxy, Σx² of the windows' samples, folded column by column (any values, infinities too)."""
    m = len(win.cnt)
    z = np.zeros(m)
    sx, cx, sy, cy, sxy, cxy, sx2, cx2 = z, z, z, z, z, z, z, z
    for k in range(win.v.shape[1]):
        ok = win.mask[:, k]
        f = np.where(ok, win.v[:, k], 0.0)
        x = np.where(ok, (win.t[:, k] - intercept_t) / 1e3, 0.0)
        sx, cx = _masked_inc(ok, x, sx, cx)
        sy, cy = _masked_inc(ok, f, sy, cy)
        sxy, cxy = _masked_inc(ok, x * f, sxy, cxy)
        sx2, cx2 = _masked_inc(ok, x * x, sx2, cx2)
    return sx + cx, sy + cy, sxy + cxy, sx2 + cx2


def _masked_inc(ok: np.ndarray, inc: np.ndarray, total: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t2, c2 = kahan_inc(inc, total, c)
    return np.where(ok, t2, total), np.where(ok, c2, c)


def deriv(win: Win) -> tuple[np.ndarray, np.ndarray]:
    slope, _ = _regression(win, win.t[:, 0])
    return slope, win.cnt >= 2


def predict_linear(win: Win) -> tuple[np.ndarray, np.ndarray]:
    slope, intercept = _regression(win, win.step_t)
    with _errstate():
        return slope * win.args[0] + intercept, win.cnt >= 2


# ---------------------------------------------------------------- counting
def resets(win: Win) -> tuple[np.ndarray, np.ndarray]:
    drops = (win.v[:, 1:] < win.v[:, :-1]) & win.mask[:, 1:]
    return drops.sum(axis=1).astype(np.float64), win.cnt >= 1


def changes(win: Win) -> tuple[np.ndarray, np.ndarray]:
    a, b = win.v[:, :-1], win.v[:, 1:]
    diff = (a != b) & ~(np.isnan(a) & np.isnan(b)) & win.mask[:, 1:]
    return diff.sum(axis=1).astype(np.float64), win.cnt >= 1


# ---------------------------------------------------------------- *_over_time
def sum_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        sums = _windows_sums(win, (np.where(win.mask, win.v, 0.0),))
        if sums is not None:
            return sums[0], win.cnt >= 1
        m = len(win.cnt)
        total, c = np.zeros(m), np.zeros(m)
        for k in range(win.v.shape[1]):
            total, c = _masked_inc(win.mask[:, k], np.where(win.mask[:, k], win.v[:, k], 0.0), total, c)
        return np.where(np.isinf(total), total, total + c), win.cnt >= 1


def avg_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        total = win.v[:, 0].copy()
        c = np.zeros(len(win.cnt))
        mean = np.zeros(len(win.cnt))
        incremental = np.zeros(len(win.cnt), dtype=bool)
        for k in range(1, win.v.shape[1]):
            ok = win.mask[:, k]
            f = win.v[:, k]
            count = float(k + 1)
            new_sum, new_c = kahan_inc(f, total, c)
            direct = ok & ~incremental & ~np.isinf(new_sum)
            switch = ok & ~incremental & np.isinf(new_sum)
            total = np.where(direct, new_sum, total)
            c = np.where(direct, new_c, c)
            mean = np.where(switch, total / (count - 1), mean)
            c = np.where(switch, c / (count - 1), c)
            incremental = incremental | switch
            upd = ok & incremental
            q = (count - 1) / count
            m2, c2 = kahan_inc(f / count, q * mean, q * c)
            mean = np.where(upd, m2, mean)
            c = np.where(upd, c2, c)
        cnt = win.cnt.astype(np.float64)
        out = np.where(incremental, mean + c, total / cnt + c / cnt)
        return out, win.cnt >= 1


def count_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return win.cnt.astype(np.float64), win.cnt >= 1


def present_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return np.ones(len(win.cnt)), win.cnt >= 1


def last_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return win.last(), win.cnt >= 1


def first_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return win.v[:, 0].copy(), win.cnt >= 1


def ts_of_first_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return win.t[:, 0] / 1000.0, win.cnt >= 1


def ts_of_last_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return win.last_t() / 1000.0, win.cnt >= 1


def _compare(win: Win, better: Callable[[np.ndarray, np.ndarray], np.ndarray], want_ts: bool) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        best = win.v[:, 0].copy()
        best_t = win.t[:, 0].copy()
        for k in range(win.v.shape[1]):
            f = win.v[:, k]
            take = win.mask[:, k] & (better(f, best) | np.isnan(best))
            best = np.where(take, f, best)
            best_t = np.where(take, win.t[:, k], best_t)
        return (best_t / 1000.0 if want_ts else best), win.cnt >= 1


def max_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _compare(win, np.greater, False)


def min_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _compare(win, np.less, False)


def ts_of_max_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _compare(win, np.greater_equal, True)


def ts_of_min_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _compare(win, np.less_equal, True)


def quantile_rows(values: np.ndarray, mask: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Prometheus' ``quantile`` per row: NaNs sort first, linear interpolation between ranks."""
    with _errstate():
        n = mask.sum(axis=1)
        key_nan = np.where(np.isnan(values), 0, 1)
        key_val = np.where(np.isnan(values), 0.0, values)
        order = np.lexsort((key_val, key_nan, ~mask), axis=1)
        srt = np.take_along_axis(values, order, axis=1)
        rank = q * (n - 1)
        lower = np.maximum(0, np.floor(rank))
        upper = np.minimum(n - 1, lower + 1)
        weight = rank - np.floor(rank)
        li = np.clip(np.nan_to_num(lower, nan=0), 0, max(values.shape[1] - 1, 0)).astype(np.int64)
        ui = np.clip(np.nan_to_num(upper, nan=0), 0, max(values.shape[1] - 1, 0)).astype(np.int64)
        lv = np.take_along_axis(srt, li[:, None], axis=1)[:, 0]
        uv = np.take_along_axis(srt, ui[:, None], axis=1)[:, 0]
        out = lv * (1 - weight) + uv * weight
        out = np.where(q < 0, -np.inf, np.where(q > 1, np.inf, out))
        return np.where(np.isnan(q) | (n == 0), np.nan, out)


def quantile_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return quantile_rows(win.v, win.mask, win.args[0]), win.cnt >= 1


def _variance(win: Win) -> np.ndarray:
    with _errstate():
        m = len(win.cnt)
        count = np.zeros(m)
        mean, c_mean, aux, c_aux = np.zeros(m), np.zeros(m), np.zeros(m), np.zeros(m)
        for k in range(win.v.shape[1]):
            ok = win.mask[:, k]
            f = win.v[:, k]
            count = count + ok
            d = f - (mean + c_mean)
            mean, c_mean = _masked_inc(ok, d / np.maximum(count, 1), mean, c_mean)
            aux, c_aux = _masked_inc(ok, d * (f - (mean + c_mean)), aux, c_aux)
        return (aux + c_aux) / count


def stdvar_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    return _variance(win), win.cnt >= 1


def stddev_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        return np.sqrt(_variance(win)), win.cnt >= 1


def mad_over_time(win: Win) -> tuple[np.ndarray, np.ndarray]:
    with _errstate():
        half = np.full(len(win.cnt), 0.5)
        median = quantile_rows(win.v, win.mask, half)
        dev = np.abs(win.v - median[:, None])
        out = quantile_rows(dev, win.mask, half)
        has_nan = (np.isnan(win.v) & win.mask).any(axis=1)
        return np.where(has_nan, np.nan, out), win.cnt >= 1


def double_exponential_smoothing(win: Win) -> tuple[np.ndarray, np.ndarray]:
    sf, tf = win.args
    bad_sf = (sf <= 0) | (sf >= 1) | np.isnan(sf)
    if bad_sf.any():
        raise PromQLError(f"invalid smoothing factor. Expected: 0 < sf < 1, got: {_gof(sf[bad_sf][0])}")
    bad_tf = (tf <= 0) | (tf >= 1) | np.isnan(tf)
    if bad_tf.any():
        raise PromQLError(f"invalid trend factor. Expected: 0 < tf < 1, got: {_gof(tf[bad_tf][0])}")
    with _errstate():
        s1 = win.v[:, 0].copy()
        b = win.v[:, 1] - win.v[:, 0] if win.v.shape[1] > 1 else np.zeros(len(win.cnt))
        s0 = np.zeros(len(win.cnt))
        for i in range(1, win.v.shape[1]):
            ok = win.mask[:, i]
            x = sf * win.v[:, i]
            if i - 1 == 0:
                nb = b
            else:
                nb = tf * (s1 - s0) + (1 - tf) * b
            y = (1 - sf) * (s1 + nb)
            b = np.where(ok, nb, b)
            s0 = np.where(ok, s1, s0)
            s1 = np.where(ok, x + y, s1)
        return s1, win.cnt >= 2


def _gof(x: float) -> str:
    return f"{x:f}"


# ------------------------------------------------------------------ fast paths
# Functions that only need the window's end points (plus prefix sums of resets/changes) are computed
# straight from index arithmetic on the flat arrays, without gathering the windows.
def _ends(w: Windows) -> tuple[np.ndarray, ...]:
    lo, hi = w.lo, w.hi
    cnt = hi - lo
    first = np.minimum(lo, len(w.ts) - 1)
    last = np.clip(hi - 1, 0, len(w.ts) - 1)
    return cnt, first, last


def _prefix(flags: np.ndarray, w: Windows) -> np.ndarray:
    """Prefix sums of per-sample flags, zeroed at series starts (flag i compares samples i-1 and i)."""
    f = flags.copy()
    f[w.starts[:-1][w.starts[:-1] < len(f)]] = 0
    out = np.zeros(len(f) + 1, dtype=f.dtype)
    np.cumsum(f, out=out[1:])
    return out


def _pairs(w: Windows) -> tuple[np.ndarray, np.ndarray]:
    prev = np.concatenate([[np.nan], w.vs[:-1]])
    return prev, w.vs


def _fast_rate(w: Windows, is_counter: bool, is_rate: bool) -> tuple[np.ndarray, np.ndarray] | None:
    cnt, first, last = _ends(w)
    v0, vl = w.vs[first], w.vs[last]
    t0, tl = w.ts[first], w.ts[last]
    with _errstate():
        result = vl - v0
        if is_counter:
            prev, cur = _pairs(w)
            drop = np.where(cur < prev, prev, 0.0)
            if not np.isfinite(drop).all():
                return None
            pref = _prefix(drop, w)
            result = result + (pref[w.hi] - pref[np.minimum(w.lo + 1, len(w.ts))])
        return _extrapolate(result, v0, t0, tl, w.end[None, :], w.range, cnt, is_counter, is_rate), cnt >= 2


def _fast_instant(w: Windows, is_rate: bool) -> tuple[np.ndarray, np.ndarray]:
    cnt, _, last = _ends(w)
    prev_i = np.maximum(last - 1, 0)
    v1, v0 = w.vs[last], w.vs[prev_i]
    dt = w.ts[last] - w.ts[prev_i]
    with _errstate():
        out = np.where(v1 < v0, v1, v1 - v0) / (dt / 1000.0) if is_rate else v1 - v0
    return out, (cnt >= 2) & (dt != 0)


def _fast_count_flags(w: Windows, flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pref = _prefix(flags.astype(np.int64), w)
    cnt = w.hi - w.lo
    out = pref[w.hi] - pref[np.minimum(w.lo + 1, len(w.ts))]
    return np.where(cnt >= 1, out, 0).astype(np.float64), cnt >= 1


def _fast_resets(w: Windows) -> tuple[np.ndarray, np.ndarray]:
    prev, cur = _pairs(w)
    return _fast_count_flags(w, cur < prev)


def _fast_changes(w: Windows) -> tuple[np.ndarray, np.ndarray]:
    prev, cur = _pairs(w)
    return _fast_count_flags(w, (cur != prev) & ~(np.isnan(cur) & np.isnan(prev)))


def _fast_pick(w: Windows, which: str) -> tuple[np.ndarray, np.ndarray]:
    cnt, first, last = _ends(w)
    idx = first if "first" in which else last
    if which.startswith("ts"):
        return w.ts[idx] / 1000.0, cnt >= 1
    return w.vs[idx].copy(), cnt >= 1


_FAST: dict[WindowFn, Callable[[Windows], tuple[np.ndarray, np.ndarray] | None]] = {}


RANGE_FUNCS: dict[str, WindowFn] = {
    "rate": rate,
    "increase": increase,
    "delta": delta,
    "irate": irate,
    "idelta": idelta,
    "deriv": deriv,
    "predict_linear": predict_linear,
    "resets": resets,
    "changes": changes,
    "sum_over_time": sum_over_time,
    "avg_over_time": avg_over_time,
    "count_over_time": count_over_time,
    "present_over_time": present_over_time,
    "last_over_time": last_over_time,
    "first_over_time": first_over_time,
    "ts_of_first_over_time": ts_of_first_over_time,
    "ts_of_last_over_time": ts_of_last_over_time,
    "max_over_time": max_over_time,
    "min_over_time": min_over_time,
    "ts_of_max_over_time": ts_of_max_over_time,
    "ts_of_min_over_time": ts_of_min_over_time,
    "quantile_over_time": quantile_over_time,
    "stddev_over_time": stddev_over_time,
    "stdvar_over_time": stdvar_over_time,
    "mad_over_time": mad_over_time,
    "double_exponential_smoothing": double_exponential_smoothing,
}

_FAST.update(
    {
        rate: lambda w: _fast_rate(w, True, True),
        increase: lambda w: _fast_rate(w, True, False),
        delta: lambda w: _fast_rate(w, False, False),
        irate: lambda w: _fast_instant(w, True),
        idelta: lambda w: _fast_instant(w, False),
        resets: _fast_resets,
        changes: _fast_changes,
        count_over_time: lambda w: ((w.hi - w.lo).astype(np.float64), w.hi > w.lo),
        present_over_time: lambda w: (np.ones(w.lo.shape), w.hi > w.lo),
        last_over_time: lambda w: _fast_pick(w, "last"),
        first_over_time: lambda w: _fast_pick(w, "first"),
        ts_of_last_over_time: lambda w: _fast_pick(w, "ts_last"),
        ts_of_first_over_time: lambda w: _fast_pick(w, "ts_first"),
    }
)
