"""``backends/programs``: a stream lets simulated time pass only while the agent's programs wait."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from itbench_gym.backends.programs import RunningPrograms

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
