"""The llm agent against a local scripted OpenAI-compatible server: tool calls, text fallbacks, malformed
replies, refusals, 500/429 retries, timeouts, bounded context and its accounting."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import itbench_gym
from itbench_gym.agents import AsyncLLMAgent, LLMAgent, LLMConfig, run_episode
from scripted_llm import NO_CHOICES, delay, scripted_model, status, text, tool_call

SCENARIO = "SRE-CorruptImage-v0"
REPORT = {"entities": [{"id": "otel-demo/Deployment/product-catalog", "root_cause": True}], "propagations": []}


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    environment = itbench_gym.make(SCENARIO)
    yield environment
    environment.close()


def config(base_url: str, **changes: Any) -> LLMConfig:
    return LLMConfig(**{"model": "scripted", "base_url": base_url, "api_key": "test", "backoff_seconds": 0.0, **changes})


def test_an_episode_of_tool_calls_text_replies_malformed_arguments_and_a_refusal(env: gym.Env) -> None:
    script = [
        tool_call("kubectl", {"argv": ["get", "pods", "-n", "otel-demo"]}),
        tool_call("kubectl", '{"argv": ["get", "events"'),  # malformed JSON arguments
        text("I'm sorry, but I can't help with that."),  # a refusal: no action in it
        NO_CHOICES,
        text("The image looks wrong.\nAction: kubectl -n otel-demo rollout undo deployment/product-catalog"),
        tool_call("wait", {"seconds": 300}),
        tool_call("submit", REPORT),
    ]
    with scripted_model(script) as model:
        agent = LLMAgent(config=config(model.base_url))
        info = run_episode(env, agent, seed=0)
    evaluation, steps = info["evaluation"], env.unwrapped.episode.steps  # type: ignore[attr-defined]
    assert [s.exit_status == 0 for s in steps] == [True, False, False, False, True, True, True]
    assert "error" in steps[1].observation and steps[4].action.startswith("kubectl")
    assert evaluation["diagnosis"]["fl_pass"] and evaluation["mitigation"]["passed"]
    stats = info["agent"]
    assert (stats["calls"], stats["text_fallbacks"], stats["retries"], stats["error"]) == (7, 3, 0, None)
    assert stats["prompt_tokens"] > 0 and stats["completion_tokens"] == 70
    first = model.requests[0]
    assert (first["temperature"], first["seed"]) == (0, 42)
    assert {t["function"]["name"] for t in first["tools"]} >= {"kubectl", "promql", "submit"}
    # tool results answer their call; text replies are answered as observations
    second = model.requests[1]["messages"]
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_1"
    assert model.requests[3]["messages"][-1]["content"].startswith("Observation:")


def test_500_and_429_are_retried_with_back_off(env: gym.Env) -> None:
    slept: list[float] = []
    with scripted_model([status(500), status(429), tool_call("submit", REPORT)]) as model:
        agent = LLMAgent(config=config(model.base_url, backoff_seconds=0.5), sleep=slept.append)
        info = run_episode(env, agent, seed=0)
    assert info["agent"]["retries"] == 2 and info["agent"]["failures"] == ["InternalServerError", "RateLimitError"]
    assert slept == [0.5, 1.0]
    assert info["evaluation"]["diagnosis"]["fl_pass"]


def test_a_server_that_times_out_ends_the_episode_with_an_empty_report(env: gym.Env) -> None:
    with scripted_model([delay(3.0), delay(3.0)]) as model:
        agent = LLMAgent(config=config(model.base_url, timeout_seconds=0.5, max_retries=1))
        info = run_episode(env, agent, seed=0)
    assert "APITimeoutError after 2 attempts" in info["agent"]["error"]
    assert info["evaluation"]["diagnosis"]["fl_pass"] is False  # graded, not crashed


def test_old_tool_output_is_cut_to_keep_the_context_bounded(env: gym.Env) -> None:
    script = [tool_call("kubectl", {"argv": ["get", "pods", "-n", "otel-demo", "-o", "yaml"]}) for _ in range(6)] + [tool_call("submit", REPORT)]
    with scripted_model(script) as model:
        agent = LLMAgent(config=config(model.base_url, max_context_chars=40_000))
        run_episode(env, agent, seed=0)
    sizes = [sum(len(str(m.get("content") or "")) for m in r["messages"]) for r in model.requests]
    assert max(sizes) < 40_000 + 2 * 16_500  # the last two turns are kept whole, the rest fits the bound
    last = model.requests[-1]["messages"]
    assert any("[older output cut:" in str(m.get("content")) for m in last)
    assert last[1]["content"].startswith("You are the on-call SRE")  # the task prompt is never cut


def test_the_async_agent_plays_the_same_episode(env: gym.Env) -> None:
    with scripted_model([status(503), tool_call("alerts", {}), tool_call("submit", REPORT)]) as model:
        agent = AsyncLLMAgent(config=config(model.base_url))
        info = run_episode(env, agent, seed=0)
    assert info["agent"]["calls"] == 2 and info["agent"]["retries"] == 1
    assert info["evaluation"]["diagnosis"]["fl_pass"]


def test_a_model_must_be_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ITBENCH_GYM_LLM_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="set ITBENCH_GYM_LLM_MODEL"):
        LLMConfig.from_environment()
    monkeypatch.setenv("ITBENCH_GYM_LLM_MODEL", "m")
    monkeypatch.setenv("OPENAI_API_KEY", "secret")
    assert "secret" not in str(LLMAgent.model_info())
