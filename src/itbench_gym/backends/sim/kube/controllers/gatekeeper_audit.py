"""Gatekeeper's audit: every constraint's violations among the objects already in the cluster.

While ``gatekeeper-audit`` is available, an audit runs at once and then every ``--audit-interval``
(60 s, open-policy-agent/gatekeeper v3.17.2 pkg/audit/manager.go): each object is reviewed (as a
request without an operation) against every constraint, whatever its enforcementAction, and each
constraint's status gets ``auditTimestamp`` (RFC 3339), ``totalViolations`` and at most
``--constraint-violations-limit`` (20) ``violations`` entries (enforcementAction, group, version,
kind, namespace, name, message); a constraint without violations loses its list. Namespaces the
``config`` Config excludes for the ``audit`` process are skipped. When the deployment is not
available no audit runs and the statuses keep their last results.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.timestamps import rfc3339
from itbench_gym.policy.gatekeeper import review_of

from ..store import clone
from .base import Context, Controller, Key
from .gatekeeper import AUDIT, NAMESPACE, GatekeeperEngine, enforcement_action
from .kyverno import deployment_available

Obj = dict[str, Any]

AUDIT_INTERVAL_SECONDS = 60.0
VIOLATIONS_LIMIT = 20
#: The audit loop's one key.
LOOP: Key = ("", "audit")


class GatekeeperAuditController(Controller):
    """The audit manager's loop."""

    name = "gatekeeper-audit"

    def __init__(self, ctx: Context, engine: GatekeeperEngine) -> None:
        super().__init__(ctx)
        self.engine = engine
        self._next: float | None = None
        ctx.store.subscribe(self._on_event)

    def _on_event(self, event: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "Deployment" and meta.get("namespace") == NAMESPACE and meta.get("name") == AUDIT:
            self.enqueue(LOOP)

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return ()

    def sync(self, key: Key) -> None:
        if not deployment_available(self.ctx.store, AUDIT, NAMESPACE):
            self._next = None
            return
        now = self.ctx.now()
        if self._next is not None and now < self._next:
            self.requeue_at(LOOP, self._next)
            return
        self._next = now + AUDIT_INTERVAL_SECONDS
        self._audit(now)
        self.requeue_at(LOOP, self._next)

    def _audit(self, now: float) -> None:
        constraints = self.engine.constraints()
        if not constraints:
            return
        store = self.ctx.store
        inventory = self.engine.inventory()
        kinds = self._kinds([c for c, _ in constraints])
        found: dict[str, list[Obj]] = {}
        for rt in store.registry.storage_types():
            if kinds is not None and rt.kind not in kinds:
                continue
            for obj in store.list_stored(rt):
                namespace = str(obj["metadata"].get("namespace") or "")
                if self.engine.exempt(namespace, "audit"):
                    continue
                doc = review_of(obj)
                for constraint, template in constraints:
                    for violation in self.engine.violations(constraint, template, doc, inventory):
                        entry: Obj = {"enforcementAction": enforcement_action(constraint), "group": rt.group,
                                      "version": rt.version, "kind": rt.kind, "name": obj["metadata"]["name"],
                                      "message": violation.msg}
                        if namespace:
                            entry["namespace"] = namespace
                        found.setdefault(constraint["metadata"]["uid"], []).append(entry)
        for constraint, _ in constraints:
            violations = sorted(found.get(constraint["metadata"]["uid"], []),
                                key=lambda v: (v["group"], v["version"], v["kind"], v.get("namespace", ""), v["name"], v["message"]))
            status = clone(constraint.get("status") or {})
            status["auditTimestamp"] = rfc3339(now)
            status["totalViolations"] = len(violations)
            if violations:
                status["violations"] = violations[:VIOLATIONS_LIMIT]
            else:
                status.pop("violations", None)
            self.write_status(constraint, status)

    @staticmethod
    def _kinds(constraints: list[Obj]) -> set[str] | None:
        """The kinds any constraint can match, or None when some constraint names none (all kinds)."""
        out: set[str] = set()
        for constraint in constraints:
            entries = ((constraint.get("spec") or {}).get("match") or {}).get("kinds") or []
            if not entries:
                return None
            for entry in entries:
                listed = [str(k) for k in entry.get("kinds") or []]
                if not listed or "*" in listed:
                    return None
                out.update(listed)
        return out

    def snapshot_state(self) -> Any:
        return self._next

    def restore_state(self, state: Any) -> None:
        self._next = state
