"""A rule-based SRE without a language model: what a careful on-call engineer's runbook does.

It uses only the agent's tools and what the prompt says (the namespace and the firing alerts), never
the scenario's ground truth. It follows the usual path — alerts → workloads → pods, events and
recently changed objects → golden signals — collects every anomaly it can see as a :class:`Suspect`,
names the strongest one as the root cause, applies that suspect's standard remediation (roll a
changed Deployment back, scale a Deployment scaled to zero back up, switch a feature flag that is on
back off and restart what read it, delete an object created during the incident that blocks traffic
or pods, point a Service without endpoints back at its Deployment's pods, uncordon a node), waits for
the system to settle and submits a report naming the root cause and the services the alerts name.

On a FinOps task (its ``submit`` takes ITBench's ``{"resource": [...]}``) it follows the FinOps runbook
of ``finops_runbook.py`` instead.

What it cannot see or fix (a Chaos Mesh experiment it has no credential for, a slow dependency with
no Kubernetes symptom), it reports from the golden signals: the failing or slowest service the
alerts point at, restarted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from itbench_gym.agents.base import Action, Observation, ScriptedAgent
from itbench_gym.agents.commons import (
    RECENT_SECONDS,
    SETTLE_SECONDS,
    alert_labels,
    created_at,
    jsonpath,
    kubectl,
    promql,
    rows,
    settle_down,
)
from itbench_gym.agents.finops_runbook import Finding, finops_plan, finops_report, submits_resources

#: Container waiting reasons that mean the pod template cannot run as written.
BROKEN_TEMPLATE = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
                             "CreateContainerError", "RunContainerError", "CrashLoopBackOff", "StartError"})
#: Kinds whose new objects can block traffic or pods (kubectl resource, report kind).
#: One listing per API group: a cluster without Istio's CRDs refuses only the Istio one.
BLOCKING_KINDS = ((("networkpolicies.networking.k8s.io", "NetworkPolicy"), ("resourcequotas", "ResourceQuota"),
                   ("limitranges", "LimitRange")),
                  (("authorizationpolicies.security.istio.io", "AuthorizationPolicy"),
                   ("peerauthentications.security.istio.io", "PeerAuthentication")))
NAMESPACE = re.compile(r"namespace '([^']+)'")


@dataclass
class Suspect:
    """One anomaly, the entity it incriminates and the commands that would undo it."""

    score: float
    entity: str
    why: str
    remediation: list[Action] = field(default_factory=list)
    #: Services the anomaly makes fail (for the report's propagations).
    affects: tuple[str, ...] = ()


@dataclass
class PodRow:
    name: str
    owner: str
    phase: str
    waiting: tuple[str, ...]
    terminated: tuple[str, ...]
    restarts: int
    ready: bool










def owner_workload(pod: str, owner_kind: str, owner: str) -> str:
    """The Deployment (or other controller) a pod belongs to: a ReplicaSet's name less its hash."""
    if owner_kind == "ReplicaSet":
        return owner.rsplit("-", 1)[0]
    return owner or pod


def kebab(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", camel).lower()




class HeuristicAgent(ScriptedAgent):
    """Runbook diagnosis and standard remediations through the agent's tools only (see the module doc)."""

    privileged = False

    def __init__(self, env: gym.Env, *, settle_seconds: float = SETTLE_SECONDS) -> None:
        super().__init__()
        self._settle = settle_seconds
        self.suspects: list[Suspect] = []
        #: On a FinOps task, what its runbook found (``finops_runbook.py``).
        self.findings: list[Finding] = []

    def script(self) -> Generator[Action, Observation, None]:
        match = NAMESPACE.search(self.task_prompt)
        ns = match.group(1) if match else "default"
        alerts = [a for a in alert_labels(self.task_prompt) if a["alertname"] != "Watchdog"]
        if submits_resources(self.tool_specs):  # a FinOps task: what costs more than the load needs
            self.findings = yield from finops_plan(ns, alerts, self._settle)
            yield {"tool": "submit", "args": finops_report(ns, self.findings)}
            return
        alerted = self._alerted_workloads(alerts)
        suspects: list[Suspect] = []

        listed = yield kubectl("get", "deployments", "-n", ns, "-o", jsonpath(
            ".metadata.name", ".spec.replicas", ".status.availableReplicas",
            ".metadata.annotations.deployment\\.kubernetes\\.io/revision", ".metadata.creationTimestamp",
            ".spec.template.spec.volumes[*].configMap.name"))
        deployments = rows(listed, 6)
        listed = yield kubectl("get", "pods", "-n", ns, "-o", jsonpath(
            ".metadata.name", ".metadata.ownerReferences[0].kind", ".metadata.ownerReferences[0].name", ".status.phase",
            ".status.containerStatuses[*].state.waiting.reason", ".status.initContainerStatuses[*].state.waiting.reason",
            ".status.containerStatuses[*].lastState.terminated.reason", ".status.containerStatuses[*].restartCount",
            ".status.containerStatuses[*].ready"))
        pods = [PodRow(r[0], owner_workload(r[0], r[1], r[2]), r[3], tuple(f"{r[4]} {r[5]}".split()), tuple(r[6].split()),
                       sum(int(n) for n in r[7].split() if n.isdigit()), "false" not in r[8].split())
                for r in rows(listed, 9)]
        listed = yield kubectl("get", "events", "-n", ns, "--field-selector", "type=Warning", "-o", jsonpath(
            ".involvedObject.kind", ".involvedObject.name", ".reason", ".message"))
        events = rows(listed, 4)
        born = [t for t in (created_at(d[4]) for d in deployments) if t is not None]
        app_born = min(born) if born else None

        suspects += self._workload_suspects(ns, deployments, pods, events, alerted)
        restarted = {p.owner for p in pods if p.restarts}
        suspects += yield from self._flag_suspects(ns, deployments, restarted)
        suspects += yield from self._blocking_suspects(ns, app_born)
        suspects += yield from self._endpoint_suspects(ns, deployments)
        suspects += yield from self._node_suspects(pods, events)
        if not suspects:
            suspects += yield from self._signal_suspects(ns, alerted)
        self.suspects = sorted(suspects, key=lambda s: -s.score)

        if self.suspects and self.suspects[0].remediation:
            for action in self.suspects[0].remediation:
                _observation = yield action
            yield from settle_down({a["alertname"] for a in alerts}, self._settle)
        yield {"tool": "submit", "args": self._report(ns, alerted)}

    # -- what the alerts name -------------------------------------------------------------------
    @staticmethod
    def _alerted_workloads(alerts: Iterable[dict[str, str]]) -> list[str]:
        """Workloads the alerts name (their service, deployment or pod labels), in alert order."""
        names: dict[str, None] = {}
        for labels in alerts:
            for key in ("service_name", "deployment", "workload", "destination_workload", "container"):
                if labels.get(key):
                    names.setdefault(labels[key])
                    break
            else:
                if labels.get("pod"):
                    names.setdefault(labels["pod"].rsplit("-", 2)[0])
        return list(names)

    # -- Kubernetes symptoms --------------------------------------------------------------------
    def _workload_suspects(self, ns: str, deployments: list[list[str]], pods: list[PodRow], events: list[list[str]],
                           alerted: list[str]) -> list[Suspect]:
        out = []
        by_owner: dict[str, list[PodRow]] = {}
        for pod in pods:
            by_owner.setdefault(pod.owner, []).append(pod)
        unschedulable = {e[1] for e in events if e[2] == "FailedScheduling"}
        quota_refusals = {e[1] for e in events if e[2] == "FailedCreate"}
        for name, replicas, available, revision, _born, _cms in deployments:
            mine = by_owner.get(name, [])
            changed = revision.isdigit() and int(revision) > 1
            entity = f"{ns}/Deployment/{name}"
            undo = [kubectl("rollout", "undo", f"deployment/{name}", "-n", ns)]
            if replicas == "0":
                out.append(Suspect(9.0, entity, "scaled to zero replicas",
                                   [kubectl("scale", f"deployment/{name}", "--replicas=1", "-n", ns)], (name,)))
                continue
            broken = sorted({r for p in mine for r in p.waiting if r in BROKEN_TEMPLATE})
            pending = [p for p in mine if p.phase == "Pending" and (p.name in unschedulable or not p.waiting)]
            oom = [p for p in mine if "OOMKilled" in p.terminated]
            if broken:
                out.append(Suspect(8.0 + changed, entity, f"pods in {', '.join(broken)}", undo if changed else
                                   [kubectl("rollout", "restart", f"deployment/{name}", "-n", ns)], (name,)))
            elif pending and changed:
                out.append(Suspect(7.5, entity, "new pods cannot be scheduled", undo, (name,)))
            elif oom:
                out.append(Suspect(6.0 + changed, entity, "containers OOMKilled",
                                   undo if changed else [kubectl("rollout", "restart", f"deployment/{name}", "-n", ns)], (name,)))
            elif name in quota_refusals or any(e[1].startswith(f"{name}-") for e in events if e[2] == "FailedCreate"):
                out.append(Suspect(5.0, entity, "its ReplicaSet cannot create pods", undo if changed else [], (name,)))
            elif any(p.phase == "Running" and not p.ready for p in mine) or any("PodInitializing" in p.waiting for p in mine):
                out.append(Suspect(7.0 if changed else 3.0, entity, "pods do not become ready", undo if changed else [], (name,)))
            elif available.isdigit() and replicas.isdigit() and int(available) < int(replicas) and changed:
                out.append(Suspect(5.5, entity, "fewer replicas available than wanted after a change", undo, (name,)))
            elif changed:
                out.append(Suspect(4.0 + (name in alerted), entity, "its pod template changed during the incident", undo, (name,)))
        return out

    def _flag_suspects(self, ns: str, deployments: list[list[str]],
                       restarted: set[str]) -> Generator[Action, Observation, list[Suspect]]:
        """Feature flags served "on" in an OpenFeature flagd file (every flag of a healthy shop is off); the fix
        switches them off and restarts the file's readers (flagd reads it at start) and the flags' services
        whose containers restarted (what leaked stays in the process until it restarts)."""
        listed = yield kubectl("get", "configmaps", "-n", ns, "-o", jsonpath(".metadata.name"))
        out = []
        for (name,) in (r[:1] for r in rows(listed, 1)):
            if "flag" not in name:
                continue
            got = yield kubectl("get", "configmap", name, "-n", ns, "-o", "json")
            try:
                cm = json.loads(got["text"]) if got["exit_status"] == 0 else {}
            except json.JSONDecodeError:
                continue
            data = dict(cm.get("data") or {})
            fixed, on = dict(data), []
            for key, text in data.items():
                try:
                    doc = json.loads(text)
                except (json.JSONDecodeError, TypeError):
                    continue
                flags = doc.get("flags") if isinstance(doc, dict) else None
                if not isinstance(flags, dict):
                    continue
                for flag, spec in flags.items():
                    if isinstance(spec, dict) and "off" in (spec.get("variants") or {}) and spec.get("defaultVariant") != "off":
                        on.append(flag)
                        spec["defaultVariant"] = "off"
                fixed[key] = json.dumps(doc, indent=2)
            if not on:
                continue
            services = tuple(dict.fromkeys(s for flag in on for s in self._flag_services(flag, deployments)))
            readers = [d[0] for d in deployments if name in d[5].split()]
            restart = [f"deployment/{d}" for d in (*readers, *(s for s in services if s in restarted))]
            cm["data"] = fixed
            for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                cm.get("metadata", {}).pop(key, None)
            remediation: list[Action] = [kubectl("replace", "-f", "-", stdin=json.dumps(cm))]
            if restart:
                remediation.append(kubectl("rollout", "restart", *dict.fromkeys(restart), "-n", ns))
            out.append(Suspect(10.0, f"{ns}/ConfigMap/{name}", f"feature flags on: {', '.join(on)}", remediation, services))
        return out

    @staticmethod
    def _flag_services(flag: str, deployments: list[list[str]]) -> list[str]:
        """The Deployments a flag's name starts with (``recommendationCacheFailure`` → recommendation)."""
        words = kebab(flag)
        return [d[0] for d in sorted(deployments, key=lambda d: -len(d[0])) if words.startswith(d[0])][:1]

    def _blocking_suspects(self, ns: str, app_born: float | None) -> Generator[Action, Observation, list[Suspect]]:
        """Objects created during the incident that can deny traffic or pods."""
        out = []
        for kinds in BLOCKING_KINDS:
            listed = yield kubectl("get", ",".join(resource for resource, _ in kinds), "-n", ns, "-o",
                                   jsonpath(".kind", ".metadata.name", ".metadata.creationTimestamp"))
            for kind, name, created in rows(listed, 3):
                born = created_at(created)
                if app_born is not None and born is not None and born - app_born < RECENT_SECONDS:
                    continue
                resource = next((r for r, k in kinds if k == kind), kind.lower())
                out.append(Suspect(8.5, f"{ns}/{kind}/{name}", f"{kind} created during the incident",
                                   [kubectl("delete", resource, name, "-n", ns)]))
        return out

    def _endpoint_suspects(self, ns: str, deployments: list[list[str]]) -> Generator[Action, Observation, list[Suspect]]:
        """A Service without ready endpoints although its Deployment's pods are available."""
        listed = yield kubectl("get", "endpoints", "-n", ns, "-o", jsonpath(".metadata.name", ".subsets[*].addresses[*].ip"))
        available = {d[0] for d in deployments if d[2].isdigit() and int(d[2]) > 0}
        empty = [name for name, ips in rows(listed, 2) if not ips.strip() and name in available]
        out = []
        for name in empty:
            selector = yield kubectl("get", "deployment", name, "-n", ns, "-o", "jsonpath={.spec.selector.matchLabels}")
            try:
                labels = json.loads(selector["text"]) if selector["exit_status"] == 0 else None
            except json.JSONDecodeError:
                labels = None
            fix = [kubectl("patch", "service", name, "-n", ns, "--type=merge", "-p",
                           json.dumps({"spec": {"selector": labels}}))] if isinstance(labels, dict) and labels else []
            out.append(Suspect(7.0, f"{ns}/Service/{name}", "no endpoints although its pods are ready", fix, (name,)))
        return out

    def _node_suspects(self, pods: list[PodRow], events: list[list[str]]) -> Generator[Action, Observation, list[Suspect]]:
        """A cordoned node while pods wait to be scheduled."""
        if not any(p.phase == "Pending" for p in pods) and not any(e[2] == "FailedScheduling" for e in events):
            return []
        listed = yield kubectl("get", "nodes", "-o", jsonpath(".metadata.name", ".spec.unschedulable"))
        return [Suspect(6.5, f"Node/{name}", "node cordoned while pods are pending", [kubectl("uncordon", name)])
                for name, cordoned in rows(listed, 2) if cordoned == "true"]

    # -- golden signals ---------------------------------------------------------------------------
    def _signal_suspects(self, ns: str, alerted: list[str]) -> Generator[Action, Observation, list[Suspect]]:
        """No Kubernetes symptom: the service with the most failing server spans, else the alerts' first service."""
        errors = yield promql('topk(5, sum by (service_name) (rate(traces_span_metrics_calls_total'
                              '{status_code="STATUS_CODE_ERROR",span_kind="SPAN_KIND_SERVER"}[5m])) > 0)')
        failing = re.findall(r'service_name="([^"]+)"', str(errors.get("text", ""))) if errors.get("exit_status") == 0 else []
        target = next((s for s in failing if s in alerted), failing[0] if failing else (alerted[0] if alerted else None))
        if target is None:
            return []
        return [Suspect(1.0, f"{ns}/Service/{target}", "the service whose requests fail or are slow",
                        [kubectl("rollout", "restart", f"deployment/{target}", "-n", ns)], (target,))]

    # -- the report -------------------------------------------------------------------------------
    def _report(self, ns: str, alerted: list[str]) -> dict[str, Any]:
        if not self.suspects:
            return {"entities": [], "propagations": []}
        root = self.suspects[0]
        entities = [{"id": root.entity, "root_cause": True, "reasoning": root.why}]
        propagations = []
        for service in dict.fromkeys((*root.affects, *alerted)):
            entity = f"{ns}/Service/{service}"
            if entity == root.entity:
                continue
            entities.append({"id": entity, "root_cause": False})
            propagations.append({"source": root.entity, "target": entity, "condition": root.why, "effect": "alerts fire"})
        return {"entities": entities, "propagations": propagations}
