"""Kyverno's CEL rules: ``validate.cel`` expressions and a rule's ``celPreconditions``.

As Kubernetes' ValidatingAdmissionPolicy evaluates them (Kyverno runs its validator): ``object``,
``oldObject`` (null on a create), ``request`` (the admission request), ``namespaceObject``, ``params``
(null: no parameter resource is bound here) and ``variables`` (each from the ones before it). A rule
fails when an expression is false, with its ``message``, its ``messageExpression`` or "failed
expression: ...", and, as the validator's failure policy (Fail) has it, when an expression errs or is
not a boolean; a precondition or message expression that errs makes the result an error.
"""

from __future__ import annotations

from typing import Any

from .variables import Context


class CelRuleError(ValueError):
    """An expression that does not compile or evaluate to what the rule needs."""


def bindings(ctx: Context) -> Any:
    """The request's variables as CEL values (``Bindings``), converted once for all of a rule's expressions."""
    from itbench_gym.policy.cel.engine import Bindings

    request = ctx.data["request"]
    return Bindings.of({"object": request.get("object") or None, "oldObject": request.get("oldObject") or None,
                        "request": request, "namespaceObject": ctx.namespace_object, "params": None,
                        "variables": {}, **ctx.cel_libraries})


def evaluate(expression: Any, where: str, env: Any, *, raw: bool = False) -> Any:
    """``expression``'s value in ``env`` (the CEL value when ``raw``); raises :class:`CelRuleError`."""
    from itbench_gym.policy.cel.engine import CelError, compile_cel

    if not isinstance(expression, str) or not expression.strip():
        raise CelRuleError(f"{where}: expression must be a non-empty string")
    try:
        return compile_cel(expression).evaluate(env, raw=raw)
    except CelError as exc:
        raise CelRuleError(f"{where}: {exc}") from None


def bind_variables(entries: Any, where: str, env: Any) -> None:
    """Evaluate ``variables`` in order into ``env``, each seeing those before it; one that fails is
    left out and errs only where an expression reads it (Kubernetes evaluates them lazily)."""
    from celpy import celtypes

    for i, variable in enumerate(entries or []):
        name = variable.get("name") if isinstance(variable, dict) else None
        if not name:
            continue
        try:
            env["variables"][celtypes.StringType(name)] = evaluate(variable.get("expression"), f"{where}[{i}] ({name})", env, raw=True)
        except CelRuleError:
            continue


#: What a CEL rule of a ClusterPolicy may name (Kyverno's admission-policy compiler declares these).
RULE_VARIABLES = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer"})


def check_expressions(entries: Any, where: str, *, keys: tuple[str, ...] = ("expression",),
                      variables: frozenset[str] = RULE_VARIABLES, methods: frozenset[str] = frozenset()) -> None:
    """Compile each entry's expressions as Kyverno does when it admits a policy, names checked against
    ``variables`` (raises :class:`CelRuleError` naming the field: a policy with an expression that does not
    compile is refused, not evaluated)."""
    from itbench_gym.policy.cel.engine import CelError, check_entries

    try:
        check_entries(entries, where, keys, variables, methods)
    except CelError as exc:
        raise CelRuleError(str(exc)) from None


def check_rule(rule: dict[str, Any]) -> None:
    """Compile a ClusterPolicy rule's CEL: ``celPreconditions`` and ``validate.cel``."""
    check_expressions(rule.get("celPreconditions"), "celPreconditions")
    cel = (rule.get("validate") or {}).get("cel")
    if cel is None:
        return
    if not isinstance(cel, dict) or not cel.get("expressions"):
        raise CelRuleError("validate.cel needs expressions")
    check_expressions(cel.get("expressions"), "validate.cel.expressions", keys=("expression", "messageExpression"))
    check_expressions(cel.get("variables"), "validate.cel.variables")


def truth(expression: Any, where: str, env: Any) -> bool:
    value = evaluate(expression, where, env)
    if not isinstance(value, bool):
        raise CelRuleError(f"{where}: expression must evaluate to a bool, got {type(value).__name__}")
    return value


def preconditions_hold(conditions: Any, ctx: Context) -> bool:
    """Whether every ``celPreconditions`` entry is true (raises :class:`CelRuleError`)."""
    env = bindings(ctx)
    return all(truth(c.get("expression") if isinstance(c, dict) else c, f"celPreconditions[{i}]", env)
               for i, c in enumerate(conditions or []))


def validate_cel(spec: Any, ctx: Context, default_message: str = "") -> tuple[str, str]:
    """(status, detail) of a ``validate.cel`` block; an expression without a message of its own takes
    the rule's ``validate.message`` (``default_message``)."""
    if not isinstance(spec, dict):
        return "error", "validate.cel must be a mapping"
    env = bindings(ctx)
    try:
        for i, variable in enumerate(spec.get("variables") or []):
            if not (isinstance(variable, dict) and variable.get("name")):
                raise CelRuleError(f"validate.cel.variables[{i}] needs a name")
        bind_variables(spec.get("variables"), "validate.cel.variables", env)
        failures = []
        for i, check in enumerate(spec.get("expressions") or []):
            check = check if isinstance(check, dict) else {}
            expression = check.get("expression")
            try:
                if truth(expression, f"validate.cel.expressions[{i}]", env):
                    continue
            except CelRuleError as exc:  # the failure policy (Fail) denies what it cannot evaluate
                failures.append(f"expression {str(expression).strip()!r} resulted in error: {exc}")
                continue
            message = check.get("message") or default_message
            if check.get("messageExpression"):
                message = str(evaluate(check["messageExpression"], f"validate.cel.expressions[{i}].messageExpression", env))
            failures.append(str(message or f"failed expression: {str(expression).strip()}"))
    except CelRuleError as exc:
        return "error", str(exc)
    if failures:
        return "fail", "; ".join(failures)
    return "pass", "every CEL expression holds"
