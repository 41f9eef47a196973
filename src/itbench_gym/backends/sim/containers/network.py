"""A pod's network as a process exec'd into it meets it: the cluster DNS, and TCP connections
routed by the app model (:func:`itbench_gym.backends.sim.app.network.reach`).

Names resolve the way the pod's resolver asks the cluster DNS (its ``resolv.conf`` search list and
``ndots:5``): Services of every namespace (ClusterIP, or a headless Service's ready pods), pod
records (``a-b-c-d.<namespace>.pod``). A dotted name that is not evidently the cluster's would go to
the node's upstream resolvers, which the twin does not have: it is *unmodelled*, not NXDOMAIN (a
single label, or a name ending in a namespace, that no search domain completes is NXDOMAIN everywhere). Connections
go through the app model's routing (Service port, endpoints, target port, NetworkPolicies, Chaos
Mesh) for the Services of a namespace the app runs in; any other destination is unmodelled.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from itbench_gym.backends.sim.app.cluster_view import ClusterView, PodView
from itbench_gym.backends.sim.app.dns import CLUSTER_DNS, CLUSTER_DOMAIN, is_ip, resolv_conf
from itbench_gym.backends.sim.app.network import dns_reachable, listener_reached, reach
from itbench_gym.backends.sim.app.spec import AppSpec
from itbench_gym.backends.sim.chaos.tproxy import WireRequest, is_json

from .context import Dial, HttpAnswer, HttpServers, Lookup

Obj = dict[str, Any]
#: The resolver option every cluster-first pod gets: a name with fewer dots tries the search list first.
NDOTS = 5
#: How the app model's failures look to one TCP connection (a Service without endpoints is rejected
#: by kube-proxy's rules; a dropped or unrouted packet times out; mTLS and policy resets come after
#: the handshake).
_OUTCOMES = {"refused": "refused", "no_endpoints": "refused", "timeout": "timeout", "mtls_reset": "reset",
             "rbac_reset": "reset"}


@dataclass(frozen=True)
class AppRouting:
    """The app model's view of the namespace it runs in, for its routing, and its HTTP servers."""

    spec: AppSpec
    view: ClusterView
    http: HttpServers | None = None


class ClusterNetwork:
    """The network of one pod: DNS from ``services`` and ``pods`` (every namespace's), connections
    through ``routing`` (None: the pod's namespace runs no app the twin models)."""

    def __init__(self, pod: Obj, services: list[Obj], pods: list[Obj], routing: AppRouting | None,
                 draw: Callable[[str], float], namespaces: frozenset[str] = frozenset()) -> None:
        self._pod, self._services, self._pods, self._routing, self._draw = pod, services, pods, routing, draw
        self._namespaces = namespaces
        self._requests = 0
        self._namespace = str(pod["metadata"].get("namespace") or "default")
        self._resolv = resolv_conf(pod.get("spec") or {}, self._namespace)

    @property
    def nameserver(self) -> str:
        if self._resolv is None:
            return ""
        return next((line.split()[1] for line in self._resolv.splitlines() if line.startswith("nameserver ")), "")

    def _searches(self) -> list[str]:
        line = next((x for x in (self._resolv or "").splitlines() if x.startswith("search ")), "search")
        return line.split()[1:]

    def _source(self) -> PodView | None:
        routing = self._routing
        if routing is None:
            return None
        uid = self._pod["metadata"].get("uid", "")
        known = next((p for p in routing.view.pods if p.uid == uid), None)
        if known is not None:
            return known
        meta, status = self._pod["metadata"], self._pod.get("status") or {}
        return PodView(name=str(meta.get("name", "")), uid=str(uid), service="", labels=dict(meta.get("labels") or {}),
                       node=str((self._pod.get("spec") or {}).get("nodeName", "")), ip=str(status.get("podIP", "")),
                       running=True, ready=False, restarts=0, started_at="", env={}, container={}, limits={}, pod=self._pod)

    def lookup(self, name: str) -> Lookup:
        if is_ip(name):
            return Lookup(name, (name,))
        if self._resolv is None or CLUSTER_DNS not in self.nameserver:
            return Lookup(name, error="unmodelled")
        routing = self._routing
        if routing is not None and not dns_reachable(routing.view, self._source()):
            return Lookup(name, error="timeout")
        bare = name.rstrip(".")
        absolute = name.endswith(".") or bare.count(".") >= NDOTS
        candidates = [bare] if name.endswith(".") else (
            [bare, *(f"{bare}.{d}" for d in self._searches())] if absolute else [*(f"{bare}.{d}" for d in self._searches()), bare])
        for fqdn in candidates:
            found = self._record(fqdn)
            if found is not None:
                return Lookup(fqdn, found)
        if "." in bare and not self._cluster_name(bare):  # the upstream resolvers' to answer
            return Lookup(name, error="unmodelled")
        return Lookup(name, error="nxdomain")

    def _cluster_name(self, name: str) -> bool:
        """Whether a dotted name is evidently the cluster's (``<service>.<namespace>``, ``...svc``,
        ``...cluster.local``), so that the upstream resolvers would answer it NXDOMAIN too."""
        last = name.rsplit(".", 1)[-1]
        return name.endswith(CLUSTER_DOMAIN) or last == "svc" or last in self._namespaces

    def _record(self, fqdn: str) -> tuple[str, ...] | None:
        """CoreDNS' kubernetes plugin's answer for ``fqdn`` (None: NXDOMAIN or not a cluster name)."""
        suffix = f".svc.{CLUSTER_DOMAIN}"
        if fqdn.endswith(suffix):
            parts = fqdn[: -len(suffix)].split(".")
            if len(parts) != 2:
                return None
            name, namespace = parts
            svc = next((s for s in self._services if s["metadata"].get("name") == name
                        and s["metadata"].get("namespace") == namespace), None)
            if svc is None:
                return None
            spec = svc.get("spec") or {}
            if spec.get("type") == "ExternalName":
                return None
            if spec.get("clusterIP") not in (None, "", "None"):
                return (str(spec["clusterIP"]),)
            return self._headless(spec, namespace) or None
        pod_suffix = f".pod.{CLUSTER_DOMAIN}"
        if fqdn.endswith(pod_suffix):
            parts = fqdn[: -len(pod_suffix)].split(".")
            ip = parts[0].replace("-", ".") if len(parts) == 2 else ""
            return (ip,) if is_ip(ip) else None
        return None

    def _headless(self, spec: Obj, namespace: str) -> tuple[str, ...]:
        """A headless Service's records: its ready pods' IPs."""
        selector = spec.get("selector") or {}
        if not selector:
            return ()
        return tuple(sorted(
            str((p.get("status") or {}).get("podIP")) for p in self._pods
            if p["metadata"].get("namespace") == namespace and (p.get("status") or {}).get("podIP")
            and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in (p.get("status") or {}).get("conditions") or [])))

    def _target(self, ip: str) -> str | None:
        """The app service a Service address of the app's namespace leads to ("" for a Service of no
        app service), or None when the address is not one the twin routes."""
        routing = self._routing
        svc = next((s for s in self._services if (s.get("spec") or {}).get("clusterIP") == ip), None)
        if routing is None or svc is None or svc["metadata"].get("namespace") != routing.view.namespace:
            return None
        name = str(svc["metadata"].get("name", ""))
        return name if name in routing.spec.services else ""

    def dial(self, ip: str, port: int) -> Dial:
        address = f"{ip}:{port}"
        routing = self._routing
        target = self._target(ip)
        if routing is None or target is None:
            return Dial(address, "unmodelled")
        outcome = reach(routing.spec, routing.view, self._source(), ip, port, target, handshake=False)
        if outcome.cause == "dns_timeout":  # the model asks DNS even for an address; this dial needs none
            return Dial(address, "unmodelled")
        if outcome.ok_share > 0 and self._draw(address) < outcome.ok_share:
            return Dial(address, "open")
        # the other causes fail a request after its connection is made (HTTP faults, authentication)
        return Dial(address, _OUTCOMES.get(outcome.cause or "", "open"))

    def request(self, ip: str, port: int, method: str, path: str, body: bytes = b"") -> HttpAnswer | None:
        """The request through what lies between the pod and the server (the path's delays, an
        HTTPChaos abort resetting it or a replaced request the server's answer to which the twin does
        not know), then the server's answer."""
        routing = self._routing
        target = self._target(ip)
        if not target or routing is None or routing.http is None:
            return None
        self._requests += 1  # each request of an exec draws its own answer, the same again for the same commands
        connection = f"{ip}:{port}#{self._requests}"
        wire = WireRequest(method, (urlsplit(path).path or "/",), is_json(body))
        path_to = reach(routing.spec, routing.view, self._source(), ip, port, target, request=wire)
        if path_to.ok_share < 1.0 and self._draw(connection) >= path_to.ok_share:
            return HttpAnswer(None, 0.0) if path_to.cause == "http_abort" else None
        if path_to.server_error_share > 0 and self._draw(f"{connection} body") < path_to.server_error_share:
            return None
        listener = listener_reached(routing.spec, routing.view, target, port)
        answer = routing.http.answer(target, method, path, connection, body, listener.serves if listener is not None else None)
        if path_to.answer_lost > 0 and self._draw(f"{connection} answer") < path_to.answer_lost:
            return HttpAnswer(None, 0.0)  # the server answered; a proxy reset the connection instead of passing it on
        return replace(answer, seconds=answer.seconds + path_to.delay_ms / 1000.0) if answer is not None else None


def stable_draw(*parts: object) -> Callable[[str], float]:
    """A uniform number in [0, 1) for each connection, the same for the same inputs (which endpoint
    kube-proxy picks is random; the twin's answer must still be reproducible)."""
    def draw(key: str) -> float:
        digest = hashlib.sha256(repr((*parts, key)).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    return draw
