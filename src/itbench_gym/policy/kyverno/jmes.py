"""JMESPath with Kyverno's extra functions (the subset policies use in practice).

Kyverno extends JMESPath with string, regex, arithmetic (numbers, quantities, durations), time, semver
and data-decoding functions; policies call them inside `{{ }}` and `list:` expressions.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache
from typing import Any

import jmespath
import yaml
from jmespath import functions, visitor
from jmespath.exceptions import JMESPathError

from .images import parse_image
from .values import parse_duration, parse_quantity, wildcard_match

_GO_LAYOUT = [
    ("2006", "%Y"),
    ("01", "%m"),
    ("02", "%d"),
    ("15", "%H"),
    ("04", "%M"),
    ("05", "%S"),
    ("Z07:00", "%z"),
    ("-0700", "%z"),
    ("MST", "%Z"),
    ("Jan", "%b"),
    ("Mon", "%a"),
]


def format_go_duration(seconds: float) -> str:
    """Render seconds like Go's time.Duration.String (`1h2m3.5s`)."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        ms = seconds * 1000
        return f"{sign}{ms:g}ms" if ms >= 1 else f"{sign}{seconds * 1e6:g}µs"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = sign
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    return out + f"{round(secs, 9):g}s"


def parse_time(layout: str, text: str) -> datetime:
    """Parse `text` with a Go reference layout (empty layout: RFC 3339)."""
    if not layout or layout == "2006-01-02T15:04:05Z07:00":
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    fmt = layout
    for go, py in _GO_LAYOUT:
        fmt = fmt.replace(go, py)
    parsed = datetime.strptime(text, fmt)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _format_number(value: Decimal) -> Any:
    return int(value) if value == value.to_integral_value() else float(value)


def _arith(a: Any, b: Any, op: str) -> Any:
    """Numbers give numbers, durations give durations, quantities give quantities (ratios give numbers)."""
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) and not isinstance(b, bool):
        res = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None, "%": a % b if b else None}[op]
        if res is None:
            raise JMESPathError("division by zero")
        return res
    da, db = parse_duration(a), parse_duration(b)
    if da is not None or db is not None:
        x = da if da is not None else float(a)
        y = db if db is not None else float(b)
        if op == "/" and da is not None and db is not None:
            return x / y
        res_f = {"+": x + y, "-": x - y, "*": x * y, "/": x / y, "%": x % y}[op]
        return format_go_duration(res_f)
    qa, qb = parse_quantity(a), parse_quantity(b)
    if qa is None or qb is None:
        raise JMESPathError(f"invalid operands {a!r}, {b!r}")
    if op in ("/", "%") and qb == 0:
        raise JMESPathError("division by zero")
    res_d = {"+": qa + qb, "-": qa - qb, "*": qa * qb, "/": qa / qb, "%": qa % qb}[op]
    if op == "/" and isinstance(a, str) and isinstance(b, str):
        return _format_number(res_d)
    if isinstance(a, str) or isinstance(b, str):
        return str(_format_number(res_d))
    return _format_number(res_d)


def _semver(text: str) -> tuple[int, int, int] | None:
    m = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)) if m else None


def semver_compare(version: str, constraint: str) -> bool:
    """Blang-style ranges: `>=1.2.0 <2.0.0`, alternatives with `||`, `!1.2.3`, bare `1.2.3` (equal)."""
    have = _semver(version)
    if have is None:
        return False
    for alternative in constraint.split("||"):
        ok = True
        for part in alternative.split():
            m = re.match(r"^(>=|<=|!=|==|=|>|<|!)?(.+)$", part)
            want = _semver(m.group(2)) if m else None
            if m is None or want is None:
                return False
            op = m.group(1) or "="
            ok = (
                ok
                and {
                    ">=": have >= want,
                    "<=": have <= want,
                    ">": have > want,
                    "<": have < want,
                    "!=": have != want,
                    "!": have != want,
                    "=": have == want,
                    "==": have == want,
                }[op]
            )
        if ok:
            return True
    return False


def _go_replacement(repl: str) -> str:
    return re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", repl.replace("\\", "\\\\"))


class KyvernoFunctions(functions.Functions):
    """Kyverno's custom JMESPath functions."""

    @functions.signature({"types": ["string"]})
    def _func_to_upper(self, s: str) -> str:
        return s.upper()

    @functions.signature({"types": ["string"]})
    def _func_to_lower(self, s: str) -> str:
        return s.lower()

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_trim(self, s: str, cutset: str) -> str:
        return s.strip(cutset)

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_trim_prefix(self, s: str, prefix: str) -> str:
        return s.removeprefix(prefix)

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_split(self, s: str, sep: str) -> list[str]:
        return s.split(sep) if sep else list(s)

    @functions.signature({"types": ["string"]}, {"types": ["string"]}, {"types": ["string"]}, {"types": ["number"]})
    def _func_replace(self, s: str, old: str, new: str, n: float) -> str:
        return s.replace(old, new, int(n))

    @functions.signature({"types": ["string"]}, {"types": ["string"]}, {"types": ["string"]})
    def _func_replace_all(self, s: str, old: str, new: str) -> str:
        return s.replace(old, new)

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_equal_fold(self, a: str, b: str) -> bool:
        return a.casefold() == b.casefold()

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_compare(self, a: str, b: str) -> int:
        return (a > b) - (a < b)

    @functions.signature({"types": ["string"]}, {"types": ["string", "number"]})
    def _func_regex_match(self, pattern: str, s: Any) -> bool:
        return re.search(pattern, s if isinstance(s, str) else json.dumps(s)) is not None

    @functions.signature({"types": ["string"]}, {"types": ["string", "number"]}, {"types": ["string", "number"]})
    def _func_regex_replace_all(self, pattern: str, src: Any, repl: Any) -> str:
        return re.sub(pattern, _go_replacement(str(repl)), str(src))

    @functions.signature({"types": ["string"]}, {"types": ["string", "number"]}, {"types": ["string", "number"]})
    def _func_regex_replace_all_literal(self, pattern: str, src: Any, repl: Any) -> str:
        return re.sub(pattern, lambda _m: str(repl), str(src))

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_pattern_match(self, pattern: str, s: str) -> bool:
        return wildcard_match(pattern, s)

    @functions.signature({"types": ["object"]}, {"types": ["object"]})
    def _func_label_match(self, selector: dict[str, Any], labels: dict[str, Any]) -> bool:
        return all(k in labels and labels[k] == v for k, v in selector.items())

    @functions.signature({"types": []}, {"types": []})
    def _func_add(self, a: Any, b: Any) -> Any:
        return _arith(a, b, "+")

    @functions.signature({"types": []}, {"types": []})
    def _func_subtract(self, a: Any, b: Any) -> Any:
        return _arith(a, b, "-")

    @functions.signature({"types": []}, {"types": []})
    def _func_multiply(self, a: Any, b: Any) -> Any:
        return _arith(a, b, "*")

    @functions.signature({"types": []}, {"types": []})
    def _func_divide(self, a: Any, b: Any) -> Any:
        return _arith(a, b, "/")

    @functions.signature({"types": []}, {"types": []})
    def _func_modulo(self, a: Any, b: Any) -> Any:
        return _arith(a, b, "%")

    @functions.signature({"types": ["array"]})
    def _func_sum(self, items: list[Any]) -> Any:
        if not items:
            raise JMESPathError("at least one element is required for sum")
        total = items[0]
        for item in items[1:]:
            total = _arith(total, item, "+")
        return total

    @functions.signature({"types": ["number"]}, {"types": ["number"]})
    def _func_round(self, n: float, digits: float) -> float:
        return round(n, int(digits))

    @functions.signature({"types": ["string"]})
    def _func_base64_decode(self, s: str) -> str:
        return base64.b64decode(s).decode()

    @functions.signature({"types": ["string"]})
    def _func_base64_encode(self, s: str) -> str:
        return base64.b64encode(s.encode()).decode()

    @functions.signature({"types": ["string"]})
    def _func_parse_json(self, s: str) -> Any:
        return json.loads(s)

    @functions.signature({"types": ["string"]})
    def _func_parse_yaml(self, s: str) -> Any:
        return yaml.safe_load(s)

    @functions.signature({"types": ["string"]})
    def _func_to_boolean(self, s: str) -> bool:
        if s.lower() not in ("true", "false"):
            raise JMESPathError(f"cannot convert {s!r} to boolean")
        return s.lower() == "true"

    @functions.signature({"types": ["string"]}, {"types": ["number"]})
    def _func_truncate(self, s: str, n: float) -> str:
        return s[: max(int(n), 0)]

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_semver_compare(self, version: str, constraint: str) -> bool:
        return semver_compare(version, constraint)

    @functions.signature({"types": ["string"]})
    def _func_path_canonicalize(self, s: str) -> str:
        parts: list[str] = []
        for part in s.split("/"):
            if part == "..":
                if parts:
                    parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return ("/" if s.startswith("/") else "") + "/".join(parts)

    @functions.signature({"types": ["string"]})
    def _func_sha256(self, s: str) -> str:
        return hashlib.sha256(s.encode()).hexdigest()

    @functions.signature({"types": ["string"]})
    def _func_md5(self, s: str) -> str:
        return hashlib.md5(s.encode()).hexdigest()

    @functions.signature({"types": ["string"]})
    def _func_image_normalize(self, image: str) -> str:
        return parse_image(image)["reference"]

    @functions.signature({"types": ["object", "array"]}, {"types": ["string", "number"]})
    def _func_lookup(self, collection: Any, key: Any) -> Any:
        if isinstance(collection, dict):
            return collection.get(key) if isinstance(key, str) else None
        if isinstance(key, int | float) and float(key).is_integer() and 0 <= int(key) < len(collection):
            return collection[int(key)]
        return None

    @functions.signature({"types": ["object", "array"]}, {"types": ["string"]}, {"types": ["string"]})
    def _func_items(self, collection: Any, key_name: str, value_name: str) -> list[dict[str, Any]]:
        pairs = sorted(collection.items()) if isinstance(collection, dict) else list(enumerate(collection))
        return [{key_name: k, value_name: v} for k, v in pairs]

    @functions.signature({"types": ["array"]}, {"types": ["array"]})
    def _func_object_from_lists(self, keys: list[Any], vals: list[Any]) -> dict[str, Any]:
        return {str(k): (vals[i] if i < len(vals) else None) for i, k in enumerate(keys)}

    @functions.signature({"types": ["string"]}, {"types": ["string"]}, {"types": ["string"]})
    def _func_time_since(self, layout: str, start: str, end: str) -> str:
        t1 = parse_time(layout, start)
        t2 = parse_time(layout, end) if end else datetime.now(UTC)
        return format_go_duration((t2 - t1).total_seconds())

    @functions.signature()
    def _func_time_now(self) -> str:
        return datetime.now().astimezone().isoformat(timespec="seconds")

    @functions.signature()
    def _func_time_now_utc(self) -> str:
        return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @functions.signature({"types": ["string"]}, {"types": ["string"]}, {"types": ["string"]})
    def _func_time_add(self, layout: str, ts: str, duration: str) -> str:
        seconds = parse_duration(duration)
        if seconds is None:
            raise JMESPathError(f"invalid duration {duration!r}")
        return (parse_time(layout, ts) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_time_parse(self, layout: str, ts: str) -> str:
        return parse_time(layout, ts).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @functions.signature({"types": ["string"]})
    def _func_time_utc(self, ts: str) -> str:
        return parse_time("", ts).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_time_diff(self, start: str, end: str) -> str:
        return format_go_duration((parse_time("", end) - parse_time("", start)).total_seconds())

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_time_before(self, a: str, b: str) -> bool:
        return parse_time("", a) < parse_time("", b)

    @functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_time_after(self, a: str, b: str) -> bool:
        return parse_time("", a) > parse_time("", b)

    @functions.signature({"types": ["string"]}, {"types": ["string"]}, {"types": ["string"]})
    def _func_time_between(self, ts: str, start: str, end: str) -> bool:
        return parse_time("", start) < parse_time("", ts) < parse_time("", end)


class NotFound(JMESPathError):
    """A field looked up on an object that lacks it (Kyverno's JMESPath reports this instead of null)."""

    def __init__(self, key: str) -> None:
        super().__init__(f'Unknown key "{key}" in path')


# Parents that pass a child's NotFound upwards; every other node treats it as null and carries on.
_PROPAGATING_PARENTS = frozenset({"subexpression", "index_expression", "key_val_pair"})


class _Interpreter(visitor.TreeInterpreter):
    """JMESPath as Kyverno evaluates it: a missing key in a plain path is an error (`NotFound`), but
    projections, flattens, filters, `||`, pipes and function arguments absorb it as null."""

    def __init__(self, options: jmespath.Options) -> None:
        super().__init__(options)
        self._parents: list[str] = []

    def visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        self._parents.append(node["type"])
        try:
            return super().visit(node, *args, **kwargs)
        except NotFound:
            if len(self._parents) < 2 or self._parents[-2] in _PROPAGATING_PARENTS:
                raise
            return None
        finally:
            self._parents.pop()

    def visit_field(self, node: Any, value: Any) -> Any:
        if isinstance(value, dict) and node["value"] not in value:
            raise NotFound(node["value"])
        return super().visit_field(node, value)


_OPTIONS = jmespath.Options(custom_functions=KyvernoFunctions())


@lru_cache(maxsize=4096)
def _compile(expression: str) -> Any:
    return jmespath.compile(expression).parsed


def search(expression: str, data: Any) -> Any:
    """Evaluate `expression` over `data` with Kyverno's functions (raises `NotFound` and jmespath errors)."""
    return _Interpreter(_OPTIONS).visit(_compile(expression), data)
