"""The agent's diagnosis report (what ``submit`` carries): schema, validation and parsing.

The accepted shape is ITBench's SRE agent output (``itbench-hub/ITBench-SRE-Agent``
``agent_output.json``): ``entities`` with ``id`` and/or ``name`` and a root-cause flag
(``root_cause``, or ITBench's ``contributing_factor``), and ``propagations`` whose ``source`` and
``target`` name an entity by its ``id``, its ``name``, or directly by reference. Extra fields
(``reasoning``, ``evidence``, ``alerts_explained``, a mitigation plan, ...) are allowed and ignored.
A malformed report never raises: :func:`parse_report` returns the validation errors instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.evaluation.entities import EntityRef, parse_entity_ref
from itbench_gym.evaluation.validation import schema_errors

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

_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(?P<body>.*)\n\s*```\s*$", re.DOTALL)


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
    """Either a report or the reasons there is none; ``errors`` name the JSON path."""

    report: DiagnosisReport | None
    errors: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return self.report is not None

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": list(self.errors)}


def parse_report(data: str | bytes | Mapping[str, Any] | Any) -> ReportParseResult:
    """Validate and parse a report given as JSON text (optionally in a ``` fence) or a mapping."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ReportParseResult(None, (f"report: not UTF-8 text ({exc})",))
    if isinstance(data, str):
        fenced = _FENCE.match(data)
        text = fenced.group("body") if fenced else data
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return ReportParseResult(
                None, (f"report: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",)
            )
    errors = schema_errors(data, REPORT_SCHEMA, "report")
    if errors:
        return ReportParseResult(None, tuple(errors))
    return ReportParseResult(_build(data))


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
