"""A container's own process, followed through the emulated programs as simulated time passes.

The programs run at once, but a process's waits (``sleep``) take simulated time. A run follows the
process from its start up to a horizon (seconds since it started) and stops at the wait that would end
past it, the process still running. To follow it further, the twin runs it again from its start on
the volumes it started with, the network answering, in order, what it answered before, so the process
takes the path it took; what it prints beyond what it had printed is new. Past the answers it had, the
network answers as it is now. A wait for a dependency (``until nc -z kafka 9092; do echo waiting;
sleep 2; done``) therefore prints its first round as the container starts and, once the dependency
answers, what follows its last wait; the rounds between are not followed one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from .context import Dial, HttpAnswer, Lookup, Network, VolumeContent

#: One answer of the network, in the order the process asked: (operation, its arguments, the answer).
Answer = tuple[str, tuple[object, ...], object]
_T = TypeVar("_T")


@dataclass(frozen=True)
class FollowedRun:
    """How far the twin has followed a container's own process, and what it found.

    ``out`` and ``err`` are everything the process printed up to there, ``code`` its exit status
    (None: still running, ``elapsed`` seconds into its waits), ``answers`` what the network answered it,
    ``volumes`` its pod's emptyDir volumes as they were when it started (None for one not on a node)."""

    out: bytes
    err: bytes
    code: int | None
    elapsed: float
    answers: tuple[Answer, ...]
    volumes: Mapping[str, VolumeContent | None]

    def printed_since(self, before: FollowedRun | None) -> str:
        """What this run printed that ``before`` had not (stdout, then stderr)."""
        out, err = (self.out, self.err) if before is None else (self.out[len(before.out):], self.err[len(before.err):])
        return (out + err).decode("utf-8", "replace")


class ReplayedNetwork:
    """``live``, except that the first answers are ``before``'s while the process asks the same questions
    in the same order; every answer given is kept in ``answers``."""

    def __init__(self, live: Network, before: tuple[Answer, ...]) -> None:
        self._live, self._before = live, before
        self._replaying = bool(before)
        self.answers: list[Answer] = []

    @property
    def nameserver(self) -> str:
        return self._live.nameserver

    def lookup(self, name: str) -> Lookup:
        return self._answer("lookup", (name,), lambda: self._live.lookup(name))

    def dial(self, ip: str, port: int) -> Dial:
        return self._answer("dial", (ip, port), lambda: self._live.dial(ip, port))

    def request(self, ip: str, port: int, method: str, path: str, body: bytes = b"") -> HttpAnswer | None:
        return self._answer("request", (ip, port, method, path, body),
                            lambda: self._live.request(ip, port, method, path, body))

    def _answer(self, operation: str, args: tuple[object, ...], live: Callable[[], _T]) -> _T:
        index = len(self.answers)
        if self._replaying and index < len(self._before) and self._before[index][:2] == (operation, args):
            answer = self._before[index][2]
        else:
            self._replaying = False  # a different question: the process left its path, the network is live
            answer = live()
        self.answers.append((operation, args, answer))
        return answer  # type: ignore[return-value]  # a replayed answer is the one this operation gave
