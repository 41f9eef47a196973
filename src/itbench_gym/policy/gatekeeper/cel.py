"""A ConstraintTemplate's ``K8sNativeValidation`` code, evaluated as Gatekeeper's CEL driver does.

Gatekeeper (3.16 on, ``--enable-k8s-native-validation`` true by default) registers its CEL driver before
the Rego one, so a template with both kinds of code is evaluated with CEL. The source is a
ValidatingAdmissionPolicy's body: ``validations`` (``expression``, ``message``, ``messageExpression``),
``variables``, ``matchCondition`` and ``failurePolicy``. Expressions see ``object`` (null on a DELETE),
``oldObject``, ``request`` (the review), ``params`` (the constraint), ``namespaceObject`` and
``variables``, which also hold ``params`` (the constraint's ``spec.parameters``) and ``anyObject``
(``oldObject`` on a DELETE, else ``object``). Every false validation is a violation with its message
(``messageExpression``, ``message``, else "failed expression: ..."); under the default failure policy,
Fail, an expression that errs is a violation too; a false match condition means no violation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.policy.gatekeeper.errors import GatekeeperError

#: What a K8sNativeValidation expression may name (a ValidatingAdmissionPolicy's variables).
VARIABLES = frozenset({"object", "oldObject", "request", "params", "namespaceObject", "variables", "authorizer"})
#: Names Gatekeeper binds itself: a template's variables may not take them.
_RESERVED = ("params", "anyObject")


def check_source(source: Any, template: str) -> dict[str, Any]:
    """The source as Gatekeeper admits it: every expression compiles, no reserved variable name."""
    from itbench_gym.policy.cel.engine import CelError, check_entries

    if not isinstance(source, Mapping):
        raise GatekeeperError(f"template {template}: K8sNativeValidation source must be an object")
    for variable in source.get("variables") or []:
        name = variable.get("name") if isinstance(variable, Mapping) else None
        if name in _RESERVED or str(name).startswith("gatekeeper_internal_"):
            raise GatekeeperError(f"template {template}: {name} an invalid variable name, it is reserved")
    if source.get("failurePolicy") not in (None, "Fail", "Ignore"):
        raise GatekeeperError(f"template {template}: failurePolicy must be Fail or Ignore")
    for field in ("validations", "variables", "matchCondition"):
        try:
            check_entries(source.get(field), f"source.{field}", ("expression", "messageExpression"), VARIABLES)
        except CelError as exc:
            raise GatekeeperError(f"template {template}: {exc}") from None
    return dict(source)


def violations(source: Mapping[str, Any], review: Mapping[str, Any], constraint: Mapping[str, Any],
               namespace: Mapping[str, Any] | None) -> list[str]:
    """The messages of the violations of one review."""
    from celpy import celtypes

    from itbench_gym.policy.cel.engine import Bindings, CelError, compile_cel

    deleting = review.get("operation") == "DELETE"
    obj = None if deleting else review.get("object")
    old = review.get("oldObject")
    parameters = (constraint.get("spec") or {}).get("parameters")
    env = Bindings.of({"object": obj, "oldObject": old, "request": dict(review), "params": dict(constraint),
                       "namespaceObject": dict(namespace) if namespace is not None else None,
                       "variables": {"params": parameters, "anyObject": old if deleting and obj is None else obj}})
    fail_closed = source.get("failurePolicy", "Fail") != "Ignore"
    for variable in source.get("variables") or []:
        try:  # one that errs fails only what reads it
            env["variables"][celtypes.StringType(variable["name"])] = compile_cel(variable["expression"]).evaluate(env, raw=True)
        except CelError:
            continue
    for condition in source.get("matchCondition") or []:
        try:
            if compile_cel(condition["expression"]).evaluate(env) is not True:
                return []
        except CelError as exc:
            return [f"failed to evaluate match condition {condition.get('name', '')!r}: {exc}"] if fail_closed else []
    found = []
    for validation in source.get("validations") or []:
        expression = str(validation["expression"])
        try:
            if compile_cel(expression).evaluate(env) is True:
                continue
        except CelError as exc:
            if fail_closed:
                found.append(f"expression '{expression.strip()}' resulted in error: {exc}")
            continue
        message = str(validation.get("message") or "")
        if validation.get("messageExpression"):
            try:
                message = str(compile_cel(validation["messageExpression"]).evaluate(env))
            except CelError as exc:
                message = f"failed to evaluate messageExpression: {exc}"
        found.append(message or f"failed expression: {expression.strip()}")
    return found
