"""Ground truth in ITBench's v1 shape: entity groups, aliases, propagations, faults, alerts.

A *group* names cluster entities by kind, namespace and either an exact ``name`` or a list of
``filter`` regular expressions. *Aliases* say several groups denote the same thing (a Service, its
Pods, its Deployment); an alias-connected set of groups is a *class*, and all metrics compare
classes, never raw group ids. :meth:`GroundTruth.match` is the single definition of "this reported
entity is that ground-truth thing".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from itbench_gym.evaluation.entities import EntityRef, canonical_kind
from itbench_gym.evaluation.validation import json_path, schema_problems

_STR = {"type": "string", "minLength": 1}
_TEXT = {"type": ["string", "null"]}

GROUND_TRUTH_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["groups"],
    "additionalProperties": False,
    "properties": {
        "metadata": {"type": "object"},
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "kind"],
                "anyOf": [{"required": ["name"]}, {"required": ["filter"]}],
                "additionalProperties": False,
                "properties": {
                    "id": _STR,
                    "kind": _STR,
                    "namespace": _STR,
                    "name": _STR,
                    "filter": {"type": "array", "minItems": 1, "items": _STR},
                    "root_cause": {"type": "boolean"},
                },
            },
        },
        "aliases": {"type": ["array", "null"], "items": {"type": "array", "items": _STR}},
        "propagations": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["source", "target"],
                "properties": {"source": _STR, "target": _STR, "condition": _TEXT, "effect": _TEXT},
            },
        },
        "alerts": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["id"],
                "properties": {"id": _STR, "group_id": _STR, "metadata": {"type": ["object", "null"]}},
            },
        },
        "fault": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "properties": {
                    "category": _TEXT,
                    "condition": _TEXT,
                    "fault_mechanism": _TEXT,
                    "entity": {"type": "object"},
                },
            },
        },
        "recommended_actions": {"$ref": "#/$defs/actions"},
        "recommendedActions": {"$ref": "#/$defs/actions"},
    },
    "$defs": {
        "actions": {
            "type": ["array", "null"],
            "items": {
                "type": "object",
                "required": ["solution"],
                "properties": {
                    "solution": {
                        "type": "object",
                        "required": ["id"],
                        "properties": {"id": _STR, "actions": {"type": "array", "items": {"type": "string"}}},
                    }
                },
            },
        }
    },
}

#: Specificity of an exact ``name`` match; above any filter's literal-prefix length.
_EXACT = 1_000_000
_REGEX_META = set(".^$*+?{}[]|()")


class GroundTruthError(ValueError):
    """The ground truth is malformed; the message lists every problem with its field path.

    ``problems`` holds the same as ``(field path, message)`` pairs, for callers (the scenario-spec
    loader) that report them in their own terms.
    """

    def __init__(self, message: str, problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems

    @classmethod
    def of(cls, problems: list[tuple[str, str]]) -> GroundTruthError:
        return cls("invalid ground truth:\n  " + "\n  ".join(f"{p}: {m}" for p, m in problems), tuple(problems))


@dataclass(frozen=True)
class Group:
    id: str
    kind: str
    namespace: str | None = None
    name: str | None = None
    filters: tuple[str, ...] = ()
    root_cause: bool = False

    @cached_property
    def _compiled(self) -> tuple[tuple[re.Pattern[str], re.Pattern[str] | None, int], ...]:
        """Filters compiled once; one that does not compile matches nothing (never raises at grading)."""
        out = []
        for f in self.filters:
            pattern = compile_filter(f)
            if pattern is not None:
                out.append((pattern, _workload_idiom(f), _literal_prefix(f)))
        return tuple(out)

    def _filter_specificity(self, name: str) -> int | None:
        best: int | None = None
        pod_workload = _pod_workload(name) if self.kind == "Pod" else None
        for pattern, workload, prefix in self._compiled:
            if workload is not None and workload.fullmatch(name):
                score = prefix - 1
            elif pattern.fullmatch(name):
                if workload is not None and pod_workload is not None and not workload.fullmatch(pod_workload):
                    continue
                score = prefix
            else:
                continue
            best = score if best is None else max(best, score)
        return best

    def specificity(self, ref: EntityRef) -> int | None:
        """How specifically this group names ``ref`` (higher wins), or ``None`` if it does not.

        Kind (when the reference gives one) must be the same canonical kind; namespace must agree
        when both give one. Filters must match the whole name; ITBench's pod idiom ``X-.*`` also
        matches the bare workload name ``X``, and on a Pod group it only matches generated pod
        names whose workload part is ``X`` (``frontend-.*`` does not take ``frontend-proxy-7d9c8b-x2x4z``).
        """
        if ref.kind is not None and ref.kind.lower() != self.kind.lower():
            return None
        if ref.namespace is not None and self.namespace is not None and ref.namespace != self.namespace:
            return None
        if self.name is not None and ref.name.lower() == self.name.lower():
            return _EXACT + len(self.name)
        return self._filter_specificity(ref.name)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.name:
            out["name"] = self.name
        if self.filters:
            out["filter"] = list(self.filters)
        out["root_cause"] = self.root_cause
        return out


@dataclass(frozen=True)
class GTPropagation:
    source: str
    target: str
    condition: str = ""
    effect: str = ""


@dataclass(frozen=True)
class GTAlert:
    id: str
    group_id: str | None = None
    description: str = ""


@dataclass(frozen=True)
class Fault:
    category: str = ""
    condition: str = ""
    mechanism: str = ""
    entity_kind: str | None = None
    entity_name: str | None = None
    entity_group_id: str | None = None


@dataclass(frozen=True)
class RecommendedAction:
    id: str
    actions: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroundTruth:
    groups: tuple[Group, ...]
    aliases: tuple[tuple[str, ...], ...] = ()
    propagations: tuple[GTPropagation, ...] = ()
    alerts: tuple[GTAlert, ...] = ()
    faults: tuple[Fault, ...] = ()
    recommended_actions: tuple[RecommendedAction, ...] = ()
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @cached_property
    def class_of(self) -> dict[str, str]:
        """Group id -> class id (the first-declared group id of its alias-connected set)."""
        graph = nx.Graph()
        graph.add_nodes_from(g.id for g in self.groups)
        for alias in self.aliases:
            nx.add_path(graph, alias)
        order = {g.id: i for i, g in enumerate(self.groups)}
        mapping: dict[str, str] = {}
        for component in nx.connected_components(graph):
            rep = min(component, key=order.__getitem__)
            mapping.update({gid: rep for gid in component})
        return mapping

    @cached_property
    def classes(self) -> dict[str, tuple[str, ...]]:
        """Class id -> member group ids, in declaration order."""
        out: dict[str, list[str]] = {}
        for g in self.groups:
            out.setdefault(self.class_of[g.id], []).append(g.id)
        return {k: tuple(v) for k, v in out.items()}

    @cached_property
    def root_cause_classes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.class_of[g.id] for g in self.groups if g.root_cause))

    @cached_property
    def class_edges(self) -> tuple[tuple[str, str], ...]:
        """Propagations as class pairs, de-duplicated, without edges inside one class."""
        edges = ((self.class_of[p.source], self.class_of[p.target]) for p in self.propagations)
        return tuple(dict.fromkeys((s, t) for s, t in edges if s != t))

    def match(self, ref: EntityRef) -> frozenset[str]:
        """Classes ``ref`` denotes: those of the most specific matching groups (empty if none).

        Preferring the most specific filter stops ``frontend-.*`` (frontend's pods) from claiming
        ``frontend-proxy-7d9c`` when a ``frontend-proxy-.*`` group exists.
        """
        scored = [(s, g) for g in self.groups if (s := g.specificity(ref)) is not None]
        if not scored:
            return frozenset()
        top = max(s for s, _ in scored)
        return frozenset(self.class_of[g.id] for s, g in scored if s == top)

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": [g.to_dict() for g in self.groups],
            "aliases": [list(a) for a in self.aliases],
            "propagations": [
                {"source": p.source, "target": p.target, "condition": p.condition, "effect": p.effect}
                for p in self.propagations
            ],
            "alerts": [{"id": a.id, "group_id": a.group_id, "description": a.description} for a in self.alerts],
            "root_cause_classes": list(self.root_cause_classes),
        }


def parse_ground_truth(data: Mapping[str, Any], *, where: str = "ground_truth", strict: bool = True) -> GroundTruth:
    """Build a :class:`GroundTruth` from ITBench v1 data (flat or wrapped in ``spec``).

    With ``strict`` every dangling group reference is an error; without it (for importing
    ITBench's own, partly inconsistent files) such references are dropped and listed in
    ``warnings``. Malformed structure and invalid regular expressions are always errors.
    """
    if not isinstance(data, Mapping):
        where_ = where.rstrip(": ") or "ground truth"
        raise GroundTruthError(f"{where_}: expected a mapping, got {type(data).__name__}",
                               ((where_, f"expected a mapping, got {type(data).__name__}"),))
    if data.get("kind") == "GroundTruth" and isinstance(data.get("spec"), Mapping):
        data, where = data["spec"], json_path(where, ["spec"])
    errors = schema_problems(data, GROUND_TRUTH_SCHEMA, where)
    if errors:
        raise GroundTruthError.of(errors)

    problems: list[tuple[str, str]] = []
    warnings: list[str] = []

    def complain(path: str, message: str, always: bool = False) -> None:
        if strict or always:
            problems.append((path, message))
        else:
            warnings.append(f"{path}: {message}")

    def dangling(path: str, gid: str) -> None:
        complain(path, f"unknown group id {gid!r}")

    groups: list[Group] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["groups"]):
        path = json_path(where, ["groups", i])
        if raw["id"] in seen:
            complain(f"{path}.id", f"duplicate group id {raw['id']!r}")
            continue
        filters = []
        for j, pattern in enumerate(raw.get("filter", [])):
            problem = filter_problem(pattern)
            if problem is None:
                filters.append(pattern)
            else:
                complain(f"{path}.filter[{j}]", f"invalid regular expression {pattern!r} ({problem})")
        if not filters and not raw.get("name"):
            if strict:
                seen.add(raw["id"])  # its invalid filter is the error; references to it are not
                continue
            warnings.append(f"{path}: group {raw['id']!r} dropped: it has no usable name or filter")
            continue
        seen.add(raw["id"])
        groups.append(
            Group(
                id=raw["id"],
                kind=canonical_kind(raw["kind"]),
                namespace=raw.get("namespace"),
                name=raw.get("name"),
                filters=tuple(filters),
                root_cause=raw.get("root_cause", False),
            )
        )
    if not any(g.root_cause for g in groups):
        problems.append((json_path(where, ["groups"]), "no group has root_cause: true"))

    aliases: list[tuple[str, ...]] = []
    for i, alias in enumerate(data.get("aliases") or []):
        kept = []
        for j, gid in enumerate(alias):
            if gid in seen:
                kept.append(gid)
            else:
                dangling(json_path(where, ["aliases", i, j]), gid)
        if kept:
            aliases.append(tuple(kept))

    propagations: list[GTPropagation] = []
    for i, raw in enumerate(data.get("propagations") or []):
        missing = [k for k in ("source", "target") if raw[k] not in seen]
        for k in missing:
            dangling(json_path(where, ["propagations", i, k]), raw[k])
        if not missing:
            propagations.append(
                GTPropagation(raw["source"], raw["target"], raw.get("condition") or "", raw.get("effect") or "")
            )

    alerts: list[GTAlert] = []
    for i, raw in enumerate(data.get("alerts") or []):
        gid = raw.get("group_id")
        if gid is not None and gid not in seen:
            dangling(json_path(where, ["alerts", i, "group_id"]), gid)
            gid = None
        description = (raw.get("metadata") or {}).get("description") or ""
        alerts.append(GTAlert(id=raw["id"], group_id=gid, description=description))

    faults: list[Fault] = []
    for i, raw in enumerate(data.get("fault") or []):
        entity = raw.get("entity") or {}
        gid = entity.get("group_id")
        if gid is not None and (not isinstance(gid, str) or gid not in seen):
            dangling(json_path(where, ["fault", i, "entity", "group_id"]), str(gid))
            gid = None
        faults.append(
            Fault(
                category=raw.get("category") or "",
                condition=raw.get("condition") or "",
                mechanism=raw.get("fault_mechanism") or "",
                entity_kind=entity.get("kind"),
                entity_name=entity.get("name"),
                entity_group_id=gid,
            )
        )
    raw_actions = data.get("recommended_actions") or data.get("recommendedActions") or []
    actions = tuple(
        RecommendedAction(id=a["solution"]["id"], actions=tuple(a["solution"].get("actions", [])))
        for a in raw_actions
    )
    if problems:
        raise GroundTruthError.of(problems)
    return GroundTruth(
        groups=tuple(groups),
        aliases=tuple(aliases),
        propagations=tuple(propagations),
        alerts=tuple(alerts),
        faults=tuple(faults),
        recommended_actions=actions,
        warnings=tuple(warnings),
    )


def load_ground_truth(path: str | Path, *, strict: bool = True) -> GroundTruth:
    """Read a YAML/JSON ground-truth file; errors are prefixed with the file name."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise GroundTruthError(f"{path}: cannot read ground truth ({exc})", ((str(path), f"cannot read ground truth ({exc})"),)) from None
    return parse_ground_truth(data, where=f"{path}: ", strict=strict)


#: Characters Kubernetes uses in generated name suffixes (no vowels, no 0/1/3).
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
_GENERATED_POD = (
    re.compile(rf"(?P<base>.+)-[{_SAFE}]{{1,10}}-[{_SAFE}]{{5}}"),  # Deployment: <name>-<rs hash>-<suffix>
    re.compile(rf"(?P<base>.+)-[{_SAFE}]{{5}}"),  # DaemonSet / Job / bare ReplicaSet
    re.compile(r"(?P<base>.+)-\d+"),  # StatefulSet ordinal
)


def filter_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a group filter (the regex error), or None when it compiles."""
    try:
        re.compile(pattern, re.IGNORECASE)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        return str(exc) or type(exc).__name__
    return None


def compile_filter(pattern: str) -> re.Pattern[str] | None:
    """A filter as matching compiles it (case-insensitive), or None when it does not compile."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except (re.error, OverflowError, RecursionError, ValueError):
        return None


def _workload_idiom(pattern: str) -> re.Pattern[str] | None:
    """For ITBench's pod idiom ``X-.*``: ``X`` itself (matches the bare workload name), if it compiles."""
    return compile_filter(pattern[:-3]) if pattern.endswith("-.*") else None


def _pod_workload(name: str) -> str | None:
    """The workload part of a controller-generated pod name, or None if it is not one."""
    for shape in _GENERATED_POD:
        m = shape.fullmatch(name.lower())
        if m is not None:
            return m.group("base")
    return None


def _literal_prefix(pattern: str) -> int:
    """Number of literal characters a regex starts with: the tie-breaker between filters."""
    count, i = 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if i + 1 < len(pattern) and not pattern[i + 1].isalnum():
                count, i = count + 1, i + 2
                continue
            break
        if ch in _REGEX_META:
            break
        count, i = count + 1, i + 1
    return count
