"""Scheduling and capacity faults: edits that leave a workload's new pods with nowhere to go.

Each reproduces ITBench's Ansible task (``roles/faults/tasks/inject_<fault>.yaml``): the same
fields, values and created objects (``k8s state: patched`` is a strategic merge patch), so the scheduler, the quota admission and the volume binder
react as they do on a real cluster. Random choices (the worker node, the invalid node's number)
come from the context's seed and the target, so a scenario injects the same fault every run.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from kubernetes.utils import parse_quantity

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.operations.common import Obj, autoscaler_of, container_named, target

HOSTNAME_LABEL = "kubernetes.io/hostname"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
#: The image ITBench's helper workloads run (``sleep infinity`` under /bin/sh).
HELPER_IMAGE = ("registry.access.redhat.com/ubi10-minimal:10.2-1786960640"
                "@sha256:61f820b7893b6226e499e928db99c59a0a9135aa17e4e056fdaf1015908cca14")
HELPER_COMMAND = {"command": ["/bin/sh"], "args": ["-c", "sleep infinity"]}
#: ITBench's "Wait for workload to update": 20 retries 15 s apart.
UPDATE_WAIT_SECONDS = 300.0
#: ``k8s`` with ``wait: true`` (the module's default ``wait_timeout``).
CREATE_WAIT_SECONDS = 120.0
#: ``k8s_scale``'s ``wait_timeout`` in the quota and scale-to-zero tasks.
QUOTA_SCALE_WAIT_SECONDS = 60.0
ZERO_SCALE_WAIT_SECONDS = 120.0
#: The priority fault's critical replicas share the node's CPU (``replicas`` in ITBench's task).
CRITICAL_SHARES = 20
ITBENCH_LABELS = {"app.kubernetes.io/component": "workload", "app.kubernetes.io/managed-by": "ITBench"}


def _rng(ctx: FaultContext, ref: ObjectRef) -> random.Random:
    return random.Random(f"{ctx.seed}:{ref}")


def _worker_nodes(ctx: FaultContext) -> list[Obj]:
    """ITBench's ``validate_worker_nodes``: the nodes without the control-plane role label."""
    nodes = ctx.resource("v1", "Node").get(label_selector=f"!{CONTROL_PLANE_LABEL}").to_dict()["items"]
    if not nodes:
        raise FaultError("suitable worker nodes could not be found (every node has the control-plane role)")
    return sorted(nodes, key=lambda n: n["metadata"]["name"])


def _pick_worker(ctx: FaultContext, ref: ObjectRef) -> Obj:
    return _rng(ctx, ref).choice(_worker_nodes(ctx))


def _available(ctx: FaultContext, ref: ObjectRef) -> bool:
    """ITBench's wait: ``status.availableReplicas == status.replicas`` (absent fields never match)."""
    status = (ctx.get(ref) or {}).get("status") or {}
    return "replicas" in status and status.get("availableReplicas") == status["replicas"]


def _wait_available(ctx: FaultContext, ref: ObjectRef, timeout: float) -> None:
    if not ctx.wait_for(lambda: _available(ctx, ref), timeout):
        raise FaultError(f"{ref} did not become available within {timeout:.0f} s")


def _pin(ctx: FaultContext, ref: ObjectRef, node: str, **spec: Any) -> None:
    body = {"spec": {"template": {"spec": {"nodeSelector": {HOSTNAME_LABEL: node}, **spec}}}}
    ctx.patch(ref, body)


def _scale(ctx: FaultContext, ref: ObjectRef, replicas: int) -> None:
    ctx.patch(ref, {"spec": {"replicas": replicas}}, "merge")


def _replicas(ctx: FaultContext, ref: ObjectRef) -> int:
    return int((ctx.require(ref).get("spec") or {}).get("replicas", 1))


def cordon_workload_node(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Pin to a worker, wait until available, cordon it (as ``kubectl cordon``), scale up by one."""
    ref = target(args)
    replicas = _replicas(ctx, ref)
    node = _pick_worker(ctx, ref)["metadata"]["name"]
    _pin(ctx, ref, node)
    _wait_available(ctx, ref, UPDATE_WAIT_SECONDS)
    ctx.patch(ObjectRef("v1", "Node", node), {"spec": {"unschedulable": True}}, "merge")
    _scale(ctx, ref, replicas + 1)
    return f"{ref} pinned to node {node}, node cordoned, scaled to {replicas + 1}"


def select_nonexistent_node(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    node = f"invalid-node-{_rng(ctx, ref).randrange(1000)}"
    _pin(ctx, ref, node)
    return f"{ref} nodeSelector {HOSTNAME_LABEL}={node}"


def _helper_template(name: str, **spec: Any) -> Obj:
    labels = {"app.kubernetes.io/name": name}
    container = {"name": "worker", "image": HELPER_IMAGE, **HELPER_COMMAND}
    container.update(spec.pop("container", {}))
    return {"metadata": {"labels": labels}, "spec": {"containers": [container], **spec}}


def _daemonset_ready(ctx: FaultContext, ref: ObjectRef) -> bool:
    """``k8s`` ``wait: true`` for a DaemonSet: every scheduled pod is ready and up to date."""
    status = (ctx.get(ref) or {}).get("status") or {}
    want = status.get("desiredNumberScheduled")
    return want is not None and status.get("numberReady") == want and status.get("updatedNumberScheduled", want) == want


def repel_workload_by_anti_affinity(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    name = "application-operator"
    ds = ObjectRef("apps/v1", "DaemonSet", name, ref.namespace)
    labels = {"app.kubernetes.io/name": name}
    ctx.create({"apiVersion": ds.api_version, "kind": ds.kind,
                "metadata": {"name": name, "namespace": ref.namespace, "labels": labels},
                "spec": {"selector": {"matchLabels": labels}, "template": _helper_template(name)}})
    if not ctx.wait_for(lambda: _daemonset_ready(ctx, ds), CREATE_WAIT_SECONDS):
        raise FaultError(f"{ds} did not become ready within {CREATE_WAIT_SECONDS:.0f} s")
    rule = {"labelSelector": {"matchExpressions": [
        {"key": "app.kubernetes.io/name", "operator": "In", "values": [name]}]}, "topologyKey": HOSTNAME_LABEL}
    body = {"spec": {"template": {"spec": {"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [rule]}}}}}}
    ctx.patch(ref, body)
    return f"{ref}: required anti-affinity to {ds}"


def _priority_class(name: str, value: int, description: str) -> Obj:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "labels": dict(ITBENCH_LABELS)},
            "value": value, "globalDefault": False, "description": description}


def _critical_cpu(node: Obj) -> str:
    """ITBench's request: ``((allocatable.cpu | int) - 1) / 20`` cores, in millicores."""
    cores = int(parse_quantity((node.get("status") or {}).get("allocatable", {}).get("cpu", "0")))
    if cores < 2:
        raise FaultError(f"node {node['metadata']['name']} has {cores} allocatable CPU; the fault needs at least 2")
    return f"{(cores - 1) * 1000 // CRITICAL_SHARES}m"


def preempt_workload_by_priority(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    node = _pick_worker(ctx, ref)
    node_name = node["metadata"]["name"]
    ctx.create(_priority_class("application-critical", 10000, "High priority class for application workloads"))
    ctx.create(_priority_class("application-non-critical", 1, "Lower priority class for application workloads"))
    _pin(ctx, ref, node_name, priorityClassName="application-non-critical")
    _wait_available(ctx, ref, UPDATE_WAIT_SECONDS)
    name = "critical-data-collector"
    labels = {"app.kubernetes.io/name": name}
    collector = ObjectRef("apps/v1", "Deployment", name, ref.namespace)
    template = _helper_template(name, nodeSelector={HOSTNAME_LABEL: node_name}, priorityClassName="application-critical",
                                container={"resources": {"requests": {"cpu": _critical_cpu(node), "memory": "1Mi"}}})
    ctx.create({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ref.namespace, "labels": labels},
                "spec": {"replicas": CRITICAL_SHARES + 1, "selector": {"matchLabels": labels}, "template": template}})
    # ``wait: true``: the module waits for the Deployment; ITBench goes on when the wait times out.
    ctx.wait_for(lambda: _available(ctx, collector), CREATE_WAIT_SECONDS)
    return f"{ref} pinned to {node_name} at priority 1; {collector} fills the node at priority 10000"


def limit_namespace_memory_quota(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    replicas = _replicas(ctx, ref)
    ctx.create({"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": "memory", "namespace": ref.namespace}, "spec": {"hard": {"memory": "1Gi"}}})
    _scale(ctx, ref, 0)
    if not ctx.wait_for(lambda: _scaled_to(ctx, ref, 0), QUOTA_SCALE_WAIT_SECONDS):
        raise FaultError(f"{ref} did not scale to 0 within {QUOTA_SCALE_WAIT_SECONDS:.0f} s")
    _scale(ctx, ref, replicas)
    return f"ResourceQuota {ref.namespace}/memory (memory 1Gi); {ref} scaled to 0 and back to {replicas}"


def _scaled_to(ctx: FaultContext, ref: ObjectRef, replicas: int) -> bool:
    """``k8s_scale``'s wait: the controller reports exactly ``replicas`` pods."""
    status = (ctx.get(ref) or {}).get("status") or {}
    return (status.get("replicas") or 0) == replicas


def mount_unbindable_claim(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    container = container_named(ctx.require(ref), args["container"]["name"], ref)
    ctx.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": ref.name, "namespace": ref.namespace},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "25Mi"}},
                         "storageClassName": "invalid-class-name"}})
    body = {"spec": {"template": {"spec": {
        "containers": [{"name": container["name"], "volumeMounts": [{"name": "database", "mountPath": "/data/database"}]}],
        "securityContext": {"fsGroup": 1000},
        "volumes": [{"name": "database", "persistentVolumeClaim": {"claimName": ref.name}}]}}}}
    ctx.patch(ref, body)
    return f"{ref}: container {container['name']} mounts PersistentVolumeClaim {ref.name} (class invalid-class-name)"


def scale_workload_to_zero(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    _scale(ctx, ref, 0)
    if not ctx.wait_for(lambda: _scaled_to(ctx, ref, 0), ZERO_SCALE_WAIT_SECONDS):
        raise FaultError(f"{ref} did not scale to 0 within {ZERO_SCALE_WAIT_SECONDS:.0f} s")
    return f"{ref} scaled to 0"


#: ITBench's misconfigured targets (averageUtilization, % of requests).
LOW_TARGETS = {"cpu": 20, "memory": 30}


def lower_autoscaler_targets(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    hpa = autoscaler_of(ctx, ref)
    metrics = [{"type": "Resource", "resource": {"name": name, "target": {"type": "Utilization", "averageUtilization": value}}}
               for name, value in LOW_TARGETS.items()]
    ctx.patch(hpa, {"spec": {"metrics": metrics}}, "merge")
    return f"{hpa}: targets cpu {LOW_TARGETS['cpu']}%, memory {LOW_TARGETS['memory']}%"


OPERATIONS = {
    "cordon_workload_node": cordon_workload_node,
    "select_nonexistent_node": select_nonexistent_node,
    "repel_workload_by_anti_affinity": repel_workload_by_anti_affinity,
    "preempt_workload_by_priority": preempt_workload_by_priority,
    "limit_namespace_memory_quota": limit_namespace_memory_quota,
    "mount_unbindable_claim": mount_unbindable_claim,
    "scale_workload_to_zero": scale_workload_to_zero,
    "lower_autoscaler_targets": lower_autoscaler_targets,
}
