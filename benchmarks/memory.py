"""Figure 4: resident memory per environment, in a fresh process.

A spawned interpreter imports the package, makes a first env (which imports the libraries the twin
needs: numpy, the Kubernetes client, the servers), then resets it and makes and resets more envs one
after another (each with its own twin), reading its resident set size (``VmRSS`` of
``/proc/self/status``) after a garbage collection at each point. The first reset also builds the
process' shared healthy baseline; the growth per extra env is what a process pays for each.
"""

from __future__ import annotations

import gc
import multiprocessing
from pathlib import Path

from benchmarks.options import Options, reference_scenario
from benchmarks.report import Row, Section

KEY, TITLE = "memory", "4. Resident memory per environment"
STATUS = Path("/proc/self/status")


def rss_mb() -> float:
    """This process's resident set size in MB (Linux: ``VmRSS``)."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise OSError(f"{STATUS} has no VmRSS line")


def measure(scenario: str, envs: int) -> list[float]:
    """RSS after the import, after the first make and after each env's first reset (in a fresh process)."""
    import itbench_gym

    gc.collect()
    out = [rss_mb()]
    made = [itbench_gym.make(scenario)]
    gc.collect()
    out.append(rss_mb())
    for i in range(envs):
        if i:
            made.append(itbench_gym.make(scenario))
        made[-1].reset(seed=3000 + i)
        gc.collect()
        out.append(rss_mb())
    for env in made:
        env.close()
    return out


def run(opts: Options) -> Section:
    rss_mb()  # fail early (n/a) where there is no /proc
    scenario = reference_scenario(opts)
    envs = 2 if opts.quick else 4
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        points = pool.apply(measure, (scenario, envs))
    growth = [b - a for a, b in zip(points[2:], points[3:], strict=False)]
    return Section(KEY, f"{TITLE} ({scenario})", [
        Row("RSS after `import itbench_gym`", "MB", [points[0]]),
        Row("RSS after the first `make` (the twin's libraries loaded)", "MB", [points[1]]),
        Row("RSS with one env after reset", "MB", [points[2]]),
        Row("first env's reset (its twin and the process' shared baseline)", "MB", [points[2] - points[1]]),
        Row("each extra env after reset (RSS growth)", "MB", growth),
    ], notes=[f"{envs} envs made and reset (new seeds) one after another in one fresh process; the target of issue 12 is "
              "≤ 150 MB per env."], facts={"rss_mb": points})
