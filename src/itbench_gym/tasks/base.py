"""The task seam: what a scenario does on a backend, apart from the env loop and the agent's tools.

A task sets its scenario up on a backend (an SRE incident, a CISO misconfiguration, a FinOps cost
case), writes the agent's prompt, reports the few facts the observation shows every step, grades the
episode and lets go of its admin session. The env composes one with a backend and tools; nothing a
task holds with the admin credential reaches the agent.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from pathlib import Path

from itbench_gym.backends.base import Backend
from itbench_gym.paths import envs_dir
from itbench_gym.spec import ScenarioSpec
from itbench_gym.spec.appfacts import load_app_facts
from itbench_gym.tasks.types import Evaluation, Incident, Submission
from itbench_gym.tools.base import Tool


class Task(abc.ABC):
    """One scenario's set-up and grading on any backend; subclasses per task kind (``spec.task``)."""

    def __init__(self, spec: ScenarioSpec) -> None:
        self.spec = spec

    @abc.abstractmethod
    def setup(self, backend: Backend, seed: int) -> Incident:
        """Make ``backend``'s current environment the scenario's starting state for ``seed`` and return
        what was set up. Provisions, settles, injects and waits for the triggering condition — or
        replays the incident the backend saved for this task and seed. A scenario that cannot start
        (its alerts never fire) raises ``BackendError``."""

    @abc.abstractmethod
    def prompt(self, incident: Incident, tools: Sequence[Tool]) -> str:
        """The task statement the agent reads after ``reset``."""

    def example_actions(self) -> tuple[str, ...]:
        """Commands that make sense in this scenario, in its namespace: what ``action_space.sample()``
        draws and a prompt may show. By default the app's ``examples`` (``envs/<app>/app.yaml``)."""
        return load_app_facts(envs_dir() / self.spec.app).example_actions(self.spec.namespace)

    def default_tools(self) -> list[Tool]:
        """The tools an agent gets when the env is given none: the SRE toolbox by default, with OpenCost's
        API when the scenario's cluster runs OpenCost."""
        from itbench_gym.tools import default_tools

        return default_tools(opencost=self.spec.finops)

    def prepare_workspace(self, workspace: Path) -> None:
        """Put what the task hands the agent into its fresh, empty workspace (none by default)."""
        return None

    def firing_alerts(self) -> list[str]:
        """Alerts firing now (``alertname{label=value,...}``, sorted) for the observation; a task
        whose scenario has no alerts shows none."""
        return []

    @abc.abstractmethod
    def evaluate(self, submission: Submission) -> Evaluation:
        """Grade the episode of the incident ``setup`` returned last, as the backend is now."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release what ``setup`` opened (admin API clients); the backend stays up."""
