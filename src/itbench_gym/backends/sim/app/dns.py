"""Name resolution as a pod's resolver does it: the pod's dnsPolicy decides which resolver it asks.

The kubelet writes each pod's resolv.conf from its ``dnsPolicy``: ``ClusterFirst`` (the default;
``ClusterFirstWithHostNet`` for host-network pods) points at the cluster DNS with the search list
``<namespace>.svc.<domain> svc.<domain> <domain>``, so ``cart``, ``cart.otel-demo`` and
``cart.otel-demo.svc.cluster.local`` all find Service cart. ``Default`` (and ``ClusterFirst`` on
the host network) inherits the node's resolv.conf, whose resolver knows nothing of the cluster's
names: every Service name is NXDOMAIN while external names still resolve. ``None`` takes
``dnsConfig`` alone: cluster names resolve only when one of its nameservers is the cluster DNS.
An IP literal needs no lookup. The queries to the cluster DNS leave the pod like any packet, so an
egress NetworkPolicy that does not admit them (UDP 53 to the DNS server's pods) makes every lookup
time out (:mod:`.network`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

#: The kubelet's ``clusterDNS`` (kube-dns' ClusterIP) and ``clusterDomain`` as kind configures them.
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
DNS_PORT = 53


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _search_list(pod_spec: Mapping[str, Any], namespace: str) -> list[str] | None:
    """The search domains a pod's resolver tries against the cluster DNS; None when it does not ask it."""
    policy = pod_spec.get("dnsPolicy") or "ClusterFirst"
    cluster = [f"{namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]
    config = pod_spec.get("dnsConfig") or {}
    if policy == "None":
        if CLUSTER_DNS not in (config.get("nameservers") or []):
            return None
        return [str(s) for s in config.get("searches") or []]
    if policy == "Default" or (policy == "ClusterFirst" and pod_spec.get("hostNetwork")):
        return None
    return cluster + [str(s) for s in config.get("searches") or []]


def asks_cluster_dns(pod_spec: Mapping[str, Any] | None) -> bool:
    """Whether a pod's resolver sends its queries to the cluster DNS (through the pod's own egress)."""
    return _search_list(pod_spec or {}, "") is not None


def service_for(host: str, pod_spec: Mapping[str, Any] | None, namespace: str, services: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The Service of ``namespace`` that a pod with ``pod_spec`` (None: a cluster-DNS client) reaches
    when it dials ``host``; None when the name does not resolve to one of them (NXDOMAIN)."""
    if is_ip(host):
        return next((name for name, svc in services.items() if (svc.get("spec") or {}).get("clusterIP") == host), None)
    search = _search_list(pod_spec or {}, namespace)
    if search is None:
        return None
    name = host.rstrip(".")
    candidates = [name] if host.endswith(".") else [f"{name}.{domain}" for domain in search] + [name]
    suffix = f".{namespace}.svc.{CLUSTER_DOMAIN}"
    for fqdn in candidates:
        if fqdn.endswith(suffix) and fqdn[: -len(suffix)] in services:
            return fqdn[: -len(suffix)]
    return None


def resolv_conf(pod_spec: Mapping[str, Any], namespace: str) -> str | None:
    """The ``/etc/resolv.conf`` containerd writes from the kubelet's DNS config for a pod (search,
    nameservers, options, in that order); None when the pod gets the node's own file (``Default``,
    ``ClusterFirst`` on the host network), which the twin does not model. ``dnsConfig`` adds
    nameservers and searches after the cluster's (duplicates dropped) and overrides options by name."""
    policy = pod_spec.get("dnsPolicy") or "ClusterFirst"
    config = pod_spec.get("dnsConfig") or {}
    if policy == "Default" or (policy == "ClusterFirst" and pod_spec.get("hostNetwork")):
        return None
    cluster = policy != "None"
    nameservers = [CLUSTER_DNS] if cluster else []
    searches = [f"{namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN] if cluster else []
    options: dict[str, str | None] = {"ndots": "5"} if cluster else {}
    for server in config.get("nameservers") or []:
        if str(server) not in nameservers:
            nameservers.append(str(server))
    for domain in config.get("searches") or []:
        if str(domain) not in searches:
            searches.append(str(domain))
    for option in config.get("options") or []:
        value = option.get("value")
        options[str(option.get("name", ""))] = None if value is None else str(value)
    lines = [f"search {' '.join(searches)}"] if searches else []
    lines += [f"nameserver {s}" for s in nameservers]
    if options:
        lines.append("options " + " ".join(k if v is None else f"{k}:{v}" for k, v in options.items()))
    return "".join(f"{line}\n" for line in lines)
