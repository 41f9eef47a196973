"""Where a batch's episodes run: this process, a pool of worker processes, or a Ray cluster.

Every executor runs the same :func:`~itbench_gym.runner.jobs.play` on the same jobs and yields each
record as it finishes; the runner, in the parent process, is the store's only writer.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Protocol

from itbench_gym.runner.jobs import Job, play
from itbench_gym.runner.store import EpisodeRecord

EXECUTORS = ("process", "ray")


class Executor(Protocol):
    #: How many episodes run at once.
    width: int

    def run(self, jobs: Sequence[Job]) -> Iterator[EpisodeRecord]: ...


class InProcess:
    """One episode at a time in this process (``--workers 1``): the twin's shared baselines are reused."""

    width = 1

    def run(self, jobs: Sequence[Job]) -> Iterator[EpisodeRecord]:
        for job in jobs:
            yield play(job)


class ProcessPool:
    """``workers`` spawned processes (fresh interpreters: no state inherited from the parent)."""

    def __init__(self, workers: int) -> None:
        self.width = workers

    def run(self, jobs: Sequence[Job]) -> Iterator[EpisodeRecord]:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=self.width, mp_context=context) as pool:
            pending: set[Future[EpisodeRecord]] = {pool.submit(play, job) for job in jobs}
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        yield future.result()
            finally:
                for future in pending:
                    future.cancel()


class RayCluster:
    """The same jobs as Ray tasks (``pip install 'itbench-gym[ray]'``); ``address`` joins a running cluster
    (``"auto"``, ``ray://host:10001``), None starts a local one."""

    def __init__(self, workers: int, address: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise RuntimeError("--executor ray needs Ray: pip install 'itbench-gym[ray]'") from None
        self._ray: Any = ray
        self.width = workers
        self._address = address

    def run(self, jobs: Sequence[Job]) -> Iterator[EpisodeRecord]:
        ray = self._ray
        started = not ray.is_initialized()
        if started:
            ray.init(address=self._address, num_cpus=None if self._address else self.width, include_dashboard=False,
                     log_to_driver=False)
        try:
            remote = ray.remote(num_cpus=1)(play)
            queue: list[Job] = list(jobs)
            running: list[Any] = []
            while queue or running:
                while queue and len(running) < self.width:
                    running.append(remote.remote(queue.pop(0)))
                done, running = ray.wait(running, num_returns=1)
                for ref in done:
                    yield ray.get(ref)
        finally:
            if started:
                ray.shutdown()


def make_executor(kind: str, workers: int, address: str | None = None) -> Executor:
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if kind == "ray":
        return RayCluster(workers, address)
    if kind != "process":
        raise ValueError(f"unknown executor {kind!r}; use one of {', '.join(EXECUTORS)}")
    return InProcess() if workers == 1 else ProcessPool(workers)
