"""Load scenario YAML files, validate them against the schema, and build ``ScenarioSpec``s."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import yaml

from itbench_gym.faults.catalogue import validate_fault_args
from itbench_gym.paths import specs_dir
from itbench_gym.spec.model import (
    AlertMatcher,
    Budget,
    Complexity,
    FaultRef,
    Observability,
    ScenarioSpec,
)

_SCHEMA_PATH = Path(__file__).with_name("scenario.schema.json")


class SpecError(ValueError):
    """A scenario file that cannot be used; names the file, the field path and what was expected."""

    def __init__(self, source: Path | str, path: str, message: str) -> None:
        self.source = str(source)
        self.path = path
        self.message = message
        super().__init__(f"{source}: {path or '<root>'}: {message}")


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(_SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema)


def _json_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate_document(doc: Any, source: Path | str) -> None:
    """Raise ``SpecError`` for the first (most specific) schema violation."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: (-len(e.absolute_path), str(e.message)))
    if errors:
        err = errors[0]
        raise SpecError(source, _json_path(err.absolute_path), err.message)


def _build(doc: dict[str, Any], source: Path) -> ScenarioSpec:
    meta = doc["metadata"]
    env = doc["environment"]
    factors = meta["complexity"]["factors"]
    obs = env.get("observability", {})
    gt = doc["ground_truth"]
    group_ids = {g["id"] for g in gt["groups"]}
    for i, prop in enumerate(gt["propagations"]):
        for end in ("source", "target"):
            if prop[end] not in group_ids:
                raise SpecError(
                    source,
                    f"ground_truth.propagations[{i}].{end}",
                    f"{prop[end]!r} is not the id of a ground_truth group",
                )
    for i, alias in enumerate(gt.get("aliases", [])):
        for j, member in enumerate(alias):
            if member not in group_ids:
                raise SpecError(source, f"ground_truth.aliases[{i}][{j}]", f"{member!r} is not the id of a ground_truth group")
    for i, fault in enumerate(doc["faults"]):
        problem = validate_fault_args(fault["id"], fault["args"])
        if problem is not None:
            where, message = problem
            raise SpecError(source, f"faults[{i}].{where}", message)
    if not any(g.get("root_cause") for g in gt["groups"]):
        raise SpecError(source, "ground_truth.groups", "no group has root_cause: true")
    return ScenarioSpec(
        id=meta["id"],
        name=meta["name"],
        description=meta["description"].strip(),
        domain=meta["domain"],
        cls=meta["class"],
        complexity=Complexity(
            level=meta["complexity"]["level"],
            technologies=factors["technologies"],
            propagation_length=factors["propagation_length"],
            resolution_steps=factors["resolution_steps"],
        ),
        app=env["app"],
        namespace=env["namespace"],
        observability=Observability(**obs),
        load_users=env.get("load", {}).get("users"),
        baseline_seconds=float(env.get("baseline_seconds", 600)),
        faults=tuple(FaultRef(id=f["id"], args=f["args"]) for f in doc["faults"]),
        triggering_alerts=tuple(
            AlertMatcher(alertname=a["alertname"], labels=dict(a.get("labels", {})))
            for a in doc["alerts"]["triggering"]
        ),
        alert_wait_timeout=float(doc["alerts"].get("wait_timeout_seconds", 1800)),
        ground_truth=gt,
        mitigations=tuple(doc.get("mitigations", [])),
        desired_outcome=doc["desired_outcome"],
        budget=Budget(max_steps=doc["budget"]["max_steps"], max_sim_seconds=float(doc["budget"]["max_sim_seconds"])),
        source=source,
        itbench_scenario=meta.get("itbench_scenario"),
        tags=tuple(meta.get("tags", [])),
    )


def load_spec(path: Path | str) -> ScenarioSpec:
    """Load one scenario file; every problem is a ``SpecError`` naming file and field."""
    source = Path(path)
    try:
        doc = yaml.safe_load(source.read_text())
    except OSError as exc:
        raise SpecError(source, "", f"cannot read file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(source, "", f"invalid YAML: {where}{getattr(exc, 'problem', exc)}") from None
    validate_document(doc, source)
    return _build(doc, source)


def load_all_specs(root: Path | None = None) -> list[ScenarioSpec]:
    """Every ``*.yaml`` under ``scenario_specs/<domain>/``, sorted by id; duplicate ids are errors."""
    base = root or specs_dir()
    specs: dict[str, ScenarioSpec] = {}
    for file in sorted(base.glob("*/*.yaml")):
        spec = load_spec(file)
        if spec.id in specs:
            raise SpecError(file, "metadata.id", f"duplicate id {spec.id!r}, also in {specs[spec.id].source}")
        specs[spec.id] = spec
    return [specs[k] for k in sorted(specs)]
