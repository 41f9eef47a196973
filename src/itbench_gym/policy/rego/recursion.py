"""OPA's recursion check over functions: a function that calls itself, directly or through others.

OPA's compiler refuses any recursion (``rego_recursion_error``). regorus finds a recursive *rule* when it
evaluates it, but runs a recursive *function* until the process's stack overflows, which kills the
interpreter the twin runs in. So the call graph of the modules' functions is checked before a module
joins an engine, from the AST regorus parses (``Engine.get_ast_as_json``): a call names a function of
its own package, ``data.<package>.<name>``, or an imported package's function.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


def recursive_function(modules: Mapping[str, Any]) -> tuple[str, int, list[str]] | None:
    """The first function found on a cycle of calls, over the parsed ``modules`` (each module's name and
    regorus' AST of it): (module, line of the function's head, the cycle's names), or None."""
    calls: dict[str, set[str]] = {}
    heads: dict[str, tuple[str, int]] = {}
    for name, parsed in modules.items():
        ast = parsed.get("ast") or {}
        package = "data." + ".".join(_ref_path((ast.get("package") or {}).get("refr")))
        aliases = _imports(ast.get("imports") or [], str((parsed.get("source") or {}).get("contents") or ""))
        local = {head for rule in ast.get("rules") or [] if (head := _head_name(rule)) is not None}
        for rule in ast.get("rules") or []:
            head = _head_name(rule)
            if head is None:
                continue
            key = f"{package}.{head}"
            heads.setdefault(key, (name, int(_span(rule).get("line", 0))))
            targets = calls.setdefault(key, set())
            for called in _called(rule):
                resolved = _resolve(called, package, local, aliases)
                if resolved is not None:
                    targets.add(resolved)
    for start in sorted(calls):
        cycle = _cycle_from(start, calls)
        if cycle is not None:
            module, line = heads[start]
            return module, line, cycle
    return None


def _cycle_from(start: str, calls: Mapping[str, set[str]]) -> list[str] | None:
    """A path of calls from ``start`` back to it (depth first, iterative), or None."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for nxt in sorted(calls.get(node, ())):
            if nxt == start:
                return [*path, start]
            if nxt in calls and nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def _head_name(rule: Any) -> str | None:
    """The name of a function rule (``f(x) := ...``, ``f(x) if ...``); None for other rules."""
    head = ((rule or {}).get("Spec") or {}).get("head") or {}
    func = head.get("Func")
    return ".".join(_ref_path(func.get("refr"))) if isinstance(func, dict) else None


def _span(rule: Any) -> dict[str, Any]:
    span = ((rule or {}).get("Spec") or {}).get("span")
    return span if isinstance(span, dict) else {}


def _imports(imports: list[Any], source: str) -> dict[str, str]:
    """Import aliases: ``import data.lib`` -> ``lib``: ``data.lib`` (``as x``, whose span in the module's
    source gives the alias, names it ``x``)."""
    out: dict[str, str] = {}
    for imp in imports:
        path = _ref_path((imp or {}).get("refr"))
        if path and path[0] == "data":
            alias = (imp or {}).get("as")
            named = source[alias["start"]:alias["end"]] if isinstance(alias, dict) and "start" in alias else ""
            out[named or path[-1]] = ".".join(path)
    return out


def _called(node: Any) -> Iterator[list[str]]:
    """The reference path of every function call in ``node`` (iterative walk of the AST)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            call = item.get("Call")
            if isinstance(call, dict):
                path = _ref_path(call.get("fcn"))
                if path:
                    yield path
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _resolve(path: list[str], package: str, local: set[str], aliases: Mapping[str, str]) -> str | None:
    """The function a call's path names: one of this package's, a ``data.`` path, or through an import."""
    if len(path) == 1:
        return f"{package}.{path[0]}" if path[0] in local else None
    if path[0] == "data":
        return ".".join(path)
    if path[0] in aliases:
        return ".".join([aliases[path[0]], *path[1:]])
    return None


def _ref_path(ref: Any) -> list[str]:
    """A reference (``Var`` or a chain of ``RefDot``) as its names: ``data.lib.f`` -> [data, lib, f]."""
    names: list[str] = []
    while isinstance(ref, dict):
        if "Var" in ref:
            value = (ref["Var"] or {}).get("value")
            return [str(value), *reversed(names)] if value is not None else []
        dot = ref.get("RefDot")
        if not isinstance(dot, dict):
            return []
        field = dot.get("field")
        names.append(str(field[1]) if isinstance(field, list) and len(field) > 1 else str(field))
        ref = dot.get("refr")
    return []
