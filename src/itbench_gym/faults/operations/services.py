"""Service, network, DNS and configuration faults: the same API edits as ITBench's fault role.

Each operation changes one object the way ITBench's Ansible task does (same fields, same values,
same created objects) and waits where that task waits; the twin's request flow then reacts to the
edited objects as kube-proxy, CoreDNS and the CNI would.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Mapping
from typing import Any

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.operations.common import target, template_container

#: The port ITBench points a Service's targetPort at (nothing in the app listens there).
UNUSED_TARGET_PORT = 9999
#: ITBench's wait for the Endpoints to empty (15 retries, 2 s apart; a timeout is not an error).
ENDPOINTS_WAIT_SECONDS = 30.0
#: ``k8s`` ``state: absent, wait: true``: its default ``wait_timeout``.
DELETE_WAIT_SECONDS = 120.0
#: ITBench's wait for the re-rolled workload to be available again (20 retries, 15 s apart).
ROLLOUT_WAIT_SECONDS = 300.0


def modify_target_port(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """The Service port whose targetPort is ``args.targetPort`` forwards to 9999 instead."""
    ref = target(args)
    ports = (ctx.require(ref).get("spec") or {}).get("ports") or []
    wanted = args["targetPort"]
    matching = [p for p in ports if p.get("targetPort", p.get("port")) == wanted]
    if len(matching) != 1:
        have = ", ".join(str(p.get("targetPort", p.get("port"))) for p in ports) or "none"
        raise FaultError(f"{ref} has {len(matching)} port(s) with targetPort {wanted} (targetPorts: {have})")
    port = matching[0]["port"]
    ctx.patch(ref, {"spec": {"ports": [{"port": port, "targetPort": UNUSED_TARGET_PORT}]}})
    return f"{ref}: port {port} -> targetPort {UNUSED_TARGET_PORT}"


def _endpoints_empty(ctx: FaultContext, ref: ObjectRef) -> bool:
    endpoints = ctx.get(ObjectRef("v1", "Endpoints", ref.name, ref.namespace))
    return endpoints is not None and not endpoints.get("subsets")


def invalidate_service_selector(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Add ``app.kubernetes.io/name: invalid-workload-<0..999>`` to the Service's selector (a strategic
    merge keeps the labels it had, so it now selects no pod) and wait for its Endpoints to empty."""
    ref = target(args)
    ctx.require(ref)
    value = f"invalid-workload-{random.Random(ctx.seed).randrange(1000)}"
    ctx.patch(ref, {"spec": {"selector": {"app.kubernetes.io/name": value}}})
    ctx.wait_for(lambda: _endpoints_empty(ctx, ref), ENDPOINTS_WAIT_SECONDS, interval=2.0)
    return f"{ref}: selector app.kubernetes.io/name={value}"


def delete_service(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    ctx.delete(ref)
    if not ctx.wait_for(lambda: ctx.get(ref) is None, DELETE_WAIT_SECONDS, interval=1.0):
        raise FaultError(f"{ref} was still there {DELETE_WAIT_SECONDS:.0f} s after its deletion")
    return f"{ref} deleted"


def block_ingress(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """NetworkPolicy ``<workload>-ingress`` on the workload's pod template labels, policyTypes
    [Ingress], one ingress rule with an empty port list (ITBench's object, field for field)."""
    ref = target(args)
    labels = ((ctx.require(ref)["spec"]["template"].get("metadata") or {}).get("labels")) or {}
    name = f"{ref.name}-ingress"
    ctx.create({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ref.namespace},
        "spec": {"podSelector": {"matchLabels": dict(labels)}, "policyTypes": ["Ingress"], "ingress": [{"ports": []}]},
    })
    return f"NetworkPolicy {ref.namespace}/{name} on {ref}"


def _available(ctx: FaultContext, ref: ObjectRef) -> bool:
    """ITBench's wait: ``availableReplicas`` equals ``replicas`` (both reported)."""
    status = (ctx.get(ref) or {}).get("status") or {}
    return status.get("replicas") is not None and status.get("availableReplicas") == status.get("replicas")


def set_default_dns_policy(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    ref = target(args)
    ctx.require(ref)
    ctx.patch(ref, {"spec": {"template": {"spec": {"dnsPolicy": "Default"}}}})
    if not ctx.wait_for(lambda: _available(ctx, ref), ROLLOUT_WAIT_SECONDS, interval=15.0):
        raise FaultError(f"{ref} was not available {ROLLOUT_WAIT_SECONDS:.0f} s after dnsPolicy: Default")
    return f"{ref}: dnsPolicy Default"


def modify_env_var(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Overwrite an environment variable the container has (exactly once, as ITBench checks)."""
    ref = target(args)
    workload = ctx.require(ref)
    name, env = args["container"]["name"], args["container"]["env"]
    container = template_container(workload, name, ref)
    found = [e for e in container.get("env") or [] if e.get("name") == env["name"]]
    if len(found) != 1:
        have = ", ".join(e.get("name", "?") for e in container.get("env") or []) or "none"
        raise FaultError(f"{ref} container {name!r} has {len(found)} env var(s) named {env['name']!r} (env: {have})")
    body = {"spec": {"template": {"spec": {"containers": [{"name": name, "env": [{"name": env["name"], "value": env["value"]}]}]}}}}
    ctx.patch(ref, body)
    return f"{ref} container {name}: {env['name']}={env['value']}"


#: ITBench's replacement credential: ``password`` lookup, lowercase letters and digits, 24 long.
CORRUPT_ALPHABET = string.ascii_lowercase + string.digits
CORRUPT_LENGTH = 24


def corrupt_secret(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Every key of the Secret's ``data`` gets a random value (drawn from the scenario's seed)."""
    ref = target(args)
    data = ctx.require(ref).get("data") or {}
    if not data:
        raise FaultError(f"{ref} has no data to corrupt")
    rng = random.Random(ctx.seed)
    corrupted = {key: base64.b64encode("".join(rng.choice(CORRUPT_ALPHABET) for _ in range(CORRUPT_LENGTH)).encode()).decode()
                 for key in sorted(data)}
    ctx.patch(ref, {"data": corrupted}, "merge")
    return f"{ref}: {len(corrupted)} key(s) corrupted"


OPERATIONS = {
    "modify_target_port": modify_target_port,
    "invalidate_service_selector": invalidate_service_selector,
    "delete_service": delete_service,
    "block_ingress": block_ingress,
    "set_default_dns_policy": set_default_dns_policy,
    "modify_env_var": modify_env_var,
    "corrupt_secret": corrupt_secret,
}
