"""What the OpenTelemetry collector's spanmetrics connector holds and hands its exporter, fed by the fluid model.

One :class:`SpanMetrics` is the connector of one collector process (``collector.py``): its counters
live in that process, so a restarted collector starts every series again from zero. Series are keyed
like the connector keys them (service, span name, kind, status code, plus the ``namespace`` dimension
of ITBench's config) under the spans' resource, whose ``service.instance.id`` (the pod uid the config's
``resource`` processor inserts) tells the pods apart. Counters are cumulative and the connector hands
every series it holds to the pipeline at each flush, changed or not (``metrics_expiration`` is 0 by
default: never), so a pod that is replaced leaves its series behind and a new pod starts a new one.

The labels are the ones the collector's ``prometheus`` exporter serves (exporter/prometheusexporter
collector.go): the attributes, ``otel_scope_name``, ``job`` = ``service.namespace/service.name`` and
``instance`` = ``service.instance.id``. Prometheus' scrape of the collector then turns the clashing
``job``, ``instance`` and ``namespace`` into ``exported_*`` (``exporters/scrape.py``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .flow import Moments, bucket_probs

SeriesKey = tuple[str, str, str, str, str]  # service, span, kind, status, instance
#: The instrumentation scope the connector gives its metrics (connector/spanmetricsconnector connector.go).
SCOPE = "spanmetricsconnector"


#: Rows a :class:`SpanMetrics` makes room for at a time.
_GROW = 64


class LatencyTable(NamedTuple):
    """Latency distributions, one row each: mean and variance (seconds), bucket probabilities."""

    mean: np.ndarray
    var: np.ndarray
    probs: np.ndarray


class BucketTables:
    """Bucket probabilities of many series' latency distributions, computed in one call per set of
    bucket bounds rather than once per connector and service (each row depends on its own moments
    only, so the rows are the same either way). Kept from tick to tick: a distribution met again (a
    steady operation's) keeps its row and only new ones are computed; a set of bounds with more than
    ``limit`` rows starts over at the next tick."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._rows: dict[tuple[float, ...], dict[Moments, int]] = {}
        #: each set of bounds' table of its first rows (the rows added since are computed at the next :meth:`of`)
        self._tables: dict[tuple[float, ...], LatencyTable] = {}

    def next_tick(self) -> None:
        """Start over the sets of bounds that hold more rows than the limit (never mid-tick: the rows
        :meth:`add` handed out stay valid until then)."""
        for bounds in [b for b, rows in self._rows.items() if len(rows) > self.limit]:
            del self._rows[bounds]
            self._tables.pop(bounds, None)

    def add(self, series: Sequence[tuple[SpanMetrics, object, Moments]]) -> np.ndarray:
        """Each (connector, key, moments)'s row in its connector's table (equal moments share one)."""
        at = []
        for spans, _, lat in series:
            rows = self._rows.setdefault(spans.log_bounds, {})
            row = rows.get(lat)
            if row is None:
                row = rows[lat] = len(rows)
            at.append(row)
        return np.array(at, dtype=np.intp)

    def of(self, spans: SpanMetrics) -> LatencyTable:
        """The table of ``spans``' bounds: one row per distinct moments added."""
        bounds = spans.log_bounds
        rows = self._rows.get(bounds, {})
        table = self._tables.get(bounds)
        done = 0 if table is None else len(table.mean)
        if table is None or done < len(rows):
            lats = list(rows)[done:]
            mean, var = np.array([m.mean for m in lats], dtype=float), np.array([m.var for m in lats], dtype=float)
            new = LatencyTable(mean, var, bucket_probs(bounds, mean, var))
            table = self._tables[bounds] = new if table is None else LatencyTable(*(np.concatenate(pair) for pair in zip(table, new, strict=True)))
        return table


class SpanMetrics:
    """The connector's counters, one row per series; its label dicts are built once per series and
    shared between calls and, through ``labels``, between the connectors of successive collector
    processes (read-only)."""

    def __init__(self, buckets_ms: tuple[float, ...], namespace: str, job_prefix: str,
                 labels: dict[SeriesKey, list[dict[str, str]]] | None = None) -> None:
        self.log_bounds = tuple(math.log(b) for b in buckets_ms)
        self.les = [f"{b:g}" for b in buckets_ms] + ["+Inf"]
        self.namespace = namespace
        self.job_prefix = job_prefix
        #: series key -> its row; a span's call and the histogram's count are the same number
        self.rows: dict[SeriesKey, int] = {}
        self.buckets = np.zeros((0, len(self.les)))
        self.sum_ms = np.zeros(0)
        self.count = np.zeros(0)
        self._labels: dict[SeriesKey, list[dict[str, str]]] = {} if labels is None else labels
        #: the rows in the order :meth:`samples` serves them, with their label dicts
        self._order: tuple[np.ndarray, list[dict[str, str]]] | None = None

    def record(self, keys: Sequence[SeriesKey], n: np.ndarray, lats: LatencyTable, at: np.ndarray, rng: np.random.Generator) -> None:
        """Add ``n[i]`` spans of series ``keys[i]`` whose durations follow row ``at[i]`` of ``lats``
        (from :class:`BucketTables`): one multinomial draw of every series' bucket counts and one
        normal draw of their sums' noise."""
        kept = np.flatnonzero(n > 0)
        if not len(kept):
            return
        rows = [self._row(keys[i]) for i in kept.tolist()]
        taken = n[kept]
        counts = taken.astype(float)
        sel = at[kept]
        mean, var = lats.mean[sel], lats.var[sel]
        drawn = rng.multinomial(taken, lats.probs[sel])
        noise = rng.normal(0.0, np.sqrt(counts * var)) * 1000.0
        sums = np.maximum(counts * mean * 1000.0 + noise, 0.0)
        if len(set(rows)) == len(rows):  # each row once (the usual case): a plain indexed add is the same
            self.buckets[rows] += drawn
            self.sum_ms[rows] += sums
            self.count[rows] += counts
        else:
            np.add.at(self.buckets, rows, drawn)
            np.add.at(self.sum_ms, rows, sums)
            np.add.at(self.count, rows, counts)

    def _row(self, key: SeriesKey) -> int:
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = len(self.rows)
            self._order = None
            if row >= len(self.count):
                more = row + _GROW - len(self.count)
                self.buckets = np.vstack([self.buckets, np.zeros((more, len(self.les)))])
                self.sum_ms = np.concatenate([self.sum_ms, np.zeros(more)])
                self.count = np.concatenate([self.count, np.zeros(more)])
        return row

    def _series_labels(self, key: SeriesKey) -> list[dict[str, str]]:
        """A series key's label dicts in :meth:`samples` order: calls, each bucket, sum, count."""
        service, span, kind, status, instance = key
        base = {"service_name": service, "span_name": span, "span_kind": kind, "status_code": status,
                "namespace": self.namespace, "otel_scope_name": SCOPE, "job": self.job_prefix + service, "instance": instance}
        return [{"__name__": "traces_span_metrics_calls_total", **base},
                *({"__name__": "traces_span_metrics_duration_milliseconds_bucket", **base, "le": le} for le in self.les),
                {"__name__": "traces_span_metrics_duration_milliseconds_sum", **base},
                {"__name__": "traces_span_metrics_duration_milliseconds_count", **base}]

    def samples(self) -> list[tuple[dict[str, str], float]]:
        """Every series the connector holds, sorted by key: calls, cumulative buckets, sum, count."""
        if self._order is None:
            keys = sorted(self.rows)
            labels: list[dict[str, str]] = []
            for key in keys:
                made = self._labels.get(key)
                if made is None:
                    made = self._labels[key] = self._series_labels(key)
                labels += made
            self._order = (np.array([self.rows[k] for k in keys], dtype=np.intp), labels)
        order, labels = self._order
        count = self.count[order, None]
        values = np.hstack([count, np.cumsum(self.buckets[order], axis=1), self.sum_ms[order, None], count])
        return list(zip(labels, values.ravel().tolist(), strict=True))

    def copy(self) -> SpanMetrics:
        """An independent copy of the counters, sharing the label dicts."""
        out = copy.copy(self)
        out.restore(self.snapshot())
        return out

    def snapshot(self) -> tuple[dict[SeriesKey, int], np.ndarray, np.ndarray, np.ndarray]:
        return dict(self.rows), self.buckets.copy(), self.sum_ms.copy(), self.count.copy()

    def restore(self, snap: tuple[dict[SeriesKey, int], np.ndarray, np.ndarray, np.ndarray]) -> None:
        rows, buckets, sum_ms, count = snap
        self.rows, self.buckets, self.sum_ms, self.count = dict(rows), buckets.copy(), sum_ms.copy(), count.copy()
        self._order = None
