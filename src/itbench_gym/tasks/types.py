"""The values a task hands the env and takes back: the incident it set up and the agent's submission.

Plain frozen dataclasses (as Jumanji's ``types.py``), so an incident can be stored with the
backend's checkpoint and replayed unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itbench_gym.evaluation.mitigation import Baseline
from itbench_gym.evaluation.reward import Evaluation
from itbench_gym.faults.context import Change


@dataclass(frozen=True)
class Incident:
    """What setting a scenario up established; everything grading needs besides the live backend."""

    #: Clock value when the scenario's faults (misconfigurations, cost changes) were applied.
    injected_at: float
    #: Clock value at which the episode starts (SRE: the triggering alerts fired).
    started_at: float
    #: What the injection did, for whoever debugs a scenario (never shown to the agent).
    injection_log: tuple[str, ...] = ()
    #: Label sets of the alerts firing at ``started_at`` (none for tasks without alerts).
    alerts: tuple[Mapping[str, str], ...] = ()
    #: The healthy system before injection, which the mitigation check compares against.
    baseline: Baseline | None = None
    #: Longest start-to-start time of a container that restarted between injection and ``started_at``
    #: (0 when none did): with the alert delay, what the mitigation watch window must cover.
    restart_interval: float = 0.0
    #: What the injection changed, as the fault journal recorded it (removal replays it backwards).
    journal: tuple[Change, ...] = ()


@dataclass(frozen=True)
class Submission:
    """How the agent ended the episode: its report, or why there is none."""

    #: The submitted report as the submit tool parsed it; None when none could be read or none came.
    report: Any
    report_error: str | None
    #: Clock value of the submit; None when the budget ran out first.
    submitted_at: float | None
    #: The episode's actions in order (graded for destructive commands).
    commands: tuple[str, ...]
    #: The agent's workspace as the episode left it (CISO grading reads the policies and scripts there).
    workspace: Path | None = None


__all__ = ["Evaluation", "Incident", "Submission"]
