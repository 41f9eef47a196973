"""The Loki HTTP API: envelopes, parameters and errors as Loki's clients expect them."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from werkzeug.test import Client

from itbench_gym.backends.sim.loki import make_loki_app
from itbench_gym.clock import SimClock
from test_logql import CHECKOUT, FRONTEND, PROXY, T0, FakeSource


@pytest.fixture()
def client() -> Client:
    clock = SimClock()
    clock.set(T0 + 100)
    return Client(make_loki_app(FakeSource(), clock, threading.RLock(), "otel-demo"))


def get(client: Client, path: str, **params: Any) -> tuple[int, Any]:
    resp = client.get(path, query_string=params)
    if resp.mimetype == "application/json":
        return resp.status_code, resp.get_json()
    return resp.status_code, resp.get_data(as_text=True)


def test_query_range_streams_envelope(client: Client) -> None:
    status, body = get(client, "/loki/api/v1/query_range", query='{service_name="frontend"} |= "error"',
                       start=str(int(T0 * 1e9)), end=str(int((T0 + 100) * 1e9)))
    assert status == 200 and body["status"] == "success"
    data = body["data"]
    assert data["resultType"] == "streams" and "summary" in data["stats"]
    (stream,) = data["result"]
    assert stream["stream"]["service_name"] == "frontend" and stream["stream"]["detected_level"] == "error"
    assert stream["stream"]["namespace"] == "otel-demo" and stream["stream"]["k8s_pod_name"] == "frontend-1"
    assert [v[0] for v in stream["values"]] == [str(int((T0 + 30) * 1e9)), str(int((T0 + 20) * 1e9))]  # backward
    assert all(isinstance(v[0], str) and isinstance(v[1], str) for v in stream["values"])


def test_query_range_direction_limit_and_time_formats(client: Client) -> None:
    status, body = get(client, "/loki/api/v1/query_range", query='{namespace="otel-demo"}', start="2026-01-01T00:00:00Z",
                       end="2026-01-01T00:01:40Z", limit="3", direction="FORWARD")
    assert status == 200
    times = sorted(int(v[0]) for s in body["data"]["result"] for v in s["values"])
    assert times == [int((T0 + 5) * 1e9), int((T0 + 6) * 1e9), int((T0 + 7) * 1e9)]
    status, body = get(client, "/loki/api/v1/query_range", query='{app="checkout"}', since="60s")
    assert sorted(v[1] for s in body["data"]["result"] for v in s["values"]) == sorted(line for t, line in CHECKOUT if t > T0 + 40)
    status, body = get(client, "/loki/api/v1/query_range", query='{app="checkout"}', start=str(int(T0)), end=str(T0 + 16.5))
    assert [v[1] for s in body["data"]["result"] for v in s["values"]] == [CHECKOUT[0][1]]


def test_query_range_metric_matrix_and_instant_vector(client: Client) -> None:
    status, body = get(client, "/loki/api/v1/query_range", query='sum by (app) (count_over_time({namespace="otel-demo"}[50s]))',
                       start=str(T0 + 50), end=str(T0 + 100), step="50s")
    assert status == 200 and body["data"]["resultType"] == "matrix"
    series = {s["metric"]["app"]: s["values"] for s in body["data"]["result"]}
    assert series["frontend"] == [[int(T0 + 50), "3"], [int(T0 + 100), "1"]]
    assert series["frontend-proxy"] == [[int(T0 + 50), str(len(PROXY))]]
    status, body = get(client, "/loki/api/v1/query", query='sum(rate({app="frontend"}[100s]))')
    assert body["data"]["resultType"] == "vector"
    assert body["data"]["result"] == [{"metric": {}, "value": [int(T0 + 100), str(len(FRONTEND) / 100)]}]
    status, body = get(client, "/loki/api/v1/query", query="2 * 3")
    assert body["data"]["resultType"] == "scalar" and body["data"]["result"] == [int(T0 + 100), "6"]
    status, body = get(client, "/loki/api/v1/query", query='sort_desc(sum by (app) (count_over_time({namespace="otel-demo"}[5m])))')
    assert [r["metric"]["app"] for r in body["data"]["result"]] == ["frontend-proxy", "frontend", "checkout"]


def test_bad_queries_are_400_with_the_position(client: Client) -> None:
    status, text = get(client, "/loki/api/v1/query_range", query='{service_name="frontend" |= "error"')
    assert status == 400 and text == "parse error at line 1, col 26: syntax error: unexpected |=, expecting , or }"
    status, text = get(client, "/loki/api/v1/query", query='sum(count_over_time({app="x"}[5m])')
    assert status == 400 and text.startswith("parse error at line 1, col 35: syntax error: unexpected $end")
    status, text = get(client, "/loki/api/v1/query", query='{app="checkout"}')
    assert status == 400 and "log queries are not supported as an instant query type" in text
    status, text = get(client, "/loki/api/v1/query", query='sum_over_time({app="checkout"} | logfmt | unwrap items [5m])')
    assert status == 400 and text.startswith("pipeline error: 'SampleExtractionErr'")


@pytest.mark.parametrize("params, message", [
    ({"limit": "0"}, "limit must be a positive value"),
    ({"limit": "many"}, 'invalid parameter "limit"'),
    ({"limit": "6000"}, "max entries limit per query exceeded"),
    ({"direction": "sideways"}, "invalid direction 'sideways'"),
    ({"start": "yesterday"}, 'invalid parameter "start"'),
    ({"since": "soon"}, 'invalid parameter "since"'),
    ({"start": str(T0 + 50), "end": str(T0)}, "end timestamp must not be before"),
    ({"since": "800h"}, "the query time range exceeds the limit (query length: 800h0m0s, limit: 721h0m0s)"),
])
def test_bad_parameters_are_400(client: Client, params: dict[str, str], message: str) -> None:
    status, text = get(client, "/loki/api/v1/query_range", query='{app="checkout"}', **params)
    assert status == 400 and message in text


def test_metric_step_errors(client: Client) -> None:
    status, text = get(client, "/loki/api/v1/query_range", query='count_over_time({app="checkout"}[1m])', step="0")
    assert status == 400 and "zero or negative query resolution step widths" in text


def test_labels_values_and_series(client: Client) -> None:
    status, body = get(client, "/loki/api/v1/labels", start=str(T0), end=str(T0 + 100))
    assert status == 200 and body["status"] == "success"
    assert {"service_name", "namespace", "pod", "container", "app", "job", "k8s_pod_name"} <= set(body["data"])
    assert "detected_level" not in body["data"]  # structured metadata, not an index label
    _, body = get(client, "/loki/api/v1/label/service_name/values", start=str(T0), end=str(T0 + 100))
    assert body["data"] == ["checkout", "frontend", "frontend-proxy", "x"]  # every namespace's streams
    _, body = get(client, "/loki/api/v1/label/service_name/values", query='{namespace="otel-demo"}', start=str(T0), end=str(T0 + 100))
    assert body["data"] == ["checkout", "frontend", "frontend-proxy"]
    _, body = get(client, "/loki/api/v1/label/pod/values", query='{app=~"front.*"}', start=str(T0), end=str(T0 + 100))
    assert body["data"] == ["frontend-1", "frontend-proxy-1"]
    _, body = get(client, "/loki/api/v1/series", **{"match[]": '{app="checkout"}', "start": str(T0), "end": str(T0 + 100)})
    assert [s["pod"] for s in body["data"]] == ["checkout-1"]
    status, text = get(client, "/loki/api/v1/series", **{"match[]": '{app="checkout"'})
    assert status == 400 and text.startswith("parse error at line 1")


def test_ready_buildinfo_and_unknown_paths(client: Client) -> None:
    assert get(client, "/ready") == (200, "ready\n")
    status, body = get(client, "/loki/api/v1/status/buildinfo")
    assert status == 200 and body["version"].startswith("3.")
    assert get(client, "/loki/api/v1/nope")[0] == 404
    assert client.post("/loki/api/v1/query_range", data={"query": '{app="checkout"}', "start": str(T0)}).status_code == 200
