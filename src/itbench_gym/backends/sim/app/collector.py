"""The app's OpenTelemetry collector: which process receives each pod's OTLP telemetry, what that
process holds, and what its ``prometheus`` exporter serves to the cluster's Prometheus.

As ITBench deploys the demo (app.yaml ``span_metrics.collector``), the span metrics and the pods' OTLP
metrics reach Prometheus only through the collector pod's scrape target on the exporter's port: their
labels here are the exposed ones, and the scrape adds the target's (``exporters/scrape.py``). Facts
from open-telemetry/opentelemetry-collector-contrib, the 0.151.0 image the chart runs:

- the pods push over OTLP to the collector's Service. A pod that reaches no ready collector loses what
  it exports meanwhile (the SDKs' exporters retry, then drop the batch): those spans never show up in
  the counters later. A gRPC client keeps its connection, so a pod's telemetry goes to one process;
- the spanmetrics connector (``spanmetrics.py``) hands the pipeline every series it holds each
  ``metrics_flush_interval`` after the process started; the exporter serves those values until the next
  flush (connector/spanmetricsconnector connector.go ``exportMetrics``);
- the exporter keeps the last value it received of each series and stops serving a series it has not
  received for ``metric_expiration`` (exporter/prometheusexporter accumulator.go ``Collect``): the
  connector re-sends all of its series, so only pushed and received series (a replaced pod's, a
  consumer group's) expire;
- everything lives in the process: a restarted or new collector starts with no series at all.

The collector's own receivers run in each process: the kafkametrics receiver's series carry the
receiver's instrumentation scope (its module path, versioned with the collector's build, as mdatagen's
generated metrics builder sets it) and no ``job``/``instance`` (the receiver sets no service resource).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from itbench_gym.backends.sim.chaos.tproxy import WireRequest

from .cluster_view import ClusterView, PodView, is_ready
from .network import reach, resolve_address
from .spanmetrics import SeriesKey, SpanMetrics
from .spec import AppSpec

Sample = tuple[dict[str, str], float]
#: (namespace, pod, port) of an exposition.
Endpoint = tuple[str, str, int]
#: An OTLP exporter's requests (protobuf bodies): over HTTP/1 to the signals' paths on the OTLP/HTTP port
#: (4318 by the specification), else the collector services' gRPC methods.
_OTLP_HTTP_PORT = 4318
_OTLP_HTTP = WireRequest("POST", ("/v1/traces", "/v1/metrics", "/v1/logs"), False)
_OTLP_GRPC = WireRequest("POST", tuple(f"/opentelemetry.proto.collector.{s}.v1.{k}Service/Export"
                                       for s, k in (("trace", "Trace"), ("metrics", "Metrics"), ("logs", "Logs"))), False)

#: The kafkametrics receiver's instrumentation scope name (receiver/kafkametricsreceiver metadata.yaml's module).
KAFKAMETRICS_SCOPE = "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/kafkametricsreceiver"


@dataclass
class _Run:
    """One collector process."""

    namespace: str
    pod: str
    #: the version of its build (the image tag), which versions its receivers' scopes
    version: str
    started: float
    spans: SpanMetrics
    flushes: int = 0
    #: the span metrics as of the last flush, handed out as the same list until the next one
    flushed: list[Sample] = field(default_factory=list)
    #: the exporter's other series: labels, last value, when it was received
    pushed: dict[Hashable, tuple[dict[str, str], float, float]] = field(default_factory=dict)

    def copy(self) -> _Run:
        return _Run(self.namespace, self.pod, self.version, self.started, self.spans.copy(), self.flushes, self.flushed,
                    dict(self.pushed))


def _container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next((cs for cs in (pod.get("status") or {}).get("containerStatuses") or [] if cs.get("name") == name), {})


def _image_tag(pod: dict[str, Any], name: str) -> str:
    image = next((str(c.get("image", "")) for c in (pod.get("spec") or {}).get("containers") or [] if c.get("name") == name), "")
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


class Collectors:
    """The app's collector processes and the routes of the pods' telemetry to them."""

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        self.config = spec.collector
        self.runs: dict[str, _Run] = {}
        #: label dicts shared by every process's series (the scrape cache goes by their identity)
        self._span_labels: dict[SeriesKey, list[dict[str, str]]] = {}
        self._pushed_labels: dict[Hashable, dict[str, str]] = {}
        #: this tick: the processes whose pod is a ready endpoint, and each sender pod's receiver
        self._ready: list[str] = []
        self._routes: dict[str, _Run | None] = {}
        self._now = 0.0

    def observe(self, view: ClusterView, t: float) -> None:
        """Take this tick's collector processes: one seen for the first time starts empty, one that is
        gone (stopped, restarted, deleted) takes its series with it."""
        self._now, self._routes = t, {}
        cfg = self.config
        if cfg is None:
            return
        runs: dict[str, _Run] = {}
        ready: list[str] = []
        for pod in view.selected({"matchLabels": cfg.selector}):
            status = _container_status(pod, cfg.container)
            if "running" not in (status.get("state") or {}):
                continue
            meta = pod["metadata"]
            key = f"{meta.get('uid', meta['name'])}/{cfg.container}/{int(status.get('restartCount', 0))}"
            run = self.runs.get(key)
            if run is None:
                run = _Run(str(meta.get("namespace", view.namespace)), meta["name"], _image_tag(pod, cfg.container), t,
                           SpanMetrics(self.spec.buckets_ms, self.spec.namespace, self.spec.job_prefix, self._span_labels))
            runs[key] = run
            if is_ready(pod) and not meta.get("deletionTimestamp"):
                ready.append(key)
        self.runs, self._ready = runs, sorted(ready)

    def receiver(self, view: ClusterView, pod: PodView) -> SpanMetrics | None:
        """The connector that counts ``pod``'s spans this tick; None when no collector answers it."""
        run = self._route(view, pod)
        return run.spans if run is not None else None

    def _route(self, view: ClusterView, pod: PodView) -> _Run | None:
        if pod.uid in self._routes:
            return self._routes[pod.uid]
        run: _Run | None = None
        if self.config is not None and self._ready:
            host, port = resolve_address(self.config.otlp, pod.env)
            exports = _OTLP_HTTP if port == _OTLP_HTTP_PORT else _OTLP_GRPC
            if reach(self.spec, view, pod, host, port, "", request=exports).ok_share > 0:
                run = self.runs[self._ready[zlib.crc32(pod.uid.encode()) % len(self._ready)]]
        self._routes[pod.uid] = run
        return run

    def _labels(self, key: Hashable, make: Callable[[], dict[str, str]]) -> dict[str, str]:
        labels = self._pushed_labels.get(key)
        if labels is None:
            labels = self._pushed_labels[key] = make()
        return labels

    def push(self, view: ClusterView, pod: PodView, key: Hashable, make: Callable[[], dict[str, str]], value: float) -> None:
        """A metric ``pod`` exports over OTLP (its labels built by ``make`` once per ``key``)."""
        run = self._route(view, pod)
        if run is not None:
            run.pushed[key] = (self._labels(key, make), value, self._now)

    def receive(self, key: Hashable, make: Callable[[str], dict[str, str]], value: float) -> None:
        """A metric the collector's own kafkametrics receiver reads, in every process (``make`` gets the
        receiver's scope version)."""
        for run in self.runs.values():
            run.pushed[(key, run.version)] = (self._labels((key, run.version), partial(make, run.version)), value, self._now)

    def flush(self) -> None:
        """Each process's connector flushes on its own clock; the exporter forgets what expired."""
        cfg = self.config
        if cfg is None:
            return
        for run in self.runs.values():
            due = math.floor((self._now - run.started) / cfg.flush_interval_s + 1e-9)
            if due > run.flushes:
                run.flushes, run.flushed = due, run.spans.samples()
            if any(self._now - at > cfg.metric_expiration_s for _, _, at in run.pushed.values()):
                run.pushed = {k: e for k, e in run.pushed.items() if self._now - e[2] <= cfg.metric_expiration_s}

    def exposed(self) -> dict[Endpoint, list[list[Sample]]]:
        """What each running process's exporter serves now, by (namespace, pod, port)."""
        if self.config is None:
            return {}
        port = self.config.metrics_port
        return {(run.namespace, run.pod, port): [run.flushed, [(labels, value) for labels, value, _ in run.pushed.values()]]
                for run in self.runs.values()}

    def snapshot(self) -> dict[str, _Run]:
        return {k: r.copy() for k, r in self.runs.items()}

    def restore(self, snap: dict[str, _Run]) -> None:
        self.runs = {k: r.copy() for k, r in snap.items()}
        self._ready, self._routes = [], {}

