"""kube-controller-manager's service-account controller: a ``default`` ServiceAccount in every namespace.

Upstream (``pkg/controller/serviceaccount/serviceaccounts_controller.go``) syncs a namespace when it is
added or changes and when one of its ServiceAccounts is deleted: a namespace that is not terminating
gets each ServiceAccount of the controller's list it lacks — by default only ``default``. So a pod's
``serviceAccountName: default`` (what admission fills in) names an object ``kubectl get sa`` shows, and
deleting it brings it back.
"""

from __future__ import annotations

from typing import Any

from ..errors import ApiError
from .base import Key, NamespaceController

Obj = dict[str, Any]

#: The ServiceAccounts every namespace gets (upstream's ``DefaultServiceAccountsControllerOptions``).
DEFAULT_ACCOUNTS = ("default",)


class ServiceAccountsController(NamespaceController):
    name = "serviceaccount"

    def resyncs(self, event: str, kind: str, meta: Obj) -> bool:
        return kind == "ServiceAccount" and event == "DELETED" and meta.get("name") in DEFAULT_ACCOUNTS

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
