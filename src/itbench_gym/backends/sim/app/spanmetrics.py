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
from dataclasses import dataclass

import numpy as np

from .flow import Moments, bucket_probs

SeriesKey = tuple[str, str, str, str, str]  # service, span, kind, status, instance
#: The instrumentation scope the connector gives its metrics (connector/spanmetricsconnector connector.go).
SCOPE = "spanmetricsconnector"


@dataclass
class _Histogram:
    buckets: np.ndarray
    sum_ms: float
    count: float


#: How many latency distributions' bucket probabilities a :class:`SpanMetrics` keeps (a tick needs a few dozen).
_PROBS_CACHE = 1024


class SpanMetrics:
    """The connector's counters; its label dicts are built once per series and shared between calls and,
    through ``labels``, between the connectors of successive collector processes (read-only)."""

    def __init__(self, buckets_ms: tuple[float, ...], namespace: str, job_prefix: str,
                 labels: dict[SeriesKey, list[dict[str, str]]] | None = None) -> None:
        self.log_bounds = tuple(math.log(b) for b in buckets_ms)
        self.les = [f"{b:g}" for b in buckets_ms] + ["+Inf"]
        self.namespace = namespace
        self.job_prefix = job_prefix
        self.calls: dict[SeriesKey, float] = {}
        self.hist: dict[SeriesKey, _Histogram] = {}
        #: every pod of an operation records the same latency distribution in a tick
        self._probs: dict[Moments, np.ndarray] = {}
        self._labels: dict[SeriesKey, list[dict[str, str]]] = {} if labels is None else labels
        self._order: list[SeriesKey] | None = None

    def record(self, key: SeriesKey, n: int, lat: Moments, rng: np.random.Generator) -> None:
        """Add ``n`` spans whose durations follow ``lat`` (seconds)."""
        if n <= 0:
            return
        if key not in self.calls:
            self._order = None
        self.calls[key] = self.calls.get(key, 0.0) + n
        h = self.hist.get(key)
        if h is None:
            h = self.hist[key] = _Histogram(np.zeros(len(self.les)), 0.0, 0.0)
        probs = self._probs.get(lat)
        if probs is None:
            if len(self._probs) >= _PROBS_CACHE:
                self._probs.clear()
            probs = self._probs[lat] = bucket_probs(self.log_bounds, lat)
        h.buckets += rng.multinomial(n, probs)
        noise = rng.normal(0.0, math.sqrt(n * lat.var)) * 1000.0 if lat.var > 0 else 0.0
        h.sum_ms += max(n * lat.mean * 1000.0 + noise, 0.0)
        h.count += n

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
        if self._order is None:
            self._order = sorted(self.calls)
        out: list[tuple[dict[str, str], float]] = []
        for key in self._order:
            labels = self._labels.get(key)
            if labels is None:
                labels = self._labels[key] = self._series_labels(key)
            h = self.hist[key]
            out += zip(labels, [self.calls[key], *np.cumsum(h.buckets).tolist(), h.sum_ms, h.count], strict=True)
        return out

    def copy(self) -> SpanMetrics:
        """An independent copy of the counters, sharing the label dicts and bucket probabilities."""
        out = copy.copy(self)
        out.restore(self.snapshot())
        return out

    def snapshot(self) -> tuple[dict[SeriesKey, float], dict[SeriesKey, tuple[np.ndarray, float, float]]]:
        return dict(self.calls), {k: (h.buckets.copy(), h.sum_ms, h.count) for k, h in self.hist.items()}

    def restore(self, snap: tuple[dict[SeriesKey, float], dict[SeriesKey, tuple[np.ndarray, float, float]]]) -> None:
        calls, hist = snap
        self.calls = dict(calls)
        self.hist = {k: _Histogram(b.copy(), s, c) for k, (b, s, c) in hist.items()}
        self._order = None
