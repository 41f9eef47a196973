"""Trace synthesis: traces follow the call graph, agree with the fluid model, and are deterministic."""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterator

import numpy as np
import pytest

from itbench_gym.backends.sim.traces import Span, Trace, TraceSynth, TraceTick
from itbench_gym.backends.sim.traces.catalog import flag_variants
from itbench_gym.backends.sim.traces.jaeger_json import span_tags, trace_json
from itbench_gym.backends.sim.traces.packing import TickPacker
from itbench_gym.backends.sim.traces.search import dependencies, operations
from itbench_gym.backends.sim.twin import Twin
from itbench_gym.paths import envs_dir
from itbench_gym.spec.model import LoadOptions

SEED = 3


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    tw = Twin(envs_dir() / "astronomy-shop", seed=SEED, load=LoadOptions(users=20))
    tw.advance(300)
    yield tw


@pytest.fixture(scope="module")
def synth(twin: Twin) -> TraceSynth:
    return TraceSynth(twin.model.spec, SEED, twin.model.products)


def _root(synth: TraceSynth, op: str) -> int:
    return synth.roots.index(("load-generator", op))


def _many(synth: TraceSynth, twin: Twin, op: str, n: int) -> list[Trace]:
    """``n`` traces of one tick (more than the tick's own count, to compare distributions)."""
    tick = twin.model.trace_ticks()[-1]
    rows = np.random.default_rng(99).random((n, 256)).tolist()
    return [synth._trace(tick, _root(synth, op), i, rows[i]) for i in range(n)]


def test_checkout_trace_follows_the_call_graph(synth: TraceSynth, twin: Twin) -> None:
    trace = _many(synth, twin, "user_checkout_single", 1)[0]
    spans = trace.spans
    by_index = {i + 1: s for i, s in enumerate(spans)}
    root = spans[0]
    assert (root.service, root.name, root.kind, root.parent) == ("load-generator", "user_checkout_single", "internal", 0)
    place = next(s for s in spans if s.service == "checkout" and s.kind == "server")
    assert place.name == "oteldemo.CheckoutService/PlaceOrder"
    client = by_index[place.parent]
    assert (client.service, client.kind, client.name) == ("frontend", "client", "grpc.oteldemo.CheckoutService/PlaceOrder")
    callees = {by_index[s.parent].name for s in spans if s.parent and by_index[s.parent].parent == spans.index(place) + 1}
    assert {"oteldemo.CartService/GetCart", "oteldemo.PaymentService/Charge", "orders publish"} <= callees
    consumers = {s.service for s in spans if s.kind == "consumer"}
    assert consumers == {"accounting", "fraud-detection"}
    # every child starts inside its parent
    for s in spans:
        if s.parent:
            p = by_index[s.parent]
            assert p.start <= s.start + 1e-9
    tags = dict(span_tags(place))
    assert tags["rpc.system"] == "grpc" and tags["rpc.service"] == "oteldemo.CheckoutService" and tags["rpc.grpc.status_code"] == 0


def test_durations_and_errors_agree_with_the_model(synth: TraceSynth, twin: Twin) -> None:
    tick = twin.model.trace_ticks()[-1]
    key = ("checkout", "oteldemo.CheckoutService/PlaceOrder")
    durations = [s.duration for t in _many(synth, twin, "user_checkout_single", 1500) for s in t.spans
                 if s.service == "checkout" and s.kind == "server"]
    model = tick.stats[key].ok
    assert statistics.mean(durations) == pytest.approx(model.mean, rel=0.05)
    assert statistics.pstdev(durations) == pytest.approx(model.var ** 0.5, rel=0.2)
    assert not any(t.error for t in _many(synth, twin, "user_index", 50))


def test_jaeger_json_shape(synth: TraceSynth, twin: Twin) -> None:
    trace = _many(synth, twin, "user_browse_product", 1)[0]
    doc = trace_json(twin.model.spec, trace)
    assert doc["traceID"] == trace.hex_id and len(doc["traceID"]) == 32
    ids = {s["spanID"] for s in doc["spans"]}
    assert len(ids) == len(doc["spans"])
    for span in doc["spans"]:
        assert set(span) >= {"traceID", "spanID", "operationName", "references", "startTime", "duration", "tags", "logs", "processID"}
        assert span["processID"] in doc["processes"]
        for ref in span["references"]:
            assert ref["refType"] == "CHILD_OF" and ref["spanID"] in ids
    proxy = next(p for p in doc["processes"].values() if p["serviceName"] == "frontend-proxy")
    ptags = {t["key"]: t["value"] for t in proxy["tags"]}
    assert ptags["k8s.namespace.name"] == "otel-demo" and ptags["k8s.pod.name"].startswith("frontend-proxy-")
    client = next(s for s in doc["spans"] if s["operationName"] == "GET")
    ctags = {t["key"]: t for t in client["tags"]}
    assert ctags["http.url"]["value"].startswith("http://frontend-proxy:8080/api/products/")
    assert ctags["http.status_code"] == {"key": "http.status_code", "type": "int64", "value": 200}
    assert ctags["span.kind"]["value"] == "client"


def test_traces_are_deterministic_and_ids_round_trip(synth: TraceSynth, twin: Twin) -> None:
    tick = twin.model.trace_ticks()[-2]
    i = _root(synth, "user_browse_product")
    first = synth.batch(tick, i)
    assert first, "a tick at 20 users has browse traces"
    again = TraceSynth(twin.model.spec, SEED, synth.products).batch(tick, i)
    assert [trace_json(twin.model.spec, t) for t in first] == [trace_json(twin.model.spec, t) for t in again]
    last = first[-1]
    assert synth.decode_id(last.trace_id) == (tick.t, i, len(first) - 1)
    assert trace_json(twin.model.spec, synth.trace(tick, i, len(first) - 1)) == trace_json(twin.model.spec, last)  # type: ignore[arg-type]
    assert synth.decode_id(last.trace_id ^ 1) is None
    other_seed = TraceSynth(twin.model.spec, SEED + 1, synth.products)
    assert other_seed.decode_id(last.trace_id) is None
    assert synth.batch(tick, i, first=3) == first[:3]


# ---------------------------------------------------------------- what the app's own code adds (traces.yaml)

def _served(twin: Twin, **overrides: object) -> dict[str, object]:
    """The flag values flagd serves from the deployed ConfigMap, with some turned on."""
    from itbench_gym.backends.sim.app.cluster_view import read_flags
    return {**read_flags(twin.cluster.store, twin.model.spec), **overrides}


def _flagged(twin: Twin, **overrides: object) -> TraceTick:
    tick = twin.model.trace_ticks()[-1]
    return dataclasses.replace(tick, flags=_served(twin, **overrides))


def _variants_synth(twin: Twin) -> TraceSynth:
    return TraceSynth(twin.model.spec, SEED, twin.model.products, flag_variants(twin.model.spec, twin.model.manifests()))


def _traces(synth: TraceSynth, tick: TraceTick, op: str, n: int) -> list[Trace]:
    rows = np.random.default_rng(7).random((n, 256)).tolist()
    return [synth._trace(tick, _root(synth, op), i, rows[i]) for i in range(n)]


def _attrs(span: Span) -> dict[str, object]:
    return dict(span.attrs)


def test_recommendation_spans_without_the_cache_flag(twin: Twin) -> None:
    synth = _variants_synth(twin)
    for trace in _traces(synth, _flagged(twin), "user_get_recommendations", 20):
        span = next(s for s in trace.spans if s.name == "get_product_list")
        a = _attrs(span)
        assert a["app.recommendation.cache_enabled"] is False and "app.cache_hit" not in a
        assert a["app.products.count"] == len(twin.model.products)
        assert dict(span.events[0][1]) == {"event": "feature_flag", "feature_flag.key": "recommendationCacheFailure",
                                           "feature_flag.variant": "off", "feature_flag.provider_name": "FlagdProvider"}
        # get_product_list wraps its ListProducts call, as recommendation_server.py's span does
        index = trace.spans.index(span) + 1
        assert any(s.parent == index and s.name == "/oteldemo.ProductCatalogService/ListProducts" for s in trace.spans)
        server = next(s for s in trace.spans if s.service == "recommendation" and s.kind == "server")
        recommended = json.loads(str(a["app.filtered_products.list"]))
        assert _attrs(server)["app.products_recommended.count"] == len(recommended) == 5
        asked = _attrs(trace.spans[0])["product.id"]
        assert asked not in recommended and len(set(recommended)) == 5
        # the frontend then fetches the first four of them from product-catalog
        fetched = [_attrs(s)["app.product.id"] for s in trace.spans if s.name == "oteldemo.ProductCatalogService/GetProduct"]
        assert fetched == recommended[:4]


def test_a_request_names_the_same_product_everywhere(twin: Twin) -> None:
    synth = _variants_synth(twin)
    for trace in _traces(synth, _flagged(twin), "user_browse_product", 30):
        product = _attrs(trace.spans[0])["product.id"]
        assert product in twin.model.products
        urls = [str(_attrs(s)["http.url"]) for s in trace.spans if "http.url" in _attrs(s)]
        assert urls and all(u.endswith(f"/api/products/{product}") for u in urls)
        assert [_attrs(s)["app.product.id"] for s in trace.spans if s.name == "oteldemo.ProductCatalogService/GetProduct"] == [product]
    ads = _traces(synth, _flagged(twin), "user_get_ads", 60)
    targets = {str(_attrs(s)["http.target"]) for t in ads for s in t.spans if s.service == "frontend-proxy" and "http.target" in _attrs(s)}
    assert "/api/data" in targets and any(t.startswith("/api/data?contextKeys=") for t in targets)


def test_product_catalog_failure_fails_only_the_product_it_names(twin: Twin) -> None:
    synth = _variants_synth(twin)
    tick = _flagged(twin, productCatalogFailure=True)
    key = ("product-catalog", "oteldemo.ProductCatalogService/GetProduct")
    # what the flow makes of the flag: one GetProduct in ten fails with the code's status
    failing = dataclasses.replace(tick.stats[key], self_error=0.1, p_err=0.1, grpc_code="INTERNAL",
                                  error_text="Error: Product Catalog Fail Feature Flag Enabled")
    flawed = dataclasses.replace(tick, stats={**tick.stats, key: failing})
    failed, passed = set(), set()
    for trace in _traces(synth, flawed, "user_browse_product", 150):
        for span in trace.spans:
            if span.name == "oteldemo.ProductCatalogService/GetProduct":
                product = _attrs(span)["app.product.id"]
                (failed if span.error else passed).add(product)
                names = [dict(f)["event"] for _, f in span.events]
                if product == "OLJCESPC7Z":
                    # checkProductFailure asks flagd about this product only (Go hook: result.variant)
                    assert ("feature_flag.evaluation" in names) and span.error
                    assert "Error: Product Catalog Fail Feature Flag Enabled" in names
                else:
                    assert "feature_flag.evaluation" not in names and "Product Found" in names
    assert failed == {"OLJCESPC7Z"} and "OLJCESPC7Z" not in passed and len(passed) >= 8


def test_cart_asks_flagd_every_time_and_flagd_is_a_traced_service(twin: Twin) -> None:
    synth = _variants_synth(twin)
    trace = _traces(synth, _flagged(twin), "user_checkout_single", 1)[0]
    by_index = {i + 1: s for i, s in enumerate(trace.spans)}
    empty = next(i for i, s in by_index.items() if s.service == "cart" and s.name.endswith("EmptyCart") and s.kind == "server")
    client = next(s for s in trace.spans if s.parent == empty and s.name == "flagd.evaluation.v1.Service/ResolveBoolean")
    assert (client.service, client.kind, _attrs(client)["rpc.grpc.status_code"]) == ("cart", "client", 0)
    flagd = [s for s in trace.spans if s.service == "flagd"]
    assert [(s.name, s.kind) for s in flagd] == [("flagd.evaluation.v1.Service/ResolveBoolean", "server"),
                                                 ("resolveBoolean", "server"), ("resolveBoolean", "internal")]
    assert _attrs(flagd[1]) == {"feature_flag.key": "cartFailure", "feature_flag.provider.name": "flagd",
                                "feature_flag.result.variant": "off"}
    event = dict(next(f for _, f in by_index[empty].events if dict(f)["event"] == "feature_flag.evaluation"))
    assert event["feature_flag.result.reason"] == "static" and event["feature_flag.result.value"] is False
    # checkout's Go provider caches static flags: its hook events, but no call to flagd
    checkout = next(s for s in trace.spans if s.service == "checkout" and s.kind == "server")
    keys = [dict(f).get("feature_flag.key") for _, f in checkout.events if dict(f)["event"] == "feature_flag.evaluation"]
    assert keys == ["paymentUnreachable", "kafkaQueueProblems"]
    assert not any(s.service == "checkout" and s.name.startswith("flagd.") for s in trace.spans)
    # without a ready flagd the evaluation fails: an error client span, the .NET hook's error.type, no flagd spans
    tick = _flagged(twin)
    down = dataclasses.replace(tick, pods={k: v for k, v in tick.pods.items() if k != "flagd"})
    broken = _traces(synth, down, "user_checkout_single", 1)[0]
    call = next(s for s in broken.spans if s.name == "flagd.evaluation.v1.Service/ResolveBoolean")
    assert call.error and _attrs(call)["rpc.grpc.status_code"] == 14 and not any(s.service == "flagd" for s in broken.spans)
    cart = next(s for s in broken.spans if s.service == "cart" and s.name.endswith("EmptyCart"))
    failed_event = dict(next(f for _, f in cart.events if dict(f)["event"] == "feature_flag.evaluation"))
    assert failed_event["feature_flag.result.reason"] == "error" and failed_event["error.type"] == "general"
    # the store's catalogue lists flagd's operations once it has served an evaluation
    ops = operations(twin.model.spec, [tick], synth)
    assert ("flagd.evaluation.v1.Service/ResolveBoolean", "server") in ops["flagd"]
    assert ("flagd.evaluation.v1.Service/ResolveBoolean", "client") in ops["cart"]
    assert any(p == "cart" and c == "flagd" for p, c, _ in dependencies(synth, [tick], tick.t - tick.dt, tick.t))


def test_without_the_served_flags_no_flag_attributes_are_guessed(synth: TraceSynth, twin: Twin) -> None:
    tick = twin.model.trace_ticks()[-1]
    unknown = dataclasses.replace(tick, flags=None)
    for trace in _traces(synth, unknown, "user_get_recommendations", 5):
        span = next(s for s in trace.spans if s.name == "get_product_list")
        assert "app.recommendation.cache_enabled" not in _attrs(span) and not span.events


def test_a_caught_rate_limit_marks_the_assistant_span_and_ends_the_request(twin: Twin) -> None:
    synth = _variants_synth(twin)
    tick = _flagged(twin, llmRateLimitError=True)
    key = ("product-reviews", "oteldemo.ProductReviewService/AskProductAIAssistant")
    st = tick.stats[key]
    # every request asks the rate-limited model first (the flag's draw made certain)
    calls = [dataclasses.replace(co, count=1.0) if co.call.id == "rate_limited" else co for co in st.calls]
    limited = dataclasses.replace(tick, stats={**tick.stats, key: dataclasses.replace(st, calls=calls)})
    for trace in _traces(synth, limited, "user_ask_product_ai_assistant", 10):
        spans = {s.name: s for s in trace.spans if s.service == "product-reviews"}
        assert spans["chat astronomy-llm-rate-limit"].error
        assert spans["get_ai_assistant_response"].error and "429" in spans["get_ai_assistant_response"].status_message
        assert not spans["/oteldemo.ProductReviewService/AskProductAIAssistant"].error
        assert "chat astronomy-llm" not in spans and "SELECT" not in spans
        assert not [s for s in trace.spans if s.service == "frontend" and s.error]


def test_a_packed_tick_unpacks_to_the_recorded_flow_with_the_specs_own_operations(twin: Twin) -> None:
    spec = twin.model.spec
    tick = twin.model.trace_ticks()[-1]
    packer = TickPacker(spec)
    blob = packer.pack(tick)
    again = TickPacker(spec).unpack(blob)
    assert again == tick and again is not tick
    for key, stats in again.stats.items():
        assert stats.op is spec.op(*key)  # references, not copies of the spec
        assert all(co.call in stats.op.calls for co in stats.calls)
    assert packer.unpack(blob) is packer.unpack(blob)  # unpacked once while kept
    # an operation that is not the spec's own (an edited copy) travels by value
    key, stats = next(iter(tick.stats.items()))
    edited = dataclasses.replace(tick, stats={key: dataclasses.replace(stats, op=dataclasses.replace(stats.op, median_ms=1.0))})
    copied = packer.unpack(packer.pack(edited)).stats[key].op
    assert copied == edited.stats[key].op and copied is not spec.op(*key)


def test_ticks_of_one_statistics_object_share_its_packed_bytes(twin: Twin) -> None:
    """A steady cluster's ticks share their flow statistics: packed once, unpacked to each tick."""
    spec = twin.model.spec
    tick = twin.model.trace_ticks()[-1]
    packer = TickPacker(spec)
    ticks = [dataclasses.replace(tick, t=tick.t + k * tick.dt, rates={key: k * v for key, v in tick.rates.items()}) for k in range(4)]
    packed = [packer.pack(t) for t in ticks]
    assert packed[1][1] and packed[2][1] is packed[1][1]  # from the second tick on, one copy of the statistics
    fresh = TickPacker(spec)
    assert [fresh.unpack(p) for p in packed[::-1]] == ticks[::-1]
    # equal statistics in another object are packed again (nothing compares them)
    copied = dataclasses.replace(ticks[-1], stats=dict(tick.stats))
    again = [packer.pack(copied), packer.pack(copied)]
    assert again[1][1] is not packed[2][1] and [TickPacker(spec).unpack(p) for p in again] == [copied, copied]
