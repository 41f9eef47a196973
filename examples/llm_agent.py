"""An LLM agent loop on one scenario, against any OpenAI-compatible endpoint.

    ITBENCH_GYM_LLM_BASE_URL=http://localhost:8000/v1 ITBENCH_GYM_LLM_MODEL=my-model \\
        python examples/llm_agent.py SRE-CacheFailure-v0

The loop is the one a notebook writes by hand: reset, then one model call per step until the agent
submits; the evaluation and the agent's token and latency accounting are printed at the end.
"""

from __future__ import annotations

import json
import sys

import itbench_gym
from itbench_gym.agents import LLMAgent


def main(scenario: str) -> None:
    env = itbench_gym.make(scenario)
    agent = LLMAgent()
    obs, info = env.reset(seed=0)
    agent.reset(obs["text"], env.unwrapped.tool_schemas)  # type: ignore[attr-defined]
    done = False
    while not done:
        action = agent.act(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        print(f"> {str(action)[:120]}\n{obs['text'][:400]}\n")
        done = terminated or truncated
    print(json.dumps({"reward": reward, "passed": info["evaluation"]["passed"], "agent": agent.stats()}, indent=2))
    env.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "SRE-CacheFailure-v0")
