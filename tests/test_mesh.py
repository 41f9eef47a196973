"""Istio's ambient mesh in the twin: who is in it, what its policies refuse, what its proxies report,
and the three Istio faults on Bookinfo (injected through the harness' API path, reverted by removal)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from conftest import ShopTwin
from itbench_gym.backends.sim.app.mesh import MeshState, Request
from itbench_gym.faults import FaultError
from itbench_gym.faults.inject import inject_faults, remove_faults
from itbench_gym.spec import FaultRef

NS = "book-info"
GATEWAY_TO_PRODUCTPAGE = ('istio_requests_total{reporter="source",source_canonical_service="bookinfo-gateway-istio",'
                          'destination_canonical_service="productpage"}')


def _pod(name: str, labels: dict[str, str], ns: str = NS, node: str = "worker-1", sa: str = "default") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {"nodeName": node, "serviceAccountName": sa},
            "status": {"podIP": "10.244.1.9"}}


def _mesh(peer: list[dict[str, Any]] | None = None, policies: list[dict[str, Any]] | None = None,
          ns_labels: dict[str, str] | None = None) -> MeshState:
    return MeshState({NS: {"istio.io/dataplane-mode": "ambient"} if ns_labels is None else ns_labels}, tuple(peer or ()),
                     tuple(policies or ()), frozenset({(NS, "gw")}), {"worker-1": _pod("ztunnel-x", {"app": "ztunnel"}, "istio-system")})


def _policy(spec: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": ns, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


APP = _pod("details-1", {"app": "details"}, sa="bookinfo-details")
CLIENT = _pod("productpage-1", {"app": "productpage"}, sa="bookinfo-productpage")
OUTSIDER = _pod("productpage-2", {"app": "productpage", "istio.io/dataplane-mode": "none"})
GATEWAY = _pod("gw-1", {"gateway.networking.k8s.io/gateway-name": "gw", "istio.io/dataplane-mode": "none"})
GET = Request("GET", "/details/0", 9080)


def test_membership_follows_namespace_and_pod_labels_and_needs_a_ztunnel() -> None:
    mesh = _mesh()
    assert mesh.captured(APP) and not mesh.captured(OUTSIDER)
    assert not mesh.captured(GATEWAY) and mesh.in_mesh(GATEWAY)
    assert not mesh.captured(_pod("x", {"app": "x"}, node="worker-2")), "no ztunnel on worker-2"
    out = _mesh(ns_labels={"istio.io/dataplane-mode": "none"})
    assert not out.captured(APP) and out.captured(_pod("y", {"istio.io/dataplane-mode": "ambient"}))


def test_strict_mtls_resets_plaintext_sources_only() -> None:
    mesh = _mesh(peer=[_policy({"mtls": {"mode": "STRICT"}})])
    assert mesh.verdict(APP, OUTSIDER, GET) == "mtls_reset"
    assert mesh.verdict(APP, None, GET) == "mtls_reset"
    assert mesh.verdict(APP, CLIENT, GET) is None and mesh.verdict(APP, GATEWAY, GET) is None
    # a workload-level PERMISSIVE overrides the namespace's STRICT
    permissive = _policy({"selector": {"matchLabels": {"app": "details"}}, "mtls": {"mode": "PERMISSIVE"}})
    assert _mesh(peer=[_policy({"mtls": {"mode": "STRICT"}}), permissive]).verdict(APP, OUTSIDER, GET) is None


def test_gateway_policy_denies_the_listed_methods_with_403() -> None:
    deny_get = _policy({"action": "DENY", "targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
                        "rules": [{"to": [{"operation": {"methods": ["GET"]}}]}]})
    mesh = _mesh(policies=[deny_get])
    assert mesh.verdict(GATEWAY, None, Request("GET", "/productpage", 80)) == "rbac_denied"
    assert mesh.verdict(GATEWAY, None, Request("POST", "/login", 80)) is None
    assert mesh.verdict(APP, CLIENT, GET) is None, "a Gateway-targeted policy does not bind workloads"
    every = _policy({"action": "DENY", "targetRef": {"kind": "Gateway", "name": "gw"}, "rules": [{"to": [{"operation": {"methods": []}}]}]})
    assert _mesh(policies=[every]).verdict(GATEWAY, None, Request("POST", "/login", 80)) == "rbac_denied"


def test_ztunnel_policies_see_identities_and_fail_closed_on_http_rules() -> None:
    allow_pp = _policy({"selector": {"matchLabels": {"app": "details"}},
                        "rules": [{"from": [{"source": {"principals": ["cluster.local/ns/book-info/sa/bookinfo-productpage"]}}]}]})
    mesh = _mesh(policies=[allow_pp])
    assert mesh.verdict(APP, CLIENT, GET) is None
    assert mesh.verdict(APP, GATEWAY, GET) == "rbac_reset"
    allow_get = _policy({"rules": [{"to": [{"operation": {"methods": ["GET"]}}]}]})
    assert _mesh(policies=[allow_get]).verdict(APP, CLIENT, GET) == "rbac_reset", "ztunnel cannot match methods"
    deny_post = _policy({"action": "DENY", "rules": [{"to": [{"operation": {"methods": ["POST"]}}]}]})
    assert _mesh(policies=[deny_post]).verdict(APP, CLIENT, GET) == "rbac_reset"


@pytest.fixture(scope="module")
def bookinfo() -> Iterator[ShopTwin]:
    twin = ShopTwin("SRE-StrictMutualTLS-v0")
    yield twin
    twin.close()


def _inject(twin: ShopTwin, fault: str, args: dict[str, Any]) -> Any:
    ctx = twin.context()
    inject_faults([FaultRef(fault, args)], ctx)
    return ctx


def _target(kind: str, name: str, api: str = "apps/v1") -> dict[str, Any]:
    return {"kubernetesObject": {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": NS}}}


def test_healthy_bookinfo_is_quiet_and_reports_through_its_monitors(bookinfo: ShopTwin) -> None:
    bookinfo.reset()
    assert bookinfo.firing() == {"Watchdog"}
    assert bookinfo.value('sum(rate(request_result_total{job="book-info/productpage-v1",response_code="200"}[2m]))') > 0.4
    assert bookinfo.value(f"sum(rate({GATEWAY_TO_PRODUCTPAGE}[2m]))") > 0.4
    assert bookinfo.value('sum(rate(istio_tcp_connections_opened_total{job="istio-system/ztunnel",reporter="destination",'
                          'source_canonical_service="reviews",destination_canonical_service="ratings"}[5m]))') > 0.2
    # no monitor, no series: deleting the gateway's PodMonitor stops its metrics
    bookinfo.store.delete("PodMonitor", NS, "bookinfo-gateway", api_version="monitoring.coreos.com/v1")
    bookinfo.backend.advance(120)
    assert bookinfo.value('count(istio_requests_total{job="book-info/bookinfo-gateway"})') == 0


def test_strict_mtls_fault_fails_productpage_lookups_until_removed(bookinfo: ShopTwin) -> None:
    bookinfo.reset()
    ctx = _inject(bookinfo, "strict-mutual-tls-istio-service-mesh-enforcement", _target("Deployment", "productpage-v1"))
    bookinfo.backend.advance(240)
    assert bookinfo.value('sum(rate(request_result_total{destination_app="details",response_code="500"}[1m]))') > 0.2
    # productpage left the mesh: the gateway no longer knows who it talks to
    assert bookinfo.value(f"sum(rate({GATEWAY_TO_PRODUCTPAGE}[1m]))") == 0
    remove_faults(ctx)
    bookinfo.backend.advance(240)
    assert bookinfo.value('sum(rate(request_result_total{response_code="500"}[1m]))') == 0
    assert bookinfo.value(f"sum(rate({GATEWAY_TO_PRODUCTPAGE}[1m]))") > 0.2


def test_gateway_authorization_fault_answers_403_and_starves_the_app(bookinfo: ShopTwin) -> None:
    bookinfo.reset()
    gateway = _target("Gateway", "bookinfo-gateway", "gateway.networking.k8s.io/v1")
    _inject(bookinfo, "traffic-denying-istio-gateway-authorization-policy", {**gateway, "httpMethods": ["POST"]})
    bookinfo.backend.advance(120)
    assert bookinfo.value(f"sum(rate({GATEWAY_TO_PRODUCTPAGE}[1m]))") > 0.2, "the load generator only GETs"
    bookinfo.reset()
    _inject(bookinfo, "traffic-denying-istio-gateway-authorization-policy", {**gateway, "httpMethods": ["GET"]})
    bookinfo.backend.advance(120)
    assert bookinfo.value('sum(rate(istio_requests_total{response_code="403",destination_canonical_service="unknown"}[1m]))') > 0.2
    assert bookinfo.value("sum(rate(request_result_total[1m]))") == 0
    with pytest.raises(FaultError, match="does not exist"):
        _inject(bookinfo, "traffic-denying-istio-gateway-authorization-policy",
                {**_target("Gateway", "nope", "gateway.networking.k8s.io/v1"), "httpMethods": ["GET"]})


def test_disabled_ambient_namespace_stops_ztunnel_counting(bookinfo: ShopTwin) -> None:
    bookinfo.reset()
    ns = {"kubernetesObject": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}}
    ctx = _inject(bookinfo, "disabled-istio-ambient-mode-kubernetes-namespace", ns)
    bookinfo.backend.advance(120)
    assert bookinfo.value('sum(rate(istio_tcp_connections_opened_total{source_workload_namespace="book-info"}[1m]))') == 0
    assert bookinfo.value('sum(rate(request_result_total{response_code="200"}[1m]))') > 0.2, "the app itself still works"
    with pytest.raises(FaultError, match="already out of the ambient mesh"):
        _inject(bookinfo, "disabled-istio-ambient-mode-kubernetes-namespace", ns)
    remove_faults(ctx)
    bookinfo.backend.advance(120)
    assert bookinfo.value('sum(rate(istio_tcp_connections_opened_total{source_workload_namespace="book-info"}[1m]))') > 0.2
