"""The process Rego runs in (``python -m itbench_gym.policy.rego.worker``), for :mod:`.isolated`.

A policy is code an agent writes: a built-in asked for a huge value (``numbers.range(1, 1e9)``) or
a comprehension over one would take the whole machine's memory, and regorus aborts the process
when an allocation fails. So the engines live here, in a process whose address space is bounded
(:data:`MEMORY_BYTES`), and the caller's process survives them. One request a line on stdin, one
answer a line on stdout, both JSON: ``{"op": ..., "engine": N, ...}`` -> ``{"ok": value}`` or
``{"error": {message, module, line, column, code}}``.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any, TextIO

from .engine import LocalRegoEngine, RegoError

#: The address space of the Rego process: the interpreter and regorus take ~150 MB of it, the policies'
#: documents (Gatekeeper's inventory) a few more; a query past it fails, not the episode.
MEMORY_BYTES = 2 * 2**30


def _answer(engines: dict[int, LocalRegoEngine], request: dict[str, Any]) -> Any:
    op = request["op"]
    if op == "new":
        engines[request["engine"]] = LocalRegoEngine()
        return None
    if op == "drop":
        engines.pop(request["engine"], None)
        return None
    engine = engines[request["engine"]]
    if op == "add_module":
        engine.add_module(request["name"], request["source"], request["version"])
        return None
    if op == "set_data":
        engine.set_data(request["data"])
        return None
    if op == "set_input":
        engine.set_input(request["value"])
        return None
    if op == "result_set":
        return engine.result_set(request["query"])
    raise ValueError(f"unknown operation {op!r}")


def serve(requests: TextIO, answers: TextIO) -> None:
    """Answer requests until stdin closes (the caller's process ended or let the worker go)."""
    engines: dict[int, LocalRegoEngine] = {}
    for line in requests:
        try:
            reply: dict[str, Any] = {"ok": _answer(engines, json.loads(line))}
        except RegoError as exc:
            reply = {"error": {"message": exc.message, "module": exc.module, "line": exc.line, "column": exc.column,
                               "code": exc.code}}
        except MemoryError:
            reply = {"error": {"message": "out of memory", "code": "rego_resource_error"}}
        answers.write(json.dumps(reply) + "\n")
        answers.flush()


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
