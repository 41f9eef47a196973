"""DaemonSet controller: one pod per eligible node, rolled node by node.

Mirrors ``pkg/controller/daemon``: a node is eligible when the pod's node selector and required
node affinity match and its NoSchedule/NoExecute taints are tolerated (DaemonSet pods tolerate
the node-condition taints and cordoning automatically); each daemon pod is pinned to its node
with required node affinity on ``metadata.name`` and then placed by the scheduler. One sync
creates and deletes at most ``BurstReplicas`` (250) pods each, creations in slow-start batches,
paced by the controller's client (see ``ratelimit``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.selectors import node_selector_term_matches

from ..errors import ApiError
from ..scheduler import tolerates
from ..store import clone
from .base import Cache, Context, Controller, Key
from .deployment import template_hash
from .podcontrol import PodControl
from .util import int_or_percent, is_pod_available, is_pod_ready, is_terminating, pod_phase

Obj = dict[str, Any]

REVISION_LABEL = "controller-revision-hash"
_COMPONENT = "daemonset-controller"
#: ``daemon.BurstReplicas``: creations, and deletions, of one sync.
BURST_REPLICAS = 250
#: Tolerations the DaemonSet controller adds to every daemon pod (``util.AddOrUpdateDaemonPodTolerations``).
DAEMON_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)


class DaemonSetController(Controller):
    name = "daemonset"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.pods = PodControl(ctx, _COMPONENT)

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "DaemonSet":
            return [Cache.key_of(obj)]
        if kind == "Pod":
            key = self.owner_key(obj, "DaemonSet")
            return [key] if key else ()
        if kind == "Node":
            return [Cache.key_of(ds) for ds in self.ctx.cache.list("DaemonSet")]
        return ()

    def _pod_template(self, ds: Obj) -> Obj:
        template: Obj = clone((ds.get("spec") or {}).get("template") or {})
        spec = template.setdefault("spec", {})
        tolerations = spec.setdefault("tolerations", [])
        for tol in DAEMON_TOLERATIONS:
            if not any(t.get("key") == tol["key"] and t.get("effect") == tol["effect"] for t in tolerations):
                tolerations.append(dict(tol))
        return template

    def _eligible(self, template: Obj, node: Obj) -> bool:
        spec = template.get("spec") or {}
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return False
        required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution"))
        if required is not None and not any(node_selector_term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
            return False
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations") or [], taint):
                return False
        return True

    def sync(self, key: Key) -> None:
        ds = self.ctx.cache.get("DaemonSet", *key)
        if ds is None or is_terminating(ds):
            return
        template = self._pod_template(ds)
        revision = template_hash((ds.get("spec") or {}).get("template") or {}, 0)
        nodes = sorted(self.ctx.cache.list("Node"), key=lambda n: n["metadata"]["name"])
        pods_by_node: dict[str, list[Obj]] = {}
        for p in self.ctx.cache.owned("Pod", ds):
            if is_terminating(p):
                continue
            node = _target_node(p)
            pods_by_node.setdefault(node, []).append(p)
        eligible = {n["metadata"]["name"] for n in nodes if self._eligible(template, n)}
        ns = ds["metadata"].get("namespace") or ""
        needing: list[str] = []
        doomed: list[Obj] = []
        for node in sorted(eligible):
            running = [p for p in pods_by_node.get(node, []) if pod_phase(p) != "Failed"]
            doomed += [p for p in pods_by_node.get(node, []) if pod_phase(p) == "Failed"]
            if not running:
                needing.append(node)
            doomed += running[1:]
        for node, pods in sorted(pods_by_node.items()):
            if node not in eligible:
                doomed += pods
        if (needing or doomed) and not self.pods.can_send():
            self.requeue_at(key, self.pods.ready_at())
        elif needing or doomed:
            for p in doomed[:BURST_REPLICAS]:
                self.pods.delete(ds, p)
            targets = iter(needing[:BURST_REPLICAS])
            self.pods.slow_start(min(len(needing), BURST_REPLICAS),
                                 lambda: self._create(ds, template, next(targets), revision, ns))
            if len(needing) > BURST_REPLICAS or len(doomed) > BURST_REPLICAS:
                self.requeue_at(key, self.pods.ready_at())
        self._roll(ds, eligible, revision)
        self._status(ds, eligible, revision)

    def snapshot_state(self) -> Any:
        return self.pods.snapshot()

    def restore_state(self, state: Any) -> None:
        self.pods.restore(state)

    def _create(self, ds: Obj, template: Obj, node: str, revision: str, ns: str) -> ApiError | None:
        pod_template = clone(template)
        pod_template.setdefault("metadata", {}).setdefault("labels", {})[REVISION_LABEL] = revision
        pod_template["metadata"]["labels"]["pod-template-generation"] = str(ds["metadata"].get("generation", 1))
        affinity = pod_template["spec"].setdefault("affinity", {})
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
        name = self.pods.generated_name(ns, ds["metadata"]["name"] + "-")
        pod = self.pods.pod_from_template(ds, pod_template, name)
        pod["metadata"]["generateName"] = ds["metadata"]["name"] + "-"
        return self.pods.create(ds, pod)

    def _roll(self, ds: Obj, eligible: set[str], revision: str) -> None:
        strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return
        pods = [p for p in self.ctx.cache.owned("Pod", ds) if _target_node(p) in eligible]
        max_unavailable = max(1, int_or_percent((strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1),
                                                len(eligible), True))
        unavailable = sum(1 for p in pods if is_terminating(p) or not is_pod_ready(p))
        for p in sorted(pods, key=lambda p: _target_node(p)):
            if unavailable >= max_unavailable:
                return
            if not is_terminating(p) and (p["metadata"].get("labels") or {}).get(REVISION_LABEL) != revision:
                self.pods.delete(ds, p)
                unavailable += 1

    def _status(self, ds: Obj, eligible: set[str], revision: str) -> None:
        now = self.ctx.now()
        min_ready = int((ds.get("spec") or {}).get("minReadySeconds", 0) or 0)
        pods = [p for p in self.ctx.cache.owned("Pod", ds) if not is_terminating(p)]
        on_eligible = [p for p in pods if _target_node(p) in eligible]
        scheduled = [p for p in on_eligible if (p.get("spec") or {}).get("nodeName")]
        ready = [p for p in scheduled if is_pod_ready(p)]
        available = [p for p in ready if is_pod_available(p, min_ready, now)]
        updated = [p for p in scheduled if (p["metadata"].get("labels") or {}).get(REVISION_LABEL) == revision]
        status: Obj = {
            "currentNumberScheduled": len({_target_node(p) for p in scheduled}),
            "desiredNumberScheduled": len(eligible),
            "numberMisscheduled": len({_target_node(p) for p in pods if _target_node(p) not in eligible}),
            "numberReady": len(ready),
            "observedGeneration": ds["metadata"].get("generation", 1),
            "updatedNumberScheduled": len(updated),
            "numberAvailable": len(available),
            "numberUnavailable": max(0, len(eligible) - len(available)),
        }
        self.write_status(ds, {k: v for k, v in status.items() if v or k in (
            "currentNumberScheduled", "desiredNumberScheduled", "numberMisscheduled", "numberReady")})


def _target_node(pod: Obj) -> str:
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return str(node)
    terms = (((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    for term in terms:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
    return ""
