"""Load ``catalogue.yaml`` and validate a scenario's fault arguments against it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

_CATALOGUE = Path(__file__).with_name("catalogue.yaml")


class FaultError(RuntimeError):
    """A fault could not be injected (the target object is missing, the flag is unknown, ...)."""


@dataclass(frozen=True)
class FaultDefinition:
    id: str
    description: str
    category: str
    operation: str
    args_schema: Mapping[str, Any]


@lru_cache(maxsize=1)
def catalogue() -> dict[str, FaultDefinition]:
    doc = yaml.safe_load(_CATALOGUE.read_text())
    return {
        fid: FaultDefinition(fid, d["description"], d["category"], d["operation"], d["args"])
        for fid, d in doc["faults"].items()
    }


def validate_fault_args(fault_id: str, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """``None`` when valid, else (field path within the fault entry, message)."""
    known = catalogue()
    if fault_id not in known:
        return "id", f"unknown fault {fault_id!r}; the catalogue has: {', '.join(sorted(known))}"
    validator = jsonschema.Draft202012Validator(known[fault_id].args_schema)
    errors = sorted(validator.iter_errors(args), key=lambda e: -len(e.absolute_path))
    if not errors:
        return None
    err = errors[0]
    path = "args" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return path, err.message
