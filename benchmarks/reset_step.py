"""Wall-clock cost of the things a user waits for: reset (new seed, repeated seed), steps, one tick.

Run: python benchmarks/reset_step.py [--repeats N]   (prints a Markdown table)
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

import itbench_gym
from itbench_gym.backends.sim.twin import SCRAPE_INTERVAL

SCENARIO = "SRE-CacheFailure-v0"


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def row(name: str, samples: list[float]) -> str:
    med = statistics.median(samples)
    return f"| {name} | {len(samples)} | {med * 1000:,.1f} | {min(samples) * 1000:,.1f} | {max(samples) * 1000:,.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.repeats
    env = itbench_gym.make(SCENARIO)
    seeds = iter(range(1000, 1000 + n))
    rows = [row("reset, new seed (build twin, baseline, inject, wait for alerts)", timed(lambda: env.reset(seed=next(seeds)), n))]
    rows.append(row("reset, repeated seed (incident checkpoint)", timed(lambda: env.reset(seed=1000), n)))
    for action in ("kubectl get pods -n otel-demo", "kubectl describe deploy recommendation -n otel-demo", "alerts",
                   'promql sum by (service_name) (rate(traces_span_metrics_calls_total{status_code="STATUS_CODE_ERROR"}[2m]))',
                   "wait 60"):
        rows.append(row(f"step `{action[:60]}`", timed(partial(env.step, action), n)))
    twin = env.unwrapped.backend.twin
    rows.append(row(f"one {SCRAPE_INTERVAL:.0f} s tick of the twin (all of the shop)", timed(lambda: twin.advance(SCRAPE_INTERVAL), n * 4)))
    env.close()
    print("| operation | runs | median ms | min ms | max ms |\n|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
