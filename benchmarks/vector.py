"""Figure 6: parallel environments through ``itbench_gym.make_vec`` (one process per env).

For 1, 2, 4 and 8 envs (``async``: Gymnasium's AsyncVectorEnv, each env in its own process), one
vector reset with new seeds (every env builds its own twin), one with the same seeds again (the
incident checkpoints), and a few vector steps of a cheap tool call. On a 2-core machine more than
two envs share the cores, so throughput flattens there.
"""

from __future__ import annotations

import time

import itbench_gym
from benchmarks.options import Options, reference_scenario
from benchmarks.report import Row, Section

KEY, TITLE = "vector", "6. Parallel environments (make_vec, async)"
SEED = 4000
STEPS = 5
ACTION = "alerts"


def run(opts: Options) -> Section:
    scenario = reference_scenario(opts)
    section = Section(KEY, f"{TITLE} ({scenario})")
    for n in opts.vector_sizes:
        envs = itbench_gym.make_vec(scenario, num_envs=n, vectorization_mode="async")
        try:
            start = time.perf_counter()
            envs.reset(seed=SEED)
            new = time.perf_counter() - start
            start = time.perf_counter()
            envs.reset(seed=SEED)
            repeated = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(STEPS):
                envs.step(tuple([ACTION] * n))
            stepping = time.perf_counter() - start
        finally:
            envs.close()
        label = f"{n} env{'s' if n > 1 else ''}"
        section.rows += [Row(f"{label}: resets/s, new seeds", "1/s", [n / new]),
                         Row(f"{label}: resets/s, repeated seeds", "1/s", [n / repeated]),
                         Row(f"{label}: steps/s (`{ACTION}`)", "1/s", [n * STEPS / stepping])]
    section.notes.append(f"One vector reset (seeds {SEED}, {SEED}+1, ...) per figure and {STEPS} vector steps; "
                         "rates count env resets and env steps per wall second.")
    return section
