"""Istio's ambient mesh as its data plane enforces it on the app's calls.

Which pods are in the mesh, and what the mesh does to a call between two of them, follows from
Kubernetes objects alone, as istio-cni, ztunnel and the gateway Envoys read them:

- a pod is *captured* (its traffic goes through the ztunnel of its node) when its namespace or the
  pod itself carries ``istio.io/dataplane-mode=ambient``, the pod does not opt out with
  ``istio.io/dataplane-mode=none``, it is not a proxy itself, and its node runs a ztunnel; the
  CNI agent follows label changes without restarting pods;
- a gateway *proxy* is a pod of a Gateway API ``Gateway`` whose class istiod controls (the pods its
  deployment controller labels ``gateway.networking.k8s.io/gateway-name``): an Envoy with a mesh
  identity that speaks HBONE to captured pods;
- a captured destination whose PeerAuthentication mode is STRICT (workload selector, then the
  namespace's, then the root namespace's; PERMISSIVE by default) resets the connections of a source
  outside the mesh (plaintext);
- AuthorizationPolicies (DENY first, then ALLOW: with any ALLOW policy a request must match one)
  apply where the destination is enforced: at a gateway's Envoy for policies that target its
  Gateway (``targetRef``/``targetRefs``) or select its pods, with the request's method and path,
  answered by HTTP 403 ``RBAC: access denied``; at the destination's ztunnel for policies that
  select the workload or cover its namespace (or the whole mesh from the root namespace), with L4
  attributes only, answered by a connection reset. ztunnel cannot see HTTP: a rule with L7
  attributes fails closed (a DENY rule matches on its L4 parts, an ALLOW rule never matches).

Sources: istio.io docs (ambient/usage/add-workloads, ambient/usage/l4-policy, security/authorization,
reference/config/security/peer_authentication and authorization-policy) for Istio 1.30.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

from .cluster_view import PodView, StoreLike, list_kind, same_objects, selector_matches
from .network import Reach

Obj = dict[str, Any]

ROOT_NAMESPACE = "istio-system"
DATAPLANE_MODE = "istio.io/dataplane-mode"
GATEWAY_NAME = "gateway.networking.k8s.io/gateway-name"
#: The GatewayClass controllers of istiod (ingress gateways and waypoints).
ISTIO_CONTROLLERS = frozenset({"istio.io/gateway-controller", "istio.io/mesh-controller"})
#: The labels of ztunnel's DaemonSet pods (the ztunnel chart's).
ZTUNNEL_LABELS = {"app": "ztunnel"}
SECURITY_GROUP = "security.istio.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"
#: Request attributes only an L7 proxy sees.
_L7_OPERATION = ("methods", "notMethods", "paths", "notPaths", "hosts", "notHosts")
_ROUTE = re.compile(r"^(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (\S+)")


@dataclass(frozen=True)
class Request:
    """What an authorization decision reads of one call: HTTP method and path, destination port."""

    method: str
    path: str
    port: int | None

    @classmethod
    def of_operation(cls, operation: str, port: int | None) -> Request:
        """The request an operation of the app serves (its route, else a POST of its id, as gRPC is)."""
        m = _ROUTE.match(operation)
        return cls(m.group(1), m.group(2), port) if m else cls("POST", "/" + operation, port)


def _matches(value: str | None, patterns: Iterable[str]) -> bool:
    """Istio's string match: exact, ``prefix*``, ``*suffix`` or ``*``."""
    if value is None:
        return False
    for p in patterns:
        if p == "*" or p == value or (p.endswith("*") and value.startswith(p[:-1])) or (p.startswith("*") and value.endswith(p[1:])):
            return True
    return False


def _field(values: Mapping[str, Any], key: str, value: str | None) -> bool:
    """One attribute of a source or operation: ``key`` must match when set, ``notKey`` must not (an
    empty list is unset, as in the policy's protobuf)."""
    want, never = values.get(key), values.get("not" + key[0].upper() + key[1:])
    if want and not _matches(value, [str(v) for v in want]):
        return False
    return not (never and _matches(value, [str(v) for v in never]))


@dataclass(frozen=True)
class _Source:
    principal: str | None
    namespace: str | None
    ip: str


def _source_matches(src: Mapping[str, Any], peer: _Source) -> bool:
    return (_field(src, "principals", peer.principal) and _field(src, "namespaces", peer.namespace)
            and _field(src, "ipBlocks", peer.ip) and _field(src, "remoteIpBlocks", peer.ip))


def _operation_matches(op: Mapping[str, Any], req: Request, l7: bool) -> bool | None:
    """Whether a rule's operation matches; None when it needs L7 attributes that ``l7`` lacks."""
    if not l7 and any(op.get(k) for k in _L7_OPERATION):
        return None
    port = str(req.port) if req.port is not None else None
    if not _field(op, "ports", port):
        return False
    return not l7 or (_field(op, "methods", req.method) and _field(op, "paths", req.path))


def _rule_matches(rule: Mapping[str, Any], peer: _Source, req: Request, l7: bool, action: str) -> bool:
    """A rule matches when one of its ``from`` and one of its ``to`` entries match (absent: any).

    Without L7 attributes (ztunnel) an entry that needs them fails closed; ``when`` conditions are
    not modelled and fail closed the same way.
    """
    closed = action == "DENY"
    if rule.get("when"):
        return closed
    froms = rule.get("from")
    if froms is not None and not any(_source_matches((f or {}).get("source") or {}, peer) for f in froms):
        return False
    tos = rule.get("to")
    if tos is None:
        return True
    for t in tos:
        hit = _operation_matches((t or {}).get("operation") or {}, req, l7)
        if hit is None:
            hit = closed
        if hit:
            return True
    return False


def _policy_matches(policy: Obj, peer: _Source, req: Request, l7: bool) -> bool:
    spec = policy.get("spec") or {}
    action = spec.get("action", "ALLOW")
    return any(_rule_matches(r or {}, peer, req, l7, action) for r in spec.get("rules") or [])


def _targets(policy: Obj) -> list[Mapping[str, Any]]:
    spec = policy.get("spec") or {}
    refs = list(spec.get("targetRefs") or [])
    if spec.get("targetRef"):
        refs.append(spec["targetRef"])
    return refs


@dataclass(frozen=True)
class MeshState:
    """The mesh's configuration as one tick reads it."""

    namespace_labels: Mapping[str, Mapping[str, str]]
    peer_authentications: tuple[Obj, ...]
    authorization_policies: tuple[Obj, ...]
    #: (namespace, name) of the Gateways istiod programs
    istio_gateways: frozenset[tuple[str, str]]
    #: node -> the running ztunnel pod on it
    ztunnels: Mapping[str, Obj]

    @classmethod
    def of(cls, inputs: _MeshInputs) -> MeshState:
        namespaces = {n["metadata"]["name"]: dict(n["metadata"].get("labels") or {}) for n in inputs.namespaces}
        controllers = {c["metadata"]["name"]: (c.get("spec") or {}).get("controllerName") for c in inputs.gateway_classes}
        gateways = frozenset((g["metadata"].get("namespace", ""), g["metadata"]["name"]) for g in inputs.gateways
                             if controllers.get((g.get("spec") or {}).get("gatewayClassName")) in ISTIO_CONTROLLERS)
        ztunnels = {}
        for p in inputs.root_pods:
            status = p.get("status") or {}
            if (selector_matches({"matchLabels": ZTUNNEL_LABELS}, p["metadata"].get("labels")) and status.get("phase") == "Running"
                    and not p["metadata"].get("deletionTimestamp")):
                ztunnels[(p.get("spec") or {}).get("nodeName", "")] = p
        return cls(namespaces, tuple(inputs.peer_authentications), tuple(inputs.authorization_policies), gateways, ztunnels)

    @property
    def present(self) -> bool:
        """Whether any mesh data plane runs (ztunnels or Istio gateways): without one no call is touched."""
        return bool(self.ztunnels or self.istio_gateways)

    # -- membership -------------------------------------------------------------------------------
    def gateway_of(self, pod: Obj) -> str | None:
        """The Gateway a pod proxies for, when istiod programs it."""
        meta = pod["metadata"]
        name = (meta.get("labels") or {}).get(GATEWAY_NAME)
        return name if name is not None and (meta.get("namespace", ""), name) in self.istio_gateways else None

    def captured(self, pod: Obj) -> bool:
        """Whether the pod's traffic goes through its node's ztunnel."""
        meta = pod["metadata"]
        mode = (meta.get("labels") or {}).get(DATAPLANE_MODE)
        if mode == "none" or self.gateway_of(pod) is not None:
            return False
        enrolled = mode == "ambient" or self.namespace_labels.get(meta.get("namespace", ""), {}).get(DATAPLANE_MODE) == "ambient"
        return enrolled and (pod.get("spec") or {}).get("nodeName", "") in self.ztunnels

    def in_mesh(self, pod: Obj | None) -> bool:
        """Whether the pod speaks mTLS with a mesh identity (captured, or a proxy itself)."""
        return pod is not None and (self.captured(pod) or self.gateway_of(pod) is not None)

    @staticmethod
    def principal(pod: Obj) -> str:
        """The pod's SPIFFE identity as AuthorizationPolicy names it (trust domain cluster.local)."""
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        return f"cluster.local/ns/{pod['metadata'].get('namespace', '')}/sa/{sa}"

    # -- policies ---------------------------------------------------------------------------------
    def mtls_mode(self, pod: Obj) -> str:
        """The PeerAuthentication mode that governs the pod's inbound traffic (PERMISSIVE by default)."""
        ns, labels = pod["metadata"].get("namespace", ""), pod["metadata"].get("labels") or {}
        tiers: list[list[Obj]] = [[], [], []]
        for pa in self.peer_authentications:
            where, sel = pa["metadata"].get("namespace"), (pa.get("spec") or {}).get("selector")
            if where == ns and sel and selector_matches(sel, labels):
                tiers[0].append(pa)
            elif where == ns and not sel:
                tiers[1].append(pa)
            elif where == ROOT_NAMESPACE and not sel:
                tiers[2].append(pa)
        for tier in tiers:
            for pa in sorted(tier, key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"])):
                mode = ((pa.get("spec") or {}).get("mtls") or {}).get("mode")
                if mode and mode != "UNSET":
                    return str(mode)
        return "PERMISSIVE"

    def _policies_at(self, pod: Obj) -> tuple[list[Obj], bool]:
        """The AuthorizationPolicies enforced for traffic to ``pod`` and whether the enforcer sees HTTP."""
        ns, labels = pod["metadata"].get("namespace", ""), pod["metadata"].get("labels") or {}
        gateway = self.gateway_of(pod)
        out = []
        for pol in self.authorization_policies:
            where, spec = pol["metadata"].get("namespace"), pol.get("spec") or {}
            refs, sel = _targets(pol), spec.get("selector")
            if refs:
                hit = gateway is not None and where == ns and any(
                    r.get("kind") == "Gateway" and r.get("group", GATEWAY_GROUP) == GATEWAY_GROUP and r.get("name") == gateway for r in refs)
            elif sel:
                hit = where in (ns, ROOT_NAMESPACE) and selector_matches(sel, labels)
            else:
                hit = gateway is None and where in (ns, ROOT_NAMESPACE)
            if hit:
                out.append(pol)
        return out, gateway is not None

    def authorized(self, dst: Obj, src: Obj | None, req: Request) -> bool:
        """Istio's decision for a request from ``src`` (None: outside the cluster) to ``dst``."""
        policies, l7 = self._policies_at(dst)
        if not policies:
            return True
        mtls = self.in_mesh(src)
        peer = _Source(self.principal(src) if src is not None and mtls else None,
                       src["metadata"].get("namespace") if src is not None and mtls else None,
                       str((src.get("status") or {}).get("podIP", "")) if src is not None else "")
        actions = [((p.get("spec") or {}).get("action", "ALLOW"), p) for p in policies]
        if any(a == "DENY" and _policy_matches(p, peer, req, l7) for a, p in actions):
            return False
        allows = [p for a, p in actions if a == "ALLOW"]
        return not allows or any(_policy_matches(p, peer, req, l7) for p in allows)

    def verdict(self, dst: Obj, src: Obj | None, req: Request) -> str | None:
        """Why the mesh refuses the call to ``dst`` (a cause of ``network.CAUSES``), None when it passes."""
        if self.gateway_of(dst) is not None:
            return None if self.authorized(dst, src, req) else "rbac_denied"
        if not self.captured(dst):
            return None
        if self.mtls_mode(dst) == "STRICT" and not self.in_mesh(src):
            return "mtls_reset"
        return None if self.authorized(dst, src, req) else "rbac_reset"


class _MeshInputs(NamedTuple):
    """The stored objects a :class:`MeshState` is read from."""

    namespaces: list[Obj]
    gateway_classes: list[Obj]
    gateways: list[Obj]
    root_pods: list[Obj]
    peer_authentications: list[Obj]
    authorization_policies: list[Obj]

    @classmethod
    def read(cls, store: StoreLike) -> _MeshInputs:
        return cls(list_kind(store, "Namespace"), list_kind(store, "GatewayClass", None, f"{GATEWAY_GROUP}/v1"),
                   list_kind(store, "Gateway", None, f"{GATEWAY_GROUP}/v1"), list_kind(store, "Pod", ROOT_NAMESPACE),
                   list_kind(store, "PeerAuthentication", None, f"{SECURITY_GROUP}/v1"),
                   list_kind(store, "AuthorizationPolicy", None, f"{SECURITY_GROUP}/v1"))

    def same(self, other: _MeshInputs) -> bool:
        """Whether both reads found the very same stored objects."""
        return all(same_objects(a, b) for a, b in zip(self, other, strict=True))


class MeshReader:
    """Reads the mesh each tick, keeping the last :class:`MeshState` while its objects are the very
    same stored objects (stored objects never change in place): callers may then key what they
    derive from the mesh by the state's identity."""

    def __init__(self) -> None:
        self._last: tuple[_MeshInputs, MeshState] | None = None

    def read(self, store: StoreLike) -> MeshState:
        inputs = _MeshInputs.read(store)
        if self._last is not None and self._last[0].same(inputs):
            return self._last[1]
        state = MeshState.of(inputs)
        self._last = (inputs, state)
        return state


def endpoints(view: Any, host: str) -> list[Obj]:
    """The ready pods behind the Service ``host`` names in the view's namespace (none for another
    name); a fact of the view's objects, worked out once while they stay the same (read-only)."""
    found: list[Obj] = view.fact(("endpoints", host), partial(_endpoints, view, host))
    return found


def _endpoints(view: Any, host: str) -> list[Obj]:
    name = host.split(".", 1)[0]
    if "." in host and host.split(".")[1] != view.namespace:
        return []
    svc = view.services.get(name)
    selector = ((svc or {}).get("spec") or {}).get("selector")
    if not selector:
        return []
    return [p for p in view.selected({"matchLabels": selector})
            if not p["metadata"].get("deletionTimestamp")
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in (p.get("status") or {}).get("conditions") or [])]


def admit(mesh: MeshState, view: Any, src: PodView | None, host: str, port: int | None, operation: str, r: Reach) -> Reach:
    """``r`` with the share of the Service's endpoints that the mesh refuses taken out of it (worked
    out once per mesh state while the view's objects stay the same)."""
    if r.ok_share <= 0 or not mesh.present:
        return r
    key = ("mesh refusal", id(mesh), src.uid if src is not None else None, host, port, operation)
    known = view.derived.get(key)
    if known is None or known[0] is not mesh:
        known = view.derived[key] = (mesh, _refusal(mesh, view, src, host, port, operation))
    refused, cause = known[1]
    if cause is None:
        return r
    return replace(r, ok_share=r.ok_share * (1.0 - refused), cause=cause)


def _refusal(mesh: MeshState, view: Any, src: PodView | None, host: str, port: int | None, operation: str) -> tuple[float, str | None]:
    """Share of the Service's ready endpoints the mesh refuses a call from ``src``, and the main cause."""
    pods = endpoints(view, host)
    if not pods:
        return 0.0, None
    req = Request.of_operation(operation, port)
    causes = Counter(c for c in (mesh.verdict(p, src.pod if src is not None else None, req) for p in pods) if c)
    if not causes:
        return 0.0, None
    return sum(causes.values()) / len(pods), causes.most_common(1)[0][0]
