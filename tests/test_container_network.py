"""Network clients exec'd into the shop's pods: the cluster DNS and TCP connections as the app model
routes them (Service ports, endpoints, NetworkPolicies), through the twin's exec path."""

from __future__ import annotations

import json
from typing import Any

from conftest import ShopTwin
from itbench_gym.backends.sim.kube.remotecommand import Outcome
from itbench_gym.spec import FaultRef

NS = "otel-demo"


def exec_in(twin: ShopTwin, component: str, *argv: str) -> Outcome:
    pods = twin.store.list("Pod", NS, label_selector=f"app.kubernetes.io/component={component}")
    pod = pods[0]
    container = pod["spec"]["containers"][0]["name"]
    return twin.backend.twin.container_exec()(NS, pod["metadata"]["name"], container, list(argv), b"", False)


def exit_code(outcome: Outcome) -> int:
    if outcome.status["status"] == "Success":
        return 0
    return int(outcome.status["details"]["causes"][0]["message"])


def test_the_cluster_dns_answers_services_of_every_namespace(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    frontend = shop_twin.store.get("Service", NS, "frontend")["spec"]["clusterIP"]
    found = exec_in(shop_twin, "product-reviews", "nslookup", "frontend")
    assert exit_code(found) == 0
    assert found.stdout.decode().endswith(f"Name:\tfrontend.{NS}.svc.cluster.local\nAddress: {frontend}\n\n")
    other = exec_in(shop_twin, "product-reviews", "getent", "hosts", "kube-dns.kube-system")
    assert other.stdout.decode().split() == ["10.96.0.10", "kube-dns.kube-system.svc.cluster.local"]
    missing = exec_in(shop_twin, "product-reviews", "nslookup", "no-such-service")
    assert exit_code(missing) == 1 and "** server can't find no-such-service: NXDOMAIN" in missing.stdout.decode()
    outside = exec_in(shop_twin, "product-reviews", "nslookup", "example.com")
    assert exit_code(outside) == 1 and "does not model this destination" in outside.stderr.decode()


def test_connections_follow_service_ports_endpoints_and_policies(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    frontend = shop_twin.store.get("Service", NS, "frontend")["spec"]["clusterIP"]
    opened = exec_in(shop_twin, "product-reviews", "nc", "-zv", "frontend", "8080")
    assert exit_code(opened) == 0 and opened.stderr.decode() == f"frontend ({frontend}:8080) open\n"
    no_port = exec_in(shop_twin, "product-reviews", "nc", "-z", "frontend", "9999")
    assert no_port.stderr.decode() == f"nc: can't connect to remote host ({frontend}): Connection timed out\n"
    unmodelled = exec_in(shop_twin, "product-reviews", "wget", "-q", "http://frontend:8080/")
    assert exit_code(unmodelled) == 126 and "wget got HTTP/1.1 200 OK" in unmodelled.stderr.decode()

    service = shop_twin.store.get("Service", NS, "frontend")
    service["spec"]["selector"] = {"app.kubernetes.io/component": "nothing-runs-this"}
    shop_twin.store.update(service)
    shop_twin.backend.advance(30)
    refused = exec_in(shop_twin, "product-reviews", "wget", "http://frontend:8080/")
    assert exit_code(refused) == 1
    assert refused.stderr.decode().splitlines() == [f"Connecting to frontend:8080 ({frontend}:8080)",
                                                    f"wget: can't connect to remote host ({frontend}): Connection refused"]


def test_network_policies_drop_connections_and_dns(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    deny_ingress: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny-frontend", "namespace": NS},
        "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "frontend"}}, "policyTypes": ["Ingress"]}}
    shop_twin.store.create(deny_ingress)
    shop_twin.backend.advance(30)
    dropped = exec_in(shop_twin, "product-reviews", "nc", "-z", "-w", "5", "frontend", "8080")
    assert exit_code(dropped) == 1 and dropped.stderr.decode() == "nc: timeout\n"
    deny_egress: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "deny-egress", "namespace": NS},
        "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "product-reviews"}}, "policyTypes": ["Egress"]}}
    shop_twin.store.create(deny_egress)
    shop_twin.backend.advance(30)
    lookup = exec_in(shop_twin, "product-reviews", "nslookup", "frontend")
    assert lookup.stdout.decode() == ";; connection timed out; no servers could be reached\n\n"
    assert exec_in(shop_twin, "currency", "nslookup", "frontend").status["status"] == "Success"


def test_wget_takes_busybox_options_up_to_the_exchange(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    flagd = shop_twin.store.get("Service", NS, "flagd")["spec"]["clusterIP"]
    url = "http://flagd:8013/ofrep/v1/evaluate/flags/productCatalogFailure"
    posted = exec_in(shop_twin, "recommendation", "wget", "-qO-", "--header", "Content-Type: application/json",
                     "--post-data={}", url)
    assert exit_code(posted) == 126 and f"wget connected to flagd:8013 ({flagd}:8013)" in posted.stderr.decode()
    account = "/var/run/secrets/kubernetes.io/serviceaccount"
    missing = exec_in(shop_twin, "recommendation", "wget", "-q", "--post-file", f"{account}/body.json", url)
    assert exit_code(missing) == 1
    assert missing.stderr.decode() == f"wget: can't open '{account}/body.json': No such file or directory\n"
    assert exit_code(exec_in(shop_twin, "recommendation", "wget", "-q", f"--post-file={account}/namespace", url)) == 126
    both = exec_in(shop_twin, "recommendation", "wget", "--post-data=a", "--post-file=b", url)
    assert exit_code(both) == 1 and both.stderr.decode().startswith("wget: usage: wget ")
    bad_timeout = exec_in(shop_twin, "recommendation", "wget", "-T", "soon", url)
    assert bad_timeout.stderr.decode() == "wget: invalid number 'soon'\n"
    refused = exec_in(shop_twin, "recommendation", "wget", "-s", url)
    assert exit_code(refused) == 1 and "does not emulate '-s'" in refused.stderr.decode()
    assert "--post-data" in refused.stderr.decode() and "-\x02" not in refused.stderr.decode()


def test_http_requests_are_answered_as_the_model_serves_them(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    proxy = shop_twin.store.get("Service", NS, "frontend-proxy")["spec"]["clusterIP"]
    product = shop_twin.backend.twin.apps.instance(NS).products[0]
    url = f"http://frontend-proxy:8080/api/products/{product}"
    spider = exec_in(shop_twin, "recommendation", "wget", "--spider", url)
    assert exit_code(spider) == 0
    assert spider.stderr.decode() == f"Connecting to frontend-proxy:8080 ({proxy}:8080)\nremote file exists\n"
    unknown_body = exec_in(shop_twin, "recommendation", "wget", "-qO-", "http://frontend-proxy:8080/api/cart")
    assert exit_code(unknown_body) == 126
    assert unknown_body.stderr.decode().startswith("itbench_gym: wget got HTTP/1.1 200 OK from frontend-proxy:8080")
    for unknown in ("http://frontend-proxy:8080/api/products/NO-SUCH-PRODUCT", "http://frontend-proxy:8080/no/such/route"):
        unanswered = exec_in(shop_twin, "recommendation", "wget", "-q", "--spider", unknown)
        assert exit_code(unanswered) == 126 and "does not model what the server answers" in unanswered.stderr.decode()

    # Envoy's own reply when the frontend cannot be reached: the body its access log counts 91 bytes of
    frontend = shop_twin.store.get("Deployment", NS, "frontend")
    frontend["spec"]["replicas"] = 0
    shop_twin.store.update(frontend)
    shop_twin.backend.advance(60)
    local = exec_in(shop_twin, "quote", "curl", "-s", "-w", " %{http_code} %{content_type}", "http://frontend-proxy:8080/api/products")
    assert local.stdout == (b"upstream connect error or disconnect/reset before headers. reset reason: connection failure"
                            b" 503 text/plain")
    frontend = shop_twin.store.get("Deployment", NS, "frontend")
    frontend["spec"]["replicas"] = 1
    shop_twin.store.update(frontend)

    ad = shop_twin.store.get("Deployment", NS, "ad")
    ad["spec"]["replicas"] = 0
    shop_twin.store.update(ad)
    shop_twin.backend.advance(150)
    failed = exec_in(shop_twin, "recommendation", "wget", "-q", "-S", "http://frontend:8080/api/data")
    assert exit_code(failed) == 1
    assert failed.stderr.decode() == "  HTTP/1.1 500 Internal Server Error\nwget: server returned error: HTTP/1.1 500 Internal Server Error\n"
    # Next.js answers an API route whose handler threw with sendError's text; Envoy passes it on
    for host in ("frontend", "frontend-proxy"):
        thrown = exec_in(shop_twin, "quote", "curl", "-s", "-w", " %{http_code}", f"http://{host}:8080/api/data")
        assert thrown.stdout == b"Internal Server Error 500", host
    # the same failure the traces' span metrics count for the route
    assert shop_twin.value('sum(rate(traces_span_metrics_calls_total{service_name="frontend",span_name="GET /api/data",'
                           'status_code="STATUS_CODE_ERROR"}[3m]))') > 0


def _frontend_http_chaos(shop_twin: ShopTwin, fault: dict[str, Any]) -> None:
    ctx = shop_twin.context()
    ctx.create({"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "HTTPChaos", "metadata": {"name": "frontend", "namespace": "chaos-mesh"},
                "spec": {"mode": "all", "target": "Request", "port": 8080, "method": "GET", "path": "*", **fault,
                         "selector": {"namespaces": [NS], "labelSelectors": {"app.kubernetes.io/component": "frontend"}}}})
    ctx.close()
    shop_twin.backend.advance(60)


def test_http_chaos_delays_and_aborts_a_pods_own_requests(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    _frontend_http_chaos(shop_twin, {"delay": "10s"})
    url = "http://frontend:8080/api/cart"
    slow = exec_in(shop_twin, "recommendation", "wget", "-q", "-T", "5", "--spider", url)
    assert exit_code(slow) == 1 and slow.stderr.decode() == "wget: download timed out\n"
    assert exit_code(exec_in(shop_twin, "recommendation", "wget", "-q", "-T", "30", "--spider", url)) == 0
    shop_twin.reset()
    _frontend_http_chaos(shop_twin, {"abort": True})
    aborted = exec_in(shop_twin, "recommendation", "wget", "-q", "--spider", url)
    assert exit_code(aborted) == 1 and aborted.stderr.decode() == "wget: error getting response: Connection reset by peer\n"


def test_curl_reports_the_status_and_fails_as_curl_does(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    frontend = shop_twin.store.get("Service", NS, "frontend")["spec"]["clusterIP"]
    status = exec_in(shop_twin, "quote", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{remote_ip}\\n", "http://frontend:8080/api/cart")
    assert exit_code(status) == 0 and status.stdout.decode() == f"200 {frontend}\n" and status.stderr == b""
    body = exec_in(shop_twin, "quote", "curl", "-s", "http://frontend:8080/api/cart")
    assert exit_code(body) == 126 and "not its headers or body" in body.stderr.decode()
    missing = exec_in(shop_twin, "quote", "curl", "-sS", "-w", "%{http_code}", "http://no-such-service/")
    assert exit_code(missing) == 6 and missing.stdout.decode() == "000"
    assert missing.stderr.decode() == "curl: (6) Could not resolve host: no-such-service\n"

    service = shop_twin.store.get("Service", NS, "frontend")
    service["spec"]["selector"] = {"app.kubernetes.io/component": "nothing-runs-this"}
    shop_twin.store.update(service)
    shop_twin.backend.advance(30)
    # each image's curl release words a refused connection its own way (Alpine 3.22's 8.14.1, Ubuntu 24.04's 8.5.0)
    for component, words in (("quote", "Could not connect to server"), ("ad", "Couldn't connect to server")):
        refused = exec_in(shop_twin, component, "curl", "-sS", "http://frontend:8080/")
        assert exit_code(refused) == 7
        assert refused.stderr.decode() == f"curl: (7) Failed to connect to frontend port 8080 after 0 ms: {words}\n"

    shop_twin.reset()
    ad = shop_twin.store.get("Deployment", NS, "ad")
    ad["spec"]["replicas"] = 0
    shop_twin.store.update(ad)
    shop_twin.backend.advance(60)
    failing = exec_in(shop_twin, "quote", "curl", "-sSf", "-o", "/dev/null", "http://frontend:8080/api/data")
    assert exit_code(failing) == 22 and failing.stderr.decode() == "curl: (22) The requested URL returned error: 500\n"
    assert exec_in(shop_twin, "quote", "curl", "-sf", "http://frontend:8080/api/data").stderr == b""  # -s without -S


def test_gnu_wget_is_not_taken_for_busyboxs(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    gnu = exec_in(shop_twin, "ad", "wget", "-q", "--spider", "http://frontend:8080/api/cart")
    assert exit_code(gnu) == 126 and "wget is in this container's image, but the twin does not emulate it" in gnu.stderr.decode()
    assert "curl" in gnu.stderr.decode() and "wget," not in gnu.stderr.decode()
    assert exit_code(exec_in(shop_twin, "recommendation", "wget", "-q", "--spider", "http://frontend:8080/api/cart")) == 0


def test_servers_listen_where_their_command_line_and_env_say(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    for port in ("8013", "8016", "4000"):  # flagd's gRPC and OFREP ports, its UI sidecar's
        assert exit_code(exec_in(shop_twin, "product-reviews", "nc", "-z", "flagd", port)) == 0, port
    flagd = shop_twin.store.get("Service", NS, "flagd")["spec"]["clusterIP"]
    deployment = shop_twin.store.get("Deployment", NS, "flagd")
    server, ui = deployment["spec"]["template"]["spec"]["containers"]
    at = server["command"].index("--ofrep-port")
    server["command"][at:at + 2] = ["-r9016"]  # pflag's shorthand with its value attached
    ui["env"] = [{**e, "value": "4001"} if e["name"] == "FLAGD_UI_PORT" else e for e in ui["env"]]
    shop_twin.store.update(deployment)
    shop_twin.backend.advance(120)
    for port in ("8016", "4000"):  # the Service still sends there; nothing listens any more
        refused = exec_in(shop_twin, "product-reviews", "nc", "-z", "flagd", port)
        assert refused.stderr.decode() == f"nc: can't connect to remote host ({flagd}): Connection refused\n", port
    service = shop_twin.store.get("Service", NS, "flagd")
    service["spec"]["ports"] = [{**p, "targetPort": 9016} if p["name"] == "ofrep" else p for p in service["spec"]["ports"]]
    shop_twin.store.update(service)
    shop_twin.backend.advance(30)
    assert exit_code(exec_in(shop_twin, "product-reviews", "nc", "-z", "flagd", "8016")) == 0
    assert exit_code(exec_in(shop_twin, "product-reviews", "nc", "-z", "flagd", "8013")) == 0


OFREP = "http://flagd:8016/ofrep/v1/evaluate/flags"


def test_flagds_ofrep_port_answers_from_the_flags_its_process_holds(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    single = exec_in(shop_twin, "quote", "curl", "-s", "-X", "POST", "-d", "{}", f"{OFREP}/recommendationCacheFailure")
    assert exit_code(single) == 0
    assert single.stdout == b'{"value":false,"key":"recommendationCacheFailure","reason":"STATIC","variant":"off","metadata":{}}'
    missing = exec_in(shop_twin, "quote", "curl", "-s", "-X", "POST", f"{OFREP}/noSuchFlag", "-w", " %{http_code} %{content_type}")
    assert missing.stdout.decode() == ('{"key":"noSuchFlag","errorCode":"FLAG_NOT_FOUND","errorDetails":"flag `noSuchFlag` does not exist",'
                                       '"metadata":{}} 404 application/json')
    assert exit_code(exec_in(shop_twin, "quote", "curl", "-sf", "-X", "POST", f"{OFREP}/noSuchFlag")) == 22
    not_context = exec_in(shop_twin, "quote", "curl", "-s", "--data-raw", "[1]", f"{OFREP}/paymentFailure")
    assert json.loads(not_context.stdout)["errorCode"] == "INVALID_CONTEXT"
    wrong_method = exec_in(shop_twin, "quote", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{OFREP}/paymentFailure")
    assert wrong_method.stdout == b"405"
    bulk = json.loads(exec_in(shop_twin, "quote", "curl", "-s", "-X", "POST", OFREP).stdout)
    keys = [f["key"] for f in bulk["flags"]]
    assert keys == sorted(keys) and "recommendationCacheFailure" in keys and bulk["metadata"] == {}
    assert {f["reason"] for f in bulk["flags"]} == {"STATIC"}

    # the ConfigMap's change reaches flagd with its new pod; a busybox wget posting to it sees the same
    shop_twin.inject(FaultRef("opentelemetry-demo-feature-flag", {
        "flag": {"name": "recommendationCacheFailure", "state": "on"},
        "kubernetesObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flagd-config", "namespace": NS}}}))
    before = exec_in(shop_twin, "recommendation", "wget", "-qO-", "--post-data", "", f"{OFREP}/recommendationCacheFailure")
    assert json.loads(before.stdout)["value"] is False  # the running flagd still holds the file it copied at its start
    shop_twin.inject(FaultRef("restart-kubernetes-workload", {
        "kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "flagd", "namespace": NS}}}))
    shop_twin.backend.advance(60)
    after = exec_in(shop_twin, "recommendation", "wget", "-O", "-", "--post-data", "{}", f"{OFREP}/recommendationCacheFailure")
    assert exit_code(after) == 0 and json.loads(after.stdout) == {
        "value": True, "key": "recommendationCacheFailure", "reason": "STATIC", "variant": "on", "metadata": {}}
    assert after.stderr.decode().splitlines()[1:] == [
        "writing to stdout", "itbench_gym: wget's progress meter is not shown by the twin", "written to stdout"]
    gone = exec_in(shop_twin, "recommendation", "wget", "-q", "-O", "-", "--post-data", "", f"{OFREP}/noSuchFlag")
    assert exit_code(gone) == 1 and gone.stderr.decode() == "wget: server returned error: HTTP/1.1 404 Not Found\n"

    # flagd watches the file it serves: flagd-ui's edit of the shared copy answers at once, before any tick
    pod = shop_twin.store.list("Pod", NS, label_selector="app.kubernetes.io/component=flagd")[0]
    edited = '{"flags": {"adFailure": {"state": "ENABLED", "variants": {"on": true, "off": false}, "defaultVariant": "on"}}}'
    wrote = shop_twin.backend.twin.container_exec()(NS, pod["metadata"]["name"], "flagd-ui",
                                                     ["sh", "-c", f"printf '%s' '{edited}' > /app/data/demo.flagd.json"], b"", False)
    assert exit_code(wrote) == 0
    assert json.loads(exec_in(shop_twin, "quote", "curl", "-s", "-X", "POST", f"{OFREP}/adFailure").stdout)["value"] is True
    assert json.loads(exec_in(shop_twin, "quote", "curl", "-s", "-X", "POST", f"{OFREP}/recommendationCacheFailure").stdout)[
        "errorCode"] == "FLAG_NOT_FOUND"


def test_the_frontends_product_api_answers_with_the_catalogue(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    model = shop_twin.backend.twin.apps.instance(NS)
    listed = exec_in(shop_twin, "quote", "curl", "-s", "-w", "\n%{http_code} %{content_type}", "http://frontend-proxy:8080/api/products")
    text, status = listed.stdout.decode().rsplit("\n", 1)
    products = json.loads(text)
    assert status == "200 application/json; charset=utf-8"
    # product-catalog's rows ordered by id, as the frontend's ts-proto objects write them
    assert [p["id"] for p in products] == sorted(model.products) and len(products) == 10
    assert list(products[0]) == ["id", "name", "description", "picture", "priceUsd", "categories"]
    assert text == json.dumps(products, ensure_ascii=False, separators=(",", ":"))
    one = exec_in(shop_twin, "quote", "curl", "-s", f"http://frontend:8080/api/products/{products[1]['id']}")
    assert json.loads(one.stdout) == products[1]
    telescope = next(p for p in products if p["id"] == "1YMWWN1N4O")
    assert telescope["categories"] == ["telescopes", "travel"] and telescope["priceUsd"] == {"currencyCode": "USD", "units": 129, "nanos": 950000000}
    converted = exec_in(shop_twin, "quote", "curl", "-s", "http://frontend:8080/api/products?currencyCode=EUR")
    assert exit_code(converted) == 126  # another currency's prices go through the currency service: not answered


def _http_chaos_on(shop_twin: ShopTwin, component: str, port: int, **rule: Any) -> None:
    ctx = shop_twin.context()
    ctx.create({"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "HTTPChaos", "metadata": {"name": component, "namespace": "chaos-mesh"},
                "spec": {"mode": "all", "target": "Request", "port": port, **(rule or {"abort": True}),
                         "selector": {"namespaces": [NS], "labelSelectors": {"app.kubernetes.io/component": component}}}})
    ctx.close()
    shop_twin.backend.advance(120)


def test_http_chaos_aborts_grpc_but_relays_a_protocol_it_cannot_parse(shop_twin: ShopTwin) -> None:
    """chaos-tproxy parses HTTP/2, so an abort on cart's gRPC port fails the frontend's cart calls; Valkey's
    RESP is no HTTP, so the proxy relays cart's connections to Valkey untouched and cart keeps serving."""
    errors = 'sum(rate(traces_span_metrics_calls_total{service_name="%s",status_code="STATUS_CODE_ERROR"}[3m]))'
    shop_twin.reset()
    _http_chaos_on(shop_twin, "valkey-cart", 6379)
    assert shop_twin.value(errors % "cart") == 0 and shop_twin.value(errors % "frontend") == 0
    shop_twin.reset()
    _http_chaos_on(shop_twin, "cart", 8080)
    assert shop_twin.value(errors % "frontend") > 0


def test_http_chaos_on_a_pod_takes_the_requests_it_sends_to_the_port_too(shop_twin: ShopTwin) -> None:
    """Chaos Mesh's proxy takes the port both ways: an abort on the frontend's port 8080 selecting cart's
    gRPC methods by path fails the frontend's calls to cart (which dial cart:8080) while cart serves
    every request it receives and the frontend's calls to product-catalog on the same port pass."""
    calls = ('sum(rate(traces_span_metrics_calls_total{service_name="frontend",span_kind="SPAN_KIND_CLIENT",'
             'span_name=~"%s",status_code="STATUS_CODE_ERROR"}[2m]))')
    shop_twin.reset()
    _http_chaos_on(shop_twin, "frontend", 8080, abort=True, path="/oteldemo.CartService/*")
    assert shop_twin.value(calls % "grpc.oteldemo.CartService/.*") > 0
    assert shop_twin.value(calls % "grpc.oteldemo.ProductCatalogService/.*") == 0
    assert shop_twin.value('sum(rate(traces_span_metrics_calls_total{service_name="cart",status_code="STATUS_CODE_ERROR"}[2m]))') == 0


def test_a_json_body_patch_on_grpc_requests_ends_them(shop_twin: ShopTwin) -> None:
    """A gRPC message is no JSON: the proxy cannot merge a JSON patch into it and ends the request, so a
    body patch on cart's port fails the frontend's cart calls (as it leaves email's JSON bodies to email)."""
    shop_twin.reset()
    _http_chaos_on(shop_twin, "cart", 8080, patch={"body": {"type": "JSON", "value": '{"userId": "x"}'}})
    assert shop_twin.value('sum(rate(traces_span_metrics_calls_total{service_name="frontend",status_code="STATUS_CODE_ERROR"}[2m]))') > 0


def test_an_abort_of_responses_lets_the_server_serve_and_fails_its_callers(shop_twin: ShopTwin) -> None:
    """``target: Response``: quote still receives and answers shipping's requests (its server spans stay
    OK), but the proxy resets each answer, so shipping's calls fail as with an abort of the requests,
    which quote never sees."""
    served = 'sum(increase(traces_span_metrics_calls_total{service_name="quote",span_kind="SPAN_KIND_SERVER",status_code="STATUS_CODE_UNSET"}[2m]))'
    failed = 'sum(increase(traces_span_metrics_calls_total{service_name="shipping",span_kind="SPAN_KIND_CLIENT",status_code="STATUS_CODE_ERROR"}[2m]))'
    ok = 'sum(increase(traces_span_metrics_calls_total{service_name="shipping",span_kind="SPAN_KIND_CLIENT",status_code="STATUS_CODE_UNSET"}[2m]))'
    for target in ("Response", "Request"):
        shop_twin.reset()
        _http_chaos_on(shop_twin, "quote", 8080, target=target, abort=True)
        shop_twin.backend.advance(120)  # two minutes wholly after the injection
        assert (shop_twin.value(served) > 0) == (target == "Response"), target
        assert shop_twin.value(failed) > 0 and shop_twin.value(ok) == 0, target
