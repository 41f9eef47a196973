"""A ReAct / tool-calling agent for any OpenAI-compatible Chat Completions endpoint.

Configuration comes from the environment (or the constructor): ``ITBENCH_GYM_LLM_BASE_URL`` (else
``OPENAI_BASE_URL``), ``ITBENCH_GYM_LLM_MODEL`` (else ``OPENAI_MODEL``), ``ITBENCH_GYM_LLM_API_KEY``
(else ``OPENAI_API_KEY``), and optional prices ``ITBENCH_GYM_LLM_PRICE_INPUT`` / ``_OUTPUT`` in USD
per million tokens. Sampling follows the ITBench paper: temperature 0, seed 42.

Each ``act`` is one model call. A native tool call becomes the env action ``{"tool", "args"}`` (its
arguments as the model wrote them: malformed JSON goes to the env, whose error observation tells
the model what was wrong); a reply without tool calls is read as text — an ``Action: <command>`` line,
a fenced command, a JSON report (submitted), or else the reply itself, which the env answers with an
error the model sees. Old tool output is cut to keep the context under ``max_context_chars``.
Timeouts, connection errors, 429 and 5xx are retried with exponential back-off; when the endpoint
stays unavailable the agent submits an empty report and ``stats()["error"]`` says why. ``stats()``
counts calls, retries, tokens, cost and model latency; :func:`~itbench_gym.agents.base.run_episode`
puts it in the final ``info["agent"]``.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from itbench_gym.agents.base import Action, Observation

SYSTEM_PROMPT = (
    "You are an expert site reliability engineer. Investigate with the tools, one call at a time, fix the "
    "root cause, then call submit with your report. Think briefly before each call."
)
ACTION_LINE = re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.MULTILINE | re.IGNORECASE)
FENCE = re.compile(r"```(?:[a-z]*)\n(.*?)```", re.DOTALL)
#: What an old tool result keeps when the context is cut.
KEPT_CHARS = 300


@dataclass(frozen=True)
class LLMConfig:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.0
    seed: int = 42
    timeout_seconds: float = 120.0
    max_retries: int = 4
    backoff_seconds: float = 1.0
    max_context_chars: int = 120_000
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0

    @classmethod
    def from_environment(cls, **overrides: Any) -> LLMConfig:
        env = os.environ

        def pick(*names: str) -> str | None:
            return next((env[n] for n in names if env.get(n)), None)

        values: dict[str, Any] = {
            "model": pick("ITBENCH_GYM_LLM_MODEL", "OPENAI_MODEL") or "",
            "base_url": pick("ITBENCH_GYM_LLM_BASE_URL", "OPENAI_BASE_URL"),
            "api_key": pick("ITBENCH_GYM_LLM_API_KEY", "OPENAI_API_KEY"),
            "price_input_per_mtok": float(pick("ITBENCH_GYM_LLM_PRICE_INPUT") or 0.0),
            "price_output_per_mtok": float(pick("ITBENCH_GYM_LLM_PRICE_OUTPUT") or 0.0),
        }
        values.update(overrides)
        if not values["model"]:
            raise ValueError("the llm agent needs a model: set ITBENCH_GYM_LLM_MODEL (or OPENAI_MODEL)")
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        """What the results store records about the model (never the key)."""
        return {"model": self.model, "base_url": self.base_url, "temperature": self.temperature, "seed": self.seed}


@dataclass
class Usage:
    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0
    text_fallbacks: int = 0
    error: str | None = None
    cost_usd: float = 0.0
    failures: list[str] = field(default_factory=list)


def text_action(content: str) -> Action:
    """The action a reply without tool calls stands for (see the module doc)."""
    lines = ACTION_LINE.findall(content)
    if lines:
        return str(lines[-1]).strip("`")
    if '"entities"' in content:
        return "submit " + content
    fenced = [str(block).strip() for block in FENCE.findall(content) if str(block).strip()]
    if fenced:
        return fenced[-1].splitlines()[0]
    return content.strip()


@dataclass(frozen=True)
class ToolCallMessage:
    """One tool call of an assistant message (OpenAI's ``tool_calls[i]``)."""

    id: str
    name: str
    arguments: str


def assistant_turn(content: str, calls: list[ToolCallMessage]) -> tuple[dict[str, Any], Action]:
    """An assistant reply as the message to keep in the conversation and the env action it stands for.

    The first tool call is the action (its arguments as written: malformed JSON reaches the env, whose
    error observation tells the model); without tool calls the text is read by :func:`text_action`.
    """
    if not calls:
        return {"role": "assistant", "content": content}, text_action(content)
    call = calls[0]
    message = {"role": "assistant", "content": content or None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]}
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        return message, f"{call.name} {call.arguments}"
    return message, ({"tool": call.name, "args": args} if isinstance(args, dict) else f"{call.name} {args}")


class LLMConversation:
    """The message list and the parsing of replies, shared by the sync and async agents."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.messages: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.usage = Usage()
        self._pending_call: str | None = None

    def start(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        self.messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task_prompt}]
        self.tools = list(tool_specs)
        self.usage = Usage()
        self._pending_call = None

    def observe(self, observation: Observation) -> None:
        """The previous action's observation, as a tool result or (after a text reply) a user message."""
        if len(self.messages) <= 2 and self._pending_call is None:
            return  # the first observation is the task prompt, already in the messages
        text = str(observation.get("text", ""))
        if self._pending_call is not None:
            self.messages.append({"role": "tool", "tool_call_id": self._pending_call, "content": text})
        else:
            self.messages.append({"role": "user", "content": f"Observation:\n{text}"})
        self._pending_call = None
        self._bound()

    def request(self) -> dict[str, Any]:
        cfg = self.config
        request: dict[str, Any] = {"model": cfg.model, "messages": self.messages, "temperature": cfg.temperature, "seed": cfg.seed}
        if self.tools:
            request["tools"] = self.tools
        return request

    def reply(self, response: Any, seconds: float) -> Action:
        """Account for a completion and turn it into the next action."""
        usage = self.usage
        usage.calls += 1
        usage.latency_seconds += seconds
        tokens = getattr(response, "usage", None)
        if tokens is not None:
            usage.prompt_tokens += int(getattr(tokens, "prompt_tokens", 0) or 0)
            usage.completion_tokens += int(getattr(tokens, "completion_tokens", 0) or 0)
            usage.cost_usd = (usage.prompt_tokens * self.config.price_input_per_mtok
                              + usage.completion_tokens * self.config.price_output_per_mtok) / 1e6
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        if message is None:
            usage.text_fallbacks += 1
            self.messages.append({"role": "assistant", "content": ""})
            return "(the model sent no message)"
        calls = [ToolCallMessage(c.id, c.function.name, c.function.arguments) for c in getattr(message, "tool_calls", None) or []]
        return self.take(str(getattr(message, "content", None) or ""), calls)

    def take(self, content: str, calls: list[ToolCallMessage]) -> Action:
        """Keep an assistant reply in the conversation; the env action it stands for."""
        assistant, action = assistant_turn(content, calls)
        self.messages.append(assistant)
        self._pending_call = calls[0].id if calls else None
        self.usage.text_fallbacks += not calls
        return action

    def failed(self, exc: Exception, attempt: int) -> Action | float:
        """A retryable failure of attempt ``attempt`` (from 0): the back-off before the next one, or the
        give-up action once the retries are spent."""
        self.usage.failures.append(type(exc).__name__)
        if attempt >= self.config.max_retries:
            return self.give_up(f"{type(exc).__name__} after {attempt + 1} attempts")
        self.usage.retries += 1
        return float(self.config.backoff_seconds * 2**attempt)

    def give_up(self, error: str) -> Action:
        """The endpoint stayed unavailable: submit an empty report (the episode is still graded)."""
        self.usage.error = error
        return {"tool": "submit", "args": {"entities": [], "propagations": [], "reasoning": f"model unavailable: {error}"}}

    def _bound(self) -> None:
        """Cut the oldest tool outputs (never the task prompt or the last two turns) until the context fits."""
        def size() -> int:
            return sum(len(str(m.get("content") or "")) for m in self.messages)

        for message in self.messages[2:-4]:
            if size() <= self.config.max_context_chars:
                return
            content = str(message.get("content") or "")
            if message["role"] in ("tool", "user") and len(content) > KEPT_CHARS:
                message["content"] = content[:KEPT_CHARS] + f"\n[older output cut: {len(content) - KEPT_CHARS:,} characters]"

    def stats(self) -> dict[str, Any]:
        u = self.usage
        return {"model": self.config.model, "calls": u.calls, "retries": u.retries, "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens, "cost_usd": round(u.cost_usd, 6),
                "latency_seconds": round(u.latency_seconds, 3), "text_fallbacks": u.text_fallbacks,
                "failures": list(u.failures), "error": u.error}


def _retryable() -> tuple[type[Exception], ...]:
    openai = _openai()
    return (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)


def _openai() -> Any:
    try:
        import openai
    except ImportError:
        raise RuntimeError("the llm agent needs the openai package: pip install 'itbench-gym[llm]'") from None
    return openai


def _client_kwargs(config: LLMConfig) -> dict[str, Any]:
    # The client's own retries are off: ours count them and back off in the episode's accounting.
    return {"base_url": config.base_url, "api_key": config.api_key or "not-needed", "timeout": config.timeout_seconds,
            "max_retries": 0}


class LLMAgent:
    """The tool-calling agent over a synchronous client (see the module doc)."""

    def __init__(self, env: gym.Env | None = None, *, config: LLMConfig | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config or LLMConfig.from_environment()
        self._client = _openai().OpenAI(**_client_kwargs(self.config))
        self._talk = LLMConversation(self.config)
        self._sleep = sleep

    @staticmethod
    def model_info() -> Mapping[str, Any]:
        return LLMConfig.from_environment().describe()

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        self._talk.start(task_prompt, tool_specs)

    def act(self, observation: Observation) -> Action:
        self._talk.observe(observation)
        retryable = _retryable()
        attempt = 0
        while True:
            start = time.perf_counter()
            try:
                response = self._client.chat.completions.create(**self._talk.request())
            except retryable as exc:
                outcome = self._talk.failed(exc, attempt)
                if not isinstance(outcome, float):
                    return outcome
                self._sleep(outcome)
                attempt += 1
                continue
            except Exception as exc:  # a 4xx the endpoint will not change its mind about
                return self._talk.give_up(f"{type(exc).__name__}: {exc}")
            return self._talk.reply(response, time.perf_counter() - start)

    def stats(self) -> dict[str, Any]:
        return self._talk.stats()


class AsyncLLMAgent:
    """The same agent with ``async act`` over ``openai.AsyncOpenAI``: many episodes share one event loop."""

    def __init__(self, env: gym.Env | None = None, *, config: LLMConfig | None = None) -> None:
        self.config = config or LLMConfig.from_environment()
        self._client = _openai().AsyncOpenAI(**_client_kwargs(self.config))
        self._talk = LLMConversation(self.config)

    @staticmethod
    def model_info() -> Mapping[str, Any]:
        return LLMConfig.from_environment().describe()

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        self._talk.start(task_prompt, tool_specs)

    async def act(self, observation: Observation) -> Action:
        import asyncio

        self._talk.observe(observation)
        retryable = _retryable()
        attempt = 0
        while True:
            start = time.perf_counter()
            try:
                response = await self._client.chat.completions.create(**self._talk.request())
            except retryable as exc:
                outcome = self._talk.failed(exc, attempt)
                if not isinstance(outcome, float):
                    return outcome
                await asyncio.sleep(outcome)
                attempt += 1
                continue
            except Exception as exc:
                return self._talk.give_up(f"{type(exc).__name__}: {exc}")
            return self._talk.reply(response, time.perf_counter() - start)

    def stats(self) -> dict[str, Any]:
        return self._talk.stats()
