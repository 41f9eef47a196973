"""A custom resource checked against its CRD's ``openAPIV3Schema``, as the API server does on every write.

The apiextensions API server validates a custom object's fields (everything but ``apiVersion``, ``kind``
and ``metadata``, which it checks itself, but the name and generateName a schema may restrict) against the structural schema of the version it is written
in and refuses the write with ``422 Invalid``, one cause per broken field, worded as kube-openapi words
them: ``spec.port: Invalid value: "string": spec.port in body must be of type integer: "string"``,
``spec.target: Unsupported value: "Foo": supported values: "Request", "Response"``,
``spec.port: Required value``. A controller's writes go through the same check, so an experiment a
Schedule embeds with a wrong type is never created.

What is checked: ``type`` (``x-kubernetes-int-or-string`` too; a null passes, as the API server
prunes one the schema does not make ``nullable``), ``enum``, ``required``, ``minimum``/``maximum`` (and their exclusive forms),
``minLength``/``maxLength``/``pattern``, ``minItems``/``maxItems``, ``properties``,
``additionalProperties`` and ``items``, ``allOf``. Before the check, :func:`apply_defaults` fills the
schema's ``default`` values, as the apiextensions server defaults every object it decodes (the pruning of
unknown fields is the API server's, ``openapi.OpenAPIBuilder.prune``). Not modelled:
``x-kubernetes-validations`` (CEL rules) and the value-set keywords ``anyOf``/``oneOf``/``not``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

#: (reason, field, message), as ``errors.invalid`` takes them
Cause = tuple[str, str, str]

#: the object's own fields the API server validates itself, not by the CRD's schema
_META_FIELDS = frozenset({"apiVersion", "kind", "metadata"})


def schema_causes(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> list[Cause]:
    """Every field of ``obj`` that breaks ``schema`` (a CRD version's ``openAPIV3Schema``); of the
    metadata, the name and generateName, the only fields a CRD's schema may restrict (Gatekeeper's
    constraint names: at most 63 characters)."""
    causes: list[Cause] = []
    _object(schema, {k: v for k, v in obj.items() if k not in _META_FIELDS}, "", causes)
    meta_schema = ((schema.get("properties") or {}).get("metadata") or {}).get("properties") or {}
    meta = obj.get("metadata") or {}
    for name in ("name", "generateName"):
        if isinstance(meta_schema.get(name), Mapping) and isinstance(meta, Mapping) and name in meta:
            _check(meta_schema[name], meta[name], f"metadata.{name}", causes)
    return causes


def apply_defaults(schema: Mapping[str, Any], obj: dict[str, Any]) -> None:
    """Fill, in place, every field the schema gives a ``default`` that the object leaves out (or sets to
    a null the schema does not make ``nullable``), inside objects and list items that are there."""
    _default(schema, obj)


def _default(schema: Mapping[str, Any], value: Any) -> None:
    for part in schema.get("allOf") or []:
        if isinstance(part, Mapping):
            _default(part, value)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if not isinstance(sub, Mapping):
                continue
            if "default" in sub and (name not in value or (value[name] is None and not sub.get("nullable"))):
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _default(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name, sub_value in value.items():
                if name not in props:
                    _default(extra, sub_value)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _default(schema["items"], item)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, Mapping) else type(value).__name__


def _fits(expected: str, actual: str) -> bool:
    return expected == actual or (expected == "number" and actual == "integer")


def _shown(value: Any) -> str:
    """A value in a message: strings quoted, numbers and booleans as JSON."""
    return json.dumps(value) if isinstance(value, (str, bool, int, float)) or value is None else json.dumps(str(value))


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _check(schema: Mapping[str, Any], value: Any, path: str, causes: list[Cause]) -> None:
    for part in schema.get("allOf") or []:
        if isinstance(part, Mapping):
            _check(part, value, path, causes)
    if value is None:  # the API server prunes a null it does not allow (and keeps one it does)
        return
    actual = _json_type(value)
    if schema.get("x-kubernetes-int-or-string"):
        if actual not in ("integer", "string"):
            causes.append(("FieldValueTypeInvalid", path,
                           f'Invalid value: "{actual}": {path} in body must be of type integer,string: "{actual}"'))
        return
    expected = schema.get("type")
    if isinstance(expected, str) and not _fits(expected, actual):
        causes.append(("FieldValueTypeInvalid", path, f'Invalid value: "{actual}": {path} in body must be of type {expected}: "{actual}"'))
        return
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        causes.append(("FieldValueNotSupported", path,
                       f"Unsupported value: {_shown(value)}: supported values: {', '.join(_shown(e) for e in enum)}"))
    if actual in ("integer", "number"):
        _bounds(schema, value, path, causes)
    elif actual == "string":
        _string(schema, value, path, causes)
    elif actual == "array":
        _array(schema, value, path, causes)
    elif actual == "object":
        _object(schema, value, path, causes)


def _bounds(schema: Mapping[str, Any], value: float, path: str, causes: list[Cause]) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(low, (int, float)) and (value <= low if schema.get("exclusiveMinimum") else value < low):
        relation = "greater than" if schema.get("exclusiveMinimum") else "greater than or equal to"
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_number(value)}: {path} in body should be {relation} {_number(low)}"))
    if isinstance(high, (int, float)) and (value >= high if schema.get("exclusiveMaximum") else value > high):
        relation = "less than" if schema.get("exclusiveMaximum") else "less than or equal to"
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_number(value)}: {path} in body should be {relation} {_number(high)}"))


def _string(schema: Mapping[str, Any], value: str, path: str, causes: list[Cause]) -> None:
    shortest, longest, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    if isinstance(shortest, int) and len(value) < shortest:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {path} in body should be at least {shortest} chars long"))
    if isinstance(longest, int) and len(value) > longest:
        causes.append(("FieldValueTooLong", path, f"Too long: may not be longer than {longest}"))
    if isinstance(pattern, str) and not _matches(pattern, value):
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {path} in body should match '{pattern}'"))


def _matches(pattern: str, value: str) -> bool:
    """ECMA-262 ``pattern`` (unanchored search); a pattern Python cannot compile does not refuse anything."""
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return True


def _array(schema: Mapping[str, Any], value: list[Any], path: str, causes: list[Cause]) -> None:
    fewest, most = schema.get("minItems"), schema.get("maxItems")
    if isinstance(fewest, int) and len(value) < fewest:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {len(value)}: {path} in body should have at least {fewest} items"))
    if isinstance(most, int) and len(value) > most:
        causes.append(("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {most} items"))
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            _check(items, item, f"{path}[{i}]", causes)


def _object(schema: Mapping[str, Any], value: Mapping[str, Any], path: str, causes: list[Cause]) -> None:
    """An object's fields (``path`` "" for the custom object itself, whose own fields the API server checks)."""
    props = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if value.get(name) is None and not (not path and name in _META_FIELDS):
            causes.append(("FieldValueRequired", f"{path}.{name}" if path else name, "Required value"))
    extra = schema.get("additionalProperties")
    for name, sub_value in value.items():
        sub = props.get(name)
        if isinstance(sub, Mapping):
            _check(sub, sub_value, f"{path}.{name}" if path else name, causes)
        elif isinstance(extra, Mapping):
            _check(extra, sub_value, f"{path}[{name}]", causes)
