"""Run the benchmark sections, write ``benchmarks.json`` and ``benchmarks.md``, print the Markdown.

A section that cannot run here (a missing binary, no ``/proc``, a size the twin refuses) is reported
as n/a with its reason instead of stopping the run, so every figure that can be measured is.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from benchmarks import episodes, imports, memory, resets, scaling, steps, vector
from benchmarks.options import FULL_SIZES, QUICK_SIZES, SECTIONS, Options
from benchmarks.report import Report, Section, machine_facts, not_available

#: Section key -> the module that measures it (``KEY``, ``TITLE``, ``run(options)``).
MODULES: dict[str, ModuleType] = {m.KEY: m for m in (resets, steps, episodes, memory, scaling, vector, imports)}
#: Largest synthetic app of a ``--quick`` run.
QUICK_MAX_SERVICES = 100
DEFAULT_OUT = Path("benchmark-results")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"needs positive integers, got {text!r}")
    return values


def _sections(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(set(keys) - set(SECTIONS))
    if unknown or not keys:
        raise argparse.ArgumentTypeError(f"unknown section(s) {unknown or text!r}; choose from {', '.join(SECTIONS)}")
    return tuple(k for k in SECTIONS if k in keys)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The harness's options (shared by ``python -m benchmarks`` and ``itbench-gym bench``)."""
    parser.add_argument("--quick", action="store_true", help="fewer repeats, synthetic apps up to 100 services, 1 and 2 parallel envs (about 5 minutes; the full run about 9)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder for benchmarks.json and benchmarks.md (default {DEFAULT_OUT})")
    parser.add_argument("--only", type=_sections, default=SECTIONS, help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--sizes", type=_ints, help=f"synthetic app sizes in services (default {','.join(map(str, FULL_SIZES))}; "
                        f"--quick: {','.join(map(str, QUICK_SIZES))})")
    parser.add_argument("--vector-sizes", type=_ints, help="numbers of parallel envs (default 1,2,4,8; --quick: 1,2)")
    parser.add_argument("--agent", help="agent for the throughput figure (default: heuristic if the package has it, else oracle)")
    parser.add_argument("--scenario", action="append", default=[], help="scenario id (repeatable; default every Astronomy Shop scenario)")


def options_from(args: argparse.Namespace) -> Options:
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    if args.quick:
        sizes = tuple(s for s in sizes if s <= QUICK_MAX_SERVICES) or (min(sizes),)
    vector_sizes = args.vector_sizes or ((1, 2) if args.quick else (1, 2, 4, 8))
    return Options(quick=args.quick, out=args.out, only=args.only, sizes=sizes, agent=args.agent,
                   scenarios=tuple(args.scenario), vector_sizes=vector_sizes)


def run(opts: Options, *, progress: Callable[[str], None] | None = None) -> Report:
    """Every selected section, in report order; a section that raises becomes n/a with the reason."""
    started = time.perf_counter()
    sections: list[Section] = []
    for key in opts.only:
        module = MODULES[key]
        if progress:
            progress(f"[benchmarks] {module.TITLE} ...")
        t0 = time.perf_counter()
        try:
            section: Section = module.run(opts)
        except Exception as exc:  # an optional piece missing here: report it, measure the rest
            section = not_available(module.KEY, module.TITLE, exc)
        section.facts["elapsed_s"] = time.perf_counter() - t0
        sections.append(section)
    return Report(opts.to_json(), machine_facts(), sections, time.perf_counter() - started)


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m benchmarks") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    add_arguments(parser)
    return run_and_write(options_from(parser.parse_args(argv)))


def run_and_write(opts: Options) -> int:
    """Run, write both files into ``opts.out``, print the Markdown."""
    report = run(opts, progress=lambda line: print(line, file=sys.stderr, flush=True))
    json_path, md_path = report.write(opts.out)
    sys.stdout.write(report.to_markdown())
    print(f"[benchmarks] wrote {json_path} and {md_path}", file=sys.stderr)
    return 0
