"""PromQL aggregation operators over all steps at once.

Members of a group are folded in input order, one "rank" at a time, vectorised across groups and
steps; this reproduces Prometheus' sequential semantics (Kahan sums, first-value initialisation,
NaN handling of min/max) without a Python loop per sample.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from itbench_gym.lang.gofloat import format_f

from ..tsdb import Labels
from .errors import Annotations, PromQLError
from .functions import valid_label_name
from .values import LABEL_CACHE_SIZE, Block
from .window_funcs import kahan_cumsum, kahan_inc, quantile_rows

_INT64_MAX = 9.223372036854775807e18
#: Largest (groups x members x steps) a sum is padded to for the fold by accumulation.
_ACCUMULATION_LIMIT = 1 << 20


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def group_key(lb: Labels, grouping: tuple[str, ...], without: bool) -> Labels:
    """The labels ``lb`` is grouped by; cached, as rules group the same series at every evaluation."""
    if without:
        drop = set(grouping) | {"__name__"}
        return tuple(p for p in lb if p[0] not in drop)
    keep = set(grouping)
    return tuple(p for p in lb if p[0] in keep)


def _groups(block: Block, grouping: list[str], without: bool) -> tuple[list[Labels], np.ndarray]:
    index: dict[Labels, int] = {}
    by = tuple(grouping)
    # Groups are numbered in order of first appearance.
    gid = [index.setdefault(group_key(lb, by, without), len(index)) for lb in block.labels]
    return list(index), np.array(gid, dtype=np.int64)


def _ranks(gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(gid, kind="stable")
    sorted_g = gid[order]
    first = np.searchsorted(sorted_g, sorted_g, side="left")
    rank = np.empty(len(gid), dtype=np.int64)
    rank[order] = np.arange(len(gid)) - first
    return rank, order


def aggregate(
    op: str,
    block: Block,
    grouping: list[str],
    without: bool,
    param: np.ndarray | str | None,
    annos: Annotations,
    param_pos: str,
) -> Block:
    n = block.values.shape[1]
    if op == "count_values":
        assert isinstance(param, str)
        return _count_values(block, grouping, without, param)
    if op in ("topk", "bottomk", "limitk", "limit_ratio"):
        assert isinstance(param, np.ndarray)
        return _select_k(op, block, grouping, without, param, annos, param_pos)
    if op == "quantile":
        assert isinstance(param, np.ndarray)
        if np.isnan(param).any():
            annos.warn(f"PromQL warning: quantile value should be between 0 and 1, got NaN ({param_pos})")
        if (param > 1).any():
            annos.warn(f"PromQL warning: quantile value should be between 0 and 1, got {_g(param.max())} ({param_pos})")
        if (param < 0).any():
            annos.warn(f"PromQL warning: quantile value should be between 0 and 1, got {_g(param.min())} ({param_pos})")
    keys, gid = _groups(block, grouping, without)
    g = len(keys)
    if g == 0:
        return Block.empty(n)
    seen = np.zeros((g, n), dtype=bool)
    drop = np.zeros(g, dtype=bool)
    np.logical_or.at(drop, gid, block.drop_name)
    if op == "quantile":
        out = _quantile(block, gid, g, param)  # type: ignore[arg-type]
        np.logical_or.at(seen, gid, block.present)
        return _result(keys, out, seen, drop)
    folded = _fold_by_accumulation(op, block, gid, g)
    if folded is not None:
        return _result(keys, folded[0], folded[1], drop)
    rank, _ = _ranks(gid)
    value = np.zeros((g, n))
    comp = np.zeros((g, n))
    mean = np.zeros((g, n))
    count = np.zeros((g, n))
    incr = np.zeros((g, n), dtype=bool)
    # Each operator keeps only the running state it reads (a sum, the commonest, needs two arrays).
    has_comp, has_mean = op in ("sum", "avg"), op in ("avg", "stddev", "stdvar")
    has_count = op in ("avg", "count", "stddev", "stdvar")
    with np.errstate(all="ignore"):
        for k in range(int(rank.max()) + 1):
            rows = np.nonzero(rank == k)[0]
            grp = gid[rows]
            f = block.values[rows]
            ok = block.present[rows]
            seen_g = seen[grp]
            first = ok & ~seen_g
            more = ok & seen_g
            # First member seen at a step initialises the group.
            if op in ("stddev", "stdvar"):
                init_v = np.where(np.isnan(f) | np.isinf(f), np.nan, 0.0)
            elif op == "group":
                init_v = np.ones_like(f)
            else:
                init_v = f
            v = np.where(first, init_v, value[grp])
            if has_comp:
                c = np.where(first, 0.0, comp[grp])
            if has_mean:
                mu = np.where(first, f, mean[grp])
            if has_count:
                cnt = np.where(first, 1.0, count[grp])
            if op == "sum":
                nv, nc = kahan_inc(f, v, c)
                v, c = np.where(more, nv, v), np.where(more, nc, c)
            elif op == "avg":
                inc = np.where(first, False, incr[grp])
                cnt = np.where(more, cnt + 1, cnt)
                nv, nc = kahan_inc(f, v, c)
                direct = more & ~inc & ~np.isinf(nv)
                switch = more & ~inc & np.isinf(nv)
                v, c = np.where(direct, nv, v), np.where(direct, nc, c)
                mu = np.where(switch, v / (cnt - 1), mu)
                c = np.where(switch, c / (cnt - 1), c)
                inc = inc | switch
                upd = more & inc
                q = (cnt - 1) / cnt
                m2, c2 = kahan_inc(f / cnt, q * mu, q * c)
                mu, c = np.where(upd, m2, mu), np.where(upd, c2, c)
                incr[grp] = inc
            elif op == "max":
                v = np.where(more & ((v < f) | np.isnan(v)), f, v)
            elif op == "min":
                v = np.where(more & ((v > f) | np.isnan(v)), f, v)
            elif op == "count":
                cnt = np.where(more, cnt + 1, cnt)
            elif op in ("stddev", "stdvar"):
                cnt = np.where(more, cnt + 1, cnt)
                d = f - mu
                mu2 = mu + d / cnt
                v = np.where(more, v + d * (f - mu2), v)
                mu = np.where(more, mu2, mu)
            elif op != "group":
                raise PromQLError(f"unsupported aggregation {op!r}", "bad_data")
            value[grp] = v
            if has_comp:
                comp[grp] = c
            if has_mean:
                mean[grp] = mu
            if has_count:
                count[grp] = cnt
            seen[grp] = seen_g | ok
        if op == "sum":
            out = np.where(np.isinf(value), value, value + comp)
        elif op == "avg":
            out = np.where(incr, mean + comp, value / count + comp / count)
        elif op == "count":
            out = count
        elif op == "stdvar":
            out = value / count
        elif op == "stddev":
            out = np.sqrt(value / count)
        else:
            out = value
    return _result(keys, out, seen, drop)


def _fold_by_accumulation(op: str, block: Block, gid: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``count``, ``group`` and ``sum`` of every group at once: (values, seen), or None where only the
    member-by-member fold is exact.

    A sum is the member fold's Kahan–Neumaier sum bit for bit (:func:`kahan_cumsum`) over the members
    padded into (groups, steps, members), absent ones as 0.0. Adding 0.0 changes nothing only when no
    value is -0.0, and the fold resets its compensation at an infinite total, so those inputs, and
    groups too large to pad, take the member fold.
    """
    n = block.values.shape[1]
    if op in ("count", "group"):
        count = np.zeros((g, n))
        np.add.at(count, gid, block.present)
        seen = count > 0
        return (count if op == "count" else seen.astype(np.float64)), seen
    if op != "sum":
        return None
    used = np.where(block.present, block.values, 0.0)
    if not np.isfinite(used).all() or (np.signbit(used) & (used == 0)).any():
        return None
    rank, _ = _ranks(gid)
    members = int(rank.max()) + 1
    if g * members * n > _ACCUMULATION_LIMIT:
        return None
    x = np.zeros((g, n, members))
    x[gid, :, rank] = used
    seen = np.zeros((g, n), dtype=bool)
    np.logical_or.at(seen, gid, block.present)
    sums = kahan_cumsum(x)
    if sums is None:
        return None
    total, comp = sums
    return total[..., -1] + comp[..., -1], seen


def _result(keys: list[Labels], values: np.ndarray, seen: np.ndarray, drop: np.ndarray) -> Block:
    return Block(list(keys), values, seen, drop).compact()


def _padded(block: Block, gid: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(G, M, N) values and mask plus the row index of each slot (-1 for padding)."""
    rank, _ = _ranks(gid)
    m = int(rank.max()) + 1 if len(rank) else 0
    n = block.values.shape[1]
    vals = np.full((g, m, n), np.nan)
    mask = np.zeros((g, m, n), dtype=bool)
    rows = np.full((g, m), -1, dtype=np.int64)
    vals[gid, rank] = block.values
    mask[gid, rank] = block.present
    rows[gid, rank] = np.arange(len(gid))
    return vals, mask, rows


def _quantile(block: Block, gid: np.ndarray, g: int, q: np.ndarray) -> np.ndarray:
    vals, mask, _ = _padded(block, gid, g)
    gg, m, n = vals.shape
    v2 = vals.transpose(0, 2, 1).reshape(gg * n, m)
    m2 = mask.transpose(0, 2, 1).reshape(gg * n, m)
    qq = np.broadcast_to(q, (gg, n)).reshape(gg * n)
    return quantile_rows(v2, m2, qq).reshape(gg, n)


def _ratio_offset(lb: Labels) -> float:
    """Prometheus' ``HashRatioSampler`` offset: the label-set hash scaled to [0, 1]."""
    raw = b"".join(k.encode() + b"\xff" + v.encode() + b"\xff" for k, v in lb)
    return float(xxh64(raw)) / float(2**64 - 1)


_P1, _P2, _P3, _P4, _P5 = (
    11400714785074694791,
    14029467366897019727,
    1609587929392839161,
    9650029242287828579,
    2870177450012600261,
)
_M64 = 2**64 - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64, the hash Prometheus uses for label sets (``labels.Labels.Hash``)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed, (seed - _P1) & _M64]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], int.from_bytes(data[i + 8 * j : i + 8 * j + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M64
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M64
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _M64
        h = (_rotl(h, 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _M64
        h = (_rotl(h, 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    h ^= h >> 32
    return h


def _select_k(
    op: str, block: Block, grouping: list[str], without: bool, param: np.ndarray, annos: Annotations, pos: str
) -> Block:
    n = block.values.shape[1]
    if op == "limit_ratio":
        if np.all(param == 0):
            return Block.empty(n)
        if np.isnan(param).any():
            raise PromQLError("Ratio value is NaN")
        if param.max() > 1:
            annos.warn(f"PromQL warning: ratio value should be between -1 and 1, got {_g(param.max())}, capping to 1 ({pos})")
        if param.min() < -1:
            annos.warn(f"PromQL warning: ratio value should be between -1 and 1, got {_g(param.min())}, capping to -1 ({pos})")
        if len(block) == 0:
            return Block.empty(n)
        r = np.clip(param, -1.0, 1.0)
        off = np.array([_ratio_offset(lb) for lb in block.labels])[:, None]
        keep = np.where(r >= 0, off < r, off >= 1.0 + r) & (r != 0)
        present = block.present & keep
        return Block(block.labels, block.values, present, block.drop_name).compact()
    if param.max() < 1:
        return Block.empty(n)
    if np.isnan(param).any():
        raise PromQLError("Parameter value is NaN")
    if len(block) == 0:
        return Block.empty(n)
    if param.min() <= -_INT64_MAX:
        raise PromQLError(f"Scalar value {_g(param.min())} underflows int64")
    if param.max() >= _INT64_MAX:
        raise PromQLError(f"Scalar value {_g(param.max())} overflows int64")
    k = np.minimum(np.trunc(param), len(block))
    keys, gid = _groups(block, grouping, without)
    vals, mask, rows = _padded(block, gid, len(keys))
    g, m, _ = vals.shape
    slot = np.broadcast_to(np.arange(m)[None, :, None], vals.shape)
    if op == "limitk":
        order = np.lexsort((slot, ~mask), axis=1)
    else:
        nan = np.isnan(vals)
        key = np.where(nan, 0.0, vals)
        key = -key if op == "topk" else key
        order = np.lexsort((slot, key, nan, ~mask), axis=1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.broadcast_to(np.arange(m)[None, :, None], order.shape), axis=1)
    chosen = mask & (ranks < k[None, None, :])
    present = np.zeros_like(block.present)
    valid = rows >= 0
    present[rows[valid]] = chosen[valid]
    result = Block(block.labels, block.values, present & block.present, block.drop_name)
    if n == 1:
        # Instant queries keep Prometheus' output order: by group, then by rank.
        seq = [int(rows[gi, order[gi, j, 0]]) for gi in range(g) for j in range(m) if chosen[gi, order[gi, j, 0], 0]]
        return result.take(seq)
    return result.compact()


def _count_values(block: Block, grouping: list[str], without: bool, label: str) -> Block:
    if not valid_label_name(label):
        raise PromQLError(f"invalid label name {_quote(label)}")
    n = block.values.shape[1]
    grp = tuple(grouping) if without else tuple(sorted(set(grouping) | {label}))
    counts: dict[Labels, np.ndarray] = {}
    order: list[Labels] = []
    for i, lb in enumerate(block.labels):
        for step in np.nonzero(block.present[i])[0]:
            value = format_f(float(block.values[i, step]))
            full = tuple(sorted([p for p in lb if p[0] != label] + [(label, value)]))
            key = group_key(full, grp, without)
            arr = counts.get(key)
            if arr is None:
                arr = counts[key] = np.zeros(n)
                order.append(key)
            arr[step] += 1
    if not order:
        return Block.empty(n)
    values = np.array([counts[k] for k in order])
    return Block(order, values, values > 0, np.zeros(len(order), dtype=bool))


def _quote(s: str) -> str:
    """Go's ``%q`` for label names: printable ASCII verbatim, other bytes as ``\\xNN``."""
    out = ['"']
    for b in s.encode("utf-8", errors="surrogateescape"):
        ch = chr(b)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= b < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\x{b:02x}")
    out.append('"')
    return "".join(out)


def _g(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x != x:
        return "NaN"
    r = repr(float(x))
    return r[:-2] if r.endswith(".0") else r
