"""Istio service-mesh faults: objects of Istio's APIs and labels of ambient mode, as ITBench's tasks
write them (``roles/faults/tasks/inject_*istio*.yaml``). The twin's mesh model
(``backends/sim/app/mesh.py``) enforces them as istio-cni, ztunnel and the gateway Envoys would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.backends.sim.app.mesh import DATAPLANE_MODE
from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext
from itbench_gym.faults.operations.common import target

SECURITY_API = "security.istio.io/v1"


def enforce_strict_mtls(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """PeerAuthentication ``mtls-strict`` (mode STRICT) for the workload's namespace, and the workload's
    pods taken out of the ambient mesh (pod template label ``istio.io/dataplane-mode: none``): its
    plaintext connections to the mesh's other pods are then reset."""
    ref = target(args)
    ctx.require(ref)
    ctx.create({"apiVersion": SECURITY_API, "kind": "PeerAuthentication",
                "metadata": {"name": "mtls-strict", "namespace": ref.namespace}, "spec": {"mtls": {"mode": "STRICT"}}})
    ctx.patch(ref, {"spec": {"template": {"metadata": {"labels": {DATAPLANE_MODE: "none"}}}}})
    return f"PeerAuthentication {ref.namespace}/mtls-strict STRICT; {ref} pods labelled {DATAPLANE_MODE}=none"


def deny_gateway_traffic(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """AuthorizationPolicy ``<gateway>-deny`` (action DENY, targetRef the Gateway) whose one rule
    matches the given HTTP methods: the gateway's Envoy answers those requests 403."""
    ref = target(args)
    ctx.require(ref)
    methods = list(args["httpMethods"])
    name = f"{ref.name}-deny"
    ctx.create({"apiVersion": SECURITY_API, "kind": "AuthorizationPolicy", "metadata": {"name": name, "namespace": ref.namespace},
                "spec": {"action": "DENY", "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": ref.name},
                         "rules": [{"to": [{"operation": {"methods": methods}}]}]}})
    return f"AuthorizationPolicy {ref.namespace}/{name} denies {', '.join(methods) or 'every method'} at {ref}"


def disable_ambient_namespace(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Namespace label ``istio.io/dataplane-mode: none``: istio-cni stops redirecting its pods to ztunnel."""
    ref = target(args)
    labels = (ctx.require(ref).get("metadata") or {}).get("labels") or {}
    if labels.get(DATAPLANE_MODE) == "none":
        raise FaultError(f"{ref} is already out of the ambient mesh ({DATAPLANE_MODE}=none)")
    ctx.patch(ref, {"metadata": {"labels": {DATAPLANE_MODE: "none"}}}, "merge")
    return f"{ref} labelled {DATAPLANE_MODE}=none"


OPERATIONS = {
    "enforce_strict_mtls": enforce_strict_mtls,
    "deny_gateway_traffic": deny_gateway_traffic,
    "disable_ambient_namespace": disable_ambient_namespace,
}
