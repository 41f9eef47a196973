"""``itbench-gym validate``: which scenarios, in how many worker processes, and the results file.

Arguments are scenario ids, shell-style globs over every registered id (variants included:
``'SRE-*'`` is every shipped SRE scenario and its ``-NoTraces``/``-NoLogs`` variants), scenario spec
files or folders of them (checked as files first, as ``validate`` always did), or ITBench library
folders and index files (``*.json``; their indexes are loaded, then validated). Each worker process has its own twins; the
library folders loaded in the parent are loaded in every worker.
"""

from __future__ import annotations

import fnmatch
import json
import multiprocessing
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itbench_gym.validate.checks import ScenarioResult, validate_scenario


@dataclass(frozen=True)
class Selection:
    """What the arguments name: spec files (checked statically first), ids, and names that matched nothing."""

    files: tuple[Path, ...]
    ids: tuple[str, ...]
    #: Arguments that name nothing, as results (they are not run).
    unknown: tuple[ScenarioResult, ...] = ()


def select(arguments: Sequence[str]) -> Selection:
    """Spec files, library ids and ids named by ``arguments``; every shipped spec file when there are none."""
    from itbench_gym.registry import load_itbench_library, scenario_ids
    from itbench_gym.spec.itbench import LibraryError, open_library
    from itbench_gym.spec.loader import spec_files

    if not arguments:
        return Selection(tuple(spec_files()), ())
    files: list[Path] = []
    ids: list[str] = []
    unknown: list[ScenarioResult] = []
    for argument in arguments:
        path = Path(argument)
        if (path.is_dir() and not spec_files([path])) or (path.is_file() and path.suffix == ".json"):
            try:
                open_library(path)
            except LibraryError as exc:
                unknown.append(ScenarioResult(argument, "invalid", str(exc)))
                continue
            ids += load_itbench_library(path)
        elif path.exists():
            files += spec_files([path])
        else:
            matched = [sid for sid in sorted(scenario_ids(), key=_natural) if fnmatch.fnmatchcase(sid, argument)]
            if not matched:
                unknown.append(ScenarioResult(argument, "invalid", "no registered scenario id matches it"))
            ids += matched
    return Selection(tuple(files), tuple(dict.fromkeys(ids)), tuple(unknown))


def _natural(text: str) -> list[Any]:
    """Sort key that puts ``ITBench-2-v0`` before ``ITBench-10-v0``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def check_files(files: Sequence[Path], echo: Callable[[str], None], warn: Callable[[str], None]) -> tuple[list[Any], int]:
    """The static check of spec files (schema, catalogue, references): every problem of every bad file
    to ``warn``; the good specs and the number of bad files."""
    from itbench_gym.spec.loader import check_spec_files

    specs, errors = check_spec_files(files)
    for exc in errors:
        warn(f"invalid: {exc.source}: {len(exc.problems)} problem(s)")
        for problem in exc.problems:
            warn(f"  {exc.source}: {problem}")
    if errors:
        warn(f"{len(errors)} of {len(files)} scenario spec file(s) invalid")
    else:
        echo(f"{len(specs)} scenario spec(s) valid")
    return specs, len(errors)


def _init_worker(roots: Sequence[str]) -> None:
    from itbench_gym.registry import load_itbench_library

    for root in roots:
        load_itbench_library(root)


def _one(job: tuple[str, tuple[int, ...]]) -> ScenarioResult:
    """One scenario's result; an error of the twin itself is that scenario's result (what was raised
    and where), so it never ends the run and hides the other scenarios' results."""
    try:
        return validate_scenario(*job)
    except Exception as exc:  # any bug of the twin, reported per scenario
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return ScenarioResult(job[0], "error", f"internal error of the twin: {type(exc).__name__}: {exc} "
                                               f"(raised at {Path(where.filename).name}:{where.lineno}; please report it)")


def run(ids: Sequence[str], seeds: Sequence[int], workers: int = 1) -> Iterator[ScenarioResult]:
    """Each scenario's result, in the order of ``ids`` (``workers`` processes when more than one)."""
    from itbench_gym.registry import library_roots

    jobs = [(sid, tuple(seeds)) for sid in ids]
    if workers <= 1 or len(jobs) <= 1:
        yield from map(_one, jobs)
        return
    context = multiprocessing.get_context("spawn")  # each worker builds its own twins from scratch
    with context.Pool(min(workers, len(jobs)), _init_worker, ([str(r) for r in library_roots()],)) as pool:
        yield from pool.imap(_one, jobs)


def summary_line(results: Iterable[ScenarioResult]) -> str:
    results = list(results)
    passed = sum(r.status == "passed" for r in results)
    unsupported = sum(r.status == "unsupported" for r in results)
    failed = len(results) - passed - unsupported
    extra = f" ({unsupported} not yet supported)" if unsupported else ""
    return f"{passed} passed, {failed} failed{extra}"


def write_results(path: Path, results: Iterable[ScenarioResult]) -> None:
    """Merge ``results`` into the results file at ``path`` (by id; other ids are kept)."""
    try:
        existing = json.loads(path.read_text(encoding="utf-8")).get("scenarios", {})
    except (OSError, ValueError, AttributeError):
        existing = {}
    for result in results:
        existing[result.id] = result.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"scenarios": dict(sorted(existing.items()))}, indent=1, sort_keys=True) + "\n",
                    encoding="utf-8")


def main(arguments: Sequence[str], *, seeds: int = 1, workers: int = 1, results: Path | None = None,
         static: bool = False, echo: Callable[[str], None] | None = None,
         warn: Callable[[str], None] | None = None) -> int:
    """Check the spec files named (all shipped ones when none is), then validate every scenario named
    on the twin: a line per scenario, then the totals. 1 when any failed, was invalid or hit an error."""
    out = echo or (lambda line: print(line, flush=True))
    err = warn or (lambda line: print(line, file=sys.stderr, flush=True))
    selection = select(arguments)
    if not selection.files and not selection.ids and not selection.unknown:
        err("invalid: no scenario spec files found")
        return 1
    specs, bad = check_files(selection.files, out, err) if selection.files else ([], 0)
    if static:
        return 1 if bad or selection.unknown else 0
    done: list[ScenarioResult] = list(selection.unknown)
    for result in selection.unknown:
        out(result.line())
    for result in run([*(str(s.source) for s in specs), *selection.ids], range(seeds), workers):
        done.append(result)
        out(result.line())
    if results is not None:
        write_results(results, done)
    line = summary_line(done)
    out(line if not bad else line.replace(" failed", f" failed, {bad} spec file(s) invalid", 1))
    return 1 if bad or any(r.status in ("failed", "invalid", "error") for r in done) else 0
