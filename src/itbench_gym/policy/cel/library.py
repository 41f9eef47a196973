"""The CEL libraries Kubernetes adds to the standard ones (kubernetes.io "CEL in Kubernetes"): cel-go's
string extensions (version 2, ``format`` included), Kubernetes' list, regex and quantity libraries
(URL, IP and CIDR: :mod:`.network`).

Each function takes its receiver first (``"a,b".split(",")`` is ``split("a,b", ",")``), as cel-python
calls methods; a name shared by two libraries (``indexOf`` of strings and of lists) dispatches on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import re2
from celpy import celtypes

from itbench_gym.policy.kyverno.values import parse_quantity


class Quantity:
    """A Kubernetes resource quantity (``quantity("500m")``), compared and added exactly."""

    __slots__ = ("amount",)

    def __init__(self, amount: Decimal) -> None:
        self.amount = amount

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.amount == other.amount

    def __hash__(self) -> int:
        return hash(self.amount)

    def __repr__(self) -> str:
        return f"quantity({self.amount})"


def _quantity(text: Any) -> Quantity:
    amount = parse_quantity(str(text)) if isinstance(text, str) else None
    if amount is None:
        raise ValueError(f"invalid quantity {text!r}")
    return Quantity(amount)


def _is_quantity(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(isinstance(text, str) and parse_quantity(str(text)) is not None)


def _q(value: Any, name: str) -> Quantity:
    if isinstance(value, Quantity):
        return value
    if isinstance(value, int) and not isinstance(value, celtypes.BoolType):
        return Quantity(Decimal(int(value)))
    raise TypeError(f"no such overload: {name} applies to quantities")


def _compare(a: Any, b: Any) -> int:
    x, y = _q(a, "compareTo").amount, _q(b, "compareTo").amount
    return (x > y) - (x < y)


def _as_integer(q: Any) -> celtypes.IntType:
    amount = _q(q, "asInteger").amount
    if amount != amount.to_integral_value() or not -(2**63) <= amount < 2**63:
        raise ValueError(f"quantity {amount} is not an integer of 64 bits")
    return celtypes.IntType(int(amount))


def _index_of(receiver: Any, item: Any, start: Any = None) -> celtypes.IntType:
    if isinstance(receiver, str):
        return celtypes.IntType(receiver.find(str(item), int(start or 0)))
    if isinstance(receiver, list):
        return celtypes.IntType(next((i for i, v in enumerate(receiver) if v == item), -1))
    raise TypeError("no such overload: indexOf")


def _last_index_of(receiver: Any, item: Any) -> celtypes.IntType:
    if isinstance(receiver, str):
        return celtypes.IntType(receiver.rfind(str(item)))
    if isinstance(receiver, list):
        return celtypes.IntType(next((i for i in range(len(receiver) - 1, -1, -1) if receiver[i] == item), -1))
    raise TypeError("no such overload: lastIndexOf")


def _split(text: Any, sep: Any, limit: Any = None) -> celtypes.ListType:
    n = -1 if limit is None else int(limit)
    if n == 0:
        return celtypes.ListType([])
    parts = str(text).split(str(sep), n - 1) if n > 0 else str(text).split(str(sep))
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _replace(text: Any, old: Any, new: Any, limit: Any = None) -> celtypes.StringType:
    return celtypes.StringType(str(text).replace(str(old), str(new), -1 if limit is None else int(limit)))


def _substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    s = str(text)
    b, e = int(start), len(s) if end is None else int(end)
    if not 0 <= b <= e <= len(s):
        raise ValueError(f"substring({b}, {e}) out of range of a string of {len(s)} characters")
    return celtypes.StringType(s[b:e])


def _join(items: Any, sep: Any = "") -> celtypes.StringType:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise TypeError("no such overload: join applies to a list of strings")
    return celtypes.StringType(str(sep).join(items))


_VERB = re.compile(r"%(?:\.(\d+))?([sdfeEbxXo%])")


def _format(template: Any, args: Any) -> celtypes.StringType:
    """cel-go's ``"%s is %d".format([a, b])``: %s, %d, %f and %e (``.N`` digits; 6 by default), %b, %o,
    %x and %X (an integer, or a string's bytes in hex), %%."""
    if not isinstance(args, list):
        raise TypeError("no such overload: format takes a list of arguments")
    values = iter(args)

    def one(match: re.Match[str]) -> str:
        precision, verb = match.group(1), match.group(2)
        if verb == "%":
            return "%"
        try:
            value = next(values)
        except StopIteration:
            raise ValueError(f"index {len(args)} out of range: format has more verbs than arguments") from None
        if verb == "s":
            return _as_text(value)
        if verb in "fFeE":
            if isinstance(value, str | bool) or not isinstance(value, int | float):
                raise ValueError(f"error during formatting: fixed-point clause can only be used on doubles, was given {type(value).__name__}")
            return f"{float(value):.{int(precision or 6)}{verb}}"
        if isinstance(value, celtypes.BoolType) or not isinstance(value, int | str):
            raise ValueError(f"error during formatting: %{verb} is not allowed for {type(value).__name__}")
        if isinstance(value, str):
            if verb not in "xX":
                raise ValueError(f"error during formatting: %{verb} is not allowed for a string")
            hexed = value.encode().hex()
            return hexed.upper() if verb == "X" else hexed
        return format(int(value), {"d": "d", "b": "b", "o": "o", "x": "x", "X": "X"}[verb])

    out = _VERB.sub(one, str(template))
    if next(values, _END) is not _END:
        raise ValueError(f"too many arguments supplied to string.format: {len(args)}")
    return celtypes.StringType(out)


_END = object()


def _as_text(value: Any) -> str:
    if isinstance(value, celtypes.BoolType):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_as_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_as_text(k)}:{_as_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    match = re2.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _find_all(text: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    found = [celtypes.StringType(m.group(0)) for m in re2.finditer(str(pattern), str(text))]
    return celtypes.ListType(found if limit is None or int(limit) < 0 else found[: int(limit)])


def _sum(items: Any) -> Any:
    total: Any = celtypes.IntType(0)
    for i, item in enumerate(items):
        total = item if i == 0 else total + item
    return total


def _extreme(pick: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
    def run(items: Any) -> Any:
        if not items:
            raise ValueError(f"{name}() of an empty list")
        return pick(items)
    return run


def functions() -> dict[str, Callable[..., Any]]:
    """The libraries' functions and methods, by the name CEL calls them."""
    def text(fn: Callable[[str], str]) -> Callable[[Any], celtypes.StringType]:
        return lambda s: celtypes.StringType(fn(str(s)))

    return {
        # cel-go ext.Strings (Kubernetes enables version 2)
        "charAt": lambda s, i: celtypes.StringType(str(s)[int(i)] if int(i) < len(str(s)) else ""),
        "indexOf": _index_of,
        "lastIndexOf": _last_index_of,
        "lowerAscii": text(lambda s: "".join(c.lower() if c.isascii() else c for c in s)),
        "upperAscii": text(lambda s: "".join(c.upper() if c.isascii() else c for c in s)),
        "replace": _replace,
        "split": _split,
        "substring": _substring,
        "trim": text(str.strip),
        "join": _join,
        "format": _format,
        # Kubernetes' list library
        "isSorted": lambda items: celtypes.BoolType(all(a <= b for a, b in zip(items, items[1:], strict=False))),
        "sum": _sum,
        "max": _extreme(max, "max"),
        # Kubernetes' regex library
        "find": _find,
        "findAll": _find_all,
        # Kubernetes' quantity library
        "quantity": _quantity,
        "isQuantity": _is_quantity,
        "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
        "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
        "isLessThan": lambda a, b: celtypes.BoolType(_compare(a, b) < 0),
        "add": lambda a, b: Quantity(_q(a, "add").amount + _q(b, "add").amount),
        "sub": lambda a, b: Quantity(_q(a, "sub").amount - _q(b, "sub").amount),
        "asInteger": _as_integer,
        "isInteger": lambda q: celtypes.BoolType(_q(q, "isInteger").amount == _q(q, "isInteger").amount.to_integral_value()),
        "asApproximateFloat": lambda q: celtypes.DoubleType(float(_q(q, "asApproximateFloat").amount)),
        "sign": lambda q: celtypes.IntType((_q(q, "sign").amount > 0) - (_q(q, "sign").amount < 0)),
        "dyn": lambda v: v,
    }
