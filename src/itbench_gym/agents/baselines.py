"""Samples read-only commands, then submits an empty report: the floor any agent should beat."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from itbench_gym.agents.base import Action, Observation

EMPTY_REPORT: dict[str, Any] = {"entities": [], "propagations": []}


class RandomAgent:
    """``steps`` actions drawn from the env's action space (seeded by the episode's seed), then an empty report."""

    def __init__(self, env: gym.Env, *, steps: int = 5) -> None:
        self._env = env
        self._steps = steps
        self._taken = 0

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        episode = getattr(self._env.unwrapped, "episode", None)
        self._env.action_space.seed(int(episode.seed) if episode is not None else 0)
        self._taken = 0

    def act(self, observation: Observation) -> Action:
        self._taken += 1
        if self._taken > self._steps:
            return {"tool": "submit", "args": dict(EMPTY_REPORT)}
        action: Action = self._env.action_space.sample()
        return action


class NoopAgent:
    """Does nothing and submits an empty report at once: what the fault alone scores."""

    def __init__(self, env: gym.Env) -> None:
        self._env = env

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        return None

    def act(self, observation: Observation) -> Action:
        return {"tool": "submit", "args": dict(EMPTY_REPORT)}
