"""Chaos Mesh in the twin: the controllers that interpret chaos-mesh.org objects, and ``active``."""

from __future__ import annotations

from ..kube.controllers.base import Context, Controller
from .experiment import ExperimentController
from .kinds import API_VERSION, EXPERIMENT_KINDS, PAUSE_IMAGE, active, is_running
from .podchaos import Killer
from .schedule import ScheduleController

__all__ = ["API_VERSION", "EXPERIMENT_KINDS", "PAUSE_IMAGE", "active", "chaos_controllers", "is_running"]


def chaos_controllers(ctx: Context, kill: Killer) -> list[Controller]:
    """chaos-controller-manager: one controller per experiment kind plus the Schedule controller."""
    return [ScheduleController(ctx), *(ExperimentController(ctx, k, kill) for k in EXPERIMENT_KINDS)]
