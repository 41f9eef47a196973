"""Kyverno `validate.pattern` overlay matching with anchors, wildcards and string operators.

A pattern is an overlay of the resource: maps must contain the pattern's keys, arrays of maps apply the
element pattern to every item, and leaves compare with operators. Anchors change that: `(k)` and `<(k)`
turn a failed check into "rule does not apply" (skip), `=(k)` checks only when present, `X(k)` forbids a
key and `^(k)` needs one matching list item. `+(k)` belongs to mutation and is ignored here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .values import has_wildcard, parse_duration, parse_quantity, scalar_to_string, wildcard_match

# Anchors evaluated in the first phase of a map (global anchors are ordered with the plain keys).
_PHASE_ONE = frozenset({"(", "=(", "X(", "^("})
_ANCHOR = re.compile(r"^(\(|<\(|=\(|X\(|\^\(|\+\()(.+)\)$")
_RANGE = re.compile(r"^([-+]?\d+(?:\.\d+)?[A-Za-z]*)(!?-)([-+]?\d+(?:\.\d+)?[A-Za-z]*)$")


@dataclass(frozen=True)
class PatternFailure:
    """Why a resource does not match; `skip` when a conditional or global anchor did not hold."""

    path: str
    message: str
    skip: bool = False


def split_anchor(key: str) -> tuple[str, str]:
    """(`(`, `<(`, `=(`, `X(`, `^(`, `+(` or "", bare key)."""
    m = _ANCHOR.match(key)
    return (m.group(1), m.group(2)) if m else ("", key)


def match_pattern(resource: Any, pattern: Any) -> PatternFailure | None:
    """None when `resource` satisfies `pattern`; otherwise the first failure (possibly a skip)."""
    return _element(resource, pattern, "/")


def _element(resource: Any, pattern: Any, path: str) -> PatternFailure | None:
    if isinstance(pattern, dict):
        if not isinstance(resource, dict):
            return PatternFailure(path, f"expected a map at {path}, found {type(resource).__name__}")
        return _map(resource, pattern, path)
    if isinstance(pattern, list):
        if not isinstance(resource, list):
            return PatternFailure(path, f"expected a list at {path}, found {type(resource).__name__}")
        return _array(resource, pattern, path)
    if isinstance(resource, list):
        bad = next((i for i, item in enumerate(resource) if not leaf_matches(item, pattern)), None)
        return None if bad is None else PatternFailure(path, f"item {bad} does not match {pattern!r} at {path}")
    if leaf_matches(resource, pattern):
        return None
    return PatternFailure(path, f"value {resource!r} does not match {pattern!r} at {path}")


def _expand_wildcard_keys(resource: dict[str, Any], pattern: dict[str, Any]) -> dict[str, Any]:
    """A pattern key with `*`/`?` stands for every resource key it matches (kept as-is when none does)."""
    out: dict[str, Any] = {}
    for key, value in pattern.items():
        anchor, bare = split_anchor(key)
        matches = [k for k in resource if wildcard_match(bare, k)] if has_wildcard(bare) else []
        for k in matches or [bare]:
            out[f"{anchor}{k})" if anchor else k] = value
    return out


def _has_anchor(value: Any) -> bool:
    if isinstance(value, dict):
        return any(split_anchor(k)[0] in _PHASE_ONE or _has_anchor(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_anchor(v) for v in value)
    return False


def _map(resource: dict[str, Any], pattern: dict[str, Any], path: str) -> PatternFailure | None:
    """Two phases, as Kyverno: anchored keys first (sorted), then the rest.

    A failed conditional anchor at this level makes the whole map a skip, even if a sibling anchor
    failed outright; plain keys holding nested anchors (and global anchors) are checked before others.
    """
    pattern = _expand_wildcard_keys(resource, pattern)
    direct_skip: PatternFailure | None = None
    nested_skip: PatternFailure | None = None
    applied = 0
    for key in sorted(k for k in pattern if split_anchor(k)[0] in _PHASE_ONE):
        failure = _key(resource, key, pattern[key], path)
        if failure is None:
            applied += 1
        elif failure.skip:
            if split_anchor(key)[0] == "(":
                direct_skip = direct_skip or failure
            else:
                nested_skip = nested_skip or failure
        elif direct_skip is None:
            return failure
    if direct_skip is not None or (nested_skip is not None and applied == 0):
        return direct_skip or nested_skip
    front: list[str] = []
    back: list[str] = []
    for key in sorted(k for k in pattern if split_anchor(k)[0] not in _PHASE_ONE):
        if split_anchor(key)[0] == "<(" or _has_anchor(pattern[key]):
            front.insert(0, key)
        else:
            back.append(key)
    for key in front + back:
        failure = _key(resource, key, pattern[key], path)
        if failure is not None:
            return failure
    return None


def _key(resource: dict[str, Any], key: str, pattern: Any, path: str) -> PatternFailure | None:
    anchor, name = split_anchor(key)
    here = f"{path}{name}/"
    present = name in resource
    if anchor == "(":
        if not present:
            return PatternFailure(here, f"conditional anchor key {name!r} not present", skip=True)
        inner = _element(resource[name], pattern, here)
        return None if inner is None else PatternFailure(inner.path, inner.message, skip=True)
    if anchor == "<(":
        inner = _element(resource[name], pattern, here) if present else None
        return None if inner is None else PatternFailure(inner.path, inner.message, skip=True)
    if anchor == "=(":
        return _element(resource[name], pattern, here) if present else None
    if anchor == "X(":
        return PatternFailure(here, f"field {name!r} is not allowed") if present else None
    if anchor == "^(":
        return _existence(resource.get(name), pattern, here) if present else None
    if anchor == "+(":
        return None
    if pattern == "*":
        return None if resource.get(name) is not None else PatternFailure(here, f"field {name!r} not found")
    return _element(resource.get(name), pattern, here)


def _existence(resource: Any, pattern: Any, path: str) -> PatternFailure | None:
    """`^(key)`: for each pattern item, at least one list item must match it."""
    if not isinstance(resource, list) or not isinstance(pattern, list):
        return PatternFailure(path, "existence anchor needs a list in both pattern and resource")
    for item in pattern:
        if not any(_element(r, item, f"{path}{i}/") is None for i, r in enumerate(resource)):
            return PatternFailure(path, f"existence anchor validation failed at path {path}")
    return None


def _array(resource: list[Any], pattern: list[Any], path: str) -> PatternFailure | None:
    if not pattern:
        return PatternFailure(path, "pattern array is empty")
    if isinstance(pattern[0], dict):
        return _array_of_maps(resource, pattern[0], path)
    if not isinstance(pattern[0], list):
        return _element(resource, pattern[0], path)
    if len(resource) < len(pattern):
        return PatternFailure(path, f"array length mismatch: resource has {len(resource)}, pattern {len(pattern)}")
    return _items(list(zip(resource, pattern, strict=False)), path)


def _array_of_maps(resource: list[Any], pattern: dict[str, Any], path: str) -> PatternFailure | None:
    return _items([(item, pattern) for item in resource], path)


def _items(pairs: list[tuple[Any, Any]], path: str) -> PatternFailure | None:
    """Items whose conditional or global anchors do not hold are skipped; if every item skips, so does the array."""
    applied = 0
    skipped: PatternFailure | None = None
    for i, (item, item_pattern) in enumerate(pairs):
        failure = _element(item, item_pattern, f"{path}{i}/")
        if failure is None:
            applied += 1
        elif failure.skip:
            skipped = skipped or failure
        else:
            return failure
    if applied == 0 and skipped is not None:
        return skipped
    return None


def leaf_matches(value: Any, pattern: Any) -> bool:
    """Compare a resource leaf with a scalar pattern the way Kyverno does for each pattern type."""
    if isinstance(pattern, bool):
        return isinstance(value, bool) and value == pattern
    if isinstance(pattern, int | float):
        if isinstance(value, bool):
            return False
        if isinstance(value, int | float):
            return float(value) == float(pattern)
        if isinstance(value, str):
            try:
                return float(value) == float(pattern)
            except ValueError:
                return False
        return False
    if pattern is None:
        return value in (None, "", 0, False) and not isinstance(value, list | dict)
    if isinstance(pattern, str):
        return _string_pattern(value, pattern)
    return bool(value == pattern)


def _string_pattern(value: Any, pattern: str) -> bool:
    """`a | b` alternatives of `x & y` conjunctions of single operator conditions."""
    if value == pattern:
        return True
    return any(all(_condition(value, part.strip()) for part in alt.split("&")) for alt in pattern.split("|"))


def _condition(value: Any, cond: str) -> bool:
    """One operator condition: ranges become two comparisons, the rest compare as duration, quantity or string."""
    m = _RANGE.match(cond)
    if m and m.group(2) == "-":
        return _condition(value, f">= {m.group(1)}") and _condition(value, f"<= {m.group(3)}")
    if m:
        return _condition(value, f"< {m.group(1)}") or _condition(value, f"> {m.group(3)}")
    op = next((o for o in (">=", "<=", ">", "<", "!") if len(cond) >= 2 and cond.startswith(o)), "")
    operand = cond[len(op) :].strip()
    text = (
        "0" if value is None else scalar_to_string(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else None
    )
    if text is not None:
        for parse in (parse_duration, parse_quantity):
            want, got = parse(operand), parse(text)
            if want is not None and got is not None:
                c = (got > want) - (got < want)
                return {"": c == 0, "!": c != 0, ">": c > 0, "<": c < 0, ">=": c >= 0, "<=": c <= 0}[op]
    if op not in ("", "!") or value is None:
        return False
    rendered = scalar_to_string(value)
    return rendered is not None and wildcard_match(operand, rendered) != (op == "!")
