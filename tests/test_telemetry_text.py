"""The text an agent reads from telemetry: the promql tool's times and ranges, each runtime's own error
wording, and log lines that name the real requests (paths, query strings, cache hits and misses)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from conftest import ContextFactory
from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.sim.app import errortext
from itbench_gym.backends.sim.app.logs import FieldPools, LogActivity, TickLog, render_tick
from itbench_gym.backends.sim.app.model import AppModel
from itbench_gym.backends.sim.app.spec import AppSpec
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.lang.timestamps import parse_rfc3339
from itbench_gym.paths import envs_dir
from itbench_gym.registry import get_spec
from itbench_gym.tools.promql import PromQLTool, format_result, format_series

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z")


# ------------------------------------------------------------------------------------ promql tool

def _matrix(series: int, points: int, step: float = 60.0) -> list[dict[str, object]]:
    return [{"metric": {"__name__": "up", "job": f"job-{i}", "instance": f"10.244.1.{i}:8080"},
             "values": [[T0 + step * k, str(k % 2)] for k in range(points)]} for i in range(series)]


def test_range_results_show_every_point_with_rfc3339_times() -> None:
    text = format_result({"resultType": "matrix", "result": _matrix(3, 31)})
    lines = text.splitlines()
    assert lines[0] == "3 series, 93 points, 2026-01-01T00:00:00Z to 2026-01-01T00:30:00Z"
    assert lines[1] == 'up{instance="10.244.1.0:8080", job="job-0"} (31 points)'
    assert lines[2] == "  2026-01-01T00:00:00Z 0" and lines[32] == "  2026-01-01T00:30:00Z 0"
    assert len(lines) == 1 + 3 * 32 and "@" not in text and "e+09" not in text


def test_instant_and_scalar_results_say_when() -> None:
    vector = {"resultType": "vector", "result": [{"metric": {"__name__": "up", "job": "a"}, "value": [T0 + 90.5, "1"]}]}
    assert format_result(vector) == '1 series at 2026-01-01T00:01:30.500Z\nup{job="a"} 1'
    assert format_result({"resultType": "scalar", "result": [T0, "2"]}) == "scalar: 2 at 2026-01-01T00:00:00Z"
    assert format_result({"resultType": "vector", "result": []}) == "empty result (no series matched)"


def test_a_large_range_keeps_the_newest_points_and_says_what_it_left_out() -> None:
    text = format_series(_matrix(30, 400, step=15.0), limit=8000)
    assert len(text) <= 8000
    kept = [len([line for line in block.splitlines() if RFC3339.fullmatch(line.strip().split(" ")[0])])
            for block in text.split("\nup{")[1:]]
    assert len(kept) == 30 and len(set(kept)) == 1 and 0 < kept[0] < 400
    assert f"  ... {400 - kept[0]} earlier points not shown" in text
    assert text.endswith(f"... [{30 * (400 - kept[0])} of 12000 points not shown: each series shows its newest {kept[0]}; "
                         "shorten the range or use a larger step]")
    # the newest point of each series is always there
    assert text.count("  2026-01-01T01:39:45Z 1") == 30


def test_too_many_series_are_cut_with_a_count() -> None:
    text = format_series(_matrix(3000, 4), limit=16000)
    assert len(text) <= 16000
    shown = text.count(" (4 points)")
    assert 0 < shown < 3000
    assert re.search(rf"\.\.\. \[{3000 - shown} more series with {4 * (3000 - shown)} points not shown, and "
                     rf"{shown * 3} earlier points of the series above; narrow the query", text)


@pytest.fixture(scope="module")
def twin(tool_context: ContextFactory) -> Iterator[tuple[SimBackend, Endpoints]]:
    backend = SimBackend()
    endpoints = backend.start(get_spec("SRE-CacheFailure-v0"), 2)
    backend.advance(900)
    try:
        yield backend, endpoints
    finally:
        backend.close()


def test_the_promql_tool_prints_a_whole_range_from_the_twin(twin: tuple[SimBackend, Endpoints], tool_context: ContextFactory) -> None:
    backend, endpoints = twin
    ctx = tool_context(backend, endpoints)
    query = 'sum by (service_name) (rate(traces_span_metrics_calls_total{service_name=~"frontend|cart"}[2m]))'
    out = PromQLTool().run({"query": query, "range": "10m", "step": "60s"}, ctx)
    assert out.exit_status == 0, out.text
    lines = out.text.splitlines()
    end = backend.clock.now()
    assert lines[0].startswith("2 series, 22 points, ")
    first, last = lines[0].split(", ")[2].split(" to ")
    assert parse_rfc3339(last) == pytest.approx(end, abs=1e-3) and parse_rfc3339(first) == pytest.approx(end - 600, abs=1e-3)
    assert [line for line in lines if line.startswith("{")] == ['{service_name="cart"} (11 points)', '{service_name="frontend"} (11 points)']
    points = [line.strip().split(" ") for line in lines if line.startswith("  ")]
    assert len(points) == 22 and all(RFC3339.fullmatch(t) and float(v) > 0 for t, v in points)
    again = PromQLTool().run({"query": query, "range": "10m", "step": "60s"}, ctx)
    assert again.text == out.text
    instant = PromQLTool().run({"query": query}, ctx)
    assert instant.text.splitlines()[0] == f"2 series at {lines[0].split(' to ')[1]}"


# ------------------------------------------------------------------------ each runtime's wording

REFUSED = errortext.Failure("UNAVAILABLE", "", "no_endpoints", "recommendation", 8080, "10.96.47.125", now=T0 + 3.25)


@pytest.mark.parametrize("language, text", [
    ("typescript", "14 UNAVAILABLE: No connection established. Last error: connect ECONNREFUSED 10.96.47.125:8080 "
                   "(2026-01-01T00:00:03.250Z)"),
    ("go", 'rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp '
           '10.96.47.125:8080: connect: connection refused"'),
    ("csharp", 'Status(StatusCode="Unavailable", Detail="Error connecting to subchannel.", '
               'DebugException="System.Net.Sockets.SocketException (111): Connection refused")'),
    ("java", "io.grpc.StatusRuntimeException: UNAVAILABLE: io exception"),
])
def test_a_refused_connection_in_each_callers_own_words(language: str, text: str) -> None:
    assert errortext.message(language, REFUSED) == text


def test_python_and_http_clients_and_callee_statuses() -> None:
    python = errortext.message("python", REFUSED)
    assert python.startswith("<_InactiveRpcError of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n\tdetails = "
                             '"failed to connect to all addresses; last error: UNKNOWN: ipv4:10.96.47.125:8080: Failed to '
                             'connect to remote host: Connection refused"')
    quote = errortext.Failure("UNAVAILABLE", "", "dns", "quote", 8080, protocol="http", method="POST", url="http://quote:8080/getquote")
    assert errortext.message("rust", quote) == ("error sending request for url (http://quote:8080/getquote): error trying to connect: "
                                                "dns error: failed to lookup address information: Name or service not known")
    assert errortext.message("go", quote) == 'POST "http://quote:8080/getquote": dial tcp: lookup quote on 10.96.0.10:53: no such host'
    # a callee that answered with its own status: the caller wraps the callee's message
    flag = errortext.Failure("INTERNAL", "Error: Product Catalog Fail Feature Flag Enabled")
    assert errortext.message("typescript", flag) == "13 INTERNAL: Error: Product Catalog Fail Feature Flag Enabled"
    assert errortext.message("go", flag) == "rpc error: code = Internal desc = Error: Product Catalog Fail Feature Flag Enabled"
    assert errortext.details("go", flag) == "Error: Product Catalog Fail Feature Flag Enabled"
    assert errortext.code_number("DEADLINE_EXCEEDED") == 4 and errortext.code_number("NOT_A_CODE") == 2


# ---------------------------------------------------------------------------------- log lines

@pytest.fixture(scope="module")
def app() -> tuple[AppSpec, FieldPools]:
    model = AppModel.load(envs_dir() / "astronomy-shop", seed=1)
    return model.spec, FieldPools.of(model.spec, model.products)


def _render(app: tuple[AppSpec, FieldPools], container: str, *acts: LogActivity, seed: int = 1) -> list[str]:
    spec, pools = app
    tick = TickLog(T0 + 15.0, 15.0, {(f"{container}-pod", container): tuple(acts)}, {})
    return [line for _, line in render_tick(spec, pools, seed, tick, f"{container}-pod", container)]


def _act(template: str, rate: float, **context: str) -> LogActivity:
    return LogActivity(template, rate, tuple(sorted(context.items())))


def test_callers_log_the_same_refused_call_in_their_own_runtime_s_words(app: tuple[AppSpec, FieldPools]) -> None:
    spec, _ = app
    failure = {"error": "connection refused", "grpc_code": "UNAVAILABLE", "cause": "no_endpoints",
               "target": "recommendation:8080", "target_ip": "10.96.47.125", "method": "GET", "path": "/api/recommendations"}
    frontend = _render(app, "frontend", _act(spec.services["frontend"].logs.errors["default"], 2.0, **failure))
    assert frontend and all(re.fullmatch(r"Error: 14 UNAVAILABLE: No connection established\. Last error: connect ECONNREFUSED "
                                         r"10\.96\.47\.125:8080 \(2026-01-01T00:00:\d\d\.\d{3}Z\)", line) for line in frontend)
    charge = {**failure, "target": "payment:8080", "target_ip": "10.96.3.4"}
    checkout = _render(app, "checkout", _act(spec.services["checkout"].logs.errors["charge"], 2.0, **charge))
    assert checkout and all('could not charge the card: rpc error: code = Unavailable desc = connection error: desc = '
                            '\\"transport: Error while dialing: dial tcp 10.96.3.4:8080: connect: connection refused\\"' in line
                            for line in checkout)
    listing = {**failure, "target": "product-catalog:8080", "target_ip": "10.96.9.9"}
    recommendation = _render(app, "recommendation", _act(spec.services["recommendation"].logs.errors["default"], 2.0, **listing))
    assert recommendation and all(" ERROR [grpc._server] " in line and "Exception calling application: <_InactiveRpcError" in line
                                  and "ipv4:10.96.9.9:8080: Failed to connect to remote host: Connection refused" in line
                                  for line in recommendation)


def test_access_logs_name_the_requests_the_load_generator_made(app: tuple[AppSpec, FieldPools]) -> None:
    spec, pools = app
    template = spec.services["frontend-proxy"].logs.request[0].text
    lines = _render(app, "frontend-proxy",
                    _act(template, 4.0, method="GET", path="/api/products/{productId}", upstream="frontend"),
                    _act(template, 4.0, method="GET", path="/api/recommendations", upstream="frontend"),
                    _act(template, 4.0, method="GET", path="/api/data", upstream="frontend"))
    requests = [line.split('"')[1] for line in lines]
    products = "|".join(pools.products)
    assert any(re.fullmatch(rf"GET /api/products/({products}) HTTP/1\.1", r) for r in requests)
    assert any(re.fullmatch(rf"GET /api/recommendations\?productIds=({products}) HTTP/1\.1", r) for r in requests)
    assert any(re.fullmatch(r"GET /api/data\?contextKeys=[a-z]+ HTTP/1\.1", r) for r in requests)
    assert not any("{" in r for r in requests)
    assert lines == _render(app, "frontend-proxy",
                            _act(template, 4.0, method="GET", path="/api/products/{productId}", upstream="frontend"),
                            _act(template, 4.0, method="GET", path="/api/recommendations", upstream="frontend"),
                            _act(template, 4.0, method="GET", path="/api/data", upstream="frontend"))
    assert lines != _render(app, "frontend-proxy",
                            _act(template, 4.0, method="GET", path="/api/products/{productId}", upstream="frontend"),
                            _act(template, 4.0, method="GET", path="/api/recommendations", upstream="frontend"),
                            _act(template, 4.0, method="GET", path="/api/data", upstream="frontend"), seed=2)


def test_recommendation_logs_its_cache_hits_and_misses(app: tuple[AppSpec, FieldPools]) -> None:
    spec, _ = app
    miss = spec.services["recommendation"].logs.effect["cache_leak"]
    lines = _render(app, "recommendation", _act(miss, 3.0))
    misses = [line for line in lines if line.endswith(" - get_product_list: cache miss")]
    hits = [line for line in lines if line.endswith(" - get_product_list: cache hit")]
    # recommendation_server.py: a miss one time in two (random.random() < 0.5)
    assert misses and hits and 0.4 < len(hits) / len(misses) < 2.5
    assert all(re.match(r"2026-01-01 00:00:\d\d,\d{3} INFO \[main\] \[recommendation_server\.py:(83|91)\] \[trace_id=[0-9a-f]{32} "
                        r"span_id=[0-9a-f]{16} resource\.service\.name=recommendation trace_sampled=True\] - ", line) for line in lines)


def test_the_load_generator_logs_what_each_task_did(app: tuple[AppSpec, FieldPools]) -> None:
    spec, _ = app
    acts = [_act(line.text, 5.0, method="POST", path="/user_browse_product") for line in spec.services["load-generator"].logs.request]
    lines = _render(app, "load-generator", *acts)
    assert lines and all(" [root] [locustfile.py:130] " in line and " - User browsing product: " in line for line in lines)
