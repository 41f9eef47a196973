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
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    messages: list[str] = []
    for error in errors:
        message = _describe(error)
        line = f"{json_path(root, error.absolute_path)}: {message}"
        if line not in messages:
            messages.append(line)
    return messages


def _describe(error: jsonschema.ValidationError) -> str:
    """anyOf/oneOf messages quote the whole instance; say what was expected instead."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        expected = sorted({sub.message for sub in error.context})
        return "expected one of: " + "; ".join(expected)
    if error.validator == "type":
        return f"expected {error.validator_value}, got {type(error.instance).__name__} {error.instance!r}"[:300]
    return str(error.message)[:300]
