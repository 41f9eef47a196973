"""One container's CPU over one tick: fair sharing, the CFS quota, queueing and JIT warm-up.

The Linux scheduler shares a container's CPU fairly between its runnable threads; a CPU limit is a
CFS quota of ``limit`` × 100 ms per 100 ms period, and once a period's quota is spent every thread
of the container waits for the next period (it is *throttled*). So:

- busy threads (a CPU-burning flag, a StressChaos worker, a JIT compiler warming up) take their
  fair share, and the request stream gets what is left;
- request work beyond what the stream gets queues: the backlog grows without bound while demand
  exceeds it and waiting time with it, until callers time out;
- a runtime that runs one thread of Python or JavaScript at a time never uses more than one core;
- while throttled, every thread hand-off of a request waits for the next period.

cAdvisor's ``container_cpu_cfs_*`` counters follow from the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from itbench_gym.poisson import poisson_sf

#: CFS bandwidth period (the kernel's default ``cpu.cfs_period_us`` of 100 ms).
CFS_PERIOD_S = 0.1
#: Highest utilisation the processor-sharing slowdown 1 / (1 - rho) is taken at; beyond it the
#: backlog (which grows while demand exceeds capacity) carries the queueing.
MAX_RHO = 0.95
#: Runnable-thread activity per period that has nothing to do with requests (timers, GC, exporters).
BACKGROUND_WAKEUPS_PER_PERIOD = 0.5


@dataclass(frozen=True)
class CpuState:
    """What one process carries from tick to tick, and the latency it imposes next tick."""

    backlog_core_s: float = 0.0
    jit_cpu_s: float = 0.0
    slowdown: float = 1.0
    wait_s: float = 0.0


@dataclass(frozen=True)
class CpuDemand:
    """One tick's demand on one container."""

    cores: float  # what the container can use at most: min(CPU limit, runtime's max, node)
    limit: float  # the CFS quota in cores (inf without a CPU limit)
    node_cores: float  # CPUs its threads can run on in parallel
    idle: float  # background usage
    busy_threads: float  # threads burning CPU regardless of requests
    request_cpu_s: float  # CPU seconds per second the arriving requests need when warm
    requests_per_s: float
    cpu_per_request_s: float
    wakeups_per_request: float
    jit_cold_factor: float
    jit_warmup_cpu_s: float


@dataclass(frozen=True)
class CpuTick:
    state: CpuState
    usage_cores: float
    cfs_periods_per_s: float
    cfs_throttled_periods_per_s: float
    cfs_throttled_s_per_s: float


def fair_shares(demands: list[float], weights: list[float], capacity: float) -> list[float]:
    """Max-min fair allocation of ``capacity`` (water-filling), each demand weighted by its threads."""
    alloc = [0.0] * len(demands)
    left = capacity
    open_ = [i for i, d in enumerate(demands) if d > 0 and weights[i] > 0]
    while open_ and left > 1e-12:
        level = left / sum(weights[i] for i in open_)
        done = [i for i in open_ if demands[i] - alloc[i] <= weights[i] * level]
        if not done:
            for i in open_:
                alloc[i] += weights[i] * level
            break
        for i in done:
            left -= demands[i] - alloc[i]
            alloc[i] = demands[i]
        open_ = [i for i in open_ if i not in done]
    return alloc


def cpu_tick(prev: CpuState, d: CpuDemand, dt: float) -> CpuTick:
    """Advance one container by ``dt`` seconds of demand ``d``."""
    warm = min(prev.jit_cpu_s / d.jit_warmup_cpu_s, 1.0) if d.jit_warmup_cpu_s > 0 else 1.0
    cold = 1.0 + (d.jit_cold_factor - 1.0) * (1.0 - warm)
    compiling = 1.0 if warm < 1.0 else 0.0
    want = d.request_cpu_s * cold
    queued = prev.backlog_core_s / dt if dt > 0 else 0.0
    capacity = max(d.cores - d.idle, 0.0)
    # the request stream counts as one runnable thread unless it has queued work for more
    req_threads = max(1.0, min(want + queued, capacity)) if want + queued > 0 else 0.0
    burn, compiler, served = fair_shares([d.busy_threads, compiling, want + queued], [d.busy_threads, compiling, req_threads], capacity)
    stream_cap = fair_shares([d.busy_threads, compiling, capacity], [d.busy_threads, compiling, max(req_threads, 1.0)], capacity)[2]
    backlog = max(prev.backlog_core_s + (want - served) * dt, 0.0)
    demand_total = d.idle + d.busy_threads + compiling + want + queued
    contended = demand_total > d.cores * 0.999
    # per-thread speed: a thread runs at one core until the container's CPU runs out
    runnable = d.busy_threads + compiling + req_threads
    speed = min(1.0, d.cores / runnable) if contended and runnable > 0 else 1.0
    rho = min(want / stream_cap, MAX_RHO) if stream_cap > 0 else MAX_RHO
    periods, thr_periods, thr_s = 0.0, 0.0, 0.0
    if math.isfinite(d.limit):
        saturated = contended or backlog > 0
        active = 1.0 if saturated else 1.0 - math.exp(-(d.requests_per_s * CFS_PERIOD_S + BACKGROUND_WAKEUPS_PER_PERIOD))
        periods = active / CFS_PERIOD_S
        if saturated:
            # every period's quota runs out: with n threads running in parallel it lasts limit/n
            # of the period, and the cgroup is throttled for the rest
            thr_periods = periods
            thr_s = max(0.0, 1.0 - d.limit / min(max(runnable, d.limit), d.node_cores))
        else:
            # bursts: a period whose arrivals need more than the quota left by the background
            work = d.cpu_per_request_s * cold
            spare = d.limit * CFS_PERIOD_S - (d.idle + d.busy_threads + compiling) * CFS_PERIOD_S
            thr_periods = periods * (poisson_sf(math.floor(spare / work), d.requests_per_s * CFS_PERIOD_S) if work > 0 else 0.0)
            thr_s = thr_periods * CFS_PERIOD_S / 2
    # a hand-off that lands in throttled time waits, on average, half a period
    wakeup_wait = d.wakeups_per_request * min(thr_s, 1.0) * CFS_PERIOD_S / 2
    state = CpuState(
        backlog_core_s=backlog,
        jit_cpu_s=prev.jit_cpu_s + compiler * dt,
        slowdown=cold / speed / (1.0 - rho),
        wait_s=(backlog / stream_cap if stream_cap > 0 else 0.0) + wakeup_wait,
    )
    usage = min(d.cores, d.idle + burn + compiler + served)
    return CpuTick(state, usage, periods, thr_periods, thr_s)
