"""The Jaeger query API and the ``traces`` tool on a twin running SRE-CacheFailure-v0."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from werkzeug.test import Client

from conftest import ContextFactory
from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.sim.app.cluster_view import read_flags
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.server import ServerHandle, serve
from itbench_gym.backends.sim.traces import TraceSynth, make_jaeger_app
from itbench_gym.backends.sim.traces.catalog import flag_variants
from itbench_gym.registry import get_spec
from itbench_gym.tasks.sre import SRETask
from itbench_gym.tools.base import ToolContext, ToolInputError
from itbench_gym.tools.traces import TracesTool

SEED = 0


@pytest.fixture(scope="module")
def started() -> Iterator[tuple[SimBackend, Endpoints]]:
    """A twin with the scenario's fault injected and its alerts firing, as ``itbench-gym serve`` builds it."""
    task = SRETask(get_spec("SRE-CacheFailure-v0"))
    b = SimBackend()
    task.setup(b, SEED)
    yield b, b.endpoints
    task.close()
    b.close()


@pytest.fixture(scope="module")
def backend(started: tuple[SimBackend, Endpoints]) -> SimBackend:
    return started[0]


@pytest.fixture(scope="module")
def client(backend: SimBackend) -> Client:
    tw = backend.twin
    return Client(make_jaeger_app(tw.apps.instances, backend.clock, tw.lock))


@pytest.fixture(scope="module")
def server(backend: SimBackend) -> Iterator[ServerHandle]:
    tw = backend.twin
    with serve(make_jaeger_app(tw.apps.instances, backend.clock, tw.lock)) as handle:
        yield handle


def _get(client: Client, url: str, status: int = 200) -> dict[str, Any]:
    resp = client.get(url)
    assert resp.status_code == status, resp.data
    body = json.loads(resp.data)
    assert set(body) == {"data", "total", "limit", "offset", "errors"}
    return body


def _tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def _service(trace: dict[str, Any], span: dict[str, Any]) -> str:
    return trace["processes"][span["processID"]]["serviceName"]


def test_services_and_operations(client: Client) -> None:
    body = _get(client, "/api/services")
    assert {"frontend", "frontend-proxy", "checkout", "recommendation", "load-generator"} <= set(body["data"])
    assert "valkey-cart" not in body["data"] and body["total"] == len(body["data"])
    ops = _get(client, "/api/services/frontend/operations")["data"]
    assert "GET /api/recommendations" in ops and "grpc.oteldemo.RecommendationService/ListRecommendations" in ops
    clients = _get(client, "/api/operations?service=checkout&spanKind=client")["data"]
    assert {"name": "oteldemo.PaymentService/Charge", "spanKind": "client"} in clients
    assert all(o["spanKind"] == "client" for o in clients)
    assert _get(client, "/api/operations", status=400)["errors"] == [{"code": 400, "msg": "parameter 'service' is required"}]


def test_error_traces_of_frontend_show_failing_calls_to_recommendation(client: Client, backend: SimBackend) -> None:
    cluster_ip = backend.twin.cluster.store.get("Service", "otel-demo", "recommendation")["spec"]["clusterIP"]
    body = _get(client, '/api/traces?service=frontend&tags={"error":"true"}&limit=20&lookback=10m')
    traces = body["data"]
    assert len(traces) == 20
    starts = [min(s["startTime"] for s in t["spans"]) for t in traces]
    assert starts == sorted(starts, reverse=True)
    for trace in traces:
        failing = [s for s in trace["spans"] if _tags(s).get("error") is True and _service(trace, s) == "frontend"]
        assert failing, "every hit has an error span in frontend"
        grpc = [s for s in failing if s["operationName"] == "grpc.oteldemo.RecommendationService/ListRecommendations"]
        assert grpc and _tags(grpc[0])["rpc.grpc.status_code"] == 14
        # the Node frontend's @grpc/grpc-js words the refused connection to the Service's ClusterIP
        status = _tags(grpc[0])["otel.status_description"]
        assert status.startswith(f"No connection established. Last error: connect ECONNREFUSED {cluster_ip}:8080 ("), status
        messages = [f["value"] for log in grpc[0]["logs"] for f in log["fields"] if f["key"] == "exception.message"]
        assert messages and messages[0].startswith("14 UNAVAILABLE: No connection established."), messages
    same = _get(client, '/api/traces?service=frontend&tag=error:true&limit=20&lookback=10m')
    assert same["data"] == traces


def test_slowest_checkout_traces(client: Client) -> None:
    traces = _get(client, "/api/traces?service=checkout&lookback=1h&limit=200")["data"]
    assert traces
    ranked = sorted(traces, key=lambda t: max(s["duration"] for s in t["spans"]), reverse=True)
    for trace in ranked[:5]:
        assert any(_service(trace, s) == "checkout" and s["operationName"] == "oteldemo.CheckoutService/PlaceOrder" for s in trace["spans"])
    slowest = max(s["duration"] for s in ranked[0]["spans"] if _service(ranked[0], s) == "checkout")
    threshold = slowest // 2
    slow = _get(client, f"/api/traces?service=checkout&lookback=1h&limit=200&minDuration={threshold}us")["data"]
    assert ranked[0]["traceID"] in {t["traceID"] for t in slow}
    for trace in slow:
        assert any(_service(trace, s) == "checkout" and s["duration"] >= threshold for s in trace["spans"])


def test_trace_by_id_and_search_by_ids(client: Client) -> None:
    trace = _get(client, "/api/traces?service=cart&limit=1")["data"][0]
    again = _get(client, f"/api/traces/{trace['traceID']}")["data"]
    assert again == [trace]
    body = _get(client, f"/api/traces?traceID={trace['traceID']}&traceID=0123456789abcdef")
    assert body["data"] == [trace]
    assert body["errors"] == [{"msg": "trace not found", "traceID": "00000000000000000123456789abcdef"}]
    assert _get(client, "/api/traces/0123456789abcdef", status=404)["errors"] == [{"code": 404, "msg": "trace not found"}]


def test_dependencies_reflect_the_call_graph(client: Client) -> None:
    links = {(d["parent"], d["child"]): d["callCount"] for d in _get(client, "/api/dependencies")["data"]}
    expected = {("load-generator", "frontend-proxy"), ("frontend-proxy", "frontend"), ("frontend", "recommendation"),
                ("frontend", "checkout"), ("checkout", "payment"), ("checkout", "email"), ("checkout", "accounting"),
                ("checkout", "fraud-detection"), ("shipping", "quote"), ("recommendation", "product-catalog")}
    assert expected <= set(links)
    assert all(n > 0 for n in links.values())
    assert not any("valkey-cart" in edge or "kafka" in edge for edge in links)
    assert links[("load-generator", "frontend-proxy")] > links[("frontend", "checkout")]
    only = _get(client, "/api/dependencies?service=checkout")["data"]
    assert only and all("checkout" in (d["parent"], d["child"]) for d in only)
    assert _get(client, "/api/dependencies?endTs=1000&lookback=1000")["data"] == []


@pytest.mark.parametrize("query, message", [
    ("/api/traces", "parameter 'service' is required"),
    ("/api/traces?service=frontend&minDuration=abc", "unable to parse param 'minDuration': time: invalid duration \"abc\""),
    ("/api/traces?service=frontend&minDuration=5", "unable to parse param 'minDuration': time: missing unit in duration \"5\""),
    ("/api/traces?service=frontend&minDuration=2s&maxDuration=1s", "'maxDuration' should be greater than 'minDuration'"),
    ("/api/traces?service=frontend&limit=ten", "strconv.ParseInt: parsing \"ten\": invalid syntax"),
    ("/api/traces?service=frontend&start=yesterday", "unable to parse param 'start': strconv.ParseInt: parsing \"yesterday\": invalid syntax"),
    ("/api/traces?service=frontend&tag=error", "malformed 'tag' parameter, expecting key:value, received: error"),
    ("/api/traces?service=frontend&tags={bad", "malformed 'tags' parameter, cannot unmarshal JSON"),
    ("/api/traces?service=frontend&tags={\"error\":true}", "cannot unmarshal bool into Go value of type string"),
    ("/api/traces/xyz", "strconv.ParseUint: parsing \"xyz\": invalid syntax"),
    ("/api/traces/" + "a" * 33, "TraceID cannot be longer than 32 hex characters"),
    ("/api/dependencies?lookback=1h", "unable to parse param 'lookback': strconv.ParseInt: parsing \"1h\": invalid syntax"),
])
def test_bad_parameters_get_jaegers_400(client: Client, query: str, message: str) -> None:
    errors = _get(client, query, status=400)["errors"]
    assert errors[0]["code"] == 400 and message in errors[0]["msg"]


def test_same_query_twice_is_identical_over_http(server: ServerHandle) -> None:
    url = server.url + "/api/traces"
    params = {"service": "frontend", "limit": "30", "lookback": "15m"}
    first = requests.get(url, params=params, timeout=30).json()
    second = requests.get(url, params=params, timeout=30).json()
    assert first == second and len(first["data"]) == 30
    assert requests.get(server.url + "/api/nope", timeout=30).status_code == 404


def _ctx(started: tuple[SimBackend, Endpoints], server: ServerHandle | None, make: ContextFactory) -> ToolContext:
    backend, base = started
    return make(backend, dataclasses.replace(base, jaeger=server.url if server else None), 600.0)


def test_traces_tool_lists_error_traces_and_shows_a_span_tree(started: tuple[SimBackend, Endpoints], server: ServerHandle,
                                                            tool_context: ContextFactory) -> None:
    tool = TracesTool()
    ctx = _ctx(started, server, tool_context)
    listing = tool.run({"text": "service=frontend error=true limit=5 lookback=10m"}, ctx)
    assert listing.exit_status == 0, listing.text
    lines = listing.text.splitlines()
    assert lines[0].startswith("5 traces (service=frontend, error=true, last 10m), most recent first")
    assert "ERROR" in lines[1] and "ListRecommendations" in lines[2] and "connect ECONNREFUSED" in lines[2]
    trace_id = lines[1].split()[0]
    tree = tool.run({"trace_id": trace_id}, ctx)
    assert tree.exit_status == 0
    assert "frontend  GET /api/recommendations [server]" in tree.text and "rpc.grpc.status_code=14" in tree.text
    slow = tool.run({"service": "checkout", "sort": "duration", "limit": 3}, ctx)
    durations = [float(line.split("  ")[3].removesuffix("ms")) for line in slow.text.splitlines()[1:] if not line.startswith(" ")]
    assert "slowest first" in slow.text and durations == sorted(durations, reverse=True)


def test_traces_tool_reports_bad_input_clearly(started: tuple[SimBackend, Endpoints], server: ServerHandle,
                                               tool_context: ContextFactory) -> None:
    tool = TracesTool()
    ctx = _ctx(started, server, tool_context)
    with pytest.raises(ToolInputError, match="needs service"):
        tool.run({"text": "error=true"}, ctx)
    with pytest.raises(ToolInputError, match="unknown argument 'servce'"):
        tool.run({"text": "servce=frontend"}, ctx)
    with pytest.raises(ToolInputError, match="bad lookback"):
        tool.run({"text": "service=frontend lookback=soon"}, ctx)
    bad = tool.run({"text": "service=frontend min_duration=fast"}, ctx)
    assert bad.exit_status == 1 and "time: invalid duration" in bad.text
    missing = tool.run({"text": "trace_id=0123456789abcdef"}, ctx)
    assert missing.exit_status == 1 and "not found" in missing.text
    none = tool.run({"text": "service=frontend"}, _ctx(started, None, tool_context))
    assert none.exit_status == 1 and "not available" in none.text


def test_recommendation_spans_show_the_cache_the_flag_turned_on(backend: SimBackend) -> None:
    """With recommendationCacheFailure on, get_product_list says cache_hit exactly when it did not call
    ListProducts, and app.products.count is the size the leaking cache has grown to."""
    model = backend.twin.model
    synth = TraceSynth(model.spec, model.seed, model.products, flag_variants(model.spec, model.manifests()))
    ticks = model.trace_ticks()[-20:]
    served = read_flags(backend.twin.cluster.store, model.spec)
    assert served["recommendationCacheFailure"] is True
    seen = {True: 0, False: 0}
    for tick in ticks:
        if tick.flags is None:  # a model that does not record what flagd served: give the synthesiser what it served
            tick = dataclasses.replace(tick, flags=served)
        assert tick.flags is not None and tick.flags["recommendationCacheFailure"] is True
        root = synth.roots.index(("load-generator", "user_get_recommendations"))
        for trace in synth.batch(tick, root):
            for index, span in enumerate(trace.spans, start=1):
                if span.name != "get_product_list":
                    continue
                attrs = dict(span.attrs)
                asked = any(s.parent == index and s.name == "/oteldemo.ProductCatalogService/ListProducts" for s in trace.spans)
                assert attrs["app.recommendation.cache_enabled"] is True and attrs["app.cache_hit"] is (not asked)
                if span.pod is not None and span.pod.name in tick.cache:
                    assert attrs["app.products.count"] == round(tick.cache[span.pod.name]) > len(model.products)
                assert dict(span.events[0][1])["feature_flag.variant"] == "on"
                seen[bool(attrs["app.cache_hit"])] += 1
    assert seen[True] > 10 and seen[False] > 10, seen  # the demo's miss ratio is one half
