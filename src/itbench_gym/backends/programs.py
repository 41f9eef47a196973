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

A program's own timers ran on the host's clock, though: ``kubectl wait --timeout=5s`` for a condition
that never came let as much simulated time pass as the twin computed in five real seconds (362 and 422
simulated seconds in two runs of the same episode). So on the twin kubectl runs on the twin's time
(``tools/clockshim.py``: its monotonic clock reads the simulated time) and is *driven*: while it runs,
one thread (:meth:`RunningPrograms._drive`) lets time pass whenever every registered program waits and
the twin's servers are quiet (``Traffic``), to kubectl's nearest timer (its epoll wait's timeout, now
in simulated milliseconds) or by the step of a stream that waits for time (``idle_wait``), whichever
comes first, then wakes kubectl to look at its timers. Its timeouts, polls and client-side throttling
then take simulated time, as on a cluster, and no real time.
"""

from __future__ import annotations

import fcntl
import os
import platform
import select
import signal
import socket
import struct
import termios
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from itbench_gym.tools.clockshim import ClockShim

#: Thread states (``/proc/PID/task/TID/stat``) of a thread that is doing something: running or
#: runnable, in uninterruptible sleep (I/O, a page fault), waking.
_BUSY_STATES = frozenset("RDW")
#: States of a thread whose process has exited and waits for its parent to collect it.
_ENDED_STATES = frozenset("ZX")
#: epoll_wait and epoll_pwait by architecture: where a Go program's idle thread waits for its sockets
#: *and* its nearest timer, whose delay (ms) is the call's fourth argument (``/proc/PID/task/TID/syscall``).
_EPOLL_WAITS = {"x86_64": frozenset({"232", "281"}), "aarch64": frozenset({"22"})}.get(platform.machine(), frozenset())
#: A program whose nearest timer is this close (ms, on the host's clock) acts on its own soon: client-go
#: polls its informer cache every 100 ms, a reflector backs off 800 ms. It is not waiting on the twin,
#: and simulated time must not run while it sleeps on such a timer.
_NEAR_TIMER_MS = 1000
#: Seconds between two looks at the programs while one is busy (doubling up to the second figure).
_FIRST_POLL, _LAST_POLL = 0.0002, 0.005
#: Seconds a driver lets a program run before it first looks at it (a command that waits on a timer
#: or a stream starts waiting after that; ``get`` and most others have ended by then).
_DRIVER_START = 0.1
#: Seconds between a waiting stream's looks at its client and the server's closing.
_IDLE_RECHECK = 0.02


@dataclass(frozen=True)
class TwinTime:
    """The simulated clock a twin lets pass for programs that run on it: ``now()``, and ``advance(s)``
    that lets ``s`` seconds pass (less when the episode's budget ends sooner), False once it is spent."""

    now: Callable[[], float]
    advance: Callable[[float], bool]


class Traffic:
    """The requests the twin's servers are serving (thread-safe): a program on the twin's time may let
    time pass only while none is, but for streams that wait for time themselves (``RunningPrograms.idle_wait``),
    and no server has a connection to accept, a request's bytes to read or an answer's bytes on their way
    (``pending``; bytes that reached a client wake it, so its threads are seen busy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serving = 0
        self._idle = 0
        #: One per server: whether it has a connection to accept, bytes to read, or bytes it sent that
        #: have not reached the client yet.
        self.pending: list[Callable[[], bool]] = []

    def begin(self) -> None:
        with self._lock:
            self._serving += 1

    def end(self) -> None:
        with self._lock:
            self._serving -= 1

    @contextmanager
    def idle(self) -> Iterator[None]:
        """A request being served that waits for time to pass, not for the server."""
        with self._lock:
            self._idle += 1
        try:
            yield
        finally:
            with self._lock:
                self._idle -= 1

    def quiet(self) -> bool:
        with self._lock:
            if self._serving != self._idle:
                return False
        return not any(pending() for pending in list(self.pending))


def in_flight(sockets: Iterable[socket.socket]) -> bool:
    """Whether one of ``sockets`` has a connection to accept or bytes to read (or its other end closed),
    or holds bytes it sent that the other end has not received yet: ``Traffic.pending`` of a server."""
    sockets = list(sockets)
    poller = select.poll()
    for sock in sockets:
        try:
            poller.register(sock.fileno(), select.POLLIN)
        except (OSError, ValueError):
            continue  # closed meanwhile
    if any(events & select.POLLIN for _, events in poller.poll(0)):
        return True
    for sock in sockets:
        try:
            if unsent(sock):
                return True
        except (OSError, ValueError):
            continue  # closed meanwhile, or a listening socket
    return False


def wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    """Wait until ``sock`` has bytes to read (or its other end closed), at most ``timeout`` seconds."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(None if timeout is None else timeout * 1000))


def unsent(sock: socket.socket) -> int:
    """Bytes ``sock`` sent that the other end has not received yet (its send queue)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0])


@dataclass
class Run:
    """One registered program: what ``RunningPrograms.running`` yields."""

    pid: int
    shim: ClockShim | None = None
    #: Set when the episode's time ran out while the program waited on the twin's time; it was stopped.
    out_of_time: bool = False
    drives: bool = field(default=False, init=False)


@dataclass
class _IdleStream:
    stop_at: float
    step: float
    #: The driver's moves when the stream began to wait: one made since, it must look before another.
    moves: int


class RunningPrograms:
    """The agent's programs running now (thread-safe): tools register them, streams wait on them.

    With a ``TwinTime`` (the twin's backend), a program whose shim runs its timers on the simulated
    time (``ClockShim``'s ``simulated``) is *driven*: while it runs, a driver thread lets the twin's
    time pass whenever every registered program waits — up to the nearest timer of a process on
    simulated time (its epoll wait's timeout, in simulated milliseconds) and, while a stream of the
    twin waits for time (``idle_wait``), by that stream's step — and then wakes those processes to
    look at their timers. ``kubectl wait --timeout=30s`` then gives up after 30 simulated seconds,
    as on a cluster, whatever the host's speed.
    """

    def __init__(self, proc_root: Path = Path("/proc"), time_source: TwinTime | None = None) -> None:
        self._proc = proc_root
        self._pids: dict[int, int] = {}  # pid -> how many registrations
        self._lock = threading.Lock()
        self._time = time_source
        #: What the twin's servers serve (the backend hands it to them).
        self.traffic = Traffic()
        self._runs: list[Run] = []
        self._cond = threading.Condition()
        self._idle: list[_IdleStream] = []
        self._moves = 0
        self._out_of_time = False
        self._driver: threading.Thread | None = None

    @contextmanager
    def running(self, pid: int, shim: ClockShim | None = None) -> Iterator[Run]:
        """Count ``pid`` (and its descendants) as one of the agent's programs while the block runs;
        drive it on the twin's time when ``shim`` runs its timers there."""
        run = Run(pid, shim)
        run.drives = self._time is not None and shim is not None and shim.simulates
        with self._lock:
            self._pids[pid] = self._pids.get(pid, 0) + 1
        if run.drives:
            with self._cond:
                self._runs.append(run)
                if self._driver is None:
                    self._driver = threading.Thread(target=self._drive, name="itbench-gym-twin-time", daemon=True)
                    self._driver.start()
        try:
            yield run
        finally:
            if run.drives:
                with self._cond:
                    self._runs.remove(run)
                    driver = self._driver if not self._runs else None
                    if driver is not None:
                        self._driver = None
                        self._out_of_time = False
                    self._cond.notify_all()
                if driver is not None:
                    driver.join()
            with self._lock:
                left = self._pids.pop(pid) - 1
                if left:
                    self._pids[pid] = left

    @property
    def has_twin_time(self) -> bool:
        """Whether programs may run on the twin's time here (a twin's backend; not a real cluster's)."""
        return self._time is not None

    def drives_time(self) -> bool:
        """Whether a driven program runs: streams then wait for the driver (``idle_wait``) instead of
        letting time pass themselves."""
        with self._cond:
            return bool(self._runs)

    def sync_clock(self) -> None:
        """Show the driven programs the twin's time now (before an answer that moved it is sent)."""
        if self._time is None:
            return
        with self._cond:
            shims = [run.shim for run in self._runs if run.shim is not None]
        if shims:
            now = self._time.now()
            for shim in shims:
                if shim.now != now:
                    shim.set_time(now)

    def idle_wait(self, stop_at: float, step: float, gone: Callable[[], bool], stop: threading.Event,
                  changed: Callable[[], bool] = lambda: False) -> bool:
        """A stream with nothing to send, whose client is driven, waits here while the driver lets up
        to ``step`` simulated seconds pass (never past ``stop_at``). True when time moved or
        ``changed()`` (look again); False when the stream should end: its client left, ``stop`` is set,
        the episode's time ran out, or no driven program runs any more."""
        with self._cond:
            moves = self._moves
            stream = _IdleStream(stop_at, step, moves)
            self._idle.append(stream)
        try:
            with self.traffic.idle():
                while True:
                    if gone() or stop.is_set():
                        return False
                    if changed():
                        return True
                    with self._cond:
                        if self._moves != moves:
                            return True
                        if self._out_of_time or not self._runs:
                            return False
                        self._cond.wait(_IDLE_RECHECK)
        finally:
            with self._cond:
                self._idle.remove(stream)

    def busy(self) -> bool:
        """Whether a thread of a registered program or of one of its descendants is runnable now, or
        sleeps on a near timer of its own."""
        return any(state in _BUSY_STATES or _near_timer(task) for _, task, state in self._threads())

    def _threads(self) -> Iterator[tuple[int, Path, str]]:
        """Every thread of the registered programs and of their descendants: its process, its
        ``/proc`` folder and its state letter (threads that end meanwhile are left out). Read with
        plain ``os`` calls: the driver looks several times a millisecond while kubectl works."""
        with self._lock:
            pending = sorted(self._pids)
        seen: set[int] = set()
        while pending:
            pid = pending.pop()
            if pid in seen:
                continue
            seen.add(pid)
            folder = f"{self._proc}/{pid}/task"
            try:
                tids = sorted(os.listdir(folder))
            except OSError:
                continue  # gone, or no /proc here
            tasks = [Path(folder, tid) for tid in tids]
            for task in tasks:
                stat = _read(f"{task}/stat")
                if stat is None:
                    continue  # the thread ended between the listing and the read
                yield pid, task, (stat.rpartition(b")")[2].split() or [b""])[0].decode()
            pending.extend(self._children(pid, tasks))

    def _drive(self) -> None:
        """While a driven program runs: each time every program waits (two looks in a row that agree)
        and the servers are quiet, let the twin's time pass to the next thing due, then wake the
        processes on simulated time."""
        assert self._time is not None
        last: int | None = None
        quiet = 0
        delay = _FIRST_POLL
        self._pause(_DRIVER_START)  # most commands end before they wait on anything: no need to look at them
        while True:
            with self._cond:
                if not self._runs:
                    return
                shims = [run.shim for run in self._runs if run.shim is not None]
            timed = frozenset().union(*(shim.on_sim_time() for shim in shims))
            # the servers first: while one serves a request, the programs' threads need no reading
            look = self._timers(timed) if self._streams_looked() and self.traffic.quiet() else None
            if look is None:
                quiet, last = 0, None
                self._pause(delay)
                delay = min(delay * 2, _LAST_POLL)
                continue
            quiet = quiet + 1 if look == last else 1
            last, delay = look, _FIRST_POLL
            if quiet < 2:
                self._pause(_FIRST_POLL)
                continue
            step = self._step(look)
            if step is None:  # waiting on something else (its input, a child, a request): nothing to let pass
                self._pause(_LAST_POLL)
                quiet, last = 0, None
                continue
            # to the microsecond the driven programs see (``ClockShim.set_time``), so that a timer's
            # instant is reached exactly, whatever float sum of steps led to ``now``
            now = self._time.now()
            more = self._time.advance((round(now * 1e6) + round(step * 1e6)) / 1e6 - now)
            # the move is counted before any program can see it: one that wakes and ends at once must
            # not end its run before the waiting streams learn that time moved
            with self._cond:
                self._moves += 1
                if not more:
                    self._out_of_time = True
                    for run in self._runs:
                        run.out_of_time = True
                        _kill_group(run.pid)
                self._cond.notify_all()
            self.sync_clock()
            for shim in shims:
                shim.kick()
            quiet, last = 0, None

    def _pause(self, seconds: float) -> None:
        """Sleep, unless the last driven program ends meanwhile (its tool is waiting for the driver)."""
        with self._cond:
            if self._runs:
                self._cond.wait(seconds)

    def _streams_looked(self) -> bool:
        """Whether every waiting stream has looked at the twin since the driver's last move (a stream
        woken by it counts as waiting until it runs, and must send what the move made first)."""
        with self._cond:
            return all(s.moves == self._moves for s in self._idle)

    def _step(self, timer_ms: int) -> float | None:
        """Seconds to let pass: to the nearest timer on simulated time (``timer_ms``, -1 for none) and
        at most a waiting stream's step (never past its end); None when nothing waits for time."""
        assert self._time is not None
        candidates = [timer_ms / 1000.0] if timer_ms > 0 else []
        now = self._time.now()
        with self._cond:
            candidates += [min(s.step, s.stop_at - now) for s in self._idle if s.stop_at > now]
        return min(candidates) if candidates else None

    def _timers(self, timed: frozenset[int]) -> int | None:
        """None while a thread of a registered program (or of a descendant) is busy; else the nearest
        timer, in milliseconds, of a process in ``timed`` waiting in epoll (-1: none). A process not on
        simulated time that sleeps on a near timer of the host's counts as busy. None too when every
        program has ended (its tool has yet to see it): an ended program waits for no time."""
        nearest = -1
        alive = False
        for pid, task, state in self._threads():
            if state in _BUSY_STATES:
                return None
            if state in _ENDED_STATES:
                continue
            alive = True
            timeout = _epoll_timeout(task)
            if timeout is None or timeout < 0:
                continue
            if pid not in timed:
                if timeout <= _NEAR_TIMER_MS:
                    return None
            elif timeout == 0:
                return None
            else:
                nearest = timeout if nearest < 0 else min(nearest, timeout)
        return nearest if alive else None

    def _children(self, pid: int, tasks: list[Path]) -> list[int]:
        """The processes ``pid``'s threads started (``task/TID/children``; where the kernel does not
        keep that file, every process whose parent is ``pid``)."""
        found: list[int] = []
        for task in tasks:
            try:
                with open(f"{task}/children", "rb") as f:
                    found += [int(c) for c in f.read().split()]
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
    timeout = _epoll_timeout(task)
    return timeout is not None and 0 <= timeout <= _NEAR_TIMER_MS


def _epoll_timeout(task: Path) -> int | None:
    """The timeout (ms; -1 waits for ever) of the epoll wait the thread is in; None when it is in none
    or its system call cannot be read."""
    text = _read(f"{task}/syscall")
    call = text.decode().split() if text is not None else []
    if len(call) < 5 or call[0] not in _EPOLL_WAITS:
        return None
    timeout = int(call[4], 16) & 0xFFFFFFFF
    return timeout - (1 << 32) if timeout >= 1 << 31 else timeout  # a C int: -1 waits for ever


def _read(path: str) -> bytes | None:
    """A ``/proc`` file's bytes; None when it cannot be read (its thread or process has ended)."""
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read()
    except OSError:
        return None


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
