"""``backends/programs``: a stream lets simulated time pass only while the agent's programs wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from itbench_gym.backends.programs import RunningPrograms

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")

_BUSY = "while True: pass"
_SLEEPING = "import time; time.sleep(60)"


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
