"""Figure 7: wall-clock cost of ``import itbench_gym`` and of what it defers, each in a fresh interpreter.

Every run is a new process, so nothing is cached in memory between runs; the operating system's
file cache and the compiled ``.pyc`` files are warm, as for a user's second run. Each process times
only its own statements (``time.perf_counter`` around them), not its start-up, which has its own row.
Runs are interleaved so that a burst of load from elsewhere hits every case alike.
"""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks.options import REFERENCE_SCENARIO, Options, child_env
from benchmarks.report import Row, Section

KEY, TITLE = "import", "7. Import time"
SCENARIO = REFERENCE_SCENARIO
#: (operation, setup statements run before the clock starts, statements timed; empty: the whole process).
CASES: list[tuple[str, str, str]] = [
    ("interpreter start-up (`python -c pass`, whole process)", "", ""),
    ("`import gymnasium` (the floor: registering ids needs it)", "", "import gymnasium"),
    ("`import itbench_gym` (registers every id)", "", "import itbench_gym"),
    (f'first `make("{SCENARIO}")` after the import (validates the spec, imports the env)',
     "import itbench_gym", f"itbench_gym.make({SCENARIO!r}).close()"),
]
_TIMER = """
import time as _t
{setup}
_start = _t.perf_counter()
{timed}
print(_t.perf_counter() - _start)
"""


def run_once(setup: str, timed: str) -> float:
    """Milliseconds taken by ``timed`` in a fresh interpreter (the whole process when ``timed`` is empty)."""
    env = child_env()
    if not timed:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
        return (time.perf_counter() - start) * 1000.0
    proc = subprocess.run([sys.executable, "-c", _TIMER.format(setup=setup, timed=timed)],
                          check=True, capture_output=True, text=True, env=env)
    return float(proc.stdout.strip().splitlines()[-1]) * 1000.0


def run(opts: Options) -> Section:
    runs = 3 if opts.quick else 10
    rows = [Row(name, "ms") for name, _, _ in CASES]
    for _ in range(runs):
        for row, (_, setup, timed) in zip(rows, CASES, strict=True):
            row.samples.append(run_once(setup, timed))
    return Section(KEY, TITLE, rows, notes=[
        "Each run is a fresh interpreter timing only its own statements; the first `make` includes validating the spec "
        "and importing the env, the twin and the Kubernetes client (the work `import itbench_gym` defers)."])
