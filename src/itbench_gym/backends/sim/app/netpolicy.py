"""NetworkPolicy enforcement as a CNI does it (networking.k8s.io/v1 semantics).

A connection from one pod to another (after kube-proxy chose the backend: the destination is a pod
IP and its container port) is allowed when the destination is not ingress-isolated or some policy
selecting it has an ingress rule admitting the source on that port, *and* the source is not
egress-isolated or some policy selecting it has an egress rule admitting the destination. A pod is
isolated in a direction by any policy in its namespace that selects it and lists that direction in
``policyTypes`` (absent: Ingress, plus Egress when the policy has egress rules).

In a rule, a missing or empty ``from``/``to`` matches every peer and a missing or empty ``ports``
matches every port, so ``ingress: [{}]`` admits everything while ``ingress: []`` admits nothing.
Peers: ``podSelector`` (pods of the policy's namespace), ``namespaceSelector`` (every pod of the
matching namespaces), both (the selected pods of the selected namespaces), ``ipBlock`` (the peer's
IP in ``cidr`` and outside every ``except``). Ports: a number or the destination pod's named
container port, with ``protocol`` (default TCP) and an optional ``endPort`` range. Blocked
packets are dropped, so the caller sees a timeout, not a refusal.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .cluster_view import selector_matches


@dataclass(frozen=True)
class Endpoint:
    """One side of a connection: a pod by its labels, namespace and IP (an empty IP: unknown)."""

    labels: Mapping[str, str]
    namespace: str
    ip: str = ""
    #: The pod's container ports by name (what a named policy port refers to on the destination).
    named_ports: Mapping[str, int] | None = None

    @classmethod
    def of_pod(cls, pod: Mapping[str, Any]) -> Endpoint:
        meta = pod.get("metadata") or {}
        named = {str(p["name"]): int(p["containerPort"]) for c in (pod.get("spec") or {}).get("containers") or []
                 for p in c.get("ports") or [] if p.get("name") and "containerPort" in p}
        return cls(meta.get("labels") or {}, meta.get("namespace") or "default", (pod.get("status") or {}).get("podIP", ""), named)


def _namespace_labels(namespace: str, labels: Mapping[str, Mapping[str, str]]) -> Mapping[str, str]:
    """A namespace's labels; the API server always sets ``kubernetes.io/metadata.name``."""
    return {**labels.get(namespace, {}), "kubernetes.io/metadata.name": namespace}


def _in_block(block: Mapping[str, Any], ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
        if addr not in ipaddress.ip_network(str(block.get("cidr", "")), strict=False):
            return False
        return not any(addr in ipaddress.ip_network(str(x), strict=False) for x in block.get("except") or [])
    except ValueError:
        return False


def _peer_matches(rule_peer: Mapping[str, Any], peer: Endpoint, policy_ns: str, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    if "ipBlock" in rule_peer:
        return bool(peer.ip) and _in_block(rule_peer["ipBlock"] or {}, peer.ip)
    if not peer.namespace:
        return False  # not a pod: only an ipBlock can name it
    if "namespaceSelector" in rule_peer:
        if not selector_matches(rule_peer["namespaceSelector"], _namespace_labels(peer.namespace, ns_labels)):
            return False
    elif peer.namespace != policy_ns:
        return False
    return "podSelector" not in rule_peer or selector_matches(rule_peer["podSelector"], peer.labels)


def _port_matches(rule_port: Mapping[str, Any], port: int, protocol: str, dst: Endpoint) -> bool:
    if str(rule_port.get("protocol", "TCP")) != protocol:
        return False
    want = rule_port.get("port")
    if want is None:
        return True
    if isinstance(want, str) and not want.isdigit():
        return (dst.named_ports or {}).get(want) == port
    low = int(want)
    end = rule_port.get("endPort")
    return low <= port <= int(end) if end is not None else port == low


def _rule_admits(rule: Mapping[str, Any], peers_key: str, peer: Endpoint, port: int, protocol: str, dst: Endpoint,
                 policy_ns: str, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    peers = rule.get(peers_key) or []
    ports = rule.get("ports") or []
    return ((not peers or any(_peer_matches(p or {}, peer, policy_ns, ns_labels) for p in peers))
            and (not ports or any(_port_matches(p or {}, port, protocol, dst) for p in ports)))


def _types(spec: Mapping[str, Any]) -> list[str]:
    types = spec.get("policyTypes")
    return list(types) if types else ["Ingress"] + (["Egress"] if spec.get("egress") else [])


def _direction_allows(policies: Sequence[Mapping[str, Any]], direction: str, subject: Endpoint, peer: Endpoint, port: int,
                      protocol: str, dst: Endpoint, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether ``subject`` (the pod a policy must select) lets the connection through in ``direction``."""
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    isolated = False
    for pol in policies:
        meta, spec = pol.get("metadata") or {}, pol.get("spec") or {}
        ns = meta.get("namespace") or "default"
        if ns != subject.namespace or direction not in _types(spec) or not selector_matches(spec.get("podSelector") or {}, subject.labels):
            continue
        isolated = True
        if any(_rule_admits(rule or {}, peers_key, peer, port, protocol, dst, ns, ns_labels) for rule in spec.get(rules_key) or []):
            return True
    return not isolated


def allows(policies: Sequence[Mapping[str, Any]], src: Endpoint | None, dst: Endpoint, port: int, protocol: str = "TCP",
           ns_labels: Mapping[str, Mapping[str, str]] | None = None) -> bool:
    """Whether the policies let a connection from ``src`` (None: from outside every pod) reach ``dst:port``."""
    labels = ns_labels or {}
    outside = Endpoint({}, "", "")
    if not _direction_allows(policies, "Ingress", dst, src or outside, port, protocol, dst, labels):
        return False
    return src is None or _direction_allows(policies, "Egress", src, dst, port, protocol, dst, labels)
