"""Samples read-only commands, then submits an empty report: the floor any agent should beat."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class RandomAgent:
    def __init__(self, env: gym.Env, *, steps: int = 5) -> None:
        self._space = env.action_space
        self._steps = steps
        self._taken = 0

    def reset(self, observation: dict[str, Any], info: dict[str, Any]) -> None:
        self._space.seed(int(info.get("seed", 0)))
        self._taken = 0

    def act(self, observation: dict[str, Any]) -> Any:
        self._taken += 1
        if self._taken > self._steps:
            return {"tool": "submit", "args": {"entities": [], "propagations": []}}
        return self._space.sample()
