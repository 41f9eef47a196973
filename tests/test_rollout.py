"""Async rollouts in the shape LLM-RL trainers consume: many envs on one loop, messages in, tool calls out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from itbench_gym.adapters.rollout import rollouts

SCENARIO = "SRE-CorruptImage-v0"
FIX = [("kubectl", {"argv": ["rollout", "undo", "deployment/product-catalog", "-n", "otel-demo"]}), ("wait", {"seconds": 300})]
REPORT = {"entities": [{"id": "otel-demo/Deployment/product-catalog", "root_cause": True}], "propagations": []}


def call(turn: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"c{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def test_two_episodes_share_one_loop_and_end_with_their_reward() -> None:
    async def fixing_policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Mapping[str, Any]:
        turn = sum(m["role"] == "assistant" for m in messages)
        plan = [*FIX, ("submit", REPORT)]
        name, args = plan[min(turn, len(plan) - 1)]
        if turn == 1:
            return {"role": "assistant", "content": "Thought: let it settle.\nAction: wait 300"}
        return call(turn, name, args)

    async def submitting_policy(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Mapping[str, Any]:
        return call(0, "submit", REPORT)

    async def both() -> list[Any]:
        fixed = rollouts([(SCENARIO, 3)], fixing_policy, concurrency=1)
        diagnosed = rollouts([(SCENARIO, 4)], submitting_policy, concurrency=1)
        return [*(await asyncio.gather(fixed, diagnosed))]

    (fixed,), (diagnosed,) = asyncio.run(both())
    assert fixed.terminated and fixed.reward == 1.0 and fixed.evaluation["mitigation"]["passed"]
    assert diagnosed.terminated and diagnosed.reward == 0.0 and diagnosed.evaluation["diagnosis"]["fl_pass"]
    roles = [m["role"] for m in fixed.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool"]
    assert fixed.messages[5]["content"].startswith("Observation:") and "report accepted" in fixed.messages[-1]["content"]
    assert {t["function"]["name"] for t in fixed.tools} >= {"kubectl", "submit"} and fixed.steps == 3
