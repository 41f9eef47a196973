"""Service, network, DNS, configuration and Valkey faults: ITBench's edits, and how the twin's request
flow reacts to them (NetworkPolicy and DNS semantics, credentials read when a container starts)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from conftest import ShopTwin
from itbench_gym.backends.sim.app.dns import service_for
from itbench_gym.backends.sim.app.netpolicy import Endpoint, allows
from itbench_gym.backends.sim.app.process import argv, flag_value, store_writes
from itbench_gym.faults import FaultError, ObjectRef, inject_faults, remove_faults
from itbench_gym.faults.operations.valkey import FILL_SCRIPT
from itbench_gym.spec import FaultRef

NS = "otel-demo"
ERRORS = 'sum(rate(traces_span_metrics_calls_total{{service_name="{svc}",status_code="STATUS_CODE_ERROR"}}[2m]))'
SERVED = 'sum(rate(traces_span_metrics_calls_total{{service_name="{svc}",span_kind="SPAN_KIND_SERVER",status_code!="STATUS_CODE_ERROR"}}[2m]))'


def _service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS}}


def _workload(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS}}


def _logs(twin: ShopTwin, service: str, seconds: float = 120.0) -> list[str]:
    """The log lines of ``service``'s live pods over the last ``seconds``."""
    now = twin.backend.clock.now()
    out: list[str] = []
    for pod in twin.store.list("Pod", NS):
        name = pod["metadata"]["name"]
        if name.startswith(service + "-") and not pod["metadata"].get("deletionTimestamp"):
            out += [line for _, line in twin.backend.twin.model.log_lines(NS, name, service, now - seconds, now)]
    return out


def _inject(twin: ShopTwin, fault: str, args: dict[str, Any], seconds: float = 300.0) -> Any:
    twin.reset()
    ctx = twin.context()
    inject_faults([FaultRef(fault, args)], ctx)
    twin.backend.advance(seconds)
    return ctx


# -- NetworkPolicy and DNS semantics (no twin) ----------------------------------------------------


def _pod(labels: dict[str, str], ns: str = NS, ip: str = "10.244.1.5") -> Endpoint:
    return Endpoint(labels, ns, ip, {"http": 8080})


def _policy(spec: dict[str, Any], ns: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": ns}, "spec": spec}


FRONTEND, PROXY = _pod({"app": "frontend"}), _pod({"app": "proxy"}, ip="10.244.2.9")
SELECT_FRONTEND = {"podSelector": {"matchLabels": {"app": "frontend"}}, "policyTypes": ["Ingress"]}


def test_an_empty_ingress_rule_admits_everything_and_no_rule_admits_nothing() -> None:
    # ITBench's ingress-port-blocking object: one rule with no ports and no peers matches all traffic
    assert allows([_policy({**SELECT_FRONTEND, "ingress": [{"ports": []}]})], PROXY, FRONTEND, 8080)
    assert not allows([_policy({**SELECT_FRONTEND, "ingress": []})], PROXY, FRONTEND, 8080)
    assert not allows([_policy(SELECT_FRONTEND)], PROXY, FRONTEND, 8080)
    # a policy selecting other pods, or of another namespace, does not isolate the frontend
    assert allows([_policy({**SELECT_FRONTEND, "podSelector": {"matchLabels": {"app": "cart"}}})], PROXY, FRONTEND, 8080)
    assert allows([_policy(SELECT_FRONTEND, ns="other")], PROXY, FRONTEND, 8080)


def test_ingress_rules_match_peers_and_ports() -> None:
    def admits(rule: dict[str, Any], src: Endpoint | None = PROXY, port: int = 8080) -> bool:
        return allows([_policy({**SELECT_FRONTEND, "ingress": [rule]})], src, FRONTEND, port, ns_labels={NS: {"team": "shop"}})

    assert admits({"from": [{"podSelector": {"matchLabels": {"app": "proxy"}}}]})
    assert not admits({"from": [{"podSelector": {"matchLabels": {"app": "cart"}}}]})
    assert not admits({"from": [{"podSelector": {}}]}, _pod({"app": "proxy"}, ns="elsewhere"))
    assert admits({"from": [{"namespaceSelector": {"matchLabels": {"team": "shop"}}, "podSelector": {"matchLabels": {"app": "proxy"}}}]})
    assert not admits({"from": [{"namespaceSelector": {"matchLabels": {"team": "ops"}}}]})
    assert admits({"from": [{"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.1.0/24"]}}]})
    assert not admits({"from": [{"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.2.0/24"]}}]})
    assert not admits({"from": [{"podSelector": {}}]}, None)  # a client outside the pods is no pod peer
    assert admits({"ports": [{"port": "http"}]}) and not admits({"ports": [{"port": "grpc"}]})
    assert admits({"ports": [{"port": 8000, "endPort": 9000}]}) and not admits({"ports": [{"port": 8081}]})
    assert not admits({"ports": [{"port": 8080, "protocol": "UDP"}]})


def test_egress_isolation_applies_to_the_caller() -> None:
    egress = _policy({"podSelector": {"matchLabels": {"app": "proxy"}}, "policyTypes": ["Egress"],
                      "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "cart"}}}]}]})
    assert not allows([egress], PROXY, FRONTEND, 8080)
    assert allows([egress], PROXY, _pod({"app": "cart"}), 8080)
    assert allows([egress], FRONTEND, PROXY, 8080)


def test_dns_policy_decides_which_names_resolve() -> None:
    services = {"cart": {"spec": {"clusterIP": "10.96.0.42"}}}
    for name in ("cart", "cart.otel-demo", "cart.otel-demo.svc", "cart.otel-demo.svc.cluster.local", "cart.otel-demo.svc.cluster.local."):
        assert service_for(name, {"dnsPolicy": "ClusterFirst"}, NS, services) == "cart", name
    assert service_for("cart.other", {}, NS, services) is None
    assert service_for("kafka", {}, NS, services) is None
    assert service_for("cart", {"dnsPolicy": "Default"}, NS, services) is None
    assert service_for("cart", {"dnsPolicy": "ClusterFirst", "hostNetwork": True}, NS, services) is None
    assert service_for("cart", {"dnsPolicy": "ClusterFirstWithHostNet", "hostNetwork": True}, NS, services) == "cart"
    custom = {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["10.96.0.10"], "searches": ["otel-demo.svc.cluster.local"]}}
    assert service_for("cart", custom, NS, services) == "cart"
    assert service_for("cart", {**custom, "dnsConfig": {"nameservers": ["8.8.8.8"]}}, NS, services) is None
    assert service_for("10.96.0.42", {"dnsPolicy": "Default"}, NS, services) == "cart"


def test_the_fill_script_stores_a_mebibyte_a_second_after_twenty_seconds() -> None:
    writes = store_writes(FILL_SCRIPT, "valkey-cli", ("SET",))
    assert writes is not None and writes.delay_s == 20 and writes.bytes_per_s == 1024 * 1024
    assert store_writes(FILL_SCRIPT, "redis-cli", ("SET",)) is None
    args = argv({"command": ["valkey-server"], "args": ["--requirepass", "$(PW)", "$$(PW)"]}, {"PW": "s3cret"})
    assert args == ["valkey-server", "--requirepass", "s3cret", "$(PW)"] and flag_value(args, "--requirepass") == "s3cret"


# -- the faults on the twin -------------------------------------------------------------------------


def test_a_target_port_nothing_listens_on_refuses_the_callers(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "modified-target-port-kubernetes-service", {"kubernetesObject": _service("ad"), "targetPort": 8080})
    port = ctx.require(ObjectRef("v1", "Service", "ad", NS))["spec"]["ports"][0]
    assert (port["port"], port["targetPort"]) == (8080, 9999)
    assert shop_twin.value(ERRORS.format(svc="frontend")) > 0 and shop_twin.value(SERVED.format(svc="ad")) == 0
    assert any("ECONNREFUSED" in line for line in _logs(shop_twin, "frontend"))
    with pytest.raises(FaultError, match="targetPort 7777"):
        inject_faults([FaultRef("modified-target-port-kubernetes-service", {"kubernetesObject": _service("ad"), "targetPort": 7777})], ctx)
    remove_faults(ctx)
    ctx.close()


def test_a_selector_no_pod_matches_empties_the_endpoints(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "invalid-kubernetes-service-selector", {"kubernetesObject": _service("currency")})
    selector = ctx.require(ObjectRef("v1", "Service", "currency", NS))["spec"]["selector"]
    assert selector["opentelemetry.io/name"] == "currency" and selector["app.kubernetes.io/name"].startswith("invalid-workload-")
    assert not shop_twin.store.get("Endpoints", NS, "currency").get("subsets")
    assert shop_twin.value(ERRORS.format(svc="frontend")) > 0 and shop_twin.value(SERVED.format(svc="currency")) == 0
    ctx.close()


def test_a_deleted_service_fails_its_callers_lookups(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "deleted-kubernetes-service", {"kubernetesObject": _service("product-catalog")})
    assert ctx.get(ObjectRef("v1", "Service", "product-catalog", NS)) is None
    assert any("Name resolution failed for target dns:product-catalog:8080" in line for line in _logs(shop_twin, "frontend"))
    remove_faults(ctx)
    shop_twin.backend.advance(300)
    assert shop_twin.value(SERVED.format(svc="product-catalog")) > 0
    ctx.close()


def test_dns_policy_default_breaks_only_the_workloads_own_lookups(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "failing-name-resolution-kubernetes-workload-dns-policy", {"kubernetesObject": _workload("frontend")})
    lines = _logs(shop_twin, "frontend")
    assert any("Name resolution failed for target dns:cart:8080" in line for line in lines)
    assert shop_twin.value(SERVED.format(svc="cart")) == 0
    # checkout's own lookups still work: its calls to shipping and payment are not DNS failures
    assert not any("Name resolution" in line or "no such host" in line for line in _logs(shop_twin, "checkout"))
    ctx.close()


def _kafka_pods(twin: ShopTwin) -> list[dict[str, Any]]:
    return [p for p in twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("kafka-") and not p["metadata"].get("deletionTimestamp")]


def test_a_broker_that_cannot_resolve_its_controller_exits_and_one_that_can_keeps_running(shop_twin: ShopTwin) -> None:
    # KRaft: the broker registers with 1@kafka:9093 (its own Service); with the node's resolver it
    # cannot, and exits after initial.broker.registration.timeout.ms, restart after restart.
    ctx = _inject(shop_twin, "failing-name-resolution-kubernetes-workload-dns-policy", {"kubernetesObject": _workload("kafka")}, 600)
    [pod] = _kafka_pods(shop_twin)
    [status] = pod["status"]["containerStatuses"]
    assert status["restartCount"] >= 2 and status["lastState"]["terminated"]["exitCode"] == 1
    assert not any("Kafka Server started" in line for line in _logs(shop_twin, "kafka", 600))
    assert shop_twin.value(ERRORS.format(svc="checkout")) > 0
    ctx.close()
    # restarted with the cluster's DNS, the new broker reaches its own Service once it is ready
    shop_twin.reset()
    shop_twin.context().patch(ObjectRef("apps/v1", "Deployment", "kafka", NS),
                              {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}}}, "merge")
    shop_twin.backend.advance(600)
    [pod] = _kafka_pods(shop_twin)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0 and pod["status"]["containerStatuses"][0]["ready"]
    assert any("Kafka Server started" in line for line in _logs(shop_twin, "kafka", 600))


def test_an_edited_env_var_is_read_from_the_new_pods(shop_twin: ShopTwin) -> None:
    args = {"kubernetesObject": _workload("shipping"), "container": {"name": "shipping", "env": {"name": "QUOTE_ADDR", "value": "quote:0000"}}}
    ctx = _inject(shop_twin, "modified-kubernetes-workload-container-environment-variable", args)
    assert shop_twin.value(ERRORS.format(svc="shipping")) > 0 and shop_twin.value(SERVED.format(svc="quote")) == 0
    bad = {**args, "container": {"name": "shipping", "env": {"name": "NO_SUCH_VAR", "value": "x"}}}
    with pytest.raises(FaultError, match="NO_SUCH_VAR"):
        inject_faults([FaultRef("modified-kubernetes-workload-container-environment-variable", bad)], ctx)
    ctx.close()


def test_ingress_port_blocking_policy_is_itbenchs_object_and_admits_traffic(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "ingress-port-blocking-network-policy", {"kubernetesObject": _workload("frontend")})
    policy = ctx.require(ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "frontend-ingress", NS))["spec"]
    assert policy["policyTypes"] == ["Ingress"] and policy["podSelector"]["matchLabels"]["opentelemetry.io/name"] == "frontend"
    assert not policy["ingress"][0].get("ports")
    assert shop_twin.value(ERRORS.format(svc="frontend-proxy")) == 0
    # a policy with no ingress rule does isolate the frontend: the proxy's connections time out
    ctx.patch(ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "frontend-ingress", NS), {"spec": {"ingress": None}}, "merge")
    shop_twin.backend.advance(300)
    assert shop_twin.value(ERRORS.format(svc="frontend-proxy")) > 0 and shop_twin.value(SERVED.format(svc="frontend")) == 0
    assert any(" 504 UT " in line for line in _logs(shop_twin, "frontend-proxy"))
    ctx.close()


def test_an_egress_policy_must_admit_dns_for_lookups_to_work(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    ref = ObjectRef("networking.k8s.io/v1", "NetworkPolicy", "frontend-egress", NS)
    ctx.create({"apiVersion": ref.api_version, "kind": ref.kind, "metadata": {"name": ref.name, "namespace": NS},
                "spec": {"podSelector": {"matchLabels": {"opentelemetry.io/name": "frontend"}}, "policyTypes": ["Egress"],
                         "egress": [{"to": [{"podSelector": {}}]}]}})
    shop_twin.backend.advance(300)
    # the pods of its own namespace are admitted, but its queries to CoreDNS in kube-system are dropped
    assert shop_twin.value(SERVED.format(svc="cart")) == 0
    assert any("Name resolution failed" in line for line in _logs(shop_twin, "frontend"))
    dns = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}], "ports": [{"port": 53, "protocol": "UDP"}]}
    ctx.patch(ref, {"spec": {"egress": [{"to": [{"podSelector": {}}]}, dns]}}, "merge")
    shop_twin.backend.advance(300)
    assert shop_twin.value(SERVED.format(svc="cart")) > 0 and shop_twin.value(ERRORS.format(svc="frontend")) == 0
    ctx.close()


def test_valkey_password_fails_cart_slowly_until_valkey_restarts_without_it(shop_twin: ShopTwin) -> None:
    args = {"kubernetesObject": _workload("valkey-cart"), "container": {"name": "valkey-cart"}}
    ctx = _inject(shop_twin, "valkey-workload-changed-password", args)
    assert any("NOAUTH Authentication required" in line for line in _logs(shop_twin, "cart"))
    slow = 'histogram_quantile(0.95, sum by (le) (rate(traces_span_metrics_duration_milliseconds_bucket{service_name="cart"}[2m])))'
    assert shop_twin.value(slow) >= 5000
    # the password is read when valkey starts: emptying it in the Secret changes nothing until a restart
    secret = ObjectRef("v1", "Secret", "valkey-credentials", NS)
    ctx.patch(secret, {"data": {"valkey-password": ""}}, "merge")
    shop_twin.backend.advance(120)
    assert shop_twin.value(ERRORS.format(svc="cart")) > 0
    ctx.patch(ObjectRef("apps/v1", "Deployment", "valkey-cart", NS),
              {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "now"}}}}}, record=False)
    shop_twin.backend.advance(300)
    assert shop_twin.value(ERRORS.format(svc="cart")) == 0 and shop_twin.value(SERVED.format(svc="cart")) > 0
    ctx.close()


def test_the_fill_script_ooms_valkey_again_after_every_restart(shop_twin: ShopTwin) -> None:
    ctx = _inject(shop_twin, "valkey-workload-out-of-memory", {"kubernetesObject": _workload("valkey-cart"), "container": {"name": "valkey-cart"}},
                  seconds=600)
    pod = next(p for p in shop_twin.store.list("Pod", NS) if p["metadata"]["name"].startswith("valkey-cart-")
               and not p["metadata"].get("deletionTimestamp"))
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] >= 2 and status["lastState"]["terminated"]["reason"] == "OOMKilled"
    script = ctx.require(ObjectRef("v1", "ConfigMap", "valkey-storage-script", NS))["data"]["script"]
    assert "valkey-cli -x SET" in script
    remove_faults(ctx)
    assert ctx.get(ObjectRef("v1", "ConfigMap", "valkey-storage-script", NS)) is None
    ctx.close()


def test_corrupted_secret_values_are_random_from_the_seed_and_removal_restores_them(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    secret = ObjectRef("v1", "Secret", "app-credentials", NS)
    ctx.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-credentials", "namespace": NS},
                "data": {"user": base64.b64encode(b"otelu").decode(), "password": base64.b64encode(b"otelp").decode()}})
    ctx.journal.clear()
    inject_faults([FaultRef("corrupted-kubernetes-secret-credentials", {"kubernetesObject": {"apiVersion": "v1", "kind": "Secret",
                                                                                           "metadata": {"name": "app-credentials", "namespace": NS}}})], ctx)
    values = {k: base64.b64decode(v).decode() for k, v in ctx.require(secret)["data"].items()}
    assert set(values) == {"user", "password"}
    assert all(len(v) == 24 and v.isalnum() and v == v.lower() for v in values.values()) and values["password"] != "otelp"
    remove_faults(ctx)
    assert base64.b64decode(ctx.require(secret)["data"]["password"]) == b"otelp"
    ctx.close()
