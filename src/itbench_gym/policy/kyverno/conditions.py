"""Kyverno condition operators for `preconditions` and `validate.deny.conditions`.

Conditions are `{key, operator, value}` after variable substitution; blocks are `any`/`all` lists (a bare
list means `all`), and a block holds when every `all` entry and at least one `any` entry (if given) hold.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .jmes import semver_compare
from .values import as_number, compare, parse_duration, parse_quantity, scalar_to_string, wildcard_match
from .variables import Context, substitute

_RANGE = re.compile(r"^(-?[0-9.]+[A-Za-z]*)(!?-)(-?[0-9.]+[A-Za-z]*)$")


class ConditionError(Exception):
    """An operator Kyverno does not know, or operands it cannot compare."""


def evaluate_block(block: Any, ctx: Context, *, lenient: bool) -> bool:
    """Whether an any/all condition block holds; `lenient` is the preconditions' empty-string rule for misses."""
    if block is None:
        return True
    if isinstance(block, list):
        return all(_one(c, ctx, lenient) for c in block)
    if not isinstance(block, dict):
        raise ConditionError(f"conditions must be a list or an any/all map, got {type(block).__name__}")
    any_list = block.get("any") or []
    all_list = block.get("all") or []
    return all(_one(c, ctx, lenient) for c in all_list) and (not any_list or any(_one(c, ctx, lenient) for c in any_list))


def _one(condition: dict[str, Any], ctx: Context, lenient: bool) -> bool:
    key = substitute(condition.get("key"), ctx, lenient=lenient)
    value = substitute(condition.get("value"), ctx, lenient=lenient)
    return check(key, str(condition.get("operator", "")), value)


def check(key: Any, operator: str, value: Any) -> bool:
    """Apply one operator (names as in Kyverno's API, including deprecated aliases)."""
    op = operator.strip()
    if op in ("Equals", "Equal"):
        return _equal(key, value)
    if op in ("NotEquals", "NotEqual"):
        return _comparable(key, value) and not _equal(key, value)
    if op in _SET_OPERATORS:
        return _set_operator(op, key, value)
    if op in ("GreaterThan", "GreaterThanOrEquals", "LessThan", "LessThanOrEquals"):
        return _ordered(op, _order(key, value))
    if op.startswith("Duration"):
        dk, dv = _seconds(key), _seconds(value)
        if dk is None or dv is None:
            raise ConditionError(f"{op} needs durations, got {key!r} and {value!r}")
        return _ordered(op.removeprefix("Duration"), (dk > dv) - (dk < dv))
    raise ConditionError(f"unknown operator {operator!r}")


def _ordered(op: str, c: int | None) -> bool:
    if c is None:
        return False
    return {"GreaterThan": c > 0, "GreaterThanOrEquals": c >= 0, "LessThan": c < 0, "LessThanOrEquals": c <= 0}[op]


def _order(key: Any, value: Any) -> int | None:
    """Durations first (a bare number then counts as seconds), then quantities, numbers, semantic versions."""
    durations = _durations(key, value)
    if durations is not None:
        return (durations[0] > durations[1]) - (durations[0] < durations[1])
    c = compare(key, value)
    if c is not None:
        return c
    if isinstance(key, str) and isinstance(value, str):
        if semver_compare(key, f">{value}"):
            return 1
        if semver_compare(key, f"<{value}"):
            return -1
        if semver_compare(key, value):
            return 0
    return None


def _seconds(value: Any) -> float | None:
    number = as_number(value)
    return number if number is not None else parse_duration(value)


def _durations(key: Any, value: Any) -> tuple[float, float] | None:
    """Both sides as seconds when at least one is a duration string and the other a duration or number."""
    dk = parse_duration(key) if isinstance(key, str) and key != "0" else None
    dv = parse_duration(value) if isinstance(value, str) and value != "0" else None
    if dk is None and dv is None:
        return None
    if dk is None:
        dk = float(key) if isinstance(key, int | float) and not isinstance(key, bool) else None
    if dv is None:
        dv = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return (dk, dv) if dk is not None and dv is not None else None


def _comparable(key: Any, value: Any) -> bool:
    """Kyverno answers False to both Equals and NotEquals when the operand types do not fit together."""
    if key is None:
        return False
    if isinstance(key, bool):
        return isinstance(value, bool)
    if isinstance(key, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool) or as_number(value) is not None
    if isinstance(key, str):
        if _durations(key, value) is not None:
            return True
        if parse_quantity(key) is not None and isinstance(value, str):
            return parse_quantity(value) is not None
        return isinstance(value, str)
    return isinstance(value, type(key))


def _equal(key: Any, value: Any) -> bool:
    if not _comparable(key, value):
        return False
    if isinstance(key, bool):
        return bool(key == value)
    if isinstance(key, int | float):
        return as_number(value) == float(key)
    if isinstance(key, str):
        durations = _durations(key, value)
        if durations is not None:
            return durations[0] == durations[1]
        qk, qv = parse_quantity(key), parse_quantity(value)
        if qk is not None and qv is not None:
            return qk == qv
        return wildcard_match(str(value), key)
    return bool(key == value)


_SET_OPERATORS = frozenset({"In", "NotIn", "AnyIn", "AllIn", "AnyNotIn", "AllNotIn"})


def _set_operator(op: str, key: Any, value: Any) -> bool:
    """The In family: scalar keys match with wildcards both ways; list keys use set semantics per operator."""
    if isinstance(key, list):
        keys = [scalar_to_string(k) or "" for k in key]
        values = _value_strings(value, keys, op)
        if values is None:
            return False
        if isinstance(values, bool):
            return values
        if op == "In":
            return set(keys) <= set(values)
        if op == "NotIn":
            return not set(keys) <= set(values)
        found = [any(wildcard_match(k, v) or wildcard_match(v, k) for v in values) for k in keys]
        return {"AnyIn": any(found), "AllIn": all(found), "AnyNotIn": not all(found), "AllNotIn": not any(found)}[op]
    text = scalar_to_string(key)
    if text is None or isinstance(key, dict):
        return False
    exists = _scalar_in(text, value)
    if exists is None:
        return False
    return exists if op in ("In", "AnyIn", "AllIn") else not exists


def _scalar_in(key: str, value: Any) -> bool | None:
    """Whether one key is among the values (None: values of a type Kyverno cannot search)."""
    if isinstance(value, list):
        return any(wildcard_match(s, key) or wildcard_match(key, s) for s in (scalar_to_string(v) or "" for v in value))
    if not isinstance(value, str):
        return None
    if wildcard_match(value, key):
        return True
    m = _RANGE.match(value)
    if m:
        return _in_range(key, m)
    candidates = _json_list(value)
    return key in candidates if candidates is not None else None


def _value_strings(value: Any, keys: list[str], op: str) -> list[str] | bool | None:
    """Values for a list key as strings; a bool short-cuts (range operands), None means unusable values."""
    if isinstance(value, list):
        return [scalar_to_string(v) or "" for v in value]
    if isinstance(value, int | float) and op not in ("In", "NotIn"):
        return [scalar_to_string(value) or ""]
    if not isinstance(value, str):
        return None
    if len(keys) == 1 and keys[0] == value:
        return op not in ("AnyNotIn", "AllNotIn")
    m = _RANGE.match(value)
    if m and op not in ("In", "NotIn"):
        inside = [_in_range(k, m) for k in keys]
        return {"AnyIn": any(inside), "AllIn": all(inside), "AnyNotIn": not all(inside), "AllNotIn": not any(inside)}[op]
    return _json_list(value)


def _in_range(key: str, m: re.Match[str]) -> bool:
    lo, hi = compare(key, m.group(1)), compare(key, m.group(3))
    inside = lo is not None and hi is not None and lo >= 0 and hi <= 0
    return inside if m.group(2) == "-" else (lo is not None and hi is not None and not inside)


def _json_list(value: str) -> list[str] | None:
    """A JSON array of strings, or the string itself; None for JSON that is not a string array."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    if isinstance(parsed, list) and all(isinstance(v, str) for v in parsed):
        return parsed
    return None
