"""Reference agents: the privileged oracle, honest baselines (noop, random, heuristic) and the agent protocol.

``AGENTS`` maps each name to a factory that builds the agent for the (wrapped or unwrapped) env it
will play; ``load_agent("module:Class")`` resolves a user's agent the same way.
"""

from __future__ import annotations

import importlib

from itbench_gym.agents.base import (
    Action,
    Agent,
    AgentFactory,
    AnyAgent,
    AsyncAgent,
    CallableAgent,
    ScriptedAgent,
    agent_stats,
    as_agent,
    run_episode,
    run_episode_async,
)
from itbench_gym.agents.baselines import NoopAgent, RandomAgent
from itbench_gym.agents.heuristic import HeuristicAgent
from itbench_gym.agents.llm import AsyncLLMAgent, LLMAgent, LLMConfig
from itbench_gym.agents.oracle import OracleAgent

#: Reference agents by name; each is built from the env it will play.
AGENTS: dict[str, AgentFactory] = {"oracle": OracleAgent, "noop": NoopAgent, "random": RandomAgent,
                                   "heuristic": HeuristicAgent, "llm": LLMAgent, "llm-async": AsyncLLMAgent}


def load_agent(name: str) -> AgentFactory:
    """A reference agent's name, or ``module:attr`` naming a class or function that takes the env."""
    if name in AGENTS:
        return AGENTS[name]
    module, sep, attr = name.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"unknown agent {name!r}: use one of {', '.join(AGENTS)} or 'module:Class'")
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load agent {name!r}: {exc}") from None
    if not callable(found):
        raise ValueError(f"agent {name!r} is not a class or function that builds an agent from the env")
    factory: AgentFactory = found
    return factory


def is_privileged(agent: object) -> bool:
    """Whether the agent reads what an agent is not given (the ground truth): never on a leaderboard."""
    return bool(getattr(agent, "privileged", False))


__all__ = ["AGENTS", "Action", "Agent", "AgentFactory", "AnyAgent", "AsyncAgent", "AsyncLLMAgent", "CallableAgent",
           "HeuristicAgent", "LLMAgent", "LLMConfig",
           "NoopAgent", "OracleAgent", "RandomAgent", "ScriptedAgent", "agent_stats", "as_agent", "is_privileged",
           "load_agent", "run_episode", "run_episode_async"]
