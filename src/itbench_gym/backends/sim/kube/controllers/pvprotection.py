"""kube-controller-manager's pv-protection controller: a volume bound to a claim is not deleted.

StorageObjectInUseProtection admission gives every new PersistentVolume the
``kubernetes.io/pv-protection`` finalizer (``admission.admit_create``), so deleting a volume only marks
it. Upstream (``pkg/controller/volume/pvprotection``) removes the finalizer once the volume is not
``Bound`` (its claim gone: ``Released``, or never claimed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..admission import PV_PROTECTION_FINALIZER
from .base import Controller, Key

Obj = dict[str, Any]


class PVProtectionController(Controller):
    name = "pv-protection"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        meta = obj.get("metadata") or {}
        if kind == "PersistentVolume" and event != "DELETED" and meta.get("deletionTimestamp") \
                and PV_PROTECTION_FINALIZER in (meta.get("finalizers") or []):
            return [("", str(meta.get("name", "")))]
        return []

    def sync(self, key: Key) -> None:
        volume = self.ctx.cache.get("PersistentVolume", "", key[1])
        if volume is None or (volume.get("status") or {}).get("phase") == "Bound":
            return
        meta = volume.get("metadata") or {}
        if not meta.get("deletionTimestamp") or PV_PROTECTION_FINALIZER not in (meta.get("finalizers") or []):
            return
        self.remove_finalizer(volume, PV_PROTECTION_FINALIZER)
