"""The benchmark harness around an episode: inject, wait for alerts, watch the mitigation, grade.

Everything here talks to the backend through the same protocols the agent's tools use (the
Kubernetes API with admin credentials, the Prometheus HTTP API), so it runs unchanged on the twin and
on a real cluster. The agent never sees any of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import networkx as nx
import requests
from kubernetes import client, config

from itbench_gym.backends.base import Backend, BackendError, Endpoints
from itbench_gym.evaluation.mitigation import Baseline, TrafficSample, WorkloadState, watch_mitigation
from itbench_gym.faults import inject_faults
from itbench_gym.paths import envs_dir
from itbench_gym.topology import build_topology
from itbench_gym.spec import ScenarioSpec
from itbench_gym.tools import Tool
from itbench_gym.tools.alerts import alert_key, fetch_alerts
from itbench_gym.tools.topology import list_topology_objects

#: How often the harness looks at the alerts while waiting for the incident to start.
ALERT_POLL_SECONDS = 15.0
#: User-facing traffic: what the load generator's requests get from the shop's edge.
_EDGE_RATE = 'sum(rate(traces_span_metrics_calls_total{{namespace="{ns}",service_name="frontend-proxy",span_kind="SPAN_KIND_SERVER"}}[2m]))'
_EDGE_ERRORS = 'sum(rate(traces_span_metrics_calls_total{{namespace="{ns}",service_name="frontend-proxy",span_kind="SPAN_KIND_SERVER",status_code="STATUS_CODE_ERROR"}}[2m]))'


@lru_cache(maxsize=8)
def app_call_graph(app: str) -> tuple[tuple[str, str], ...]:
    """(caller, callee) service pairs from the app's behaviour data in ``envs/<app>/``."""
    from itbench_gym.backends.sim.app.spec import load_spec as load_app_spec

    app_spec = load_app_spec(envs_dir() / app)
    return tuple(
        sorted(
            {(svc.name, call.service) for svc in app_spec.services.values() for op in svc.operations.values() for call in op.calls}
        )
    )


class ClusterProbe:
    """``MitigationProbe`` over the Kubernetes API and the Prometheus HTTP API."""

    def __init__(self, spec: ScenarioSpec, endpoints: Endpoints, backend: Backend) -> None:
        self._spec = spec
        self._endpoints = endpoints
        self._backend = backend
        self._api = config.new_client_from_config(config_file=str(backend.admin_kubeconfig))

    def close(self) -> None:
        self._api.close()

    def now(self) -> float:
        return self._backend.clock.now()

    def advance(self, seconds: float) -> None:
        self._backend.advance(seconds)

    def firing_alerts(self) -> list[dict[str, str]]:
        return self._alerts(("firing",))

    def active_alerts(self) -> list[dict[str, str]]:
        return self._alerts(("pending", "firing"))

    def _alerts(self, states: tuple[str, ...]) -> list[dict[str, str]]:
        if self._endpoints.prometheus is None:
            return []
        return [dict(a["labels"]) for a in fetch_alerts(self._endpoints.prometheus) if a["state"] in states]

    def _items(self, lister: Callable[[], Any]) -> list[dict[str, Any]]:
        """A list call's items as plain API dicts."""
        return list(self._api.sanitize_for_serialization(lister()).get("items") or [])

    def workloads(self) -> dict[str, WorkloadState]:
        apps = client.AppsV1Api(self._api)
        out: dict[str, WorkloadState] = {}
        listers = (
            ("Deployment", apps.list_deployment_for_all_namespaces, "replicas", "availableReplicas"),
            ("StatefulSet", apps.list_stateful_set_for_all_namespaces, "replicas", "availableReplicas"),
            ("DaemonSet", apps.list_daemon_set_for_all_namespaces, "desiredNumberScheduled", "numberAvailable"),
        )
        for kind, lister, desired, available in listers:
            for item in self._items(lister):
                meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
                wanted = spec.get(desired, status.get(desired, 0)) if kind != "DaemonSet" else status.get(desired, 0)
                out[f"{meta['namespace']}/{kind}/{meta['name']}"] = WorkloadState(
                    desired=int(wanted or 0), available=int(status.get(available) or 0)
                )
        return out

    def namespaces(self) -> set[str]:
        items = self._items(client.CoreV1Api(self._api).list_namespace)
        return {ns["metadata"]["name"] for ns in items if not ns["metadata"].get("deletionTimestamp")}

    def traffic(self) -> TrafficSample:
        rate = self._scalar(_EDGE_RATE.format(ns=self._spec.namespace))
        errors = self._scalar(_EDGE_ERRORS.format(ns=self._spec.namespace))
        success = 1.0 - errors / rate if rate > 0 else 0.0
        return TrafficSample(rate=rate, success_ratio=success)

    def objects(self, namespace: str) -> list[dict[str, Any]]:
        return list_topology_objects(self._api, namespace)

    def _scalar(self, query: str) -> float:
        if self._endpoints.prometheus is None:
            return math.nan
        resp = requests.post(self._endpoints.prometheus + "/api/v1/query", data={"query": query, "time": self.now()}, timeout=30)
        result = resp.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0


@dataclass(frozen=True)
class IncidentRecord:
    """What the harness learned while setting up an incident; replayed with a backend checkpoint."""

    baseline: Baseline
    injection_log: tuple[str, ...]
    alerts_fired_at: float
    incident_alerts: tuple[dict[str, str], ...]


class Harness:
    def __init__(self, spec: ScenarioSpec, endpoints: Endpoints, backend: Backend, *, seed: int) -> None:
        self.spec = spec
        self.endpoints = endpoints
        self.backend = backend
        self.seed = seed
        self.probe = ClusterProbe(spec, endpoints, backend)
        self.incident: IncidentRecord | None = None

    def inject_and_wait(self) -> IncidentRecord:
        """Capture the healthy baseline, inject the faults and wait until the triggering alerts fire."""
        probe = self.probe
        baseline = Baseline(
            workloads=probe.workloads(),
            namespaces=probe.namespaces(),
            traffic=probe.traffic(),
            alerts=[dict(a) for a in probe.firing_alerts()],
        )
        log = inject_faults(self.spec.faults, self.backend.admin_kubeconfig, probe.now())
        deadline = probe.now() + self.spec.alert_wait_timeout
        while True:
            firing = probe.firing_alerts()
            missing = self._missing_triggering(firing)
            if not missing:
                self.incident = IncidentRecord(baseline, tuple(log), probe.now(), tuple(firing))
                return self.incident
            if probe.now() >= deadline:
                raise BackendError(
                    f"scenario {self.spec.id}: triggering alert(s) {', '.join(missing)} did not fire within "
                    f"{self.spec.alert_wait_timeout:.0f} s of the fault injection ({self.spec.source})"
                )
            probe.advance(ALERT_POLL_SECONDS)

    def _missing_triggering(self, firing: Sequence[dict[str, str]]) -> list[str]:
        return [str(m) for m in self.spec.triggering_alerts if not any(m.matches(a) for a in firing)]

    def firing_alert_keys(self) -> list[str]:
        try:
            return sorted(alert_key(a) for a in self.probe.firing_alerts())
        except (requests.RequestException, ValueError, KeyError):
            return []

    def task_prompt(self, tools: Sequence[Tool]) -> str:
        firing = self.firing_alert_keys()
        tool_lines = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        return (
            f"You are the on-call SRE for the {self.spec.app} application in Kubernetes namespace "
            f"{self.spec.namespace!r}. An incident is in progress. Alerts firing now:\n"
            + "\n".join(f"- {a}" for a in firing)
            + "\n\nDiagnose the root cause and mitigate it so the alerts clear and the application serves "
            "its users again, without deleting or disabling healthy parts of the system. When you are "
            "done, submit your report: the entities involved (mark the root cause with \"root_cause\": true) "
            "and how the fault propagated.\n\nTools:\n" + tool_lines
        )

    def evaluate(
        self,
        *,
        report: Any,
        report_error: str | None,
        submitted_at: float | None,
        incident_start: float,
        commands: Sequence[str],
    ) -> dict[str, Any]:
        from itbench_gym.evaluation.episode import evaluate_episode

        assert self.incident is not None, "evaluate() needs an incident (inject_and_wait first)"
        topology = self.topology()
        verdict = watch_mitigation(
            self.probe,
            self.incident.baseline,
            list(self.spec.triggering_alerts),
            injection_alerts=list(self.incident.incident_alerts),
        )
        return evaluate_episode(
            spec=self.spec,
            report=report,
            report_error=report_error,
            mitigation=verdict,
            submitted_at=submitted_at,
            incident_start=incident_start,
            commands=commands,
            topology=topology,
        )

    def topology(self) -> nx.MultiDiGraph:
        """The typed topology of the scenario's namespace as it is now, with the app's call graph."""
        return build_topology(self.probe.objects(self.spec.namespace), app_call_graph(self.spec.app), self.spec.namespace)

    def close(self) -> None:
        self.probe.close()
