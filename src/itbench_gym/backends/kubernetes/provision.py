"""Putting an app from ``envs/<app>/`` on a cluster: the objects the twin deploys, in the app's namespace.

The cluster's own stack (Prometheus with its rules, kube-state-metrics, Chaos Mesh...) is located,
not installed here: ``itbench-gym cluster manifests`` writes it for the user to apply. What an
episode needs of the app is created when missing and left alone when present (a warm cluster).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

from itbench_gym.backends.kubernetes.inventory import describe, key_of
from itbench_gym.backends.sim.app.model import load_manifests
from itbench_gym.backends.sim.app.spec import load_spec
from itbench_gym.backends.sim.install import INSTALL_ORDER
from itbench_gym.backends.sim.twin import APP_RULES, app_rule_objects
from itbench_gym.spec.relocate import relocate_objects, relocate_rules

Obj = dict[str, Any]


def _in_app(obj: Obj, namespace: str) -> bool:
    """Whether a manifest is the app's own: its Namespace or an object in it."""
    meta = obj["metadata"]
    return bool(meta.get("namespace") == namespace or (obj["kind"] == "Namespace" and meta["name"] == namespace))


def app_objects(app_dir: Path, namespace: str | None = None) -> list[Obj]:
    """The app's Namespace, everything in it, and its alert rules, in Helm's install order; moved to
    ``namespace`` when given (an episode's namespace set), its rules then watching that namespace."""
    spec = load_spec(app_dir)
    objects = [o for o in load_manifests(spec) if _in_app(o, spec.namespace)]
    rules = app_rule_objects(app_dir / APP_RULES)
    if namespace is not None and namespace != spec.namespace:
        objects, rules = relocate_objects(objects, {spec.namespace: namespace}), relocate_rules(rules, {spec.namespace: namespace})
    objects += rules
    order = {kind: i for i, kind in enumerate(INSTALL_ORDER)}
    return sorted(objects, key=lambda o: order.get(o["kind"], len(order)))


def stack_objects(app_dir: Path) -> list[Obj]:
    """What the app's cluster runs besides the app (the observability stack, Chaos Mesh, ClickHouse, system
    parts), no Nodes and nothing a controller owns: operators (prometheus-operator, the ClickHouse operator)
    and kubelets make those from the objects listed, and an owner reference cannot be applied by name."""
    spec = load_spec(app_dir)
    return [o for o in load_manifests(spec) if o["kind"] != "Node" and not _in_app(o, spec.namespace)
            and not (o.get("metadata") or {}).get("ownerReferences")]


def provision(client: dynamic.DynamicClient, objects: list[Obj]) -> list[str]:
    """Create each object that does not exist yet; the ones created (a harness log)."""
    made = []
    for obj in objects:
        meta = obj["metadata"]
        resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            resource.get(name=meta["name"], namespace=meta.get("namespace"))
            continue
        except ApiException as exc:
            if exc.status != 404:
                raise
        resource.create(body=obj, namespace=meta.get("namespace"))
        made.append(f"created {describe(key_of(obj))}")
    return made


def unready(client: dynamic.DynamicClient, namespace: str) -> list[str]:
    """The namespace's workloads that are not rolled out and available, each with what it lacks."""
    out = []
    for kind, want, have in (("Deployment", "replicas", "availableReplicas"), ("StatefulSet", "replicas", "readyReplicas"),
                             ("DaemonSet", "desiredNumberScheduled", "numberAvailable")):
        for item in client.resources.get(api_version="apps/v1", kind=kind).get(namespace=namespace).to_dict().get("items") or []:
            spec, status, meta = item.get("spec") or {}, item.get("status") or {}, item["metadata"]
            wanted = int((status if kind == "DaemonSet" else spec).get(want, 1) or 0)
            ready = int(status.get(have) or 0)
            current = int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
            if ready < wanted or not current or (kind == "Deployment" and int(status.get("updatedReplicas") or 0) < wanted):
                out.append(f"{kind} {meta['name']}: {ready}/{wanted} available")
    return out


def wait_ready(client: dynamic.DynamicClient, namespace: str, timeout: float, sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait until every workload of ``namespace`` is available; TimeoutError says which are not."""
    deadline = time.monotonic() + timeout
    while lacking := unready(client, namespace):
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace}: not ready after {timeout:.0f} s: {'; '.join(lacking)}")
        sleep(1.0)
