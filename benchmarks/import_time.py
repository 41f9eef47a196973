"""Wall-clock cost of ``import itbench_gym`` and of what it defers, each in a fresh interpreter.

Every run is a new process (``python -c ...``), so nothing is cached in memory between runs; the
operating system's file cache and the compiled ``.pyc`` files are warm, as for a user's second run.
Each process times only its own statements (``time.perf_counter`` around them), not its start-up,
which is reported on its own line.

Run: python benchmarks/import_time.py [--runs N] [--json PATH]   (prints a Markdown table)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SCENARIO = "SRE-CacheFailure-v0"

#: (operation, setup statements run before the clock starts, statements timed).
CASES: list[tuple[str, str, str]] = [
    ("interpreter start-up (`python -c pass`, whole process)", "", ""),
    ("`import gymnasium` (the floor: registering ids needs it)", "", "import gymnasium"),
    ("`import itbench_gym` (registers every id)", "", "import itbench_gym"),
    (f"first `make(\"{SCENARIO}\")` after the import (validates the spec, imports the env)",
     "import itbench_gym", f"itbench_gym.make({SCENARIO!r}).close()"),
]

_TIMER = """
import time as _t
{setup}
_start = _t.perf_counter()
{timed}
print(_t.perf_counter() - _start)
"""


@dataclass(frozen=True)
class Result:
    operation: str
    samples_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    def row(self) -> str:
        ms = [x * 1000 for x in (self.median_s, min(self.samples_s), max(self.samples_s))]
        return f"| {self.operation} | {len(self.samples_s)} | " + " | ".join(f"{x:,.1f}" for x in ms) + " |"


def run_once(setup: str, timed: str) -> float:
    """Seconds taken by ``timed`` in a fresh interpreter (the whole process when ``timed`` is empty)."""
    if not timed:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return time.perf_counter() - start
    proc = subprocess.run([sys.executable, "-c", _TIMER.format(setup=setup, timed=timed)],
                          check=True, capture_output=True, text=True)
    return float(proc.stdout.strip().splitlines()[-1])


def measure(runs: int) -> list[Result]:
    """Every case, ``runs`` fresh processes each, interleaved so that a burst of load hits every case alike."""
    samples: dict[str, list[float]] = {name: [] for name, _, _ in CASES}
    for _ in range(runs):
        for name, setup, timed in CASES:
            samples[name].append(run_once(setup, timed))
    return [Result(name, s) for name, s in samples.items()]


def table(results: list[Result]) -> str:
    return "\n".join(["| operation | runs | median ms | min ms | max ms |", "|---|---|---|---|---|",
                      *(r.row() for r in results)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per operation (default 10)")
    parser.add_argument("--json", type=Path, help="also write the samples here as JSON")
    args = parser.parse_args()
    results = measure(args.runs)
    if args.json:
        rows = [{**asdict(r), "median_s": r.median_s} for r in results]
        args.json.write_text(json.dumps({"python": sys.version.split()[0], "results": rows}, indent=2) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
