"""JSON Schema validation that reports *where* a document is wrong in the reader's terms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema


def json_path(root: str, path: Iterable[str | int]) -> str:
    """``root`` plus a jsonschema path, e.g. ``report.entities[2].root_cause``."""
    out = root
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f"{'' if not out or out.endswith(': ') else '.'}{part}"
    return out


def schema_errors(instance: Any, schema: Mapping[str, Any], root: str) -> list[str]:
    """Every violation as ``path: message``, deepest-first within a path, in document order."""
    return [f"{path}: {message}" for path, message in schema_problems(instance, schema, root)]


def schema_problems(instance: Any, schema: Mapping[str, Any], root: str) -> list[tuple[str, str]]:
    """Every violation as ``(path, message)``, without duplicates, in document order."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problems: list[tuple[str, str]] = []
    for error in errors:
        problem = (json_path(root, error.absolute_path), _describe(error))
        if problem not in problems:
            problems.append(problem)
    return problems


def _describe(error: jsonschema.ValidationError) -> str:
    """anyOf/oneOf messages quote the whole instance; say what was expected instead."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        expected = sorted({sub.message for sub in error.context})
        return "expected one of: " + "; ".join(expected)
    if error.validator == "type":
        return f"expected {error.validator_value}, got {type(error.instance).__name__} {_short_repr(error.instance)}"[:300]
    return str(error.message)[:300]


def _short_repr(value: Any) -> str:
    """``repr`` cut to 200 characters; never raises (huge integers cannot be printed)."""
    try:
        return repr(value)[:200]
    except ValueError:
        return f"<{type(value).__name__} too large to print>"
