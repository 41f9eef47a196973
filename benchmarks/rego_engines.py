"""``python -m benchmarks.rego_engines [PATH ...]``: the Rego engines on PyPI, measured on the Gatekeeper library.

Each engine that imports here runs every ``suite.yaml`` under the paths (default: the shared copy of
the gatekeeper-library) through ``itbench_gym.policy.gatekeeper``; only the Rego evaluator changes.
A failure is *wrong* when the engine answered with the wrong violations, an *error* when it raised
(parse, compile or evaluation). Candidates that cannot run on this machine are listed with the reason.
This is how the package's adapter (``itbench_gym.policy.rego``) was chosen.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from itbench_gym.policy.conformance import ConformanceResult, format_report
from itbench_gym.policy.gatekeeper.suites import run_gatekeeper_suites
from itbench_gym.policy.rego import RegoBackend, RegoEngine, RegoError, RegoVersion

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "conformance" / "gatekeeper"
#: PyPI projects that evaluate Rego but cannot run here, and why (checked with pip on Python 3.11, x86_64 Linux).
UNUSABLE = {
    "opa-golib-python-bindings": "OPA itself as a Go shared library, but every release requires Python >= 3.14",
    "opa-wasm, opa-wasmtime, opa-py-wasm": "evaluate policies compiled to WebAssembly by `opa build -t wasm`: no opa binary here",
    "opa-python-client, opa-python": "HTTP clients of an OPA server: no opa binary here",
    "celine-regorus, hobofan-regorus, lakera-regorus, teserak-regorus": "older builds of the same regorus (module `regorus` clashes "
    "with gordon-to-regorus); measure one by putting its install first on PYTHONPATH",
}


class RegopyEngine:
    """rego-cpp through ``regopy``: no data reset and no v0 switch, so the interpreter is rebuilt when data changes."""

    def __init__(self) -> None:
        import regopy

        self._regopy = regopy
        self._modules: list[tuple[str, str]] = []
        self._input: Any = None
        self._interpreter = self._new_interpreter()

    def _new_interpreter(self) -> Any:
        interpreter = self._regopy.Interpreter()
        interpreter.log_level = self._regopy.LogLevel.NONE  # else the library prints every error to stdout
        return interpreter

    def add_module(self, name: str, source: str, version: RegoVersion = "v1") -> None:
        try:
            self._interpreter.add_module(name, source)
        except self._regopy.RegoError as exc:
            raise RegoError(str(exc).strip(), module=name) from None
        self._modules.append((name, source))

    def set_data(self, data: Mapping[str, Any]) -> None:
        self._interpreter = self._new_interpreter()
        for name, source in self._modules:
            self._interpreter.add_module(name, source)
        self._interpreter.add_data(dict(data))
        if self._input is not None:
            self.set_input(self._input)

    def set_input(self, value: Any) -> None:
        self._input = value
        self._interpreter.set_input(self._regopy.Input(value))

    def evaluate(self, query: str) -> list[Any]:
        try:
            output = self._interpreter.query(query)
        except self._regopy.RegoError as exc:
            raise RegoError(str(exc).strip()) from None
        if not output.ok():
            raise RegoError(str(output).strip())
        return [r.expressions[0] if len(r.expressions) == 1 else r.expressions for r in output.results]


def _distribution(module: str) -> str:
    """``name version`` of the installed distribution that provides ``module``."""
    names = importlib.metadata.packages_distributions().get(module) or [module]
    return f"{names[0]} {importlib.metadata.version(names[0])}"


def candidates() -> dict[str, tuple[str, Callable[[], RegoBackend]] | str]:
    """Engine label -> (installed distribution, factory), or the reason it cannot be imported."""
    found: dict[str, tuple[str, Callable[[], RegoBackend]] | str] = {}
    for label, module, factory in (("regorus (Rust)", "regorus", RegoEngine), ("rego-cpp (C++)", "regopy", RegopyEngine)):
        try:
            __import__(module)
            found[label] = (_distribution(module), factory)
        except ImportError as exc:
            found[label] = f"not installed ({exc})"
    return found


def _wrong(result: ConformanceResult) -> int:
    """Failures where the engine answered, but with the wrong violations (the rest raised)."""
    return sum(1 for f in result.failures if f.got != "error")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rego_engines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, default=[DEFAULT_CORPUS], help=f"suite folders (default {DEFAULT_CORPUS})")
    parser.add_argument("--failures", action="store_true", help="list each engine's failing cases and why")
    args = parser.parse_args(argv)
    missing = [p for p in args.paths if not p.exists()]
    if missing:
        parser.error(f"no such path: {', '.join(map(str, missing))}")
    print("| engine | package | passed | wrong | errors | skipped | pass ratio | wall time (s) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    details: list[str] = []
    for label, found in candidates().items():
        if isinstance(found, str):
            print(f"| {label} | {found} | | | | | | |")
            continue
        distribution, factory = found
        start = time.perf_counter()
        result = run_gatekeeper_suites(args.paths, engine_factory=factory)
        elapsed = time.perf_counter() - start
        wrong = _wrong(result)
        print(f"| {label} | {distribution} | {result.passed} | {wrong} | {len(result.failures) - wrong} | {len(result.skipped)} "
              f"| {result.pass_ratio:.3f} | {elapsed:.2f} |")
        details += [f"{label}: {line}" for line in format_report(result).splitlines()[:-1]]
    print()
    for name, reason in UNUSABLE.items():
        print(f"- not measured: {name}: {reason}")
    if args.failures and details:
        print()
        print("\n".join(details))
    return 0


if __name__ == "__main__":
    sys.exit(main())
