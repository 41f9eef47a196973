"""Tasks: what a scenario does on a backend (set up, prompt, grade), chosen by the spec's task kind.

``SRETask`` (``itbench_gym.tasks.sre``) runs SRE incidents, ``CISOTask`` (``itbench_gym.tasks.ciso``)
compliance assessments, ``FinOpsTask`` (``itbench_gym.tasks.finops``) cost cases.
"""

from __future__ import annotations

from itbench_gym.spec import ScenarioSpec
from itbench_gym.tasks.base import Task
from itbench_gym.tasks.types import Evaluation, Incident, Submission

#: Task kinds ``make_task`` builds (the values ``metadata.task`` may take).
TASK_KINDS = ("sre", "ciso", "finops")


def make_task(spec: ScenarioSpec) -> Task:
    """The task of the kind ``spec.task`` names (imported on demand: the SRE task pulls in the
    Kubernetes client)."""
    if spec.task == "sre":
        from itbench_gym.tasks.sre import SRETask

        return SRETask(spec)
    if spec.task == "ciso":
        from itbench_gym.tasks.ciso import CISOTask

        return CISOTask(spec)
    if spec.task == "finops":
        from itbench_gym.tasks.finops import FinOpsTask

        return FinOpsTask(spec)
    raise ValueError(f"scenario {spec.id}: no task of kind {spec.task!r}; available: {', '.join(TASK_KINDS)} ({spec.source})")


__all__ = ["TASK_KINDS", "Evaluation", "Incident", "Submission", "Task", "make_task"]
