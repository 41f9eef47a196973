"""kube-controller-manager's root-ca-cert-publisher: a ``kube-root-ca.crt`` ConfigMap in every namespace.

Upstream (``pkg/controller/certificates/rootcacertpublisher/publisher.go``) syncs a namespace when it is
added or changes, and when its ``kube-root-ca.crt`` ConfigMap changes or is deleted: a missing one is
created with the API server's CA bundle under ``ca.crt`` and a ``kubernetes.io/description``
annotation; one whose data or annotation differ gets them back (other changes stay). A pod's
``kube-api-access-*`` volume projects its ``ca.crt`` (``admission.py``), so the kubelet cannot mount
it until the ConfigMap exists.
"""

from __future__ import annotations

from typing import Any

from ..admission import ROOT_CA_CONFIG_MAP
from ..errors import ApiError
from ..store import clone
from .base import Context, Key, NamespaceController

Obj = dict[str, Any]

DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints "
               "such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across "
               "distributions of Kubernetes clusters.")


class RootCAPublisher(NamespaceController):
    name = "root-ca-cert-publisher"

    def __init__(self, ctx: Context, root_ca: str) -> None:
        self._data = {"ca.crt": root_ca}
        super().__init__(ctx)

    def resyncs(self, event: str, kind: str, meta: Obj) -> bool:
        return kind == "ConfigMap" and event != "ADDED" and meta.get("name") == ROOT_CA_CONFIG_MAP

    def sync(self, key: Key) -> None:
        namespace = key[1]
        current = self.ctx.cache.get("ConfigMap", namespace, ROOT_CA_CONFIG_MAP)
        try:
            if current is None:
                self.ctx.store.create({"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": ROOT_CA_CONFIG_MAP, "namespace": namespace,
                                                    "annotations": {DESCRIPTION_ANNOTATION: DESCRIPTION}},
                                       "data": dict(self._data)})
                return
            annotations = (current.get("metadata") or {}).get("annotations") or {}
            if current.get("data") == self._data and annotations.get(DESCRIPTION_ANNOTATION):
                return
            fixed = clone(current)
            fixed["data"] = dict(self._data)
            fixed["metadata"].setdefault("annotations", {})[DESCRIPTION_ANNOTATION] = DESCRIPTION
            self.ctx.store.update(fixed)
        except ApiError as e:
            # NotFound / Forbidden: the namespace is gone or terminating (upstream does not retry);
            # AlreadyExists / Conflict: written meanwhile, and that write's event syncs again
            if e.code not in (403, 404, 409):
                raise
