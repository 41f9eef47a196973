"""``ITBenchEnv``: one ITBench scenario as a Gymnasium environment."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from itbench_gym.actions import ActionError, ToolCall, parse_action
from itbench_gym.backends.base import Backend, Endpoints
from itbench_gym.episode import Episode, StepRecord
from itbench_gym.evaluation.reward import Reward, RewardMode, episode_reward, make_reward
from itbench_gym.spaces import ActionSpace, FreeText
from itbench_gym.spec import ScenarioSpec
from itbench_gym.tasks import Incident, Submission, Task, make_task
from itbench_gym.tools import MAX_OUTPUT_CHARS, Tool, ToolContext, ToolInputError, ToolResult
from itbench_gym.workdirs import WorkDir

logger = logging.getLogger(__name__)

#: Room for a prompt or tool output plus the truncation marker.
MAX_OBSERVATION_CHARS = MAX_OUTPUT_CHARS + 4_096


def _make_backend(name: str) -> Backend:
    if name == "sim":
        from itbench_gym.backends.sim.backend import SimBackend

        return SimBackend()
    if name == "kubernetes":
        from itbench_gym.backends.kubernetes import KubernetesBackend

        return KubernetesBackend()
    raise ValueError(f"unknown backend {name!r}; available: 'sim' (the embedded twin), "
                     "'kubernetes' (a real cluster: $ITBENCH_GYM_CLUSTER names its configuration)")


class ITBenchEnv(gym.Env[dict[str, Any], Any]):
    """An ITBench scenario (SRE incident, CISO control, FinOps task) as a Gymnasium environment.

    ## Description
    The agent is an on-call engineer. ``reset`` provisions the scenario's environment (by default an
    embedded digital twin of a Kubernetes cluster running the OpenTelemetry Astronomy Shop with
    Prometheus), settles a healthy baseline, injects the scenario's faults through the Kubernetes API
    and waits until the scenario's triggering alerts fire. The agent then investigates and repairs the
    system through tools that speak real protocols (the real ``kubectl``; the Prometheus, Loki and
    Jaeger HTTP APIs) and ends the episode by submitting a diagnosis report. The ``-NoLogs`` and
    ``-NoTraces`` variants of a scenario run without that component: no Loki (``logql`` says so;
    containers' logs are empty) or no Jaeger (``traces`` says so; ``topology`` shows no call edges
    from traces).

    In a CISO scenario (``CISO-<Class>-<Control>-v0``) the agent is a compliance engineer: ``reset``
    sets up one of the scenario's cases on ITBench's CISO cluster (kind with Kyverno) or RHEL 9 host —
    misconfigured resources or settings, or none — and the agent turns the CIS requirement into a
    Kyverno policy, or a fetch script or Ansible playbook plus a Rego policy, which are graded as ITBench
    grades them (``itbench_gym.evaluation.ciso``).

    ## Action Space
    A string command ``"<tool> <arguments>"`` (e.g. ``"kubectl get pods -n otel-demo"``,
    ``"promql up"``, ``"alerts"``, ``"wait 60"``, ``"submit {...}"``) or a tool call
    ``{"tool": name, "args": {...}}`` whose args follow the tool's JSON Schema
    (``env.unwrapped.tool_schemas``). ``ActionSpace``: ``contains`` is true for both forms when they
    name one of the env's tools (printable text up to 65,536 characters; tool-call args as JSON data
    up to the same size); ``sample`` draws real read-only commands (the task's example actions, from
    the app's ``envs/<app>/app.yaml`` ``examples``). Actions outside the space, and
    arguments a tool cannot use, are answered with an error observation and the episode goes on.

    ## Observation Space
    ``Dict`` with ``text`` (what an LLM reads: the task prompt after ``reset``, the tool output after
    ``step``; bounded with an explicit truncation marker), ``tool`` (the tool that ran, ``""`` if none),
    ``exit_status`` (0 on success; tool errors and bad actions are non-zero), ``firing_alerts``
    (newline-separated ``alertname{label=value,...}`` of alerts firing now; empty for tasks without
    alerts), ``clock`` (seconds since the incident was handed over, on the environment's clock) and
    ``step`` (steps taken).

    ## Rewards
    0 on every step but the last. A CISO episode's evaluation has ``passed`` (the class's verdict) and
    the time to process; its one part is ``assessment``. A FinOps episode's has the diagnosis, the
    mitigation verdict and the proximity of four cost and efficiency measures to a reference run; its
    parts are ``diagnosis``, ``mitigation`` and ``proximity`` (docs/metrics.md §10). On ``submit`` (or when the budget runs out) the episode is evaluated
    (``info["evaluation"]``: fault-localisation pass@1, NTAM, entity and propagation scores, the
    mitigation verdict with its reasons, MTTD, MTTR) and the reward is ``reward_fn(evaluation)`` over
    the task's typed evaluation (``itbench_gym.evaluation``: ``SparseReward``, ``ScoreReward(weights)``),
    or by ``reward_mode``: ``"sparse"`` 1.0 iff diagnosis and mitigation both pass; ``"score"`` the
    documented weighted combination of the task's parts in [0, 1]; or a callable ``f(evaluation: dict) -> float`` over
    ``info["evaluation"]``.

    ## Starting State
    The scenario's faults are active and its triggering alerts are firing. The clock starts at the
    moment the alerts fired. Same seed ⇒ same starting state. Every seed's incident starts from the
    same healthy cluster (its baseline is built once per process); the seed drives everything from
    the injection on: noise, new pods' names, connection pins, chaos picks, logs and traces.

    ## Episode End
    Terminated when the agent submits a report that can be read (JSON, possibly fenced or wrapped in
    prose); an unreadable report is an error observation (exit status 2) saying what is wrong and the
    episode goes on. Truncated when ``budget.max_steps`` steps have been taken or
    ``budget.max_sim_seconds`` of environment time have passed; the episode is then evaluated without a
    report (the mitigation is still judged).

    ## Arguments
    The env composes injected parts and builds each one that is not given. ``scenario`` (a spec or its
    id; may be left out when ``task`` is given), ``task`` (a ``Task`` that sets the scenario up and
    grades it; default ``make_task(spec)``, e.g. ``SRETask``), ``backend`` (``"sim"``, ``"kubernetes"`` or a ``Backend``),
    ``tools`` (a list of tools; default: the task's — SRE: kubectl, promql, logql, traces, alerts, topology,
    opencost (when the scenario runs OpenCost), wait, submit; CISO: kubectl, write_file, read_file, list_files,
    the class's policy tools (kyverno, bash for fetch scripts, opa, ansible-playbook), wait, submit),
    ``reward_fn`` (a ``Reward``) or ``reward_mode`` (default ``"sparse"``), ``max_steps`` and
    ``max_sim_seconds`` (override the spec's budget), ``render_mode`` (``"ansi"``: the transcript).

    ## Version History
    * v0: first release — SRE scenarios on the embedded twin; CISO compliance scenarios.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        scenario: ScenarioSpec | str | None = None,
        *,
        task: Task | None = None,
        backend: str | Backend = "sim",
        tools: Sequence[Tool] | None = None,
        reward_fn: Reward | None = None,
        reward_mode: RewardMode | None = None,
        max_steps: int | None = None,
        max_sim_seconds: float | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if reward_fn is not None and reward_mode is not None:
            raise ValueError("give reward_fn or reward_mode, not both")
        self.backend: Backend = _make_backend(backend) if isinstance(backend, str) else backend
        self.scenario = self.backend.place(_scenario(scenario, task))
        if task is not None and self.scenario != task.spec:
            raise ValueError(f"the backend runs scenario {self.scenario.id} in namespace {self.scenario.namespace}, not "
                             f"{task.spec.namespace} as the task given says: leave task= out and the env builds it there")
        self.task: Task = task if task is not None else make_task(self.scenario)
        self.render_mode = render_mode
        self.reward_fn: Reward = reward_fn if reward_fn is not None else make_reward(reward_mode or "sparse")
        self.tools: dict[str, Tool] = {t.name: t for t in (tools if tools is not None else self.task.default_tools())}
        self.max_steps = max_steps or self.scenario.budget.max_steps
        self.max_sim_seconds = float(max_sim_seconds or self.scenario.budget.max_sim_seconds)
        self.action_space = ActionSpace(tuple(self.tools), self.task.example_actions())
        self.observation_space = spaces.Dict(
            {
                "text": FreeText(MAX_OBSERVATION_CHARS),
                "tool": FreeText(64),
                "exit_status": spaces.Discrete(512, start=-256),
                "firing_alerts": FreeText(8_192),
                "clock": spaces.Box(low=0.0, high=np.inf, shape=(1,), dtype=np.float64),
                "step": spaces.Discrete(self.max_steps + 1),
            }
        )
        self._incident: Incident | None = None
        self._endpoints: Endpoints | None = None
        self._episode: Episode | None = None
        #: The agent's workspace and the tools' scratch space, emptied at every reset.
        self._workdir: WorkDir | None = None
        self._start_time = 0.0
        self._done = False

    # -- public helpers -------------------------------------------------------------------------
    @property
    def tool_schemas(self) -> list[dict[str, Any]]:
        from itbench_gym.tools import tool_schemas

        return tool_schemas(list(self.tools.values()))

    @property
    def episode(self) -> Episode | None:
        return self._episode

    @property
    def incident(self) -> Incident | None:
        """What ``reset`` set up (privileged: the injection log and journal; for oracles and checks)."""
        return self._incident

    @property
    def endpoints(self) -> Endpoints | None:
        """The agent-side endpoints (kubeconfig, Prometheus URL) of the current episode."""
        return self._endpoints

    # -- Gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        episode_seed = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        self._episode = self._incident = None  # a set-up that fails leaves no episode to step
        with self.backend.setting_up():
            self._incident = self.task.setup(self.backend, episode_seed)
        self._endpoints = self.backend.endpoints
        self._fresh_workspace()
        assert self._workdir is not None
        self.task.prepare_workspace(self._workdir.path / "workspace")
        self._start_time = self._incident.started_at
        self.backend.set_time_limit(self._start_time + self.max_sim_seconds)
        self._episode = Episode(
            episode_id=f"{self.scenario.id}-seed{episode_seed}",
            scenario_id=self.scenario.id,
            seed=episode_seed,
            prompt=self.task.prompt(self._incident, list(self.tools.values())),
        )
        self._done = False
        firing = self.task.firing_alerts()
        return self._observation(self._episode.prompt, "", 0, firing), self._info(None, 0.0)

    def step(self, action: Any) -> tuple[dict[str, Any], SupportsFloat, bool, bool, dict[str, Any]]:
        if self._episode is None or self._incident is None or self._endpoints is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if self._done:
            raise gym.error.ResetNeeded("the episode has ended (submitted or out of budget); call reset()")
        wall_start = time.perf_counter()
        sim_start = self.backend.clock.now()
        call, result = self._run(action)
        elapsed = self.backend.clock.now() - self._start_time
        index = len(self._episode.steps) + 1
        action_text = call.describe() if call else _describe_raw(action)
        record = StepRecord(
            index=index,
            action=action_text,
            tool=call.tool if call else None,
            observation=result.text,
            exit_status=result.exit_status,
            sim_time=elapsed,
            sim_cost_seconds=self.backend.clock.now() - sim_start,
            wall_seconds=time.perf_counter() - wall_start,
        )
        self._episode.steps.append(record)
        terminated = result.ends_episode
        truncated = not terminated and (index >= self.max_steps or elapsed >= self.max_sim_seconds)
        reward = 0.0
        if terminated or truncated:
            self._done = True
            reward = self._evaluate(result if terminated else None)
        firing = self.task.firing_alerts()
        obs = self._observation(result.text, call.tool if call else "", result.exit_status, firing)
        return obs, reward, terminated, truncated, self._info(record, record.sim_cost_seconds)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return self._episode.transcript() if self._episode else ""

    def close(self) -> None:
        self.task.close()
        self.backend.close()
        self._incident = None
        self._endpoints = None
        if self._workdir is not None:
            self._workdir.close()
            self._workdir = None
        super().close()

    # -- internals ------------------------------------------------------------------------------
    def _fresh_workspace(self) -> None:
        """An empty workspace per episode: nothing one episode's agent left is seen by the next."""
        if self._workdir is None:
            self._workdir = WorkDir("episode")
        for name in ("workspace", "scratch"):
            shutil.rmtree(self._workdir.path / name, ignore_errors=True)
            self._workdir.subdir(name)

    def _run(self, action: Any) -> tuple[ToolCall | None, ToolResult]:
        try:
            call = parse_action(action, tuple(self.tools))
        except ActionError as exc:
            return None, ToolResult(text=f"error: {exc}", exit_status=2)
        tool = self.tools[call.tool]
        assert self._endpoints is not None and self._workdir is not None
        ctx = ToolContext(
            endpoints=self._endpoints,
            advance=self.backend.advance,
            now=self.backend.clock.now,
            time_left=lambda: self._start_time + self.max_sim_seconds - self.backend.clock.now(),
            workspace=self._workdir.path / "workspace",
            scratch=self._workdir.path / "scratch",
            programs=self.backend.programs,
        )
        try:
            result = tool.run(call.args, ctx)
        except ToolInputError as exc:
            result = ToolResult(text=f"{call.tool}: error: {exc}", exit_status=2)
        except RecursionError:
            result = ToolResult(text=f"{call.tool}: error: the arguments are nested too deeply", exit_status=2)
        except Exception as exc:
            logger.exception("tool %s failed on %s", call.tool, call.describe()[:200])
            result = ToolResult(text=f"{call.tool}: internal error ({type(exc).__name__}); the episode goes on", exit_status=70)
        if tool.cost_seconds:
            self.backend.advance(tool.cost_seconds)
        return call, result

    def _observation(self, text: str, tool: str, exit_status: int, firing: list[str]) -> dict[str, Any]:
        return {
            "text": text[:MAX_OBSERVATION_CHARS],
            "tool": tool,
            "exit_status": int(max(-256, min(255, exit_status))),
            "firing_alerts": "\n".join(firing)[:8_192],
            "clock": np.array([max(0.0, self.backend.clock.now() - self._start_time)], dtype=np.float64),
            "step": len(self._episode.steps) if self._episode else 0,
        }

    def _info(self, record: StepRecord | None, sim_cost: float) -> dict[str, Any]:
        """Deterministic step facts; wall-clock timings live in the episode record."""
        assert self._episode is not None
        info: dict[str, Any] = {
            "episode_id": self._episode.episode_id,
            "scenario_id": self.scenario.id,
            "seed": self._episode.seed,
            "sim_time": self.backend.clock.now() - self._start_time,
            "sim_cost_seconds": sim_cost,
            "tool": record.tool if record else None,
            "exit_status": record.exit_status if record else 0,
            "endpoints": self._endpoints.to_dict() if self._endpoints else {},
        }
        if self._episode.evaluation is not None:
            info["evaluation"] = self._episode.evaluation
        return info

    def _evaluate(self, submitted: ToolResult | None) -> float:
        """Grade the finished episode (``submitted``: the submit's result, None when out of budget),
        record the evaluation and return the reward."""
        assert self._episode is not None
        commands = tuple(s.action for s in self._episode.steps)
        workspace = self._workdir.path / "workspace" if self._workdir is not None else None
        if submitted is not None:
            submission = Submission(submitted.data.get("report"), submitted.data.get("report_error"), self.backend.clock.now(), commands,
                                    workspace)
        else:
            submission = Submission(None, "no report submitted before the budget ran out", None, commands, workspace)
        evaluation = self.task.evaluate(submission)
        reward = episode_reward(self.reward_fn, evaluation)
        self._episode.evaluation = {**evaluation.to_dict(), "reward": reward}
        return reward


def _scenario(scenario: ScenarioSpec | str | None, task: Task | None) -> ScenarioSpec:
    """The env's spec: ``scenario`` (an id is looked up), else the task's; both must agree."""
    from itbench_gym.registry import get_spec

    spec = get_spec(scenario) if isinstance(scenario, str) else scenario
    if task is None:
        if spec is None:
            raise TypeError("ITBenchEnv needs a scenario (a spec or its id) or a task")
        return spec
    if spec is not None and spec.id != task.spec.id:
        raise ValueError(f"scenario {spec.id!r} is not the task's scenario {task.spec.id!r}")
    return task.spec


def _describe_raw(action: Any) -> str:
    try:
        text = action if isinstance(action, str) else json.dumps(action, default=str)
    except (TypeError, ValueError):
        text = object.__repr__(action)
    except RecursionError:
        text = f"<{type(action).__name__} nested too deeply to show>"
    return text if len(text) <= 200 else f"{text[:200]}... ({len(text):,} characters)"
