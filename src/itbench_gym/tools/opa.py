"""``opa eval`` and ``opa check`` as the OPA 1.x CLI takes and prints them, over the in-process Rego engine.

No OPA binary runs here (see ``itbench_gym.policy.rego``), so the command line is read with OPA's flags
(pflag rules: ``--f=v``, ``--f v``, ``-fv``, repeated ``-d``) and the output follows OPA's presentation:
``json`` (the default) is the result set ``{"result": [{"expressions": [...], "bindings": {...}}]}`` or
``{}`` when undefined, and errors as ``{"errors": [...]}``; ``values``, ``bindings``, ``raw`` and
``pretty`` as OPA writes them, errors as ``N error(s) occurred: file:row: code: message``. Every path is
relative to the agent's workspace and must stay inside it, symlinks included.

Departures: messages are the engine's (regorus') words, not OPA's; an error found while evaluating is
labelled ``rego_compile_error`` (``eval_conflict_error`` for conflicts) where OPA may name a finer code;
``opa check`` parses modules but finds only the errors the engine reports at parse time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from itbench_gym.lang import yamltext
from itbench_gym.policy.rego import RegoEngine, RegoError, RegoVersion
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult
from itbench_gym.tools.cli_args import (
    CommandLineError,
    command_argv,
    command_parameters,
    parse_flags,
    read_text,
    run_cli,
    walk_files,
    workspace_path,
)

_DATA_SUFFIXES = (".json", ".yaml", ".yml")
_QUERY_MODULE = "<query.rego>"

_EVAL_FLAGS = {"data": "value", "input": "value", "format": "value", "v0-compatible": "bool", "fail": "bool", "fail-defined": "bool", "help": "bool"}
_EVAL_SHORT = {"d": "data", "i": "input", "f": "format", "h": "help"}
_CHECK_FLAGS = {"format": "value", "v0-compatible": "bool", "help": "bool"}
_CHECK_SHORT = {"f": "format", "h": "help"}
_FORMATS = ("json", "values", "bindings", "pretty", "raw")
_UNSUPPORTED_EVAL = {
    "bundle": "bundles are not supported; pass the policy files or folders with -d",
    "stdin": "there is no stdin; write the query as the argument",
    "stdin-input": "there is no stdin; pass the input document with -i FILE",
    "explain": "traces are not available from this engine",
    "profile": "profiling is not available from this engine",
    "partial": "partial evaluation is not available from this engine",
}

USAGE = """Usage:
  opa eval [flags] <query>     evaluate a Rego query
  opa check [flags] <path>...  parse Rego files and folders
  opa version

opa eval flags:
  -d, --data PATH          policy (.rego) or data (.json, .yaml) file or folder; repeatable
  -i, --input FILE         input document (JSON or YAML)
  -f, --format FORMAT      json (default), values, bindings, pretty, raw
      --fail               exit 1 when the query is undefined
      --fail-defined       exit 1 when the query is defined
      --v0-compatible      read policies as Rego v0 (pre-1.0 syntax); Rego v1 is the default
opa check flags:
  -f, --format FORMAT      pretty (default) or json
      --v0-compatible      read policies as Rego v0"""


@dataclass(frozen=True)
class _OpaError:
    """One error as OPA's presentation layer holds it."""

    code: str
    message: str
    file: str = ""
    row: int = 0
    col: int = 0
    line: str = ""

    def text(self) -> str:
        where = f"{self.file}:{self.row}: " if self.file and self.row else (f"{self.row}:{self.col}: " if self.row else "")
        text = f"{where}{self.code}: {self.message}" if self.code else self.message
        if self.line:
            caret = "".join(c if c == "\t" else " " for c in self.line[: max(self.col - 1, 0)]) + "^"
            text += f"\n\t{self.line}\n\t{caret}"
        return text

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.line:
            out["details"] = {"line": self.line, "idx": max(self.col - 1, 0)}
        if self.row:
            location: dict[str, Any] = {"file": self.file} if self.file else {}
            out["location"] = {**location, "row": self.row, "col": self.col}
        out["message"] = self.message
        if self.code:
            out["code"] = self.code
        return out


class _Failed(Exception):
    """Errors that end the command, printed in the requested format."""

    def __init__(self, errors: list[_OpaError]) -> None:
        super().__init__(errors[0].message)
        self.errors = errors


def _errors_text(errors: list[_OpaError]) -> str:
    if len(errors) == 1:
        return f"1 error occurred: {errors[0].text()}"
    return f"{len(errors)} errors occurred:\n" + "\n".join(e.text() for e in errors)


def _go_json(value: Any, indent: int | None = 2) -> str:
    """JSON as Go's encoder writes it (HTML-safe escapes, no spaces when compact)."""
    separators = (",", ": ") if indent else (",", ":")
    text = json.dumps(value, indent=indent, ensure_ascii=False, separators=separators)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class OpaTool:
    name = "opa"
    description = (
        "Open Policy Agent CLI (OPA 1.x, Rego v1 by default): `opa eval -d policy.rego -i input.json 'data.check.result'` "
        "with -d/--data (Rego, JSON/YAML data, folders), -i/--input, -f/--format json|values|bindings|pretty|raw, "
        "--fail, --fail-defined, --v0-compatible; `opa check PATH...` parses policies. Paths are relative to your "
        "workspace. No shell."
    )
    parameters: Mapping[str, Any] = command_parameters("opa", "opa eval -d policy.rego 'data.check'")
    cost_seconds = 0.5

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        return run_cli("opa", command_argv(args, "opa"), USAGE, {
            "eval": partial(eval_command, ctx.workspace), "check": partial(self._check, ctx=ctx),
            "version": lambda _: ("Version: 1.x (Rego evaluated in-process by regorus; no opa binary)", 0)})

    def _check(self, argv: list[str], ctx: ToolContext) -> tuple[str, int]:
        flags = parse_flags(argv, _CHECK_FLAGS, _CHECK_SHORT)
        if flags.enabled("help"):
            return USAGE, 0
        fmt = flags.last("format", "pretty")
        if fmt not in ("pretty", "json"):
            raise CommandLineError(f"invalid argument \"{fmt}\" for \"-f, --format\" flag: must be one of pretty, json")
        if not flags.args:
            raise CommandLineError("specify at least one file")
        version: RegoVersion = "v0" if flags.enabled("v0-compatible") else "v1"
        errors: list[_OpaError] = []
        for value in flags.args:
            try:
                files = list(walk_files(ctx.workspace, value, (".rego",)))
            except FileNotFoundError:
                errors.append(_OpaError("", f"stat {value}: no such file or directory"))
                continue
            for shown, path in files:
                try:
                    source = read_text(path, shown)
                    RegoEngine().add_module(shown, source, version)
                except OSError as exc:
                    errors.append(_OpaError("", str(exc)))
                except RegoError as exc:
                    errors.append(_from_rego(exc, {shown: source}, at_eval=False))
        if not errors:
            return "", 0
        return _show_errors(errors, "json" if fmt == "json" else "pretty"), 1


def eval_command(workspace: Path, argv: list[str]) -> tuple[str, int]:
    """``opa eval ARGS`` in ``workspace``: its output and exit status (what the tool shows and the CISO
    grader reads, as ITBench's evaluator reads the real binary's). A rejected command line raises
    ``CommandLineError`` or ``ToolInputError``."""
    for name, reason in _UNSUPPORTED_EVAL.items():
        if any(a == f"--{name}" or a.startswith(f"--{name}=") for a in argv):
            raise ToolInputError(f"flag --{name} is not available: {reason}")
    flags = parse_flags(argv, _EVAL_FLAGS, _EVAL_SHORT)
    if flags.enabled("help"):
        return USAGE, 0
    fmt = flags.last("format", "json")
    if fmt not in _FORMATS:
        raise CommandLineError(f"invalid argument \"{fmt}\" for \"-f, --format\" flag: must be one of {', '.join(_FORMATS)}")
    if not flags.args:
        raise CommandLineError("specify query argument or --stdin")
    if len(flags.args) > 1:
        raise CommandLineError(f"accepts at most 1 arg(s), received {len(flags.args)}")
    query = flags.args[0]
    version: RegoVersion = "v0" if flags.enabled("v0-compatible") else "v1"
    try:
        engine, sources = _load(workspace, flags.every("data"), version)
        if flags.given("input"):
            engine.set_input(_document(workspace, flags.last("input", "")))
        result = engine.result_set(query)
    except _Failed as exc:
        return _show_errors(exc.errors, fmt), 1
    except RegoError as exc:
        return _show_errors([_from_rego(exc, sources, at_eval=True)], fmt), 1
    defined = bool(result.get("result"))
    status = 1 if (flags.enabled("fail") and not defined) or (flags.enabled("fail-defined") and defined) else 0
    return _present(result.get("result") or [], fmt), status


def _load(workspace: Path, values: list[str], version: RegoVersion) -> tuple[RegoEngine, dict[str, str]]:
    """An engine holding every module and data document under the ``-d`` paths; sources by module name."""
    engine = RegoEngine()
    sources: dict[str, str] = {}
    data: dict[str, Any] = {}
    for value in values:
        try:
            files = list(walk_files(workspace, value, (".rego", *_DATA_SUFFIXES)))
        except FileNotFoundError:
            raise _Failed([_OpaError("", f"stat {value}: no such file or directory")]) from None
        for shown, path in files:
            try:
                text = read_text(path, shown)
            except OSError as exc:
                raise _Failed([_OpaError("", str(exc))]) from None
            if shown.endswith(".rego"):
                sources[shown] = text
                try:
                    engine.add_module(shown, text, version)
                except RegoError as exc:
                    raise _Failed([_from_rego(exc, sources, at_eval=False)]) from None
            elif shown.endswith(_DATA_SUFFIXES):
                # A file named directly is merged at the root; one found in a folder under that folder's path.
                prefix = PurePosixPath(shown).relative_to(value).parent.parts if shown != value else ()
                _merge(data, _nest(_parse_document(text, shown), prefix), shown)
            else:
                raise _Failed([_OpaError("", f"{shown}: unrecognized file extension (want .rego, .json, .yaml or .yml)")])
    if data:
        engine.set_data(data)
    return engine, sources


def _document(workspace: Path, value: str) -> Any:
    try:
        path = workspace_path(workspace, value)
        if not path.exists():
            raise _Failed([_OpaError("", f"stat {value}: no such file or directory")])
        return _parse_document(read_text(path, value), value)
    except OSError as exc:
        raise _Failed([_OpaError("", str(exc))]) from None


def _parse_document(text: str, shown: str) -> Any:
    try:
        return json.loads(text) if shown.endswith(".json") else yamltext.load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise _Failed([_OpaError("", f"{shown}: {' '.join(str(exc).split())}")]) from None


def _nest(value: Any, prefix: tuple[str, ...]) -> Any:
    for part in reversed(prefix):
        value = {part: value}
    return value


def _merge(into: dict[str, Any], value: Any, shown: str) -> None:
    """Merge a data document into the root; non-object documents or overlapping leaves are OPA's merge error."""
    if not isinstance(value, dict):
        raise _Failed([_OpaError("", f"{shown}: bad document type (a data file at the root must hold an object)")])
    for key, item in value.items():
        if key in into and isinstance(into[key], dict) and isinstance(item, dict):
            _merge(into[key], item, shown)
        elif key in into:
            raise _Failed([_OpaError("", f"{shown}: merge error: data.{key} is defined by more than one file")])
        else:
            into[key] = item


def _from_rego(exc: RegoError, sources: Mapping[str, str], *, at_eval: bool) -> _OpaError:
    """The engine's error in OPA's terms: code, file, row, column and the offending source line."""
    if exc.code is not None:
        code = exc.code
    elif not at_eval or exc.module == _QUERY_MODULE:
        code = "rego_parse_error"
    else:
        code = "eval_conflict_error" if re.search(r"conflict|multiple (outputs|values)", exc.message, re.I) else "rego_compile_error"
    file = "" if exc.module in (None, _QUERY_MODULE) else exc.module
    lines = sources.get(file or "", "").splitlines()
    line = lines[exc.line - 1] if exc.line and 0 < exc.line <= len(lines) else ""
    return _OpaError(code, exc.message, file or "", exc.line or 0, exc.column or 0, line)


def _show_errors(errors: list[_OpaError], fmt: str) -> str:
    if fmt == "json":
        return _go_json({"errors": [e.as_json() for e in errors]})
    return _errors_text(errors)


def _present(results: list[dict[str, Any]], fmt: str) -> str:
    """A result set in one of ``opa eval``'s formats."""
    if fmt == "json":
        return _go_json({"result": results} if results else {})
    if fmt == "values":
        return "\n".join(_go_json([e.get("value") for e in r.get("expressions", [])]) for r in results)
    if fmt == "bindings":
        return "\n".join(_go_json(r.get("bindings") or {}) for r in results)
    if fmt == "raw":
        return "\n".join(" ".join(_raw(e.get("value")) for e in r.get("expressions", [])) for r in results)
    return _pretty(results)


def _raw(value: Any) -> str:
    return value if isinstance(value, str) else _go_json(value, indent=None)


def _pretty(results: list[dict[str, Any]]) -> str:
    """A lone result without bindings as indented JSON; otherwise OPA's table of bindings and expressions."""
    if not results:
        return "undefined"
    first = results[0]
    expressions = first.get("expressions", [])
    if len(results) == 1 and not first.get("bindings"):
        if len(expressions) == 1 or all(isinstance(e.get("value"), bool) for e in expressions):
            return _go_json(expressions[0].get("value"))
    names = sorted((first.get("bindings") or {}).keys())
    shown = [i for i, e in enumerate(expressions) if not isinstance(e.get("value"), bool) or not names]
    header = [*names, *(str(expressions[i].get("text", "")) for i in shown)]
    rows = [
        [_go_json((r.get("bindings") or {}).get(n), None) for n in names]
        + [_go_json(r.get("expressions", [])[i].get("value"), None) for i in shown]
        for r in results
    ]
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule, "|" + "|".join(f" {h.center(w)} " for h, w in zip(header, widths, strict=True)) + "|", rule]
    lines += ["|" + "|".join(f" {c.ljust(w)} " for c, w in zip(row, widths, strict=True)) + "|" for row in rows]
    return "\n".join([*lines, rule])
