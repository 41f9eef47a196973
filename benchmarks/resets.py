"""Figure 1: reset latency per Astronomy Shop scenario: the first reset of a process, new seeds, a repeated seed.

The first reset of a process builds the app's shared healthy baseline (deploys ITBench's cluster and
runs the scenario's baseline minutes, ``backends/sim/baselines.py``) and starts the env's servers, or
loads the baseline another process left on disk (``BaselineStore``): both are measured, the build in
an empty cache folder.
Every later new seed restores that baseline, reseeds it, injects the faults and fast-forwards until
the scenario's alerts fire; a repeated seed restores the incident checkpoint. Scenarios of one app
share its baseline, so only the first scenario measured pays the build: the first row says which.
"""

from __future__ import annotations

import os
import tempfile
import time

import itbench_gym
from benchmarks.options import Options, shop_scenarios
from benchmarks.report import Row, Section, timed_ms
from itbench_gym.backends.sim.baselines import SHARED_BASELINES
from itbench_gym.clock import SIM_EPOCH
from itbench_gym.env import ITBenchEnv

KEY, TITLE = "reset", "1. Reset latency"
CACHE_ENV = "ITBENCH_GYM_CACHE"
FIRST_SEED = 1000


def first_reset_rows(scenario: str) -> list[Row]:
    """The first reset of a process: building the baseline (an empty cache folder), then loading it from disk."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="itbench-gym-bench-cache-") as cache:
        saved = os.environ.get(CACHE_ENV)
        os.environ[CACHE_ENV] = cache
        try:
            for label, seed in (("builds the shared baseline", FIRST_SEED - 2), ("loads it from disk", FIRST_SEED - 1)):
                SHARED_BASELINES.clear()
                env = itbench_gym.make(scenario)
                try:
                    start = time.perf_counter()
                    env.reset(seed=seed)
                    rows.append(Row(f"{scenario} first reset of a process ({label})", "ms", [(time.perf_counter() - start) * 1000.0]))
                finally:
                    env.close()
        finally:
            if saved is None:
                del os.environ[CACHE_ENV]
            else:
                os.environ[CACHE_ENV] = saved
    return rows


def scenario_rows(scenario: str, new_runs: int, repeated_runs: int, *, first: bool) -> list[Row]:
    """The first resets (when ``first``), then new-seed and repeated-seed reset times of one env of ``scenario``."""
    rows = first_reset_rows(scenario) if first else []
    env = itbench_gym.make(scenario)
    try:
        seeds = iter(range(FIRST_SEED, FIRST_SEED + new_runs + 1))
        env.reset(seed=next(seeds))
        wall, minutes = [], []
        unwrapped = env.unwrapped
        assert isinstance(unwrapped, ITBenchEnv)
        baseline_end = SIM_EPOCH + unwrapped.scenario.baseline_seconds  # every new seed starts there
        for _ in range(new_runs):
            start = time.perf_counter()
            env.reset(seed=next(seeds))
            wall.append((time.perf_counter() - start) * 1000.0)
            minutes.append((unwrapped.backend.clock.now() - baseline_end) / 60.0)
        rows.append(Row(f"{scenario} new seed", "ms", wall))
        rows.append(Row(f"{scenario} new seed: simulated minutes from the injection to the alerts", "min", minutes))
        last = FIRST_SEED + new_runs  # still among the incidents the backend keeps
        rows.append(Row(f"{scenario} repeated seed", "ms", timed_ms(lambda: env.reset(seed=last), repeated_runs)))
        return rows
    finally:
        env.close()


#: New and repeated seeds per scenario: (full run, ``--quick``). Five new seeds per scenario keep the
#: whole harness under ten minutes on two cores (53 scenarios); a repeated seed costs ~20 ms.
RUNS = {False: (5, 10), True: (3, 3)}


def run(opts: Options) -> Section:
    new_runs, repeated_runs = RUNS[opts.quick]
    section = Section(KEY, TITLE)
    SHARED_BASELINES.clear()
    for i, scenario in enumerate(opts.scenarios or tuple(shop_scenarios())):
        section.rows += scenario_rows(scenario, new_runs, repeated_runs, first=i == 0)
    section.notes.append("First reset: deploy the cluster and run the baseline minutes (or load them from the cache folder), then as a new seed. New seed: restore the "
                         "shared baseline, reseed, inject, fast-forward until the alerts fire (one warm-up reset first). "
                         "Repeated seed: restore the checkpoint taken when they fired.")
    return section
