"""Span metrics and the pods' OTLP metrics reach Prometheus only through the otel-collector's scrape target.

As on ITBench's cluster: the collector's `prometheus` exporter serves them on port 8888, the chart's
ServiceMonitor scrapes it without honorLabels, so each series carries the collector target's labels
and the exposed ``job``/``instance``/``namespace`` become ``exported_*``. What the collector process
holds lives and dies with it. Everything is read through the twin's Prometheus HTTP API.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.registry import get_spec

NS = "otel-demo"
COLLECTOR = "otel-collector"
CALLS = 'traces_span_metrics_calls_total{service_name="frontend-proxy", span_kind="SPAN_KIND_SERVER"}'


class Shop:
    def __init__(self) -> None:
        self.backend = SimBackend()
        self.backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        self.baseline = self.backend.checkpoint()

    @property
    def store(self) -> Any:
        return self.backend.twin.cluster.store

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        url = self.backend.endpoints.prometheus
        assert url is not None
        body = requests.get(url + "/api/v1/query", params={"query": expr}, timeout=30).json()
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def total(self, expr: str) -> float:
        return sum(v for _, v in self.query(expr))

    def collector_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.store.list("Pod", NS, label_selector="app.kubernetes.io/name=opentelemetry-collector")
                if not p["metadata"].get("deletionTimestamp")]

    def scale(self, replicas: int) -> None:
        dep = self.store.get("Deployment", NS, COLLECTOR)
        dep["spec"]["replicas"] = replicas
        self.store.update(dep)


@pytest.fixture(scope="module")
def base() -> Iterator[Shop]:
    shop = Shop()
    yield shop
    shop.backend.close()


@pytest.fixture
def shop(base: Shop) -> Shop:
    base.backend.restore(base.baseline)
    return base


def test_span_metrics_carry_the_collector_targets_labels_and_the_exposed_ones_as_exported(shop: Shop) -> None:
    (pod,) = shop.collector_pods()
    checkout_uids = {p["metadata"]["uid"] for p in shop.store.list("Pod", NS, label_selector="opentelemetry.io/name=checkout")}
    series = shop.query('traces_span_metrics_calls_total{service_name="checkout"}')
    assert series
    for labels, _ in series:
        assert labels["job"] == COLLECTOR and labels["service"] == COLLECTOR and labels["endpoint"] == "metrics"
        assert labels["instance"] == f"{pod['status']['podIP']}:8888" and labels["pod"] == pod["metadata"]["name"]
        assert labels["container"] == "opentelemetry-collector" and labels["namespace"] == labels["exported_namespace"] == NS
        assert labels["exported_job"] == "opentelemetry-demo/checkout" and labels["exported_instance"] in checkout_uids
        assert labels["otel_scope_name"] == "spanmetricsconnector"
    buckets = shop.query('traces_span_metrics_duration_milliseconds_bucket{service_name="checkout", le="+Inf"}')
    assert {lb["job"] for lb, _ in buckets} == {COLLECTOR}
    # the alert rules' aggregations still see the shop by service_name and namespace
    assert shop.total('sum by (service_name, namespace) (rate(traces_span_metrics_calls_total{namespace="otel-demo"}[2m]))') > 10
    # a JVM consumer's OTLP metric and the collector's kafkametrics receiver come the same way
    (close,) = shop.query("kafka_consumer_connection_close_rate")
    assert close[0]["job"] == COLLECTOR and close[0]["exported_job"] == "opentelemetry-demo/fraud-detection"
    members = shop.query('kafka_consumer_group_members{namespace="otel-demo"}')
    assert {lb["consumergroup"] for lb, _ in members} == {"accounting", "fraud-detection"}
    assert all(lb["job"] == COLLECTOR and "exported_job" not in lb for lb, _ in members)


def test_a_collector_scaled_to_zero_takes_its_series_with_it_and_loses_what_was_sent_meanwhile(shop: Shop) -> None:
    backend = shop.backend
    rate = shop.total(f"sum(rate({CALLS}[2m]))")
    assert rate > 1 and shop.total(f'up{{job="{COLLECTOR}"}}') == 2  # the metrics and telemetry ports
    shop.scale(0)
    backend.advance(120)
    assert shop.total(f'up{{job="{COLLECTOR}"}}') == 0 and not shop.collector_pods()
    assert shop.query(CALLS) == []  # stale: the target is gone
    assert shop.query('kafka_consumer_group_members{namespace="otel-demo"}') == []
    backend.advance(600)  # ten minutes of requests no collector received
    shop.scale(1)
    scaled_up = backend.clock.now()
    backend.advance(240)
    (pod,) = shop.collector_pods()
    served = shop.query(CALLS)
    assert served and all(lb["pod"] == pod["metadata"]["name"] for lb, _ in served)
    counted = sum(v for _, v in served)
    # the new process counted only what reached it since it started (at most four minutes' worth),
    # not the ten minutes before
    assert 0 < counted <= 1.5 * rate * (backend.clock.now() - scaled_up) < rate * 600
    assert shop.total(f"sum(rate({CALLS}[2m]))") == pytest.approx(rate, rel=0.5)


def test_a_collector_restart_resets_its_counters_and_rate_handles_it(shop: Shop) -> None:
    backend = shop.backend
    (pod,) = shop.collector_pods()
    before = shop.total(f"sum({CALLS})")
    rate = shop.total(f"sum(rate({CALLS}[2m]))")
    backend.twin.cluster.kill_container(NS, pod["metadata"]["name"], "opentelemetry-collector", reason="Error", exit_code=2)
    backend.advance(240)
    (same,) = shop.collector_pods()
    assert same["metadata"]["uid"] == pod["metadata"]["uid"] and same["status"]["containerStatuses"][0]["restartCount"] == 1
    after = shop.total(f"sum({CALLS})")
    assert 0 < after < before  # the same series, started again from zero
    assert shop.total(f"sum(resets({CALLS}[5m]))") > 0
    assert shop.total(f"sum(rate({CALLS}[2m]))") == pytest.approx(rate, rel=0.5)


def test_the_exporter_forgets_a_replaced_pods_pushed_series_but_the_connector_keeps_its_span_series(shop: Shop) -> None:
    backend = shop.backend
    (old,) = shop.store.list("Pod", NS, label_selector="opentelemetry.io/name=fraud-detection")
    uid = old["metadata"]["uid"]
    shop.store.delete("Pod", NS, old["metadata"]["name"])
    backend.advance(120)
    assert {lb["exported_instance"] for lb, _ in shop.query("kafka_consumer_connection_close_rate")} >= {uid}
    backend.advance(300)  # the exporter's metric_expiration: 5 minutes without an update
    closes = shop.query("kafka_consumer_connection_close_rate")
    assert closes and uid not in {lb["exported_instance"] for lb, _ in closes}
    # the spanmetrics connector hands every series it holds to the exporter at each flush
    assert shop.query(f'traces_span_metrics_calls_total{{exported_instance="{uid}"}}')
