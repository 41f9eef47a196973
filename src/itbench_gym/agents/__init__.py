"""Reference agents: an oracle that fixes catalogue faults with real kubectl, and a random baseline."""

from itbench_gym.agents.base import Agent, run_episode
from itbench_gym.agents.oracle import OracleAgent
from itbench_gym.agents.random_agent import RandomAgent

AGENTS: dict[str, type[Agent]] = {"oracle": OracleAgent, "random": RandomAgent}

__all__ = ["AGENTS", "Agent", "OracleAgent", "RandomAgent", "run_episode"]
