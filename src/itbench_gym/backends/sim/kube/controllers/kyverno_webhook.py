"""Kyverno's webhook controller: the webhook configurations and the policies' status.

While ``kyverno-admission-controller`` is available it keeps two ValidatingWebhookConfigurations
(kyverno/kyverno v1.13.4 pkg/controllers/webhook): ``kyverno-policy-validating-webhook-cfg``
(``validate-policy.kyverno.svc`` for clusterpolicies/policies, CREATE and UPDATE, failurePolicy Fail)
and ``kyverno-resource-validating-webhook-cfg``, whose webhooks ``validate.kyverno.svc-ignore`` and
``validate.kyverno.svc-fail`` carry the rules of the policies with that failurePolicy (the kinds of
every rule, autogen ones included, as group/version/resources rules with CREATE, UPDATE, DELETE and
CONNECT unless a rule names operations; no policy, no webhook). Both use the ConfigMap's
``namespaceSelector`` and ``webhookAnnotations``. It then writes each policy's status: the Ready
condition (``Succeeded``/``Ready``), ``rulecount`` and the autogen rules in ``status.autogen.rules``.
While the admission controller is down nothing is updated and the configurations stay in place, so
requests they match meet an unreachable webhook and its failurePolicy.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.timestamps import rfc3339
from itbench_gym.policy.kyverno.autogen import expand_rules

from ..errors import ApiError
from ..store import clone
from ..webhooks import WebhookDispatcher
from .base import Context, Controller, Key
from .kyverno import (
    ADMISSION_CONTROLLER,
    CONFIGMAP,
    FAILURE_POLICIES,
    GROUP,
    NAMESPACE,
    POLICY_VALIDATE_PATH,
    SERVICE,
    VALIDATE_PATH,
    Config,
    KyvernoAdmission,
    LoadedPolicy,
    PolicyCache,
    deployment_available,
    is_kyverno_policy,
    kind_selector,
    rule_kinds,
    served_types,
)

Obj = dict[str, Any]

RESOURCE_CONFIG = "kyverno-resource-validating-webhook-cfg"
POLICY_CONFIG = "kyverno-policy-validating-webhook-cfg"
RESOURCE_WEBHOOK = "validate.kyverno.svc"
POLICY_WEBHOOK = "validate-policy.kyverno.svc"
MANAGED_BY = {"webhook.kyverno.io/managed-by": "kyverno"}
ALL_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
TIMEOUT_SECONDS = 10
#: The key of the webhook configurations (policies are keyed by namespace and name).
WEBHOOKS: Key = ("", "")


class KyvernoWebhookController(Controller):
    """The admission controller's webhook and policy-status reconciler."""

    name = "kyverno-webhook"

    def __init__(self, ctx: Context, dispatcher: WebhookDispatcher, cache: PolicyCache, admission: KyvernoAdmission) -> None:
        super().__init__(ctx)
        self.cache = cache
        admission.register(dispatcher)
        ctx.store.subscribe(self._on_event)

    def _on_event(self, event: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if is_kyverno_policy(obj):
            self.enqueue(WEBHOOKS)
            self.enqueue((meta.get("namespace") or "", meta["name"]))
        elif meta.get("namespace") == NAMESPACE and (
                obj.get("kind") in ("Deployment", "Endpoints") and meta.get("name") in (ADMISSION_CONTROLLER, SERVICE)
                or obj.get("kind") == "ConfigMap" and meta.get("name") == CONFIGMAP):
            self.enqueue(WEBHOOKS)

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return ()

    def sync(self, key: Key) -> None:
        if not deployment_available(self.ctx.store, ADMISSION_CONTROLLER):
            return
        policies = self.cache.policies()
        if key == WEBHOOKS:
            config = Config.load(self.ctx.store)
            self._write_config(self._config(POLICY_CONFIG, config, [self._policy_webhook(config)]))
            self._write_config(self._config(RESOURCE_CONFIG, config, self._resource_webhooks(config, policies)))
            for lp in policies:
                self.enqueue((lp.policy.namespace or "", lp.policy.name))
            return
        found = next((p for p in policies if (p.policy.namespace or "", p.policy.name) == key), None)
        if found is not None:
            self._write_status(found)

    # -- webhook configurations ---------------------------------------------------------------

    def _config(self, name: str, config: Config, webhooks: list[Obj]) -> Obj:
        meta: Obj = {"name": name, "labels": dict(MANAGED_BY)}
        if config.annotations:
            meta["annotations"] = dict(config.annotations)
        return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": meta, "webhooks": webhooks}

    @staticmethod
    def _client(path: str) -> Obj:
        return {"service": {"namespace": NAMESPACE, "name": SERVICE, "path": path, "port": 443}}

    def _policy_webhook(self, config: Config) -> Obj:
        return {"name": POLICY_WEBHOOK, "clientConfig": self._client(POLICY_VALIDATE_PATH),
                "rules": [{"apiGroups": [GROUP], "apiVersions": ["v1", "v2beta1"],
                           "resources": ["clusterpolicies", "policies"], "operations": ["CREATE", "UPDATE"], "scope": "*"}],
                "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "None",
                "timeoutSeconds": TIMEOUT_SECONDS, "admissionReviewVersions": ["v1"],
                "namespaceSelector": {}, "objectSelector": {}}

    def _resource_webhooks(self, config: Config, policies: list[LoadedPolicy]) -> list[Obj]:
        out = []
        for failure, suffix in sorted(FAILURE_POLICIES.items(), key=lambda kv: kv[1] != "ignore"):
            grouped: dict[tuple[str, str, str, tuple[str, ...]], set[str]] = {}
            for lp in policies:
                if lp.failure_policy != failure or not lp.admission:
                    continue
                for rule in lp.policy.rules:
                    for selector, ops in rule_kinds(rule, ALL_OPERATIONS).items():
                        for group, version, resource, scope in self._resources(selector, bool(lp.policy.namespace)):
                            key = (group, version, scope, tuple(o for o in ALL_OPERATIONS if o in ops))
                            grouped.setdefault(key, set()).add(resource)
            if not grouped:
                continue
            rules = [{"apiGroups": [g], "apiVersions": [v], "operations": list(ops), "resources": sorted(res), "scope": scope}
                     for (g, v, scope, ops), res in sorted(grouped.items())]
            out.append({"name": f"{RESOURCE_WEBHOOK}-{suffix}", "clientConfig": self._client(f"{VALIDATE_PATH}/{suffix}"),
                        "rules": rules, "failurePolicy": failure, "matchPolicy": "Equivalent",
                        "sideEffects": "NoneOnDryRun", "timeoutSeconds": TIMEOUT_SECONDS,
                        "admissionReviewVersions": ["v1"], "namespaceSelector": copy.deepcopy(config.webhook.get("namespaceSelector") or {}),
                        "objectSelector": copy.deepcopy(config.webhook.get("objectSelector") or {})})
        return out

    def _resources(self, selector: str, namespaced_policy: bool) -> list[tuple[str, str, str, str]]:
        """(group, version, resource, scope) the API serves for a kinds entry (discovery, upstream)."""
        group, version, kind, sub = kind_selector(selector)
        if kind == "*":
            return [(group, version, f"*/{sub}" if sub else "*", "Namespaced" if namespaced_policy else "*")]
        out = []
        for rt in served_types(self.ctx.store, selector):
            scope = "Namespaced" if rt.namespaced else "*"
            if sub:
                out.append((rt.group, rt.version, f"{rt.plural}/{sub}", scope))
                continue
            out.append((rt.group, rt.version, rt.plural, scope))
            if rt.group == "" and rt.kind == "Pod":  # ephemeral containers are added with every pod rule
                out.append((rt.group, rt.version, "pods/ephemeralcontainers", scope))
        return out

    def _write_config(self, desired: Obj) -> None:
        store = self.ctx.store
        name = desired["metadata"]["name"]
        try:
            current = store.get("ValidatingWebhookConfiguration", None, name)
        except ApiError:
            store.create(desired)
            return
        if current.get("webhooks") == desired["webhooks"] and all(
                current["metadata"].get(k) == desired["metadata"].get(k) for k in ("labels", "annotations")):
            return
        updated = clone(current)
        updated["webhooks"] = desired["webhooks"]
        for k in ("labels", "annotations"):
            if k in desired["metadata"]:
                updated["metadata"][k] = desired["metadata"][k]
        store.update(updated)

    # -- policy status ------------------------------------------------------------------------

    def _write_status(self, lp: LoadedPolicy) -> None:
        status = clone(lp.raw.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        if ready is None or ready.get("status") != "True":
            ready = {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "Ready",
                     "lastTransitionTime": rfc3339(self.ctx.now())}
        status["conditions"] = [ready, *conditions]
        status.pop("ready", None)
        rules = expand_rules(lp.raw)
        plain = [r for r in rules if not str(r.get("name", "")).startswith("autogen-")]
        status["rulecount"] = {k: sum(1 for r in plain if key in r) for k, key in (
            ("validate", "validate"), ("generate", "generate"), ("mutate", "mutate"), ("verifyimages", "verifyImages"))}
        autogen = [r for r in rules if str(r.get("name", "")).startswith("autogen-")]
        status["autogen"] = {"rules": autogen} if autogen else {}
        status.setdefault("validatingadmissionpolicy", {"generated": False, "message": ""})
        self.write_status(lp.raw, status)
