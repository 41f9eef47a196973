"""The agent protocol: what a notebook loop, the runner and the RL adapter all call.

An agent is told the task once per episode (``reset(task_prompt, tool_specs)``: the prompt the env
returned and the tools as OpenAI function specs) and then asked for one action per observation
(``act(observation)``). An LLM agent may make ``act`` a coroutine (:class:`AsyncAgent`); a plain
callable ``f(observation) -> action`` is an agent too (:func:`as_agent`). Agents that account for
something (tokens, cost, model latency) report it through an optional ``stats()``: the runner stores it
with the episode.
"""

from __future__ import annotations

import asyncio
import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

#: What ``act`` returns: a command string or a tool call ``{"tool": ..., "args": {...}}``.
Action = str | dict[str, Any]
Observation = dict[str, Any]


@runtime_checkable
class Agent(Protocol):
    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None: ...

    def act(self, observation: Observation) -> Action: ...


@runtime_checkable
class AsyncAgent(Protocol):
    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None: ...

    async def act(self, observation: Observation) -> Action: ...


AnyAgent = Agent | AsyncAgent
#: Builds a fresh agent for an env (the runner makes one per episode); reference agents are factories.
AgentFactory = Callable[[gym.Env], AnyAgent]


class CallableAgent:
    """A plain function ``f(observation) -> action`` (or ``async def``) as an agent without memory."""

    def __init__(self, fn: Callable[[Observation], Action | Awaitable[Action]]) -> None:
        self._fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        return None

    def act(self, observation: Observation) -> Any:
        return self._fn(observation)


def as_agent(obj: Any) -> AnyAgent:
    """``obj`` if it has ``reset`` and ``act``; a callable wrapped in :class:`CallableAgent`."""
    if callable(getattr(obj, "act", None)) and callable(getattr(obj, "reset", None)):
        return obj  # type: ignore[no-any-return]
    if callable(obj):
        return CallableAgent(obj)
    raise TypeError(f"an agent needs reset(task_prompt, tool_specs) and act(observation), or is a callable; got {type(obj).__name__}")


def is_async(agent: AnyAgent) -> bool:
    return bool(getattr(agent, "is_async", False)) or inspect.iscoroutinefunction(agent.act)


def agent_stats(agent: AnyAgent) -> dict[str, Any]:
    """The agent's own accounting (``stats()``), or an empty dict when it keeps none."""
    stats = getattr(agent, "stats", None)
    return dict(stats()) if callable(stats) else {}


def _tool_specs(env: gym.Env) -> list[dict[str, Any]]:
    specs = getattr(env.unwrapped, "tool_schemas", None)
    return list(specs) if specs is not None else []


def run_episode(env: gym.Env, agent: Any, *, seed: int | None = None) -> dict[str, Any]:
    """Play one episode; returns the final ``info`` (with ``evaluation``, and ``agent``: the agent's ``stats()``). Async agents are awaited
    on a private event loop (use :func:`run_episode_async` inside a running loop)."""
    player = as_agent(agent)
    if is_async(player):
        return asyncio.run(run_episode_async(env, player, seed=seed))
    obs, _info = env.reset(seed=seed)
    player.reset(obs["text"], _tool_specs(env))
    while True:
        obs, _reward, terminated, truncated, info = env.step(player.act(obs))
        if terminated or truncated:
            return _with_stats(info, player)


async def run_episode_async(env: gym.Env, agent: Any, *, seed: int | None = None) -> dict[str, Any]:
    """Play one episode from an event loop: the env's reset and steps run in a worker thread, so
    many episodes share one loop while their agents wait on a model."""
    player = as_agent(agent)
    obs, _info = await asyncio.to_thread(env.reset, seed=seed)
    player.reset(obs["text"], _tool_specs(env))
    while True:
        action = player.act(obs)
        if inspect.isawaitable(action):
            action = await action
        obs, _reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
        if terminated or truncated:
            return _with_stats(info, player)


def _with_stats(info: dict[str, Any], agent: AnyAgent) -> dict[str, Any]:
    """The final ``info`` with the agent's own accounting under ``"agent"`` (when it keeps any)."""
    stats = agent_stats(agent)
    return {**info, "agent": stats} if stats else info


class ScriptedAgent(ABC):
    """An agent whose plan is a generator: it yields actions and is sent each action's observation.

    ``reset`` starts a fresh plan; the first ``act`` primes it (the observation is the prompt's).
    """

    def __init__(self) -> None:
        self._plan: Generator[Action, Observation, None] | None = None
        self.task_prompt = ""
        self.tool_specs: list[dict[str, Any]] = []

    @abstractmethod
    def script(self) -> Generator[Action, Observation, None]:
        """The episode's plan: ``observation = yield action`` until it yields a submit."""

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        self.task_prompt, self.tool_specs = task_prompt, list(tool_specs)
        self._plan = None

    def act(self, observation: Observation) -> Action:
        """The next action; ``observation`` answers the previous one."""
        if self._plan is None:
            self._plan = self.script()
            return next(self._plan)
        try:
            return self._plan.send(observation)
        except StopIteration:
            raise RuntimeError(f"{type(self).__name__}'s plan ended without submitting") from None
