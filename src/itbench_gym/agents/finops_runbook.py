"""The heuristic agent's FinOps runbook: why a namespace costs more than its load needs, from what a FinOps
engineer can see with the agent's tools, and the standard fix of each finding.

It never reads the scenario's ground truth. Findings, in the order it looks for them:

1. Autoscalers whose settings differ from what most of the namespace's autoscalers share (a lowered
   target, a raised minimum): put back to the common settings, and their workload reset to the minimum
   (an autoscaler does not scale down while one of its metrics cannot be computed, so the replicas it
   made would otherwise stay).
2. Deployments whose pod template changed since they were created (raised requests): rolled back.
3. Deployments created during the incident whose pods no Service selects (an idle copy): deleted.
4. Claims that no pod mounts: deleted.
5. Only when none of these explains a spend alert that fires: the budget. Its threshold is raised to
   :data:`BUDGET_MARGIN` times the highest its spend reached over the last :data:`BUDGET_LOOKBACK`
   (in a PrometheusRule small enough for the tool to print whole).

Every finding is named in the report; with none, the report names the namespace (its cost is its load)
and nothing is changed.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.agents.base import Action, Observation
from itbench_gym.agents.commons import RECENT_SECONDS, created_at, jsonpath, kubectl, promql, rows, settle_down

#: A raised budget: this many times the highest spend of the lookback (room for the load to grow).
BUDGET_MARGIN = 1.5
BUDGET_LOOKBACK = "15m"
#: A budget alert's expression: a spend compared with a number.
_BUDGET = re.compile(r"^(?P<spend>.*\S)\s*>\s*(?P<threshold>[0-9.eE+-]+)\s*$", re.S)


@dataclass(frozen=True)
class Autoscaler:
    name: str
    target_kind: str
    target_name: str
    #: What its owner chose: bounds, metrics and behaviour (the fields that are set).
    settings: dict[str, Any]

    @classmethod
    def of(cls, row: list[str]) -> Autoscaler:
        name, kind, target, least, most, metrics, behavior = row
        settings: dict[str, Any] = {}
        if least.isdigit():
            settings["minReplicas"] = int(least)
        if most.isdigit():
            settings["maxReplicas"] = int(most)
        for key, text in (("metrics", metrics), ("behavior", behavior)):
            value = _json_value(text)
            if value is not None:
                settings[key] = value
        return cls(name, kind, target, settings)


@dataclass(frozen=True)
class Workload:
    name: str
    revision: int
    created: float | None
    #: Its pod template's labels.
    labels: dict[str, Any]

    @classmethod
    def of(cls, row: list[str]) -> Workload:
        name, revision, created, labels = row
        return cls(name, int(revision) if revision.isdigit() else 1, created_at(created), _json_map(labels))


@dataclass
class Finding:
    """A resource that makes the namespace cost more than its load needs, and the commands that undo it."""

    kind: str
    name: str
    why: str
    fix: list[Action] = field(default_factory=list)
    #: Alerts the fix should clear (the settle watches them).
    clears: tuple[str, ...] = ()


def submits_resources(tool_specs: Sequence[dict[str, Any]]) -> bool:
    """Whether the episode's ``submit`` takes ITBench's FinOps report (``{"resource": [...]}``)."""
    for spec in tool_specs:
        function = spec.get("function") or spec
        if function.get("name") == "submit":
            return "resource" in ((function.get("parameters") or {}).get("properties") or {})
    return False


def finops_plan(ns: str, alerts: list[dict[str, str]], settle_seconds: float) -> Generator[Action, Observation, list[Finding]]:
    """Look, fix what was found, wait for the alerts; the findings, for :func:`finops_report`."""
    spending = [a["alertname"] for a in alerts if a["alertname"].endswith("Spend")]
    autoscalers = [Autoscaler.of(row) for row in rows((yield kubectl(
        "get", "horizontalpodautoscalers", "-n", ns, "-o", jsonpath(
            ".metadata.name", ".spec.scaleTargetRef.kind", ".spec.scaleTargetRef.name", ".spec.minReplicas",
            ".spec.maxReplicas", ".spec.metrics", ".spec.behavior"))), 7)]
    deployments = [Workload.of(row) for row in rows((yield kubectl(
        "get", "deployments", "-n", ns, "-o", jsonpath(
            ".metadata.name", ".metadata.annotations.deployment\\.kubernetes\\.io/revision", ".metadata.creationTimestamp",
            ".spec.template.metadata.labels"))), 4)]
    selectors = [_json_map(selector) for _, selector in rows((yield kubectl(
        "get", "services", "-n", ns, "-o", jsonpath(".metadata.name", ".spec.selector"))), 2)]
    mounted = {claim for _, claims in rows((yield kubectl(
        "get", "pods", "-n", ns, "-o", jsonpath(".metadata.name", ".spec.volumes[*].persistentVolumeClaim.claimName"))), 2)
        for claim in claims.split()}
    claims = [name for (name,) in rows((yield kubectl("get", "persistentvolumeclaims", "-n", ns, "-o", jsonpath(".metadata.name"))), 1)]
    findings = [*odd_autoscalers(ns, autoscalers), *changed_templates(ns, deployments, autoscalers),
                *unserved_copies(ns, deployments, [s for s in selectors if s]),
                *(Finding("PersistentVolumeClaim", name, "no pod mounts it",
                          [kubectl("delete", "persistentvolumeclaim", name, "-n", ns)], ("StorageSpend",))
                  for name in claims if name not in mounted)]
    if spending and not findings:
        for (name,) in rows((yield kubectl("get", "prometheusrules", "-n", ns, "-o", jsonpath(".metadata.name"))), 1):
            rule_object = (yield kubectl("get", "prometheusrule", name, "-n", ns, "-o", "json"))
            findings += yield from low_budgets(ns, name, _json_map(str(rule_object.get("text", ""))) if rule_object.get("exit_status") == 0
                                               else {}, spending)
    for action in (a for f in findings for a in f.fix):
        _observation = yield action  # a runbook step's answer: the next step runs either way
    if any(f.fix for f in findings):
        yield from settle_down({name for f in findings for name in f.clears}, settle_seconds)
    return findings


def finops_report(ns: str, findings: Sequence[Finding]) -> dict[str, Any]:
    """ITBench's FinOps report: every finding, else the namespace (its cost is what its load costs)."""
    if not findings:
        return {"resource": [{"name": ns, "type": "Namespace"}]}
    return {"resource": [{"name": f.name, "type": f.kind} for f in findings]}


def odd_autoscalers(ns: str, autoscalers: list[Autoscaler]) -> list[Finding]:
    """Autoscalers whose settings differ from those most of the namespace's autoscalers share."""
    counted = Counter(json.dumps(a.settings, sort_keys=True) for a in autoscalers)
    if not counted:
        return []
    common, count = counted.most_common(1)[0]
    if count * 2 <= len(autoscalers):  # no majority: nothing says what the settings should be
        return []
    wanted = json.loads(common)
    out = []
    for a in autoscalers:
        if a.settings == wanted:
            continue
        fix = [kubectl("patch", "horizontalpodautoscaler", a.name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": wanted}))]
        if a.target_kind and a.target_name:
            fix.append(kubectl("scale", f"{a.target_kind.lower()}/{a.target_name}", f"--replicas={int(wanted.get('minReplicas') or 1)}", "-n", ns))
        out.append(Finding("HorizontalPodAutoscaler", a.name, "its settings differ from the namespace's other autoscalers",
                           fix, ("KubeHpaMaxedOut", "CPUSpend", "MemorySpend")))
    return out


def changed_templates(ns: str, deployments: list[Workload], autoscalers: list[Autoscaler]) -> list[Finding]:
    """Deployments whose pod template changed since they were created (a rollout revision above 1)."""
    scaled = {a.target_name for a in autoscalers}
    return [Finding("Deployment", d.name, "its pod template changed during the incident",
                    [kubectl("rollout", "undo", f"deployment/{d.name}", "-n", ns)],
                    ("CPUSpend", "MemorySpend", *(("KubeHpaMaxedOut",) if d.name in scaled else ())))
            for d in deployments if d.revision > 1]


def unserved_copies(ns: str, deployments: list[Workload], selectors: list[dict[str, Any]]) -> list[Finding]:
    """Deployments created during the incident whose pods no Service of the namespace selects."""
    born = [d.created for d in deployments if d.created is not None]
    if not born:
        return []
    return [Finding("Deployment", d.name, "created during the incident, and no Service sends it traffic",
                    [kubectl("delete", "deployment", d.name, "-n", ns)], ("CPUSpend", "MemorySpend"))
            for d in deployments
            if d.created is not None and d.created - min(born) >= RECENT_SECONDS
            and not any(all(d.labels.get(k) == v for k, v in selector.items()) for selector in selectors)]


def low_budgets(ns: str, name: str, rule_object: dict[str, Any], spending: list[str]) -> Generator[Action, Observation, list[Finding]]:
    """The budget rules of the spend alerts that fire with nothing to explain them: each threshold raised
    above the highest spend of the lookback."""
    patch = []
    for g, group in enumerate((rule_object.get("spec") or {}).get("groups") or []):
        for r, rule in enumerate(group.get("rules") or []):
            parsed = _BUDGET.match(str(rule.get("expr", "")))
            if rule.get("alert") not in spending or parsed is None:
                continue
            peak = max(_sample_values((yield promql(f"max_over_time(({parsed['spend']})[{BUDGET_LOOKBACK}:1m])"))), default=0.0)
            if peak > 0:
                patch.append({"op": "replace", "path": f"/spec/groups/{g}/rules/{r}/expr",
                              "value": f"{parsed['spend']} > {BUDGET_MARGIN * peak:.6g}"})
    if not patch:
        return []
    return [Finding("PrometheusRule", name, "its budget is below what the load legitimately costs",
                    [kubectl("patch", "prometheusrule", name, "-n", ns, "--type=json", "-p", json.dumps(patch))], tuple(spending))]


def _sample_values(observation: Observation) -> list[float]:
    """The values of the ``promql`` tool's answer (a header line, then one series a line, its value last)."""
    if observation.get("exit_status") != 0:
        return []
    out = []
    for line in str(observation.get("text", "")).splitlines()[1:]:
        try:
            out.append(float(line.split()[-1]))
        except (IndexError, ValueError):
            continue
    return out


def _json_value(text: str) -> Any:
    """A field kubectl's jsonpath printed as JSON (None when it is unset or not JSON)."""
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return None


def _json_map(text: str) -> dict[str, Any]:
    """A JSON object printed by kubectl (empty when the field is unset or not one)."""
    value = _json_value(text)
    return value if isinstance(value, dict) else {}
