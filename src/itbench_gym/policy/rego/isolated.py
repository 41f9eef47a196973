"""Rego engines in a process of their own (:mod:`.worker`), so no policy can take the caller down.

One worker process serves every engine of the caller's process, started on first use. A query that
passes the worker's memory bound (:data:`.worker.MEMORY_BYTES`) or runs past :data:`QUERY_SECONDS`
ends the worker: that query fails with a :class:`RegoError` saying so, and the next call starts a new
worker and gives every live engine back its modules, data and input, so the others never notice.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import selectors
import subprocess
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import IO, Any

from .engine import RegoError, RegoVersion
from .worker import MEMORY_BYTES

#: Wall-clock seconds one request may take (a legitimate policy answers in milliseconds).
QUERY_SECONDS = 60.0
#: The twin's words when the worker ends under a request.
_OUT_OF_MEMORY = (f"itbench_gym: this evaluation held more than the {MEMORY_BYTES // 2**30} GiB of memory the twin "
                  "gives Rego (a built-in or a comprehension built a value that large)")
_TOO_LONG = f"itbench_gym: this evaluation ran for more than {QUERY_SECONDS:.0f} s, the twin's bound for one query"


class _Worker:
    """The worker process and the engines that live in it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[str] | None = None
        self._ids = itertools.count(1)
        #: engines that exist in the running worker, and those whose client was dropped since
        self._live: set[int] = set()
        self._dropped: set[int] = set()
        atexit.register(self.stop)
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        """A forked child (a vector env's worker) starts its own worker: the parent's pipes stay the parent's."""
        self._lock = threading.Lock()
        self._process, self._live, self._dropped = None, set(), set()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()

    def new_id(self) -> int:
        return next(self._ids)

    def request(self, engine: RegoEngine, message: dict[str, Any]) -> Any:
        """Send one request for ``engine``, in a worker that holds it (started, and the engine's state
        replayed into it, when needed)."""
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._start()
            dropped, self._dropped = self._dropped, set()
            for gone in sorted(dropped & self._live):
                self._exchange({"op": "drop", "engine": gone})
            self._live -= dropped
            if engine.engine_id not in self._live:
                self._replay(engine)
            return self._exchange({**message, "engine": engine.engine_id})

    def drop(self, engine_id: int) -> None:
        """A client is gone: its engine leaves the worker with the next request (no I/O here: this runs
        when the collector finalises the client, which may be in the middle of a request)."""
        self._dropped.add(engine_id)

    def _start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "itbench_gym.policy.rego.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, encoding="utf-8")
        self._live = set()

    def _replay(self, engine: RegoEngine) -> None:
        """Make ``engine`` in this worker as it was: its modules, data and input."""
        self._exchange({"op": "new", "engine": engine.engine_id})
        self._live.add(engine.engine_id)
        for name, (source, version) in engine.sources.items():
            self._exchange({"op": "add_module", "engine": engine.engine_id, "name": name, "source": source, "version": version})
        if engine.data is not None:
            self._exchange({"op": "set_data", "engine": engine.engine_id, "data": engine.data})
        if engine.has_input:
            self._exchange({"op": "set_input", "engine": engine.engine_id, "value": engine.input})

    def _exchange(self, message: dict[str, Any]) -> Any:
        process = self._process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(json.dumps(message) + "\n")
            process.stdin.flush()
            line = _read_line(process.stdout, QUERY_SECONDS)
        except (BrokenPipeError, TimeoutError) as failure:
            self.stop()
            raise RegoError(_TOO_LONG if isinstance(failure, TimeoutError) else _OUT_OF_MEMORY, code="rego_resource_error") from None
        if not line:  # the worker ended: the kernel refused its allocation and regorus aborted
            self.stop()
            raise RegoError(_OUT_OF_MEMORY, code="rego_resource_error")
        reply = json.loads(line)
        if "error" in reply:
            error = reply["error"]
            if error.get("code") == "rego_resource_error":
                raise RegoError(_OUT_OF_MEMORY, code="rego_resource_error")
            raise RegoError(error["message"], module=error.get("module"), line=error.get("line"),
                            column=error.get("column"), code=error.get("code"))
        return reply["ok"]


def _read_line(stream: IO[str], timeout: float) -> str:
    """One line from the worker, or TimeoutError after ``timeout`` seconds without one."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError
    return stream.readline()


_WORKER = _Worker()


class RegoEngine:
    """Modules (policies and libraries), one data document and one input; queries return JSON-like
    values (:class:`.engine.LocalRegoEngine`'s, in the worker process). Sets come back as lists; an
    undefined query returns no results."""

    def __init__(self) -> None:
        self.engine_id = _WORKER.new_id()
        #: name -> (source, syntax version) of each module added
        self.sources: dict[str, tuple[str, RegoVersion]] = {}
        self.data: Mapping[str, Any] | None = None
        self.input: Any = None
        self.has_input = False
        weakref.finalize(self, _WORKER.drop, self.engine_id)

    @property
    def modules(self) -> dict[str, RegoVersion]:
        return {name: version for name, (_, version) in self.sources.items()}

    def add_module(self, name: str, source: str, version: RegoVersion = "v1") -> None:
        """Parse ``source`` as ``version`` syntax (a recursive function refused as OPA refuses it)."""
        _WORKER.request(self, {"op": "add_module", "name": name, "source": source, "version": version})
        self.sources[name] = (source, version)

    def set_data(self, data: Mapping[str, Any]) -> None:
        """Replace the base document ``data`` (Gatekeeper's ``data.inventory``, for instance)."""
        _WORKER.request(self, {"op": "set_data", "data": data})
        self.data = data

    def set_input(self, value: Any) -> None:
        _WORKER.request(self, {"op": "set_input", "value": value})
        self.input, self.has_input = value, True

    def result_set(self, query: str) -> dict[str, Any]:
        """The whole result set as OPA's API returns it (``opa eval`` shows it all)."""
        raw: dict[str, Any] = _WORKER.request(self, {"op": "result_set", "query": query})
        return raw

    def evaluate(self, query: str) -> list[Any]:
        """The value of each expression of each result: ``[]`` when undefined, else one entry per result."""
        results: list[Any] = []
        for result in self.result_set(query).get("result", []):
            values = [expr.get("value") for expr in result.get("expressions", [])]
            results.append(values[0] if len(values) == 1 else values)
        return results
