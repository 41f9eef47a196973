"""Cloud Provider Kind's load balancers, behind the cloud-provider service controller.

ITBench's kind clusters run ``cloud-provider-kind`` (itbench-hub/ITBench clusters/kind/Makefile
``run-service-provider``; sigs.k8s.io/cloud-provider-kind v0.11.1 per clusters/kind/go.mod). For each
Service of type LoadBalancer it starts an Envoy container on the kind Docker network, and the Service's
``status.loadBalancer.ingress`` gets that container's address: one entry per address family the Service
has, each ``ipMode: Proxy`` with the Service's ports (pkg/loadbalancer/server.go GetLoadBalancer).

The container's address is what Docker's IPAM gives it: the lowest free address of the network after
its gateway, so on ITBench's cluster (nodes 172.18.0.2-5) the first load balancer gets 172.18.0.6, the
next 172.18.0.7, and a deleted one's address is free again. The network is the one the nodes' InternalIPs
are on (envs/astronomy-shop/cluster/nodes.yaml), a /16 as Docker's default address pools carve them.
Which address a Service holds is read back from its status, as the provider reads it back from its
container: nothing to remember beyond the store.

The service controller around it (k8s.io/cloud-provider controllers/service/controller.go) syncs a
Service when it wants a load balancer and something the balancer depends on changed, or when it needs
cleanup: it records ``EnsuringLoadBalancer``, adds the ``service.kubernetes.io/load-balancer-cleanup``
finalizer, ensures the balancer and records ``EnsuredLoadBalancer``; a Service that no longer wants one
(another type, or deleted) gets ``DeletingLoadBalancer``, its finalizer removed, an empty status and
``DeletedLoadBalancer``. A type change records ``Type`` ("LoadBalancer -> ClusterIP"), as its
``needsUpdate`` does. Events come from ``service-controller``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from ..errors import ApiError, is_storage_error
from ..store import clone
from .base import Cache, Controller, Key

Obj = dict[str, Any]

COMPONENT = "service-controller"
FINALIZER = "service.kubernetes.io/load-balancer-cleanup"
#: Docker's default address pools hand each user-defined network a /16 (moby daemon default-address-pools).
DOCKER_NETWORK_PREFIX = 16
#: ``LoadBalancerIPModeProxy``: the provider proxies, so kube-proxy leaves the address alone.
IP_MODE = "Proxy"


def wants_load_balancer(svc: Obj) -> bool:
    """``wantsLoadBalancer``: type LoadBalancer and no class naming another implementation."""
    spec = svc.get("spec") or {}
    return spec.get("type") == "LoadBalancer" and not spec.get("loadBalancerClass")


def _needs_cleanup(svc: Obj) -> bool:
    meta = svc["metadata"]
    return FINALIZER in (meta.get("finalizers") or []) and (bool(meta.get("deletionTimestamp")) or not wants_load_balancer(svc))


def _balancer_view(svc: Obj) -> tuple[Any, ...]:
    """What of a Service the balancer depends on (upstream ``needsUpdate``)."""
    spec = svc.get("spec") or {}
    meta = svc["metadata"]
    return (spec.get("ports"), spec.get("sessionAffinity"), spec.get("loadBalancerSourceRanges"),
            spec.get("loadBalancerIP"), spec.get("externalIPs"), spec.get("externalTrafficPolicy"),
            spec.get("healthCheckNodePort"), spec.get("ipFamilies"), meta.get("annotations"), meta.get("uid"))


def _ingress_ips(svc: Obj) -> list[str]:
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [str(i["ip"]) for i in ingress if i.get("ip")]


class LoadBalancerController(Controller):
    """Gives LoadBalancer Services an address on the kind network, and takes it back."""

    name = "service-lb"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind != "Service" or event == "DELETED":
            return ()  # a deleted Service's container goes with it: its address is free once its status is
        key = Cache.key_of(obj)
        if old is None:
            return [key] if wants_load_balancer(obj) or _needs_cleanup(obj) else ()
        before, after = wants_load_balancer(old), wants_load_balancer(obj)
        if before != after:
            self.ctx.recorder.record(obj, "Normal", "Type", f"{(old.get('spec') or {}).get('type')} -> "
                                     f"{(obj.get('spec') or {}).get('type')}", component=COMPONENT)
            return [key]
        if _needs_cleanup(obj) or (after and _balancer_view(old) != _balancer_view(obj)):
            return [key]
        return ()

    def sync(self, key: Key) -> None:
        svc = self.ctx.cache.get("Service", *key)
        if svc is None:
            return
        if _needs_cleanup(svc) or not wants_load_balancer(svc):
            self._delete(svc)
        else:
            self._ensure(svc)

    # -- the network ------------------------------------------------------------------------------

    def _network(self) -> tuple[ipaddress.IPv4Network, set[ipaddress.IPv4Address]] | None:
        """The kind network (the one the nodes' InternalIPs are on) and the node addresses on it."""
        nodes: set[ipaddress.IPv4Address] = set()
        for node in self.ctx.cache.list("Node"):
            for a in (node.get("status") or {}).get("addresses") or []:
                if a.get("type") == "InternalIP":
                    ip = ipaddress.ip_address(a.get("address", ""))
                    if isinstance(ip, ipaddress.IPv4Address):
                        nodes.add(ip)
        if not nodes:
            return None
        return ipaddress.IPv4Network(f"{min(nodes)}/{DOCKER_NETWORK_PREFIX}", strict=False), nodes

    def _address_of(self, svc: Obj) -> str | None:
        """The address of the Service's container: the one it holds, or the lowest free one."""
        found = self._network()
        if found is None:
            return None  # no node on a network: nowhere to start a container
        network, used = found
        uid = svc["metadata"].get("uid")
        held = [ipaddress.ip_address(ip) for ip in _ingress_ips(svc)]
        for ip in held:
            if ip in network:
                return str(ip)
        for other in self.ctx.cache.list("Service"):
            if other["metadata"].get("uid") != uid:
                used.update(a for a in map(ipaddress.ip_address, _ingress_ips(other)) if isinstance(a, ipaddress.IPv4Address))
        gateway = network.network_address + 1
        for ip in network.hosts():
            if ip != gateway and ip not in used:
                return str(ip)
        return None

    # -- the service controller -------------------------------------------------------------------

    def _ensure(self, svc: Obj) -> None:
        self.ctx.recorder.record(svc, "Normal", "EnsuringLoadBalancer", "Ensuring load balancer", component=COMPONENT)
        finalizers = list(svc["metadata"].get("finalizers") or [])
        if FINALIZER not in finalizers:
            new = clone(svc)
            new["metadata"]["finalizers"] = [*finalizers, FINALIZER]
            updated = self._update(new)
            if updated is None:
                return
            svc = updated
        ip = self._address_of(svc)
        if ip is None:
            return
        spec = svc.get("spec") or {}
        ingress = []
        if "IPv4" in (spec.get("ipFamilies") or ["IPv4"]):
            ports = [{"port": p.get("port"), "protocol": p.get("protocol", "TCP")} for p in spec.get("ports") or []]
            ingress.append({"ip": ip, "ipMode": IP_MODE, "ports": ports})
        self.write_status(svc, {**(svc.get("status") or {}), "loadBalancer": {"ingress": ingress} if ingress else {}})
        self.ctx.recorder.record(svc, "Normal", "EnsuredLoadBalancer", "Ensured load balancer", component=COMPONENT)

    def _delete(self, svc: Obj) -> None:
        if _ingress_ips(svc):
            self.ctx.recorder.record(svc, "Normal", "DeletingLoadBalancer", "Deleting load balancer", component=COMPONENT)
        if not svc["metadata"].get("deletionTimestamp"):
            written = self.write_status(svc, {**(svc.get("status") or {}), "loadBalancer": {}})
            if written is None:
                return
            svc = written
        finalizers = svc["metadata"].get("finalizers") or []
        if FINALIZER in finalizers:
            new = clone(svc)
            new["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
            if self._update(new) is None:
                return
        self.ctx.recorder.record(svc, "Normal", "DeletedLoadBalancer", "Deleted load balancer", component=COMPONENT)

    def _update(self, new: Obj) -> Obj | None:
        try:
            return self.ctx.store.update(new)
        except ApiError as e:
            if e.code in (404, 409) or is_storage_error(e):
                return None  # gone or raced: the event that follows syncs it again
            raise
