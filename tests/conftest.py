"""Fixtures shared by the test modules."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.backends.base import Backend, Endpoints
from itbench_gym.backends.sim.kube.auth import CA_FOLDER
from itbench_gym.faults import FaultContext
from itbench_gym.tools import ToolContext
from itbench_gym.tools.alerts import fetch_alerts
from itbench_gym.tools.clockshim import clock_shim_available, clock_shim_unavailable_reason

ContextFactory = Callable[[Backend, Endpoints], ToolContext]

#: Tests of programs on the twin's clock: the shim that shows it to them needs Linux on x86-64 with
#: seccomp user notification (5.0+); elsewhere kubectl runs on the host's clock (docs/kubernetes.md).
needs_clock_shim = pytest.mark.skipif(
    not clock_shim_available(),
    reason=f"kubectl cannot be shown the twin's clock on this machine: {clock_shim_unavailable_reason()}")

#: The project root, and the reference data beside it (``../shared``), which may be absent.
PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED = PROJECT_ROOT.parent / "shared"



#: The session cache's folders every ``fresh_cache`` shares: the baselines, and the CA their
#: ``kube-root-ca.crt`` ConfigMaps hold (a baseline is keyed by it).
FRESH_CACHE_LINKS = ("baselines", CA_FOLDER)


def pytest_configure(config: pytest.Config) -> None:
    """One baseline cache for the session (``ITBENCH_GYM_CACHE``), fresh and shared: the controller
    makes it before xdist starts its workers, which inherit it, as do the processes tests start."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        directory = tempfile.mkdtemp(prefix="itbench-gym-test-baselines-")
        for shared in FRESH_CACHE_LINKS:  # what ``fresh_cache`` links to, before anything is stored there
            (Path(directory) / shared).mkdir()
        os.environ["ITBENCH_GYM_CACHE"] = directory
        config.add_cleanup(lambda: shutil.rmtree(directory, ignore_errors=True))


def fresh_cache(directory: Path) -> Path:
    """A cache folder with nothing decided yet but the session's healthy baselines and the cluster CA
    they were built with (linked, not built again)."""
    directory.mkdir(parents=True, exist_ok=True)
    for shared in FRESH_CACHE_LINKS:
        (directory / shared).symlink_to(Path(os.environ["ITBENCH_GYM_CACHE"]) / shared, target_is_directory=True)
    return directory


#: The longest modules, longest first: ``--dist loadfile`` hands modules out in collection order, so
#: starting these first keeps a long one from running alone at the end while the other workers idle.
LONGEST_MODULES = ("test_kubernetes_backend.py", "test_env_cache_failure.py", "test_runner.py", "test_kubernetes_parallel.py",
                   "test_itbench_library.py", "test_finops_task.py", "test_tasks.py", "test_mitigation_hacks.py",
                   "test_validate.py", "test_hostile_agent.py", "test_static_checks.py", "test_shared_baselines.py",
                   "test_modalities.py", "test_kube_bounded.py", "test_finops_faults.py", "test_opencost_api.py",
                   "test_opencost_twin.py", "test_ciso_rhel9_library.py", "test_rhel9_host.py", "test_ciso_episodes.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest modules first (``LONGEST_MODULES``); the tests of a module keep their order. pytest-xdist 3.8
    reorders loadfile modules by test count unless ``--no-loadscope-reorder`` is given (pyproject's addopts)."""
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker per core, and one more: tests/test_kubernetes_backend.py drives a twin served in
    realtime and spends most of its minutes waiting on the wall clock, so a spare worker keeps the
    cores busy meanwhile (``-n auto``)."""
    return (os.cpu_count() or 1) + 1

@pytest.fixture(scope="session")
def tool_context(tmp_path_factory: pytest.TempPathFactory) -> ContextFactory:
    """Build the ``ToolContext`` an env would give its tools, with a fresh workspace and scratch dir."""

    def make(backend: Backend, endpoints: Endpoints, time_left: float = 3600.0) -> ToolContext:
        root: Path = tmp_path_factory.mktemp("episode")
        (root / "workspace").mkdir()
        (root / "scratch").mkdir()
        return ToolContext(endpoints=endpoints, advance=backend.advance, now=backend.clock.now,
                           time_left=lambda: time_left, workspace=root / "workspace", scratch=root / "scratch",
                           programs=backend.programs)

    return make


class ShopTwin:
    """The healthy Astronomy Shop (or the app of another scenario) on one twin, checkpointed: each test
    restores it and injects faults through the harness' own path (``fault_context`` on the admin credential)."""

    def __init__(self, scenario: str = "SRE-CacheFailure-v0") -> None:
        from itbench_gym.backends.sim.backend import SimBackend
        from itbench_gym.paths import envs_dir
        from itbench_gym.registry import get_spec
        from itbench_gym.spec.appfacts import load_app_facts

        spec = get_spec(scenario)
        self.app = load_app_facts(envs_dir() / spec.app)
        self.backend = SimBackend()
        self.endpoints = self.backend.start(spec, 0)
        self._baseline = self.backend.checkpoint()

    def reset(self) -> float:
        """Back to the healthy baseline; returns the clock."""
        self.endpoints = self.backend.restore(self._baseline)
        return self.backend.clock.now()

    def context(self) -> FaultContext:
        from itbench_gym.faults import fault_context

        return fault_context(self.backend, self.app)

    @property
    def store(self) -> Any:
        return self.backend.twin.cluster.store

    def value(self, expr: str) -> float:
        """The sum of an instant PromQL query's samples now."""
        data = self.backend.twin.engine.instant(expr, self.backend.clock.now()).data
        return float(sum(s.value for s in data))

    def firing(self) -> set[str]:
        return {a["labels"]["alertname"] for a in fetch_alerts(self.endpoints.prometheus) if a["state"] == "firing"}

    def inject(self, *faults: Any) -> None:
        """Inject ``faults`` (FaultRefs) through the harness' path, from the state the twin is in."""
        from itbench_gym.faults import inject_faults

        ctx = self.context()
        try:
            inject_faults(list(faults), ctx)
        finally:
            ctx.close()

    def close(self) -> None:
        self.backend.close()


def chaos_schedule(name: str, kind: str, spec: dict[str, Any]) -> Any:
    """ITBench's ``scheduled-chaos-mesh-experiment`` fault: a Schedule ``chaos-mesh/<name>`` of one
    experiment ``kind`` (``StressChaos``, ``JVMChaos``, ...) with ``spec``."""
    from itbench_gym.faults.operations.chaos import SCHEDULE_KEYS
    from itbench_gym.spec import FaultRef

    key = SCHEDULE_KEYS[kind]
    return FaultRef("scheduled-chaos-mesh-experiment", {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": name, "namespace": "chaos-mesh"}},
        "scheduleSpec": {"type": kind, key: spec}})


#: The app the FinOps twins run, and the baseline they settle (short: the tests advance what they need).
FINOPS_APP_SCENARIO = "SRE-CacheFailure-v0"
MI = 2.0**20


def finops_backend(*, hpa: bool = False) -> tuple[Any, Any]:
    """A twin of the Astronomy Shop with ITBench's FinOps install option (OpenCost and its rules), with the
    app's autoscalers when ``hpa``, started healthy: the backend (``SimBackend``) and the spec it started."""
    from dataclasses import replace

    from itbench_gym.backends.sim.backend import SimBackend
    from itbench_gym.registry import get_spec

    spec = replace(get_spec(FINOPS_APP_SCENARIO), finops=True, hpa=hpa, baseline_seconds=300.0)
    backend = SimBackend()
    backend.start(spec, 0)
    return backend, spec


def cost_pod(namespace: str, name: str, cpu: float | None, memory: float | None) -> dict[str, Any]:
    """A one-container Pod that requests ``cpu`` cores and ``memory`` bytes (no requests when None)."""
    container: dict[str, Any] = {"name": "web", "image": "nginx:1.27"}
    if cpu is not None and memory is not None:
        container["resources"] = {"requests": {"cpu": f"{round(cpu * 1000)}m", "memory": f"{round(memory / MI)}Mi"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": {"containers": [container]}}


@pytest.fixture(scope="module")
def sre_env() -> Iterator[Any]:
    """An SRE-CacheFailure-v0 env (unwrapped) reset with seed 0, for a module's steps."""
    import itbench_gym
    from itbench_gym.env import ITBenchEnv

    environment = itbench_gym.make("SRE-CacheFailure-v0").unwrapped
    assert isinstance(environment, ITBenchEnv)
    environment.reset(seed=0)
    yield environment
    environment.close()


@pytest.fixture(scope="module")
def shop_twin() -> Iterator[ShopTwin]:
    twin = ShopTwin()
    yield twin
    twin.close()


#: Simulated seconds per wall second of a twin served in realtime: fast enough for CI, slow enough that
#: the agent's own wall time (each kubectl call) costs the incident about what a step costs on the twin.
SERVE_SPEED = 30


@contextlib.contextmanager
def served_realtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The healthy SRE-CacheFailure-v0 cluster served in realtime at ``SERVE_SPEED`` (the real-cluster backend's tests)."""
    with served_twin(tmp_path_factory.mktemp("serve-realtime"), "SRE-CacheFailure-v0", "--realtime", "--speed", str(SERVE_SPEED)) as line:
        yield line


def cluster_config(served: dict[str, Any]) -> Any:
    """A ``ClusterConfig`` for a served twin: its admin kubeconfig and every tool URL."""
    from itbench_gym.backends.kubernetes import ClusterConfig

    return ClusterConfig(kubeconfig=served["admin_kubeconfig"], prometheus=served["prometheus"], loki=served["loki"],
                         jaeger=served["jaeger"], grafana=served["grafana"], alertmanager=served["alertmanager"],
                         ready_timeout=300)


def cluster_inventory(served: dict[str, Any], namespaces: list[str]) -> Any:
    """The served cluster's inventory of ``namespaces`` (what a test compares before and after)."""
    from kubernetes import config as kube_config
    from kubernetes import dynamic

    from itbench_gym.backends.kubernetes import inventory

    api = kube_config.new_client_from_config(config_file=served["admin_kubeconfig"])
    try:
        return inventory.take(dynamic.DynamicClient(api), namespaces)
    finally:
        api.close()


@contextlib.contextmanager
def served_twin(out: Path, scenario: str, *options: str) -> Iterator[dict[str, Any]]:
    """``itbench-gym serve SCENARIO --healthy OPTIONS`` in another process: the line it prints (URLs, kubeconfigs)."""
    proc = subprocess.Popen([sys.executable, "-m", "itbench_gym.cli", "serve", scenario, "--healthy", *options,
                             "--seed", "0", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "serve printed nothing"
        yield json.loads(line)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
