"""Evaluate LogQL over the twin's synthesised container logs.

Log queries scan the matching streams in time chunks in the query's direction and stop once the
limit is reached. Metric queries select the entries of the whole span once, group them into
series, and compute every step with numpy (a range query costs little more than an instant one):
a series is a float array over the steps with NaN where Loki would have no sample.

Every query runs under a :class:`~.limits.QueryBudget`: its deadline is checked while entries are
scanned and steps computed, and its templates' output is counted (see :mod:`.limits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from itbench_gym.backends.sim.app.logs import StreamInfo
from itbench_gym.backends.sim.promql.binops import scalar_scalar

from . import ast as A
from .errors import LogQLError, PipelineError
from .labels import DETECTED_LEVEL, line_level, stream_labels
from .limits import (
    MAX_ENTRIES,
    MAX_POINTS,
    MAX_QUERY_LENGTH_S,
    MAX_SERIES,
    QUERY_TIMEOUT_S,
    LimitError,
    QueryBudget,
    check_matchers,
    series_limit_error,
)
from .matching import convert_duration, parse_bytes
from .pipeline import ERROR, ERROR_DETAILS, Labels, Pipeline, label_filter
from .syntax import parse

#: Entries scanned between two deadline checks.
_CHECK_EVERY = 256
#: Log queries scan this much time per round before checking whether the limit is reached.
_SCAN_CHUNK_S = 300.0

Key = tuple[tuple[str, str], ...]


class LogSource(Protocol):
    """What the engine reads: the twin's ``AppModel`` satisfies it."""

    def log_streams(self, start: float, end: float) -> list[StreamInfo]: ...

    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]: ...


@dataclass
class Stats:
    lines: int = 0
    bytes: int = 0
    streams: int = 0

    def to_api(self, returned: int) -> dict[str, object]:
        """A subset of Loki's ``stats`` object; times are 0 because the clock is simulated."""
        return {"summary": {"bytesProcessedPerSecond": 0, "linesProcessedPerSecond": 0,
                            "totalBytesProcessed": self.bytes, "totalLinesProcessed": self.lines,
                            "execTime": 0, "queueTime": 0, "totalEntriesReturned": returned},
                "querier": {"store": {"totalChunksRef": self.streams}}}


@dataclass
class Streams:
    """A log query's result: (labels, [(t, line), ...]) in the query's direction."""

    streams: list[tuple[Labels, list[tuple[float, str]]]]
    stats: Stats


@dataclass
class Series:
    """A metric query's result over ``steps``; ``scalar`` holds a scalar result's values."""

    steps: np.ndarray
    series: dict[Key, np.ndarray] = field(default_factory=dict)
    scalar: np.ndarray | None = None
    stats: Stats = field(default_factory=Stats)


def _key(labels: Labels) -> Key:
    return tuple(sorted(labels.items()))


def format_labels(labels: Labels | Key) -> str:
    items = labels.items() if isinstance(labels, dict) else labels
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(items)) + "}"


class Engine:
    """LogQL over the log store (every stream ``source`` holds, of any namespace); ``timeout`` is each
    query's wall-clock budget (None: no deadline)."""

    def __init__(self, source: LogSource, timeout: float | None = QUERY_TIMEOUT_S) -> None:
        self.source = source
        self.timeout = timeout

    # -- selection --------------------------------------------------------------------------
    def select_streams(self, matchers: tuple[A.Matcher, ...], start: float, end: float) -> list[tuple[StreamInfo, Labels]]:
        """Streams that existed in [start, end] and match every matcher, with their labels."""
        out = []
        for info in self.source.log_streams(start, end):
            labels = stream_labels(info)
            if all(m.matches(labels.get(m.name, "")) for m in matchers):
                out.append((info, labels))
        return out

    def _entries(self, selector: A.LogSelector, start: float, end: float, include_start: bool,
                 stats: Stats, budget: QueryBudget) -> Iterable[tuple[float, str, Labels]]:
        """Entries in [start, end] (or (start, end]) that survive the pipeline, stream by stream.

        Entries of one stream and level share one label dict when the pipeline only filters lines;
        callers must copy before changing labels.
        """
        streams = self.select_streams(selector.matchers, start, end)
        stats.streams += len(streams)
        for info, labels in streams:
            budget.check()
            pipeline = Pipeline(selector.stages, frozenset(labels), budget)
            by_level: dict[str, Labels] = {}
            for k, (t, line) in enumerate(self.source.log_lines(info.namespace, info.pod, info.container, start, end)):
                if k % _CHECK_EVERY == 0:
                    budget.check()
                if not include_start and t <= start:
                    continue
                stats.lines += 1
                stats.bytes += len(line)
                level = line_level(line)
                base = by_level.get(level)
                if base is None:
                    base = by_level[level] = {**labels, DETECTED_LEVEL: level}
                out = pipeline.process(t, line, base)
                if out is not None:
                    yield t, out[0], out[1]

    # -- log queries --------------------------------------------------------------------------
    def logs(self, query: str | A.Expr, start: float, end: float, limit: int, direction: str) -> Streams:
        """Entries in [start, end), newest first when ``direction`` is backward."""
        expr = parse(query) if isinstance(query, str) else query
        if not isinstance(expr, A.LogSelector):
            raise LogQLError("expected a log query (a stream selector with an optional pipeline)")
        check_matchers(expr)
        if limit > MAX_ENTRIES:
            raise LimitError(f"max entries limit per query exceeded, limit > max_entries_limit_per_query ({limit} > {MAX_ENTRIES})")
        budget = QueryBudget.start(self.timeout)
        stats = Stats()
        backward = direction == "backward"
        found: list[tuple[float, str, Labels]] = []
        edges = np.arange(start, end, _SCAN_CHUNK_S).tolist() + [end]
        chunks = list(zip(edges[:-1], edges[1:], strict=True))
        for lo, hi in (reversed(chunks) if backward else chunks):
            found += [e for e in self._entries(expr, lo, hi, True, stats, budget) if e[0] < hi]
            if len(found) >= limit:
                break
        found.sort(key=lambda e: e[0], reverse=backward)
        found = found[:limit]
        grouped: dict[Key, tuple[Labels, list[tuple[float, str]]]] = {}
        for t, line, labels in found:
            grouped.setdefault(_key(labels), (labels, []))[1].append((t, line))
        return Streams([grouped[k] for k in sorted(grouped)], stats)

    # -- metric queries -----------------------------------------------------------------------
    def metrics(self, query: str | A.Expr, start: float, end: float, step: float) -> Series:
        """Evaluate at start, start+step, ..., end (one step when start == end)."""
        expr = parse(query) if isinstance(query, str) else query
        if isinstance(expr, A.LogSelector):
            raise LogQLError("log queries are not supported as an instant query type, please change your query to a range query type")
        check_matchers(expr)
        points = 1.0 if step <= 0 or end <= start else math.floor((end - start) / step + 1e-9) + 1
        if not points <= MAX_POINTS:
            suggested = max(math.ceil((end - start) / MAX_POINTS), 1)
            raise LogQLError("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query "
                             f"resolution (?step={suggested}s)")
        n = int(points)
        steps = start + np.arange(n) * (step if step > 0 else 0.0)
        result = Series(steps)
        value = self._eval(expr, steps, result.stats, QueryBudget.start(self.timeout))
        if isinstance(value, np.ndarray):
            result.scalar = value
        else:
            result.series = {k: v for k, v in value.items() if not np.all(np.isnan(v))}
            if len(result.series) > MAX_SERIES:
                raise series_limit_error()
        return result

    def _eval(self, expr: A.MetricExpr, steps: np.ndarray, stats: Stats,
              budget: QueryBudget) -> dict[Key, np.ndarray] | np.ndarray:
        budget.check()
        if isinstance(expr, A.Literal):
            return np.full(len(steps), expr.value)
        if isinstance(expr, A.VectorLiteral):
            return {(): np.full(len(steps), expr.value)}
        if isinstance(expr, A.RangeAggregation):
            return self._range(expr, steps, stats, budget)
        if isinstance(expr, A.VectorAggregation):
            inner = self._eval(expr.expr, steps, stats, budget)
            if isinstance(inner, np.ndarray):
                inner = {(): inner}
            return _aggregate(expr, inner)
        if isinstance(expr, A.LabelReplace):
            inner = self._eval(expr.expr, steps, stats, budget)
            if isinstance(inner, np.ndarray):
                return inner
            return _label_replace(expr, inner)
        lhs = self._eval(expr.lhs, steps, stats, budget)
        rhs = self._eval(expr.rhs, steps, stats, budget)
        return _binary(expr, lhs, rhs)

    def _range(self, expr: A.RangeAggregation, steps: np.ndarray, stats: Stats,
               budget: QueryBudget) -> dict[Key, np.ndarray]:
        rng = expr.log_range
        if rng.range_s > MAX_QUERY_LENGTH_S:
            raise LimitError("[interval] value exceeds limit")
        lo = float(steps[0]) - rng.range_s - rng.offset_s
        hi = float(steps[-1]) - rng.offset_s
        samples: dict[Key, tuple[list[float], list[float]]] = {}
        extract = _extractor(expr.op, rng.unwrap)
        group = _grouper(expr.grouping)
        keys: dict[int, tuple[Labels, Key]] = {}
        for t, line, labels in self._entries(rng.selector, lo, hi, False, stats, budget):
            got = extract(line, labels)
            if got is None:
                continue
            value, labels = got
            cached = keys.get(id(labels))
            if cached is not None and cached[0] is labels:
                key = cached[1]
            else:
                key = _key(group({k: v for k, v in labels.items() if k != ERROR_DETAILS}))
                keys[id(labels)] = (labels, key)
            ts, vs = samples.setdefault(key, ([], []))
            ts.append(t)
            vs.append(value)
            if len(samples) > MAX_SERIES:
                raise series_limit_error()
        for key in samples:
            err = dict(key).get(ERROR)
            if err:
                raise PipelineError(
                    f"pipeline error: '{err}' for series: '{format_labels(key)}'.\nUse a label filter to intentionally skip "
                    f'this error. (e.g | __error__!="{err}").\nTo skip all potential errors you can match empty errors.'
                    '(e.g __error__="")\nThe label filter can also be specified after unwrap. (e.g | unwrap latency | __error__="" )'
                )
        ends = steps - rng.offset_s
        if expr.op == "absent_over_time":
            return _absent(rng.selector, samples, ends, rng.range_s)
        out: dict[Key, np.ndarray] = {}
        for key, (ts, vs) in samples.items():
            budget.check()
            order = np.argsort(np.asarray(ts), kind="stable")
            t_arr = np.asarray(ts)[order]
            v_arr = np.asarray(vs)[order]
            out[key] = _window(expr.op, expr.param, t_arr, v_arr, ends, rng.range_s, budget)
        return out


# -- range aggregation helpers ------------------------------------------------------------------

def _extractor(op: str, unwrap: A.Unwrap | None) -> Callable[[str, Labels], tuple[float, Labels] | None]:
    if unwrap is None:
        if op in ("bytes_over_time", "bytes_rate"):
            return lambda line, labels: (float(len(line.encode())), labels)
        return lambda line, labels: (1.0, labels)
    conversions: dict[str, Callable[[str], float]] = {"": float, "bytes": parse_bytes, "duration": convert_duration,
                                                      "duration_seconds": convert_duration}
    convert = conversions[unwrap.conversion]
    post = [label_filter(f) for f in unwrap.post_filters]
    name = unwrap.label

    def run(line: str, labels: Labels) -> tuple[float, Labels] | None:
        labels = dict(labels)
        raw = labels.pop(name, None)
        value = math.nan
        if raw is None:
            labels.setdefault(ERROR, "SampleExtractionErr")
            labels.setdefault(ERROR_DETAILS, f"label {name} not found")
        else:
            try:
                value = convert(raw.strip())
            except ValueError as exc:
                labels.setdefault(ERROR, "SampleExtractionErr")
                labels.setdefault(ERROR_DETAILS, str(exc))
        for check in post:
            if not check(labels):
                return None
        return value, labels

    return run


def _grouper(grouping: A.Grouping | None) -> Callable[[Labels], Labels]:
    if grouping is None:
        return lambda labels: labels
    names = set(grouping.labels)
    if grouping.without:
        return lambda labels: {k: v for k, v in labels.items() if k not in names or k == ERROR}
    return lambda labels: {k: v for k, v in labels.items() if k in names or k == ERROR}


def _window(op: str, param: float | None, ts: np.ndarray, vs: np.ndarray, ends: np.ndarray, range_s: float,
            budget: QueryBudget) -> np.ndarray:
    """One series' value at each step end over the left-open window (end - range, end]."""
    left = np.searchsorted(ts, ends - range_s, side="right")
    right = np.searchsorted(ts, ends, side="right")
    count = (right - left).astype(np.float64)
    present = count > 0
    out = np.full(len(ends), np.nan)
    if op in ("count_over_time", "rate", "bytes_over_time", "bytes_rate", "sum_over_time", "avg_over_time"):
        csum = np.concatenate(([0.0], np.cumsum(vs)))
        total = csum[right] - csum[left]
        if op == "count_over_time":
            total = count
        if op in ("rate", "bytes_rate"):
            total = total / range_s
        elif op == "avg_over_time":
            total = np.divide(total, count, out=np.zeros_like(total), where=present)
        out[present] = total[present]
        return out
    for k, i in enumerate(np.nonzero(present)[0].tolist()):
        if k % _CHECK_EVERY == 0:
            budget.check()
        window = vs[left[i]:right[i]]
        out[i] = _reduce(op, param, window, ts[left[i]:right[i]], range_s, float(ends[i]))
    return out


def _reduce(op: str, param: float | None, window: np.ndarray, times: np.ndarray, range_s: float, end: float) -> float:
    if op == "min_over_time":
        return float(np.min(window))
    if op == "max_over_time":
        return float(np.max(window))
    if op == "first_over_time":
        return float(window[0])
    if op == "last_over_time":
        return float(window[-1])
    if op == "stdvar_over_time":
        return float(np.var(window))
    if op == "stddev_over_time":
        return float(np.std(window))
    if op == "quantile_over_time":
        return _quantile(float(param if param is not None else 0.5), window)
    return _counter_rate(window, times, end - range_s, end)


def _quantile(q: float, values: np.ndarray) -> float:
    """Prometheus' quantile: linear interpolation between the closest ranks."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    ordered = np.sort(values)
    rank = q * (len(ordered) - 1)
    lower = int(math.floor(rank))
    upper = min(lower + 1, len(ordered) - 1)
    weight = rank - lower
    return float(ordered[lower] * (1 - weight) + ordered[upper] * weight)


def _counter_rate(values: np.ndarray, times: np.ndarray, range_start: float, range_end: float) -> float:
    """``rate_counter``: Prometheus' extrapolated rate of a counter (resets handled)."""
    if len(values) < 2:
        return math.nan
    increase = float(values[-1] - values[0])
    drops = values[1:] < values[:-1]
    increase += float(np.sum(values[:-1][drops]))
    sampled = float(times[-1] - times[0])
    avg_gap = sampled / (len(values) - 1)
    to_start = float(times[0]) - range_start
    to_end = range_end - float(times[-1])
    threshold = avg_gap * 1.1
    if increase > 0 and values[0] >= 0:
        to_zero = sampled * (float(values[0]) / increase)
        to_start = min(to_start, to_zero)
    extend = sampled + (to_start if to_start < threshold else avg_gap / 2) + (to_end if to_end < threshold else avg_gap / 2)
    return increase * (extend / sampled) / (range_end - range_start) if sampled > 0 else math.nan


def _absent(selector: A.LogSelector, samples: dict[Key, tuple[list[float], list[float]]], ends: np.ndarray,
            range_s: float) -> dict[Key, np.ndarray]:
    times = np.sort(np.asarray([t for ts, _ in samples.values() for t in ts], dtype=np.float64))
    left = np.searchsorted(times, ends - range_s, side="right")
    right = np.searchsorted(times, ends, side="right")
    labels = {m.name: m.value for m in selector.matchers if m.op == A.EQ}
    return {_key(labels): np.where(right - left == 0, 1.0, np.nan)}


# -- vector aggregation ---------------------------------------------------------------------------

def _group_key(key: Key, grouping: A.Grouping | None) -> Key:
    if grouping is None:
        return ()
    names = set(grouping.labels)
    if grouping.without:
        return tuple((k, v) for k, v in key if k not in names)
    return tuple((k, v) for k, v in key if k in names)


def _aggregate(expr: A.VectorAggregation, series: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
    op = expr.op
    if op in ("sort", "sort_desc"):
        return dict(series)
    groups: dict[Key, list[Key]] = {}
    for key in sorted(series):
        groups.setdefault(_group_key(key, expr.grouping), []).append(key)
    out: dict[Key, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for gkey, members in groups.items():
            block = np.vstack([series[k] for k in members])
            present = ~np.isnan(block)
            count = present.sum(axis=0).astype(np.float64)
            has = count > 0
            if op in ("topk", "bottomk"):
                k = int(expr.param or 0)
                filled = np.where(present, block, -np.inf if op == "topk" else np.inf)
                order = np.argsort(-filled if op == "topk" else filled, axis=0, kind="stable")[:k]
                keep = np.zeros_like(present)
                np.put_along_axis(keep, order, True, axis=0)
                keep &= present
                for i, member in enumerate(members):
                    out[member] = np.where(keep[i], block[i], np.nan)
                continue
            if op == "sum":
                value = np.nansum(block, axis=0)
            elif op == "avg":
                value = np.nansum(block, axis=0) / np.where(has, count, 1)
            elif op == "count":
                value = count
            elif op == "min":
                value = np.nanmin(np.where(present, block, np.inf), axis=0)
            elif op == "max":
                value = np.nanmax(np.where(present, block, -np.inf), axis=0)
            else:
                mean = np.nansum(block, axis=0) / np.where(has, count, 1)
                var = np.nansum(np.where(present, (block - mean) ** 2, 0.0), axis=0) / np.where(has, count, 1)
                value = var if op == "stdvar" else np.sqrt(var)
            out[gkey] = np.where(has, value, np.nan)
    return out


def _label_replace(expr: A.LabelReplace, series: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
    """``label_replace``: the regex is anchored Go (RE2) and ``$1``/``${name}`` expand as Go's ``Expand``."""
    out: dict[Key, np.ndarray] = {}
    for key, values in series.items():
        labels = dict(key)
        m = expr.regex.fullmatch(labels.get(expr.src, ""))
        if m:
            new = expr.regex.expand(m, expr.replacement)
            if new:
                labels[expr.dst] = new
            else:
                labels.pop(expr.dst, None)
        new_key = _key(labels)
        if new_key in out:
            raise LogQLError(f"vector cannot contain metrics with the same labelset: {format_labels(new_key)}")
        out[new_key] = values
    return out


# -- binary operators -----------------------------------------------------------------------------

def _apply(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LogQL's binary operators are PromQL's: arithmetic, or 0/1 for comparisons."""
    return scalar_scalar(op, a, b)


def _combine(expr: A.BinaryOp, value_l: np.ndarray, value_r: np.ndarray, keep_from: np.ndarray) -> np.ndarray:
    """Arithmetic result, or for comparisons 0/1 (``bool``) or ``keep_from`` where true."""
    result = _apply(expr.op, value_l, value_r)
    present = ~np.isnan(value_l) & ~np.isnan(value_r)
    if expr.op in A.COMPARISONS:
        if expr.return_bool:
            return np.where(present, result, np.nan)
        return np.where(present & (result == 1.0), keep_from, np.nan)
    return np.where(present, result, np.nan)


def _signature(key: Key, matching: A.VectorMatching) -> Key:
    names = set(matching.labels)
    if matching.on:
        return tuple((k, v) for k, v in key if k in names)
    return tuple((k, v) for k, v in key if k not in names)


def _binary(expr: A.BinaryOp, lhs: dict[Key, np.ndarray] | np.ndarray,
            rhs: dict[Key, np.ndarray] | np.ndarray) -> dict[Key, np.ndarray] | np.ndarray:
    if isinstance(lhs, np.ndarray) and isinstance(rhs, np.ndarray):
        return _apply(expr.op, lhs, rhs) if expr.op not in A.COMPARISONS or expr.return_bool else \
            np.where(_apply(expr.op, lhs, rhs) == 1.0, lhs, np.nan)
    if isinstance(rhs, np.ndarray):
        return {k: _combine(expr, v, rhs, v) for k, v in lhs.items()}  # type: ignore[union-attr]
    if isinstance(lhs, np.ndarray):
        return {k: _combine(expr, lhs, v, v) for k, v in rhs.items()}
    if expr.op in ("and", "or", "unless"):
        return _set_op(expr, lhs, rhs)
    return _match(expr, lhs, rhs)


def _set_op(expr: A.BinaryOp, lhs: dict[Key, np.ndarray], rhs: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
    n = len(next(iter({**lhs, **rhs}.values()), np.zeros(0)))
    right_present: dict[Key, np.ndarray] = {}
    for k, v in rhs.items():
        sig = _signature(k, expr.matching)
        right_present[sig] = right_present.get(sig, np.zeros(n, dtype=bool)) | ~np.isnan(v)
    if expr.op == "and":
        return {k: np.where(right_present.get(_signature(k, expr.matching), np.zeros(n, dtype=bool)), v, np.nan)
                for k, v in lhs.items()}
    if expr.op == "unless":
        return {k: np.where(right_present.get(_signature(k, expr.matching), np.zeros(n, dtype=bool)), np.nan, v)
                for k, v in lhs.items()}
    left_present: dict[Key, np.ndarray] = {}
    for k, v in lhs.items():
        sig = _signature(k, expr.matching)
        left_present[sig] = left_present.get(sig, np.zeros(n, dtype=bool)) | ~np.isnan(v)
    out = dict(lhs)
    for k, v in rhs.items():
        blocked = left_present.get(_signature(k, expr.matching), np.zeros(n, dtype=bool))
        merged = np.where(blocked, np.nan, v)
        out[k] = np.where(np.isnan(out[k]), merged, out[k]) if k in out else merged
    return out


def _match(expr: A.BinaryOp, lhs: dict[Key, np.ndarray], rhs: dict[Key, np.ndarray]) -> dict[Key, np.ndarray]:
    matching = expr.matching
    many_left = matching.card == "many-to-one"
    one_side, many_side = (rhs, lhs) if matching.card != "one-to-many" else (lhs, rhs)
    ones: dict[Key, list[Key]] = {}
    for k in sorted(one_side):
        ones.setdefault(_signature(k, matching), []).append(k)
    out: dict[Key, np.ndarray] = {}
    for many_key in sorted(many_side):
        sig = _signature(many_key, matching)
        partners = ones.get(sig, [])
        if len(partners) > 1:
            stacked = np.vstack([one_side[p] for p in partners])
            if np.any((~np.isnan(stacked)).sum(axis=0) > 1):
                side = "right" if matching.card != "one-to-many" else "left"
                raise LogQLError(f"found duplicate series for the match group {format_labels(sig)} on the {side} hand-side "
                                 "of the operation; many-to-many matching not allowed: matching labels must be unique on one side")
        for partner in partners:
            left_key, right_key = (many_key, partner) if matching.card != "one-to-many" else (partner, many_key)
            value = _combine(expr, lhs[left_key], rhs[right_key], lhs[left_key])
            result_key = _result_key(expr, many_key, partner, many_left or matching.card == "one-to-many")
            if result_key in out:
                clash = ~np.isnan(out[result_key]) & ~np.isnan(value)
                if np.any(clash):
                    raise LogQLError("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)")
                out[result_key] = np.where(np.isnan(out[result_key]), value, out[result_key])
            else:
                out[result_key] = value
    return out


def _result_key(expr: A.BinaryOp, many_key: Key, one_key: Key, grouped: bool) -> Key:
    matching = expr.matching
    labels = dict(many_key)
    if not grouped:
        names = set(matching.labels)
        if matching.on:
            labels = {k: v for k, v in labels.items() if k in names}
        else:
            labels = {k: v for k, v in labels.items() if k not in names}
        return _key(labels)
    one = dict(one_key)
    for name in matching.include:
        if one.get(name):
            labels[name] = one[name]
        else:
            labels.pop(name, None)
    return _key(labels)
