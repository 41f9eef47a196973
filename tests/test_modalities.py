"""Masked modalities answer as the real system does without that component (docs/architecture.md).

``-NoLogs``: the scenario's cluster has no Loki — the agent gets no Loki endpoint (``logql`` says logs
are not available), the port the twin keeps for Loki serves nothing — and the containers' logs are
empty (``kubectl logs`` succeeds with no lines), as for an app that exports its logs only over OTLP to
a log store that is not there. ``-NoTraces``: no Jaeger — no endpoint (``traces`` says so), its port
serves nothing, and ``topology`` shows no call edges from traces. Everything else, and the base
scenario, is unaffected.

All envs share one backend (one healthy baseline): a variant's masking must not outlive its reset.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

import itbench_gym
from itbench_gym.backends.sim.backend import SimBackend

BASE = "SRE-CacheFailure-v0"
NO_LOGS = "SRE-CacheFailure-NoLogs-v0"
NO_TRACES = "SRE-CacheFailure-NoTraces-v0"
NS = itbench_gym.get_spec(BASE).namespace
SEED = 0

ACTIONS: dict[str, Any] = {
    "logql": f'logql {{namespace="{NS}"}} |= "error"',
    "logs": f"kubectl logs deploy/frontend -n {NS} --tail=5",
    "previous_logs": f"kubectl logs deploy/recommendation -n {NS} --previous --tail=5",
    "traces": "traces service=frontend error=true limit=3",
    "topology": {"tool": "topology", "args": {"focus": "Service/checkout", "depth": 1}},
    "promql": "promql sum(rate(traces_span_metrics_calls_total[2m]))",
}


@dataclass(frozen=True)
class Run:
    """One episode's answers to ``ACTIONS`` and the endpoints the agent was given."""

    endpoints: dict[str, Any]
    answers: dict[str, tuple[int, str]]

    def ok(self, name: str) -> str:
        status, text = self.answers[name]
        assert status == 0, f"{name}: exit {status}: {text[:300]}"
        return text

    def calls_edges(self) -> int:
        return self.ok("topology").count('"CALLS"')


@dataclass(frozen=True)
class Runs:
    base: Run
    no_logs: Run
    no_traces: Run
    base_again: Run
    #: What the ports of the base scenario's Loki and Jaeger answered while each variant was current.
    loki_port_during_no_logs: int
    jaeger_port_during_no_traces: int


@pytest.fixture(scope="module")
def runs() -> Iterator[Runs]:
    backend = SimBackend()
    envs: list[Any] = []

    def run(scenario_id: str) -> Run:
        env = itbench_gym.make(scenario_id, backend=backend)
        envs.append(env)
        _, info = env.reset(seed=SEED)
        answers = {}
        for name, action in ACTIONS.items():
            obs, *_ = env.step(action)
            answers[name] = (int(obs["exit_status"]), str(obs["text"]))
        return Run(dict(info["endpoints"]), answers)

    try:
        base = run(BASE)
        no_logs = run(NO_LOGS)
        loki = requests.get(f"{base.endpoints['loki']}/loki/api/v1/labels", timeout=30).status_code
        no_traces = run(NO_TRACES)
        jaeger = requests.get(f"{base.endpoints['jaeger']}/api/services", timeout=30).status_code
        yield Runs(base, no_logs, no_traces, run(BASE), loki, jaeger)
    finally:
        for env in envs:
            env.unwrapped.task.close()
        backend.close()


def test_no_logs_has_no_loki(runs: Runs) -> None:
    run = runs.no_logs
    assert run.endpoints["loki"] is None
    assert run.answers["logql"] == (1, "logs are not available in this scenario (no Loki endpoint)")
    assert runs.loki_port_during_no_logs == 404


def test_no_logs_containers_have_empty_logs(runs: Runs) -> None:
    assert runs.no_logs.ok("logs") == "" and runs.no_logs.ok("previous_logs") == ""
    assert len(runs.base.ok("logs").splitlines()) == 5 and runs.base.ok("previous_logs")  # the same pods log in the base scenario


def test_no_logs_keeps_traces_topology_and_metrics(runs: Runs) -> None:
    run = runs.no_logs
    assert run.endpoints["jaeger"] and run.endpoints["prometheus"]
    assert run.ok("traces").startswith("3 traces (service=frontend, error=true") and run.calls_edges() > 0
    assert run.ok("promql") == runs.base.ok("promql")


def test_no_traces_has_no_jaeger(runs: Runs) -> None:
    run = runs.no_traces
    assert run.endpoints["jaeger"] is None
    assert run.answers["traces"] == (1, "traces are not available in this scenario (no Jaeger endpoint)")
    assert runs.jaeger_port_during_no_traces == 404
    assert run.calls_edges() == 0 and runs.base.calls_edges() > 0
    assert f'"{NS}/Service/checkout"' in run.ok("topology")  # the rest of the topology is still there


def test_no_traces_keeps_logs_and_metrics(runs: Runs) -> None:
    run = runs.no_traces
    assert run.endpoints["loki"] and run.endpoints["prometheus"]
    assert run.ok("logql") == runs.base.ok("logql") and run.ok("logql").startswith("100 line(s)")
    assert run.ok("logs") == runs.base.ok("logs") and run.ok("previous_logs") == runs.base.ok("previous_logs")
    assert run.ok("promql") == runs.base.ok("promql")


def test_the_base_scenario_has_every_modality_before_and_after_the_variants(runs: Runs) -> None:
    base = runs.base
    assert all(base.endpoints[k] for k in ("loki", "jaeger", "prometheus"))
    assert all(status == 0 for status, _ in base.answers.values())
    assert runs.base_again == base
