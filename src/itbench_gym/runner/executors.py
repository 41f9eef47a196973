"""Where a batch's episodes run: this process, a pool of worker processes, or a Ray cluster.

Every executor runs the same :func:`~itbench_gym.runner.jobs.play` on the same jobs and yields each
record as it finishes; the runner, in the parent process, is the store's only writer.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Protocol

from itbench_gym.runner.jobs import Job, error_record, play, with_free_slot
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
    """``workers`` spawned processes (fresh interpreters: no state inherited from the parent).

    A worker that dies (killed, out of memory, a crash in native code) breaks the whole pool and every
    episode it was running. Those episodes are run again one at a time in a pool of their own, so a
    death is pinned on the episode that causes it: that one is stored as an ``error`` (``--resume``
    retries it), the others finish, and the batch goes on with a new pool.
    """

    def __init__(self, workers: int) -> None:
        self.width = workers

    def run(self, jobs: Sequence[Job]) -> Iterator[EpisodeRecord]:
        queue = deque(jobs)
        while queue:
            suspects = yield from self._until_a_worker_dies(queue, self.width)
            for job in suspects:
                yield from self._alone(job)

    def _until_a_worker_dies(self, queue: deque[Job], width: int) -> Generator[EpisodeRecord, None, list[Job]]:
        """Run jobs from ``queue`` (at most ``width`` at once); returns the jobs in flight if the pool breaks."""
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=width, mp_context=context) as pool:
            running: dict[Future[EpisodeRecord], Job] = {}
            while queue or running:
                while queue and len(running) < width:
                    job = with_free_slot(queue.popleft(), running.values())
                    running[pool.submit(play, job)] = job
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=lambda f: f.exception() is not None):
                    try:
                        record = future.result()
                    except BrokenProcessPool:
                        return list(running.values())
                    del running[future]
                    yield record
        return []

    def _alone(self, job: Job) -> Iterator[EpisodeRecord]:
        started = time.perf_counter()
        suspects = yield from self._until_a_worker_dies(deque([job]), 1)
        if suspects:
            yield error_record(job, "the worker process running this episode died (killed by a signal, out of memory, "
                                    "or a crash in native code) before the episode ended", time.perf_counter() - started)


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
            running: dict[Any, Job] = {}
            while queue or running:
                while queue and len(running) < self.width:
                    job = with_free_slot(queue.pop(0), running.values())
                    running[remote.remote(job)] = job
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    del running[ref]
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
