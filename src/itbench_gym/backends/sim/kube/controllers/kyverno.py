"""Kyverno in the twin: its configuration, policy cache, evaluation and admission webhook handlers.

Kyverno 1.13 as the ``kyverno/kyverno`` chart installs it (``envs/ciso-kind/cluster/kyverno.yaml``).
The admission controller serves ``kyverno-svc`` (namespace ``kyverno``): ``/validate/fail`` and
``/validate/ignore`` validate resources for policies with failurePolicy Fail / Ignore,
and ``/policyvalidate`` refuses policies it cannot load.
Rule evaluation is ``itbench_gym.policy.kyverno`` (the same engine ``kyverno test`` suites run).

Facts from kyverno/kyverno v1.13.4: the ``kyverno`` ConfigMap's ``resourceFilters``
(``[Kind,Namespace,Name]``, wildcards; checked on admission, and in background scans unless the reports
controller runs with ``--skipResourceFilters``) and ``excludeGroups``; PolicyExceptions only count for
a controller started with ``--enablePolicyException=true`` (the chart's default is false); validate
rules judge a DELETE only when their match names the operation; a blocked request's message (pkg/webhooks/utils/block.go: ``resource
Kind/ns/name was blocked due to the following policies`` then the YAML of policy -> rule -> message
for every rule that neither passed nor skipped); warnings ``policy <p>.<rule>: <message>``
(warning.go); rule-level ``validate.failureAction`` over ``spec.validationFailureAction`` (default
Audit) and its ``validationFailureActionOverrides``; ``allowExistingViolations`` (default true) lets an
update through when the old object already violated the rule; report results
(pkg/utils/report/results.go: source kyverno, scored from ``policies.kyverno.io/scored``, category
and severity from the policy's annotations, timestamp in whole seconds).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from itbench_gym.policy.kyverno import Admission, Policy, PolicyError, RuleResult, evaluate_policy, load_policy
from itbench_gym.policy.kyverno.exceptions import apply_exceptions
from itbench_gym.policy.kyverno.values import wildcard_match

from ..errors import ApiError
from ..resources import ResourceType
from ..selectors import selector_from_dict
from ..store import ObjectStore
from ..webhooks import AdmissionRequest, AdmissionResponse, WebhookDispatcher

Obj = dict[str, Any]

NAMESPACE = "kyverno"
SERVICE = "kyverno-svc"
CONFIGMAP = "kyverno"
ADMISSION_CONTROLLER = "kyverno-admission-controller"
REPORTS_CONTROLLER = "kyverno-reports-controller"
GROUP = "kyverno.io"
POLICY_KINDS = ("ClusterPolicy", "Policy")
EXCEPTION_KIND = "PolicyException"
VALIDATE_PATH = "/validate"
POLICY_VALIDATE_PATH = "/policyvalidate"
FAILURE_POLICIES = {"Fail": "fail", "Ignore": "ignore"}

_SCORED = "policies.kyverno.io/scored"
_CATEGORY = "policies.kyverno.io/category"
_SEVERITY = "policies.kyverno.io/severity"
_SEVERITIES = ("critical", "high", "medium", "low", "info")

#: Who a report result lists as its source.
SOURCE = "kyverno"


def deployment_available(store: ObjectStore, name: str, namespace: str = NAMESPACE) -> bool:
    """A component works while its Deployment has an available replica."""
    try:
        obj = store.get_stored(store.registry.by_kind("Deployment"), namespace, name)
    except ApiError:
        return False
    return int((obj.get("status") or {}).get("availableReplicas") or 0) > 0


def deployment_flag(store: ObjectStore, name: str, flag: str) -> str | None:
    """The value of ``--flag=value`` in the args of a Kyverno deployment's first container."""
    try:
        obj = store.get_stored(store.registry.by_kind("Deployment"), NAMESPACE, name)
    except ApiError:
        return None
    containers = ((((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or [{}]
    for arg in containers[0].get("args") or []:
        key, _, value = str(arg).partition("=")
        if key == flag:
            return value
    return None


def is_kyverno_policy(obj: Obj) -> bool:
    return obj.get("kind") in POLICY_KINDS and str(obj.get("apiVersion", "")).startswith(GROUP + "/")


def is_policy_exception(obj: Obj) -> bool:
    return obj.get("kind") == EXCEPTION_KIND and str(obj.get("apiVersion", "")).startswith(GROUP + "/")


def _list(store: ObjectStore, kind: str, api_version: str | None = None) -> list[Obj]:
    try:
        return store.list_stored(store.registry.by_kind(kind, api_version))
    except ApiError:
        return []  # the CRD is not installed


@dataclass(frozen=True)
class Config:
    """The ``kyverno`` ConfigMap as the controllers read it."""

    filters: tuple[tuple[str, str, str], ...] = ()
    exclude_groups: tuple[str, ...] = ()
    exclude_usernames: tuple[str, ...] = ()
    webhook: Obj = field(default_factory=dict)
    annotations: Obj = field(default_factory=dict)

    @classmethod
    def load(cls, store: ObjectStore) -> Config:
        try:
            cm = store.get_stored(store.registry.by_kind("ConfigMap"), NAMESPACE, CONFIGMAP)
        except ApiError:
            return cls()
        data = cm.get("data") or {}
        filters = []
        for entry in str(data.get("resourceFilters", "")).split("]"):
            parts = entry.strip().lstrip("[").split(",")
            if len(parts) == 3:
                filters.append((parts[0].strip(), parts[1].strip(), parts[2].strip()))
        return cls(
            filters=tuple(filters),
            exclude_groups=_names(data.get("excludeGroups")),
            exclude_usernames=_names(data.get("excludeUsernames")),
            webhook=_json_list_head(data.get("webhooks")),
            annotations=_json_object(data.get("webhookAnnotations")),
        )

    def filtered(self, kind: str, sub: str, namespace: str, name: str) -> bool:
        """A resource the ConfigMap's resourceFilters take out of admission and background scans."""
        full = f"{kind}/{sub}" if sub else kind
        return any(wildcard_match(k, full) and wildcard_match(ns, namespace) and wildcard_match(n, name)
                   for k, ns, n in self.filters)

    def excluded_user(self, username: str, groups: tuple[str, ...]) -> bool:
        return username in self.exclude_usernames or any(g in self.exclude_groups for g in groups)


def _names(value: Any) -> tuple[str, ...]:
    return tuple(v.strip() for v in str(value or "").split(",") if v.strip())


def _json_list_head(value: Any) -> Obj:
    try:
        parsed = json.loads(str(value)) if value else []
    except json.JSONDecodeError:
        return {}
    head = parsed[0] if isinstance(parsed, list) and parsed else parsed
    return head if isinstance(head, dict) else {}


def _json_object(value: Any) -> Obj:
    try:
        parsed = json.loads(str(value)) if value else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


@dataclass(frozen=True)
class LoadedPolicy:
    """A ClusterPolicy or Policy as the policy cache holds it."""

    raw: Obj
    policy: Policy

    @property
    def key(self) -> str:
        """How reports and messages name it: ``name``, or ``namespace/name`` for a Policy."""
        return f"{self.policy.namespace}/{self.policy.name}" if self.policy.namespace else self.policy.name

    @property
    def spec(self) -> Obj:
        return self.raw.get("spec") or {}

    @property
    def ready(self) -> bool:
        return any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (self.raw.get("status") or {}).get("conditions") or [])

    @property
    def admission(self) -> bool:
        return self.spec.get("admission") is not False

    @property
    def background(self) -> bool:
        return self.spec.get("background") is not False

    @property
    def failure_policy(self) -> str:
        return "Ignore" if self.spec.get("failurePolicy") == "Ignore" else "Fail"

    def rule(self, name: str) -> Obj:
        return next((r for r in self.policy.rules if r.get("name") == name), {})

    def enforced(self, rule_name: str, namespace: str, ns_labels: dict[str, str]) -> bool:
        """Enforce or Audit for one rule on a resource in ``namespace``."""
        validate = self.rule(rule_name).get("validate") or {}
        if validate.get("failureAction"):
            return str(validate["failureAction"]).lower() == "enforce"
        for override in self.spec.get("validationFailureActionOverrides") or []:
            names = override.get("namespaces") or []
            if names and not any(wildcard_match(str(n), namespace) for n in names):
                continue
            selector = override.get("namespaceSelector")
            if selector and not _labels_match(selector, ns_labels):
                continue
            if names or selector:
                return str(override.get("action", "")).lower() == "enforce"
        return str(self.spec.get("validationFailureAction") or "Audit").lower() == "enforce"

    def allows_existing_violations(self, rule_name: str) -> bool:
        return (self.rule(rule_name).get("validate") or {}).get("allowExistingViolations") is not False

    def report_result(self, result: RuleResult, now: float) -> Obj:
        """One PolicyReport result for ``result``."""
        annotations = (self.raw.get("metadata") or {}).get("annotations") or {}
        scored = str(annotations.get(_SCORED, "true")) != "false"
        status = "warn" if result.status == "fail" and not scored else result.status
        out: Obj = {"policy": self.key, "rule": result.rule, "result": status, "message": result.message,
                    "scored": scored, "source": SOURCE, "timestamp": {"seconds": int(now), "nanos": 0}}
        if annotations.get(_CATEGORY):
            out["category"] = annotations[_CATEGORY]
        if annotations.get(_SEVERITY) in _SEVERITIES:
            out["severity"] = annotations[_SEVERITY]
        return out


def _labels_match(selector: Obj, labels: dict[str, str]) -> bool:
    return selector_from_dict(selector).matches(labels)


class PolicyCache:
    """Every loadable ClusterPolicy and Policy, reloaded only when its stored object is replaced (a
    restored store may reuse a resourceVersion for other content, so versions are not compared)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._loaded: dict[str, LoadedPolicy] = {}

    def policies(self) -> list[LoadedPolicy]:
        out: list[LoadedPolicy] = []
        seen: set[str] = set()
        for kind in POLICY_KINDS:
            for raw in _list(self.store, kind, f"{GROUP}/v1"):
                meta = raw["metadata"]
                key = f"{kind}/{meta.get('namespace', '')}/{meta['name']}"
                seen.add(key)
                cached = self._loaded.get(key)
                if cached is None or cached.raw is not raw:  # stored objects are replaced, never changed
                    try:
                        cached = LoadedPolicy(raw, load_policy(raw))
                    except PolicyError:
                        continue
                    self._loaded[key] = cached
                out.append(cached)
        for gone in set(self._loaded) - seen:
            del self._loaded[gone]
        return out

    def exceptions(self, deployment: str) -> list[Obj]:
        """The PolicyExceptions a component honours: none unless it runs with ``--enablePolicyException=true``."""
        if deployment_flag(self.store, deployment, "--enablePolicyException") != "true":
            return []
        return _list(self.store, EXCEPTION_KIND, f"{GROUP}/v2")


def kind_selector(selector: str) -> tuple[str, str, str, str]:
    """(group, version, kind, subresource) of a rule's kinds entry (``Pod``, ``apps/v1/Deployment``, ``Pod/exec``)."""
    parts = selector.split("/")
    if len(parts) == 1:
        return "*", "*", parts[0], ""
    if len(parts) == 2:
        return ("*", "*", parts[0], parts[1]) if parts[0][:1].isupper() or parts[0] == "*" else ("*", parts[0], parts[1], "")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2], ""
    return parts[0], parts[1], parts[2], parts[3]


def rule_kinds(rule: Obj, default_operations: tuple[str, ...]) -> dict[str, set[str]]:
    """Kinds the rule's match names, with the operations it asks for (``default_operations`` when none)."""
    out: dict[str, set[str]] = {}
    match = rule.get("match") or {}
    filters = [f.get("resources") or {} for f in (match.get("any") or []) + (match.get("all") or [])]
    filters.append(match.get("resources") or {})
    for desc in filters:
        for kind in desc.get("kinds") or []:
            out.setdefault(str(kind), set()).update(desc.get("operations") or default_operations)
    return out


def served_types(store: ObjectStore, selector: str) -> list[ResourceType]:
    """The resource types a kinds entry names (what upstream finds through discovery; all of them for ``*``)."""
    group, version, kind, _ = kind_selector(selector)
    return [rt for rt in store.registry.all()
            if wildcard_match(kind, rt.kind) and wildcard_match(group, rt.group) and wildcard_match(version, rt.version)]


def namespace_admission(store: ObjectStore, namespace: str, **request: Any) -> Admission:
    """The request as the engine sees it, with the resource's Namespace (its labels for selectors, the
    object for CEL's ``namespaceObject``) when it has one."""
    ns: dict[str, Any] | None = None
    if namespace:
        try:
            ns = store.get_stored(store.registry.by_kind("Namespace"), None, namespace)
        except ApiError:
            ns = None
    if ns is None:
        return Admission(**request)
    return Admission(namespace_labels={namespace: dict(ns["metadata"].get("labels") or {})},
                     namespace_objects={namespace: copy.deepcopy(ns)}, **request)


def evaluate(lp: LoadedPolicy, resource: Obj, admission: Admission, exceptions: list[Obj]) -> list[RuleResult]:
    """The results of the rules of ``lp`` that match ``resource``, PolicyExceptions applied."""
    try:
        results = evaluate_policy(lp.policy, resource, admission, {}, {})
    except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:  # a policy the engine cannot run
        return [RuleResult(str(r["name"]), "error", f"cannot evaluate: {exc!r}") for r in lp.policy.rules]
    return [apply_exceptions(exceptions, lp.policy, r, resource, admission, lp.key) for r in results if r.matched]


def _names_delete(rule: Obj) -> bool:
    """Validate rules judge a DELETE only when their match names the operation."""
    return any("DELETE" in ops for ops in rule_kinds(rule, ()).values())


#: Receives what an allowed request's audit produced: (resource, [(policy, result)]).
AdmissionSink = Callable[[Obj, list[tuple[LoadedPolicy, RuleResult]]], None]


class KyvernoAdmission:
    """The admission controller's webhook server (``kyverno-svc``)."""

    def __init__(self, store: ObjectStore, cache: PolicyCache, sink: AdmissionSink) -> None:
        self.store = store
        self.cache = cache
        self.sink = sink

    def register(self, dispatcher: WebhookDispatcher) -> None:
        for policy, suffix in FAILURE_POLICIES.items():
            dispatcher.register(NAMESPACE, SERVICE, f"{VALIDATE_PATH}/{suffix}", self._validator(policy))
        dispatcher.register(NAMESPACE, SERVICE, POLICY_VALIDATE_PATH, self.validate_policy)

    def _validator(self, failure_policy: str) -> Callable[[AdmissionRequest], AdmissionResponse]:
        def handle(req: AdmissionRequest) -> AdmissionResponse:
            return self.validate(req, failure_policy)

        return handle

    def validate_policy(self, req: AdmissionRequest) -> AdmissionResponse:
        if req.obj is None:
            return AdmissionResponse(True)
        try:
            load_policy(req.obj)
        except PolicyError as exc:
            return AdmissionResponse(False, {"message": str(exc)})
        return AdmissionResponse(True)

    def validate(self, req: AdmissionRequest, failure_policy: str) -> AdmissionResponse:
        """Evaluate the ready policies served by this webhook; block on an Enforce rule that fails."""
        config = Config.load(self.store)
        resource = req.subject
        if config.excluded_user(req.username, req.groups) or config.filtered(req.kind, req.sub, req.namespace, req.name):
            return AdmissionResponse(True)
        if req.operation == "UPDATE" and (resource.get("metadata") or {}).get("deletionTimestamp"):
            return AdmissionResponse(True)
        admission = namespace_admission(self.store, req.namespace, operation=req.operation, username=req.username, groups=req.groups)
        exceptions = self.cache.exceptions(ADMISSION_CONTROLLER)
        blocked: dict[str, dict[str, str]] = {}
        audited: list[tuple[LoadedPolicy, RuleResult]] = []
        warnings: list[str] = []
        for lp in self.cache.policies():
            if not (lp.ready and lp.admission and lp.failure_policy == failure_policy):
                continue
            if lp.policy.namespace and lp.policy.namespace != req.namespace:
                continue
            results = evaluate(lp, resource, admission, exceptions)
            if req.operation == "DELETE":
                results = [r for r in results if _names_delete(lp.rule(r.rule))]
            failing = {r.rule: r.message for r in results if r.status not in ("pass", "skip")}
            blocking = [r for r in results if r.status in ("fail", "error")
                        and lp.enforced(r.rule, req.namespace, admission.namespace_labels.get(req.namespace, {})) and not self._existing(lp, r, req, admission, exceptions)]
            if blocking:
                blocked[lp.policy.name] = failing
            audited += [(lp, r) for r in results]
            emit = lp.spec.get("emitWarning") is True
            warnings += [f"policy {lp.policy.name}.{r.rule}: {r.message}" for r in results
                         if r.status == "warn" or emit and r.status != "skip"]
        if blocked:
            kind, ns, name = req.kind, req.namespace, req.name
            listing = yaml.safe_dump(blocked, sort_keys=True, default_flow_style=False, allow_unicode=True)
            return AdmissionResponse(False, {"message": f"\n\nresource {kind}/{ns}/{name} was blocked due to the "
                                                        f"following policies \n\n{listing}"}, tuple(warnings))
        if audited and not req.dry_run and req.operation != "DELETE":
            self.sink(resource, audited)
        return AdmissionResponse(True, {}, tuple(warnings))

    def _existing(self, lp: LoadedPolicy, result: RuleResult, req: AdmissionRequest, admission: Admission,
                  exceptions: list[Obj]) -> bool:
        """An update of an object that already violated the rule is let through (allowExistingViolations)."""
        if req.operation != "UPDATE" or req.old is None or not lp.allows_existing_violations(result.rule):
            return False
        before = evaluate(lp, req.old, admission, exceptions)
        return any(r.rule == result.rule and r.status == result.status for r in before)
