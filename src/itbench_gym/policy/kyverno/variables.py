"""`{{ ... }}` variable substitution over a Kyverno evaluation context.

Kyverno resolves the innermost `{{ }}` first (so expressions can be built from other variables), keeps
the type of a value when a string is exactly one variable, and renders other values as JSON. A variable
that resolves to nothing is an error, except in preconditions where it becomes an empty string.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from jmespath.exceptions import JMESPathError

from .jmes import search

_VARIABLE = re.compile(r"(?<!\\)\{\{((?:\{[^{}]*\}|[^{}])*)\}\}")
_MAX_ROUNDS = 10


class VariableError(Exception):
    """A variable did not resolve (missing path or bad expression)."""


class Context:
    """The JSON document variables are resolved against (request, values, context entries, element)."""

    def __init__(self, data: dict[str, Any], foreach_values: dict[str, list[Any]] | None = None) -> None:
        self.data = data
        self.foreach_values = foreach_values or {}
        self.api_responses: dict[tuple[str, str], dict[str, Any]] = {}
        #: The request's Namespace (CEL's ``namespaceObject``); None for a cluster-scoped resource.
        self.namespace_object: dict[str, Any] | None = None
        #: Kyverno's CEL libraries by variable name (``resource``, ``image``) where data answers them.
        self.cel_libraries: dict[str, Any] = {}

    def child(self) -> Context:
        """A copy for a nested scope (foreach element) so sibling scopes do not see each other's variables."""
        child = Context(dict(self.data), self.foreach_values)
        child.api_responses = self.api_responses
        child.namespace_object = self.namespace_object
        child.cel_libraries = self.cel_libraries
        return child

    @property
    def is_delete(self) -> bool:
        request = self.data.get("request")
        return isinstance(request, dict) and request.get("operation") == "DELETE"

    def set(self, dotted: str, value: Any) -> None:
        """Set a variable; dotted names (`a.b.c`) nest, as in Kyverno values files."""
        parts = dotted.split(".")
        node = self.data
        for part in parts[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
            else:
                nxt = dict(nxt)
            node[part] = nxt
            node = nxt
        node[parts[-1]] = value

    def query(self, expression: str) -> Any:
        return query(expression, self.data)


def query(expression: str, data: Any) -> Any:
    """Evaluate a JMESPath expression; a plain path through a missing key is an error, as in Kyverno."""
    expression = expression.strip()
    try:
        result = search(expression, data)
    except (JMESPathError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise VariableError(f"failed to resolve {expression}: {exc}") from exc
    return result


def substitute(value: Any, ctx: Context, *, lenient: bool = False) -> Any:
    """Replace every `{{ }}` in strings (and map keys) within `value`; `lenient` turns misses into ""."""
    if isinstance(value, str):
        return _substitute_string(value, ctx, lenient)
    if isinstance(value, list):
        return [substitute(v, ctx, lenient=lenient) for v in value]
    if isinstance(value, dict):
        return {substitute(k, ctx, lenient=lenient): substitute(v, ctx, lenient=lenient) for k, v in value.items()}
    return copy.copy(value)


def _substitute_string(text: str, ctx: Context, lenient: bool) -> Any:
    current: Any = text
    for _ in range(_MAX_ROUNDS):
        if not isinstance(current, str):
            return current
        matches = list(_VARIABLE.finditer(current))
        if not matches:
            break
        for m in matches:
            whole = m.group(0)
            expression = m.group(1)
            if ctx.is_delete:  # a DELETE request has no new object: Kyverno reads the old one instead
                expression = expression.replace("request.object", "request.oldObject")
            try:
                resolved = ctx.query(expression)
            except VariableError:
                if not lenient:
                    raise
                resolved = ""
            if current == whole:
                current = resolved
                break
            if isinstance(resolved, float) and resolved.is_integer():
                resolved = int(resolved)  # Go renders JSON numbers without a trailing ".0"
            rendered = resolved if isinstance(resolved, str) else json.dumps(resolved, separators=(",", ":"))
            current = current.replace(whole, rendered)
    return current.replace("\\{{", "{{") if isinstance(current, str) else current


def has_variables(value: Any) -> bool:
    """True when `value` holds any `{{ }}` (patterns without variables need no substitution pass)."""
    if isinstance(value, str):
        return "{{" in value
    if isinstance(value, list):
        return any(has_variables(v) for v in value)
    if isinstance(value, dict):
        return any(has_variables(k) or has_variables(v) for k, v in value.items())
    return False
