"""Reference agents: an oracle that fixes catalogue faults with real kubectl, and a random baseline."""

from collections.abc import Callable

import gymnasium as gym

from itbench_gym.agents.base import Agent, run_episode
from itbench_gym.agents.oracle import OracleAgent
from itbench_gym.agents.random_agent import RandomAgent

#: Reference agents by name; each is built from the (unwrapped) env it will play.
AGENTS: dict[str, Callable[[gym.Env], Agent]] = {"oracle": OracleAgent, "random": RandomAgent}

__all__ = ["AGENTS", "Agent", "OracleAgent", "RandomAgent", "run_episode"]
