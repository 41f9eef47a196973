"""``SRETask``: an ITBench SRE incident — inject faults, wait for alerts, grade diagnosis and mitigation.

Everything here reaches the environment through the protocols the agent's tools use (the Kubernetes
API with the backend's admin credential, the Prometheus HTTP API), so it runs unchanged on the twin
and on a real cluster. The agent never sees any of it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import requests
from kubernetes import client, config

from itbench_gym.backends.base import Backend, BackendError
from itbench_gym.evaluation.episode import EpisodeEvaluation, evaluate_episode
from itbench_gym.evaluation.mitigation import Baseline, TrafficSample, WorkloadState, watch_mitigation
from itbench_gym.faults import inject_faults
from itbench_gym.paths import envs_dir
from itbench_gym.spec import ScenarioSpec
from itbench_gym.spec.appfacts import EdgeFact, load_app_facts
from itbench_gym.tasks.base import Task
from itbench_gym.tasks.types import Incident, Submission
from itbench_gym.tools.alerts import alert_key, fetch_alerts
from itbench_gym.tools.base import Tool
from itbench_gym.tools.topology import list_topology_objects
from itbench_gym.topology import build_topology

#: How often the task looks at the alerts while waiting for the incident to start.
ALERT_POLL_SECONDS = 15.0
#: Window of the traffic probe's rates (as the span-metric alert rules use).
TRAFFIC_WINDOW = "2m"


class ClusterProbe:
    """``MitigationProbe`` over the Kubernetes API (admin credential) and the Prometheus HTTP API.

    User-facing traffic is what the app's ``edge`` (``envs/<app>/app.yaml``) serves: the rate of its
    requests and the share that did not fail, from the series that file names.
    """

    def __init__(self, spec: ScenarioSpec, backend: Backend, edge: EdgeFact) -> None:
        self._spec = spec
        self._backend = backend
        self._edge = edge
        self._prometheus = backend.endpoints.prometheus
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
        if self._prometheus is None:
            return []
        return [dict(a["labels"]) for a in fetch_alerts(self._prometheus) if a["state"] in states]

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
        ns = self._spec.namespace
        rate = self._scalar(f"sum(rate({self._edge.selector(ns)}[{TRAFFIC_WINDOW}]))")
        errors = self._scalar(f"sum(rate({self._edge.selector(ns, errors=True)}[{TRAFFIC_WINDOW}]))")
        success = 1.0 - errors / rate if rate > 0 else 0.0
        return TrafficSample(rate=rate, success_ratio=success)

    def objects(self, namespace: str) -> list[dict[str, Any]]:
        return list_topology_objects(self._api, namespace)

    def _scalar(self, query: str) -> float:
        if self._prometheus is None:
            return math.nan
        resp = requests.post(self._prometheus + "/api/v1/query", data={"query": query, "time": self.now()}, timeout=30)
        result = resp.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0


class SRETask(Task):
    """Diagnose and mitigate an incident: faults from the catalogue, triggering alerts, ground truth.

    The incident of a seed is saved with the backend's checkpoint under a key made of the whole spec
    and the seed, so a repeated seed (on any ``SRETask`` of an equal spec, on the same backend)
    replays it instead of injecting again.
    """

    def __init__(self, spec: ScenarioSpec) -> None:
        super().__init__(spec)
        self._app = load_app_facts(envs_dir() / spec.app)
        if self._app.edge is None:
            raise ValueError(f"scenario {spec.id}: app {spec.app!r} declares no edge (envs/{spec.app}/app.yaml): "
                             "an SRE task checks that the app still serves its users through it")
        self._edge = self._app.edge
        #: The spec's repr covers every field: specs that differ anywhere never share an incident.
        self._fingerprint = hashlib.sha256(repr(spec).encode()).hexdigest()
        self._probe: ClusterProbe | None = None
        self._incident: Incident | None = None

    def setup(self, backend: Backend, seed: int) -> Incident:
        self.close()
        key = ("sre", self._fingerprint, seed)
        saved = backend.restore_incident(key)
        if isinstance(saved, Incident):
            self._probe = ClusterProbe(self.spec, backend, self._edge)
            incident = saved
        else:
            backend.start(self.spec, seed)
            self._probe = ClusterProbe(self.spec, backend, self._edge)
            incident = self._inject_and_wait(self._probe, backend)
            backend.save_incident(key, incident)
        self._incident = incident
        return incident

    def _inject_and_wait(self, probe: ClusterProbe, backend: Backend) -> Incident:
        """Capture the healthy baseline, inject the faults and wait until the triggering alerts fire."""
        spec = self.spec
        baseline = Baseline(
            workloads=probe.workloads(),
            namespaces=probe.namespaces(),
            traffic=probe.traffic(),
            alerts=[dict(a) for a in probe.firing_alerts()],
        )
        injected_at = probe.now()
        log = inject_faults(spec.faults, backend.admin_kubeconfig, injected_at, self._app)
        deadline = probe.now() + spec.alert_wait_timeout
        while True:
            firing = probe.firing_alerts()
            missing = [str(m) for m in spec.triggering_alerts if not any(m.matches(a) for a in firing)]
            if not missing:
                return Incident(injected_at, probe.now(), tuple(log), tuple(firing), baseline)
            if probe.now() >= deadline:
                raise BackendError(
                    f"scenario {spec.id}: triggering alert(s) {', '.join(missing)} did not fire within "
                    f"{spec.alert_wait_timeout:.0f} s of the fault injection ({spec.source})"
                )
            probe.advance(ALERT_POLL_SECONDS)

    def prompt(self, incident: Incident, tools: Sequence[Tool]) -> str:
        tool_lines = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        names = {t.name for t in tools}
        examples = [a for a in self.example_actions() if a.split(maxsplit=1)[0] in names]
        example_lines = "\n\nFor example:\n" + "\n".join(f"- {a}" for a in examples) if examples else ""
        return (
            f"You are the on-call SRE for the {self.spec.app} application in Kubernetes namespace "
            f"{self.spec.namespace!r}. An incident is in progress. Alerts firing now:\n"
            + "\n".join(f"- {a}" for a in sorted(alert_key(a) for a in incident.alerts))
            + "\n\nDiagnose the root cause and mitigate it so the alerts clear and the application serves "
            "its users again, without deleting or disabling healthy parts of the system. When you are "
            "done, submit your report: the entities involved (mark the root cause with \"root_cause\": true) "
            "and how the fault propagated.\n\nTools:\n" + tool_lines + example_lines
        )

    def firing_alerts(self) -> list[str]:
        if self._probe is None:
            return []
        try:
            return sorted(alert_key(a) for a in self._probe.firing_alerts())
        except (requests.RequestException, ValueError, KeyError):
            return []

    def evaluate(self, submission: Submission) -> EpisodeEvaluation:
        """Topology as it is now, then ITBench's mitigation watcher (which lets time pass), then grading."""
        probe, incident = self._probe, self._incident
        if probe is None or incident is None or incident.baseline is None:
            raise RuntimeError("SRETask.evaluate() needs an incident: call setup() first")
        namespace = self.spec.namespace
        topology = build_topology(probe.objects(namespace), self._app.calls, namespace)
        verdict = watch_mitigation(probe, incident.baseline, list(self.spec.triggering_alerts), injection_alerts=list(incident.alerts))
        return evaluate_episode(
            spec=self.spec,
            report=submission.report,
            report_error=submission.report_error,
            mitigation=verdict,
            submitted_at=submission.submitted_at,
            incident_start=incident.started_at,
            commands=submission.commands,
            topology=topology,
        )

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
