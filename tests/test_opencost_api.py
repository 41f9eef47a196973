"""OpenCost's allocation API in the twin, over HTTP with a real client: costs worked out by hand from the
requests and the custom prices, the aggregations, the 400s naming the parameter, the endpoint only
where the scenario runs OpenCost, and the agent's ``opencost`` tool."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from conftest import ContextFactory, cost_pod, finops_backend
from itbench_gym.backends.sim.opencost_allocation import ParameterError, parse_window
from itbench_gym.env import ITBenchEnv
from itbench_gym.registry import get_spec
from itbench_gym.tools.base import ToolInputError, ToolResult
from itbench_gym.tools.opencost import OpenCostTool, compact
from test_query_limits import _BAD_VALUES, _outcome

SRE_SCENARIO = "SRE-CacheFailure-v0"
NS = "cost-api"
MI, GIB = 2.0**20, 2.0**30
#: ITBench's custom prices, monthly 10 (vCPU) and 5 (GiB), as OpenCost keeps them per hour (%f of price / 730).
CPU_PRICE, RAM_PRICE = float(f"{10 / 730:f}"), float(f"{5 / 730:f}")
#: The test pods: (name, CPU request in cores, memory request in bytes).
PODS = (("small", 0.25, 128 * MI), ("large", 0.5, 256 * MI))


class CostTwin:
    """The SRE scenario's app with OpenCost installed, plus a namespace of two pods with known requests."""

    def __init__(self) -> None:
        self.backend, self.spec = finops_backend()
        self.endpoints = self.backend.endpoints
        cluster = self.backend.twin.cluster
        cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
        pods = [cost_pod(NS, *p) for p in PODS]
        pods[0]["metadata"]["labels"] = {"app.kubernetes.io/component": "web"}
        cluster.apply([*pods, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
                               "spec": {"selector": {"app.kubernetes.io/component": "web"}, "ports": [{"port": 80}]}}])
        self.backend.advance(900)  # the pods run through every window the tests ask for
        self.checkpoint = self.backend.checkpoint()

    def get(self, **params: str) -> requests.Response:
        assert self.endpoints.opencost is not None
        return requests.get(self.endpoints.opencost + "/allocation/compute", params=params, timeout=60)

    def allocation(self, **params: str) -> list[dict[str, Any]]:
        resp = self.get(**params)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["code"] == 200 and body["status"] == "success"
        return body["data"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def costs() -> Iterator[CostTwin]:
    twin = CostTwin()
    yield twin
    twin.backend.close()


def test_namespace_cost_is_requests_times_price_times_hours(costs: CostTwin) -> None:
    now = costs.backend.clock.now()
    (allocations,) = costs.allocation(window="10m", aggregate="namespace")
    ns = allocations[NS]
    # "10m" ends at the next whole minute after now and starts ten minutes earlier; what lies after now has no data
    start, end = parse_window("10m", now)
    assert end - start == 600 and now < end <= now + 60
    hours = (now - start) / 3600
    assert ns["minutes"] == pytest.approx(hours * 60, rel=1e-6)
    cores, memory = sum(cpu for _, cpu, _ in PODS), sum(mem for _, _, mem in PODS)
    assert ns["cpuCost"] == pytest.approx(cores * CPU_PRICE * hours, rel=1e-3)
    assert ns["ramCost"] == pytest.approx(memory / GIB * RAM_PRICE * hours, rel=1e-3)
    assert ns["cpuCoreRequestAverage"] == pytest.approx(cores, rel=1e-3)
    assert ns["ramByteRequestAverage"] == pytest.approx(memory, rel=1e-3)
    assert ns["totalCost"] == pytest.approx(ns["cpuCost"] + ns["ramCost"] + ns["pvCost"], rel=1e-9)
    assert ns["properties"]["namespace"] == NS and ns["properties"]["cluster"] == "default-cluster"
    # a process the twin has no behaviour for uses what it requests
    assert ns["cpuEfficiency"] == pytest.approx(1.0, rel=1e-3) and ns["totalEfficiency"] == pytest.approx(1.0, rel=1e-3)


def test_pod_aggregation_lists_both_pods_with_their_own_costs(costs: CostTwin) -> None:
    (allocations,) = costs.allocation(window="10m", aggregate="pod")
    mine = {name: a for name, a in allocations.items() if a["properties"].get("namespace") == NS}
    assert set(mine) == {"small", "large"}
    assert mine["large"]["cpuCost"] == pytest.approx(2 * mine["small"]["cpuCost"], rel=1e-6)
    assert mine["large"]["properties"]["pod"] == "large" and "controller" not in mine["large"]["properties"]
    # the app's pods belong to their Deployments; bare pods have none
    (controllers,) = costs.allocation(window="10m", aggregate="namespace,controller")
    assert f"{NS}/__unallocated__" in controllers
    assert any(name.startswith("otel-demo/deployment:") for name in controllers)


def test_services_and_labels_come_from_opencosts_own_series(costs: CostTwin) -> None:
    """kube-state-metrics here exports no pod label, so services, labels and Deployments resolve through the
    exporter's own ``kube_pod_labels``, ``service_selector_labels`` and ``deployment_match_labels``."""
    (services,) = costs.allocation(window="10m", aggregate="namespace,service")
    (pods,) = costs.allocation(window="10m", aggregate="pod")
    assert services[f"{NS}/web"]["cpuCost"] == pytest.approx(pods["small"]["cpuCost"], rel=1e-9)
    assert services[f"{NS}/__unallocated__"]["cpuCost"] == pytest.approx(pods["large"]["cpuCost"], rel=1e-9)
    assert "otel-demo/frontend" in services
    # properties as upstream writes them: empty ones left out (omitempty)
    assert pods["small"]["properties"]["labels"]["app_kubernetes_io_component"] == "web"
    assert "annotations" not in pods["small"]["properties"] and "services" not in pods["large"]["properties"]
    (labels,) = costs.allocation(window="10m", aggregate="namespace,label:app.kubernetes.io/component")
    assert labels[f"{NS}/web"]["cpuCost"] == pytest.approx(pods["small"]["cpuCost"], rel=1e-9)
    (controllers,) = costs.allocation(window="10m", aggregate="controller")
    assert "deployment:frontend" in controllers and controllers["deployment:frontend"]["properties"]["controllerKind"] == "deployment"


def test_steps_split_the_window_and_accumulate_sums_them(costs: CostTwin) -> None:
    window = f"{int(costs.backend.clock.now()) - 600},{int(costs.backend.clock.now())}"
    sets = costs.allocation(window=window, aggregate="namespace", step="5m")
    assert len(sets) == 2
    (whole,) = costs.allocation(window=window, aggregate="namespace", step="5m", accumulate="true")
    assert whole[NS]["cpuCost"] == pytest.approx(sum(s[NS]["cpuCost"] for s in sets), rel=1e-9)
    assert whole[NS]["minutes"] == pytest.approx(10.0)
    (idle,) = costs.allocation(window=window, aggregate="cluster", includeIdle="true")
    assert idle["__idle__"]["cpuCost"] > 0 and "default-cluster" in idle


@pytest.mark.parametrize("params, name", [
    ({"window": "ten minutes"}, "window"),
    ({}, "window"),
    ({"window": "1700000000,1600000000"}, "window"),
    ({"window": "10m", "aggregate": "namespac"}, "aggregate"),
    ({"window": "10m", "step": "soon"}, "step"),
    ({"window": "7d", "step": "1m"}, "step"),
    ({"window": "10m", "accumulate": "maybe"}, "accumulate"),
    ({"window": "10m", "filter": 'namespace:"x"'}, "filter"),
])
def test_bad_parameters_are_400s_naming_the_parameter(costs: CostTwin, params: dict[str, str], name: str) -> None:
    resp = costs.get(**params)
    assert resp.status_code == 400
    body = resp.json()
    assert body["code"] == 400 and body["message"].startswith(f"Invalid '{name}' parameter: ")


def test_windows_follow_opencost(costs: CostTwin) -> None:
    now = 1_767_312_345.0  # 2026-01-02T00:05:45Z, a Friday
    assert parse_window("today", now) == (1_767_312_000.0, 1_767_398_400.0)
    assert parse_window("yesterday", now) == (1_767_225_600.0, 1_767_312_000.0)
    assert parse_window("week", now) == (1_766_880_000.0, now)  # since Sunday 2025-12-28
    assert parse_window("month", now) == (1_767_225_600.0, now)
    assert parse_window("2h", now) == (1_767_308_400.0, 1_767_315_600.0)
    assert parse_window("1h offset 1h", now) == (now - 7200, now - 3600)
    assert parse_window("2026-01-01T00:00:00Z,2026-01-01T06:00:00Z", now) == (1_767_225_600.0, 1_767_247_200.0)
    with pytest.raises(ParameterError, match="illegal window: 3 days"):
        parse_window("3 days", now)


def test_the_tool_returns_the_apis_data_and_never_raises(costs: CostTwin, tool_context: ContextFactory) -> None:
    env = ITBenchEnv(costs.spec, backend=costs.backend)
    assert "opencost" in env.tools and "opencost" not in ITBenchEnv(get_spec(SRE_SCENARIO), backend=costs.backend).tools
    ctx = tool_context(costs.backend, costs.endpoints)
    now = int(costs.backend.clock.now())
    window = f"{now - 600},{now}"
    result = env.tools["opencost"].run({"window": window, "aggregate": "cluster", "accumulate": True}, ctx)
    assert result.exit_status == 0, result.text
    assert "\n" not in result.text and ", " not in result.text  # compact JSON
    shown, served = json.loads(result.text), costs.get(window=window, aggregate="cluster", accumulate="true").json()
    assert shown == compact(served)
    assert shown["data"][0]["default-cluster"]["cpuCost"] == served["data"][0]["default-cluster"]["cpuCost"] > 0
    assert "gpuCost" not in shown["data"][0]["default-cluster"]
    # a namespace breakdown carries the labels of its single-pod namespaces (as upstream's does): longer than an
    # observation, it is cut in the middle like any long output, its start and end kept
    listed = env.tools["opencost"].run({"window": "1h", "aggregate": "namespace"}, ctx)
    assert listed.exit_status == 0 and listed.text.startswith('{"code":200,') and listed.text.endswith("}")
    assert "[output truncated:" in listed.text and '"cert-manager":{' in listed.text
    bad = env.tools["opencost"].run({"window": "eventually"}, ctx)
    assert bad.exit_status == 1 and "Invalid 'window' parameter: illegal window: eventually" in bad.text
    for name in ("window", "aggregate", "step", "accumulate"):
        for value in _BAD_VALUES:
            outcome = _outcome(OpenCostTool(), {"window": "10m", name: value}, ctx)
            assert isinstance(outcome, (ToolResult, ToolInputError)), (name, type(value))
            text = outcome.text if isinstance(outcome, ToolResult) else str(outcome)
            assert text.strip() and len(text) < 20_000


def test_a_scenario_without_finops_has_no_opencost(costs: CostTwin) -> None:
    served = costs.endpoints.opencost
    assert served is not None
    try:
        endpoints = costs.backend.start(get_spec(SRE_SCENARIO), 0)
        assert endpoints.opencost is None and endpoints.to_dict()["opencost"] is None
        assert requests.get(served + "/allocation/compute", params={"window": "1h"}, timeout=60).status_code == 404
    finally:
        assert costs.backend.restore(costs.checkpoint).opencost == served
    assert math.isfinite(costs.allocation(window="10m", aggregate="cluster")[0]["default-cluster"]["totalCost"])
