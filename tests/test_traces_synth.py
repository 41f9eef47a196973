"""Trace synthesis: traces follow the call graph, agree with the fluid model, and are deterministic."""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import numpy as np
import pytest

from itbench_gym.backends.sim.traces import Trace, TraceSynth
from itbench_gym.backends.sim.traces.jaeger_json import span_tags, trace_json
from itbench_gym.backends.sim.twin import Twin
from itbench_gym.paths import envs_dir

SEED = 3


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    tw = Twin(envs_dir() / "astronomy-shop", seed=SEED, load_users=20)
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
