"""The agent's programs that are running, and whether they wait: when simulated time may pass in a request.

A watch (``kubectl rollout status``, ``wait``, ``get -w``) and ``logs -f`` let the twin's simulated time
pass while they have nothing to send. On a cluster, a client reacts to an event within milliseconds of
a clock the cluster shares; the twin's clock runs as fast as the host computes it, so a stream that
kept advancing while kubectl was still reading the event it had just been sent gave kubectl's reaction
a simulated duration set by how busy the host was (``rollout status`` of a finished rollout took from
0 to 90 simulated seconds), and an episode's outcome could change with the machine's load.

So a tool registers each program it starts (:meth:`RunningPrograms.running`), and a stream lets time
pass only when every registered program *waits* (:meth:`RunningPrograms.wait_until_waiting`): none of
its threads, nor those of its children (bwrap's sandbox), is runnable or sleeps on a timer of its own
due within a second (client-go polls its informer cache every 100 ms: while kubectl sleeps on that,
it is not waiting on the twin), on two looks in a row, and the client has read all it was sent.
Programs are read from ``/proc``; without it (not Linux), or with nothing registered (the kubernetes
Python client in the caller's own process, a client of ``itbench-gym serve``), a stream lets time pass
as soon as it is idle.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: Thread states (``/proc/PID/task/TID/stat``) of a thread that is doing something: running or
#: runnable, in uninterruptible sleep (I/O, a page fault), waking.
_BUSY_STATES = frozenset("RDW")
#: epoll_wait and epoll_pwait by architecture: where a Go program's idle thread waits for its sockets
#: *and* its nearest timer, whose delay (ms) is the call's fourth argument (``/proc/PID/task/TID/syscall``).
_EPOLL_WAITS = {"x86_64": frozenset({"232", "281"}), "aarch64": frozenset({"22"})}.get(platform.machine(), frozenset())
#: A program whose nearest timer is this close (ms, on the host's clock) acts on its own soon: client-go
#: polls its informer cache every 100 ms, a reflector backs off 800 ms. It is not waiting on the twin,
#: and simulated time must not run while it sleeps on such a timer.
_NEAR_TIMER_MS = 1000
#: Seconds between two looks at the programs while one is busy (doubling up to the second figure).
_FIRST_POLL, _LAST_POLL = 0.0002, 0.005


class RunningPrograms:
    """The agent's programs running now (thread-safe): tools register them, streams wait on them."""

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self._proc = proc_root
        self._pids: dict[int, int] = {}  # pid -> how many registrations
        self._lock = threading.Lock()

    @contextmanager
    def running(self, pid: int) -> Iterator[None]:
        """Count ``pid`` (and its descendants) as one of the agent's programs while the block runs."""
        with self._lock:
            self._pids[pid] = self._pids.get(pid, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._pids.pop(pid) - 1
                if left:
                    self._pids[pid] = left

    def busy(self) -> bool:
        """Whether a thread of a registered program or of one of its descendants is runnable now, or
        sleeps on a near timer of its own."""
        with self._lock:
            pending = sorted(self._pids)
        seen: set[int] = set()
        while pending:
            pid = pending.pop()
            if pid in seen:
                continue
            seen.add(pid)
            try:
                tasks = sorted((self._proc / str(pid) / "task").iterdir())
            except OSError:
                continue  # gone, or no /proc here
            for task in tasks:
                try:
                    stat = (task / "stat").read_text()
                except OSError:
                    continue  # the thread ended between the listing and the read
                state = stat.rpartition(")")[2].split()[:1]
                if state and state[0] in _BUSY_STATES or _near_timer(task):
                    return True
            pending.extend(self._children(pid, tasks))
        return False

    def _children(self, pid: int, tasks: list[Path]) -> list[int]:
        """The processes ``pid``'s threads started (``task/TID/children``; where the kernel does not
        keep that file, every process whose parent is ``pid``)."""
        found: list[int] = []
        for task in tasks:
            try:
                found += [int(c) for c in (task / "children").read_text().split()]
            except FileNotFoundError:
                return self._children_by_scan(pid)
            except OSError:
                continue
        return found

    def _children_by_scan(self, pid: int) -> list[int]:
        found = []
        for entry in self._proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if len(fields) > 1 and fields[1] == str(pid):
                found.append(int(entry.name))
        return found

    def wait_until_waiting(self, gone: Callable[[], bool], stop: threading.Event,
                           unread: Callable[[], bool] = lambda: False) -> bool:
        """Block until no registered program is busy and the client has read all it was sent
        (``unread()`` false: a client not yet woken for its data sleeps too), on two looks in a row;
        False when ``gone()`` (the client left) or ``stop`` comes first. The programs are looked at
        before ``gone()`` is asked: a program that has exited has closed its connections by then, so its
        stream ends instead of advancing."""
        delay = _FIRST_POLL
        quiet = 0
        while True:
            busy = unread() or self.busy()
            if gone() or stop.is_set():
                return False
            quiet = 0 if busy else quiet + 1
            if quiet >= 2:
                return True
            stop.wait(delay if busy else _FIRST_POLL)
            delay = min(delay * 2, _LAST_POLL) if busy else _FIRST_POLL


def _near_timer(task: Path) -> bool:
    """Whether the thread waits in epoll for a timer due within ``_NEAR_TIMER_MS`` (or polls without
    waiting); False where its system call cannot be read (another user's process, no /proc)."""
    try:
        call = (task / "syscall").read_text().split()
    except OSError:
        return False
    if len(call) < 5 or call[0] not in _EPOLL_WAITS:
        return False
    timeout = int(call[4], 16) & 0xFFFFFFFF
    timeout = timeout - (1 << 32) if timeout >= 1 << 31 else timeout  # a C int: -1 waits for ever
    return 0 <= timeout <= _NEAR_TIMER_MS
