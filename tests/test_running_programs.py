"""``backends/programs``: a stream lets simulated time pass only while the agent's programs wait."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import needs_clock_shim
from itbench_gym.backends.programs import Run, RunningPrograms, TwinTime
from itbench_gym.clock import SimClock
from itbench_gym.tools.clockshim import ClockShim

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(),
                                reason="the twin reads the agent's programs from Linux's /proc; without it a stream does not wait "
                                       "for them (docs/kubernetes.md), so there is nothing to test")

_BUSY = "while True: pass"
_SLEEPING = "import time; time.sleep(60)"
#: A program waiting in epoll (as Go's network poller does) for its sockets and a timer that far off.
_POLLING = "import select; poller = select.epoll()\nwhile True: poller.poll({})"


@contextmanager
def started(*argv: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its descendants too
        proc.wait()


def _never() -> bool:
    return False


def test_a_sleeping_program_waits_and_a_spinning_one_does_not() -> None:
    programs = RunningPrograms()
    with started(sys.executable, "-c", _SLEEPING) as sleeper, programs.running(sleeper.pid):
        assert programs.wait_until_waiting(_never, threading.Event())
        with started(sys.executable, "-c", _BUSY) as spinner, programs.running(spinner.pid):
            assert programs.busy()
        assert not programs.busy()  # its registration ended with the block


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="the twin knows epoll's system-call numbers for x86-64 and aarch64 only; elsewhere it does not "
                           "look at a program's timers")
def test_a_program_about_to_wake_on_its_own_timer_is_not_waiting() -> None:
    """client-go polls its informer cache every 100 ms: while kubectl sleeps on that, time must not run;
    a program whose next timer is minutes away waits on its sockets."""
    programs = RunningPrograms()
    with started(sys.executable, "-c", _POLLING.format(0.5)) as soon, programs.running(soon.pid):
        threading.Event().wait(0.2)  # into its first poll
        assert programs.busy()
    with started(sys.executable, "-c", _POLLING.format(300)) as later, programs.running(later.pid):
        assert programs.wait_until_waiting(_never, threading.Event())


def test_a_busy_grandchild_counts_as_its_ancestors_work() -> None:
    """bwrap's sandbox puts kubectl two processes below the one the tool started."""
    programs = RunningPrograms()
    shell = f"{sys.executable} -c '{_BUSY}' & wait"
    with started("/bin/sh", "-c", f"/bin/sh -c \"{shell}\" & wait") as outer, programs.running(outer.pid):
        pause = threading.Event()
        for _ in range(200):  # the shells need a moment to start the spinner
            if programs.busy():
                break
            pause.wait(0.01)
        assert programs.busy()


def test_waiting_gives_up_when_the_client_leaves_or_the_server_closes() -> None:
    programs = RunningPrograms()
    stop = threading.Event()
    with started(sys.executable, "-c", _BUSY) as spinner, programs.running(spinner.pid):
        left = threading.Timer(0.05, stop.set)
        left.start()
        assert programs.wait_until_waiting(_never, stop) is False  # blocked on the spinner until the close
        left.join()
    assert programs.wait_until_waiting(lambda: True, threading.Event()) is False


def test_nothing_registered_waits_at_once_and_registrations_nest() -> None:
    programs = RunningPrograms()
    assert programs.wait_until_waiting(_never, threading.Event())
    with started(sys.executable, "-c", _BUSY) as spinner:
        with programs.running(spinner.pid):
            with programs.running(spinner.pid):
                assert programs.busy()
            assert programs.busy()  # one registration is left
        assert not programs.busy()


# -- programs on the twin's time ----------------------------------------------------------------------

#: A program on simulated time that waits in epoll for a timer 30 s off (Python's poll looks at its
#: clock again when a signal interrupts it, as Go's runtime does on the driver's SIGURG).
_TIMED = ("import select, signal, time\nsignal.signal(signal.SIGURG, lambda *_: None)\nstart = time.monotonic()\n"
          "select.epoll().poll(30)\nprint(time.monotonic() - start)")


def _twin_time(clock: SimClock, budget: float = 3600.0) -> tuple[TwinTime, list[float]]:
    steps: list[float] = []
    end = clock.now() + budget

    def advance(seconds: float) -> bool:
        if clock.now() >= end:
            return False
        steps.append(min(seconds, end - clock.now()))
        clock.advance(steps[-1])
        return True

    return TwinTime(clock.now, advance), steps


def _run_on_twin_time(programs: RunningPrograms, clock: SimClock, program: str,
                      alongside: threading.Thread | None = None) -> tuple[str, Run]:
    """Run ``program`` on the twin's time (``alongside`` started once it is registered, joined after)."""
    shim = ClockShim(clock.now(), simulated=[Path(sys.executable)])
    proc = shim.popen([sys.executable, "-S", "-c", program], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                      start_new_session=True)
    try:
        with programs.running(proc.pid, shim) as run:
            if alongside is not None:
                alongside.start()
            out, _ = proc.communicate(timeout=60)
    finally:
        shim.close()
        if alongside is not None:
            alongside.join(timeout=30)
    return out.decode(), run


@needs_clock_shim
def test_a_driven_program_s_timer_lets_the_twin_s_time_pass_to_it_at_once() -> None:
    clock = SimClock(1000.0)
    twin_time, steps = _twin_time(clock)
    programs = RunningPrograms(time_source=twin_time)
    started_at = time.monotonic()
    out, run = _run_on_twin_time(programs, clock, _TIMED)
    assert float(out) == 30.0 and steps == [30.0] and clock.now() == 1030.0 and not run.out_of_time
    assert time.monotonic() - started_at < 25  # not the host's 30 seconds (the bound only says it did not sleep them)
    assert not programs.drives_time()


@needs_clock_shim
def test_a_driven_program_is_stopped_when_the_episode_s_time_runs_out() -> None:
    clock = SimClock(1000.0)
    twin_time, steps = _twin_time(clock, budget=10.0)
    out, run = _run_on_twin_time(RunningPrograms(time_source=twin_time), clock, _TIMED)
    assert run.out_of_time and out == "" and clock.now() == 1010.0 and steps == [10.0]


@needs_clock_shim
def test_a_waiting_stream_lets_time_pass_by_its_step_up_to_the_client_s_timer() -> None:
    """A watch with nothing to send while its driven client waits: a step at a time, the last one to the
    client's timer; the stream's wait ends with the client."""
    clock = SimClock(1000.0)
    twin_time, steps = _twin_time(clock)
    programs = RunningPrograms(time_source=twin_time)
    looks: list[float] = []

    def stream() -> None:
        while programs.idle_wait(1100.0, 1.0, _never, threading.Event()):
            looks.append(clock.now())

    programs.traffic.begin()  # the stream's request, being served: time passes only while it waits
    try:
        out, _ = _run_on_twin_time(programs, clock, _TIMED.replace("poll(30)", "poll(3.25)"), threading.Thread(target=stream))
    finally:
        programs.traffic.end()
    assert float(out) == 3.25 and steps == [1.0, 1.0, 1.0, 0.25] and looks == [1001.0, 1002.0, 1003.0, 1003.25]
