"""``FinOpsTask``: why did the namespace's cost rise, and a fix that brings it back without hurting the service.

Set-up is the SRE task's (faults from the catalogue, then the triggering alerts: a budget alert or
``KubeHpaMaxedOut``), on a cluster that runs OpenCost, with the scenario's budget alerts deployed before
the healthy baseline (``finops.budgets``; the agent may edit the namespace's PrometheusRules: budgets are
the FinOps engineer's to set). Grading has three parts (docs/metrics.md, FinOps):

- **Diagnosis**: the report ``{"resource": [{"name", "type"}]}`` names every root cause of the ground truth
  and nothing outside it.
- **Mitigation**: ITBench's watch from the submit — the triggering alerts clear and stay clear — against a
  *reference run*: the healthy installation (same app, budgets and load shape, no fault) advanced to the
  same clock time. The app must serve as the reference does (traffic, success, each service's rate, errors
  and p95 latency), so scaling to zero or starving the app fails with the service-level reason; monitoring
  must be as in the reference (a budget alert deleted or raised to hide a cost fails) except in scenarios
  whose fault *is* a budget — there the budget must sit between what the load legitimately costs and
  :data:`BUDGET_HEADROOM` times that — and every autoscaler of the reference must still exist (deleting
  one is scaling around the fault).
- **Proximity**: the paper's ``1 − |observed − optimal| / optimal`` for hourly CPU and memory cost and
  CPU and memory efficiency, the optimum being the reference run's value at the end of the watch.

The reference run needs a backend that can snapshot (the twin): the episode is checkpointed at the submit,
the reference computed, and the episode restored for the watch.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

from itbench_gym.backends.base import Backend, BackendError, Provisioning
from itbench_gym.backends.rbac import agent_service_account
from itbench_gym.evaluation.finops import CostMeasures, FinOpsEvaluation, grade_cost_report, measure
from itbench_gym.evaluation.groundtruth import parse_ground_truth
from itbench_gym.evaluation.mitigation import Baseline, watch_mitigation
from itbench_gym.spec import ScenarioSpec
from itbench_gym.spec.budget import budget_threshold
from itbench_gym.spec.finops import BUDGET_ALERTS, BUDGET_GROUP, BUDGET_RULE, budget_cost_query, budget_objects
from itbench_gym.tasks.sre import ClusterProbe, SRETask, measure_baseline
from itbench_gym.tasks.types import Incident, Submission
from itbench_gym.tools.alerts import alert_key
from itbench_gym.tools.base import Tool

#: The fault that makes a budget itself the root cause (the agent may then change the budget).
BUDGET_FAULT = "misconfigured-opencost-budget-alert"
#: A corrected budget may be at most this many times what the load legitimately costs at its peak: a
#: budget above it would not page for the cost doubling.
BUDGET_HEADROOM = 2.0
#: After deploying the budget alerts, one evaluation of their group before the baseline.
PROVISION_SECONDS = 60.0
#: Reference runs a task keeps (by seed and end time): re-grading an episode does not run it again.
CACHED_REFERENCES = 8


@dataclass(frozen=True)
class Reference:
    """The healthy installation at the end of the watch: what the app must match, and the optimum."""

    baseline: Baseline
    optimal: CostMeasures
    #: Highest hourly cost of each budgeted resource between the injection and the end, $/h.
    peaks: Mapping[str, float]
    #: The namespace's HorizontalPodAutoscalers: a fix keeps them (deleting one is scaling around the fault).
    autoscalers: frozenset[str] = frozenset()


def _squashed(text: str) -> str:
    return " ".join(text.split())


class FinOpsTask(SRETask):
    """Diagnose a cost rise and fix it, graded against the healthy installation under the same load."""

    def __init__(self, spec: ScenarioSpec) -> None:
        if not spec.finops:
            raise ValueError(f"scenario {spec.id}: a FinOps scenario needs OpenCost (environment.tools.finops.enabled) "
                             f"({spec.source})")
        super().__init__(spec)
        self._backend: Backend | None = None
        self._references: OrderedDict[tuple[int, float], Reference] = OrderedDict()
        #: Whether the scenario's fault is a budget, which the agent then corrects.
        self._budget_editable = any(f.id == BUDGET_FAULT for f in spec.faults)

    def setup(self, backend: Backend, seed: int) -> Incident:
        if not backend.can_checkpoint:
            raise BackendError(f"scenario {self.spec.id}: FinOps grading compares the episode with a reference run of the "
                               "healthy installation, which needs a backend that can snapshot (the twin)")
        incident = super().setup(backend, seed)
        self._backend, self._seed = backend, seed
        return incident

    def provisioning(self) -> Provisioning | None:
        """The budget alerts (and the agent's right to edit them): the same objects for every seed, so
        a backend that shares baselines deploys them once on its shared start."""
        if not self.spec.budgets:
            return None
        objects = self._budget_objects()
        key = hashlib.blake2b(json.dumps([objects, PROVISION_SECONDS], sort_keys=True).encode(), digest_size=16).hexdigest()
        return Provisioning(key=f"finops-budgets-{key}", apply=self._deploy_budgets)

    def _budget_objects(self) -> list[dict[str, Any]]:
        account = agent_service_account()
        return budget_objects(self.spec.namespace, self.spec.budgets, (account.namespace, account.name))

    def _deploy_budgets(self, backend: Backend) -> None:
        """Create the budget objects, then let their group evaluate once."""
        objects = dynamic.DynamicClient(backend.admin_client())
        for obj in self._budget_objects():
            resource = objects.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            try:
                resource.create(body=obj, namespace=obj["metadata"]["namespace"])
            except ApiException as exc:
                raise BackendError(f"scenario {self.spec.id}: cannot create {obj['kind']} {obj['metadata']['name']}: "
                                   f"{exc.status} {exc.reason}") from None
        backend.advance(PROVISION_SECONDS)

    def default_tools(self) -> list[Tool]:
        from itbench_gym.tools import default_tools
        from itbench_gym.tools.submit import CostReportSubmitTool

        return [t for t in default_tools(opencost=True) if t.name != "submit"] + [CostReportSubmitTool()]

    def prompt(self, incident: Incident, tools: Sequence[Tool]) -> str:
        tool_lines = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        alerts = sorted(alert_key(a) for a in incident.alerts)
        situation = ("Alerts firing now:\n" + "\n".join(f"- {a}" for a in alerts)) if alerts else \
            "No cost alert is firing; the namespace's cost is up for review."
        return (
            f"You are the FinOps engineer for the {self.spec.app} application in Kubernetes namespace "
            f"{self.spec.namespace!r}; OpenCost prices the cluster. {situation}\n\n"
            "Find what makes the namespace cost more than its load needs, and fix it so the cost alerts clear while "
            "the application keeps serving its users under its current load (same traffic, errors and latency). "
            "Change nothing that is not at fault. When you are done, submit the resources at fault as JSON "
            "{\"resource\": [{\"name\": \"<name>\", \"type\": \"<Kind>\"}]}.\n\nTools:\n" + tool_lines
        )

    def evaluate(self, submission: Submission) -> FinOpsEvaluation:
        """The reference run first (from the healthy start to the end of the watch), then the watch on the
        episode restored as it was at the submit, then the measures at the end of the watch."""
        probe, incident, backend = self._probe, self._incident, self._backend
        if probe is None or incident is None or backend is None:
            raise RuntimeError("FinOpsTask.evaluate() needs an incident: call setup() first")
        episode = backend.checkpoint()
        assert episode is not None  # setup() refused backends that cannot snapshot
        window = self.watch_window(incident)
        reference = self._reference(backend, probe.now() + window, window, incident.injected_at)
        backend.restore(episode)
        self.close()
        probe = self._probe = ClusterProbe(self.spec, backend, self._edge, self._app.golden_signals, self._app.flags)
        baseline = reference.baseline
        if self._budget_editable:
            baseline = replace(baseline, monitoring={k: v for k, v in baseline.monitoring.items() if not self._is_budget(k)})
        verdict = watch_mitigation(probe, baseline, list(self.spec.triggering_alerts), timeout=window,
                                   injection_alerts=list(incident.alerts))
        problems = [f"HorizontalPodAutoscaler {self.spec.namespace}/{name} deleted (the installation autoscales that workload; "
                    "a fix corrects the autoscaler, it does not remove it)"
                    for name in sorted(reference.autoscalers - self._autoscalers(backend))]
        if self._budget_editable:
            problems += self._budget_failures(backend, reference.peaks)
        if problems:
            verdict = replace(verdict, passed=False, reasons=(*verdict.reasons, *problems))
        observed = measure(probe.value, self.spec.namespace)
        ttp = submission.submitted_at - incident.started_at if submission.submitted_at is not None else None
        return FinOpsEvaluation(
            scenario_id=self.spec.id, cls=self.spec.cls,
            diagnosis=grade_cost_report(submission.report, parse_ground_truth(self.spec.ground_truth), self.spec.namespace),
            mitigation=verdict, observed=observed, optimal=reference.optimal, ttp_seconds=ttp,
            report_error=submission.report_error,
        )

    def _is_budget(self, name: str) -> bool:
        """Whether a monitoring digest's name is the budget rule or one of its alerts."""
        alerts = {BUDGET_ALERTS[r] for r in self.spec.budgets}
        return name == f"PrometheusRule {self.spec.namespace}/{BUDGET_RULE}" or any(
            name.rstrip("'") == f"alerting rule {a} of group {BUDGET_GROUP}" for a in alerts)

    def _reference(self, backend: Backend, end: float, window: float, injected_at: float) -> Reference:
        """The healthy installation for this seed advanced to ``end`` (computed once per seed and end)."""
        key = (self._seed, round(end, 3))
        cached = self._references.get(key)
        if cached is not None:
            return cached
        backend.start(self.spec, self._seed, self.provisioning())
        probe = ClusterProbe(self.spec, backend, self._edge, self._app.golden_signals, self._app.flags)
        try:
            if end > probe.now():
                probe.advance(end - probe.now())
            span = max(1.0, min(window, end - injected_at))
            peaks = {r: probe.value(f"max_over_time(({budget_cost_query(r, self.spec.namespace)})[{span:.0f}s:1m])")
                     for r in self.spec.budgets}
            reference = Reference(baseline=measure_baseline(probe, window / 2), optimal=measure(probe.value, self.spec.namespace),
                                  peaks=peaks, autoscalers=self._autoscalers(backend))
        finally:
            probe.close()
        self._references[key] = reference
        while len(self._references) > CACHED_REFERENCES:
            self._references.popitem(last=False)
        return reference

    def _autoscalers(self, backend: Backend) -> frozenset[str]:
        """Names of the namespace's HorizontalPodAutoscalers now (admin credential)."""
        from kubernetes import client

        raw = client.AutoscalingV2Api(backend.admin_client()).list_namespaced_horizontal_pod_autoscaler(
            self.spec.namespace, _preload_content=False)
        return frozenset(str(h["metadata"]["name"]) for h in json.loads(raw.data).get("items") or [])

    def _budget_failures(self, backend: Backend, peaks: Mapping[str, float]) -> list[str]:
        """A corrected budget must still watch the same cost and sit between the legitimate peak and
        :data:`BUDGET_HEADROOM` times it."""
        from kubernetes import client

        ns, where = self.spec.namespace, f"PrometheusRule {self.spec.namespace}/{BUDGET_RULE}"
        try:
            raw = client.CustomObjectsApi(backend.admin_client()).get_namespaced_custom_object(
                "monitoring.coreos.com", "v1", ns, "prometheusrules", BUDGET_RULE, _preload_content=False)
            rule: dict[str, Any] = json.loads(raw.data)
        except ApiException as exc:
            if exc.status == 404:
                return [f"{where} deleted (the namespace's budget alerts must stay)"]
            raise
        exprs = {str(r.get("alert")): str(r.get("expr", "")) for g in (rule.get("spec") or {}).get("groups") or []
                 for r in g.get("rules") or [] if r.get("alert")}
        reasons: list[str] = []
        for resource in self.spec.budgets:
            alert = BUDGET_ALERTS[resource]
            if alert not in exprs:
                reasons.append(f"budget alert {alert} removed from {where}")
                continue
            parsed = budget_threshold(exprs[alert])
            if parsed is None or _squashed(parsed[0]) != _squashed(budget_cost_query(resource, ns)):
                reasons.append(f"budget alert {alert} no longer compares the namespace's hourly {resource} cost with a budget")
                continue
            threshold, peak = parsed[1], peaks.get(resource, float("nan"))
            if threshold < peak:
                reasons.append(f"budget alert {alert}: {threshold:g} $/h is below what the load legitimately costs at its "
                               f"peak ({peak:.4g} $/h), so it pages for no fault")
            elif threshold > BUDGET_HEADROOM * peak:
                reasons.append(f"budget alert {alert}: {threshold:g} $/h is more than {BUDGET_HEADROOM:g}x what the load "
                               f"legitimately costs at its peak ({peak:.4g} $/h), so it would not page for the cost doubling")
        return reasons


__all__ = ["BUDGET_HEADROOM", "FinOpsTask", "Reference"]
