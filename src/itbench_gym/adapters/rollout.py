"""Async rollouts for LLM-RL trainers: many envs on one event loop, messages in, tool calls out, reward at the end.

A *policy* is ``async (messages, tools) -> assistant message`` in OpenAI's chat shape (``content`` and
optional ``tool_calls`` with ``id``, ``function.name``, ``function.arguments``) — what a trainer's
sampler (vLLM, SGLang, an OpenAI-compatible server) returns. :func:`rollouts` plays one episode per
(scenario, seed) with at most ``concurrency`` at once; each env's reset and steps run in a worker
thread, so the loop is free while the policy samples. Each :class:`Trajectory` holds the whole
conversation (system, task, assistant turns, tool results), the sparse reward and the evaluation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from itbench_gym.agents.llm import LLMConfig, LLMConversation, ToolCallMessage

Message = dict[str, Any]
Policy = Callable[[list[Message], list[dict[str, Any]]], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True)
class Trajectory:
    scenario: str
    seed: int
    messages: list[Message]
    tools: list[dict[str, Any]]
    reward: float
    terminated: bool
    truncated: bool
    evaluation: Mapping[str, Any]
    steps: int


def _calls(message: Mapping[str, Any]) -> list[ToolCallMessage]:
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        calls.append(ToolCallMessage(str(call.get("id") or f"call_{i}"), str(function.get("name", "")),
                                     str(function.get("arguments") or "")))
    return calls


async def rollout(env: gym.Env, policy: Policy, seed: int) -> Trajectory:
    """One episode of ``policy`` on ``env`` (reset with ``seed``)."""
    conversation = LLMConversation(LLMConfig(model="policy"))
    obs, info = await asyncio.to_thread(env.reset, seed=seed)
    tools = list(getattr(env.unwrapped, "tool_schemas", []))
    conversation.start(str(obs["text"]), tools)
    reward, terminated, truncated, steps = 0.0, False, False, 0
    while not (terminated or truncated):
        conversation.observe(obs)
        message = await policy(list(conversation.messages), tools)
        action = conversation.take(str(message.get("content") or ""), _calls(message))
        obs, step_reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
        reward += float(step_reward)
        steps += 1
    conversation.observe(obs)  # the trajectory ends with the submit's (or last tool's) result
    return Trajectory(str(info["scenario_id"]), seed, conversation.messages, tools, reward, terminated, truncated,
                      dict(info.get("evaluation") or {}), steps)


async def rollouts(tasks: Sequence[tuple[str, int]], policy: Policy, *, concurrency: int = 4,
                   make_env: Callable[[str], gym.Env] | None = None) -> list[Trajectory]:
    """One trajectory per (scenario, seed), in the order given; at most ``concurrency`` envs live at once."""
    import itbench_gym

    build = make_env or itbench_gym.make
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(scenario: str, seed: int) -> Trajectory:
        async with gate:
            env = await asyncio.to_thread(build, scenario)
            try:
                return await rollout(env, policy, seed)
            finally:
                await asyncio.to_thread(env.close)

    return list(await asyncio.gather(*(one(s, seed) for s, seed in tasks)))
