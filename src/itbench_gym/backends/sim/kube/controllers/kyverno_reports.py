"""Kyverno's reports controller: background scans and the PolicyReports they aggregate into.

Timings and shapes of kyverno/kyverno v1.13.4 (pkg/controllers/report/{background,aggregate},
pkg/utils/report): a resource that is created or changed is scanned 30 s later (the background
controller's ``enqueueDelay``), every resource again each ``--backgroundScanInterval`` (1 h by
default), and all of them at once when a policy or a PolicyException changes. A scan evaluates the
ready policies with ``background`` not false (the ConfigMap's resourceFilters only when the controller does
not run with ``--skipResourceFilters``, the chart's default); an admitted request's audit (the admission controller's
ephemeral report) counts too. Results reach the resource's report 10 s later (the aggregate
controller's ``enqueueDelay``), replacing the earlier results of the policies just evaluated: a
``PolicyReport`` (``ClusterPolicyReport`` for a cluster-scoped resource) named by the resource's uid,
owned by it, labelled ``app.kubernetes.io/managed-by: kyverno``, ``scope`` its ObjectReference,
results sorted by policy and rule and a pass/fail/warn/error/skip ``summary``; a report left without
results is deleted. While ``kyverno-reports-controller`` has no
available replica nothing is scanned or written; when it is back every resource is scanned again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from itbench_gym.policy.kyverno import RuleResult

from ..errors import ApiError
from ..store import clone
from .base import Context, Controller, Key
from .kyverno import (
    NAMESPACE,
    REPORTS_CONTROLLER,
    Config,
    LoadedPolicy,
    PolicyCache,
    deployment_available,
    deployment_flag,
    evaluate,
    is_kyverno_policy,
    is_policy_exception,
    namespace_admission,
    rule_kinds,
    served_types,
)

Obj = dict[str, Any]

SCAN_DELAY_SECONDS = 30.0
AGGREGATE_DELAY_SECONDS = 10.0
SCAN_INTERVAL_SECONDS = 3600.0
REPORT_API_VERSION = "wgpolicyk8s.io/v1alpha2"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kyverno"}
STATUSES = ("pass", "fail", "warn", "error", "skip")
#: The key that rescans everything (resources are keyed by namespace and uid).
EVERYTHING: Key = ("", "")


def _fingerprint(obj: Obj) -> int:
    """What a rescan depends on: labels, annotations and everything but metadata and status."""
    meta = obj.get("metadata") or {}
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return hash(json.dumps([meta.get("labels"), meta.get("annotations"), body], sort_keys=True, default=str))


class KyvernoReportsController(Controller):
    """Scans resources against background policies and keeps their PolicyReports."""

    name = "kyverno-reports"

    def __init__(self, ctx: Context, cache: PolicyCache) -> None:
        super().__init__(ctx)
        self.cache = cache
        #: uid -> (apiVersion, kind, namespace, name) of every resource a policy's kinds name
        self._targets: dict[str, tuple[str, str, str, str]] = {}
        self._fingerprints: dict[str, int] = {}
        self._scan_at: dict[str, float] = {}
        self._write_at: dict[str, float] = {}
        #: uid -> (policies whose earlier results the new ones replace, results awaiting aggregation)
        self._pending: dict[str, tuple[set[str], list[Obj]]] = {}
        self._kinds: set[str] | None = None
        ctx.store.subscribe(self._on_event)

    # -- events -------------------------------------------------------------------------------

    def _on_event(self, event: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if is_kyverno_policy(obj) or is_policy_exception(obj):
            self._kinds = None
            self.enqueue(EVERYTHING)
            return
        if obj.get("kind") == "Deployment" and meta.get("namespace") == NAMESPACE and meta.get("name") == REPORTS_CONTROLLER:
            self.enqueue(EVERYTHING)
            return
        uid = str(meta.get("uid") or "")
        if event == "DELETED":
            self._forget(uid)
            return
        if obj.get("kind") not in self._policy_kinds():
            return
        fingerprint = _fingerprint(obj)
        if self._fingerprints.get(uid) == fingerprint:
            return
        self._fingerprints[uid] = fingerprint
        self._track(obj)
        self._due(self._scan_at, uid, self.ctx.now() + SCAN_DELAY_SECONDS)

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return ()

    def record_admission(self, resource: Obj, results: list[tuple[LoadedPolicy, RuleResult]]) -> None:
        """The admission controller's audit of an allowed request (its ephemeral report)."""
        uid = str((resource.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        self._track(resource)
        now = self.ctx.now()
        self._add_pending(uid, set(), [lp.report_result(r, now) for lp, r in results])

    # -- bookkeeping --------------------------------------------------------------------------

    def _policy_kinds(self) -> set[str]:
        if self._kinds is None:
            self._kinds = {rt.kind for lp in self.cache.policies() for rule in lp.policy.rules
                           for selector in rule_kinds(rule, ()) for rt in served_types(self.ctx.store, selector)}
        return self._kinds

    def _track(self, obj: Obj) -> None:
        meta = obj["metadata"]
        self._targets[str(meta["uid"])] = (str(obj.get("apiVersion", "")), str(obj.get("kind", "")),
                                           str(meta.get("namespace") or ""), str(meta["name"]))

    def _forget(self, uid: str) -> None:
        for table in (self._targets, self._fingerprints, self._scan_at, self._write_at, self._pending):
            table.pop(uid, None)

    def _key(self, uid: str) -> Key:
        return (self._targets[uid][2], uid)

    def _due(self, table: dict[str, float], uid: str, at: float) -> None:
        if table.get(uid, at + 1) > at:
            table[uid] = at
        self.requeue_at(self._key(uid), at)

    def _add_pending(self, uid: str, scanned: set[str], results: list[Obj]) -> None:
        before, earlier = self._pending.get(uid, (set(), []))
        self._pending[uid] = (before | scanned, earlier + results)
        self._due(self._write_at, uid, self.ctx.now() + AGGREGATE_DELAY_SECONDS)

    # -- sync ---------------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        if not deployment_available(self.ctx.store, REPORTS_CONTROLLER):
            return
        now = self.ctx.now()
        if key == EVERYTHING:
            self._discover()
            for uid in list(self._targets):
                self._scan_at[uid] = now
                self.enqueue(self._key(uid))
            return
        uid = key[1]
        if uid not in self._targets:
            return
        if self._scan_at.get(uid, now + 1) <= now:
            self._scan(uid, now)
        if uid in self._targets and self._write_at.get(uid, now + 1) <= now:
            del self._write_at[uid]
            self._aggregate(uid, now)
        if uid in self._targets:
            upcoming = [t[uid] for t in (self._scan_at, self._write_at) if uid in t]
            if upcoming:
                self.requeue_at(key, min(upcoming))

    def _discover(self) -> None:
        kinds = self._policy_kinds()
        for rt in self.ctx.store.registry.storage_types():
            if rt.kind not in kinds:
                continue
            for obj in self.ctx.store.list_stored(rt):
                uid = str(obj["metadata"].get("uid") or "")
                if uid and uid not in self._targets:
                    self._fingerprints[uid] = _fingerprint(obj)
                    self._track(obj)

    def _resource(self, uid: str) -> Obj | None:
        api_version, kind, namespace, name = self._targets[uid]
        try:
            obj = self.ctx.store.get_stored(self.ctx.store.registry.by_kind(kind, api_version), namespace or None, name)
        except ApiError:
            return None
        return obj if obj["metadata"].get("uid") == uid else None

    def _scan(self, uid: str, now: float) -> None:
        self._scan_at[uid] = now + SCAN_INTERVAL_SECONDS
        resource = self._resource(uid)
        if resource is None:
            self._forget(uid)
            return
        _, kind, namespace, name = self._targets[uid]
        skip_filters = deployment_flag(self.ctx.store, REPORTS_CONTROLLER, "--skipResourceFilters") == "true"
        if not skip_filters and Config.load(self.ctx.store).filtered(kind, "", namespace, name):
            return
        admission = namespace_admission(self.ctx.store, namespace, operation="CREATE")
        exceptions = self.cache.exceptions(REPORTS_CONTROLLER)
        scanned: set[str] = set()
        results: list[Obj] = []
        for lp in self.cache.policies():
            if not (lp.ready and lp.background) or lp.policy.namespace and lp.policy.namespace != namespace:
                continue
            scanned.add(lp.key)
            results += [lp.report_result(r, now) for r in evaluate(lp, resource, admission, exceptions)]
        self._add_pending(uid, scanned, results)

    def _aggregate(self, uid: str, now: float) -> None:
        scanned, fresh = self._pending.pop(uid, (set(), []))
        resource = self._resource(uid)
        if resource is None:
            self._forget(uid)
            return
        api_version, kind, namespace, name = self._targets[uid]
        report_kind = "PolicyReport" if namespace else "ClusterPolicyReport"
        store = self.ctx.store
        try:
            current: Obj | None = store.get(report_kind, namespace or None, uid, REPORT_API_VERSION)
        except ApiError:
            current = None
        merged = {(r.get("policy"), r.get("rule")): r for r in (current or {}).get("results") or []
                  if r.get("policy") not in scanned}
        merged.update({(r["policy"], r["rule"]): r for r in fresh})
        live = {lp.key for lp in self.cache.policies()}
        results = [r for k, r in sorted(merged.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))) if k[0] in live]
        if not results:
            if current is not None:
                store.delete(report_kind, namespace or None, uid, api_version=REPORT_API_VERSION)
            return
        scope: Obj = {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}
        if namespace:
            scope["namespace"] = namespace
        summary = {s: sum(1 for r in results if r.get("result") == s) for s in STATUSES}
        if current is None:
            meta: Obj = {"name": uid, "labels": dict(MANAGED_BY),
                         "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid}]}
            if namespace:
                meta["namespace"] = namespace
            store.create({"apiVersion": REPORT_API_VERSION, "kind": report_kind, "metadata": meta,
                          "scope": scope, "results": results, "summary": summary})
            return
        if current.get("results") == results and current.get("summary") == summary:
            return
        updated = clone(current)
        updated.update({"scope": scope, "results": results, "summary": summary})
        store.update(updated)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_state(self) -> Any:
        return clone({"targets": self._targets, "fingerprints": self._fingerprints, "scan_at": self._scan_at,
                      "write_at": self._write_at, "pending": {u: (set(s), list(r)) for u, (s, r) in self._pending.items()}})

    def restore_state(self, state: Any) -> None:
        state = state or {}
        self._targets = dict(state.get("targets") or {})
        self._fingerprints = dict(state.get("fingerprints") or {})
        self._scan_at = dict(state.get("scan_at") or {})
        self._write_at = dict(state.get("write_at") or {})
        self._pending = {u: (set(s), clone(r)) for u, (s, r) in (state.get("pending") or {}).items()}
        self._kinds = None
