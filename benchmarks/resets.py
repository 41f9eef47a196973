"""Figure 1: reset latency per Astronomy Shop scenario, for new seeds and for a repeated seed.

A new seed builds the twin, settles the healthy baseline, injects the faults and fast-forwards until
the scenario's alerts fire; a repeated seed restores the incident checkpoint. The first new-seed
reset of an env also starts its servers: it is one of the samples, as a user's first reset is.
"""

from __future__ import annotations

import itbench_gym
from benchmarks.options import Options, shop_scenarios
from benchmarks.report import Row, Section, timed_ms

KEY, TITLE = "reset", "1. Reset latency"
FIRST_SEED = 1000


def scenario_rows(scenario: str, new_runs: int, repeated_runs: int) -> list[Row]:
    """New-seed then repeated-seed reset times of one env of ``scenario``."""
    env = itbench_gym.make(scenario)
    try:
        seeds = iter(range(FIRST_SEED, FIRST_SEED + new_runs))
        return [Row(f"{scenario} new seed", "ms", timed_ms(lambda: env.reset(seed=next(seeds)), new_runs)),
                Row(f"{scenario} repeated seed", "ms", timed_ms(lambda: env.reset(seed=FIRST_SEED), repeated_runs))]
    finally:
        env.close()


def run(opts: Options) -> Section:
    new_runs, repeated_runs = (2, 3) if opts.quick else (5, 10)
    section = Section(KEY, TITLE)
    for scenario in opts.scenarios or tuple(shop_scenarios()):
        section.rows += scenario_rows(scenario, new_runs, repeated_runs)
    section.notes.append("New seed: build the twin, 10 simulated minutes of baseline (or more, as the scenario asks), inject, "
                         "fast-forward until the alerts fire. Repeated seed: restore the checkpoint taken when they fired.")
    return section
