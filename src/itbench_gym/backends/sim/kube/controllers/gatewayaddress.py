"""What istiod reports on a Gateway once its Service has (or loses) an external address.

istiod (istio/istio 1.30.3, pilot/pkg/config/kube/gateway/conversion.go reportGatewayStatus and
setProgrammedCondition, gatewaycommon/context.go ResolveGatewayInstances) resolves each Gateway it
programs to the Service its deployment controller made for it, ``<service>.<namespace>.svc.cluster.local:
<listener port>``. While that Service is a LoadBalancer without an address, the Gateway is
``Programmed=False``, reason ``AddressNotAssigned`` ("address pending for hostname ..."); once the
load balancer has an address, ``Programmed=True`` ("Resource programmed, assigned to service(s) ...") and
``status.addresses`` lists the Service's external addresses (``IPAddress`` for an IP). Without external
addresses class istio reports the Services' hostnames that are not pending (classinfo.go: Hostname), and an
address once reported is never taken away.

The rest of istiod's Gateway status (Accepted, the listeners and their attached routes) is install-time data
(envs/*/cluster, envs/*/manifests): this controller keeps the Programmed condition and the addresses of a
Gateway whose status istiod has reported in step with its Services. Its Services are found by their owner
reference to the Gateway, as istiod's deployment controller creates them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.timestamps import rfc3339

from ...app.mesh import GATEWAY_GROUP, ISTIO_CONTROLLERS
from ..errors import ApiError
from ..store import clone
from .base import Controller, Key

Obj = dict[str, Any]

GATEWAY_VERSION = f"{GATEWAY_GROUP}/v1"


def _gateway_refs(svc: Obj) -> list[str]:
    return [str(r.get("name")) for r in (svc["metadata"].get("ownerReferences") or [])
            if r.get("kind") == "Gateway" and str(r.get("apiVersion", "")).startswith(GATEWAY_GROUP + "/")]


def _external(svc: Obj) -> list[str]:
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    return [str(i.get("ip") or i.get("hostname")) for i in ingress if i.get("ip") or i.get("hostname")]


def _join(items: list[str]) -> str:
    """istiod's ``humanReadableJoin``."""
    if len(items) <= 2:
        return " and ".join(items)
    return ", ".join(items[:-1]) + ", and " + items[-1]


def _address(value: str) -> Obj:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return {"type": "Hostname", "value": value}
    return {"type": "IPAddress", "value": value}


class GatewayAddressController(Controller):
    """Keeps an istiod Gateway's Programmed condition and addresses in step with its Services."""

    name = "istio-gateway-address"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind != "Service":
            return ()
        gateways = _gateway_refs(obj)
        if not gateways:
            return ()
        if old is not None and event != "DELETED" and (_external(old), (old.get("spec") or {}).get("type")) == (
                _external(obj), (obj.get("spec") or {}).get("type")):
            return ()
        ns = obj["metadata"].get("namespace") or ""
        return [(ns, name) for name in gateways]

    def sync(self, key: Key) -> None:
        store = self.ctx.store
        try:
            gateway = store.get("Gateway", key[0], key[1], GATEWAY_VERSION)
            klass = store.get("GatewayClass", None, (gateway.get("spec") or {}).get("gatewayClassName", ""), GATEWAY_VERSION)
        except ApiError as e:
            if e.code == 404:
                return  # no such Gateway (or class, or Gateway API at all): istiod programs nothing
            raise
        if (klass.get("spec") or {}).get("controllerName") not in ISTIO_CONTROLLERS:
            return
        status = gateway.get("status") or {}
        conditions = status.get("conditions") or []
        if not any(c.get("type") == "Programmed" for c in conditions):
            return  # istiod's status for this Gateway is not part of the twin's data
        uid = gateway["metadata"].get("uid")
        services = sorted((s for s in self.ctx.cache.list("Service", key[0])
                           if any(r.get("kind") == "Gateway" and r.get("name") == key[1] and r.get("uid") in (None, uid)
                                  for r in s["metadata"].get("ownerReferences") or [])),
                          key=lambda s: str(s["metadata"]["name"]))
        ports = sorted({int(listener["port"]) for listener in (gateway.get("spec") or {}).get("listeners") or []
                        if "port" in listener})
        hosts = [f"{s['metadata']['name']}.{key[0]}.svc.cluster.local" for s in services]
        internal = sorted(f"{h}:{p}" for h in hosts for p in ports)
        external = sorted({a for s in services for a in _external(s)})
        pending = [h for h, s in zip(hosts, services, strict=True)
                   if (s.get("spec") or {}).get("type") == "LoadBalancer" and not _external(s)]
        if not services:
            programmed = ("False", "InvalidAddress", "Failed to assign to any requested addresses")
        elif pending:
            warnings = "; ".join(sorted(f'address pending for hostname "{h}"' for h in pending))
            programmed = ("False", "AddressNotAssigned",
                          f"Assigned to service(s) {_join(internal)}, but failed to assign to all requested addresses: {warnings}")
        else:
            programmed = ("True", "Programmed", f"Resource programmed, assigned to service(s) {_join(internal)}")
        reported = external or [h for h in hosts if h not in pending]
        new_status = dict(status)
        new_status["conditions"] = [self._programmed(c, programmed) if c.get("type") == "Programmed" else c
                                    for c in conditions]
        if reported:
            new_status["addresses"] = [_address(a) for a in reported]
        if new_status == status:
            return
        new = clone(gateway)
        new["status"] = new_status
        try:
            store.update(new, subresource="status")
        except ApiError as e:
            if e.code != 404:
                raise  # raced or the store is full: the work queue retries it

    def _programmed(self, condition: Obj, value: tuple[str, str, str]) -> Obj:
        status, reason, message = value
        new = {**condition, "status": status, "reason": reason, "message": message}
        if "lastTransitionTime" in condition and condition.get("status") != status:
            new["lastTransitionTime"] = rfc3339(self.ctx.now())
        return new
