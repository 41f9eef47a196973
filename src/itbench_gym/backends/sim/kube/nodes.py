"""What a node says about itself (its kubelet) and what the node lifecycle controller adds.

Without a kubelet posting status a node has no ``Ready`` condition and ``kubectl get nodes``
prints ``Unknown``. As the real kubelet does with node leases, the status (pressure conditions,
``Ready``) is rewritten only when it changes or every ``NODE_STATUS_REPORT_SECONDS``, while the
node's Lease in ``kube-node-lease`` is renewed every ``LEASE_RENEW_SECONDS`` (``kubectl describe
node`` prints it). A cordoned node (``spec.unschedulable``) gets the
``node.kubernetes.io/unschedulable:NoSchedule`` taint, as the lifecycle controller adds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from itbench_gym.lang.timestamps import parse_rfc3339, rfc3339

from .controllers.base import Controller, Key
from .errors import ApiError, is_storage_error
from .store import clone

Obj = dict[str, Any]

NODE_STATUS_REPORT_SECONDS = 300.0
LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0
LEASE_NAMESPACE = "kube-node-lease"
KUBELET_PORT = 10250
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: The kernel's build string (``uname -v``): a node's nodeInfo does not carry it, so the twin says this.
KERNEL_BUILD = "#1 SMP"
#: The kernel's name for each Kubernetes node architecture (``uname -m``, node_exporter's ``machine``).
_UNAME_MACHINES = {"amd64": "x86_64", "arm64": "aarch64", "arm": "armv7l", "386": "i686", "ppc64le": "ppc64le", "s390x": "s390x"}

def uname_machine(architecture: str) -> str:
    """``uname -m`` on a node of Kubernetes architecture ``architecture`` (``amd64`` → ``x86_64``)."""
    return _UNAME_MACHINES.get(architecture, architecture)


#: The heartbeat and renew times each node sync reads back, parsed once per distinct text.
_parse_time = lru_cache(maxsize=64)(parse_rfc3339)

#: (type, status, reason, message) of a healthy node, in the order the kubelet writes them.
HEALTHY_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


class NodeController(Controller):
    """Node conditions and heartbeats, node Leases, and the cordon taint."""

    name = "nodes"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "Node" and event != "DELETED":
            return [("", obj["metadata"]["name"])]
        return ()

    def sync(self, key: Key) -> None:
        node = self.ctx.cache.get("Node", "", key[1])
        if node is None:
            return  # its Lease goes with it (owner reference)
        now = self.ctx.now()
        node = self._sync_taint(node, now)
        if node is None:
            return
        next_report = self._sync_status(node, now)
        next_renew = self._renew_lease(node, now)
        self.requeue_at(key, min(next_report, next_renew))

    def _sync_taint(self, node: Obj, now: float) -> Obj | None:
        spec = node.get("spec") or {}
        taints = list(spec.get("taints") or [])
        has = any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints)
        if bool(spec.get("unschedulable")) == has:
            return node
        if has:
            taints = [t for t in taints if t.get("key") != UNSCHEDULABLE_TAINT]
        else:
            taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)})
        new = clone(node)
        if taints:
            new.setdefault("spec", {})["taints"] = taints
        else:
            new.get("spec", {}).pop("taints", None)
        try:
            return self.ctx.store.update(new)
        except ApiError as e:
            if e.code in (404, 409) or is_storage_error(e):
                return None  # a newer version is queued already, or the store is full: retried later
            raise

    def _sync_status(self, node: Obj, now: float) -> float:
        """Write conditions when they change or the report is due; returns when the next one is."""
        status = node.get("status") or {}
        current = {c.get("type"): c for c in status.get("conditions") or []}
        ready = current.get("Ready") or {}
        last_report = _parse_time(ready["lastHeartbeatTime"]) if ready.get("lastHeartbeatTime") else None
        changed = any((current.get(t) or {}).get("status") != s or (current.get(t) or {}).get("reason") != r
                      for t, s, r, _ in HEALTHY_CONDITIONS)
        if not changed and last_report is not None and now < last_report + NODE_STATUS_REPORT_SECONDS:
            return last_report + NODE_STATUS_REPORT_SECONDS
        stamp = rfc3339(now)
        conditions = []
        for type_, st, reason, message in HEALTHY_CONDITIONS:
            old = current.get(type_) or {}
            transition = old.get("lastTransitionTime") if old.get("status") == st else None
            conditions.append({"type": type_, "status": st, "lastHeartbeatTime": stamp,
                               "lastTransitionTime": transition or stamp, "reason": reason, "message": message})
        others = [c for t, c in current.items() if t not in {h[0] for h in HEALTHY_CONDITIONS}]
        new_status = {**status, "conditions": others + conditions,
                      "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}}}
        self.write_status(node, new_status)
        return now + NODE_STATUS_REPORT_SECONDS

    def _renew_lease(self, node: Obj, now: float) -> float:
        """Create or renew the node's Lease; returns when it is next renewed."""
        name = node["metadata"]["name"]
        store = self.ctx.store
        try:  # read-only: a renewal writes a new object
            lease: Obj | None = store.get_stored(store.registry.by_kind("Lease"), LEASE_NAMESPACE, name)
        except ApiError as e:
            if e.code != 404:
                raise
            lease = None
        renewed = (lease or {}).get("spec", {}).get("renewTime")
        if renewed and now < (due := _parse_time(renewed) + LEASE_RENEW_SECONDS):
            return due
        try:
            if lease is None:
                self.ctx.store.create({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"].get("uid", "")}]},
                    "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                             "renewTime": rfc3339(now, 6)},
                })
            else:
                self.ctx.store.update(dict(lease, spec=dict(lease["spec"], renewTime=rfc3339(now, 6))), copy_result=False)
        except ApiError as e:
            if e.code not in (404, 409) and not is_storage_error(e):
                raise
        return now + LEASE_RENEW_SECONDS
