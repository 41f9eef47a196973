"""The task seam: tasks chosen from the spec, the env composed of injected parts, incidents owned by
the backend, and an action space that contains every action ``step`` runs."""

from __future__ import annotations

import ast
import json
from collections.abc import Hashable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from gymnasium.utils.env_checker import check_env

import itbench_gym
from conftest import PROJECT_ROOT
from itbench_gym.backends.base import BackendError, Endpoints, Provisioning
from itbench_gym.backends.programs import RunningPrograms
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.clock import SimClock
from itbench_gym.env import ITBenchEnv
from itbench_gym.evaluation.reward import ScoreReward, SparseReward
from itbench_gym.spaces import ActionSpace
from itbench_gym.spec import ScenarioSpec, SpecError, load_spec
from itbench_gym.spec.model import AlertMatcher
from itbench_gym.tasks import TASK_KINDS, Incident, Submission, Task, make_task
from itbench_gym.tasks.sre import ALERT_POLL_SECONDS, SRETask, poll_delay
from itbench_gym.tools.alerts import RulePoll, RuleState
from itbench_gym.tools.base import Tool
from itbench_gym.tools.submit import SubmitTool
from itbench_gym.tools.wait import WaitTool

SCENARIO = "SRE-CacheFailure-v0"
CACHE_FAILURE = PROJECT_ROOT / "scenario_specs" / "sre" / "cache-failure.yaml"
SRC = PROJECT_ROOT / "src" / "itbench_gym"


# -- task kinds in the spec ---------------------------------------------------------------------------


def _spec_file(tmp_path: Path, **metadata: Any) -> Path:
    doc = yaml.safe_load(CACHE_FAILURE.read_text())
    doc["metadata"].update(metadata)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_task_kind_defaults_to_the_domain_and_can_be_named(tmp_path: Path) -> None:
    assert load_spec(CACHE_FAILURE).task == "sre"
    assert load_spec(_spec_file(tmp_path, task="sre")).task == "sre"
    with pytest.raises(SpecError, match="metadata.task"):
        load_spec(_spec_file(tmp_path, task="sre-but-different"))
    assert isinstance(make_task(itbench_gym.get_spec(SCENARIO)), SRETask)
    assert itbench_gym.get_spec(SCENARIO).summary()["task"] == "sre"


def test_the_schema_allows_exactly_the_kinds_make_task_builds() -> None:
    schema = json.loads((SRC / "spec" / "scenario.schema.json").read_text())
    compliance = json.loads((SRC / "spec" / "compliance.schema.json").read_text())
    kinds = (*schema["properties"]["metadata"]["properties"]["task"]["enum"], compliance["properties"]["metadata"]["properties"]["task"]["const"])
    assert sorted(kinds) == sorted(TASK_KINDS)
    with pytest.raises(ValueError, match="no task of kind 'ops'; available: sre, ciso, finops"):
        make_task(replace(itbench_gym.get_spec(SCENARIO), task="ops"))
    with pytest.raises(ValueError, match=r"a FinOps scenario needs OpenCost \(environment.tools.finops.enabled\)"):
        make_task(replace(itbench_gym.get_spec(SCENARIO), domain="finops", task="finops"))


def test_tasks_and_the_env_see_only_the_backend_contract() -> None:
    """``env → tasks → tools → backends``: nothing here imports the twin's internals."""
    allowed = {("env.py", "itbench_gym.backends.sim.backend")}  # the default backend, built on demand
    files = [SRC / "env.py", SRC / "registry.py", SRC / "spaces.py", *(SRC / "tasks").glob("*.py"),
             *(SRC / "evaluation").glob("*.py"), *(SRC / "agents").glob("*.py")]
    for file in files:
        for node in ast.walk(ast.parse(file.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.startswith("itbench_gym.backends.sim"):
                    assert (file.name, name) in allowed, f"{file.relative_to(SRC)} imports {name}"
    assert not (SRC / "harness.py").exists()


# -- the action space ---------------------------------------------------------------------------------


def test_action_space_contains_every_action_step_runs() -> None:
    space = ActionSpace(("kubectl", "promql", "wait", "submit"), ["kubectl get pods -n shop", "alerts", "wait 30"])
    assert space.samples == ("kubectl get pods -n shop", "wait 30")  # "alerts" is not one of these tools
    accepted: list[Any] = ["kubectl get pods -A", "promql up", "wait 60\n", 'submit {"entities": []}',
                   {"tool": "kubectl", "args": {"argv": ["get", "pods", "-n", "shop"]}},
                   {"tool": "submit", "args": {"entities": [], "propagations": []}},
                   {"tool": "wait", "args": "60"}, {"tool": "promql"}]
    refused: list[Any] = ["", "   ", "frobnicate the cluster", "kubectl \x00", "kubectl \x07bell", "kubectl " + "a" * 70_000,
                   {"tool": "frobnicate", "args": {}}, {"tool": "kubectl", "args": 7}, {"args": {}},
                   {"tool": "kubectl", "args": {}, "extra": 1}, {"tool": 3}, 42, None, ["kubectl", "get"],
                   {"tool": "kubectl", "args": {"text": "x" * 70_000}}]
    assert [a for a in accepted if not space.contains(a)] == []
    assert [a for a in refused if space.contains(a)] == []
    space.seed(7)
    drawn = [space.sample() for _ in range(20)]
    space.seed(7)
    assert drawn == [space.sample() for _ in range(20)] and all(space.contains(a) for a in drawn)
    assert ActionSpace(("submit",), ["kubectl get pods"]).samples == ("submit",)
    with pytest.raises(ValueError, match="at least one tool"):
        ActionSpace((), ["kubectl get pods"])


# -- an env composed of injected parts, with a task that has no alerts ---------------------------------


class SnapshotlessBackend:
    """A backend like a real cluster's: no snapshots, so every reset sets the task up again."""

    def __init__(self, root: Path) -> None:
        self._clock = SimClock()
        self._root = root
        self.started: list[int] = []
        self._programs = RunningPrograms()

    @property
    def clock(self) -> SimClock:
        return self._clock

    @property
    def programs(self) -> RunningPrograms:
        return self._programs

    @property
    def admin_kubeconfig(self) -> Path:
        return self._root / "admin" / "kubeconfig"

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints(kubeconfig=self._root / "agent" / "kubeconfig", kube_cache_dir=self._root / "cache", prometheus=None)

    def place(self, spec: ScenarioSpec) -> ScenarioSpec:
        return spec

    def start(self, spec: ScenarioSpec, seed: int, provisioning: Provisioning | None = None) -> Endpoints:
        self.started.append(seed)
        self._clock.reset(1_000.0 + seed)
        return self.endpoints

    @property
    def baseline_key(self) -> None:
        return None

    def setting_up(self) -> AbstractContextManager[None]:
        return nullcontext()

    def advance(self, seconds: float) -> None:
        self._clock.advance(seconds)

    @property
    def can_checkpoint(self) -> bool:
        return False

    def checkpoint(self) -> None:
        return None

    def restore(self, token: object) -> Endpoints:
        raise TypeError("this backend takes no checkpoints")

    def save_incident(self, key: Hashable, incident: object) -> None:
        """Nothing to save without snapshots."""

    def restore_incident(self, key: Hashable) -> None:
        return None

    def set_time_limit(self, deadline: float | None) -> None:
        """Nothing blocks on this backend."""

    def close(self) -> None:
        """Nothing to stop."""


@dataclass(frozen=True)
class Verdict:
    """A CISO-like evaluation: one posture check."""

    posture: bool

    @property
    def passed(self) -> bool:
        return self.posture

    def parts(self) -> Mapping[str, float | None]:
        return {"posture": float(self.posture)}

    def to_dict(self) -> dict[str, Any]:
        return {"posture": self.posture, "passed": self.passed}


class PostureTask(Task):
    """Passes when the report says ``{"compliant": true}``; no alerts, graded from the submission only."""

    def __init__(self, spec: ScenarioSpec) -> None:
        super().__init__(spec)
        self.submissions: list[Submission] = []
        self.closed = 0

    def setup(self, backend: Any, seed: int) -> Incident:
        backend.start(self.spec, seed)
        now = backend.clock.now()
        return Incident(injected_at=now, started_at=now, injection_log=("policy removed",))

    def prompt(self, incident: Incident, tools: Any) -> str:
        return f"Check the posture; tools: {', '.join(t.name for t in tools)}"

    def evaluate(self, submission: Submission) -> Verdict:
        self.submissions.append(submission)
        return Verdict(posture=bool((submission.report or {}).get("compliant")))

    def close(self) -> None:
        self.closed += 1


def _posture_env(tmp_path: Path, **kwargs: Any) -> tuple[ITBenchEnv, PostureTask, SnapshotlessBackend]:
    task = PostureTask(itbench_gym.get_spec(SCENARIO))
    backend = SnapshotlessBackend(tmp_path)
    tools: list[Tool] = [WaitTool(), SubmitTool()]
    return ITBenchEnv(task=task, backend=backend, tools=tools, max_steps=5, **kwargs), task, backend


def test_an_env_runs_any_task_on_any_backend(tmp_path: Path) -> None:
    env, task, backend = _posture_env(tmp_path)
    try:
        assert env.scenario is task.spec and env.reward_fn == SparseReward()
        obs, info = env.reset(seed=4)
        assert obs["text"] == "Check the posture; tools: wait, submit" and obs["firing_alerts"] == ""
        assert env.action_space.contains({"tool": "wait", "args": {"seconds": 5}}) and not env.action_space.contains("alerts")
        env.step("wait 30")
        _, reward, terminated, _, info = env.step({"tool": "submit", "args": {"entities": [], "compliant": True}})
        assert terminated and reward == 1.0 and info["evaluation"] == {"posture": True, "passed": True, "reward": 1.0}
        submission = task.submissions[-1]
        assert submission == Submission({"entities": [], "compliant": True}, None, 1_034.0, ("wait 30", submission.commands[1]),
                                        submission.workspace)
        assert submission.workspace is not None and submission.workspace.name == "workspace"  # where the agent's files are
        env.reset(seed=4)
        assert backend.started == [4, 4]  # no snapshots: set up again
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    assert task.closed == 1


def test_out_of_budget_is_a_submission_without_report(tmp_path: Path) -> None:
    env, task, _ = _posture_env(tmp_path, reward_fn=ScoreReward({"posture": 1.0}))
    try:
        env.reset(seed=0)
        for _ in range(4):
            env.step("wait 1")
        _, reward, terminated, truncated, info = env.step("wait 1")
        assert truncated and not terminated and reward == 0.0 and info["evaluation"]["reward"] == 0.0
        assert task.submissions[-1].report is None and task.submissions[-1].submitted_at is None
        assert task.submissions[-1].report_error == "no report submitted before the budget ran out"
    finally:
        env.close()


def test_the_env_refuses_parts_that_do_not_fit(tmp_path: Path) -> None:
    spec = itbench_gym.get_spec(SCENARIO)
    with pytest.raises(TypeError, match="needs a scenario"):
        ITBenchEnv()
    with pytest.raises(ValueError, match="not the task's scenario"):
        ITBenchEnv("SRE-CacheFailure-NoTraces-v0", task=PostureTask(spec), backend=SnapshotlessBackend(tmp_path))
    with pytest.raises(ValueError, match="reward_fn or reward_mode, not both"):
        ITBenchEnv(SCENARIO, reward_fn=SparseReward(), reward_mode="score", backend=SnapshotlessBackend(tmp_path))
    with pytest.raises(ValueError, match="reward_mode must be 'sparse', 'score' or a callable"):
        ITBenchEnv(SCENARIO, reward_mode="dense", backend=SnapshotlessBackend(tmp_path))
    env = itbench_gym.make(SCENARIO, task=PostureTask(spec), backend=SnapshotlessBackend(tmp_path), tools=[SubmitTool()])
    try:
        unwrapped = env.unwrapped
        assert isinstance(unwrapped, ITBenchEnv) and isinstance(unwrapped.task, PostureTask)
        assert unwrapped.action_space.samples == ("submit",)
    finally:
        env.close()


# -- incidents shared by the backends of a process ---------------------------------------------------


def test_incidents_are_shared_by_every_backend_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from itbench_gym.backends.sim import backend as sim_backend
    from itbench_gym.backends.sim.incidents import IncidentCache

    monkeypatch.setattr(sim_backend, "SHARED_INCIDENTS", IncidentCache(size=4))
    spec = itbench_gym.get_spec(SCENARIO)
    backend, other = SimBackend(), SimBackend()
    try:
        backend.start(spec, 0)
        assert backend.restore_incident("nothing saved") is None
        at = backend.clock.now()
        backend.save_incident("first", "record 1")
        backend.advance(60)
        assert backend.restore_incident("first") == "record 1" and backend.clock.now() == at
        backend.close()
        assert other.restore_incident("first") == "record 1" and other.clock.now() == at  # close keeps them
        for key in range(4):  # the oldest of five is dropped
            other.save_incident(key, key)
        assert other.restore_incident("first") is None and other.restore_incident(0) == 0
        assert SimBackend(PROJECT_ROOT / "tests").restore_incident(0) is None  # another apps' folder: another key
    finally:
        backend.close()
        other.close()


def test_an_incident_replays_on_another_backend_exactly_as_on_its_own() -> None:
    """A second env of the process resets a seed the first set up without injecting, and what both see
    from then on is the same."""
    spec = itbench_gym.get_spec(SCENARIO)
    first, second = SRETask(spec), SRETask(spec)
    backends = SimBackend(), SimBackend()
    query = 'sum by (service_name) (rate(traces_span_metrics_calls_total{status_code="STATUS_CODE_ERROR"}[2m]))'
    try:
        incident = first.setup(backends[0], 7)
        assert second.setup(backends[1], 7) is incident
        seen = []
        for task, backend in zip((first, second), backends, strict=True):
            backend.advance(300)
            assert task._probe is not None
            seen.append((backend.clock.now(), task.firing_alerts(), task._probe.vector_at(query, "service_name", backend.clock.now()),
                         sorted((p.name, p.phase, p.ready) for p in task._probe.pods().pods)))
        assert seen[0] == seen[1] and seen[0][1] and seen[0][2]
    finally:
        for task in (first, second):
            task.close()
        for backend in backends:
            backend.close()


def test_sre_incidents_replay_across_tasks_and_envs_sharing_a_backend() -> None:
    spec = itbench_gym.get_spec(SCENARIO)
    backend = SimBackend()
    first, second = SRETask(spec), SRETask(spec)
    try:
        incident = first.setup(backend, 5)
        assert incident.injected_at < incident.started_at and incident.baseline is not None and incident.injection_log
        assert any(a["alertname"] == "HighRequestErrorRate" for a in incident.alerts)
        backend.advance(300)
        assert second.setup(backend, 5) is incident and backend.clock.now() == incident.started_at
        assert first.firing_alerts() == second.firing_alerts() != []
        other = SRETask(replace(spec, alert_wait_timeout=spec.alert_wait_timeout + 1))
        assert other.setup(backend, 5) is not incident  # a different spec never shares an incident
    finally:
        for task in (first, second):
            task.close()
        backend.close()


def test_the_env_action_space_holds_tool_calls_and_its_samples() -> None:
    env = itbench_gym.make(SCENARIO)
    try:
        space = env.action_space
        assert space.contains({"tool": "kubectl", "args": {"argv": ["get", "pods", "-n", "otel-demo"]}})
        assert space.contains({"tool": "topology", "args": {"focus": "Deployment/recommendation", "depth": 2}})
        assert space.contains("kubectl get pods -n otel-demo") and not space.contains({"tool": "kubectl", "args": []})
        assert isinstance(space, ActionSpace) and len(space.samples) == 6 and all("otel-demo" in a for a in space.samples[:3])
    finally:
        env.close()


def test_the_alert_wait_polls_when_the_rules_evaluate_next_and_never_past_its_deadline() -> None:
    assert poll_delay(RulePoll([], 1030.0), now=1000.0, deadline=2000.0) == 30.0
    assert poll_delay(RulePoll([], None), now=1000.0, deadline=2000.0) == ALERT_POLL_SECONDS  # not evaluated yet
    assert poll_delay(RulePoll([], 990.0), now=1000.0, deadline=2000.0) == ALERT_POLL_SECONDS  # an overdue group
    assert poll_delay(RulePoll([], 1300.0), now=1000.0, deadline=1010.0) == 10.0


def _rule(for_s: float, *alerts: dict[str, Any], name: str = "HighRequestErrorRate") -> RuleState:
    return RuleState(name, for_s, alerts, next_evaluation=1030.0, interval=30.0)


def _alert(state: str, active_at: str, service: str = "frontend") -> dict[str, Any]:
    return {"labels": {"alertname": "HighRequestErrorRate", "service_name": service}, "state": state, "activeAt": active_at}


def test_the_alert_wait_sleeps_through_evaluations_at_which_the_alerts_cannot_all_fire_yet() -> None:
    """A rule's ``for`` bounds when its alert can fire: the wait skips the polls before that, and
    lands on the evaluation where it could (so the incident starts when it would have)."""
    frontend = AlertMatcher("HighRequestErrorRate", {"service_name": "frontend"})
    quiet = RulePoll([], 1030.0, (_rule(300.0),))
    assert poll_delay(quiet, now=1000.0, deadline=5000.0, missing=[frontend]) == 330.0  # pending at 1030 at the earliest
    pending = RulePoll([], 1030.0, (_rule(300.0, _alert("pending", "1970-01-01T00:16:40Z")),))  # active since 1000
    assert poll_delay(pending, now=1000.0, deadline=5000.0, missing=[frontend]) == 300.0
    other = RulePoll([], 1030.0, (_rule(300.0, _alert("firing", "1970-01-01T00:10:00Z", service="cart")),))
    assert poll_delay(other, now=1000.0, deadline=5000.0, missing=[frontend]) == 330.0  # another service's alert
    firing = RulePoll([], 1030.0, (_rule(300.0, _alert("firing", "1970-01-01T00:10:00Z")), _rule(0.0, name="Other")))
    assert poll_delay(firing, now=1000.0, deadline=5000.0, missing=[frontend, AlertMatcher("Other")]) == 30.0
    assert poll_delay(quiet, now=1000.0, deadline=1100.0, missing=[frontend]) == 100.0  # never past the deadline
    unknown = RulePoll([], None, (RuleState("HighRequestErrorRate", 300.0, (), None, 30.0),))
    assert poll_delay(unknown, now=1000.0, deadline=5000.0, missing=[frontend]) == ALERT_POLL_SECONDS


def test_a_finops_scenario_asks_for_a_backend_that_can_snapshot_before_setting_anything_up(tmp_path: Path) -> None:
    task = make_task(itbench_gym.get_spec("FinOps-AutoscalerMisconfiguration-v0"))
    backend = SnapshotlessBackend(tmp_path)
    with pytest.raises(BackendError, match="needs a backend that can snapshot"):
        task.setup(backend, 0)
    assert not backend.started
