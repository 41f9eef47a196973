"""Helpers every family of operations shares: the target object of an ITBench fault's arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext, ObjectRef

Obj = dict[str, Any]


def target(args: Mapping[str, Any]) -> ObjectRef:
    """``args.kubernetesObject`` (ITBench's way of naming the object a fault acts on)."""
    obj = args["kubernetesObject"]
    meta = obj["metadata"]
    return ObjectRef(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def pod_template(workload: Mapping[str, Any]) -> Obj:
    return dict(workload["spec"]["template"]["spec"])


def container_named(workload: Mapping[str, Any], name: str, ref: ObjectRef) -> Obj:
    """The container ``name`` of a workload's pod template (init containers included)."""
    spec = pod_template(workload)
    for container in [*spec.get("containers", []), *(spec.get("initContainers") or [])]:
        if container["name"] == name:
            return dict(container)
    names = [c["name"] for c in spec.get("containers", [])]
    raise FaultError(f"{ref} has no container {name!r}; containers: {', '.join(names)}")


def template_container(workload: Mapping[str, Any], name: str, ref: ObjectRef) -> Obj:
    """The container ``name`` among the pod template's ``containers`` (the ones ITBench's argument check accepts)."""
    containers = pod_template(workload).get("containers") or []
    for container in containers:
        if container.get("name") == name:
            return dict(container)
    raise FaultError(f"{ref} has no container {name!r}; containers: {', '.join(c.get('name', '?') for c in containers)}")


def edited_containers(ctx: FaultContext, args: Mapping[str, Any]) -> tuple[ObjectRef, list[str]]:
    """The workload, and the containers a container fault edits: ``args.container`` (one of the pod
    template's ``containers``, as ITBench's argument check requires), else all of them."""
    ref = target(args)
    names = [c["name"] for c in pod_template(ctx.require(ref)).get("containers", [])]
    if "container" not in args:
        return ref, names
    name = args["container"]["name"]
    if name not in names:
        raise FaultError(f"{ref} has no container {name!r}; containers: {', '.join(names)}")
    return ref, [name]


def autoscaler_of(ctx: FaultContext, ref: ObjectRef) -> ObjectRef:
    """The HorizontalPodAutoscaler whose scaleTargetRef is the workload (one named like it first)."""
    hpas = ctx.resource("autoscaling/v2", "HorizontalPodAutoscaler").get(namespace=ref.namespace).to_dict()["items"]
    for hpa in sorted(hpas, key=lambda h: h["metadata"]["name"] != ref.name):
        scale_target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if scale_target.get("kind") == ref.kind and scale_target.get("name") == ref.name:
            return ObjectRef("autoscaling/v2", "HorizontalPodAutoscaler", hpa["metadata"]["name"], ref.namespace)
    raise FaultError(f"no HorizontalPodAutoscaler in namespace {ref.namespace} targets {ref} "
                     "(is the app installed with environment.autoscaling.kubernetes.hpa?)")
