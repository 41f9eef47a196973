"""CEL's optional values, as Kubernetes enables them (cel-go's ``OptionalTypes``).

``x.?f`` and ``x[?k]`` give ``optional.none()`` where ``x.f`` or ``x[k]`` would be a missing key; a
selection or index applied to an optional continues the chain (``a.?b.c`` is none when ``b`` is
absent, or when ``c`` is); ``orValue``, ``hasValue``, ``value`` and ``or`` read them.
"""

from __future__ import annotations

from typing import Any

from celpy import celtypes


class Optional:
    """``optional.of(value)``, or ``optional.none()`` when ``present`` is False."""

    __slots__ = ("present", "value")

    def __init__(self, present: bool, value: Any = None) -> None:
        self.present = present
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Optional) and (self.present, self.value) == (other.present, other.value)

    def __hash__(self) -> int:
        return hash((self.present, self.value)) if self.present else 0

    def __repr__(self) -> str:
        return f"optional.of({self.value!r})" if self.present else "optional.none()"


NONE = Optional(False)


class OptionalNamespace:
    """What the name ``optional`` is bound to, so that ``optional.of(x)`` is a method call on it."""

    def __repr__(self) -> str:
        return "optional"


OPTIONAL = OptionalNamespace()


def select(member: Any, key: Any) -> Optional:
    """``member.?key`` / ``member[?key]``: the entry if ``member`` (a map, a list or an optional) has it."""
    if isinstance(member, Optional):
        if not member.present:
            return NONE
        member = member.value
    if member is None:  # a null field is an absent one (Kubernetes objects omit empty fields)
        return NONE
    if isinstance(member, dict):
        return Optional(True, member[key]) if key in member else NONE
    if isinstance(member, list) and isinstance(key, int) and not isinstance(key, bool | celtypes.BoolType):
        return Optional(True, member[key]) if 0 <= key < len(member) else NONE
    raise TypeError(f"no such overload: optional selection on {type(member).__name__}")


def functions() -> dict[str, Any]:
    """The optional library's functions and methods, by name."""

    def of(namespace: Any, value: Any = None) -> Optional:
        _namespace(namespace, "of")
        return Optional(True, value)

    def none(namespace: Any) -> Optional:
        _namespace(namespace, "none")
        return NONE

    def of_non_zero_value(namespace: Any, value: Any) -> Optional:
        _namespace(namespace, "ofNonZeroValue")
        return Optional(True, value) if value not in (None, 0, 0.0, "", b"", False) and value != [] and value != {} else NONE

    def has_value(opt: Any) -> celtypes.BoolType:
        return celtypes.BoolType(_optional(opt, "hasValue").present)

    def value(opt: Any) -> Any:
        opt = _optional(opt, "value")
        if not opt.present:
            raise ValueError("optional.none() dereference")
        return opt.value

    def or_value(opt: Any, default: Any) -> Any:
        opt = _optional(opt, "orValue")
        return opt.value if opt.present else default

    def or_(opt: Any, other: Any) -> Any:
        return opt if _optional(opt, "or").present else _optional(other, "or")

    return {"of": of, "none": none, "ofNonZeroValue": of_non_zero_value, "hasValue": has_value,
            "value": value, "orValue": or_value, "or": or_}


def _namespace(namespace: Any, name: str) -> None:
    if namespace is not OPTIONAL:
        raise TypeError(f"no such overload: {name} is optional.{name}()")


def _optional(opt: Any, name: str) -> Optional:
    """``opt``, or a value read without ``.?`` taken as present (null as absent): Kubernetes accepts
    ``c.resources.requests.orValue({})`` and the kyverno/policies corpus relies on it."""
    if isinstance(opt, Optional):
        return opt
    return NONE if opt is None else Optional(True, opt)
