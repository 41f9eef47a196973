"""kube-controller-manager's pvc-protection controller: a claim in use is not deleted until no pod uses it.

StorageObjectInUseProtection admission gives every new claim the ``kubernetes.io/pvc-protection``
finalizer (``admission.admit_create``), so deleting a claim only marks it (``Terminating`` in
``kubectl get pvc``). Upstream (``pkg/controller/volume/pvcprotection``) removes the finalizer once no
scheduled pod that has not finished names the claim among its volumes; a pod's end or deletion
looks at its claims again. Meanwhile the scheduler places no new pod that names the claim
(``scheduler.py``: "is being deleted") and the claim's volume stays bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..admission import PVC_PROTECTION_FINALIZER
from .base import Cache, Controller, Key
from .volumes import claim_names

Obj = dict[str, Any]


def _deleting(claim: Obj) -> bool:
    meta = claim.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and PVC_PROTECTION_FINALIZER in (meta.get("finalizers") or [])


def _uses(pod: Obj, claim: str) -> bool:
    """A pod uses a claim from its scheduling until it has finished (its phase Succeeded or Failed)."""
    return (bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and claim in claim_names(pod))


class PVCProtectionController(Controller):
    name = "pvc-protection"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "PersistentVolumeClaim" and event != "DELETED" and _deleting(obj):
            return [Cache.key_of(obj)]
        if kind == "Pod":  # most pods name no claim: one look at their volumes
            names = claim_names(obj)
            if names and (event == "DELETED" or not any(_uses(obj, name) for name in names)):
                namespace = str(obj["metadata"].get("namespace", ""))
                return [(namespace, name) for name in names]
        return []

    def sync(self, key: Key) -> None:
        namespace, name = key
        claim = self.ctx.cache.get("PersistentVolumeClaim", namespace, name)
        if claim is None or not _deleting(claim):
            return
        if any(_uses(pod, name) for pod in self.ctx.cache.list("Pod", namespace)):
            return
        self.remove_finalizer(claim, PVC_PROTECTION_FINALIZER)
