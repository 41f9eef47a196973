"""PersistentVolumeClaim binding: kube-controller-manager's pv-controller plus a dynamic provisioner.

A claim that cannot bind keeps its pods Pending ("pod has unbound immediate PersistentVolumeClaims")
and says why in its own events, so the agent finds the cause from the pod, the claim or the class.
Upstream's order is followed: a claim binds to the smallest Available volume of its class that
satisfies its size and access modes; otherwise, when its StorageClass exists, the class's
provisioner makes a volume ``pvc-<claim uid>`` (for ``WaitForFirstConsumer`` classes only once the
scheduler has picked a node, annotation ``volume.kubernetes.io/selected-node``); a class that does
not exist is a ``ProvisioningFailed`` warning with the API's not-found text. A claim without
``storageClassName`` gets the default class (``storageclass.kubernetes.io/is-default-class``), as
the retroactive default-class assignment does.

Volumes are synced too (upstream ``syncVolume``), so a claim's end is visible on its volume: once the
claim a volume's ``claimRef`` names is gone (or is a new claim of that name, another uid) the volume
is ``Released``, keeping its ``claimRef``, and its ``persistentVolumeReclaimPolicy`` decides the rest:
``Retain`` (the API's default for a volume) leaves it Released until an admin deletes it or clears
its ``claimRef`` (then it is ``Available`` again); ``Delete`` (what the provisioner copies from the
class's ``reclaimPolicy``, default Delete) deletes it, the external provisioner that made it doing
so silently, while a volume the controller must delete itself fails as the in-tree deleters do
(``VolumeFailedDelete``, phase ``Failed``: hostPath only under ``/tmp/``, no other source). The
deprecated ``Recycle`` is reported as upstream does for a volume no recycler plugin takes
(``VolumeFailedRecycle``, ``Failed``): the scrub pod the hostPath/NFS recyclers run is not modelled.
A claim or volume deleted while in use stays (``Terminating``) until it is not: the
``kubernetes.io/pvc-protection``/``pv-protection`` finalizers and their controllers
(``pvcprotection.py``, ``pvprotection.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from itbench_gym.lang.timestamps import rfc3339

from ..errors import ApiError, is_storage_error
from ..store import clone
from .base import Cache, Controller, Key
from .util import quantity

Obj = dict[str, Any]

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
#: The pv-controller's resync: claims that could not bind are looked at again this often.
RESYNC_SECONDS = 15.0
_PV_CONTROLLER = "persistentvolume-controller"
PROVISIONED_BY_ANNOTATION = "pv.kubernetes.io/provisioned-by"
#: The in-tree hostPath deleter's only accepted paths (``hostPathDeleter.Delete``).
_HOST_PATH_DELETABLE = re.compile("/tmp/.+")


def claim_names(pod: Obj) -> list[str]:
    """The PersistentVolumeClaims a pod's volumes name, in volume order."""
    return [str(v["persistentVolumeClaim"]["claimName"]) for v in (pod.get("spec") or {}).get("volumes") or []
            if (v.get("persistentVolumeClaim") or {}).get("claimName")]


def default_class(cache: Cache) -> Obj | None:
    """The default StorageClass (the newest when several claim to be, as upstream picks)."""
    defaults = [sc for sc in cache.list("StorageClass")
                if ((sc.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"]
    return max(defaults, key=lambda sc: (sc["metadata"].get("creationTimestamp") or "", sc["metadata"]["name"]),
               default=None)


def waits_for_consumer(cache: Cache, claim: Obj) -> bool:
    """Upstream ``IsDelayBindingMode``: the claim's class exists and binds on first consumer."""
    name = (claim.get("spec") or {}).get("storageClassName")
    sc = cache.get("StorageClass", "", name) if name else default_class(cache)
    return sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"


def _bound(claim: Obj) -> bool:
    return bool((claim.get("spec") or {}).get("volumeName")) and (claim.get("status") or {}).get("phase") == "Bound"


def _phase(pv: Obj) -> str:
    return str((pv.get("status") or {}).get("phase") or "")


def _provisioner(pv: Obj) -> str:
    return str(((pv.get("metadata") or {}).get("annotations") or {}).get(PROVISIONED_BY_ANNOTATION) or "")


def _external_deleter(pv: Obj) -> bool:
    """Upstream ``findDeletablePlugin``: a volume an out-of-tree provisioner made is that provisioner's to delete."""
    by = _provisioner(pv)
    return bool(by) and not by.startswith("kubernetes.io/")


def _delete_failure(pv: Obj) -> str | None:
    """Why the in-tree deleter cannot delete ``pv`` (None: it can), in the controller's words."""
    host_path = (pv.get("spec") or {}).get("hostPath")
    if host_path is None:
        return f'error getting deleter volume plugin for volume "{pv["metadata"]["name"]}": no deletable volume plugin matched'
    path = str(host_path.get("path") or "")
    if not _HOST_PATH_DELETABLE.search(path):
        return f"host_path deleter only supports /tmp/.+ but received provided {path}"
    return None


def _requested(claim: Obj) -> Decimal:
    return quantity((((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", "0"))


class VolumeBinderController(Controller):
    """Binds claims to volumes, provisioning them for their StorageClass."""

    name = "persistentvolume"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        """Claims by their (namespace, name), volumes (cluster-scoped) by ("", name): the keys cannot clash."""
        if kind == "PersistentVolumeClaim":
            if event != "DELETED":
                return [Cache.key_of(obj)]
            # upstream ``deleteClaim`` syncs the claim's volume at once rather than at the next resync
            meta = obj["metadata"]
            return [Cache.key_of(pv) for pv in self.ctx.cache.list("PersistentVolume")
                    if pv["metadata"]["name"] == (obj.get("spec") or {}).get("volumeName")
                    or _claim_ref_names(pv, meta.get("namespace"), meta["name"])]
        if kind in ("PersistentVolume", "StorageClass"):  # a volume or class appeared: pending claims retry
            keys = [Cache.key_of(c) for c in self.ctx.cache.list("PersistentVolumeClaim") if not _bound(c)]
            if kind == "PersistentVolume" and event != "DELETED":
                keys.append(Cache.key_of(obj))
            return keys
        return ()

    def sync(self, key: Key) -> None:
        if not key[0]:
            self._sync_volume(key[1])
            return
        claim = self.ctx.cache.get("PersistentVolumeClaim", *key)
        if claim is None or _bound(claim) or (claim.get("metadata") or {}).get("deletionTimestamp"):
            return
        spec = claim.get("spec") or {}
        if "storageClassName" not in spec:
            sc = default_class(self.ctx.cache)
            if sc is not None:
                updated = clone(claim)
                updated["spec"]["storageClassName"] = sc["metadata"]["name"]
                self.ctx.store.update(updated)
            return  # the update comes back as an event
        class_name = str(spec.get("storageClassName") or "")
        volume = self._matching_volume(claim, class_name)
        if volume is not None:
            self._bind(claim, volume)
            return
        if not class_name:
            self._pending(claim, "Normal", "FailedBinding", "no persistent volumes available for this claim and no "
                          "storage class is set")
            return
        sc = self.ctx.cache.get("StorageClass", "", class_name)
        if sc is None:
            self._pending(claim, "Warning", "ProvisioningFailed",
                          f'storageclass.storage.k8s.io "{class_name}" not found')
            return
        annotations = (claim.get("metadata") or {}).get("annotations") or {}
        node = annotations.get(SELECTED_NODE_ANNOTATION)
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not node:
            self._pending(claim, "Normal", "WaitForFirstConsumer",
                          "waiting for first consumer to be created before binding")
            return
        self._bind(claim, self._provision(claim, sc, node))

    def _pending(self, claim: Obj, type_: str, reason: str, message: str) -> None:
        self.ctx.recorder.record(claim, type_, reason, message, component=_PV_CONTROLLER)
        self.requeue_at(Cache.key_of(claim), self.ctx.now() + RESYNC_SECONDS)

    def _matching_volume(self, claim: Obj, class_name: str) -> Obj | None:
        """The smallest Available volume of the class with room and the access modes wanted."""
        want = _requested(claim)
        modes = set((claim.get("spec") or {}).get("accessModes") or [])
        meta = claim["metadata"]
        fits = []
        for pv in self.ctx.store.list("PersistentVolume"):
            pspec = pv.get("spec") or {}
            ref = pspec.get("claimRef") or {}
            if ref and ((ref.get("namespace"), ref.get("name")) != (meta.get("namespace"), meta["name"])
                        or ref.get("uid") not in (None, "", meta.get("uid"))):
                continue  # upstream ``IsVolumeBoundToClaim``: reserved for another claim, or an earlier one of this name
            if (pv.get("status") or {}).get("phase", "Available") != "Available":
                continue
            if str(pspec.get("storageClassName") or "") != class_name or not modes <= set(pspec.get("accessModes") or []):
                continue
            size = quantity((pspec.get("capacity") or {}).get("storage", "0"))
            if size >= want:
                fits.append((size, pv["metadata"]["name"], pv))
        return min(fits, key=lambda f: (f[0], f[1]))[2] if fits else None

    def _provision(self, claim: Obj, sc: Obj, node: str | None) -> Obj:
        meta = claim["metadata"]
        name = f"pvc-{meta.get('uid', '')}"
        spec = claim.get("spec") or {}
        pv_spec: Obj = {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "0")},
            "accessModes": list(spec.get("accessModes") or []),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
            "storageClassName": sc["metadata"]["name"],
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "hostPath": {"path": f"/var/local-path-provisioner/{name}_{meta.get('namespace')}_{meta['name']}",
                         "type": "DirectoryOrCreate"},
        }
        if node:
            pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        pv = {"apiVersion": "v1", "kind": "PersistentVolume",
              "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": sc.get("provisioner", "")}},
              "spec": pv_spec}
        try:
            made = self.ctx.store.create(pv)
        except ApiError as e:
            if e.code != 409:
                raise
            made = self.ctx.store.get("PersistentVolume", None, name)
        self.ctx.recorder.record(claim, "Normal", "ProvisioningSucceeded",
                                 f"Successfully provisioned volume {name}", component=str(sc.get("provisioner", "")))
        return made

    def _bind(self, claim: Obj, volume: Obj) -> None:
        meta = claim["metadata"]
        pv = clone(volume)
        pv["spec"]["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": meta["name"],
                                  "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                                  "resourceVersion": meta.get("resourceVersion")}
        try:
            pv = self.ctx.store.update(pv)
            self._set_phase(pv, "Bound")
            bound = clone(claim)
            bound["spec"]["volumeName"] = volume["metadata"]["name"]
            bound.setdefault("metadata", {}).setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
            bound = self.ctx.store.update(bound)
        except ApiError as e:
            if e.code in (404, 409) or is_storage_error(e):
                self.requeue_at(Cache.key_of(claim), self.ctx.now() + RESYNC_SECONDS)
                return
            raise
        pv_spec = pv.get("spec") or {}
        self.write_status(bound, {"phase": "Bound", "accessModes": list(pv_spec.get("accessModes") or []),
                                  "capacity": dict(pv_spec.get("capacity") or {})})

    # -- volumes: upstream syncVolume and reclaimVolume ------------------------------------------

    def _sync_volume(self, name: str) -> None:
        pv = self.ctx.cache.get("PersistentVolume", "", name)
        if pv is None:  # a volume being deleted is still synced: its phase is what lets pv-protection free it
            return
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if not ref or not ref.get("uid"):  # unused, or pre-bound to a claim the claim sync will bind
            self._set_phase(pv, "Available")
            return
        claim = self.ctx.cache.get("PersistentVolumeClaim", ref.get("namespace"), str(ref.get("name") or ""))
        if claim is not None and claim["metadata"].get("uid") != ref.get("uid"):
            claim = None  # a new claim of the old name: the volume's own claim is gone
        if claim is not None:
            bound_to = (claim.get("spec") or {}).get("volumeName")
            if bound_to == name:
                self._set_phase(pv, "Bound")
            elif bound_to and _provisioner(pv) and self._policy(pv) == "Delete":
                self._release(pv)  # provisioned for a claim that got bound elsewhere: not needed
            # no volumeName yet: the claim's own sync completes the binding
            return
        self._release(pv)

    @staticmethod
    def _policy(pv: Obj) -> str:
        """The reclaim policy, "Retain" when unset (the API's default for a PersistentVolume)."""
        return str((pv.get("spec") or {}).get("persistentVolumeReclaimPolicy") or "Retain")

    def _release(self, pv: Obj) -> None:
        """The claim is gone: Released (a Failed volume stays Failed), then the reclaim policy acts."""
        if _phase(pv) not in ("Released", "Failed"):
            updated = self._set_phase(pv, "Released")
            if updated is None:
                return
            pv = updated
        policy = self._policy(pv)
        if policy == "Retain":
            return
        if policy == "Recycle":
            self._fail(pv, "VolumeFailedRecycle", "No recycler plugin found for the volume!")
            return
        if policy != "Delete":
            self._fail(pv, "VolumeUnknownReclaimPolicy", "Volume has unrecognized PersistentVolumeReclaimPolicy")
            return
        problem = None if _external_deleter(pv) else _delete_failure(pv)
        if problem is not None:
            self._fail(pv, "VolumeFailedDelete", problem)
            return
        try:
            self.ctx.store.delete("PersistentVolume", None, pv["metadata"]["name"],
                                  preconditions={"uid": str(pv["metadata"].get("uid", ""))})
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    def _fail(self, pv: Obj, reason: str, message: str) -> None:
        """``updateVolumePhaseWithEvent``: the event only when the phase changes, not on every retry."""
        if _phase(pv) == "Failed":
            return
        if self._set_phase(pv, "Failed", message) is not None:
            self.ctx.recorder.record(pv, "Warning", reason, message, component=_PV_CONTROLLER)

    def _set_phase(self, pv: Obj, phase: str, message: str = "") -> Obj | None:
        """``updateVolumePhase``: phase and message, stamping ``lastPhaseTransitionTime`` on a change."""
        status = dict(pv.get("status") or {})
        if status.get("phase") == phase:
            return pv
        status["phase"] = phase
        status["lastPhaseTransitionTime"] = rfc3339(self.ctx.now())
        status.pop("message", None)
        if message:
            status["message"] = message
        return self.write_status(pv, status)


def _claim_ref_names(pv: Obj, namespace: str | None, name: str) -> bool:
    ref = (pv.get("spec") or {}).get("claimRef") or {}
    return bool(ref) and (ref.get("namespace"), ref.get("name")) == (namespace, name)
