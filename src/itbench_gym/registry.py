"""Scenario specs -> Gymnasium registrations (``SRE-CacheFailure-v0``, ``...-NoTraces-v0`` variants)."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from functools import lru_cache
from typing import Any

import gymnasium as gym

from itbench_gym.spec import ScenarioSpec, load_all_specs

ENTRY_POINT = "itbench_gym.env:ITBenchEnv"
#: Variant suffix -> observability modality it masks.
_VARIANTS = {"NoTraces": "traces", "NoLogs": "logs"}
_VERSION = re.compile(r"-v(\d+)$")


class UnknownScenarioError(gym.error.UnregisteredEnv):
    """An id that is not a scenario; the message lists the closest ids."""


@lru_cache(maxsize=1)
def _base_specs() -> dict[str, ScenarioSpec]:
    return {spec.id: spec for spec in load_all_specs()}


@lru_cache(maxsize=1)
def _specs() -> dict[str, ScenarioSpec]:
    """Every registered id: the specs plus their masked-modality variants."""
    specs = dict(_base_specs())
    for spec in _base_specs().values():
        if spec.domain == "sre":
            for suffix, modality in _VARIANTS.items():
                variant_id = _VERSION.sub(f"-{suffix}-v\\1", spec.id)
                specs[variant_id] = replace(spec.with_observability(**{modality: False}), id=variant_id)
    return specs


def scenario_ids() -> list[str]:
    return sorted(_specs())


def get_spec(scenario_id: str) -> ScenarioSpec:
    specs = _specs()
    if scenario_id in specs:
        return specs[scenario_id]
    close = difflib.get_close_matches(scenario_id, specs, n=5, cutoff=0.5)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise UnknownScenarioError(f"unknown scenario id {scenario_id!r}.{hint} See itbench_gym.list_scenarios().")


def list_scenarios(domain: str | None = None, complexity: str | None = None, cls: str | None = None) -> list[dict[str, Any]]:
    """Summaries of the scenarios matching every given filter (variants excluded)."""
    out = []
    for _, spec in sorted(_base_specs().items()):
        if domain and spec.domain != domain.lower():
            continue
        if complexity and spec.complexity.level != complexity.lower():
            continue
        if cls and spec.cls != cls:
            continue
        out.append(spec.summary())
    return out


def register_all() -> None:
    """Register every scenario id with Gymnasium (idempotent)."""
    for sid in _specs():
        if sid in gym.registry:
            continue
        gym.register(
            id=sid,
            entry_point=ENTRY_POINT,
            kwargs={"scenario": sid},
            max_episode_steps=None,
            disable_env_checker=False,
        )


def make(scenario_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with a "did you mean" error for unknown ids."""
    get_spec(scenario_id)
    return gym.make(scenario_id, **kwargs)


def make_vec(scenario_id: str, num_envs: int = 1, **kwargs: Any) -> gym.vector.VectorEnv:
    get_spec(scenario_id)
    return gym.make_vec(scenario_id, num_envs=num_envs, **kwargs)
