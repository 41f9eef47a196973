"""The Prometheus HTTP API over real loopback HTTP, checked with requests and prometheus-api-client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import requests
from werkzeug.serving import make_server

from itbench_gym.backends.sim.alerting import RuleManager
from itbench_gym.backends.sim.inprocess import in_process_session
from itbench_gym.backends.sim.prometheus_api import make_prometheus_app
from itbench_gym.backends.sim.promql import Engine
from itbench_gym.backends.sim.server import WSGIApp
from itbench_gym.backends.sim.tsdb import TSDB
from itbench_gym.clock import SIM_EPOCH, SimClock

RULES = {
    "groups": [
        {
            "name": "app",
            "interval": "15s",
            "rules": [
                {"alert": "CartDown", "expr": 'up{job="cart"} == 0', "labels": {"severity": "critical"},
                 "annotations": {"summary": "{{ $labels.instance }} down"}},
                {"alert": "SlowCheckout", "expr": 'latency{job="checkout"} > 1', "for": "15m"},
                {"record": "job:up:sum", "expr": "sum by (job) (up)"},
            ],
        }
    ]
}


@pytest.fixture(scope="module")
def api() -> tuple[WSGIApp, SimClock]:
    clock = SimClock()
    db = TSDB()
    engine = Engine(db)
    rules = RuleManager(RULES, engine, start=SIM_EPOCH)
    for k in range(41):
        t = SIM_EPOCH + 15 * k
        db.append(t, [
            ({"__name__": "up", "job": "cart", "instance": "cart-0"}, 0 if k >= 20 else 1),
            ({"__name__": "up", "job": "checkout", "instance": "co-0"}, 1),
            ({"__name__": "latency", "job": "checkout"}, 2.5),
            ({"__name__": "http_requests_total", "job": "checkout", "code": "200"}, 10.0 * k),
        ])
    clock.advance(600)
    rules.evaluate_until(clock.now())
    return make_prometheus_app(engine, db, rules, clock, metadata={"up": {"type": "gauge", "help": "Target up.", "unit": ""}}), clock


@pytest.fixture(scope="module")
def server(api: tuple[WSGIApp, SimClock]) -> Iterator[tuple[str, SimClock]]:
    app, clock = api
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}", clock
    srv.shutdown()


def get(base: str, path: str, **params: object) -> requests.Response:
    return requests.get(base + path, params=params, timeout=10)


def test_instant_query_defaults_to_the_sim_clock(server: tuple[str, SimClock]) -> None:
    base, clock = server
    body = get(base, "/api/v1/query", query='up{job="cart"}').json()
    assert body == {
        "status": "success",
        "data": {"resultType": "vector", "result": [
            {"metric": {"__name__": "up", "instance": "cart-0", "job": "cart"}, "value": [clock.now(), "0"]}]},
    }


def test_query_accepts_rfc3339_and_post_forms(server: tuple[str, SimClock]) -> None:
    base, _ = server
    r = get(base, "/api/v1/query", query='up{job="cart"}', time="2026-01-01T00:01:00Z")
    assert r.json()["data"]["result"][0]["value"] == [SIM_EPOCH + 60, "1"]
    r = requests.post(base + "/api/v1/query", data={"query": "1/0", "time": str(SIM_EPOCH)}, timeout=10)
    assert r.json()["data"] == {"resultType": "scalar", "result": [SIM_EPOCH, "+Inf"]}


def test_query_range_and_infos(server: tuple[str, SimClock]) -> None:
    base, _ = server
    body = get(base, "/api/v1/query_range", query="rate(latency[1m])", start=SIM_EPOCH + 60,
               end=SIM_EPOCH + 120, step="30s").json()
    assert body["status"] == "success"
    assert body["data"]["result"][0]["values"] == [[SIM_EPOCH + 60, "0"], [SIM_EPOCH + 90, "0"], [SIM_EPOCH + 120, "0"]]
    assert body["infos"][0].startswith("PromQL info: metric might not be a counter")


@pytest.mark.parametrize(
    ("path", "params", "status", "error_type", "fragment"),
    [
        ("/api/v1/query", {"query": "sum(up"}, 400, "bad_data", "parse error"),
        ("/api/v1/query", {"query": "up", "time": "yesterday"}, 400, "bad_data", 'invalid parameter "time"'),
        ("/api/v1/query_range", {"query": "up", "start": "10", "end": "0", "step": "1"}, 400, "bad_data", "end timestamp"),
        ("/api/v1/query_range", {"query": "up", "start": "0", "end": "10", "step": "0"}, 400, "bad_data", "step"),
        ("/api/v1/query", {"query": "up / on() up"}, 422, "execution", "duplicate series"),
        ("/api/v1/series", {}, 400, "bad_data", "no match[] parameter provided"),
        ("/api/v1/rules", {"type": "nope"}, 400, "bad_data", '"type"'),
    ],
)
def test_errors_use_prometheus_envelopes(
    server: tuple[str, SimClock], path: str, params: dict[str, str], status: int, error_type: str, fragment: str
) -> None:
    base, _ = server
    r = get(base, path, **params)
    assert r.status_code == status
    body = r.json()
    assert body["status"] == "error" and body["errorType"] == error_type and fragment in body["error"]


def test_metadata_endpoints(server: tuple[str, SimClock]) -> None:
    base, _ = server
    assert get(base, "/api/v1/series", **{"match[]": 'up{job="cart"}'}).json()["data"] == [
        {"__name__": "up", "instance": "cart-0", "job": "cart"}]
    labels = get(base, "/api/v1/labels").json()["data"]
    assert {"__name__", "job", "instance", "code"} <= set(labels)
    assert get(base, "/api/v1/label/job/values").json()["data"] == ["cart", "checkout"]
    names = get(base, "/api/v1/label/__name__/values", **{"match[]": "{job='checkout'}"}).json()["data"]
    # Rule output (ALERTS, recorded series) is stored like scraped data.
    assert names == ["ALERTS", "ALERTS_FOR_STATE", "http_requests_total", "job:up:sum", "latency", "up"]
    assert get(base, "/api/v1/metadata").json()["data"] == {"up": [{"type": "gauge", "help": "Target up.", "unit": ""}]}
    assert get(base, "/api/v1/status/buildinfo").json()["data"]["version"].startswith("3.")
    assert get(base, "/-/ready").text == "Prometheus Server is Ready.\n"
    assert get(base, "/-/healthy").status_code == 200
    assert get(base, "/api/v1/nope").status_code == 404


def test_alerts_and_rules(server: tuple[str, SimClock]) -> None:
    base, _ = server
    alerts = get(base, "/api/v1/alerts").json()["data"]["alerts"]
    by_name = {a["labels"]["alertname"]: a for a in alerts}
    assert by_name["CartDown"]["state"] == "firing"
    assert by_name["CartDown"]["annotations"] == {"summary": "cart-0 down"}
    assert by_name["CartDown"]["activeAt"] == "2026-01-01T00:05:00Z"
    assert by_name["CartDown"]["value"] == "0e+00"
    assert by_name["SlowCheckout"]["state"] == "pending"
    groups = get(base, "/api/v1/rules", type="record").json()["data"]["groups"]
    assert [r["name"] for r in groups[0]["rules"]] == ["job:up:sum"]
    alerting = get(base, "/api/v1/rules", type="alert").json()["data"]["groups"][0]["rules"]
    assert {r["name"]: r["state"] for r in alerting} == {"CartDown": "firing", "SlowCheckout": "pending"}
    assert alerting[1]["duration"] == 900


def test_grafana_and_alertmanager_views(server: tuple[str, SimClock]) -> None:
    base, _ = server
    grafana = get(base, "/api/prometheus/grafana/api/v1/alerts").json()
    assert grafana["status"] == "success"
    assert {a["labels"]["alertname"]: a["state"] for a in grafana["data"]["alerts"]} == {
        "CartDown": "Alerting", "SlowCheckout": "Pending"}
    am = get(base, "/api/v2/alerts").json()
    assert [a["labels"]["alertname"] for a in am] == ["CartDown"]  # pending alerts never reach Alertmanager
    assert am[0]["status"]["state"] == "active" and len(am[0]["fingerprint"]) == 16
    assert get(base, "/api/v2/alerts", filter='alertname="Nope"').json() == []


def test_prometheus_api_client_understands_the_responses(server: tuple[str, SimClock]) -> None:
    from prometheus_api_client import PrometheusConnect

    base, clock = server
    prom = PrometheusConnect(url=base, disable_ssl=True)
    assert prom.check_prometheus_connection()
    assert "http_requests_total" in prom.all_metrics()
    current = prom.get_current_metric_value("up", label_config={"job": "checkout"})
    assert current == [{"metric": {"__name__": "up", "instance": "co-0", "job": "checkout"}, "value": [clock.now(), "1"]}]
    rate = prom.custom_query('rate(http_requests_total[1m])')
    assert float(rate[0]["value"][1]) == pytest.approx(10 / 15)
    start = datetime.fromtimestamp(SIM_EPOCH + 60, tz=UTC)
    end = datetime.fromtimestamp(SIM_EPOCH + 120, tz=UTC)
    matrix = prom.custom_query_range('up{job="cart"}', start_time=start, end_time=end, step="30")
    assert matrix[0]["values"] == [[SIM_EPOCH + 60, "1"], [SIM_EPOCH + 90, "1"], [SIM_EPOCH + 120, "1"]]


@pytest.mark.parametrize(("method", "path", "fields"), [
    ("GET", "/api/v1/alerts", {}),
    ("GET", "/api/v1/rules", {"type": "alert", "rule_name[]": "CartDown"}),
    ("POST", "/api/v1/query", {"query": 'sum by (job) (up)'}),
    ("POST", "/api/v1/query", {"query": "sum(("}),
    ("GET", "/api/v1/query_range", {"query": "up", "start": "1767225600", "end": "1767226200", "step": "0"}),
    ("GET", "/api/v1/nowhere", {}),
])
def test_the_harness_in_process_session_gets_what_the_served_endpoint_answers(
        server: tuple[str, SimClock], api: tuple[WSGIApp, SimClock], method: str, path: str, fields: dict[str, str]) -> None:
    base, _ = server
    where = {"params": fields} if method == "GET" else {"data": fields}
    with in_process_session({base: api[0]}) as local, requests.Session() as remote:
        inside, served = local.request(method, base + path, timeout=10, **where), remote.request(method, base + path, timeout=10, **where)
    assert (inside.status_code, inside.reason, inside.headers["Content-Type"], inside.content) == (
        served.status_code, served.reason, served.headers["Content-Type"], served.content)
    assert inside.url == served.url and inside.encoding == served.encoding
