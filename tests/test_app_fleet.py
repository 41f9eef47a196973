"""A second copy of the app, deployed into another namespace of the twin, runs as a second app.

Parallel episodes on one served twin each deploy the app into a namespace set of their own;
the twin must then behave as a cluster does: each copy serves its own traffic and telemetry, a fault in
one leaves the other alone, and the copy's state goes with its namespace. The copy is provisioned as the
real-cluster backend does it: the kubernetes client, through the twin's API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from kubernetes import config, dynamic

from conftest import ShopTwin
from itbench_gym.backends.kubernetes.provision import app_objects, provision, unready
from itbench_gym.paths import envs_dir
from itbench_gym.spec.relocate import relocate_objects, relocate_rules
from itbench_gym.tools.alerts import fetch_alerts

APP = envs_dir() / "astronomy-shop"
HOME, COPY = "otel-demo", "otel-demo-b"


class Shop(ShopTwin):
    def __init__(self) -> None:
        super().__init__()
        self.client = dynamic.DynamicClient(config.new_client_from_config(str(self.backend.admin_kubeconfig)))

    def deploy_copy(self, minutes: float) -> None:
        """The app's objects and rules moved to ``COPY`` (what a parallel episode provisions), then time."""
        self.reset()
        objects = app_objects(APP)
        moved = relocate_objects([o for o in objects if o["kind"] != "PrometheusRule"], {HOME: COPY})
        provision(self.client, moved + relocate_rules([o for o in objects if o["kind"] == "PrometheusRule"], {HOME: COPY}))
        self.backend.advance(minutes * 60)

    def calls(self, namespace: str, status: str = "") -> float:
        status_matcher = f', status_code="{status}"' if status else ""
        return self.value(f'sum(rate(traces_span_metrics_calls_total{{namespace="{namespace}", service_name="frontend"{status_matcher}}}[2m]))')

    def namespaces(self) -> list[str]:
        return [m.spec.namespace for m in self.backend.twin.apps.instances()]


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    twin = Shop()
    yield twin
    twin.close()


def test_a_copy_in_another_namespace_serves_its_own_traffic_and_telemetry(shop: Shop) -> None:
    shop.deploy_copy(6)
    twin = shop.backend.twin
    assert shop.namespaces() == [HOME, COPY]
    assert unready(shop.client, COPY) == []
    # its own request flow: span metrics through its own collector, labelled with its namespace
    home, copy = shop.calls(HOME), shop.calls(COPY)
    assert copy > 0.5 * home > 0
    # its containers use CPU as the model says (more than at idle) and log what they serve
    assert shop.value(f'sum(rate(container_cpu_usage_seconds_total{{namespace="{COPY}", container="frontend"}}[2m]))') > 0.01
    view = twin.apps.view_of(COPY)
    assert not isinstance(view, bool)
    frontend = next(p for p in view.pods if p.service == "frontend")
    now = shop.backend.clock.now()
    assert twin.container_log_lines(COPY, frontend.name, frontend.container["name"], now - 120, now)
    # the one Jaeger holds both copies' traces, each with its pods' namespace
    assert shop.endpoints.jaeger is not None
    found = requests.get(f"{shop.endpoints.jaeger}/api/traces", params={"service": "frontend", "limit": 200, "lookback": "2m"},
                         timeout=60).json()["data"]
    namespaces = {tag["value"] for trace in found for process in trace["processes"].values()
                  for tag in process["tags"] if tag["key"] == "k8s.namespace.name"}
    assert namespaces == {HOME, COPY}
    one = next(t for t in found if any(tag["value"] == COPY for p in t["processes"].values() for tag in p["tags"]))
    again = requests.get(f"{shop.endpoints.jaeger}/api/traces/{one['traceID']}", timeout=60).json()["data"]
    assert [t["traceID"] for t in again] == [one["traceID"]]
    # the installed app keeps its own instance
    assert twin.apps.instance(HOME) is twin.model


def _firing(shop: Shop, name: str) -> list[dict[str, Any]]:
    return [a for a in fetch_alerts(shop.endpoints.prometheus) if a["state"] == "firing" and a["labels"]["alertname"] == name]


def test_a_fault_in_the_copy_leaves_the_installed_app_alone(shop: Shop) -> None:
    shop.deploy_copy(3)
    shop.client.resources.get(api_version="apps/v1", kind="Deployment").patch(
        name="cart", namespace=COPY, body={"spec": {"replicas": 0}}, content_type="application/merge-patch+json")
    shop.backend.advance(6 * 60)
    assert shop.calls(COPY, "STATUS_CODE_ERROR") > 0
    assert shop.calls(HOME, "STATUS_CODE_ERROR") == 0
    # the copy's own alert rules fire for the copy only
    fired = _firing(shop, "HighRequestErrorRate")
    assert fired and {a["labels"].get("namespace") for a in fired} == {COPY}


def test_the_copy_goes_with_its_namespace_and_snapshots_keep_it(shop: Shop) -> None:
    shop.deploy_copy(1)
    backend = shop.backend
    mark = backend.checkpoint()
    backend.advance(90)
    after = shop.calls(COPY)
    backend.restore(mark)
    assert shop.namespaces() == [HOME, COPY]
    backend.advance(90)
    assert shop.calls(COPY) == after > 0
    shop.client.resources.get(api_version="v1", kind="Namespace").delete(name=COPY)
    backend.advance(120)
    assert shop.namespaces() == [HOME]
