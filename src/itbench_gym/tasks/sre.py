"""``SRETask``: an ITBench SRE incident — inject faults, wait for alerts, grade diagnosis and mitigation.

Everything here reaches the environment through the protocols the agent's tools use (the Kubernetes
API with the backend's admin credential, the Prometheus HTTP API), so it runs unchanged on the twin
and on a real cluster. The agent never sees any of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import requests
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from itbench_gym.backends.base import Backend, BackendError, Provisioning
from itbench_gym.evaluation.episode import evaluate_episode
from itbench_gym.evaluation.mitigation import (
    ITBENCH_INTERVAL,
    Baseline,
    ConfigState,
    ContainerSnapshot,
    PodSnapshot,
    PodsSnapshot,
    ServiceSignals,
    Termination,
    TrafficSample,
    WorkloadState,
    recently_restarting,
    restart_interval,
    symptom_window,
    watch_mitigation,
)
from itbench_gym.faults import fault_context, inject_faults
from itbench_gym.lang.flagd import FlagFileError, load_flag_file
from itbench_gym.lang.timestamps import parse_rfc3339
from itbench_gym.paths import envs_dir
from itbench_gym.spec import ScenarioSpec
from itbench_gym.spec.appfacts import EdgeFact, FlagsFact, GoldenSignalsFact, load_app_facts
from itbench_gym.spec.model import AlertMatcher
from itbench_gym.tasks.base import Task
from itbench_gym.tasks.types import Evaluation, Incident, Submission
from itbench_gym.tools.alerts import RulePoll, alert_key, fetch_alerts, poll_rules
from itbench_gym.tools.base import Tool
from itbench_gym.tools.topology import list_topology_objects
from itbench_gym.topology import build_topology

#: How often the task looks at the alerts while waiting for the incident to start.
ALERT_POLL_SECONDS = 15.0
#: Healthy baselines a task keeps, one per reproducible start state it met (``Backend.baseline_key``).
CACHED_BASELINES = 4
#: The user-facing traffic probe reads the last four minutes: rates over two (as the span-metric alert
#: rules use), averaged across the two before (``smoothed_rate``).
TRAFFIC_RANGE_SECONDS = 240.0
#: Span metrics arrive in steps (the collector's connector flushes once a minute), so one rate() reads a
#: whole number of flushes and swings with its window's phase against them: 2/3 to 4/3 of the traffic
#: for two minutes with 30 s scrapes, 0.54 to 1.36 of a healthy service's rate over three minutes
#: (measured on the twin). The probe's rates average, every this many seconds, the rates over half the
#: range across its other half: the same data read at every phase.
SMOOTHING_STEP_SECONDS = 15
#: Each rate and the span they are averaged across are at least a minute: two scrapes (30 s apart) in a
#: rate, every phase of a flush in the average. (Ranges under two minutes so read a little further back.)
MIN_SMOOTHING_SECONDS = 60
#: The baseline's golden signals and "was it restarting" look back over its last five minutes.
BASELINE_LOOKBACK_SECONDS = 300.0
#: The prometheus-operator resources that decide what Prometheus scrapes and which rules it evaluates
#: (group monitoring.coreos.com): kind, version, plural.
MONITORING_RESOURCES = (
    ("PrometheusRule", "v1", "prometheusrules"),
    ("ServiceMonitor", "v1", "servicemonitors"),
    ("PodMonitor", "v1", "podmonitors"),
    ("Probe", "v1", "probes"),
    ("Prometheus", "v1", "prometheuses"),
    ("ScrapeConfig", "v1alpha1", "scrapeconfigs"),
)
MONITORING_GROUP = "monitoring.coreos.com"

Obj = dict[str, Any]


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _time(text: Any) -> float:
    return parse_rfc3339(str(text)) if text else 0.0


def _termination(state: Mapping[str, Any] | None) -> Termination | None:
    t = (state or {}).get("terminated")
    if not t:
        return None
    return Termination(reason=str(t.get("reason") or ""), exit_code=int(t.get("exitCode") or 0),
                       started_at=_time(t.get("startedAt")), finished_at=_time(t.get("finishedAt")))


def _controller(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind", "")), str(ref.get("name", ""))
    return None


def rollout_status(kind: str, obj: Mapping[str, Any]) -> str:
    """Why a workload's rollout is not complete, as ``kubectl rollout status`` says it ("" when complete)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = meta.get("name", "")
    if int(meta.get("generation") or 0) > int(status.get("observedGeneration") or 0):
        return f"Waiting for {kind.lower()} spec update to be observed..."
    if kind == "Deployment":
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
                return f'deployment "{name}" exceeded its progress deadline'
        replicas = int(spec.get("replicas", 1))
        updated = int(status.get("updatedReplicas") or 0)
        total, available = int(status.get("replicas") or 0), int(status.get("availableReplicas") or 0)
        prefix = f'Waiting for deployment "{name}" rollout to finish: '
        if updated < replicas:
            return prefix + f"{updated} out of {replicas} new replicas have been updated..."
        if total > updated:
            return prefix + f"{total - updated} old replicas are pending termination..."
        if available < updated:
            return prefix + f"{available} of {updated} updated replicas are available..."
    elif kind == "StatefulSet":
        replicas, ready = int(spec.get("replicas", 1)), int(status.get("readyReplicas") or 0)
        if ready < replicas:
            return f"Waiting for {replicas - ready} pods to be ready..."
        if status.get("updateRevision") and status.get("updateRevision") != status.get("currentRevision"):
            return (f"waiting for statefulset rolling update to complete {int(status.get('updatedReplicas') or 0)} "
                    f"pods at revision {status['updateRevision']}...")
    elif kind == "DaemonSet":
        desired = int(status.get("desiredNumberScheduled") or 0)
        updated, available = int(status.get("updatedNumberScheduled") or 0), int(status.get("numberAvailable") or 0)
        prefix = f'Waiting for daemon set "{name}" rollout to finish: '
        if updated < desired:
            return prefix + f"{updated} out of {desired} new pods have been updated..."
        if available < desired:
            return prefix + f"{available} of {desired} updated pods are available..."
    return ""


def template_refs(template: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of the ConfigMaps and Secrets a pod template needs (non-optional references)."""
    spec = template.get("spec") or {}
    out: set[tuple[str, str]] = set()

    def add(kind: str, ref: Mapping[str, Any] | None, name_field: str = "name") -> None:
        if ref and not ref.get("optional") and ref.get(name_field):
            out.add((kind, str(ref[name_field])))

    for volume in spec.get("volumes") or []:
        add("ConfigMap", volume.get("configMap"))
        add("Secret", volume.get("secret"), "secretName")
        for source in (volume.get("projected") or {}).get("sources") or []:
            add("ConfigMap", source.get("configMap"))
            add("Secret", source.get("secret"))
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in c.get("envFrom") or []:
            add("ConfigMap", source.get("configMapRef"))
            add("Secret", source.get("secretRef"))
        for env in c.get("env") or []:
            value_from = env.get("valueFrom") or {}
            add("ConfigMap", value_from.get("configMapKeyRef"))
            add("Secret", value_from.get("secretKeyRef"))
    return out


def parse_problem(key: str, text: str) -> str:
    """Why a structured ConfigMap/Secret value no longer parses ("" when it does or is not structured).

    The format is the one its key's extension names (``.json``; ``.yaml``/``.yml``), as the
    consumers of such files (flagd's file sync, for one) decide it.
    """
    suffix = key.rsplit(".", 1)[-1].lower() if "." in key else ""
    if suffix == "json":
        try:
            json.loads(text)
        except ValueError as exc:
            return f"not valid JSON: {exc}"
    elif suffix in ("yaml", "yml"):
        try:
            list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            return f"not valid YAML: {str(exc).splitlines()[0]}"
    return ""


class ClusterProbe:
    """``MitigationProbe`` over the Kubernetes API (admin credential) and the Prometheus HTTP API.

    User-facing traffic is what the app's ``edge`` (``envs/<app>/app.yaml``) serves: the rate of its
    requests and the share that did not fail, from the series that file names; each service's
    golden signals come from the app's ``golden_signals`` series. Lists are read as plain JSON.
    """

    def __init__(self, spec: ScenarioSpec, backend: Backend, edge: EdgeFact, signals: GoldenSignalsFact | None = None,
                 flags: FlagsFact | None = None) -> None:
        self._spec = spec
        self._backend = backend
        self._edge = edge
        self._signals = signals
        self._flags = flags
        self._prometheus = backend.endpoints.prometheus
        self._api = backend.admin_client()
        self._http = backend.harness_http()
        #: ReplicaSet name -> the Deployment that owns it ("" for none); learnt from ReplicaSet lists.
        self._rs_parent: dict[str, str] = {}
        #: The alerts API's answer at one clock time (a poll asks for firing and for active alerts).
        self._alerts_at: tuple[float, list[dict[str, Any]]] | None = None

    @property
    def service_label(self) -> str:
        """The label that names a service in the app's golden signals ("" without any)."""
        return self._signals.service_label if self._signals is not None else ""

    def close(self) -> None:
        self._http.close()

    def now(self) -> float:
        return self._backend.clock.now()

    def advance(self, seconds: float) -> None:
        self._backend.advance(seconds)

    def firing_alerts(self) -> list[dict[str, str]]:
        return self._alerts(("firing",))

    def active_alerts(self) -> list[dict[str, str]]:
        return self._alerts(("pending", "firing"))

    def _alerts(self, states: tuple[str, ...]) -> list[dict[str, str]]:
        """Prometheus' own alert states (``/api/v1/alerts``): an Alertmanager silence never hides them."""
        if self._prometheus is None:
            return []
        now = self.now()
        if self._alerts_at is None or self._alerts_at[0] != now:
            self._alerts_at = (now, fetch_alerts(self._prometheus, http=self._http))
        return [dict(a["labels"]) for a in self._alerts_at[1] if a["state"] in states]

    def poll_alerts_of(self, rule_names: Sequence[str]) -> RulePoll:
        """The named rules' alerts only, and when their groups evaluate next (a poll for the
        incident's own alerts)."""
        if self._prometheus is None:
            return RulePoll([], None)
        return poll_rules(self._prometheus, rule_names, http=self._http)

    @staticmethod
    def _json(response: Any) -> Obj:
        data: Obj = json.loads(response.data)
        return data

    def _list(self, lister: Any, *args: Any) -> list[Obj]:
        """A list call's items as the API server sent them (client models cost more than the call)."""
        return list(self._json(lister(*args, _preload_content=False)).get("items") or [])

    def workloads(self) -> dict[str, WorkloadState]:
        apps = client.AppsV1Api(self._api)
        out: dict[str, WorkloadState] = {}
        listers = (
            ("Deployment", apps.list_deployment_for_all_namespaces, "replicas", "availableReplicas"),
            ("StatefulSet", apps.list_stateful_set_for_all_namespaces, "replicas", "availableReplicas"),
            ("DaemonSet", apps.list_daemon_set_for_all_namespaces, "desiredNumberScheduled", "numberAvailable"),
        )
        for kind, lister, desired, available in listers:
            for item in self._list(lister):
                meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
                wanted = spec.get(desired, status.get(desired, 0)) if kind != "DaemonSet" else status.get(desired, 0)
                out[f"{meta['namespace']}/{kind}/{meta['name']}"] = WorkloadState(
                    desired=int(wanted or 0), available=int(status.get(available) or 0), rollout=rollout_status(kind, item)
                )
        return out

    def namespaces(self) -> set[str]:
        items = self._list(client.CoreV1Api(self._api).list_namespace)
        return {ns["metadata"]["name"] for ns in items if not ns["metadata"].get("deletionTimestamp")}

    def controllers(self) -> dict[str, int]:
        """Desired replicas of the app namespace's ReplicaSets, StatefulSets and DaemonSets (``kind/name``)."""
        ns = self._spec.namespace
        apps = client.AppsV1Api(self._api)
        owners: dict[str, int] = {}
        for rs in self._list(apps.list_namespaced_replica_set, ns):
            parent = _controller(rs["metadata"])
            self._rs_parent[rs["metadata"]["name"]] = parent[1] if parent is not None and parent[0] == "Deployment" else ""
            owners[f"replicaset/{rs['metadata']['name']}"] = int((rs.get("spec") or {}).get("replicas", 1))
        for ss in self._list(apps.list_namespaced_stateful_set, ns):
            owners[f"statefulset/{ss['metadata']['name']}"] = int((ss.get("spec") or {}).get("replicas", 1))
        for ds in self._list(apps.list_namespaced_daemon_set, ns):
            owners[f"daemonset/{ds['metadata']['name']}"] = int((ds.get("status") or {}).get("desiredNumberScheduled") or 0)
        return owners

    def pods(self) -> PodsSnapshot:
        """The app namespace's pods, each with the workload it belongs to and the controller that owns it."""
        pods: list[PodSnapshot] = []
        items = self._list(client.CoreV1Api(self._api).list_namespaced_pod, self._spec.namespace)
        owners = [c for c in (_controller(p["metadata"]) for p in items) if c is not None]
        if any(kind == "ReplicaSet" and name not in self._rs_parent for kind, name in owners):
            self.controllers()  # a ReplicaSet not seen yet: learn which Deployment it belongs to
        for pod in items:
            meta, status = pod["metadata"], pod.get("status") or {}
            controller = _controller(meta)
            owner = workload = ""
            if controller is not None:
                kind, name = controller[0].lower(), controller[1]
                owner = f"{kind}/{name}" if kind in ("replicaset", "statefulset", "daemonset") else ""
                parent = self._rs_parent.get(name, "") if kind == "replicaset" else ""
                workload = f"deployment/{parent}" if parent else f"{kind}/{name}"
            containers = tuple(
                ContainerSnapshot(
                    name=str(cs.get("name", "")), restarts=int(cs.get("restartCount") or 0),
                    last=_termination(cs.get("lastState")), terminated=_termination(cs.get("state")),
                    running_since=_time(((cs.get("state") or {}).get("running") or {}).get("startedAt")) or None,
                    waiting=str(((cs.get("state") or {}).get("waiting") or {}).get("reason") or ""),
                )
                for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
            )
            pods.append(PodSnapshot(
                uid=str(meta.get("uid", "")), name=str(meta.get("name", "")), workload=workload, owner=owner,
                phase=str(status.get("phase") or ""), reason=str(status.get("reason") or ""),
                terminating=bool(meta.get("deletionTimestamp")), containers=containers,
                ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
            ))
        return PodsSnapshot(pods=tuple(pods))

    def traffic(self) -> TrafficSample:
        ns = self._spec.namespace
        rate = self._scalar(smoothed_rate("sum", self._edge.selector(ns), TRAFFIC_RANGE_SECONDS))
        errors = self._scalar(smoothed_rate("sum", self._edge.selector(ns, errors=True), TRAFFIC_RANGE_SECONDS))
        success = 1.0 - errors / rate if rate > 0 else 0.0
        return TrafficSample(rate=rate, success_ratio=success, seconds=TRAFFIC_RANGE_SECONDS)

    def service_signals(self, range_seconds: float) -> dict[str, ServiceSignals]:
        """Per service over the last ``range_seconds``: request rate, failed share (both ``smoothed_rate``),
        p95 latency in ms (a ratio of buckets flushed together: no phase to average)."""
        g = self._signals
        if g is None or self._prometheus is None:
            return {}
        ns, label, window = self._spec.namespace, g.service_label, f"{max(1, int(round(range_seconds)))}s"
        rates = self._vector(smoothed_rate(f"sum by ({label})", g.selector(g.calls, ns), range_seconds), label)
        errors = self._vector(smoothed_rate(f"sum by ({label})", g.selector(g.calls, ns, errors=True), range_seconds), label)
        p95 = self._vector(f"histogram_quantile(0.95, sum by ({label}, le) (rate({g.selector(g.duration_bucket, ns)}[{window}])))", label)
        scale = g.duration_unit_seconds * 1000.0
        return {
            name: ServiceSignals(rate=rate, error_ratio=errors.get(name, 0.0) / rate if rate > 0 else math.nan,
                                 p95_ms=p95.get(name, math.nan) * scale)
            for name, rate in rates.items()
        }

    def configs(self) -> dict[str, ConfigState]:
        """The app namespace's ConfigMaps and Secrets: which workloads need them, which keys still parse."""
        ns = self._spec.namespace
        apps, core = client.AppsV1Api(self._api), client.CoreV1Api(self._api)
        users: dict[tuple[str, str], set[str]] = {}
        workload_listers: tuple[tuple[str, Any], ...] = (
            ("deployment", apps.list_namespaced_deployment), ("statefulset", apps.list_namespaced_stateful_set),
            ("daemonset", apps.list_namespaced_daemon_set))
        for workload, lister in workload_listers:
            for item in self._list(lister, ns):
                for ref in template_refs((item.get("spec") or {}).get("template") or {}):
                    users.setdefault(ref, set()).add(f"{workload}/{item['metadata']['name']}")
        out: dict[str, ConfigState] = {}
        config_listers: tuple[tuple[str, Any], ...] = (
            ("ConfigMap", core.list_namespaced_config_map), ("Secret", core.list_namespaced_secret))
        for kind, lister in config_listers:
            for item in self._list(lister, ns):
                name = item["metadata"]["name"]
                texts = {str(k): str(v) if kind == "ConfigMap" else _decoded(v) for k, v in (item.get("data") or {}).items()}
                keys = {k: parse_problem(k, text) for k, text in texts.items()}
                flags = self._flags  # the app's flagd flag file must also be one flagd accepts
                if kind == "ConfigMap" and flags is not None and name == flags.config_map and keys.get(flags.key) == "":
                    try:
                        load_flag_file(texts[flags.key])
                    except FlagFileError as exc:
                        keys[flags.key] = f"flagd rejects it: {exc}"
                keys.update({str(k): "" for k in item.get("binaryData") or {}})
                out[f"{kind} {ns}/{name}"] = ConfigState(users=tuple(sorted(users.get((kind, name), ()))), keys=keys)
        return out

    def monitoring(self) -> dict[str, str]:
        """Digests of what decides what Prometheus scrapes and alerts on: operator objects, loaded rules, config."""
        out: dict[str, str] = {}
        custom = client.CustomObjectsApi(self._api)
        for kind, version, plural in MONITORING_RESOURCES:
            try:
                items = self._list(custom.list_cluster_custom_object, MONITORING_GROUP, version, plural)
            except ApiException as exc:
                if exc.status in (404, 403):
                    continue  # the kind is not served (or not readable): nothing of it to guard
                raise
            for item in items:
                meta = item.get("metadata") or {}
                where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))
                out[f"{kind} {where}"] = _digest({"labels": meta.get("labels") or {}, "spec": item.get("spec")})
        if self._prometheus is None:
            return out
        rules = self._http.get(self._prometheus + "/api/v1/rules", params={"type": "alert"}, timeout=30)
        if rules.ok:
            for group in rules.json()["data"].get("groups") or []:
                for rule in group.get("rules") or []:
                    name = f"alerting rule {rule.get('name')} of group {group.get('name')}"
                    while name in out:
                        name += "'"
                    out[name] = _digest({k: rule.get(k) for k in ("query", "duration", "keepFiringFor", "labels")})
        status = self._http.get(self._prometheus + "/api/v1/status/config", timeout=30)
        if status.ok:
            out["Prometheus configuration (/api/v1/status/config)"] = _digest(status.json()["data"].get("yaml"))
        return out

    def objects(self, namespace: str) -> list[dict[str, Any]]:
        return list_topology_objects(self._api, namespace)

    def _query(self, query: str, at: float | None = None) -> list[Obj]:
        if self._prometheus is None:
            return []
        resp = self._http.post(self._prometheus + "/api/v1/query", data={"query": query, "time": self.now() if at is None else at},
                               timeout=30)
        return list(resp.json()["data"]["result"])

    def vector_at(self, query: str, label: str, at: float) -> dict[str, float]:
        """An instant query's samples at clock time ``at``, by the value of ``label``."""
        return {key[0]: value for key, value in self.vector_by(query, (label,), at).items()}

    def vector_by(self, query: str, labels: Sequence[str], at: float) -> dict[tuple[str, ...], float]:
        """An instant query's samples at clock time ``at``, by the values of ``labels``."""
        return {tuple(str(r["metric"].get(label, "")) for label in labels): float(r["value"][1]) for r in self._query(query, at)}

    def value(self, query: str, at: float | None = None) -> float:
        """An instant query's samples summed (NaN when it returns none): a namespace's cost, for one."""
        result = self._query(query, at)
        return sum(float(r["value"][1]) for r in result) if result else math.nan

    def _scalar(self, query: str) -> float:
        if self._prometheus is None:
            return math.nan
        result = self._query(query)
        return float(result[0]["value"][1]) if result else 0.0

    def _vector(self, query: str, label: str) -> dict[str, float]:
        return {str(r["metric"].get(label, "")): float(r["value"][1]) for r in self._query(query)}


def smoothed_rate(aggregation: str, selector: str, range_seconds: float) -> str:
    """PromQL for ``aggregation``'s per-second rate of ``selector`` over the last ``range_seconds``, read
    at every phase of the counters' steps: rates over half the range, averaged every
    ``SMOOTHING_STEP_SECONDS`` across the other half (each at least ``MIN_SMOOTHING_SECONDS``)."""
    window = max(MIN_SMOOTHING_SECONDS, int(round(range_seconds / 2)))
    span = max(MIN_SMOOTHING_SECONDS, int(round(range_seconds)) - window)
    return f"avg_over_time({aggregation} (rate({selector}[{window}s]))[{span}s:{SMOOTHING_STEP_SECONDS}s])"


def _decoded(value: Any) -> str:
    """A Secret value as text ("" when it is binary: nothing to parse)."""
    try:
        return base64.b64decode(str(value), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return ""


def measure_baseline(probe: ClusterProbe, lookback: float) -> Baseline:
    """The system as the mitigation check compares against it, services over the last ``lookback`` s."""
    return Baseline(
        workloads=probe.workloads(),
        namespaces=probe.namespaces(),
        traffic=probe.traffic(),
        alerts=[dict(a) for a in probe.firing_alerts()],
        services=probe.service_signals(lookback),
        services_seconds=lookback,
        configs=probe.configs(),
        monitoring=probe.monitoring(),
        restarting=recently_restarting(probe.pods(), probe.now(), lookback),
        service_label=probe.service_label,
    )


def poll_delay(poll: RulePoll, now: float, deadline: float, missing: Sequence[AlertMatcher] = ()) -> float:
    """Seconds to the next poll: the rules' next evaluation (nothing they say can change before
    it), else ``ALERT_POLL_SECONDS``; never past the deadline.

    With the ``missing`` alerts given, the poll may wait longer: until the first evaluation at which
    every one of them could be firing (``RuleState.earliest_firing``: a pending alert needs its ``for``
    first), which no earlier poll could see. The wait then ends at the same evaluation, after fewer polls.
    """
    due = poll.next_evaluation
    delay = due - now if due is not None and due > now else ALERT_POLL_SECONDS
    bounds = []
    for m in missing:
        firings = [r.earliest_firing(m.matches, now) for r in poll.rules if r.name == m.alertname]
        bounds.append(None if not firings or None in firings else min(t for t in firings if t is not None))
    if bounds and None not in bounds:
        delay = max(delay, max(t for t in bounds if t is not None) - now)
    return max(min(delay, deadline - now), 1e-3)


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
        self._seed = 0
        #: The healthy baseline measured on each reproducible start state (``Backend.baseline_key``).
        self._baselines: OrderedDict[Hashable, Baseline] = OrderedDict()

    def setup(self, backend: Backend, seed: int) -> Incident:
        self.close()
        key = ("sre", self._fingerprint, seed)
        saved = backend.restore_incident(key)
        if isinstance(saved, Incident):
            self._probe = ClusterProbe(self.spec, backend, self._edge, self._app.golden_signals, self._app.flags)
            incident = saved
        else:
            backend.start(self.spec, seed, self.provisioning())
            self._probe = ClusterProbe(self.spec, backend, self._edge, self._app.golden_signals, self._app.flags)
            self._seed = seed
            incident = self._inject_and_wait(self._probe, backend)
            backend.save_incident(key, incident)
        self._incident = incident
        return incident

    def provisioning(self) -> Provisioning | None:
        """What the scenario deploys besides the app, before its healthy baseline (nothing for SRE)."""
        return None

    def _inject_and_wait(self, probe: ClusterProbe, backend: Backend) -> Incident:
        """Capture the healthy baseline, inject the faults and wait until the triggering alerts fire."""
        spec = self.spec
        baseline = self._baseline(probe, backend.baseline_key)
        ctx = fault_context(backend, self._app, self._seed)
        try:
            log = inject_faults(spec.faults, ctx)
        finally:
            ctx.close()
        injected_at = ctx.injected_at if ctx.injected_at is not None else probe.now()
        deadline = probe.now() + spec.alert_wait_timeout
        names = sorted({m.alertname for m in spec.triggering_alerts})
        standing = {frozenset(a.items()) for a in baseline.alerts}  # firing before the fault: not the incident's
        while True:
            poll = probe.poll_alerts_of(names)
            triggering = [dict(a["labels"]) for a in poll.alerts if a["state"] == "firing" and frozenset(a["labels"].items()) not in standing]
            missing = [str(m) for m in spec.triggering_alerts if not any(m.matches(a) for a in triggering)]
            if not missing:
                now = probe.now()
                return Incident(injected_at, now, tuple(log), tuple(probe.firing_alerts()), baseline,
                                restart_interval=restart_interval(probe.pods(), injected_at, now),
                                journal=tuple(ctx.journal))
            if probe.now() >= deadline:
                raise BackendError(
                    f"scenario {spec.id}: triggering alert(s) {', '.join(missing)} did not fire within "
                    f"{spec.alert_wait_timeout:.0f} s of the fault injection ({spec.source})"
                )
            probe.advance(poll_delay(poll, probe.now(), deadline, [m for m in spec.triggering_alerts if str(m) in missing]))

    def _baseline(self, probe: ClusterProbe, key: Hashable | None) -> Baseline:
        """The healthy baseline as the probe measures it, or as it measured it on an equal start state."""
        saved = self._baselines.get(key) if key is not None else None
        if saved is not None:
            self._baselines.move_to_end(key)
            return saved
        baseline = measure_baseline(probe, BASELINE_LOOKBACK_SECONDS)
        if key is not None:
            self._baselines[key] = baseline
            while len(self._baselines) > CACHED_BASELINES:
                self._baselines.popitem(last=False)
        return baseline

    def prompt(self, incident: Incident, tools: Sequence[Tool]) -> str:
        tool_lines = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        names = {t.name for t in tools}
        examples = [a for a in self.example_actions() if a.split(maxsplit=1)[0] in names]
        example_lines = "\n\nFor example:\n" + "\n".join(f"- {a}" for a in examples) if examples else ""
        return (
            f"You are the on-call SRE for the {self.spec.app} application in Kubernetes namespace "
            f"{self.spec.namespace!r}. An incident is in progress. Alerts firing now:\n"
            + "\n".join(f"- {a}" for a in sorted(alert_key(a) for a in incident.alerts))
            + "\n\n" + self._goal() + " When you are done, submit your report: the entities involved (mark the root cause with \"root_cause\": true) "
            "and how the fault propagated.\n\nTools:\n" + tool_lines + example_lines
        )

    def _goal(self) -> str:
        if not self.spec.grades_mitigation:
            # The spec's reason stays with the harness: it would tell the agent what kind of fault this is.
            return "Diagnose the root cause. This scenario grades the diagnosis only."
        return ("Diagnose the root cause and mitigate it so the alerts clear and the application serves its users "
                "again, without deleting or disabling healthy parts of the system.")

    def firing_alerts(self) -> list[str]:
        if self._probe is None:
            return []
        try:
            return sorted(alert_key(a) for a in self._probe.firing_alerts())
        except (requests.RequestException, ValueError, KeyError):
            return []

    def watch_window(self, incident: Incident) -> float:
        """Seconds the mitigation watcher watches after submit: the scenario's own symptom period.

        The longest restart cycle the incident showed or, without restarts, how long it took from
        injection to its triggering alerts; plus one poll, never under ITBench's 300 s, never over
        the scenario's alert wait (``symptom_window``, docs/metrics.md §4).
        """
        return symptom_window(incident.started_at - incident.injected_at, incident.restart_interval,
                              interval=ITBENCH_INTERVAL, maximum=self.spec.alert_wait_timeout + ITBENCH_INTERVAL)

    def evaluate(self, submission: Submission) -> Evaluation:
        """Topology as it is now, then ITBench's mitigation watcher (which lets time pass), then grading."""
        probe, incident = self._probe, self._incident
        if probe is None or incident is None or incident.baseline is None:
            raise RuntimeError("SRETask.evaluate() needs an incident: call setup() first")
        namespace = self.spec.namespace
        topology = build_topology(probe.objects(namespace), self._app.calls, namespace)
        verdict = None
        if self.spec.grades_mitigation:
            verdict = watch_mitigation(probe, incident.baseline, list(self.spec.triggering_alerts),
                                       timeout=self.watch_window(incident), injection_alerts=list(incident.alerts))
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
