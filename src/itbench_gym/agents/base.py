"""The agent loop every reference agent (and most user agents) follows."""

from __future__ import annotations

from typing import Any, Protocol

import gymnasium as gym


class Agent(Protocol):
    def reset(self, observation: dict[str, Any], info: dict[str, Any]) -> None: ...

    def act(self, observation: dict[str, Any]) -> Any: ...


def run_episode(env: gym.Env, agent: Agent, *, seed: int | None = None) -> dict[str, Any]:
    """Play one episode; returns the final ``info`` (with ``evaluation``)."""
    obs, info = env.reset(seed=seed)
    agent.reset(obs, info)
    while True:
        obs, _reward, terminated, truncated, info = env.step(agent.act(obs))
        if terminated or truncated:
            return info
