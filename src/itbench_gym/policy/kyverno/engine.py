"""Evaluate Kyverno validate rules against resources, as `kyverno test` does offline.

Each (policy, rule, resource) yields pass / fail / skip / error / warn. A rule that does not match the
resource or whose preconditions do not hold is a skip; failures of unscored policies are warnings.
Mutate, generate and verifyImages rules (and manifest/assert validations) are not evaluated:
`Policy.unsupported` names them with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .autogen import expand_rules
from .cel_rules import CelRuleError, check_rule, preconditions_hold, validate_cel
from .conditions import ConditionError, evaluate_block
from .images import images_variable
from .match import Admission, resource_namespace, rule_applies
from .pattern import match_pattern
from .pss import check_pod_security
from .variables import Context, VariableError, has_variables, query, substitute
from .vpol import VALIDATING_POLICY_KINDS, ValidatingPolicyError, load_rules, validate_policy
from .vpol import matches as vpol_matches

SCORED_ANNOTATION = "policies.kyverno.io/scored"
_UNSUPPORTED_KINDS = ("mutate", "generate", "verifyImages")
_NON_VARIABLE_ENTRIES = ("configMap", "apiCall", "imageRegistry", "globalReference")


class PolicyError(ValueError):
    """A document that is not a usable Kyverno policy."""


@dataclass(frozen=True)
class RuleResult:
    """One rule's outcome; `matched` is False when the rule's match/exclude blocks left the resource out."""

    rule: str
    status: str
    message: str = ""
    matched: bool = True


@dataclass
class Policy:
    """A loaded policy with its autogen rules; `unsupported` maps rule names to why they are not evaluated."""

    name: str
    namespace: str | None
    raw: dict[str, Any]
    rules: list[dict[str, Any]]
    unsupported: dict[str, str] = field(default_factory=dict)

    @property
    def scored(self) -> bool:
        annotations = (self.raw.get("metadata") or {}).get("annotations") or {}
        return str(annotations.get(SCORED_ANNOTATION, "true")).lower() != "false"


def load_policy(doc: dict[str, Any]) -> Policy:
    """Turn a ClusterPolicy/Policy (or ValidatingPolicy) document into a `Policy`; raises `PolicyError`
    when it cannot."""
    if doc.get("kind") in VALIDATING_POLICY_KINDS:
        try:
            rules = load_rules(doc)
        except ValidatingPolicyError as exc:
            raise PolicyError(str(exc)) from None
        meta = doc.get("metadata") or {}
        namespace = meta.get("namespace") if doc["kind"] == "NamespacedValidatingPolicy" else None
        return Policy(str(meta["name"]), namespace, doc, rules)
    if doc.get("kind") not in ("ClusterPolicy", "Policy"):
        raise PolicyError(f"not a Kyverno policy: kind {doc.get('kind')!r}")
    meta = doc.get("metadata") or {}
    spec = doc.get("spec")
    if not meta.get("name") or not isinstance(spec, dict) or not isinstance(spec.get("rules"), list):
        raise PolicyError("policy needs metadata.name and spec.rules")
    for rule in spec["rules"]:
        if not isinstance(rule, dict) or not rule.get("name") or not isinstance(rule.get("match"), dict):
            raise PolicyError(f"policy {meta['name']}: every rule needs a name and a match block")
        try:
            check_rule(rule)
        except CelRuleError as exc:
            raise PolicyError(f"policy {meta['name']}, rule {rule['name']}: {exc}") from None
    rules = expand_rules(doc)
    unsupported: dict[str, str] = {}
    for rule in rules:
        kind = next((k for k in _UNSUPPORTED_KINDS if k in rule), None)
        if kind is not None:
            reason = f"{kind} rules are not supported (validate only)"
            for name in (rule["name"], f"autogen-{rule['name']}", f"autogen-cronjob-{rule['name']}"):
                unsupported[name] = reason
        elif "validate" in rule:
            reason_v = _unsupported_validation(rule["validate"] or {})
            if reason_v:
                unsupported[rule["name"]] = reason_v
    namespace = meta.get("namespace") if doc["kind"] == "Policy" else None
    return Policy(str(meta["name"]), namespace, doc, [r for r in rules if "validate" in r], unsupported)


def _unsupported_validation(validate: dict[str, Any]) -> str:
    for key in ("manifests", "assert"):
        if key in validate:
            return f"validate.{key} is not supported"
    return ""


def base_context(resource: dict[str, Any], admission: Admission) -> Context:
    """The admission-request view of `resource` (the CLI treats each resource as a new request)."""
    operation = admission.operation
    namespace = resource_namespace(resource)
    request: dict[str, Any] = {
        "operation": operation,
        "object": {} if operation == "DELETE" else resource,
        "oldObject": resource if operation in ("UPDATE", "DELETE") else {},
        "namespace": namespace,
        "name": (resource.get("metadata") or {}).get("name", ""),
        "kind": {"kind": resource.get("kind", "")},
        "userInfo": {"username": admission.username, "groups": list(admission.groups)},
        "roles": list(admission.roles),
        "clusterRoles": list(admission.cluster_roles),
    }
    sa_namespace, sa_name = "", ""
    if admission.username.startswith("system:serviceaccount:"):
        sa_namespace, _, sa_name = admission.username.removeprefix("system:serviceaccount:").partition(":")
    data: dict[str, Any] = {"request": request, "serviceAccountName": sa_name, "serviceAccountNamespace": sa_namespace}
    images = images_variable(resource)
    if images:
        data["images"] = images
    ctx = Context(data)
    if (resource.get("metadata") or {}).get("namespace"):  # the Namespace, else as `kyverno` builds one offline: its name
        ctx.namespace_object = admission.namespace_objects.get(namespace) or {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return ctx


def evaluate_policy(
    policy: Policy,
    resource: dict[str, Any],
    admission: Admission,
    values: dict[str, Any],
    rule_values: dict[str, dict[str, Any]],
    foreach_values: dict[str, dict[str, list[Any]]] | None = None,
    api_responses: dict[tuple[str, str], dict[str, Any]] | None = None,
    cel_libraries: dict[str, Any] | None = None,
) -> list[RuleResult]:
    """Results for every validate rule of `policy` on `resource`.

    `values` apply to all rules, `rule_values` per rule name, and `foreach_values` per rule name give the
    i-th foreach element its own value (the CLI's `foreachValues`); `api_responses` are mocked API
    server answers by (method, URL path) for `apiCall` context entries; `cel_libraries` Kyverno's CEL
    libraries (`cel_libraries.py`) by variable name."""
    if policy.namespace and resource_namespace(resource) != policy.namespace:
        return [RuleResult(r["name"], "skip", "policy is in another namespace", matched=False) for r in policy.rules]
    results = []
    for rule in policy.rules:
        if rule["name"] in policy.unsupported:
            continue
        ctx = base_context(resource, admission)
        ctx.foreach_values = (foreach_values or {}).get(rule["name"], {})
        ctx.api_responses = api_responses or {}
        ctx.cel_libraries = cel_libraries or {}
        for name, value in {**values, **rule_values.get(rule["name"], {})}.items():
            ctx.set(name, value)
        result = evaluate_rule(rule, resource, admission, ctx)
        if result.status == "fail" and not policy.scored:
            result = RuleResult(result.rule, "warn", result.message, result.matched)
        results.append(result)
    return results


def evaluate_rule(rule: dict[str, Any], resource: dict[str, Any], admission: Admission, ctx: Context) -> RuleResult:
    name = str(rule["name"])
    if "validatingPolicy" in rule:
        spec = rule["validatingPolicy"]
        if not vpol_matches(spec["matchConstraints"], resource, admission):
            return RuleResult(name, "skip", "the policy's match constraints do not select the resource", matched=False)
        return RuleResult(name, *validate_policy(spec, ctx))
    if not rule_applies(rule, resource, admission):
        return RuleResult(name, "skip", "rule does not match the resource", matched=False)
    try:
        load_context(rule.get("context") or [], ctx)
    except VariableError as exc:
        return RuleResult(name, "error", f"failed to load context: {exc}")
    try:
        if not evaluate_block(rule.get("preconditions"), ctx, lenient=True):
            return RuleResult(name, "skip", "preconditions not met")
    except ConditionError as exc:
        return RuleResult(name, "error", f"failed to evaluate preconditions: {exc}")
    try:
        if not preconditions_hold(rule.get("celPreconditions"), ctx):
            return RuleResult(name, "skip", "cel preconditions not met")
    except CelRuleError as exc:
        return RuleResult(name, "error", f"failed to evaluate cel preconditions: {exc}")
    status, detail = validate(rule.get("validate") or {}, resource, ctx, depth=0)
    if status == NO_RESPONSE:
        return RuleResult(name, "skip", detail, matched=False)
    cel = "cel" in (rule.get("validate") or {})  # a CEL rule's message is its expressions' own, as the validator words it
    return RuleResult(name, status, _message(rule, ctx, detail) if status == "fail" and not cel else detail)


def _message(rule: dict[str, Any], ctx: Context, detail: str) -> str:
    message = (rule.get("validate") or {}).get("message") or ""
    try:
        message = str(substitute(message, ctx))
    except VariableError:
        pass
    return f"validation error: {message} rule {rule['name']} failed: {detail}".strip()


def load_context(entries: list[dict[str, Any]], ctx: Context) -> None:
    """Add `variable` entries; other entry types need a cluster, so only values files can supply them."""
    for entry in entries:
        name = str(entry.get("name"))
        variable = entry.get("variable")
        if isinstance(entry.get("apiCall"), dict) and not _is_set(ctx, name) and _mocked_api_call(entry["apiCall"], name, ctx):
            continue
        if variable is None:
            if any(k in entry for k in _NON_VARIABLE_ENTRIES) and not _is_set(ctx, name):
                default = next((entry[k].get("default") for k in _NON_VARIABLE_ENTRIES if isinstance(entry.get(k), dict)), None)
                if default is not None:
                    ctx.set(name, substitute(default, ctx))
            continue
        ctx.set(name, _variable_value(variable, ctx))


def _mocked_api_call(call: dict[str, Any], name: str, ctx: Context) -> bool:
    """Answer an apiCall entry from the suite's mocked responses; False when none is mocked for its URL."""
    call = substitute(call, ctx)
    url = str((call.get("service") or {}).get("url") or call.get("urlPath") or "")
    response = ctx.api_responses.get((str(call.get("method") or "GET"), url))
    if response is None:
        return False
    status = int(response.get("statusCode") or 200)
    if not 200 <= status < 300:
        raise VariableError(f"HTTP {status} from the mocked apiCall for context entry {name!r}")
    body = response.get("body")
    ctx.set(name, query(str(call["jmesPath"]), body) if call.get("jmesPath") else body)
    return True


def _is_set(ctx: Context, name: str) -> bool:
    node: Any = ctx.data
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _variable_value(variable: dict[str, Any], ctx: Context) -> Any:
    try:
        if "value" in variable:
            value = substitute(variable["value"], ctx)
            if variable.get("jmesPath"):
                value = query(str(substitute(variable["jmesPath"], ctx)), value)
            return value
        if variable.get("jmesPath"):
            return ctx.query(str(substitute(variable["jmesPath"], ctx)))
        raise VariableError("variable entry needs value or jmesPath")
    except VariableError:
        if "default" in variable:
            return substitute(variable["default"], ctx)
        raise


NO_RESPONSE = "none"


def validate(spec: dict[str, Any], resource: Any, ctx: Context, depth: int) -> tuple[str, str]:
    """(status, detail) of one validate (or foreach) body against `resource`.

    Kyverno checks deny first, then patterns, then foreach; `NO_RESPONSE` is its "no rule response"
    (a foreach that applied to no element), which `kyverno test` reports as excluded.
    """
    try:
        if "deny" in spec:
            denied = evaluate_block((spec.get("deny") or {}).get("conditions"), ctx, lenient=False)
            return ("fail", "deny conditions are true") if denied else ("pass", "deny conditions are false")
        if "pattern" in spec:
            return _pattern_status(spec["pattern"], resource, ctx)
        if "anyPattern" in spec:
            return _any_pattern(spec["anyPattern"], resource, ctx)
        if "foreach" in spec:
            return _foreach(spec["foreach"], resource, ctx, depth)
        if "cel" in spec:
            return validate_cel(spec["cel"], ctx, str(spec.get("message") or ""))
        if "podSecurity" in spec:
            violations = check_pod_security(spec["podSecurity"] or {}, ctx.data["request"]["object"])
            return ("fail", "; ".join(violations)) if violations else ("pass", "pod security checks passed")
    except VariableError as exc:
        return "error", f"variable substitution failed: {exc}"
    except ConditionError as exc:
        return "error", str(exc)
    return NO_RESPONSE, "validate rule has no pattern, anyPattern, deny, foreach, podSecurity or cel"


def _pattern_status(pattern: Any, resource: Any, ctx: Context) -> tuple[str, str]:
    if has_variables(pattern):
        pattern = substitute(pattern, ctx)
    failure = match_pattern(resource, pattern)
    if failure is None:
        return "pass", "pattern matched"
    return ("skip" if failure.skip else "fail"), f"{failure.message} (path {failure.path})"


def _any_pattern(patterns: Any, resource: Any, ctx: Context) -> tuple[str, str]:
    statuses = [_pattern_status(p, resource, ctx) for p in patterns or []]
    if any(s == "pass" for s, _ in statuses):
        return "pass", "anyPattern matched"
    if statuses and all(s == "skip" for s, _ in statuses):
        return "skip", "all anyPatterns skipped"
    return "fail", "; ".join(d for s, d in statuses if s == "fail")


def _foreach(entries: list[dict[str, Any]], resource: Any, ctx: Context, depth: int) -> tuple[str, str]:
    """Every element of every list must pass; elements that skip (or whose preconditions fail) do not count."""
    applied = 0
    list_error = ""
    for entry in entries:
        try:
            found = ctx.query(str(substitute(entry.get("list", ""), ctx)))
        except VariableError as exc:
            if "Unknown key" not in str(exc):
                list_error = str(exc)
            continue
        elements = found if isinstance(found, list) else [found]
        for index, element in enumerate(elements):
            if element is None:
                continue
            status, detail = _foreach_element(entry, element, index, resource, ctx, depth)
            if status in ("skip", NO_RESPONSE):
                continue
            if status != "pass":
                return status, f"validation failure: foreach element {index}: {detail}"
            applied += 1
    if applied:
        return "pass", "rule passed"
    return ("error", f"failed to evaluate list: {list_error}") if list_error else (NO_RESPONSE, "no foreach element applied")


def _foreach_element(entry: dict[str, Any], element: Any, index: int, resource: Any, ctx: Context, depth: int) -> tuple[str, str]:
    """One element in its own scope: `element`, `elementIndex` (and numbered by nesting depth), context, preconditions."""
    child = ctx.child()
    for key, value in (("element", element), ("elementIndex", index), (f"element{depth}", element), (f"elementIndex{depth}", index)):
        child.set(key, value)
    for key, per_element in ctx.foreach_values.items():
        if index < len(per_element):
            child.set(key, per_element[index])
    scope = entry.get("elementScope")
    if scope is True and not isinstance(element, dict):
        return "error", "elementScope=true needs map elements"
    scoped = element if (isinstance(element, dict) if scope is None else scope) else resource
    try:
        load_context(entry.get("context") or [], child)
    except VariableError as exc:
        return "error", f"failed to load context: {exc}"
    try:
        if not evaluate_block(entry.get("preconditions"), child, lenient=True):
            return "skip", "preconditions not met"
    except ConditionError:
        return "skip", "failed to evaluate preconditions"
    return validate(entry, scoped, child, depth + 1)
