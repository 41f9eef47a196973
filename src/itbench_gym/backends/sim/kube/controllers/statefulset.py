"""StatefulSet controller: stable ordinal pods, ordered start-up and rolling updates.

Mirrors ``pkg/controller/statefulset`` for what agents observe: pods ``<set>-0..N-1`` with the
``statefulset.kubernetes.io/pod-name``, ``apps.kubernetes.io/pod-index`` and
``controller-revision-hash`` labels; with ``OrderedReady`` a pod is created only when every lower
ordinal is Running and Ready, scale-down and updates go from the highest ordinal down one pod at
a time; revisions are ``ControllerRevision`` objects (``kubectl rollout history sts``). Each
``volumeClaimTemplates`` entry gives every pod a claim ``<template>-<set>-<ordinal>`` (created before
the pod, labelled with the set's selector, kept when the pod goes unless the retention policy's
``whenDeleted: Delete`` makes the set own it) and a volume of the template's name naming it (``stateful_set_utils.go``
``getPersistentVolumeClaims``/``updateStorage``), so the pod waits for the claim to bind.

``Parallel`` pod management creates the missing pods in slow-start batches. Upstream sends them
all from one sync, throttled only by the controller's client; the twin sends at most
``MAX_PODS_PER_SYNC`` per sync and resumes when that client has caught up (see ``ratelimit``), so a
StatefulSet of a million replicas grows at the client's rate and no sync walks a million ordinals.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import ApiError, is_storage_error
from ..store import clone
from .base import Cache, Context, Controller, Key
from .deployment import template_hash
from .podcontrol import PodControl
from .quota import check_pod
from .util import controller_ref, is_pod_ready, is_terminating, pod_phase

Obj = dict[str, Any]

REVISION_LABEL = "controller-revision-hash"
_COMPONENT = "statefulset-controller"
#: Creations or deletions of one sync with ``Parallel`` pod management (the ReplicaSet's burst).
MAX_PODS_PER_SYNC = 500


def _ordinal(sts: Obj, pod: Obj) -> int | None:
    prefix = sts["metadata"]["name"] + "-"
    name = pod["metadata"]["name"]
    if not name.startswith(prefix) or not name[len(prefix):].isdigit():
        return None
    return int(name[len(prefix):])


class StatefulSetController(Controller):
    name = "statefulset"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.pods = PodControl(ctx, _COMPONENT)

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "StatefulSet":
            return [Cache.key_of(obj)]
        if kind == "Pod":
            key = self.owner_key(obj, "StatefulSet")
            return [key] if key else ()
        return ()

    def _revision(self, sts: Obj) -> str:
        """The update revision's name, creating its ControllerRevision when new."""
        template = (sts.get("spec") or {}).get("template") or {}
        name = f"{sts['metadata']['name']}-{template_hash(template, 0)}"
        ns = sts["metadata"].get("namespace")
        if self.ctx.cache.get("ControllerRevision", ns, name) is None:
            numbers = [int(r.get("revision", 0)) for r in self.ctx.cache.owned("ControllerRevision", sts)]
            labels = dict((template.get("metadata") or {}).get("labels") or {})
            labels[REVISION_LABEL] = name.rsplit("-", 1)[1]
            revision: Obj = {
                "apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": name, "namespace": ns, "labels": labels,
                             "ownerReferences": [controller_ref(sts)]},
                "data": {"spec": {"template": {**clone(template), "$patch": "replace"}}},
                "revision": max(numbers, default=0) + 1,
            }
            try:
                self.ctx.store.create(revision)
            except ApiError as e:
                if e.code != 409 and not is_storage_error(e):
                    raise
        return name

    def sync(self, key: Key) -> None:
        sts = self.ctx.cache.get("StatefulSet", *key)
        if sts is None or is_terminating(sts):
            return
        spec = sts.get("spec") or {}
        want = int(spec.get("replicas", 1))
        ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
        update_rev = self._revision(sts)
        by_ordinal: dict[int, Obj] = {}
        for p in self.ctx.cache.owned("Pod", sts):
            i = _ordinal(sts, p)
            if i is not None:
                by_ordinal[i] = p
        healthy = True
        budget = (1 if ordered else MAX_PODS_PER_SYNC) if self.pods.can_send() else 0
        missing: list[int] = []
        more = False  # missing pods left for a later sync
        for i in range(want):
            pod = by_ordinal.get(i)
            if pod is not None and pod_phase(pod) in ("Succeeded", "Failed") and not is_terminating(pod):
                self.pods.delete(sts, pod)
                pod = None
                healthy = False
            if pod is None:
                if ordered and not healthy:
                    break
                healthy = False
                if len(missing) >= budget:
                    more = True
                    break
                missing.append(i)
                if ordered:
                    break
                continue
            if is_terminating(pod) or not (pod_phase(pod) == "Running" and is_pod_ready(pod)):
                healthy = False
                if ordered:
                    break
        if missing:
            ordinals = iter(missing)
            _, err = self.pods.slow_start(len(missing), lambda: self._create(sts, next(ordinals), update_rev))
            more = more or err is not None
        if healthy or not ordered:
            surplus = [i for i in sorted(by_ordinal, reverse=True) if i >= want and not is_terminating(by_ordinal[i])]
            limit = 1 if ordered else MAX_PODS_PER_SYNC
            if surplus and not self.pods.can_send():
                more = True
            elif surplus:
                for i in surplus[:limit]:
                    self.pods.delete(sts, by_ordinal[i])
                more = more or (not ordered and len(surplus) > limit)  # OrderedReady waits for the pod to go
            if healthy and not surplus:
                self._roll(sts, by_ordinal, want, update_rev)
        if more:
            self.requeue_at(key, self.pods.ready_at())
        self._status(sts, update_rev)

    def snapshot_state(self) -> Any:
        return self.pods.snapshot()

    def restore_state(self, state: Any) -> None:
        self.pods.restore(state)

    def _create(self, sts: Obj, i: int, revision: str) -> ApiError | None:
        name = f"{sts['metadata']['name']}-{i}"
        template = (sts.get("spec") or {}).get("template") or {}
        pod = self.pods.pod_from_template(sts, template, name)
        labels = pod["metadata"]["labels"]
        labels[REVISION_LABEL] = revision
        labels["statefulset.kubernetes.io/pod-name"] = name
        labels["apps.kubernetes.io/pod-index"] = str(i)
        pod["spec"]["hostname"] = name
        if (sts.get("spec") or {}).get("serviceName"):
            pod["spec"]["subdomain"] = sts["spec"]["serviceName"]
        claims = self._claims(sts, i)
        err = self._create_claims(sts, name, claims)
        if err is not None:
            return err
        by_template = {c["template"]: c["claim"]["metadata"]["name"] for c in claims}
        pod["spec"]["volumes"] = [{"name": t, "persistentVolumeClaim": {"claimName": n}} for t, n in by_template.items()] + [
            v for v in pod["spec"].get("volumes") or [] if v.get("name") not in by_template]
        try:
            check_pod(self.ctx.store, pod, self.ctx.now())
            self.ctx.store.create(pod)
        except ApiError as e:
            self.ctx.recorder.record(sts, "Warning", "FailedCreate",
                                     f"create Pod {name} in StatefulSet {sts['metadata']['name']} failed error: {e.message}",
                                     component=_COMPONENT)
            return e
        self.ctx.recorder.record(sts, "Normal", "SuccessfulCreate",
                                 f"create Pod {name} in StatefulSet {sts['metadata']['name']} successful",
                                 component=_COMPONENT)
        return None

    def _claims(self, sts: Obj, i: int) -> list[Obj]:
        """The claims of ordinal ``i`` (``getPersistentVolumeClaims``): each volumeClaimTemplate named
        ``<template>-<set>-<ordinal>`` with the selector's labels added; with ``whenDeleted: Delete`` the set
        owns them (``updateClaimOwnerRefForSetAndPod`` for a pod within the set's replicas)."""
        spec = sts.get("spec") or {}
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        deleted = ((spec.get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted") or "Retain") == "Delete"
        out = []
        for template in spec.get("volumeClaimTemplates") or []:
            claim = clone(template)
            claim.pop("status", None)
            meta = claim.setdefault("metadata", {})
            tname = str(meta.get("name", ""))
            meta.update({"name": f"{tname}-{sts['metadata']['name']}-{i}", "namespace": sts["metadata"].get("namespace")})
            meta["labels"] = {**(meta.get("labels") or {}), **selector}
            if deleted:
                meta["ownerReferences"] = [controller_ref(sts)]
            claim.update({"apiVersion": "v1", "kind": "PersistentVolumeClaim"})
            out.append({"template": tname, "claim": claim})
        return out

    def _create_claims(self, sts: Obj, pod: str, claims: list[Obj]) -> ApiError | None:
        """``createPersistentVolumeClaims``: create the claims that do not exist yet; a claim being deleted
        holds the pod back."""
        set_name = sts["metadata"]["name"]
        for entry in claims:
            claim = entry["claim"]
            meta = claim["metadata"]
            current = self.ctx.cache.get("PersistentVolumeClaim", meta["namespace"], meta["name"])
            if current is not None:
                if is_terminating(current):
                    return ApiError(409, "Conflict", f"pvc {meta['name']} is being deleted")
                continue
            try:
                self.ctx.store.create(claim)
            except ApiError as e:
                if e.code == 409:
                    continue
                self.ctx.recorder.record(sts, "Warning", "FailedCreate",
                                         f"create Claim {meta['name']} for Pod {pod} in StatefulSet {set_name} failed error: "
                                         f"failed to create PVC {meta['name']}: {e.message}", component=_COMPONENT)
                return e
            self.ctx.recorder.record(sts, "Normal", "SuccessfulCreate",
                                     f"create Claim {meta['name']} Pod {pod} in StatefulSet {set_name} success",
                                     component=_COMPONENT)
        return None

    def _roll(self, sts: Obj, by_ordinal: dict[int, Obj], want: int, revision: str) -> None:
        strategy = (sts.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        partition = int((strategy.get("rollingUpdate") or {}).get("partition", 0) or 0)
        for i in range(want - 1, partition - 1, -1):
            pod = by_ordinal.get(i)
            if pod is not None and (pod["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision:
                self.pods.spend(1)
                self.ctx.store.delete("Pod", pod["metadata"].get("namespace"), pod["metadata"]["name"])
                self.ctx.recorder.record(
                    sts, "Normal", "SuccessfulDelete",
                    f"delete Pod {pod['metadata']['name']} in StatefulSet {sts['metadata']['name']} successful",
                    component=_COMPONENT)
                return

    def _status(self, sts: Obj, revision: str) -> None:
        pods = [p for p in self.ctx.cache.owned("Pod", sts) if _ordinal(sts, p) is not None and not is_terminating(p)]
        updated = [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        ready = [p for p in pods if is_pod_ready(p)]
        old_status = sts.get("status") or {}
        current_rev = old_status.get("currentRevision") or revision
        want = int((sts.get("spec") or {}).get("replicas", 1))
        if len(updated) == want == len(pods):
            current_rev = revision
        current = [p for p in pods if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == current_rev]
        status: Obj = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": len(ready),
            "currentReplicas": len(current),
            "updatedReplicas": len(updated),
            "currentRevision": current_rev,
            "updateRevision": revision,
            "collisionCount": 0,
            "availableReplicas": len(ready),
        }
        self.write_status(sts, {k: v for k, v in status.items() if v or k in ("replicas", "observedGeneration", "collisionCount", "availableReplicas")})
