"""The PromQL evaluator: Prometheus 3 semantics, vectorised across all query steps.

Every node is evaluated once for the whole step grid (an instant query is a grid of one step), so a
range query or an alert rule evaluated over many steps selects its data once per selector.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from itbench_gym.lang import regex
from itbench_gym.lang.gofloat import format_f

from ..tsdb import TSDB, Labels, is_stale
from . import aggregation, binops, functions, window_funcs
from .ast import (
    COMPARISON_OPS,
    SET_OPS,
    Aggregate,
    At,
    Binary,
    Call,
    MatrixSel,
    Node,
    NumberLit,
    Paren,
    StringLit,
    Subquery,
    Unary,
    VectorSel,
    assign_positions,
    convert,
    line_col,
)
from .errors import Annotations, PromQLError
from .limits import DEFAULT_LIMITS, Deadline, QueryLimits, QueryTimeout
from .parsing import native_parse, regex_error
from .values import Block, Windows, drop_names_now, flatten, merge_same_labels, metric_name, search, without_name

#: Prometheus' ``--query.max-samples`` error.
TOO_MANY_SAMPLES = "query processing would load too many samples into memory in query execution"
#: Prometheus' ``ErrQueryTimeout`` for a query stopped during evaluation.
TIMED_OUT = "query timed out in expression evaluation"
#: Prometheus' MinTime/MaxTime in seconds: the times whose milliseconds fit int64.
MAX_TIME_SECONDS = 9_223_309_901_257_974.0
_NON_COUNTER_SUFFIXES = ("_total", "_sum", "_count", "_bucket")
_NATIVE_HISTOGRAM_FUNCS = frozenset(
    {"histogram_count", "histogram_sum", "histogram_avg", "histogram_stddev", "histogram_stdvar", "histogram_fraction"}
)


@dataclass
class Sample:
    metric: dict[str, str]
    t: float
    value: float


@dataclass
class SeriesPoints:
    metric: dict[str, str]
    points: list[tuple[float, float]]


@dataclass
class Result:
    """A query result. ``type`` is ``vector``, ``matrix``, ``scalar`` or ``string``.

    ``series`` holds ``(labels, timestamps_ms, values)`` per series (one point per series for
    vectors, in result order); ``scalar``/``string`` hold ``(t_ms, value)``.
    """

    type: str
    series: list[tuple[Labels, np.ndarray, np.ndarray]] = field(default_factory=list)
    scalar: tuple[int, float] | None = None
    string: tuple[int, str] | None = None
    warnings: list[str] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)

    @property
    def data(self) -> Any:
        """Python view: list of :class:`Sample` / :class:`SeriesPoints`, or ``(t, value)``."""
        if self.type == "vector":
            return [Sample(dict(lb), ts[0] / 1000.0, float(vs[0])) for lb, ts, vs in self.series]
        if self.type == "matrix":
            return [
                SeriesPoints(dict(lb), [(t / 1000.0, float(v)) for t, v in zip(ts.tolist(), vs.tolist(), strict=True)])
                for lb, ts, vs in self.series
            ]
        if self.type == "scalar":
            assert self.scalar is not None
            return (self.scalar[0] / 1000.0, self.scalar[1])
        assert self.string is not None
        return (self.string[0] / 1000.0, self.string[1])

    def to_api(self) -> dict[str, Any]:
        """The ``data`` member of a Prometheus ``/api/v1/query(_range)`` response."""
        if self.type in ("vector", "matrix"):
            result: Any = [self._api_item(lb, ts, vs) for lb, ts, vs in self.series]
        elif self.type == "scalar":
            assert self.scalar is not None
            result = [_api_time(self.scalar[0]), format_f(self.scalar[1])]
        else:
            assert self.string is not None
            result = [_api_time(self.string[0]), self.string[1]]
        return {"resultType": self.type, "result": result}

    def to_api_json(self, max_bytes: int | None = None) -> str:
        """:meth:`to_api` as JSON text, built series by series so it never grows past ``max_bytes``.

        Raises :class:`ResultTooLarge` as soon as the text would exceed the bound.
        """
        if self.type in ("scalar", "string"):
            return json.dumps(self.to_api())
        parts: list[str] = []
        size = 0
        for lb, ts, vs in self.series:
            text = json.dumps(self._api_item(lb, ts, vs))
            size += len(text) + 1
            if max_bytes is not None and size > max_bytes:
                raise ResultTooLarge(max_bytes)
            parts.append(text)
        return f'{{"resultType": "{self.type}", "result": [{", ".join(parts)}]}}'

    def _api_item(self, lb: Labels, ts: np.ndarray, vs: np.ndarray) -> dict[str, Any]:
        """One series of a vector or matrix result in the API's shape."""
        if self.type == "vector":
            return {"metric": dict(lb), "value": [_api_time(int(ts[0])), format_f(float(vs[0]))]}
        return {"metric": dict(lb),
                "values": [[_api_time(t), format_f(v)] for t, v in zip(ts.tolist(), vs.tolist(), strict=True)]}


class ResultTooLarge(PromQLError):
    """A result whose JSON would exceed the API's response bound (``execution``, HTTP 422)."""

    def __init__(self, max_bytes: int) -> None:
        size = f"{max_bytes >> 20} MiB" if max_bytes % (1 << 20) == 0 else f"{max_bytes:,} bytes"
        super().__init__(
            f"the query result exceeds the {size} response limit; select fewer series "
            "(add label matchers or aggregate) or use a larger step", "execution")


def _api_time(ms: int) -> float | int:
    return ms // 1000 if ms % 1000 == 0 else ms / 1000.0


class _Budget:
    """One query's sample count and deadline (shared by its subqueries)."""

    __slots__ = ("max_samples", "samples", "deadline")

    def __init__(self, limits: QueryLimits) -> None:
        self.max_samples = limits.max_samples
        self.samples = 0
        self.deadline = Deadline(limits.timeout)

    def charge(self, samples: int) -> None:
        self.samples += samples
        if self.samples > self.max_samples:
            raise PromQLError(TOO_MANY_SAMPLES)

    def check(self) -> None:
        self.deadline.check()


@dataclass
class _Ctx:
    ts: np.ndarray  # evaluation times of this (sub)query, int64 ms
    start: int  # outer query start/end, for @ start() / end()
    end: int
    is_range: bool
    annos: Annotations
    query: str
    budget: _Budget
    step: int = 0  # outer query step, for step()


#: Parsed queries the process keeps (least recently used dropped first). A tree depends on the text
#: only and is never modified once parsed, so every engine shares it: a new twin's rules (~250
#: expressions, ~50 ms to parse) and the queries agents repeat are parsed once per process.
PARSED_KEPT = 2048
_TREES: OrderedDict[str, Node] = OrderedDict()
_TREES_LOCK = threading.Lock()


class Engine:
    """Evaluate PromQL against a :class:`~itbench_gym.backends.sim.tsdb.TSDB`.

    ``delayed_name_removal`` mirrors Prometheus' ``promql-delayed-name-removal`` feature flag (off by
    default in Prometheus 3, on in its test suite). ``subquery_step`` is the default resolution of
    subqueries without a step (Prometheus uses the global evaluation interval). ``limits`` bound
    every query unless a call passes its own (the HTTP API passes :data:`~.limits.API_LIMITS`).
    """

    def __init__(
        self,
        storage: TSDB,
        lookback_delta: float = 300.0,
        *,
        delayed_name_removal: bool = False,
        subquery_step: float = 60.0,
        limits: QueryLimits = DEFAULT_LIMITS,
    ) -> None:
        if lookback_delta <= 0:
            raise ValueError(f"lookback_delta must be positive, got {lookback_delta}")
        self.storage = storage
        self.lookback = int(round(lookback_delta * 1000))
        self.delayed = delayed_name_removal
        self.subquery_step = int(round(subquery_step * 1000))
        self.limits = limits

    # ----------------------------------------------------------------- API
    def parse(self, expr: str, deadline: Deadline | None = None) -> Node:
        """Parse ``expr`` (cached for the process); raises :class:`PromQLError` with ``bad_data`` on syntax errors.

        The text must pass the size and shape limits of :mod:`.limits` before the native parser
        sees it; ``deadline`` only bounds the search for an error's position.
        """
        if not isinstance(expr, str):
            raise PromQLError(f"query must be a string, got {type(expr).__name__}", "bad_data")
        with _TREES_LOCK:
            node = _TREES.get(expr)
            if node is not None:
                _TREES.move_to_end(expr)
                return node
        if not expr.strip():
            raise PromQLError("1:1: parse error: no expression found in input", "bad_data")
        raw, prepared = native_parse(expr, deadline)
        try:
            node = convert(raw)
        except regex.RegexError as exc:
            raise regex_error(prepared, exc, exc.pattern) from None
        except (OverflowError, ValueError) as exc:  # times and durations Python cannot represent
            raise PromQLError(f"parse error: {exc}", "bad_data") from None
        assign_positions(node, prepared.text)
        _check(node)
        with _TREES_LOCK:
            _TREES[expr] = node
            if len(_TREES) > PARSED_KEPT:
                _TREES.popitem(last=False)
        return node

    def instant(self, expr: str, t: float, *, limits: QueryLimits | None = None) -> Result:
        budget = _Budget(limits or self.limits)
        ms = _seconds_to_ms(t, "time")
        return self._run(expr, np.array([ms], dtype=np.int64), ms, ms, budget, is_range=False)

    def range(self, expr: str, start: float, end: float, step: float, *, limits: QueryLimits | None = None) -> Result:
        budget = _Budget(limits or self.limits)
        s, e, st = _seconds_to_ms(start, "start"), _seconds_to_ms(end, "end"), _seconds_to_ms(step, "step")
        if st <= 0:
            raise PromQLError("zero or negative query resolution step widths are not accepted. Try a positive integer", "bad_data")
        if e < s:
            raise PromQLError("end timestamp must not be before start time", "bad_data")
        if (e - s) // st > 11_000:
            raise PromQLError(
                "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
                "bad_data",
            )
        ts = np.arange(s, e + 1, st, dtype=np.int64)
        return self._run(expr, ts, s, e, budget, is_range=True, step=st)

    def range_ms(self, expr: str, ts: np.ndarray) -> Result:
        """Evaluate at arbitrary (sorted, int64 ms) times as one range query; used by rule evaluation."""
        ts = np.asarray(ts, dtype=np.int64)
        return self._run(expr, ts, int(ts[0]), int(ts[-1]), _Budget(self.limits), is_range=len(ts) > 1)

    # ------------------------------------------------------------ internals
    def _run(self, expr: str, ts: np.ndarray, start: int, end: int, budget: _Budget, is_range: bool,
             step: int = 0) -> Result:
        node = self.parse(expr, budget.deadline)
        ctx = _Ctx(ts, start, end, is_range, Annotations(), expr, budget, step if end != start else 0)
        if is_range and node.type not in ("vector", "scalar"):
            kind = "range vector" if node.type == "matrix" else node.type
            raise PromQLError(
                f'invalid expression type "{kind}" for range query, must be Scalar or instant Vector', "bad_data"
            )
        try:
            value = self._eval(node, ctx)
            if isinstance(value, Windows):
                result = self._windows_result(value)
            elif isinstance(value, Block):
                result = self._block_result(self._finish(value), ctx)
            elif isinstance(value, np.ndarray):
                if is_range:
                    result = Result("matrix", [((), ts.copy(), value.copy())])
                else:
                    result = Result("scalar", scalar=(int(ts[0]), float(value[0])))
            else:
                result = Result("string", string=(int(ts[0]), str(value)))
        except MemoryError:
            raise PromQLError(TOO_MANY_SAMPLES) from None
        except QueryTimeout:
            raise PromQLError(TIMED_OUT, "timeout") from None
        result.warnings = list(ctx.annos.warnings)
        result.infos = list(ctx.annos.infos)
        return result

    def _finish(self, block: Block) -> Block:
        if not block.drop_name.any():
            return block
        return drop_names_now(block)

    def _block_result(self, block: Block, ctx: _Ctx) -> Result:
        if not ctx.is_range:
            rows = np.nonzero(block.present[:, 0])[0]
            t = int(ctx.ts[0])
            series = [
                (block.labels[i], np.array([t], dtype=np.int64), block.values[i, :1].copy()) for i in rows.tolist()
            ]
            return Result("vector", series)
        order = sorted(range(len(block)), key=lambda i: block.labels[i])
        out = []
        for i in order:
            m = block.present[i]
            if m.any():
                out.append((block.labels[i], ctx.ts[m], block.values[i][m]))
        return Result("matrix", out)

    def _windows_result(self, w: Windows) -> Result:
        out = []
        for s, lb in enumerate(w.labels):
            lo, hi = int(w.lo[s, 0]), int(w.hi[s, 0])
            if hi > lo:
                labels = without_name(lb) if w.drop_name[s] else lb
                out.append((labels, w.ts[lo:hi].copy(), w.vs[lo:hi].copy()))
        out.sort(key=lambda x: x[0])
        return Result("matrix", out)

    def _normalize(self, block: Block) -> Block:
        if not self.delayed:
            block = drop_names_now(block)
        return merge_same_labels(block)

    def _eval(self, node: Node, ctx: _Ctx) -> Any:
        ctx.budget.check()
        value = self._eval_node(node, ctx)
        if isinstance(value, Block) and not isinstance(node, (VectorSel, Paren)):
            ctx.budget.charge(value.values.size)  # selectors charge before they allocate
        return value

    def _eval_node(self, node: Node, ctx: _Ctx) -> Any:
        if isinstance(node, NumberLit):
            return np.full(len(ctx.ts), node.val)
        if isinstance(node, StringLit):
            return node.val
        if isinstance(node, Paren):
            return self._eval(node.expr, ctx)
        if isinstance(node, Unary):
            val = self._eval(node.expr, ctx)
            if isinstance(val, np.ndarray):
                return -val
            return self._normalize(Block(val.labels, -val.values, val.present, np.ones(len(val), dtype=bool)))
        if isinstance(node, VectorSel):
            return self._vector_selector(node, ctx)[0]
        if isinstance(node, (MatrixSel, Subquery)):
            return self._windows(node, ctx)
        if isinstance(node, Call):
            return self._call(node, ctx)
        if isinstance(node, Aggregate):
            return self._aggregate(node, ctx)
        if isinstance(node, Binary):
            return self._binary(node, ctx)
        raise PromQLError(f"unsupported expression {type(node).__name__}", "bad_data")

    # ------------------------------------------------------------ selectors
    def _times(self, at: At | None, offset: int, ctx: _Ctx) -> np.ndarray:
        if at is None:
            base = ctx.ts
        elif at.kind == "start":
            base = np.full(len(ctx.ts), ctx.start, dtype=np.int64)
        elif at.kind == "end":
            base = np.full(len(ctx.ts), ctx.end, dtype=np.int64)
        else:
            base = np.full(len(ctx.ts), at.ms, dtype=np.int64)
        return base - offset

    def _select(self, node: VectorSel, mint: int, maxt: int, ctx: _Ctx) -> tuple[list[Labels], np.ndarray, np.ndarray, np.ndarray]:
        """The selected series: labels, flat times and values, each series' offset (``TSDB.select_flat``)."""
        sets = node.matcher_sets()
        check = ctx.budget.check
        if len(sets) == 1:
            return self.storage.select_flat(sets[0], mint, maxt, check)
        merged: dict[Labels, tuple[Labels, np.ndarray, np.ndarray]] = {}
        for ms in sets:
            for item in self.storage.select_raw(ms, mint, maxt, check):
                merged[item[0]] = item
        series = [merged[k] for k in sorted(merged)]
        return [lb for lb, _, _ in series], *flatten([(a, b) for _, a, b in series])

    def _vector_selector(self, node: VectorSel, ctx: _Ctx) -> tuple[Block, np.ndarray]:
        t = self._times(node.at, node.offset, ctx)
        labels, ts, vs, starts = self._select(node, int(t.min()) - self.lookback + 1, int(t.max()), ctx)
        n = len(t)
        ctx.budget.charge(len(labels) * n)
        hi = search(ts, starts, t, "right")
        idx = hi - 1
        valid = idx >= starts[:-1, None]
        idx = np.maximum(idx, 0)
        if len(ts):
            st = ts[idx]
            val = vs[idx]
            valid &= st > (t[None, :] - self.lookback)
            valid &= ~is_stale(val)
        else:
            st = np.zeros(idx.shape, dtype=np.int64)
            val = np.zeros(idx.shape)
        block = Block(labels, np.where(valid, val, 0.0), valid, np.zeros(len(labels), dtype=bool))
        keep = valid.any(axis=1)
        if not keep.all():
            rows = np.nonzero(keep)[0]
            return block.take(rows), st[rows]
        return block, st

    def _windows(self, node: MatrixSel | Subquery, ctx: _Ctx) -> Windows:
        if isinstance(node, MatrixSel):
            vs = node.vs
            end = self._times(vs.at, vs.offset, ctx)
            labels, ts, vs_flat, starts = self._select(vs, int(end.min()) - node.range + 1, int(end.max()), ctx)
            ctx.budget.charge(len(ts))
            drop = np.zeros(len(labels), dtype=bool)
        else:
            end = self._times(node.at, node.offset, ctx)
            step = node.step or self.subquery_step
            first = int(end.min()) - node.range
            start = step * (first // step)
            if start <= first:
                start += step
            if (int(end.max()) - start) // step > ctx.budget.max_samples:
                raise PromQLError(TOO_MANY_SAMPLES)
            grid = np.arange(start, int(end.max()) + 1, step, dtype=np.int64)
            inner = _Ctx(grid, ctx.start, ctx.end, True, ctx.annos, ctx.query, ctx.budget, ctx.step)
            if len(grid) == 0:
                labels, arrays, drop = [], [], np.zeros(0, dtype=bool)
            else:
                val = self._eval(node.expr, inner)
                if isinstance(val, np.ndarray):
                    val = functions.vector_of(val)
                if not isinstance(val, Block):
                    raise PromQLError("subquery is only allowed on instant vector or scalar expressions", "bad_data")
                if not self.delayed:
                    val = drop_names_now(val)
                labels = list(val.labels)
                arrays = [(grid[val.present[i]], val.values[i][val.present[i]]) for i in range(len(val))]
                drop = val.drop_name.copy()
            ts, vs_flat, starts = flatten(arrays)
        ctx.budget.charge(len(labels) * len(end))
        if isinstance(node, MatrixSel):
            # Range selectors never return staleness markers.
            stale = is_stale(vs_flat)
            if stale.any():
                keep = ~stale
                sid = np.repeat(np.arange(len(labels)), np.diff(starts))
                counts = np.bincount(sid[keep], minlength=len(labels))
                starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
                ts, vs_flat = ts[keep], vs_flat[keep]
        lo = search(ts, starts, end - node.range, "right")
        hi = search(ts, starts, end, "right")
        return Windows(labels, drop, ts, vs_flat, starts, lo, hi, end, node.range)

    # ------------------------------------------------------------ functions
    def _scalar_arg(self, node: Node, ctx: _Ctx) -> np.ndarray:
        val = self._eval(node, ctx)
        if not isinstance(val, np.ndarray):
            raise PromQLError(f"expected a scalar argument, got {node.type}", "bad_data")
        return val

    def _block_arg(self, node: Node, ctx: _Ctx) -> Block:
        val = self._eval(node, ctx)
        if not isinstance(val, Block):
            raise PromQLError(f"expected an instant vector argument, got {node.type}", "bad_data")
        return val

    def _call(self, node: Call, ctx: _Ctx) -> Any:
        name = node.name
        args = node.args
        n = len(ctx.ts)
        if name in window_funcs.RANGE_FUNCS or name == "absent_over_time":
            return self._range_call(node, ctx)
        if name == "time":
            return ctx.ts / 1000.0
        if name == "pi":
            return np.full(n, math.pi)
        if name in ("start", "end", "range", "step"):
            # Query-context functions refer to the outermost query, even inside subqueries.
            value = {"start": ctx.start, "end": ctx.end, "range": ctx.end - ctx.start, "step": ctx.step}[name]
            return np.full(n, value / 1000.0)
        if name in ("min_of", "max_of"):
            a, b = self._scalar_arg(args[0], ctx), self._scalar_arg(args[1], ctx)
            return np.minimum(a, b) if name == "min_of" else np.maximum(a, b)
        if name == "vector":
            return functions.vector_of(self._scalar_arg(args[0], ctx))
        if name == "scalar":
            return functions.scalar_of(self._block_arg(args[0], ctx))
        if name == "timestamp":
            if isinstance(args[0], VectorSel):
                block, st = self._vector_selector(args[0], ctx)
                vals = st / 1000.0
            else:
                block = self._block_arg(args[0], ctx)
                vals = np.broadcast_to(ctx.ts / 1000.0, block.values.shape).copy()
            return self._normalize(Block(block.labels, vals, block.present, np.ones(len(block), dtype=bool)))
        if name in functions.MATH:
            return self._normalize(functions.math_func(name, self._block_arg(args[0], ctx)))
        if name == "round":
            nearest = self._scalar_arg(args[1], ctx) if len(args) > 1 else None
            return self._normalize(functions.round_func(self._block_arg(args[0], ctx), nearest))
        if name in ("clamp", "clamp_min", "clamp_max"):
            block = self._block_arg(args[0], ctx)
            lo = np.full(n, -np.inf)
            hi = np.full(n, np.inf)
            if name == "clamp":
                lo, hi = self._scalar_arg(args[1], ctx), self._scalar_arg(args[2], ctx)
            elif name == "clamp_min":
                lo = self._scalar_arg(args[1], ctx)
            else:
                hi = self._scalar_arg(args[1], ctx)
            return self._normalize(functions.clamp(block, lo, hi).compact())
        if name in functions.DATE_FUNCS:
            if not args:
                return functions.date_block(name, functions.vector_of(ctx.ts / 1000.0))
            return self._normalize(functions.date_block(name, self._block_arg(args[0], ctx)))
        if name == "absent":
            block = self._block_arg(args[0], ctx)
            missing = np.asarray(~block.present.any(axis=0))
            lbls = functions.absent_labels(args[0].matchers) if isinstance(args[0], VectorSel) else ()
            return Block([lbls], np.ones((1, n)), missing[None, :], np.zeros(1, dtype=bool)).compact()
        if name in ("sort", "sort_desc", "sort_by_label", "sort_by_label_desc"):
            if ctx.is_range:
                ctx.annos.warn(
                    "PromQL warning: sort is ineffective for range queries since results are always ordered by labels "
                    f"({line_col(ctx.query, node.pos)})"
                )
            block = self._block_arg(args[0], ctx)
            if ctx.is_range:
                return block
            if name in ("sort", "sort_desc"):
                return functions.sort_rows(block, name == "sort_desc")
            names = [self._eval(a, ctx) for a in args[1:]]
            return functions.sort_by_label(block, names, name.endswith("desc"))
        if name == "label_replace":
            block = self._block_arg(args[0], ctx)
            dst, repl, src, rx = (self._eval(a, ctx) for a in args[1:5])
            return self._normalize(functions.label_replace(block, dst, repl, src, rx))
        if name == "label_join":
            block = self._block_arg(args[0], ctx)
            dst, sep = self._eval(args[1], ctx), self._eval(args[2], ctx)
            return self._normalize(functions.label_join(block, dst, sep, [self._eval(a, ctx) for a in args[3:]]))
        if name == "histogram_quantile":
            q = self._scalar_arg(args[0], ctx)
            block = self._block_arg(args[1], ctx)
            pos = line_col(ctx.query, args[1].pos)
            if (np.isnan(q) | (q < 0) | (q > 1)).any():
                bad = q[np.isnan(q) | (q < 0) | (q > 1)][0]
                ctx.annos.warn(
                    f"PromQL warning: quantile value should be between 0 and 1, got {aggregation._g(float(bad))} "
                    f"({line_col(ctx.query, args[0].pos)})"
                )
            return self._normalize(functions.histogram_quantile(q, block, ctx.annos, pos, self.delayed, ctx.ts))
        if name in _NATIVE_HISTOGRAM_FUNCS or name == "histogram_quantiles":
            # Float samples are ignored by the native-histogram functions; the twin stores no native histograms.
            for arg in args:
                self._eval(arg, ctx)
            return Block.empty(n)
        if name == "info":
            return self._block_arg(args[0], ctx)
        raise PromQLError(f"function {name}() is not supported by this engine", "bad_data")

    def _range_call(self, node: Call, ctx: _Ctx) -> Any:
        name = node.name
        args = [_unparen(a) for a in node.args]
        idx = next(i for i, a in enumerate(args) if isinstance(a, (MatrixSel, Subquery)))
        scalars = [self._scalar_arg(a, ctx) for i, a in enumerate(args) if i != idx]
        w = self._windows(args[idx], ctx)  # type: ignore[arg-type]
        n = len(ctx.ts)
        if name == "absent_over_time":
            any_present = np.asarray((w.hi > w.lo).any(axis=0)) if len(w.labels) else np.zeros(n, dtype=bool)
            arg = args[idx]
            lbls = functions.absent_labels(arg.vs.matchers) if isinstance(arg, MatrixSel) else ()
            return Block([lbls], np.ones((1, n)), ~any_present[None, :], np.ones(1, dtype=bool)).compact()
        values, present = window_funcs.apply(w, window_funcs.RANGE_FUNCS[name], ctx.ts, scalars)
        keeps_name = name in ("last_over_time", "first_over_time")
        drop = w.drop_name.copy() if keeps_name else np.ones(len(w.labels), dtype=bool)
        block = Block(list(w.labels), values, present, drop).compact()
        pos = line_col(ctx.query, node.args[idx].pos)
        if name in ("rate", "increase"):
            fixed = _fixed_name(args[idx])
            names = dict.fromkeys(map(metric_name, block.labels)) if fixed is None else [fixed] if len(block) else []
            for metric in names:
                if metric and not metric.endswith(_NON_COUNTER_SUFFIXES):
                    ctx.annos.info(
                        "PromQL info: metric might not be a counter, name does not end in "
                        f'_total/_sum/_count/_bucket: "{metric}" ({pos})'
                    )
        if name == "quantile_over_time" and len(block):
            q = scalars[0]
            bad = q[np.isnan(q) | (q < 0) | (q > 1)]
            if len(bad):
                ctx.annos.warn(f"PromQL warning: quantile value should be between 0 and 1, got {aggregation._g(float(bad[0]))} ({pos})")
        return self._normalize(block)

    # ---------------------------------------------------------- aggregation
    def _aggregate(self, node: Aggregate, ctx: _Ctx) -> Block:
        param: Any = None
        if node.param is not None:
            param = self._eval(_unparen(node.param), ctx)
        block = self._block_arg(node.expr, ctx)
        pos = line_col(ctx.query, node.param.pos) if node.param is not None else ""
        out = aggregation.aggregate(node.op, block, node.grouping, node.without, param, ctx.annos, pos)
        return self._normalize(out)

    # --------------------------------------------------------------- binary
    def _binary(self, node: Binary, ctx: _Ctx) -> Any:
        lhs = self._eval(node.lhs, ctx)
        rhs = self._eval(node.rhs, ctx)
        lscalar, rscalar = isinstance(lhs, np.ndarray), isinstance(rhs, np.ndarray)
        if lscalar and rscalar:
            return binops.scalar_scalar(node.op, lhs, rhs)
        if node.op in SET_OPS:
            return binops.set_op(node, lhs, rhs)
        if lscalar or rscalar:
            block, scalar = (rhs, lhs) if lscalar else (lhs, rhs)
            if node.op in COMPARISON_OPS and not node.return_bool:
                return binops.vector_scalar(node.op, block, scalar, lscalar, False).compact()
            return self._normalize(binops.vector_scalar(node.op, block, scalar, lscalar, node.return_bool))
        return self._normalize(binops.vector_vector(node, lhs, rhs, self.delayed))


def _unparen(node: Node) -> Node:
    while isinstance(node, Paren):
        node = node.expr
    return node


def _fixed_name(node: Node) -> str | None:
    """The metric name of every series a range selector returns, when its matchers fix one.

    Saves reading the name of each of thousands of series when checking ``rate`` is given counters.
    """
    if not isinstance(node, MatrixSel):
        return None
    names = set()
    for matchers in node.vs.matcher_sets():
        eq = [m.value for m in matchers if m.name == "__name__" and m.op == "="]
        if not eq:
            return None
        names.add(eq[0])
    return names.pop() if len(names) == 1 else None


def _seconds_to_ms(t: float, what: str) -> int:
    try:
        f = float(t)
    except (TypeError, ValueError, OverflowError):
        raise PromQLError(f"invalid {what} {t!r}: expected seconds since the epoch", "bad_data") from None
    if not math.isfinite(f):
        raise PromQLError(f"invalid {what} {t!r}: must be finite", "bad_data")
    if abs(f) > MAX_TIME_SECONDS:
        raise PromQLError(f"invalid {what} {t!r}: out of range (at most {MAX_TIME_SECONDS:.0f} seconds from the epoch)",
                          "bad_data")
    return int(round(f * 1000))


def _check(node: Node) -> None:
    """Semantic checks the parser leaves to the engine."""
    from .ast import walk

    for n in walk(node):
        if isinstance(n, Aggregate) and n.op == "count_values" and not (n.param is not None and isinstance(_unparen(n.param), StringLit)):
            raise PromQLError("count_values requires a string parameter", "bad_data")
