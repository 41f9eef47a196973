"""FinOps measures of a namespace and the paper's proximity to optimal.

The four measures are read from Prometheus as an agent would read them, through ITBench's own recording
rules where it defines one (``alert-rules/opencost.yaml.j2``):

- hourly CPU cost: ``container_namespace_node:container_cpu_allocation_cost_per_node:avg5m`` summed over
  the namespace (OpenCost's allocation, max(request, usage), times the node's price per vCPU-hour);
- hourly memory cost: ``container_namespace_node:container_memory_allocation_gigabytes_cost_per_node:avg5m``
  summed likewise (GiB allocated times the price per GiB-hour);
- CPU efficiency: the namespace's CPU usage over its CPU requests, over the containers that request CPU
  (cAdvisor's usage rate over kube-state-metrics' requests, the ratio ITBench's ``workload.efficiency``
  rules take per container);
- memory efficiency: working set over memory requests, likewise.

Proximity is the paper's ``1 − |observed − optimal| / optimal``, floored at 0 (a cost three times the
optimum is as far as one ten times it: both are no closer) and 1 when both are 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar

from itbench_gym.evaluation.entities import parse_entity_ref
from itbench_gym.evaluation.groundtruth import GroundTruth
from itbench_gym.evaluation.mitigation import MitigationVerdict

#: One PromQL instant query's value (the sum of its samples; NaN when it returns none).
Query = Callable[[str], float]

CPU_COST = "container_namespace_node:container_cpu_allocation_cost_per_node:avg5m"
RAM_COST = "container_namespace_node:container_memory_allocation_gigabytes_cost_per_node:avg5m"


def _queries(namespace: str) -> dict[str, str]:
    ns = f'namespace="{namespace}"'
    return {
        "cpu_cost_hourly": f"sum({CPU_COST}{{{ns}}})",
        "ram_cost_hourly": f"sum({RAM_COST}{{{ns}}})",
        "cpu_efficiency": _efficiency(f'rate(container_cpu_usage_seconds_total{{{ns}, container!=""}}[5m])',
                                      f'kube_pod_container_resource_requests{{{ns}, resource="cpu", job="kube-state-metrics"}}'),
        "ram_efficiency": _efficiency(f'container_memory_working_set_bytes{{{ns}, container!=""}}',
                                      f'kube_pod_container_resource_requests{{{ns}, resource="memory", job="kube-state-metrics"}}'),
    }


def _efficiency(usage: str, requests: str) -> str:
    """Usage over requests, counting only the containers that request the resource (as ITBench's per-container
    ratios do: a container without a request has no ratio, and its usage would inflate the namespace's)."""
    return f"sum({usage} and on (namespace, pod, container) {requests}) / sum({requests})"


@dataclass(frozen=True)
class CostMeasures:
    """A namespace's hourly CPU and memory cost ($/h) and its CPU and memory efficiency (usage / requests)."""

    cpu_cost_hourly: float
    ram_cost_hourly: float
    cpu_efficiency: float
    ram_efficiency: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def measure(query: Query, namespace: str) -> CostMeasures:
    """The four measures of ``namespace`` now, from the PromQL ``query`` function."""
    return CostMeasures(**{name: query(expr) for name, expr in _queries(namespace).items()})


def proximity(observed: float, optimal: float) -> float:
    """``1 − |observed − optimal| / optimal`` in [0, 1]; NaN when either is unknown."""
    if not (math.isfinite(observed) and math.isfinite(optimal)):
        return math.nan
    if optimal == 0:
        return 1.0 if observed == 0 else 0.0
    return max(0.0, 1.0 - abs(observed - optimal) / abs(optimal))


def proximities(observed: CostMeasures, optimal: CostMeasures) -> Mapping[str, float]:
    """Each measure's proximity to its optimum, by measure name."""
    mine, best = observed.to_dict(), optimal.to_dict()
    return {name: proximity(mine[name], best[name]) for name in mine}


@dataclass(frozen=True)
class CostDiagnosis:
    """The FinOps report (``{"resource": [{"name", "type"}]}``) against the ground truth."""

    passed: bool
    #: Root-cause entities (ground-truth classes) the report named, and those it missed.
    found: tuple[str, ...]
    missed: tuple[str, ...]
    #: Reported resources that are no entity of the ground truth.
    extra: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "found": list(self.found), "missed": list(self.missed), "extra": list(self.extra)}


def grade_cost_report(report: Any, ground_truth: GroundTruth, namespace: str) -> CostDiagnosis:
    """Passed when the report names every root cause (a class of aliased groups counts once, by any
    member) and nothing outside the ground truth. Each resource is ``{"name", "type"}``; the type is
    a Kubernetes kind in any spelling kubectl takes, the name may carry its namespace (``ns/name``)."""
    resources = report.get("resource") if isinstance(report, Mapping) else None
    found: set[str] = set()
    extra: list[str] = []
    for item in resources if isinstance(resources, list) else []:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            continue
        ref = parse_entity_ref(str(item["name"]), kind=str(item.get("type") or "") or None)
        ref = replace(ref, namespace=ref.namespace or namespace)
        classes = ground_truth.match(ref)
        if classes:
            found |= classes
        else:
            extra.append(str(ref))
    wanted = ground_truth.root_cause_classes
    hit = tuple(c for c in wanted if c in found)
    missed = tuple(c for c in wanted if c not in found)
    return CostDiagnosis(passed=bool(wanted) and not missed and not extra, found=hit, missed=missed, extra=tuple(extra))


@dataclass(frozen=True)
class FinOpsEvaluation:
    """One FinOps episode's grade: the diagnosis, the mitigation verdict (cost alerts cleared, the service
    still meeting its objectives under its load, no budget hidden), and the four proximities to optimal."""

    scenario_id: str
    cls: str
    diagnosis: CostDiagnosis
    mitigation: MitigationVerdict
    observed: CostMeasures
    optimal: CostMeasures
    #: Simulated seconds from the hand-over to the submit (None without a submit).
    ttp_seconds: float | None = None
    report_error: str | None = None

    #: What the ``"score"`` reward weighs: the fix most, the diagnosis, then how near optimal the cost ends.
    score_weights: ClassVar[Mapping[str, float]] = {"diagnosis": 0.3, "mitigation": 0.5, "proximity": 0.2}

    @property
    def passed(self) -> bool:
        return self.diagnosis.passed and self.mitigation.passed

    @property
    def proximity(self) -> Mapping[str, float]:
        return proximities(self.observed, self.optimal)

    def parts(self) -> Mapping[str, float | None]:
        values = [v for v in self.proximity.values() if math.isfinite(v)]
        return {"diagnosis": float(self.diagnosis.passed), "mitigation": float(self.mitigation.passed),
                "proximity": sum(values) / len(values) if values else None}

    def to_dict(self) -> dict[str, Any]:
        def finite(value: float) -> float | None:
            return value if math.isfinite(value) else None

        # resolved only when the mitigation passed: alerts that cleared and came back, or cleared because a
        # budget was raised out of reach, resolved nothing (null: the leaderboard counts it as ∞)
        mttr = (self.mitigation.cleared_at - self.mitigation.started_at + (self.ttp_seconds or 0.0)
                if self.mitigation.passed and self.mitigation.cleared_at is not None else None)
        return {
            "scenario_id": self.scenario_id,
            "domain": "finops",
            "class": self.cls,
            "passed": self.passed,
            "success": self.passed,
            "diagnosis": self.diagnosis.to_dict(),
            "mitigation": self.mitigation.to_dict(),
            "proximity": {k: finite(v) for k, v in self.proximity.items()},
            "observed": {k: finite(v) for k, v in self.observed.to_dict().items()},
            "optimal": {k: finite(v) for k, v in self.optimal.to_dict().items()},
            "ttp_seconds": self.ttp_seconds,
            "times": {"ttp": self.ttp_seconds, "mttr": mttr},
            "report_error": self.report_error,
        }
