"""kube-controller-manager's service-account controller: a ``default`` ServiceAccount in every namespace.

Upstream (``pkg/controller/serviceaccount/serviceaccounts_controller.go``) syncs a namespace when it is
added or changes and when one of its ServiceAccounts is deleted: a namespace that is not terminating
gets each ServiceAccount of the controller's list it lacks — by default only ``default``. So a pod's
``serviceAccountName: default`` (what admission fills in) names an object ``kubectl get sa`` shows, and
deleting it brings it back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ApiError
from .base import Context, Controller, Key

Obj = dict[str, Any]

#: The ServiceAccounts every namespace gets (upstream's ``DefaultServiceAccountsControllerOptions``).
DEFAULT_ACCOUNTS = ("default",)


class ServiceAccountsController(Controller):
    name = "serviceaccount"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        for namespace in ctx.store.namespaces():  # the informer's initial list: namespaces made before it ran
            self.enqueue(("", namespace))

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj.get("metadata") or {}
        if kind == "Namespace" and event != "DELETED":
            return [("", str(meta.get("name", "")))]
        if kind == "ServiceAccount" and event == "DELETED" and meta.get("name") in DEFAULT_ACCOUNTS:
            return [("", str(meta.get("namespace", "")))]
        return []

    def sync(self, key: Key) -> None:
        namespace = key[1]
        ns = self.ctx.cache.get("Namespace", None, namespace)
        if ns is None or (ns.get("metadata") or {}).get("deletionTimestamp") or (ns.get("status") or {}).get("phase") == "Terminating":
            return
        for name in DEFAULT_ACCOUNTS:
            if self.ctx.cache.get("ServiceAccount", namespace, name) is not None:
                continue
            try:
                self.ctx.store.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
            except ApiError as e:
                if e.code not in (403, 409):  # Forbidden: the namespace is terminating; AlreadyExists: made meanwhile
                    raise
