"""An agent's LogQL on a twin running SRE-CacheFailure-v0 finds the fault's evidence, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import requests

from conftest import ContextFactory
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.loki import make_loki_app
from itbench_gym.backends.sim.server import ServerHandle, serve
from itbench_gym.registry import get_spec
from itbench_gym.tasks.sre import SRETask
from itbench_gym.tools.base import ToolContext, ToolInputError
from itbench_gym.tools.logql import LogQLTool

SEED = 3


@dataclass
class Incident:
    backend: SimBackend
    loki: ServerHandle
    ctx: ToolContext
    injected_at: float

    @property
    def url(self) -> str:
        return self.loki.url

    def query_range(self, query: str, **params: Any) -> requests.Response:
        return requests.get(self.url + "/loki/api/v1/query_range", params={"query": query, **params}, timeout=30)

    def query(self, query: str) -> dict[str, Any]:
        resp = requests.get(self.url + "/loki/api/v1/query", params={"query": query}, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.json()


@pytest.fixture(scope="module")
def incident(tool_context: ContextFactory) -> Iterator[Incident]:
    spec = get_spec("SRE-CacheFailure-v0")
    backend = SimBackend()
    task = SRETask(spec)
    injected_at = task.setup(backend, SEED).injected_at
    endpoints = backend.endpoints
    task.close()
    twin = backend.twin
    loki = serve(make_loki_app(twin.model, backend.clock, twin.lock, spec.namespace))
    ctx = tool_context(backend, replace(endpoints, loki=loki.url))
    try:
        yield Incident(backend, loki, ctx, injected_at)
    finally:
        loki.stop()
        backend.close()


def _counts(body: dict[str, Any], label: str) -> dict[str, float]:
    return {r["metric"][label]: float(r["value"][1]) for r in body["data"]["result"]}


def test_error_counts_point_at_frontend_and_not_at_unrelated_services(incident: Incident) -> None:
    body = incident.query('sum by (service_name) (count_over_time({namespace="otel-demo"} |= "error" [5m]))')
    counts = _counts(body, "service_name")
    assert counts.get("frontend", 0) > 0
    for unrelated in ("cart", "checkout", "payment", "ad", "currency", "shipping", "quote", "email", "accounting"):
        assert unrelated not in counts


def test_frontend_logs_show_its_failing_calls_to_recommendation(incident: Incident) -> None:
    # Next.js prints the rethrown @grpc/grpc-js error: Node's wording, not Go's "rpc error: code = ..."
    resp = incident.query_range('{service_name="frontend"} |= "Error: 14 UNAVAILABLE: "', since="10m", limit=20)
    assert resp.status_code == 200
    streams = resp.json()["data"]["result"]
    lines = [v[1] for s in streams for v in s["values"]]
    assert len(lines) == 20
    assert all(line.startswith("Error: 14 UNAVAILABLE: ") and "rpc error" not in line for line in lines)
    assert {s["stream"]["detected_level"] for s in streams} == {"error"}
    # Envoy's access log in front of it names the real request (path and query string) that failed
    proxy = incident.query_range('{service_name="frontend-proxy"} |= "GET /api/recommendations?productIds=" |~ "HTTP/1.1. 5[0-9]{2} "',
                                 since="10m", limit=20)
    assert len([v for s in proxy.json()["data"]["result"] for v in s["values"]]) == 20


def test_recommendation_streams_show_the_leak_and_the_restarts(incident: Incident) -> None:
    window = {"start": str(int(incident.injected_at * 1e9))}
    misses = incident.query('sum(count_over_time({service_name="recommendation"} |= "cache miss" [10m]))')
    assert float(misses["data"]["result"][0]["value"][1]) > 0
    before = requests.get(incident.url + "/loki/api/v1/query", timeout=30, params={
        "query": 'sum(count_over_time({service_name="recommendation"} |= "cache miss" [5m]))', "time": str(incident.injected_at)})
    assert before.json()["data"]["result"] == []
    # The rollout restart replaced the pod: Loki still serves the deleted pod's stream.
    pods = requests.get(incident.url + "/loki/api/v1/label/pod/values", timeout=30,
                        params={"query": '{app="recommendation"}', **window}).json()["data"]
    assert len(pods) == 2
    live = incident.backend.twin.cluster.store.list("Pod", "otel-demo")
    assert len([p for p in pods if p in {x["metadata"]["name"] for x in live}]) == 1


def test_bad_query_is_a_400_with_the_position(incident: Incident) -> None:
    resp = incident.query_range('sum by (service_name) (count_over_time({namespace="otel-demo"} |= error [5m]))')
    assert resp.status_code == 400
    assert resp.text == "parse error at line 1, col 67: syntax error: unexpected IDENTIFIER, expecting STRING or ip"


def test_same_query_twice_gives_the_same_answer(incident: Incident) -> None:
    end = str(int(incident.backend.clock.now() * 1e9))
    q = '{namespace="otel-demo"} |~ "(?i)error|fail"'
    first = incident.query_range(q, end=end, since="30m", limit=500).json()
    second = incident.query_range(q, end=end, since="30m", limit=500).json()
    assert first == second and first["data"]["result"]
    metric = 'sum by (service_name, detected_level) (rate({namespace="otel-demo"}[2m]))'
    assert incident.query_range(metric, end=end, since="30m", step="60").json() == \
        incident.query_range(metric, end=end, since="30m", step="60").json()


def test_logql_tool_reads_lines_and_metrics(incident: Incident) -> None:
    tool = LogQLTool()
    out = tool.run({"query": '{service_name="frontend"} |= "UNAVAILABLE"', "limit": 20}, incident.ctx)
    assert out.exit_status == 0 and out.data["resultType"] == "streams"
    first, *rest = out.text.splitlines()
    assert first.startswith("20 line(s) from") and "pass limit for more" in first
    assert len(rest) == 20 and all(" frontend-" in line and "14 UNAVAILABLE" in line for line in rest)
    assert all("[error]" in line for line in rest)
    assert rest == sorted(rest)  # chronological
    metric = tool.run({"query": 'sum by (service_name) (count_over_time({namespace="otel-demo"} |= "error" [5m]))',
                       "range": "10m", "step": "5m"}, incident.ctx)
    assert metric.exit_status == 0 and metric.text.startswith('{service_name="frontend"}: ')
    assert metric.text.count("@") == 3 and "@2026-01-01T00:" in metric.text
    bad = tool.run({"query": '{service_name="frontend"'}, incident.ctx)
    assert bad.exit_status == 1 and bad.text.startswith("LogQL error: parse error at line 1, col 25")
    empty = tool.run({"query": '{service_name="cart"} |= "no such text"', "limit": 5}, incident.ctx)
    assert empty.text == "no log lines matched in the last 15m"
    with pytest.raises(ToolInputError, match="limit must be an integer"):
        tool.run({"query": '{app="cart"}', "limit": 0}, incident.ctx)
    no_loki = replace(incident.ctx, endpoints=replace(incident.ctx.endpoints, loki=None))
    assert tool.run({"query": '{app="cart"}'}, no_loki).text.startswith("logs are not available")
