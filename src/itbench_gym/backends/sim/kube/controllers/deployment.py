"""Deployment controller: ReplicaSets per pod template, rolling updates, revisions, conditions.

Follows ``pkg/controller/deployment`` step by step because agents observe its every trace: the
``<deploy>-<hash>`` ReplicaSet names, ``deployment.kubernetes.io/revision`` (and
``revision-history`` after ``kubectl rollout undo``), ``ScalingReplicaSet`` events, the
``Available``/``Progressing`` conditions with upstream reasons and messages, surge/unavailability
arithmetic during a rollout, Recreate, pause/resume and proportional scaling.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.timestamps import rfc3339

from ..errors import ApiError, is_storage_error
from ..store import clone
from .base import Cache, Controller, Key
from .util import condition, controller_ref, fnv32a, int_or_percent, parse_time, safe_encode

Obj = dict[str, Any]

REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
HASH_LABEL = "pod-template-hash"
_SKIP_ANNOTATIONS = {
    "kubectl.kubernetes.io/last-applied-configuration", REVISION, REVISION_HISTORY, DESIRED_REPLICAS,
    MAX_REPLICAS, "deprecated.deployment.rollback.to",
}
_REV_HISTORY_LIMIT_CHARS = 2000
_COMPONENT = "deployment-controller"


def template_hash(template: Obj, collision_count: int) -> str:
    """``controller.ComputeHash``: fnv32a over the template (+ collision count), name-safe."""
    data = json.dumps(_without_hash(template), sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        data += collision_count.to_bytes(4, "little")
    return safe_encode(str(fnv32a(data)))


def _without_hash(template: Obj) -> Obj:
    """The template minus the ``pod-template-hash`` label (shares everything else: read only)."""
    meta = template.get("metadata") or {}
    labels = meta.get("labels") or {}
    if HASH_LABEL not in labels:
        return template
    return {**template, "metadata": {**meta, "labels": {k: v for k, v in labels.items() if k != HASH_LABEL}}}


def _replicas(obj: Obj) -> int:
    return int((obj.get("spec") or {}).get("replicas", 1))


def _status(obj: Obj, field: str) -> int:
    return int((obj.get("status") or {}).get(field, 0) or 0)


def _revision(rs: Obj) -> int:
    try:
        return int(((rs["metadata"].get("annotations") or {}).get(REVISION)) or 0)
    except ValueError:
        return 0


def _created(rs: Obj) -> tuple[float, str]:
    return (parse_time(rs["metadata"].get("creationTimestamp")) or 0.0, rs["metadata"]["name"])


_OMIT_WHEN_ZERO = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas", "unavailableReplicas")


class DeploymentController(Controller):
    name = "deployment"

    # -- event mapping ------------------------------------------------------------------------

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "Deployment":
            return [Cache.key_of(obj)]
        if kind == "ReplicaSet":
            key = self.owner_key(obj, "Deployment")
            return [key] if key else ()
        if kind == "Pod":  # Recreate waits for old pods to be gone
            rs_key = self.owner_key(obj, "ReplicaSet")
            rs = self.ctx.cache.get("ReplicaSet", *rs_key) if rs_key else None
            key = self.owner_key(rs, "Deployment") if rs else None
            if key:
                d = self.ctx.cache.get("Deployment", *key)
                if d and ((d.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate":
                    return [key]
        return ()

    # -- sync ---------------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        d = self.ctx.cache.get("Deployment", *key)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return
        d = clone(d)
        spec = d.get("spec") or {}
        if not (spec.get("selector") or {}).get("matchLabels") and not (spec.get("selector") or {}).get("matchExpressions"):
            self.ctx.recorder.record(d, "Warning", "SelectingAll",
                                     "This deployment is selecting all pods. A non-empty selector is required.",
                                     component=_COMPONENT)
            return
        rss = sorted(self.ctx.cache.owned("ReplicaSet", d), key=_created)
        self._check_paused_condition(d)
        if spec.get("paused") or self._is_scaling_event(d, rss):
            self._sync_scale_only(d, rss)
            return
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            self._rollout_recreate(d, rss)
        else:
            self._rollout_rolling(d, rss)

    # -- helpers: surge and availability --------------------------------------------------------

    @staticmethod
    def _is_rolling(d: Obj) -> bool:
        strategy: str = ((d.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
        return strategy == "RollingUpdate"

    def _surge_unavailable(self, d: Obj) -> tuple[int, int]:
        if not self._is_rolling(d):
            return 0, 0
        ru = (((d.get("spec") or {}).get("strategy") or {}).get("rollingUpdate")) or {}
        want = _replicas(d)
        surge = int_or_percent(ru.get("maxSurge", "25%"), want, True)
        unavailable = int_or_percent(ru.get("maxUnavailable", "25%"), want, False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, unavailable

    def _max_unavailable(self, d: Obj) -> int:
        if not self._is_rolling(d) or _replicas(d) == 0:
            return 0
        return min(self._surge_unavailable(d)[1], _replicas(d))

    # -- finding the new ReplicaSet -------------------------------------------------------------

    def _split(self, d: Obj, rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
        want = _without_hash((d.get("spec") or {}).get("template") or {})
        new = None
        for rs in rss:
            if _without_hash((rs.get("spec") or {}).get("template") or {}) == want:
                new = rs
                break
        return new, [rs for rs in rss if rs is not new]

    def _get_all(self, d: Obj, rss: list[Obj], create: bool) -> tuple[Obj | None, list[Obj]]:
        new, old = self._split(d, rss)
        max_old = max((_revision(rs) for rs in old), default=0)
        new_revision = max_old + 1
        if new is not None:
            new = self._sync_new_rs_annotations(d, new, new_revision)
        elif create:
            new = self._create_new_rs(d, old, new_revision)
        if new is not None:
            self._set_deployment_revision(d, str(_revision(new)))
        return new, old

    def _rs_annotations(self, d: Obj, rs_annotations: dict[str, str], new_revision: int) -> dict[str, str]:
        out = dict(rs_annotations)
        for k, v in (d["metadata"].get("annotations") or {}).items():
            if k not in _SKIP_ANNOTATIONS:
                out[k] = v
        old_rev = out.get(REVISION)
        old_int = int(old_rev) if old_rev and old_rev.isdigit() else 0
        if old_int < new_revision:
            out[REVISION] = str(new_revision)
            if old_rev is not None:
                history = [h for h in out.get(REVISION_HISTORY, "").split(",") if h]
                total = len(out.get(REVISION_HISTORY, "")) + len(old_rev) + 1
                while history and total > _REV_HISTORY_LIMIT_CHARS:
                    total -= len(history.pop(0)) + 1
                if total <= _REV_HISTORY_LIMIT_CHARS:
                    out[REVISION_HISTORY] = ",".join(history + [old_rev])
        surge, _ = self._surge_unavailable(d)
        out[DESIRED_REPLICAS] = str(_replicas(d))
        out[MAX_REPLICAS] = str(_replicas(d) + surge)
        return out

    def _sync_new_rs_annotations(self, d: Obj, rs: Obj, new_revision: int) -> Obj:
        annotations = dict(rs["metadata"].get("annotations") or {})
        wanted = self._rs_annotations(d, annotations, new_revision)
        wanted[DESIRED_REPLICAS] = annotations.get(DESIRED_REPLICAS, wanted[DESIRED_REPLICAS])
        wanted[MAX_REPLICAS] = annotations.get(MAX_REPLICAS, wanted[MAX_REPLICAS])
        spec = rs.get("spec") or {}
        min_ready = (d.get("spec") or {}).get("minReadySeconds", 0)
        if wanted == annotations and spec.get("minReadySeconds", 0) == min_ready:
            return rs
        new = clone(rs)
        new["metadata"]["annotations"] = wanted
        new["spec"]["minReadySeconds"] = min_ready
        out = self._update(new)
        if condition(d, "Progressing") is None and self._has_deadline(d):
            self._set_condition(d, "Progressing", "True", "FoundNewReplicaSet",
                                f'Found new replica set "{rs["metadata"]["name"]}"')
            self._write_deployment_status(d)
        return out or rs

    def _create_new_rs(self, d: Obj, old: list[Obj], new_revision: int) -> Obj | None:
        spec = d.get("spec") or {}
        collisions = int((d.get("status") or {}).get("collisionCount", 0) or 0)
        for _ in range(10):
            h = template_hash(spec.get("template") or {}, collisions)
            name = f"{d['metadata']['name']}-{h}"
            existing = self.ctx.cache.get("ReplicaSet", d["metadata"].get("namespace"), name)
            if existing is None:
                break
            collisions += 1
        template = clone(spec.get("template") or {})
        template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
        selector = clone(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})[HASH_LABEL] = h
        new_replicas = self._new_rs_replicas(d, old, None)
        rs: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": d["metadata"].get("namespace"),
                "labels": dict(template["metadata"]["labels"]),
                "annotations": self._rs_annotations(d, {}, new_revision),
                "ownerReferences": [controller_ref(d)],
            },
            "spec": {
                "replicas": new_replicas,
                "minReadySeconds": spec.get("minReadySeconds", 0),
                "selector": selector,
                "template": template,
            },
        }
        try:
            created = self.ctx.store.create(rs)
        except ApiError as e:
            self.ctx.recorder.record(d, "Warning", "FailedCreate",
                                     f"Failed to create new replica set {name!r}: {e.message}", component=_COMPONENT)
            return None
        if collisions != int((d.get("status") or {}).get("collisionCount", 0) or 0):
            d.setdefault("status", {})["collisionCount"] = collisions
        if new_replicas > 0:
            self.ctx.recorder.record(d, "Normal", "ScalingReplicaSet",
                                     f"Scaled up replica set {name} from 0 to {new_replicas}", component=_COMPONENT)
        if self._has_deadline(d):
            self._set_condition(d, "Progressing", "True", "NewReplicaSetCreated", f'Created new replica set "{name}"')
            self._write_deployment_status(d)
        return created

    def _set_deployment_revision(self, d: Obj, revision: str) -> None:
        annotations = d["metadata"].get("annotations") or {}
        if annotations.get(REVISION) == revision:
            return
        current = self.ctx.cache.get("Deployment", d["metadata"].get("namespace"), d["metadata"]["name"])
        if current is None:
            return
        new = clone(current)
        new["metadata"].setdefault("annotations", {})[REVISION] = revision
        out = self._update(new)
        if out is not None:
            d["metadata"] = out["metadata"]

    # -- scaling --------------------------------------------------------------------------------

    def _new_rs_replicas(self, d: Obj, all_rss: list[Obj], new: Obj | None) -> int:
        want = _replicas(d)
        if not self._is_rolling(d):
            return want
        surge, _ = self._surge_unavailable(d)
        current = sum(_replicas(rs) for rs in all_rss)
        new_count = _replicas(new) if new is not None else 0
        if current >= want + surge:
            return new_count
        scale_up = min(want + surge - current, want - new_count)
        return new_count + max(0, scale_up)

    def _scale_rs(self, d: Obj, rs: Obj, to: int) -> Obj:
        current = self.ctx.cache.get("ReplicaSet", rs["metadata"].get("namespace"), rs["metadata"]["name"]) or rs
        frm = _replicas(current)
        surge, _ = self._surge_unavailable(d)
        annotations = dict(current["metadata"].get("annotations") or {})
        wanted = dict(annotations)
        wanted[DESIRED_REPLICAS] = str(_replicas(d))
        wanted[MAX_REPLICAS] = str(_replicas(d) + surge)
        if frm == to and wanted == annotations:
            return current
        new = clone(current)
        new["spec"]["replicas"] = to
        new["metadata"]["annotations"] = wanted
        out = self._update(new)
        if out is not None and frm != to:
            direction = "up" if to > frm else "down"
            self.ctx.recorder.record(
                d, "Normal", "ScalingReplicaSet",
                f"Scaled {direction} replica set {rs['metadata']['name']} from {frm} to {to}", component=_COMPONENT,
            )
        return out or current

    def _is_scaling_event(self, d: Obj, rss: list[Obj]) -> bool:
        new, old = self._split(d, rss)
        active = [rs for rs in ([new] if new else []) + old if _replicas(rs) > 0]
        for rs in active:
            desired = (rs["metadata"].get("annotations") or {}).get(DESIRED_REPLICAS)
            if desired is not None and desired != str(_replicas(d)):
                return True
        return False

    def _scale(self, d: Obj, new: Obj | None, old: list[Obj]) -> None:
        all_rss = ([new] if new else []) + old
        active = [rs for rs in all_rss if _replicas(rs) > 0]
        want = _replicas(d)
        target: Obj | None = None
        if len(active) == 1:
            target = active[0]
        elif not active:
            target = new or (max(old, key=_created) if old else None)
        if len(active) <= 1:
            if target is not None and _replicas(target) != want:
                self._scale_rs(d, target, want)
            return
        if new is not None and _replicas(new) == want and _status(new, "availableReplicas") == want:
            for rs in active:
                if rs is not new:
                    self._scale_rs(d, rs, 0)
            return
        if not self._is_rolling(d):
            return
        surge, _ = self._surge_unavailable(d)
        allowed = want + surge
        total = sum(_replicas(rs) for rs in active)
        to_add = allowed - total
        if to_add == 0:
            return
        ordered = sorted(active, key=lambda rs: (-_replicas(rs), _created(rs)) if to_add > 0 else (_replicas(rs), _created(rs)))
        sizes = {rs["metadata"]["name"]: _replicas(rs) for rs in ordered}
        added = 0
        for rs in ordered:
            share = int(to_add * _replicas(rs) / total) if total else 0
            if abs(added + share) > abs(to_add):
                share = to_add - added
            sizes[rs["metadata"]["name"]] = max(0, _replicas(rs) + share)
            added += share
        leftover = to_add - added
        if leftover and ordered:
            first = ordered[0]["metadata"]["name"]
            sizes[first] = max(0, sizes[first] + leftover)
        for rs in ordered:
            self._scale_rs(d, rs, sizes[rs["metadata"]["name"]])

    def _sync_scale_only(self, d: Obj, rss: list[Obj]) -> None:
        new, old = self._get_all(d, rss, create=False)
        self._scale(d, new, old)
        if (d.get("spec") or {}).get("paused"):
            self._cleanup(d, old)
        self._refresh_and_status(d, progress=False)

    # -- strategies -----------------------------------------------------------------------------

    def _rollout_rolling(self, d: Obj, rss: list[Obj]) -> None:
        new, old = self._get_all(d, rss, create=True)
        if new is None:
            return
        want = _replicas(d)
        if _replicas(new) != want:
            if _replicas(new) > want:
                self._scale_rs(d, new, want)
                self._refresh_and_status(d)
                return
            count = self._new_rs_replicas(d, [new] + old, new)
            if count != _replicas(new):
                self._scale_rs(d, new, count)
                self._refresh_and_status(d)
                return
        new, old = self._fresh(d)
        if new is not None and self._reconcile_old(d, new, old):
            self._refresh_and_status(d)
            return
        new, old = self._fresh(d)
        if self._complete(d, self._calculate_status(d, new, old)):
            self._cleanup(d, old)
        self._refresh_and_status(d)

    def _reconcile_old(self, d: Obj, new: Obj, old: list[Obj]) -> bool:
        active_old = [rs for rs in old if _replicas(rs) > 0]
        old_count = sum(_replicas(rs) for rs in active_old)
        if old_count == 0:
            return False
        all_count = old_count + _replicas(new)
        min_available = _replicas(d) - self._max_unavailable(d)
        new_unavailable = _replicas(new) - _status(new, "availableReplicas")
        max_scaled_down = all_count - min_available - new_unavailable
        if max_scaled_down <= 0:
            return False
        cleaned = 0
        for rs in sorted(active_old, key=_created):
            if cleaned >= max_scaled_down:
                break
            unhealthy = _replicas(rs) - _status(rs, "availableReplicas")
            if unhealthy <= 0:
                continue
            n = min(max_scaled_down - cleaned, unhealthy)
            self._scale_rs(d, rs, _replicas(rs) - n)
            cleaned += n
        fresh, old = self._fresh(d)
        active_old = [rs for rs in old if _replicas(rs) > 0]
        available = sum(_status(rs, "availableReplicas") for rs in ([fresh] if fresh else []) + old)
        scaled = 0
        if available > min_available:
            budget = available - min_available
            for rs in sorted(active_old, key=_created):
                if scaled >= budget:
                    break
                n = min(_replicas(rs), budget - scaled)
                self._scale_rs(d, rs, _replicas(rs) - n)
                scaled += n
        return cleaned + scaled > 0

    def _rollout_recreate(self, d: Obj, rss: list[Obj]) -> None:
        new, old = self._get_all(d, rss, create=False)
        active_old = [rs for rs in old if _replicas(rs) > 0]
        if active_old:
            for rs in active_old:
                self._scale_rs(d, rs, 0)
            self._refresh_and_status(d)
            return
        if self._old_pods_running(d, old):
            self._refresh_and_status(d)
            return
        if new is None:
            new, old = self._get_all(d, rss, create=True)
        if new is not None and _replicas(new) != _replicas(d):
            self._scale_rs(d, new, _replicas(d))
        new, old = self._fresh(d)
        if self._complete(d, self._calculate_status(d, new, old)):
            self._cleanup(d, old)
        self._refresh_and_status(d)

    def _old_pods_running(self, d: Obj, old: list[Obj]) -> bool:
        for rs in old:
            if _status(rs, "replicas") > 0:
                return True
            for p in self.ctx.cache.owned("Pod", rs):
                if ((p.get("status") or {}).get("phase")) not in ("Succeeded", "Failed"):
                    return True
        return False

    def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        limit = (d.get("spec") or {}).get("revisionHistoryLimit", 10)
        if limit is None:
            return
        alive = [rs for rs in old if not rs["metadata"].get("deletionTimestamp")]
        diff = len(alive) - int(limit)
        if diff <= 0:
            return
        for rs in sorted(alive, key=lambda r: (_revision(r), _created(r)))[:diff]:
            if _status(rs, "replicas") != 0 or _replicas(rs) != 0:
                continue
            if int(rs["metadata"].get("generation", 1)) > _status(rs, "observedGeneration"):
                continue
            try:
                self.ctx.store.delete("ReplicaSet", rs["metadata"].get("namespace"), rs["metadata"]["name"])
            except ApiError:
                pass

    # -- status and conditions ------------------------------------------------------------------

    def _fresh(self, d: Obj) -> tuple[Obj | None, list[Obj]]:
        rss = sorted(self.ctx.cache.owned("ReplicaSet", d), key=_created)
        return self._split(d, rss)

    def _calculate_status(self, d: Obj, new: Obj | None, old: list[Obj]) -> Obj:
        all_rss = ([new] if new else []) + old
        available = sum(_status(rs, "availableReplicas") for rs in all_rss)
        total = sum(_replicas(rs) for rs in all_rss)
        status: Obj = {
            "observedGeneration": d["metadata"].get("generation", 1),
            "replicas": sum(_status(rs, "replicas") for rs in all_rss),
            "updatedReplicas": _status(new, "replicas") if new else 0,
            "readyReplicas": sum(_status(rs, "readyReplicas") for rs in all_rss),
            "availableReplicas": available,
            "unavailableReplicas": max(0, total - available),
        }
        if (d.get("status") or {}).get("collisionCount") is not None:
            status["collisionCount"] = d["status"]["collisionCount"]
        status["conditions"] = list((d.get("status") or {}).get("conditions") or [])
        if available >= _replicas(d) - self._max_unavailable(d):
            self._put_condition(status, "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
        else:
            self._put_condition(status, "Available", "False", "MinimumReplicasUnavailable",
                                "Deployment does not have minimum availability.")
        return status

    def _complete(self, d: Obj, status: Obj) -> bool:
        want = _replicas(d)
        return bool(
            status.get("updatedReplicas", 0) == want
            and status.get("replicas", 0) == want
            and status.get("availableReplicas", 0) == want
            and status.get("observedGeneration", 0) >= d["metadata"].get("generation", 1)
        )

    @staticmethod
    def _has_deadline(d: Obj) -> bool:
        return (d.get("spec") or {}).get("progressDeadlineSeconds", 600) not in (None, 2**31 - 1)

    def _refresh_and_status(self, d: Obj, progress: bool = True) -> None:
        current = self.ctx.cache.get("Deployment", d["metadata"].get("namespace"), d["metadata"]["name"])
        if current is None:
            return
        if d.get("status") is not None:
            merged = clone(current)
            merged["status"] = d["status"]
            current = merged
        new, old = self._fresh(current)
        status = self._calculate_status(current, new, old)
        if progress and new is not None:
            self._progress(current, status, new)
        self._copy_replica_failure(status, ([new] if new else []) + old)
        if not status["conditions"]:
            del status["conditions"]
        for counter in _OMIT_WHEN_ZERO:  # omitempty in DeploymentStatus: a real server never shows them at 0
            if not status.get(counter):
                status.pop(counter, None)
        d["status"] = status
        self._write_deployment_status(d)

    def _progress(self, d: Obj, status: Obj, new: Obj) -> None:
        now = self.ctx.now()
        if not self._has_deadline(d):
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != "Progressing"]
            return
        current = next((c for c in status["conditions"] if c.get("type") == "Progressing"), None)
        name = new["metadata"]["name"]
        is_complete = (
            status["replicas"] == status["updatedReplicas"]
            and current is not None
            and current.get("reason") == "NewReplicaSetAvailable"
        )
        if is_complete:
            return
        old_status = d.get("status") or {}
        if self._complete(d, status):
            self._put_condition(status, "Progressing", "True", "NewReplicaSetAvailable",
                                f'ReplicaSet "{name}" has successfully progressed.')
        elif self._progressing(old_status, status):
            # Progress refreshes lastUpdateTime (the deadline clock) but keeps lastTransitionTime.
            stamp = rfc3339(self.ctx.now())
            keep = current.get("lastTransitionTime", stamp) if current and current.get("status") == "True" else stamp
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != "Progressing"] + [{
                "type": "Progressing", "status": "True", "lastUpdateTime": stamp, "lastTransitionTime": keep,
                "reason": "ReplicaSetUpdated", "message": f'ReplicaSet "{name}" is progressing.',
            }]
        elif current is not None and (
            current.get("reason") == "ProgressDeadlineExceeded"
            or (parse_time(current.get("lastUpdateTime")) or now) + int((d.get("spec") or {}).get("progressDeadlineSeconds", 600)) < now
        ):
            self._put_condition(status, "Progressing", "False", "ProgressDeadlineExceeded",
                                f'ReplicaSet "{name}" has timed out progressing.')
        cond = next((c for c in status["conditions"] if c.get("type") == "Progressing"), None)
        if cond is not None and cond.get("status") == "True" and cond.get("reason") != "NewReplicaSetAvailable":
            deadline = (parse_time(cond.get("lastUpdateTime")) or now) + int(
                (d.get("spec") or {}).get("progressDeadlineSeconds", 600))
            self.requeue_at(Cache.key_of(d), deadline + 1)

    @staticmethod
    def _progressing(old: Obj, new: Obj) -> bool:
        old_old = int(old.get("replicas", 0) or 0) - int(old.get("updatedReplicas", 0) or 0)
        new_old = new["replicas"] - new["updatedReplicas"]
        return bool(
            new["updatedReplicas"] > int(old.get("updatedReplicas", 0) or 0)
            or new_old < old_old
            or new["readyReplicas"] > int(old.get("readyReplicas", 0) or 0)
            or new["availableReplicas"] > int(old.get("availableReplicas", 0) or 0)
        )

    def _copy_replica_failure(self, status: Obj, rss: list[Obj]) -> None:
        failure = next((condition(rs, "ReplicaFailure") for rs in rss if condition(rs, "ReplicaFailure")), None)
        if failure is not None:
            self._put_condition(status, "ReplicaFailure", failure.get("status", "True"), failure.get("reason", ""),
                                failure.get("message", ""))
        else:
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != "ReplicaFailure"]

    def _put_condition(self, status: Obj, type_: str, value: str, reason: str, message: str) -> None:
        """``SetDeploymentCondition``: same status and reason → unchanged; else replace at the end."""
        now = rfc3339(self.ctx.now())
        conditions = status.setdefault("conditions", [])
        current = next((c for c in conditions if c.get("type") == type_), None)
        if current is not None and current.get("status") == value and current.get("reason") == reason:
            return
        transition = current.get("lastTransitionTime", now) if current is not None and current.get("status") == value else now
        new = {"type": type_, "status": value, "lastUpdateTime": now, "lastTransitionTime": transition,
               "reason": reason, "message": message}
        status["conditions"] = [c for c in conditions if c.get("type") != type_] + [new]

    def _set_condition(self, d: Obj, type_: str, value: str, reason: str, message: str) -> None:
        status = d.setdefault("status", {})
        self._put_condition(status, type_, value, reason, message)

    def _check_paused_condition(self, d: Obj) -> None:
        if not self._has_deadline(d):
            return
        cond = condition(d, "Progressing")
        paused = bool((d.get("spec") or {}).get("paused"))
        if paused and (cond is None or cond.get("reason") != "DeploymentPaused"):
            self._set_condition(d, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
            self._write_deployment_status(d)
        elif not paused and cond is not None and cond.get("reason") == "DeploymentPaused":
            self._set_condition(d, "Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed")
            self._write_deployment_status(d)

    def _write_deployment_status(self, d: Obj) -> None:
        current = self.ctx.cache.get("Deployment", d["metadata"].get("namespace"), d["metadata"]["name"])
        if current is None:
            return
        status = d.get("status") or {}
        if current.get("status") == status:
            return
        self.write_status(current, status)

    def _update(self, obj: Obj) -> Obj | None:
        try:
            return self.ctx.store.update(obj)
        except ApiError as e:
            if e.code in (404, 409) or is_storage_error(e):
                return None
            raise
