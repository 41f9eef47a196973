"""The agent's diagnosis report (what ``submit`` carries): schema, decoding, validation and parsing.

The accepted shape is ITBench's SRE agent output (``itbench-hub/ITBench-SRE-Agent``
``agent_output.json``): ``entities`` with ``id`` and/or ``name`` and a root-cause flag
(``root_cause``, or ITBench's ``contributing_factor``), and ``propagations`` whose ``source`` and
``target`` name an entity by its ``id``, its ``name``, or directly by reference. Extra fields
(``reasoning``, ``evidence``, ``alerts_explained``, a mitigation plan, ...) are allowed and ignored.

:func:`parse_report` is the one reader of reports: the ``submit`` tool uses it to decide whether a
report is accepted (an invalid one is an error observation and the episode goes on) and the grader
uses it again on the accepted document. It takes an object (tool-call arguments) or text:

- plain JSON;
- Markdown fenced blocks (```` ```json ... ``` ```` or ```` ``` ... ``` ````) anywhere in prose: the
  report is read from the **last** fenced block that mentions ``"entities"``, or, when none does,
  from the last fenced block that holds JSON; :attr:`ReportParseResult.source` says which one;
- prose around one JSON object: the text from the first ``{`` to the last ``}``.

It never raises. Whatever is wrong — not JSON (with line and column), not an object, a field of the
wrong type (with its path, e.g. ``report.entities[2].root_cause``), nesting deeper than
:data:`MAX_REPORT_DEPTH`, more than :data:`MAX_REPORT_CHARS` characters or :data:`MAX_REPORT_VALUES`
values, integers wider than 64 bits, NaN/Infinity, NUL characters or lone UTF-16 surrogates, object
keys that are not strings, values that are not JSON — comes back as located error messages plus
hints on how to fix them.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.evaluation.entities import EntityRef, parse_entity_ref
from itbench_gym.evaluation.validation import json_path, schema_errors

_NON_EMPTY = {"type": "string", "minLength": 1}

REPORT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "itbench_gym diagnosis report",
    "type": "object",
    "required": ["entities"],
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "anyOf": [{"required": ["name"]}, {"required": ["id"]}],
                "properties": {
                    "id": _NON_EMPTY,
                    "name": _NON_EMPTY,
                    "kind": _NON_EMPTY,
                    "namespace": _NON_EMPTY,
                    "root_cause": {"type": "boolean"},
                    "contributing_factor": {"type": "boolean"},
                },
            },
        },
        "propagations": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["source", "target"],
                "properties": {
                    "source": _NON_EMPTY,
                    "target": _NON_EMPTY,
                    "condition": {"type": "string"},
                    "effect": {"type": "string"},
                },
            },
        },
    },
}

#: Longest report text accepted (characters), and the most characters of strings an object may hold.
MAX_REPORT_CHARS = 200_000
#: Deepest nesting of objects/arrays accepted; real reports nest 3-4 levels.
MAX_REPORT_DEPTH = 32
#: Most JSON values (objects, arrays, strings, numbers, ...) a report may hold.
MAX_REPORT_VALUES = 20_000
#: Most errors listed for one report; the rest are counted.
MAX_LISTED_ERRORS = 20

#: The shape to send, shown with every rejection.
REPORT_EXAMPLE = (
    '{"entities": [{"id": "<namespace>/<Kind>/<name>", "root_cause": true}, '
    '{"id": "<namespace>/<Kind>/<name>", "root_cause": false}], '
    '"propagations": [{"source": "<entity id>", "target": "<entity id>", "condition": "...", "effect": "..."}]}'
)

#: A Markdown code fence: ``` + optional info string, the body, and the closing ```.
_FENCE = re.compile(r"```[ \t]*(?P<lang>[A-Za-z0-9_+.-]*)[^\S\n]*\n?(?P<body>.*?)```", re.DOTALL)
_JSON_LANGS = frozenset({"", "json", "jsonc", "json5", "js", "javascript"})
#: Tokens that matter for nesting depth: strings (possibly unterminated) and brackets.
_SURROGATE = re.compile("[\ud800-\udfff]")
_DEPTH_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


@dataclass(frozen=True)
class ReportEntity:
    ref: EntityRef
    root_cause: bool
    id: str | None = None


@dataclass(frozen=True)
class ReportPropagation:
    source: EntityRef
    target: EntityRef
    condition: str = ""
    effect: str = ""


@dataclass(frozen=True)
class DiagnosisReport:
    entities: tuple[ReportEntity, ...]
    propagations: tuple[ReportPropagation, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def root_causes(self) -> tuple[ReportEntity, ...]:
        return tuple(e for e in self.entities if e.root_cause)


@dataclass(frozen=True)
class ReportParseResult:
    """Either a report or the reasons there is none; ``errors`` name the JSON path or text position.

    ``document`` is the decoded, plain-JSON report object (what a grader re-reads); ``source`` says
    where in the submitted text it was found; ``hints`` say how to fix the errors.
    """

    report: DiagnosisReport | None
    errors: tuple[str, ...] = ()
    document: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    source: str = field(default="", compare=False)
    hints: tuple[str, ...] = field(default=(), compare=False)

    @property
    def valid(self) -> bool:
        return self.report is not None

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": list(self.errors)}


class _Invalid(Exception):
    """Internal: the report cannot be read; carries the located messages."""

    def __init__(self, errors: list[str], source: str = "") -> None:
        super().__init__("; ".join(errors))
        self.errors = errors
        self.source = source


def parse_report(data: str | bytes | Mapping[str, Any] | Any) -> ReportParseResult:
    """Decode, validate and parse a report given as text or as an object; never raises."""
    if isinstance(data, ReportParseResult):
        return data
    source = "object"
    try:
        if isinstance(data, (bytes, bytearray, memoryview)):
            try:
                data = bytes(data).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _Invalid([f"report: not UTF-8 text (byte {exc.start}: {exc.reason})"]) from None
        if isinstance(data, str):
            source = "text"
            data, source = _decode_text(data)
        doc = _plain_json(data)
    except _Invalid as exc:
        return _rejected(exc.errors, exc.source or source)
    if not isinstance(doc, dict):
        return _rejected([f"report: expected object {{\"entities\": [...]}}, got {_json_type(doc)}"], source)
    errors = schema_errors(doc, REPORT_SCHEMA, "report")
    if errors:
        return _rejected(errors, source)
    return ReportParseResult(_build(doc), document=doc, source=source)


def describe_rejection(result: ReportParseResult) -> str:
    """The observation for a rejected report: every problem, where it is, and how to fix it."""
    lines = ["submit: error: the report was NOT accepted and the episode goes on; fix it and submit again."]
    if result.source not in ("", "object", "text"):
        lines.append(f"Read from: {result.source}.")
    lines.append("Problems:")
    lines += [f"  - {e}" for e in result.errors]
    lines.append("How to fix:")
    lines += [f"  - {h}" for h in result.hints]
    lines.append(f"  - send one JSON object shaped like {REPORT_EXAMPLE}")
    return "\n".join(lines)


# -- decoding ------------------------------------------------------------------------------------


def _decode_text(text: str) -> tuple[Any, str]:
    """JSON value from report text: plain JSON, the chosen fenced block, or the object in prose."""
    if len(text) > MAX_REPORT_CHARS:
        raise _Invalid([f"report: {len(text):,} characters; the limit is {MAX_REPORT_CHARS:,}"])
    if not text.strip():
        raise _Invalid(["report: empty; submit the report as a JSON object"])
    start = len(text) - len(text.lstrip())
    if text[start] in "{[":
        whole = _loads_or_nothing(text)
        if whole is not _NOTHING:
            return whole, "JSON text"
    fences = list(_FENCE.finditer(text))
    blocks = [m for m in fences if m.group("lang").lower() in _JSON_LANGS and m.group("body").lstrip()[:1] in ("{", "[")]
    if blocks:
        reportish = [m for m in blocks if '"entities"' in m.group("body")]
        chosen = (reportish or blocks)[-1]
        index = blocks.index(chosen) + 1
        line = _line_col(text, chosen.start())[0]
        which = 'the last one that mentions "entities"' if reportish else "the last one"
        source = f"fenced JSON block {index} of {len(blocks)} at line {line}, {which}"
        try:
            return _loads(chosen.group("body"), chosen.start("body"), text, f"report (in the fenced block at line {line})"), source
        except _Invalid as exc:
            exc.source = source
            raise
    # Prose around one object: blank out non-JSON fenced blocks, take first "{" .. last "}".
    masked = text
    for m in fences:
        masked = masked[: m.start()] + " " * (m.end() - m.start()) + masked[m.end() :]
    first, last = masked.find("{"), masked.rfind("}")
    if text[start] == "[" or (text[start] == "{" and last < first):
        return _loads(text, 0, text, "report"), "JSON text"
    if first < 0 or last < first:
        raise _Invalid(["report: no JSON object found in the text; send the report as a JSON object, "
                        "alone or in a ```json fenced block"])
    if first == start:
        return _loads(text[first : last + 1], first, text, "report"), "JSON text (text after the object ignored)"
    line, col = _line_col(text, first)
    label = f"report (the object starting at line {line} column {col})"
    return _loads(text[first : last + 1], first, text, label), f"the JSON object in the text from line {line} column {col}"


_NOTHING = object()


def _loads_or_nothing(text: str) -> Any:
    """The decoded value if ``text`` is exactly one JSON value within the depth bound, else a marker."""
    if _depth_violation(text, 0) is not None:
        return _NOTHING
    try:
        return json.loads(text, strict=False)
    except (ValueError, RecursionError):
        return _NOTHING


def _loads(fragment: str, offset: int, whole: str, label: str) -> Any:
    """Decode ``fragment`` (found at ``offset`` of ``whole``); errors give the line/column in ``whole``."""
    deep = _depth_violation(fragment, offset)
    if deep is not None:
        line, col = _line_col(whole, deep)
        raise _Invalid([f"{label}: nested deeper than {MAX_REPORT_DEPTH} levels at line {line} column {col}"])
    try:
        return json.loads(fragment, strict=False)
    except json.JSONDecodeError as exc:
        pos = offset + exc.pos
        line, col = _line_col(whole, pos)
        raise _Invalid([f"{label}: not valid JSON: {exc.msg} at line {line} column {col} (near {_near(whole, pos)})"]) from None
    except RecursionError:
        raise _Invalid([f"{label}: nested too deeply"]) from None
    except ValueError as exc:  # an integer literal longer than Python's int conversion limit
        message = "a number has too many digits; numbers must fit in 64 bits" if "digits" in str(exc) else _printable(str(exc), 160)
        raise _Invalid([f"{label}: {message}"]) from None


def _depth_violation(text: str, offset: int) -> int | None:
    """Offset (in the whole text) of the first bracket nested deeper than the bound, or None."""
    depth = 0
    for m in _DEPTH_TOKENS.finditer(text):
        tok = m.group()
        if tok in ("[", "{"):
            depth += 1
            if depth > MAX_REPORT_DEPTH:
                return offset + m.start()
        elif tok in ("]", "}"):
            depth = max(0, depth - 1)
    return None


def _line_col(text: str, pos: int) -> tuple[int, int]:
    pos = max(0, min(pos, len(text)))
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def _near(text: str, pos: int) -> str:
    """A short, printable excerpt of ``text`` around ``pos``."""
    lo, hi = max(0, pos - 20), min(len(text), pos + 20)
    excerpt = ("..." if lo else "") + text[lo:hi] + ("..." if hi < len(text) else "")
    return "'" + _printable(excerpt.replace("\n", " "), 60) + "'"


# -- plain-JSON check ------------------------------------------------------------------------------


def _plain_json(value: Any) -> Any:
    """A plain copy (dict/list/str/int/float/bool/None) of ``value`` within every bound; iterative."""
    errors: list[str] = []
    omitted = 0
    holder: list[Any] = [None]
    stack: list[tuple[Any, str, int, Any, Any]] = [(value, "report", 0, holder, 0)]
    count = chars = 0
    too_deep = False

    def fail(message: str) -> None:
        nonlocal omitted, too_deep
        if "nested deeper" in message:
            if too_deep:
                return
            too_deep = True
        if len(errors) < MAX_LISTED_ERRORS:
            errors.append(message)
        else:
            omitted += 1

    while stack:
        src, path, depth, parent, key = stack.pop()
        count += 1
        if count > MAX_REPORT_VALUES:
            fail(f"report: more than {MAX_REPORT_VALUES:,} JSON values; send a shorter report")
            break
        try:
            if src is None or isinstance(src, bool):
                parent[key] = src
            elif isinstance(src, numbers.Integral):
                number = int(src)
                if number.bit_length() > 64:
                    fail(f"{path}: integer with {number.bit_length()} bits; numbers must fit in 64 bits")
                else:
                    parent[key] = number
            elif isinstance(src, numbers.Real):
                real = float(src)
                if math.isfinite(real):
                    parent[key] = real
                else:
                    spelled = "NaN" if math.isnan(real) else ("Infinity" if real > 0 else "-Infinity")
                    fail(f"{path}: {spelled} is not a JSON number")
            elif isinstance(src, str):
                text = str.__str__(src)
                chars += len(text)
                problem = _string_problem(text)
                if problem:
                    fail(f"{path}: {problem}")
                parent[key] = text
            elif isinstance(src, Mapping):
                if depth >= MAX_REPORT_DEPTH:
                    fail(f"{path}: nested deeper than {MAX_REPORT_DEPTH} levels")
                    continue
                if len(src) > MAX_REPORT_VALUES:
                    fail(f"{path}: {len(src):,} keys; a report may hold at most {MAX_REPORT_VALUES:,} values")
                    break
                out: dict[str, Any] = {}
                parent[key] = out
                children = []
                for k, v in src.items():
                    if not isinstance(k, str):
                        fail(f"{path}: key {_safe_repr(k)} is {_json_type(k)}; object keys must be strings")
                        continue
                    name = str.__str__(k)
                    chars += len(name)
                    problem = _string_problem(name)
                    if problem:
                        fail(f"{json_path(path, [_printable(name, 40)])}: key {problem}")
                        continue
                    out[name] = None
                    children.append((v, json_path(path, [_printable(name, 60)]), depth + 1, out, name))
                stack.extend(reversed(children))
            elif isinstance(src, (list, tuple)):
                if depth >= MAX_REPORT_DEPTH:
                    fail(f"{path}: nested deeper than {MAX_REPORT_DEPTH} levels")
                    continue
                items = list(src)
                if len(items) > MAX_REPORT_VALUES:
                    fail(f"{path}: {len(items):,} items; a report may hold at most {MAX_REPORT_VALUES:,} values")
                    break
                arr: list[Any] = [None] * len(items)
                parent[key] = arr
                stack.extend(reversed([(v, f"{path}[{i}]", depth + 1, arr, i) for i, v in enumerate(items)]))
            else:
                fail(f"{path}: {_json_type(src)} is not a JSON value")
        except Exception as exc:  # an exotic object whose iteration or conversion fails
            fail(f"{path}: cannot read this value ({type(exc).__name__})")
        if chars > MAX_REPORT_CHARS:
            fail(f"report: more than {MAX_REPORT_CHARS:,} characters of text; send a shorter report")
            break
    if errors:
        if omitted:
            errors.append(f"... and {omitted} more problem(s)")
        raise _Invalid(errors)
    return holder[0]


def _string_problem(text: str) -> str | None:
    """Why a string cannot be part of a report (NUL, lone surrogate), or None."""
    nul = text.find("\x00")
    if nul >= 0:
        return f"contains a NUL character (\\u0000) at position {nul}"
    surrogate = _SURROGATE.search(text)
    if surrogate is not None:
        code = ord(surrogate.group())
        return f"contains a lone UTF-16 surrogate (\\u{code:04x}) at position {surrogate.start()}; send valid Unicode text"
    return None


def _printable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with control characters and surrogates escaped."""
    out = []
    for ch in text[:limit]:
        code = ord(ch)
        if code < 32 or code == 127 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out) + ("..." if len(text) > limit else "")


def _safe_repr(value: Any) -> str:
    try:
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
            return f"<integer with {value.bit_length()} bits>"
        return _printable(repr(value), 40)
    except Exception:
        return f"<{type(value).__name__}>"


def _json_type(value: Any) -> str:
    """JSON's name for a value's type (``an array``, ``a string``), or the Python type otherwise."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return f"a Python {type(value).__name__}"


# -- results ---------------------------------------------------------------------------------------


def _rejected(errors: list[str], source: str) -> ReportParseResult:
    return ReportParseResult(None, tuple(errors), document=None, source=source, hints=tuple(_hints(errors)))


_HINTS: tuple[tuple[str, str], ...] = (
    ("not valid JSON", "fix the JSON syntax at that line and column: a missing comma, quote, colon or bracket is the usual cause"),
    ("report: empty", "put the report after the tool name: submit {\"entities\": [...]}"),
    ("no JSON object found", "put the report object in the message, e.g. in a ```json fenced block"),
    ("not UTF-8", "send the report as UTF-8 text"),
    ("expected object {", "the report is one JSON object with an \"entities\" array, not a list or a string"),
    ("expected object, got", "every entity and every propagation is a JSON object, e.g. {\"id\": \"<namespace>/<Kind>/<name>\", \"root_cause\": true}"),
    ("'entities' is a required property", "add \"entities\": a list of objects, each with an \"id\" or \"name\""),
    ("expected boolean", "write booleans as true or false, without quotes"),
    ("expected array", "\"entities\" and \"propagations\" are JSON arrays: [ {...}, {...} ]"),
    ("expected string", "entity ids, names, kinds, namespaces and propagation endpoints are strings"),
    ("expected one of", "give every entity a non-empty \"id\" or \"name\" string"),
    ("should be non-empty", "ids, names and propagation endpoints must not be empty strings"),
    ("'source' is a required property", "every propagation needs \"source\" and \"target\" (entity ids or names)"),
    ("'target' is a required property", "every propagation needs \"source\" and \"target\" (entity ids or names)"),
    ("nested deeper", f"keep the report flat: at most {MAX_REPORT_DEPTH} levels of nesting"),
    ("characters", "send a shorter report: the entities, their root-cause flags and the propagations are enough"),
    ("a report may hold at most", "send a shorter report: the entities, their root-cause flags and the propagations are enough"),
    ("JSON values", "send a shorter report: the entities, their root-cause flags and the propagations are enough"),
    ("keys must be strings", "use strings as object keys"),
    ("numbers must fit in 64 bits", "write large numbers as strings, or leave them out"),
    ("not a JSON number", "NaN and Infinity are not JSON; leave the field out or use a string"),
    ("is not a JSON value", "use only JSON values: objects, arrays, strings, numbers, true/false and null"),
    ("NUL character", "remove NUL characters from the text"),
    ("surrogate", "send valid Unicode text"),
)


def _hints(errors: list[str]) -> list[str]:
    out: list[str] = []
    for error in errors:
        for needle, hint in _HINTS:
            if needle in error and hint not in out:
                out.append(hint)
    return out


def _build(doc: Mapping[str, Any]) -> DiagnosisReport:
    entities: list[ReportEntity] = []
    by_handle: dict[str, EntityRef] = {}
    for item in doc["entities"]:
        text = item.get("name") or item["id"]
        ref = parse_entity_ref(text, kind=item.get("kind"), namespace=item.get("namespace"))
        flag = item.get("root_cause", item.get("contributing_factor", False))
        entities.append(ReportEntity(ref=ref, root_cause=bool(flag), id=item.get("id")))
        for handle in (item.get("id"), item.get("name")):
            if handle:
                by_handle.setdefault(handle, ref)

    def resolve(handle: str) -> EntityRef:
        return by_handle.get(handle) or parse_entity_ref(handle)

    propagations = tuple(
        ReportPropagation(
            source=resolve(p["source"]),
            target=resolve(p["target"]),
            condition=p.get("condition", ""),
            effect=p.get("effect", ""),
        )
        for p in doc.get("propagations", [])
    )
    return DiagnosisReport(entities=tuple(entities), propagations=propagations, raw=doc)
