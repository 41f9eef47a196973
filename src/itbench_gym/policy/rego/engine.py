"""One Rego evaluator for the package, over regorus (the Rust interpreter; ``gordon-to-regorus`` on PyPI).

No OPA binary can run here, so OPA's semantics come from an in-process engine. ``benchmarks.rego_engines``
measured the PyPI candidates on the Gatekeeper library; regorus passed the most cases and is the one
that parses Rego v0 (Gatekeeper's default) as well as v1. Every value crosses the boundary as JSON:
the binding's own Python conversion refuses sets of objects, which ``violation`` rules produce.

Known departures from OPA, both regorus': ``not f(x.missing)`` is true here, while OPA evaluates the
argument outside the negation and finds the rule undefined (OPA issues 1877, 4743); and a built-in's
error (``to_number("abc")``) stops the query, where OPA's default, non-strict mode makes it undefined.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import regorus

from .recursion import recursive_function

#: Rego syntax of a module: OPA 1.x defaults to v1; v0 is pre-1.0 syntax (``p[x] { ... }``, no ``if``).
RegoVersion = Literal["v0", "v1"]
_POSITION = re.compile(r"-->\s*(?P<module>[^\n]+?):(?P<line>\d+):(?P<column>\d+)")
_CARET_LINE = re.compile(r"^\s*(\d+\s*)?\|")


class RegoError(Exception):
    """A module that does not parse or compile, or a query that fails: names the module and position, and
    OPA's error code where the twin knows it (``rego_recursion_error``)."""

    def __init__(self, message: str, *, module: str | None = None, line: int | None = None, column: int | None = None,
                 code: str | None = None) -> None:
        self.message, self.module, self.line, self.column, self.code = message, module, line, column, code
        where = f"{module}:{line}:{column}: " if module and line is not None else (f"{module}: " if module else "")
        super().__init__(f"{where}{message}")


class RegoBackend(Protocol):
    """What the Gatekeeper layer needs from an engine (``benchmarks.rego_engines`` plugs others in)."""

    def add_module(self, name: str, source: str, version: RegoVersion = "v1") -> None: ...

    def set_data(self, data: Mapping[str, Any]) -> None: ...

    def set_input(self, value: Any) -> None: ...

    def evaluate(self, query: str) -> list[Any]: ...


def _error_from(exc: BaseException, fallback_module: str | None) -> RegoError:
    """regorus' error text (with a Rust backtrace when RUST_BACKTRACE is set) as a RegoError."""
    text = str(exc).split("Stack backtrace:", 1)[0].strip()
    found = _POSITION.search(text)
    message = next((ln.strip().removeprefix("error:").strip() for ln in text.splitlines() if ln.strip().startswith("error:")), "")
    if not message:
        message = " ".join(ln.strip() for ln in text.splitlines() if ln.strip() and not _POSITION.search(ln) and not _CARET_LINE.match(ln))
    if found:
        return RegoError(message or text, module=found["module"], line=int(found["line"]), column=int(found["column"]))
    return RegoError(message or text or type(exc).__name__, module=fallback_module)


class LocalRegoEngine:
    """Modules (policies and libraries), one data document and one input; queries return JSON-like values.

    Sets come back as lists (JSON has no sets); an undefined query returns no results. It runs in the
    caller's process: the package's engines are :class:`.isolated.RegoEngine`, which run this one in
    a process of its own.
    """

    def __init__(self) -> None:
        self._engine = regorus.Engine()
        self.modules: dict[str, RegoVersion] = {}
        #: each module's AST as regorus parsed it (the recursion check reads every module's functions)
        self._asts: dict[str, Any] = {}

    def add_module(self, name: str, source: str, version: RegoVersion = "v1") -> None:
        """Parse ``source`` as ``version`` syntax; a v0 module may still ``import rego.v1`` as OPA allows.
        A function that calls itself, directly or through others, is refused as OPA's compiler refuses it
        (regorus would recurse until the process's stack overflows)."""
        probe = regorus.Engine()
        probe.set_rego_v0(version == "v0")
        try:
            probe.add_policy(name, source)
        except Exception as exc:  # the binding raises RuntimeError (and others) for any parse or compile failure
            raise _error_from(exc, name) from None
        parsed = json.loads(probe.get_ast_as_json())[0]
        found = recursive_function({**self._asts, name: parsed})
        if found is not None:
            module, line, cycle = found
            raise RegoError(f"rule {cycle[0]} is recursive: {' -> '.join(cycle)}", module=module, line=line, column=1,
                            code="rego_recursion_error")
        self._engine.set_rego_v0(version == "v0")
        try:
            self._engine.add_policy(name, source)
        except Exception as exc:
            raise _error_from(exc, name) from None
        self.modules[name] = version
        self._asts[name] = parsed

    def set_data(self, data: Mapping[str, Any]) -> None:
        """Replace the base document ``data`` (Gatekeeper's ``data.inventory``, for instance)."""
        self._engine.clear_data()
        try:
            self._engine.add_data_json(json.dumps(data))
        except Exception as exc:
            raise _error_from(exc, None) from None

    def set_input(self, value: Any) -> None:
        try:
            self._engine.set_input_json(json.dumps(value))
        except Exception as exc:
            raise _error_from(exc, None) from None

    def result_set(self, query: str) -> dict[str, Any]:
        """The whole result set as OPA's API returns it: ``{"result": [{"expressions": [{"value", "text",
        "location"}], "bindings": {...}}]}``, no ``result`` key when undefined (``opa eval`` shows it all)."""
        try:
            raw: dict[str, Any] = json.loads(self._engine.eval_query_as_json(query))
        except Exception as exc:  # the binding raises RuntimeError (and others) for any failure
            raise _error_from(exc, None) from None
        return raw

    def evaluate(self, query: str) -> list[Any]:
        """The value of each expression of each result: ``[]`` when undefined, else one entry per result."""
        raw = self.result_set(query)
        results: list[Any] = []
        for result in raw.get("result", []):
            values = [expr.get("value") for expr in result.get("expressions", [])]
            results.append(values[0] if len(values) == 1 else values)
        return results
