"""The runtime metrics a service's OpenTelemetry instrumentation exports over OTLP (``runtime_metrics.yaml``).

Each tick the model hands every running process of such a service its working set, CPU use, request
rate and the full collections its code forces; the process keeps its cumulative counters (CPU time,
collections) for as long as it runs. Every export interval after the process started its SDK exports
the runtime's quantities, which reach the collector process its telemetry goes to (``collector.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from itbench_gym.lang import yamltext

from .jvm import MIB

#: (attribute values in the metric's label order, value)
Point = tuple[tuple[str, ...], float]
_QUANTITIES = frozenset({"memory_used", "memory_limit", "gc_duration", "threads", "classes_loaded", "classes_unloaded",
                         "classes", "cpu_time", "cpus", "cpu_utilization"})


class RuntimeMetricsError(ValueError):
    """runtime_metrics.yaml does not describe what the model can export."""


@dataclass(frozen=True)
class MetricDef:
    name: str
    quantity: str
    labels: tuple[str, ...]
    #: a histogram's bucket bounds (empty: a gauge or a counter)
    buckets: tuple[float, ...] = ()


@dataclass(frozen=True)
class GcDef:
    pools: dict[str, str]
    young: tuple[str, str]
    old: tuple[str, str]
    new_ratio: float
    survivor_ratio: float


@dataclass(frozen=True)
class JvmDef:
    server_cpus: float
    server_memory: float
    collectors: dict[str, GcDef]
    #: (pool, used bytes, limit bytes or None)
    non_heap: tuple[tuple[str, float, float | None], ...]
    native: float
    allocation_per_request: float
    allocation_per_s: float
    minor_pause_s: float
    full_pause_s_per_byte: float
    #: (daemon, state, count)
    threads: tuple[tuple[str, str, float], ...]
    classes: float


@dataclass(frozen=True)
class RuntimeDef:
    name: str
    services: tuple[str, ...]
    scope: tuple[str, str]
    export_interval_s: float
    metrics: tuple[MetricDef, ...]
    jvm: JvmDef


@dataclass(frozen=True)
class ProcessState:
    """What the model knows of one process this tick."""

    working_set: float
    cpu_cores: float
    #: CPUs the runtime sees: its container's CPU limit rounded up, else its node's
    cpus: float
    memory_limit: float
    max_heap: float
    requests_per_s: float
    inflight: float
    full_gcs_per_s: float


@dataclass
class Counters:
    """A process's cumulative runtime counters (they start at zero with the process)."""

    cpu_s: float = 0.0
    #: (collector name, action) -> per-bucket counts (the last one above every bound) and the sum of pauses
    gc: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    exports: int = 0


def _need(raw: Any, key: str, where: str) -> Any:
    if not isinstance(raw, dict) or key not in raw:
        raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}: missing {key!r}")
    return raw[key]


def _gc(raw: dict[str, Any], where: str) -> GcDef:
    pools = _need(raw, "pools", where)
    if set(pools) != {"eden", "survivor", "old"}:
        raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}.pools: needs eden, survivor and old")
    young, old = _need(raw, "young", where), _need(raw, "old", where)
    return GcDef(dict(pools), (str(_need(young, "name", where)), str(_need(young, "action", where))),
                 (str(_need(old, "name", where)), str(_need(old, "action", where))),
                 float(_need(raw, "new_ratio", where)), float(_need(raw, "survivor_ratio", where)))


def _jvm(raw: dict[str, Any], where: str) -> JvmDef:
    server = _need(raw, "server_class", where)
    collectors = {name: _gc(c, f"{where}.collectors.{name}") for name, c in _need(raw, "collectors", where).items()}
    if set(collectors) != {"serial", "g1"}:
        raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}.collectors: needs serial and g1")
    non_heap = tuple((str(_need(p, "pool", where)), float(_need(p, "used_mi", where)) * MIB,
                      float(p["limit_mi"]) * MIB if "limit_mi" in p else None) for p in _need(raw, "non_heap", where))
    threads = tuple((str(_need(t, "daemon", where)), str(_need(t, "state", where)), float(_need(t, "count", where)))
                    for t in _need(raw, "threads", where))
    return JvmDef(float(_need(server, "min_cpus", where)), float(_need(server, "min_memory_mi", where)) * MIB, collectors,
                  non_heap, float(_need(raw, "native_mi", where)) * MIB, float(_need(raw, "allocation_kib_per_request", where)) * 1024.0,
                  float(_need(raw, "allocation_kib_per_second", where)) * 1024.0, float(_need(raw, "minor_pause_ms", where)) / 1000.0,
                  float(_need(raw, "full_pause_ms_per_mi", where)) / 1000.0 / MIB, threads, float(_need(raw, "classes", where)))


def _metric(raw: dict[str, Any], where: str) -> MetricDef:
    quantity = str(_need(raw, "quantity", where))
    if quantity not in _QUANTITIES:
        raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}: unknown quantity {quantity!r}")
    buckets = tuple(float(b) for b in raw.get("histogram", ()))
    if (quantity == "gc_duration") != bool(buckets):
        raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}: gc_duration, and only it, is a histogram")
    if list(buckets) != sorted(set(buckets)):
        raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}.histogram: bounds must increase")
    return MetricDef(str(_need(raw, "name", where)), quantity, tuple(str(lb) for lb in raw.get("labels", ())), buckets)


def parse(raw: Any, services: set[str]) -> tuple[RuntimeDef, ...]:
    """runtime_metrics.yaml's runtimes, checked against the app's services."""
    out = []
    for name, r in _need(raw, "runtimes", "top level").items():
        where = f"runtimes.{name}"
        unknown = [s for s in _need(r, "services", where) if s not in services]
        if unknown:
            raise RuntimeMetricsError(f"runtime_metrics.yaml: {where}.services: not services of the app: {unknown}")
        scope = _need(r, "scope", where)
        out.append(RuntimeDef(name, tuple(r["services"]), (str(_need(scope, "name", where)), str(_need(scope, "version", where))),
                              float(_need(r, "export_interval_seconds", where)),
                              tuple(_metric(m, f"{where}.metrics[{i}]") for i, m in enumerate(_need(r, "metrics", where))),
                              _jvm(_need(r, "jvm", where), f"{where}.jvm")))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _raw() -> Any:
    return yamltext.load(resources.files(__package__).joinpath("runtime_metrics.yaml").read_text())


def load(services: set[str]) -> tuple[RuntimeDef, ...]:
    return parse(_raw(), services)


def _bucket(bounds: tuple[float, ...], value: float) -> int:
    return next((i for i, b in enumerate(bounds) if value <= b), len(bounds))


class JvmProcess:
    """A JVM's pools and collections, from the process's working set and allocation."""

    def __init__(self, d: JvmDef, s: ProcessState) -> None:
        self.d, self.s = d, s
        server = s.cpus >= d.server_cpus and (s.memory_limit or math.inf) >= d.server_memory
        self.gc = d.collectors["g1" if server else "serial"]
        young = s.max_heap / (1.0 + self.gc.new_ratio)
        self.limits = {"old": s.max_heap - young, "eden": young * self.gc.survivor_ratio / (self.gc.survivor_ratio + 2.0),
                       "survivor": young / (self.gc.survivor_ratio + 2.0)}
        non_heap = sum(used for _, used, _ in d.non_heap)
        heap = min(max(s.working_set - non_heap - d.native, 0.0), s.max_heap)
        # eden fills and empties between young collections: half full on average; the rest is the old generation's
        eden = min(heap, self.limits["eden"] / 2.0)
        old = min(heap - eden, self.limits["old"])
        survivor = min(heap - eden - old, self.limits["survivor"])
        self.used = {"eden": eden + max(heap - eden - old - survivor, 0.0), "survivor": survivor, "old": old}

    def memory(self, limits: bool) -> Iterator[Point]:
        for pool, name in self.gc.pools.items():
            yield (name, "heap"), self.limits[pool] if limits else self.used[pool]
        for name, used, limit in self.d.non_heap:
            if not limits:
                yield (name, "non_heap"), used
            elif limit is not None:
                yield (name, "non_heap"), limit

    def collections(self) -> Iterator[tuple[tuple[str, str], float, float]]:
        """(collector, action), collections per second, pause seconds of each."""
        allocation = self.s.requests_per_s * self.d.allocation_per_request + self.d.allocation_per_s
        yield self.gc.young, allocation / max(self.limits["eden"], 1.0), self.d.minor_pause_s
        yield self.gc.old, self.s.full_gcs_per_s, self.used["old"] * self.d.full_pause_s_per_byte


class RuntimeTelemetry:
    """Every runtime-instrumented service's processes, exporting through ``push``."""

    def __init__(self, services: set[str]) -> None:
        self.runtimes = load(services)
        self.of_service = {svc: r for r in self.runtimes for svc in r.services}

    def observe(self, service: str, counters: Counters, s: ProcessState, age_s: float, dt: float,
                push: Callable[[str, tuple[tuple[str, str], ...], float], None]) -> None:
        """Advance one process's counters over ``dt``; at an export, ``push`` each series (metric name,
        attributes, value)."""
        r = self.of_service.get(service)
        if r is None:
            return
        jvm = JvmProcess(r.jvm, s)
        counters.cpu_s += s.cpu_cores * dt
        hist = next((m.buckets for m in r.metrics if m.buckets), (math.inf,))
        for key, per_s, pause in jvm.collections():
            counts = counters.gc.setdefault(key, [0.0] * (len(hist) + 2))
            n = per_s * dt
            counts[_bucket(hist, pause)] += n
            counts[-1] += n * pause
        due = math.floor(age_s / r.export_interval_s + 1e-9)
        if due <= counters.exports:
            return
        counters.exports = due
        for m in r.metrics:
            if m.buckets:
                self._histogram(m, counters, push)
                continue
            for attrs, value in self._points(m, r, jvm, counters, s):
                push(m.name, tuple(zip(m.labels, attrs, strict=True)), value)

    @staticmethod
    def _histogram(m: MetricDef, c: Counters, push: Callable[[str, tuple[tuple[str, str], ...], float], None]) -> None:
        """The collections so far as the exporter serves a histogram: whole collections per cumulative bucket."""
        for (name, action), counts in sorted(c.gc.items()):
            attrs = tuple(zip(m.labels, (action, name), strict=True))
            running = 0.0
            for bound, n in zip((*m.buckets, math.inf), counts[:-1], strict=True):
                running += n
                push(f"{m.name}_bucket", (*attrs, ("le", _le(bound))), float(math.floor(running + 1e-9)))
            push(f"{m.name}_sum", attrs, counts[-1])
            push(f"{m.name}_count", attrs, float(math.floor(running + 1e-9)))

    def _points(self, m: MetricDef, r: RuntimeDef, jvm: JvmProcess, c: Counters, s: ProcessState) -> Iterator[Point]:
        q = m.quantity
        if q in ("memory_used", "memory_limit"):
            yield from jvm.memory(q == "memory_limit")
        elif q == "threads":
            for daemon, state, count in r.jvm.threads:
                yield (daemon, state), count + (round(s.inflight) if (daemon, state) == ("true", "runnable") else 0)
        elif q in ("classes_loaded", "classes"):
            yield (), r.jvm.classes
        elif q == "classes_unloaded":
            yield (), 0.0
        elif q == "cpu_time":
            yield (), c.cpu_s
        elif q == "cpus":
            yield (), s.cpus
        elif q == "cpu_utilization":
            yield (), min(s.cpu_cores / s.cpus, 1.0) if s.cpus > 0 else 0.0


def _le(bound: float) -> str:
    """A bound as the exporter writes it (Go's shortest decimal form)."""
    return "+Inf" if math.isinf(bound) else f"{bound:g}"
