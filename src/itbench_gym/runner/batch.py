"""``itbench-gym run``: every (scenario, run) episode of an agent, stored as it finishes, with progress.

Scenarios are ids or shell-style globs (``'SRE-*'``); a glob matches the base scenarios (its
``-NoTraces``/``-NoLogs`` variants only when it names them, e.g. ``'SRE-*-NoLogs-v0'``). Runs that a
store already holds are skipped with ``resume``; without it a folder that holds the agent's episodes
is refused rather than mixed.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from itbench_gym.runner.executors import make_executor
from itbench_gym.runner.jobs import Job, episode_seed
from itbench_gym.runner.store import AgentInfo, EpisodeRecord, ResultStore

#: Where ``run`` can play its episodes (``make``'s ``backend`` names).
BACKENDS = ("sim", "kubernetes")


class SelectionError(ValueError):
    """A scenario argument that names nothing runnable."""


def select_scenarios(patterns: Sequence[str]) -> list[str]:
    """The ids ``patterns`` name, in the order given (globs sorted), each once. Globs pass over library
    scenarios that cannot run here; naming one is an error that says why, before any episode runs."""
    from itbench_gym.registry import library_entry, list_scenarios, scenario_ids

    base = [s["id"] for s in list_scenarios()]
    every = scenario_ids()
    chosen: list[str] = []
    for pattern in patterns:
        if pattern in every:
            entry = library_entry(pattern)
            if entry is not None and (why := entry.imported.invalid or entry.imported.unsupported):
                raise SelectionError(f"{pattern} cannot run: {entry.source}: {why}")
            chosen.append(pattern)
            continue
        names_variant = "-NoTraces" in pattern or "-NoLogs" in pattern
        matched = sorted(s for s in (every if names_variant else base) if fnmatch.fnmatchcase(s, pattern))
        if not matched:
            raise SelectionError(f"no scenario matches {pattern!r} (`itbench-gym list` shows the ids)")
        chosen += matched
    return list(dict.fromkeys(chosen))


@dataclass
class Progress:
    """What the display shows: episodes done out of the total, pass rate so far, ETA."""

    total: int
    done: int = 0
    passed: int = 0
    errors: int = 0
    started: float = field(default_factory=time.perf_counter)

    def add(self, record: EpisodeRecord) -> None:
        self.done += 1
        self.passed += record.passed
        self.errors += record.status == "error"

    @property
    def pass_rate(self) -> float:
        return self.passed / self.done if self.done else 0.0

    def eta_seconds(self) -> float | None:
        if not self.done:
            return None
        per = (time.perf_counter() - self.started) / self.done
        return per * (self.total - self.done)

    def line(self, record: EpisodeRecord) -> str:
        eta = self.eta_seconds()
        verdict = "error" if record.status == "error" else ("pass" if record.passed else "fail")
        return (f"[{self.done}/{self.total}] {record.scenario} run {record.run} (seed {record.seed}): {verdict} "
                f"in {record.wall_seconds:.1f}s · pass rate {self.pass_rate:.0%} · ETA {_duration(eta)}")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


@dataclass(frozen=True)
class BatchResult:
    store: Path
    ran: int
    skipped: int
    passed: int
    errors: int
    seconds: float


def agent_info(agent: str, label: str | None, backend: str = "sim") -> AgentInfo:
    """The agent's row in the store: its label, whether it is privileged, its model settings (and the backend,
    when not the twin)."""
    from itbench_gym import __version__
    from itbench_gym.agents import is_privileged, load_agent

    factory = load_agent(agent)
    describe = getattr(factory, "model_info", None)
    model = dict(describe()) if callable(describe) else {}
    name = label or (agent if ":" not in agent else agent.rpartition(":")[2])
    if model.get("model") and not label:
        name = f"{name}/{model['model']}"
    if backend != "sim":
        model["backend"] = backend
        name = name if label else f"{name}@{backend}"
    return AgentInfo(name, agent, is_privileged(factory), model, __version__)


def run_batch(
    agent: str,
    scenarios: Sequence[str],
    *,
    runs: int = 1,
    workers: int = 1,
    seed: int = 0,
    out: Path | str,
    resume: bool = False,
    executor: str = "process",
    address: str | None = None,
    label: str | None = None,
    backend: str = "sim",
    echo: Callable[[str], None] = print,
) -> BatchResult:
    """Run the agent on every (scenario, run); every finished episode is in ``out`` before the next is reported.

    ``backend="kubernetes"`` plays the episodes on the cluster ``$ITBENCH_GYM_CLUSTER`` configures: one at
    a time in the scenario's own namespaces, or with ``workers`` above 1 each worker in a namespace set of
    its own (``ClusterConfig.for_worker``; a scenario whose faults change what every episode shares is
    then an error episode saying so); its results are stored under a label of their own
    (``<agent>@kubernetes``) and a resume must use it too.
    """
    if runs < 1:
        raise ValueError(f"--runs must be at least 1, got {runs}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    ids = select_scenarios(scenarios)
    info = agent_info(agent, label, backend)
    libraries = tuple(filter(None, os.environ.get("ITBENCH_LIBRARY", "").split(os.pathsep)))
    started = time.perf_counter()
    with ResultStore(out) as store:
        store.register_agent(info, resume=resume)
        done = store.done(info.label)
        jobs = [Job(info.label, agent, sid, run, episode_seed(seed, sid, run), libraries, backend)
                for sid in ids for run in range(runs) if (sid, run) not in done]
        skipped = len(ids) * runs - len(jobs)
        if skipped:
            echo(f"resuming: {skipped} episode(s) already in {store.path}, {len(jobs)} to run")
        runner = make_executor(executor, min(workers, max(1, len(jobs))), address)
        progress = Progress(len(jobs))
        for record in runner.run(jobs):
            store.write(record)
            progress.add(record)
            echo(progress.line(record))
            if record.error:
                echo(f"  error: {record.error.splitlines()[0]}")
        return BatchResult(store.path, progress.done, skipped, progress.passed, progress.errors, time.perf_counter() - started)
