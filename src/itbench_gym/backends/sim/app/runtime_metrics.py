"""The runtime metrics a service's OpenTelemetry instrumentation exports over OTLP (``runtime-metrics.yaml``).

Each tick the model hands every running process of such a service its working set, CPU use, request
rate and the full collections its code forces; the process keeps its cumulative counters (CPU time,
collections) for as long as it runs. Every export interval after the process started its SDK exports
the runtime's quantities, which reach the collector process its telemetry goes to (``collector.py``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext

from .jvm import MIB

#: (attribute values in the metric's label order, value)
Point = tuple[tuple[str, ...], float]
#: what receives an exported series: metric name, attributes, value, instrumentation scope (name, version)
Push = Callable[[str, tuple[tuple[str, str], ...], float, tuple[str, str]], None]
#: what each kind of runtime model yields, by the quantity a metric names
_QUANTITIES = {
    "jvm": frozenset({"memory_used", "memory_limit", "gc_duration", "threads", "classes_loaded", "classes_unloaded",
                      "classes", "cpu_time", "cpus", "cpu_utilization"}),
    "node": frozenset({*(f"eventloop_delay_{stat}" for stat in ("min", "max", "mean", "stddev", "p50", "p90", "p99")), "eventloop_utilization", "eventloop_time", "gc_duration", "heap_used", "heap_limit",
                       "heap_available", "heap_physical"}),
    "go": frozenset({"memory_used", "memory_limit", "memory_allocated", "memory_allocations", "gc_goal", "goroutines",
                     "processor_limit", "gogc"}),
    "dotnet": frozenset({"cpus", "cpu_time", "working_set", "virtual_memory", "threads", "gc_collections", "allocated", "committed",
                         "heap_size", "heap_fragmentation", "gc_pause_time", "jit_il_bytes", "jit_methods", "jit_time",
                         "lock_contentions", "pool_threads", "work_items", "queue_length", "timers", "assemblies", "exceptions"}),
    "python": frozenset({"context_switches", "cpu_time", "cpu_utilization", "rss", "virtual_memory", "fds", "threads", "memory",
                         "gc_count", "gc_collections", "gc_collected", "gc_uncollectable", "runtime_cpu_utilization",
                         "python_threads"}),
}
#: The CLR's heap generations as its runtime metrics name them (``gc.heap.generation``); collections are
#: counted for the first three only.
_CLR_GENERATIONS = ("gen0", "gen1", "gen2", "loh", "poh")
#: What Go's runtime/metrics report for "no limit" and GOGC=off, clamped to int64 by the instrumentation.
_GO_UNSET = float(2**63 - 1)
_GO_BYTE_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
#: CPython's collector generations as gc.get_stats() and gc.get_count() index them (the attribute values)
_CPYTHON_GENERATIONS = ("0", "1", "2")
#: psutil's CPU times: /proc/<pid>/stat's clock ticks (USER_HZ) over the tick rate
_CLOCK_TICKS = 100.0


class RuntimeMetricsError(ValueError):
    """runtime-metrics.yaml does not describe what the model can export."""


@dataclass(frozen=True)
class MetricDef:
    name: str
    quantity: str
    labels: tuple[str, ...]
    #: a histogram's bucket bounds (empty: a gauge or a counter)
    buckets: tuple[float, ...] = ()
    #: the instrumentation scope (name, version) when not the runtime's (another library's meter)
    scope: tuple[str, str] | None = None
    #: that scope's schema URL
    schema_url: str = ""


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
class NodeDef:
    #: monitorEventLoopDelay's resolution (the instrumentation's monitoringPrecision)
    resolution_s: float
    export_interval_s: float
    native: float
    #: (space, share of the heap in use, its size over its use)
    spaces: tuple[tuple[str, float, float], ...]
    new_space: float
    allocation_per_request: float
    allocation_per_s: float
    major_per_minor: float
    incremental_per_major: float
    minor_pause_s: float
    major_pause_s: float
    incremental_pause_s: float


@dataclass(frozen=True)
class GoDef:
    #: the binary's pages in the working set, which the Go runtime does not manage
    binary: float
    stack_per_goroutine: float
    #: goroutines the process keeps without requests (servers, clients, the SDK's exporters)
    goroutines: float
    #: the share of the runtime's memory outside the stacks that is heap
    heap_share: float
    allocation_per_request: float
    allocation_per_s: float
    allocations_per_request: float
    allocations_per_s: float


@dataclass(frozen=True)
class DotnetDef:
    #: the process's memory outside the managed heap (the runtime, JIT'd code, native libraries, stacks)
    native: float
    #: the gen0 allocation budget: allocation between two collections
    gen0_budget: float
    #: gen1 collections per gen0 one, gen2 per gen1 one
    gen1_per_gen0: float
    gen2_per_gen1: float
    #: (pause of a gen0, a gen1 and a gen2 collection) seconds
    pauses: tuple[float, float, float]
    allocation_per_request: float
    allocation_per_s: float
    #: each generation's share of the heap after a collection, and its fragmentation's share of that
    heap_shares: tuple[tuple[str, float, float], ...]
    #: committed memory over the heap's size
    committed_over_heap: float
    #: the process's reserved address space (the GC's regions and the runtime's mappings)
    virtual: float
    #: the share of the CPU time spent in the kernel
    system_share: float
    #: threads outside the thread pool, and the pool's own while no request is in flight
    threads: float
    pool_threads: float
    work_items_per_request: float
    contentions_per_request: float
    #: what the JIT compiled while the process started (it is done by the first export)
    jit_methods: float
    jit_il: float
    jit_time: float
    timers: float
    assemblies: float
    #: the exceptions one failed request throws, by type; the failure's own exception is added when its
    #: error names a .NET one
    exceptions_per_failure: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class PythonDef:
    export_interval_s: float
    #: gc.get_threshold(): net tracked allocations that trigger a collection, gen0 collections before a
    #: gen1 one, gen1 collections before a gen2 one
    thresholds: tuple[int, int, int]
    #: gen1 collections between two gen2 ones (a gen2 collection also waits for the objects promoted since
    #: the last one to reach a quarter of the old generation)
    gen1_per_gen2: int
    #: net allocations of GC-tracked objects (containers allocated less those freed) per request, and per
    #: second without requests
    tracked_per_request: float
    tracked_per_s: float
    #: the share of those that end as reference cycles (only the cyclic collector frees them), and the
    #: shares of that garbage becoming unreachable in generation 0, 1 and 2
    garbage_share: float
    garbage_generations: tuple[float, float, float]
    #: the gRPC server's ThreadPoolExecutor max_workers (0: no pool whose threads follow the requests)
    pool_max_workers: int
    #: threads the ``threading`` module knows outside that pool, and the process's native ones besides
    python_threads: float
    native_threads: float
    #: open file descriptors while no request is in flight, and those each request in flight adds
    fds: float
    fds_per_inflight: float
    #: the address space mapped but not resident, and each thread's stack reservation
    virtual: float
    stack_per_thread: float
    #: the share of the CPU time spent in the kernel
    system_share: float
    voluntary_per_request: float
    voluntary_per_s: float
    involuntary_per_cpu_s: float


@dataclass(frozen=True)
class RuntimeDef:
    name: str
    services: tuple[str, ...]
    scope: tuple[str, str]
    export_interval_s: float
    metrics: tuple[MetricDef, ...]
    model: JvmDef | NodeDef | GoDef | DotnetDef | PythonDef
    #: the scope's schema URL ("" for a meter created without one), which the exporter serves as a label
    schema_url: str = ""


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
    #: the mean time work waits for the CPU (a single-threaded loop's queueing)
    wait_s: float
    #: CPUs of the node (what a runtime that ignores its cgroup sees)
    node_cpus: float = 0.0
    #: the container's environment
    env: Mapping[str, str] = field(default_factory=dict)
    #: requests per second the process fails, by the error text it fails them with
    failures: Mapping[str, float] = field(default_factory=dict)


@dataclass
class Counters:
    """A process's cumulative runtime counters (they start at zero with the process)."""

    #: cumulative seconds: of CPU, of the event loop active and idle
    totals: dict[str, float] = field(default_factory=dict)
    #: a collection's attributes -> per-bucket counts (the last one above every bound) and the sum of pauses
    gc: dict[tuple[str, ...], list[float]] = field(default_factory=dict)
    exports: int = 0

    def copy(self) -> Counters:
        return Counters(dict(self.totals), {k: list(v) for k, v in self.gc.items()}, self.exports)


def _need(raw: Any, key: str, where: str) -> Any:
    if not isinstance(raw, dict) or key not in raw:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}: missing {key!r}")
    return raw[key]


def _gc(raw: dict[str, Any], where: str) -> GcDef:
    pools = _need(raw, "pools", where)
    if set(pools) != {"eden", "survivor", "old"}:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.pools: needs eden, survivor and old")
    young, old = _need(raw, "young", where), _need(raw, "old", where)
    return GcDef(dict(pools), (str(_need(young, "name", where)), str(_need(young, "action", where))),
                 (str(_need(old, "name", where)), str(_need(old, "action", where))),
                 float(_need(raw, "new_ratio", where)), float(_need(raw, "survivor_ratio", where)))


def _jvm(raw: dict[str, Any], where: str) -> JvmDef:
    server = _need(raw, "server_class", where)
    collectors = {name: _gc(c, f"{where}.collectors.{name}") for name, c in _need(raw, "collectors", where).items()}
    if set(collectors) != {"serial", "g1"}:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.collectors: needs serial and g1")
    non_heap = tuple((str(_need(p, "pool", where)), float(_need(p, "used_mi", where)) * MIB,
                      float(p["limit_mi"]) * MIB if "limit_mi" in p else None) for p in _need(raw, "non_heap", where))
    threads = tuple((str(_need(t, "daemon", where)), str(_need(t, "state", where)), float(_need(t, "count", where)))
                    for t in _need(raw, "threads", where))
    return JvmDef(float(_need(server, "min_cpus", where)), float(_need(server, "min_memory_mi", where)) * MIB, collectors,
                  non_heap, float(_need(raw, "native_mi", where)) * MIB, float(_need(raw, "allocation_kib_per_request", where)) * 1024.0,
                  float(_need(raw, "allocation_kib_per_second", where)) * 1024.0, float(_need(raw, "minor_pause_ms", where)) / 1000.0,
                  float(_need(raw, "full_pause_ms_per_mi", where)) / 1000.0 / MIB, threads, float(_need(raw, "classes", where)))


def _node(raw: dict[str, Any], where: str, interval: float) -> NodeDef:
    spaces = tuple((str(_need(sp, "space", where)), float(_need(sp, "share", where)), float(_need(sp, "size_over_used", where)))
                   for sp in _need(raw, "spaces", where))
    if abs(sum(share for _, share, _ in spaces) - 1.0) > 1e-6:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.spaces: the shares must add up to 1")
    gc = _need(raw, "gc", where)
    return NodeDef(float(_need(raw, "monitoring_precision_ms", where)) / 1000.0, interval, float(_need(raw, "native_mi", where)) * MIB,
                   spaces, float(_need(raw, "new_space_mi", where)) * MIB, float(_need(raw, "allocation_kib_per_request", where)) * 1024.0,
                   float(_need(raw, "allocation_kib_per_second", where)) * 1024.0, float(_need(gc, "major_per_minor", where)),
                   float(_need(gc, "incremental_per_major", where)), float(_need(gc, "minor_pause_ms", where)) / 1000.0,
                   float(_need(gc, "major_pause_ms", where)) / 1000.0, float(_need(gc, "incremental_pause_ms", where)) / 1000.0)


def _go(raw: dict[str, Any], where: str) -> GoDef:
    return GoDef(float(_need(raw, "binary_mi", where)) * MIB, float(_need(raw, "stack_kib_per_goroutine", where)) * 1024.0,
                 float(_need(raw, "goroutines", where)), float(_need(raw, "heap_share", where)),
                 float(_need(raw, "allocation_kib_per_request", where)) * 1024.0, float(_need(raw, "allocation_kib_per_second", where)) * 1024.0,
                 float(_need(raw, "allocations_per_request", where)), float(_need(raw, "allocations_per_second", where)))


def _dotnet(raw: dict[str, Any], where: str) -> DotnetDef:
    def num(key: str) -> float:
        return float(_need(raw, key, where))

    gc = _need(raw, "gc", where)
    heap = tuple((str(_need(g, "generation", f"{where}.heap")), float(_need(g, "share", f"{where}.heap")),
                  float(_need(g, "fragmentation", f"{where}.heap"))) for g in _need(raw, "heap", where))
    if tuple(name for name, _, _ in heap) != _CLR_GENERATIONS:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.heap: needs the generations {', '.join(_CLR_GENERATIONS)}, in order")
    if abs(sum(share for _, share, _ in heap) - 1.0) > 1e-6:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.heap: the shares must add up to 1")
    exceptions = tuple((str(_need(e, "type", f"{where}.exceptions_per_failure")), float(_need(e, "count", f"{where}.exceptions_per_failure")))
                       for e in _need(raw, "exceptions_per_failure", where))
    gen0, gen1, gen2 = (float(_need(gc, f"{g}_pause_ms", f"{where}.gc")) / 1000.0 for g in _CLR_GENERATIONS[:3])
    return DotnetDef(num("native_mi") * MIB, float(_need(gc, "gen0_budget_mi", f"{where}.gc")) * MIB,
                     float(_need(gc, "gen1_per_gen0", f"{where}.gc")), float(_need(gc, "gen2_per_gen1", f"{where}.gc")), (gen0, gen1, gen2),
                     num("allocation_kib_per_request") * 1024.0, num("allocation_kib_per_second") * 1024.0, heap,
                     num("committed_over_heap"), num("virtual_gib") * 1024.0 * MIB, num("system_cpu_share"), num("threads"),
                     num("pool_threads"), num("work_items_per_request"), num("contentions_per_request"), num("jit_methods"),
                     num("jit_il_kib") * 1024.0, num("jit_seconds"), num("timers"), num("assemblies"), exceptions)


def _python(raw: dict[str, Any], where: str, interval: float) -> PythonDef:
    def num(key: str, at: str = where, of: Any = raw) -> float:
        value = _need(of, key, at)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.{key}: needs a number, not below zero")
        return float(value)

    def count(key: str, at: str = where, of: Any = raw) -> int:
        value = _need(of, key, at)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.{key}: needs a whole number, not below zero")
        return value

    gc = _need(raw, "gc", where)
    at = f"{where}.gc"
    thresholds = _need(gc, "thresholds", at)
    if not isinstance(thresholds, list) or len(thresholds) != 3 or any(
            isinstance(t, bool) or not isinstance(t, int) or t < 1 for t in thresholds):
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.thresholds: needs three whole numbers above zero (gc.get_threshold())")
    gen1_per_gen2 = count("gen1_per_gen2", at, gc)
    if gen1_per_gen2 <= thresholds[2]:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.gen1_per_gen2: at least the third threshold plus one "
                                  f"({thresholds[2] + 1}): a gen2 collection waits for that many gen1 ones")
    shares = _need(gc, "garbage_generations", at)
    if not isinstance(shares, list) or len(shares) != 3 or any(isinstance(x, bool) or not isinstance(x, int | float) or x < 0 for x in shares):
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.garbage_generations: needs three shares, one per generation")
    if abs(sum(shares) - 1.0) > 1e-6:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.garbage_generations: the shares must add up to 1")
    garbage = num("garbage_share", at, gc)
    if garbage > 1:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {at}.garbage_share: a share of the tracked allocations, at most 1")
    system = num("system_cpu_share")
    if system > 1:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.system_cpu_share: a share of the CPU time, at most 1")
    switches = _need(raw, "context_switches", where)
    sw = f"{where}.context_switches"
    return PythonDef(interval, (thresholds[0], thresholds[1], thresholds[2]), gen1_per_gen2, num("tracked_per_request", at, gc),
                     num("tracked_per_second", at, gc), garbage, (float(shares[0]), float(shares[1]), float(shares[2])),
                     count("pool_max_workers"), num("python_threads"), num("native_threads"), num("fds"), num("fds_per_inflight"),
                     num("virtual_mi") * MIB, num("stack_kib_per_thread") * 1024.0, system, num("voluntary_per_request", sw, switches),
                     num("voluntary_per_second", sw, switches), num("involuntary_per_cpu_second", sw, switches))


def _metric(raw: dict[str, Any], where: str, kind: str) -> MetricDef:
    quantity = str(_need(raw, "quantity", where))
    if quantity not in _QUANTITIES[kind]:
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}: unknown quantity {quantity!r}")
    buckets = tuple(float(b) for b in raw.get("histogram", ()))
    if (quantity == "gc_duration") != bool(buckets):
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}: gc_duration, and only it, is a histogram")
    if list(buckets) != sorted(set(buckets)):
        raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.histogram: bounds must increase")
    scope = raw.get("scope")
    return MetricDef(str(_need(raw, "name", where)), quantity, tuple(str(lb) for lb in raw.get("labels", ())), buckets,
                     None if scope is None else _scope(scope, where), "" if scope is None else _schema_url(scope))


def _scope(raw: Any, where: str) -> tuple[str, str]:
    """An instrumentation scope: its name, and its version ("" for a meter created without one)."""
    return str(_need(raw, "name", where)), str(_need(raw, "version", where) or "")


def _schema_url(raw: Any) -> str:
    """A scope's schema URL ("" for a meter created without one)."""
    return str(raw.get("schema_url") or "") if isinstance(raw, dict) else ""


def parse(raw: Any, services: set[str]) -> tuple[RuntimeDef, ...]:
    """runtime-metrics.yaml's runtimes, checked against the app's services."""
    out = []
    for name, r in _need(raw, "runtimes", "top level").items():
        where = f"runtimes.{name}"
        unknown = [s for s in _need(r, "services", where) if s not in services]
        if unknown:
            raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}.services: not services of the app: {unknown}")
        scope = _need(r, "scope", where)
        kinds = [k for k in _QUANTITIES if k in r]
        if len(kinds) != 1:
            raise RuntimeMetricsError(f"runtime-metrics.yaml: {where}: needs one runtime model ({' or '.join(_QUANTITIES)})")
        kind, interval = kinds[0], float(_need(r, "export_interval_seconds", where))
        model: JvmDef | NodeDef | GoDef | DotnetDef | PythonDef
        if kind == "jvm":
            model = _jvm(r[kind], f"{where}.jvm")
        elif kind == "node":
            model = _node(r[kind], f"{where}.node", interval)
        elif kind == "go":
            model = _go(r[kind], f"{where}.go")
        elif kind == "python":
            model = _python(r[kind], f"{where}.python", interval)
        else:
            model = _dotnet(r[kind], f"{where}.dotnet")
        metrics = tuple(_metric(m, f"{where}.metrics[{i}]", kind) for i, m in enumerate(_need(r, "metrics", where)))
        out.append(RuntimeDef(name, tuple(r["services"]), _scope(scope, where), interval, metrics, model, _schema_url(scope)))
    return tuple(out)


#: The app's file of its services' runtime metrics (an app without one exports none).
FILE = "runtime-metrics.yaml"


def raw(app_dir: Path) -> Any:
    """The app's runtime-metrics file as YAML (None when the app has none)."""
    path = app_dir / FILE
    return yamltext.load(path.read_text()) if path.exists() else None


def load(app_dir: Path, services: set[str]) -> tuple[RuntimeDef, ...]:
    data = raw(app_dir)
    return parse(data, services) if data is not None else ()


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

    def collections(self) -> Iterator[tuple[tuple[str, ...], float, float]]:
        """(action, collector), collections per second, pause seconds of each."""
        allocation = self.s.requests_per_s * self.d.allocation_per_request + self.d.allocation_per_s
        yield self.gc.young[::-1], allocation / max(self.limits["eden"], 1.0), self.d.minor_pause_s
        yield self.gc.old[::-1], self.s.full_gcs_per_s, self.used["old"] * self.d.full_pause_s_per_byte

    def advance(self, c: Counters, dt: float) -> None:
        c.totals["cpu"] = c.totals.get("cpu", 0.0) + self.s.cpu_cores * dt

    def points(self, quantity: str, c: Counters) -> Iterator[Point]:
        d, s = self.d, self.s
        if quantity in ("memory_used", "memory_limit"):
            limits = quantity == "memory_limit"
            for pool, name in self.gc.pools.items():
                yield (name, "heap"), self.limits[pool] if limits else self.used[pool]
            for name, used, limit in d.non_heap:
                if not limits:
                    yield (name, "non_heap"), used
                elif limit is not None:
                    yield (name, "non_heap"), limit
        elif quantity == "threads":
            for daemon, state, count in d.threads:
                yield (daemon, state), count + (round(s.inflight) if (daemon, state) == ("true", "runnable") else 0)
        elif quantity in ("classes_loaded", "classes"):
            yield (), d.classes
        elif quantity == "classes_unloaded":
            yield (), 0.0
        elif quantity == "cpu_time":
            yield (), c.totals.get("cpu", 0.0)
        elif quantity == "cpus":
            yield (), s.cpus
        elif quantity == "cpu_utilization":
            yield (), min(s.cpu_cores / s.cpus, 1.0) if s.cpus > 0 else 0.0


class NodeProcess:
    """A Node.js process's event loop and V8 heap, from its CPU use, queueing and working set."""

    def __init__(self, d: NodeDef, s: ProcessState) -> None:
        self.d, self.s = d, s
        #: the loop runs on one thread: the share of the time it is busy
        self.busy = min(max(s.cpu_cores, 0.0), 1.0)
        heap = max(s.working_set - d.native, 0.0)
        self.used = {name: heap * share for name, share, _ in d.spaces}

    def collections(self) -> Iterator[tuple[tuple[str, ...], float, float]]:
        """(gc type,), collections per second, pause seconds of each."""
        allocation = self.s.requests_per_s * self.d.allocation_per_request + self.d.allocation_per_s
        minor = allocation / self.d.new_space
        yield ("minor",), minor, self.d.minor_pause_s
        yield ("major",), minor * self.d.major_per_minor, self.d.major_pause_s
        yield ("incremental",), minor * self.d.major_per_minor * self.d.incremental_per_major, self.d.incremental_pause_s

    def advance(self, c: Counters, dt: float) -> None:
        c.totals["active"] = c.totals.get("active", 0.0) + self.busy * dt
        c.totals["idle"] = c.totals.get("idle", 0.0) + (1.0 - self.busy) * dt

    def _delay(self, q: float) -> float:
        """The ``q`` quantile of the loop's timer delay: its resolution, plus, when the timer falls due
        while the loop is busy (a ``busy`` share of samples), the rest of the busy stretch (exponential,
        its mean making the model's queueing wait the mean extra delay)."""
        wait = max(self.s.wait_s, 0.0)
        if self.busy <= 0 or wait <= 0 or q <= 1.0 - self.busy:
            return self.d.resolution_s
        return self.d.resolution_s + wait / self.busy * math.log(self.busy / max(1.0 - q, 1e-12))

    def _delays(self) -> dict[str, float]:
        """The delay histogram's statistics over an export interval (it is reset at each export)."""
        d, wait = self.d, max(self.s.wait_s, 0.0)
        samples = d.export_interval_s / d.resolution_s
        stddev = math.sqrt(max(2.0 * wait * wait / self.busy - wait * wait, 0.0)) if self.busy > 0 else 0.0
        return {"min": self._delay(0.0), "max": self._delay(1.0 - 1.0 / max(samples, 1.0)), "mean": d.resolution_s + wait,
                "stddev": stddev, "p50": self._delay(0.5), "p90": self._delay(0.9), "p99": self._delay(0.99)}

    def points(self, quantity: str, c: Counters) -> Iterator[Point]:
        d = self.d
        if quantity.startswith("eventloop_delay_"):
            yield (), self._delays()[quantity.removeprefix("eventloop_delay_")]
        elif quantity == "eventloop_utilization":
            yield (), self.busy
        elif quantity == "eventloop_time":
            yield ("active",), c.totals.get("active", 0.0)
            yield ("idle",), c.totals.get("idle", 0.0)
        elif quantity in ("heap_used", "heap_limit", "heap_available", "heap_physical"):
            for name, _, size_over_used in d.spaces:
                used = self.used[name]
                size = used * size_over_used
                yield (name,), {"heap_used": used, "heap_limit": size, "heap_physical": size, "heap_available": size - used}[quantity]


def go_byte_count(text: str) -> float | None:
    """GOMEMLIMIT as Go's runtime reads it (``parseByteCount``: digits and an optional ``B``, ``KiB``
    ... ``TiB``); None for ``off``, unset, or a value Go would not take."""
    digits = text.rstrip("BKMGTi")
    unit = text[len(digits):] or "B"
    if not digits.isdigit() or unit not in _GO_BYTE_UNITS:
        return None
    return float(int(digits) * _GO_BYTE_UNITS[unit])


class GoProcess:
    """A Go process's runtime/metrics, from its working set, requests and environment (Go 1.24: GOMAXPROCS
    is the node's CPUs, whatever the container's limit)."""

    def __init__(self, d: GoDef, s: ProcessState) -> None:
        self.d, self.s = d, s
        env = s.env
        self.gogc = _gogc(env.get("GOGC", ""))
        self.limit = go_byte_count(env.get("GOMEMLIMIT", ""))
        procs = env.get("GOMAXPROCS", "")
        self.procs = float(procs) if procs.isdigit() and int(procs) > 0 else s.node_cpus
        self.goroutines = d.goroutines + round(s.inflight)
        self.stack = self.goroutines * d.stack_per_goroutine
        total = max(s.working_set - d.binary, self.stack)
        self.other = total - self.stack
        heap = self.other * d.heap_share
        # the heap grows from what the last collection left live to the goal, GOGC% above it: on average halfway
        growth = self.gogc / 100.0 if self.gogc != _GO_UNSET else 1.0
        live = heap / (1.0 + growth / 2.0)
        goal = live * (1.0 + growth)
        if self.limit is not None:  # the memory limit caps the goal at what it leaves the heap
            goal = min(goal, max(self.limit - (total - heap), live))
        self.goal = goal

    def collections(self) -> Iterator[tuple[tuple[str, ...], float, float]]:
        """runtime/metrics' collections are not among the instrumentation's metrics."""
        return iter(())

    def advance(self, c: Counters, dt: float) -> None:
        d, rps = self.d, self.s.requests_per_s
        c.totals["allocated"] = c.totals.get("allocated", 0.0) + (rps * d.allocation_per_request + d.allocation_per_s) * dt
        c.totals["allocations"] = c.totals.get("allocations", 0.0) + (rps * d.allocations_per_request + d.allocations_per_s) * dt

    def points(self, quantity: str, c: Counters) -> Iterator[Point]:
        if quantity == "memory_used":
            yield ("stack",), float(round(self.stack))
            yield ("other",), float(round(self.other))
        elif quantity == "memory_limit" and self.limit is not None:  # no limit: the instrumentation observes nothing
            yield (), self.limit
        elif quantity in ("memory_allocated", "memory_allocations"):
            yield (), float(math.floor(c.totals.get(quantity.removeprefix("memory_"), 0.0)))
        elif quantity == "gc_goal":
            yield (), float(round(self.goal))
        elif quantity == "goroutines":
            yield (), float(self.goroutines)
        elif quantity == "processor_limit":
            yield (), self.procs
        elif quantity == "gogc":
            yield (), self.gogc


def _gogc(text: str) -> float:
    """GOGC as the runtime reads it (``readGOGC``): ``off`` is -1, reported clamped to int64; a value it
    cannot read is the default, 100."""
    if text == "off":
        return _GO_UNSET
    try:
        return float(int(text))
    except ValueError:
        return 100.0


#: A .NET exception type named in an error's text (``System.ApplicationException: ...``): its short name
#: is what the runtime records (``Exception.GetType().Name``).
_DOTNET_EXCEPTION = re.compile(r"\b(?:[A-Za-z_]\w*\.)*([A-Z]\w*Exception)\b")


@cache
def _named_exception(text: str) -> str | None:
    named = _DOTNET_EXCEPTION.search(text)
    return named.group(1) if named else None


class DotnetProcess:
    """A .NET process's ``System.Runtime`` meter and the process instrumentation's, from its working set,
    CPU use, requests and failures (.NET 9+: the runtime instrumentation enables the runtime's own meter)."""

    def __init__(self, d: DotnetDef, s: ProcessState) -> None:
        self.d, self.s = d, s
        self.heap = max(s.working_set - d.native, 0.0)
        self.allocation = s.requests_per_s * d.allocation_per_request + d.allocation_per_s

    def collections(self) -> Iterator[tuple[tuple[str, ...], float, float]]:
        """(generation,), collections per second, pause seconds of each; a collection counts under the
        oldest generation it collected, as the runtime reports them."""
        d = self.d
        gen0 = self.allocation / max(d.gen0_budget, 1.0)
        gen1 = gen0 * d.gen1_per_gen0
        gen2 = gen1 * d.gen2_per_gen1 + self.s.full_gcs_per_s
        yield ("gen0",), max(gen0 - gen1, 0.0), d.pauses[0]
        yield ("gen1",), max(gen1 - gen2, 0.0), d.pauses[1]
        yield ("gen2",), gen2, d.pauses[2]

    def advance(self, c: Counters, dt: float) -> None:
        d, s, t = self.d, self.s, c.totals
        for name, per_s in (("cpu", s.cpu_cores), ("allocated", self.allocation), ("work_items", s.requests_per_s * d.work_items_per_request),
                            ("contentions", s.requests_per_s * d.contentions_per_request)):
            t[name] = t.get(name, 0.0) + per_s * dt
        for text, failed in s.failures.items():
            named = _named_exception(text)
            for kind, count in (*d.exceptions_per_failure, *(((named, 1.0),) if named else ())):
                t[f"exception:{kind}"] = t.get(f"exception:{kind}", 0.0) + failed * count * dt

    def points(self, quantity: str, c: Counters) -> Iterator[Point]:
        d, s, t = self.d, self.s, c.totals
        pool = d.pool_threads + math.ceil(s.inflight)
        # the heap's figures are the last collection's: none before the first
        collected = quantity in ("committed", "heap_size", "heap_fragmentation") and sum(n[0] for n in c.gc.values()) >= 1.0
        if quantity == "cpus":
            yield (), s.cpus
        elif quantity == "cpu_time":
            yield ("user",), t.get("cpu", 0.0) * (1.0 - d.system_share)
            yield ("system",), t.get("cpu", 0.0) * d.system_share
        elif quantity == "working_set":
            yield (), float(round(s.working_set))
        elif quantity == "virtual_memory":
            yield (), float(round(d.virtual + s.working_set))
        elif quantity == "threads":
            yield (), d.threads + pool
        elif quantity == "gc_collections":
            for generation in _CLR_GENERATIONS[:3]:
                yield (generation,), float(math.floor(c.gc.get((generation,), [0.0])[0] + 1e-9))
        elif quantity == "gc_pause_time":
            yield (), sum(counts[-1] for counts in c.gc.values())
        elif quantity == "committed" and collected:
            yield (), float(round(self.heap * d.committed_over_heap))
        elif quantity in ("heap_size", "heap_fragmentation") and collected:
            for generation, share, fragmented in d.heap_shares:
                size = self.heap * share
                yield (generation,), float(round(size if quantity == "heap_size" else size * fragmented))
        elif quantity in ("allocated", "work_items", "lock_contentions"):
            yield (), float(math.floor(t.get("contentions" if quantity == "lock_contentions" else quantity, 0.0)))
        elif quantity == "pool_threads":
            yield (), float(pool)
        elif quantity == "queue_length":  # Little's law: work waiting for a thread, at the rate it arrives
            yield (), float(round(s.requests_per_s * d.work_items_per_request * max(s.wait_s, 0.0)))
        elif quantity in ("jit_methods", "jit_il_bytes", "jit_time", "timers", "assemblies"):
            yield (), {"jit_methods": d.jit_methods, "jit_il_bytes": d.jit_il, "jit_time": d.jit_time, "timers": d.timers,
                       "assemblies": d.assemblies}[quantity]
        elif quantity == "exceptions":  # a counter the runtime adds to as exceptions are thrown: none, no series
            for key in sorted(k for k in t if k.startswith("exception:")):
                if t[key] >= 1.0:
                    yield (key.removeprefix("exception:"),), float(math.floor(t[key] + 1e-9))


def _poisson_tail(mean: float, k: int) -> float:
    """P(N >= k) for N Poisson with ``mean``."""
    if k <= 0:
        return 1.0
    term = cdf = math.exp(-mean)
    for i in range(1, k):
        term *= mean / i
        cdf += term
    return max(1.0 - cdf, 0.0)


def _ticks(seconds: float) -> float:
    """CPU seconds as psutil reads them: whole clock ticks."""
    return math.floor(seconds * _CLOCK_TICKS + 1e-6) / _CLOCK_TICKS


class PythonProcess:
    """A CPython process as opentelemetry-instrumentation-system-metrics reads it through psutil (its
    default configuration): the process's CPU, memory, threads, descriptors and context switches, and
    CPython's collector, from its working set, CPU use and requests.

    CPython 3.12's collector runs when the net allocations of GC-tracked objects pass the first
    threshold; every (second threshold + 1)-th gen0 collection is followed by a gen1 one instead, and a
    gen2 one replaces every ``gen1_per_gen2 + 1``-th gen1 one. ``gc.get_stats()`` counts a collection
    under the oldest generation it collected, with the cyclic garbage it found; ``gc.get_count()`` is
    the net allocations since the last collection, and the gen0 and gen1 collections since the last one
    of the next generation."""

    def __init__(self, d: PythonDef, s: ProcessState) -> None:
        self.d, self.s = d, s

    def collections(self) -> Iterator[tuple[tuple[str, ...], float, float]]:
        """The collector's work is derived from the tracked allocations; no histogram."""
        return iter(())

    def advance(self, c: Counters, dt: float) -> None:
        d, s, t = self.d, self.s, c.totals
        rps = s.requests_per_s
        for name, per_s in (("cpu", s.cpu_cores), ("tracked", rps * d.tracked_per_request + d.tracked_per_s),
                            ("voluntary", rps * d.voluntary_per_request + d.voluntary_per_s),
                            ("involuntary", s.cpu_cores * d.involuntary_per_cpu_s)):
            t[name] = t.get(name, 0.0) + per_s * dt
        # ThreadPoolExecutor starts a worker when a request finds none idle and never stops one: the pool
        # grows to the most requests in flight at once. Requests in flight are Poisson (Little's law's
        # mean); an arrival that finds k-1 others makes k: a level counts as reached once the arrivals
        # expected to reach it add up to one.
        arrivals = rps * dt
        for k in range(1, d.pool_max_workers + 1) if arrivals > 0 else ():
            reach = arrivals * _poisson_tail(max(s.inflight, 0.0), k - 1)
            if reach <= 0:
                break
            t[f"reach:{k}"] = t.get(f"reach:{k}", 0.0) + reach

    def pool(self, c: Counters) -> int:
        """The pool's workers: the levels of concurrency the process has reached."""
        return sum(1 for k in range(1, self.d.pool_max_workers + 1) if c.totals.get(f"reach:{k}", 0.0) >= 1.0)

    def _gc(self, c: Counters) -> tuple[float, int, int, int]:
        """Collections triggered (fractional), of them gen1-or-older slots, gen2 collections."""
        t0, t1, _ = self.d.thresholds
        triggered = c.totals.get("tracked", 0.0) / (t0 + 1)
        n = math.floor(triggered + 1e-9)
        m = n // (t1 + 2)
        return triggered, n, m, m // (self.d.gen1_per_gen2 + 1)

    def _cpu_times(self, c: Counters) -> tuple[float, float]:
        """(user, system) CPU seconds, each counted in whole ticks as the kernel does."""
        cpu = c.totals.get("cpu", 0.0)
        return _ticks(cpu * (1.0 - self.d.system_share)), _ticks(cpu * self.d.system_share)

    def exported(self, c: Counters) -> None:
        """psutil's cpu_percent() measures from its last call: this export's."""
        c.totals["cpu_mark"] = sum(self._cpu_times(c))
        c.totals["cpu_mark_export"] = float(c.exports)

    def points(self, quantity: str, c: Counters) -> Iterator[Point]:
        d, s, t = self.d, self.s, c.totals
        if quantity == "cpu_time":
            user, system = self._cpu_times(c)
            yield ("user",), user
            yield ("system",), system
        elif quantity == "context_switches":
            yield ("involuntary",), float(math.floor(t.get("involuntary", 0.0)))
            yield ("voluntary",), float(math.floor(t.get("voluntary", 0.0)))
        elif quantity == "cpu_utilization":
            # the first call only starts the measurement (0.0); each later one covers the interval since
            # the last export, per CPU of the node (psutil.cpu_count())
            cpus = s.node_cpus if s.node_cpus > 0 else 1.0
            exports = c.exports - t.get("cpu_mark_export", 0.0)
            if "cpu_mark" not in t or exports <= 0:
                yield (), 0.0
            else:
                percent = round((sum(self._cpu_times(c)) - t["cpu_mark"]) / (exports * d.export_interval_s) * 100.0, 1)
                yield (), percent / 100.0 / cpus
        elif quantity == "runtime_cpu_utilization":
            # the same psutil call, made again a few callbacks later in the same collection: CPU ticks
            # are 10 ms, so it almost always sees none
            yield (), 0.0
        elif quantity == "rss":
            yield (), float(round(s.working_set))
        elif quantity == "virtual_memory":
            yield (), self._virtual(c)
        elif quantity == "memory":
            yield ("rss",), float(round(s.working_set))
            yield ("vms",), self._virtual(c)
        elif quantity == "fds":
            yield (), float(round(d.fds + d.fds_per_inflight * max(s.inflight, 0.0)))
        elif quantity == "threads":
            yield (), d.python_threads + d.native_threads + self.pool(c)
        elif quantity == "python_threads":
            yield (), d.python_threads + self.pool(c)
        elif quantity == "gc_count":
            triggered, n, m, _ = self._gc(c)
            t0, t1, _ = d.thresholds
            yield ("0",), float(math.floor((triggered - n) * (t0 + 1)))
            yield ("1",), float(n % (t1 + 2))
            yield ("2",), float(m % (d.gen1_per_gen2 + 1))
        elif quantity == "gc_collections":
            _, n, m, k = self._gc(c)
            for generation, collections in zip(_CPYTHON_GENERATIONS, (n - m, m - k, k), strict=True):
                yield (generation,), float(collections)
        elif quantity == "gc_collected":
            _, n, m, k = self._gc(c)
            t1 = d.thresholds[1]
            young, middle, old = (share * d.garbage_share * (d.thresholds[0] + 1) for share in d.garbage_generations)
            at_gen1 = young + middle * (t1 + 2)
            at_gen2 = at_gen1 + old * (t1 + 2) * (d.gen1_per_gen2 + 1)
            for generation, found in zip(_CPYTHON_GENERATIONS, (young * (n - m), at_gen1 * (m - k), at_gen2 * k), strict=True):
                yield (generation,), float(math.floor(found + 1e-9))
        elif quantity == "gc_uncollectable":  # only gc.DEBUG_SAVEALL keeps cyclic garbage (Python 3.4+)
            for generation in _CPYTHON_GENERATIONS:
                yield (generation,), 0.0

    def _virtual(self, c: Counters) -> float:
        d = self.d
        threads = d.python_threads + d.native_threads + self.pool(c)
        return float(round(d.virtual + d.stack_per_thread * threads + self.s.working_set))


Process = JvmProcess | NodeProcess | GoProcess | DotnetProcess | PythonProcess


class RuntimeTelemetry:
    """Every runtime-instrumented service's processes, exporting through ``push``."""

    def __init__(self, app_dir: Path, services: set[str]) -> None:
        self.runtimes = load(app_dir, services)
        self.of_service = {svc: r for r in self.runtimes for svc in r.services}

    def observe(self, service: str, counters: Counters, s: ProcessState, age_s: float, dt: float, push: Push) -> None:
        """Advance one process's counters over ``dt``; at an export, ``push`` each series (metric name,
        attributes, value, instrumentation scope)."""
        r = self.of_service.get(service)
        if r is None:
            return
        proc: Process
        if isinstance(r.model, JvmDef):
            proc = JvmProcess(r.model, s)
        elif isinstance(r.model, NodeDef):
            proc = NodeProcess(r.model, s)
        elif isinstance(r.model, GoDef):
            proc = GoProcess(r.model, s)
        elif isinstance(r.model, PythonDef):
            proc = PythonProcess(r.model, s)
        else:
            proc = DotnetProcess(r.model, s)
        proc.advance(counters, dt)
        hist = next((m.buckets for m in r.metrics if m.buckets), (math.inf,))
        for key, per_s, pause in proc.collections():
            counts = counters.gc.setdefault(key, [0.0] * (len(hist) + 2))
            n = per_s * dt
            counts[_bucket(hist, pause)] += n
            counts[-1] += n * pause
        due = math.floor(age_s / r.export_interval_s + 1e-9)
        if due <= counters.exports:
            return
        counters.exports = due
        for m in r.metrics:
            scope = m.scope or r.scope
            # the exporter serves the scope's schema URL as a label (none for a meter without one)
            schema = m.schema_url if m.scope else r.schema_url
            extra = (("otel_scope_schema_url", schema),) if schema else ()
            if m.buckets:
                _histogram(m, counters, scope, extra, push)
                continue
            for attrs, value in proc.points(m.quantity, counters):
                push(m.name, (*zip(m.labels, attrs, strict=True), *extra), value, scope)
        if isinstance(proc, PythonProcess):
            proc.exported(counters)


def _histogram(m: MetricDef, c: Counters, scope: tuple[str, str], extra: tuple[tuple[str, str], ...], push: Push) -> None:
    """The collections so far as the exporter serves a histogram: whole collections per cumulative bucket."""
    for key, counts in sorted(c.gc.items()):
        attrs = (*zip(m.labels, key, strict=True), *extra)
        running = 0.0
        for bound, n in zip((*m.buckets, math.inf), counts[:-1], strict=True):
            running += n
            push(f"{m.name}_bucket", (*attrs, ("le", _le(bound))), float(math.floor(running + 1e-9)), scope)
        push(f"{m.name}_sum", attrs, counts[-1], scope)
        push(f"{m.name}_count", attrs, float(math.floor(running + 1e-9)), scope)


def _le(bound: float) -> str:
    """A bound as the exporter writes it (Go's shortest decimal form)."""
    return "+Inf" if math.isinf(bound) else f"{bound:g}"
