"""Typed view of a validated scenario spec (see ``scenario.schema.json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itbench_gym.spec.loadshape import LoadShape

#: Upper bounds (exclusive) of Eq. 6's score for each level but the last. The paper publishes no
#: thresholds; these are the ones that agree with every level its Table 2 gives a Table 12 pattern
#: (CacheFailure 1.82 and HTTPRequestBodyTamperFault 1.82 medium, CorruptImage 1.26 and
#: MemoryResourceLimit 1.59 easy, HighCPU 2.29 and HTTPRequestAbortFault 2.71 medium).
COMPLEXITY_LEVELS: tuple[tuple[str, float], ...] = (("easy", 1.8), ("medium", 2.8), ("hard", float("inf")))


def complexity_score(technologies: int, propagation_length: int, resolution_steps: int) -> float:
    """ITBench's Eq. 6: the geometric mean of chain length, resolution steps and technologies, so
    that no one factor dominates the difficulty."""
    return float((propagation_length * resolution_steps * technologies) ** (1 / 3))


def complexity_level(score: float) -> str:
    """The level (easy, medium, hard) of an Eq. 6 score, per :data:`COMPLEXITY_LEVELS`."""
    return next(level for level, bound in COMPLEXITY_LEVELS if score < bound)


@dataclass(frozen=True)
class Complexity:
    level: str
    #: Eq. 6's factors; None for tasks the paper levels by class, not by a propagation chain (CISO).
    technologies: int | None = None
    propagation_length: int | None = None
    resolution_steps: int | None = None

    @property
    def score(self) -> float | None:
        """Eq. 6 of the ITBench paper over this scenario's factors (None without factors)."""
        if self.technologies is None or self.propagation_length is None or self.resolution_steps is None:
            return None
        return complexity_score(self.technologies, self.propagation_length, self.resolution_steps)


@dataclass(frozen=True)
class FaultRef:
    """A fault from the catalogue and the arguments the scenario gives it."""

    id: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class AlertMatcher:
    """An alert identified by name and a subset of its labels."""

    alertname: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def matches(self, alert_labels: Mapping[str, str]) -> bool:
        if alert_labels.get("alertname") != self.alertname:
            return False
        return all(alert_labels.get(k) == v for k, v in self.labels.items())

    def __str__(self) -> str:
        inner = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return f"{self.alertname}{{{inner}}}" if inner else self.alertname


@dataclass(frozen=True)
class Budget:
    max_steps: int
    max_sim_seconds: float


@dataclass(frozen=True)
class Observability:
    metrics: bool = True
    logs: bool = True
    traces: bool = True


@dataclass(frozen=True)
class LoadOptions:
    """``environment.load``: how the app's load generator runs (None / False: as the app deploys it)."""

    users: int | None = None
    #: Users the generator starts (or stops) a second.
    spawn_rate: float | None = None
    #: Also run the generator's browser users (ITBench's ``loadGeneration.browserTraffic``).
    browser_traffic: bool = False
    #: The users over time (a Locust ``LoadTestShape``); None: ``users`` throughout (``steady``).
    shape: LoadShape | None = None


@dataclass(frozen=True)
class ComplianceCase:
    """One starting state of a compliance scenario: what a seed sets up and whether it complies."""

    id: str
    compliant: bool
    weight: float
    #: Kubernetes objects applied in the scenario's namespace.
    objects: tuple[Mapping[str, Any], ...] = ()
    #: Host model changes (``itbench_gym.hosts``) for the rhel9-opa class.
    changes: tuple[Mapping[str, Any], ...] = ()
    #: The resource whose PolicyReport is graded (apiVersion, kind, namespace, name), kyverno classes.
    target: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Answer:
    """Files written into the agent's workspace, then tool actions, as an agent would: how the
    oracle solves a compliance scenario and how a plausible wrong answer fails it."""

    files: Mapping[str, str]
    actions: tuple[str, ...]


@dataclass(frozen=True)
class ComplianceSpec:
    """The CISO part of a scenario (``kind: ComplianceScenario``)."""

    #: kyverno, k8s-opa, rhel9-opa or kyverno-update (ITBench's four CISO classes).
    cls: str
    benchmark: str
    control: str
    title: str
    #: The requirement in ITBench's words; the prompt wraps it in the class's template.
    goal: str
    cases: tuple[ComplianceCase, ...]
    oracle: Answer
    wrong: Answer
    #: Objects present before the misconfiguration (kyverno-update: the policies to edit).
    existing: tuple[Mapping[str, Any], ...] = ()
    #: envs/<host>: the host model the rhel9-opa class assesses.
    host: str | None = None
    #: kyverno-update: the policy whose report on the target is graded, and those that must not change.
    policy: str | None = None
    unchanged_policies: tuple[str, ...] = ()
    itbench_scenario: str | None = None


@dataclass(frozen=True)
class ScenarioSpec:
    id: str
    name: str
    description: str
    domain: str
    #: Which ``Task`` runs the scenario (``metadata.task``; the domain when the file does not say).
    task: str
    cls: str
    complexity: Complexity
    app: str
    namespace: str
    observability: Observability
    load: LoadOptions
    baseline_seconds: float
    faults: tuple[FaultRef, ...]
    triggering_alerts: tuple[AlertMatcher, ...]
    alert_wait_timeout: float
    ground_truth: Mapping[str, Any]
    mitigations: tuple[Mapping[str, Any], ...]
    desired_outcome: Mapping[str, str]
    budget: Budget
    source: Path
    itbench_scenario: int | None = None
    #: ``environment.autoscaling.kubernetes.hpa``: the app is installed with its HorizontalPodAutoscalers.
    hpa: bool = False
    #: ``environment.tools.finops.enabled``: the cluster also runs OpenCost (``spec/finops.py``).
    finops: bool = False
    tags: tuple[str, ...] = ()
    #: ``{"itbench_scenario": n, "differences": ...}`` when adapted from, not reproducing, a library scenario.
    derived_from: Mapping[str, Any] | None = None
    #: The CISO part, for compliance scenarios (``task == "ciso"``).
    compliance: ComplianceSpec | None = None
    #: ``finops.budgets``: the namespace's budget alerts in $/h by resource (cpu, memory, storage).
    budgets: Mapping[str, float] = field(default_factory=dict)

    @property
    def grades_mitigation(self) -> bool:
        """False when ``desired_outcome.mitigation_not_graded`` says why only the diagnosis counts."""
        return "mitigation_not_graded" not in self.desired_outcome

    def summary(self) -> dict[str, Any]:
        """The fields a catalogue lists."""
        return {
            "id": self.id,
            "name": self.name,
            "domain": self.domain,
            "task": self.task,
            "class": self.cls,
            "complexity": self.complexity.level,
            "app": self.app,
            "description": self.description,
            "itbench_scenario": self.itbench_scenario,
            "derived_from": dict(self.derived_from) if self.derived_from else None,
        }

    def with_observability(self, **changes: bool) -> ScenarioSpec:
        """A variant with some modalities masked (e.g. ``traces=False`` for ``-NoTraces``)."""
        from dataclasses import replace

        return replace(self, observability=replace(self.observability, **changes))
