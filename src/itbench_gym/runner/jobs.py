"""One (scenario, run) episode as a job any executor can run: plain data in, an :class:`EpisodeRecord` out.

The seed of an episode is derived from (base seed, scenario, run) alone, so a batch's results do not
depend on how many workers ran it, in which order, or on which machine.
"""

from __future__ import annotations

import hashlib
import os
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from itbench_gym.runner.store import EpisodeRecord

#: Longest observation kept per step in the store (the full text is in the tool's own bound).
STORED_OBSERVATION_CHARS = 4_000


def episode_seed(base_seed: int, scenario: str, run: int) -> int:
    """A 31-bit seed from (base seed, scenario, run): the same everywhere, independent of order."""
    digest = hashlib.sha256(f"{base_seed}\x00{scenario}\x00{run}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


def scenario_version(scenario: str, source: Path) -> str:
    """A short digest of the scenario's spec file: results of an edited scenario are told apart."""
    data = source.read_bytes() if source.is_file() else b""
    return hashlib.sha256(scenario.encode() + b"\x00" + data).hexdigest()[:12]


@dataclass(frozen=True)
class Job:
    agent_label: str
    #: ``AGENTS`` name or ``module:attr`` (resolved in the worker, so it travels as text).
    agent: str
    scenario: str
    run: int
    seed: int
    #: ITBench library folders the worker must load to know ``ITBench-*`` ids.
    libraries: tuple[str, ...] = ()
    #: ``make``'s backend: ``"sim"`` (the twin) or ``"kubernetes"`` (the cluster ``$ITBENCH_GYM_CLUSTER`` configures).
    backend: str = "sim"
    #: Which of the batch's parallel workers runs it, unique among the jobs in flight (None: one at a
    #: time); on a cluster the episode runs in that worker's namespace set (``ClusterConfig.for_worker``).
    slot: int | None = None


def with_free_slot(job: Job, running: Iterable[Job]) -> Job:
    """``job`` in the lowest slot no job in flight holds."""
    taken = {j.slot for j in running}
    return replace(job, slot=next(i for i in range(len(taken) + 1) if i not in taken))


def _backend(job: Job) -> Any:
    """``make``'s backend for the job: on a cluster shared by parallel workers, the worker's namespace set."""
    if job.backend != "kubernetes" or job.slot is None:
        return job.backend
    from itbench_gym.backends.kubernetes import ClusterConfig, KubernetesBackend

    return KubernetesBackend(ClusterConfig.from_environment().for_worker(job.slot))


def play(job: Job) -> EpisodeRecord:
    """Run one episode in this process; an exception becomes an ``error`` record, never a crash of the batch."""
    import itbench_gym
    from itbench_gym.agents import agent_stats, load_agent, run_episode
    from itbench_gym.registry import get_spec

    for library in job.libraries:
        if os.path.isdir(library) or os.path.isfile(library):
            itbench_gym.load_itbench_library(library)
    start = time.perf_counter()
    env = None
    agent: Any = None
    try:
        spec = get_spec(job.scenario)  # a library scenario's is settled on the twin, which may fail
        env = itbench_gym.make(job.scenario, backend=_backend(job))
        agent = load_agent(job.agent)(env)
        info = run_episode(env, agent, seed=job.seed)
        episode = env.unwrapped.episode  # type: ignore[attr-defined]
        steps = [{"index": s.index, "action": s.action, "tool": s.tool, "exit_status": s.exit_status, "sim_time": s.sim_time,
                  "wall_seconds": s.wall_seconds, "observation": s.observation[:STORED_OBSERVATION_CHARS]} for s in episode.steps]
    except Exception as exc:  # the batch goes on; the store says which episode failed and why
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"
        return error_record(job, error, time.perf_counter() - start, agent_stats(agent) if agent is not None else {})
    finally:
        if env is not None:
            env.close()
    return EpisodeRecord(
        agent=job.agent_label, scenario=job.scenario, run=job.run, seed=job.seed, scenario_version=scenario_version(job.scenario, spec.source),
        domain=spec.domain, cls=spec.cls, complexity=spec.complexity.level, status="finished", error=None,
        wall_seconds=time.perf_counter() - start, sim_seconds=float(info.get("sim_time", 0.0)),
        agent_stats=agent_stats(agent), steps=steps, evaluation=info.get("evaluation"),
    )


def error_record(job: Job, error: str, wall_seconds: float, stats: dict[str, Any] | None = None) -> EpisodeRecord:
    """The record of an episode that did not finish: stored with its reason, retried by ``--resume``."""
    domain, cls, complexity, source = _record_facts(job.scenario)
    return EpisodeRecord(
        agent=job.agent_label, scenario=job.scenario, run=job.run, seed=job.seed, scenario_version=scenario_version(job.scenario, source),
        domain=domain, cls=cls, complexity=complexity, status="error", error=error,
        wall_seconds=wall_seconds, sim_seconds=0.0, agent_stats=stats or {}, steps=[], evaluation=None,
    )


def _record_facts(scenario: str) -> tuple[str, str, str, Path]:
    """A record's domain, class, complexity and spec file: its spec's, or the catalogue's for a library
    scenario this process has not settled (settling it runs the twin, which is what may have failed)."""
    from itbench_gym.registry import get_spec, library_entry

    entry = library_entry(scenario)
    if entry is None:
        spec = get_spec(scenario)  # a shipped spec: every one was validated when the batch chose its ids
    elif entry.settled is None:
        listed = entry.imported.summary()
        return str(listed["domain"]), str(listed["class"] or ""), str(listed["complexity"] or ""), entry.source
    else:
        spec = entry.settled
    return spec.domain, spec.cls, spec.complexity.level, spec.source
