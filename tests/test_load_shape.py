"""``environment.load.shape``: a Locust LoadTestShape the twin mounts into the load generator and
runs the way Locust would (users by run time, ramping at the spawn rate), checked through the
twin's metrics and API store, and against the shipped Locust program itself."""

from __future__ import annotations

import ast
import copy
import json
import math
import sys
import types
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.backends.sim.app.model import ramped_users, shaped_users
from itbench_gym.backends.sim.app.spec import ShapeProgram, load_spec
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.paths import envs_dir
from itbench_gym.registry import get_spec
from itbench_gym.spec.loader import SpecError, read_document, spec_from_document
from itbench_gym.spec.loadshape import DailyShape, LoadShape, LoadStep, StepsShape
from itbench_gym.spec.model import LoadOptions

SCENARIO = "SRE-CacheFailure-v0"
APP = load_spec(envs_dir() / "astronomy-shop")
NS = APP.namespace
#: The surge: 50 users, 150 from 600 s, 50 again from 1500 s (the generator's spawn rate: 5 a second).
SURGE = StepsShape((LoadStep(0, 50), LoadStep(600, 150), LoadStep(1500, 50)))
FRONT = 'sum(rate(traces_span_metrics_calls_total{service_name="frontend-proxy",span_kind="SPAN_KIND_SERVER"}[5m]))'
#: Run times (s) at which the windows of :func:`_rate` lie inside each level (ramps of 20 s at 5 users
#: a second excluded).
BEFORE, DURING, AFTER = (480, 600), (1000, 1260, 1500), (1900, 2160, 2400)


def _program() -> ShapeProgram:
    assert APP.load_shape is not None
    return APP.load_shape


def _generator_pod(backend: SimBackend) -> dict[str, Any]:
    workload = APP.services[APP.load_service].workload
    pods = [p for p in backend.twin.cluster.store.list("Pod", NS)
            if p["metadata"]["name"].startswith(workload + "-") and not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 1
    return pods[0]


def _started(pod: dict[str, Any]) -> float:
    """When the generator's process started: Locust's run time counts from there."""
    from datetime import datetime

    (status,) = pod["status"]["containerStatuses"]
    return datetime.fromisoformat(status["state"]["running"]["startedAt"].replace("Z", "+00:00")).timestamp()


def _rate(backend: SimBackend, at: float) -> float:
    """The front end's request rate over the 5 minutes to ``at``, averaged over a minute of
    evaluation times (the window's edges fall on different scrapes of the 30 s interval)."""
    out = []
    for offset in (0, 15, 30, 45):
        (sample,) = backend.twin.engine.instant(FRONT, at - offset).data
        out.append(float(sample.value))
    return sum(out) / len(out)


def _mean_rate(backend: SimBackend, start: float, run_times: tuple[int, ...]) -> float:
    return sum(_rate(backend, start + r) for r in run_times) / len(run_times)


@pytest.fixture(scope="module")
def surge() -> Iterator[tuple[SimBackend, float]]:
    """One twin whose generator ran the surge and 900 s of its aftermath; and the generator's start."""
    backend = SimBackend()
    backend.start(replace(get_spec(SCENARIO), load=LoadOptions(shape=SURGE), baseline_seconds=300.0), 0)
    start = _started(_generator_pod(backend))
    backend.advance(start + AFTER[-1] - backend.clock.now())
    yield backend, start
    backend.close()


def test_surge_triples_the_front_end_rate_and_goes_back(surge: tuple[SimBackend, float]) -> None:
    """Requests per user are 1 / (wait between tasks + task time): the 1-10 s wait (5.5 s mean) dwarfs
    a task's latency, so three times the users make close to three times the requests. The bounds
    allow the noise of 5-minute windows (a few per cent) and somewhat slower tasks under the load."""
    backend, start = surge
    before, during, after = (_mean_rate(backend, start, times) for times in (BEFORE, DURING, AFTER))
    assert before > 0
    assert 2.7 < during / before < 3.15
    assert 0.9 < after / before < 1.1


def test_the_generator_mounts_the_shape(surge: tuple[SimBackend, float]) -> None:
    """The ConfigMap holds the shipped program and the scenario's shape as JSON; the running pod
    mounts it and lists the program after the image's own locustfile."""
    backend, _ = surge
    program = _program()
    config = backend.twin.cluster.store.get("ConfigMap", NS, program.config_map)
    assert config["data"][program.program.name] == program.program.read_text()
    assert json.loads(config["data"][program.data]) == SURGE.document()
    pod = _generator_pod(backend)
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == APP.services[APP.load_service].container]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[program.locustfile_env] == f"{program.default_locustfile},{program.mount_path}/{program.program.name}"
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == program.mount_path]
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == program.config_map


def test_no_shape_leaves_the_manifests_alone(surge: tuple[SimBackend, float]) -> None:
    backend, _ = surge
    twin = backend.twin
    assert twin._with_load(twin.model.manifests(), LoadOptions()) == twin.model.manifests()


def test_a_running_generator_keeps_the_shape_it_started_with(surge: tuple[SimBackend, float]) -> None:
    """Locust reads its locustfiles at start: editing the ConfigMap changes nothing until the pod is
    replaced; the new pod runs the new shape (150 users from the start: three times the requests)."""
    backend, _ = surge
    store = backend.twin.cluster.store
    program = _program()
    config = copy.deepcopy(store.get("ConfigMap", NS, program.config_map))
    config["data"][program.data] = json.dumps(StepsShape((LoadStep(0, 150),)).document())
    backend.twin.cluster.apply([config])
    steady = _rate(backend, backend.clock.now())
    backend.advance(300)
    assert 0.9 < _rate(backend, backend.clock.now()) / steady < 1.1
    store.delete("Pod", NS, _generator_pod(backend)["metadata"]["name"])
    backend.advance(60)
    start = _started(_generator_pod(backend))
    backend.advance(start + 420 - backend.clock.now())
    assert 2.7 < _rate(backend, backend.clock.now()) / steady < 3.15


def test_daily_users_follow_the_cosine() -> None:
    """max at the peak, min half a period later, the midpoint a quarter period away, 3/4 of the way
    up a sixth of a period from the peak; whole users, and the cycle repeats."""
    day = DailyShape(min_users=20, max_users=100, peak_at=3600.0, period=86400.0)
    assert day.tick(3600.0)[0] == 100
    assert day.tick(3600.0 + 43200.0)[0] == 20
    assert day.tick(3600.0 + 21600.0)[0] == 60
    assert day.tick(3600.0 - 14400.0 + 86400.0)[0] == 80
    assert day.tick(3600.0 + 5 * 86400.0)[0] == 100
    assert all(isinstance(day.tick(t)[0], int) for t in range(0, 86400, 977))


def test_daily_shape_is_what_the_pod_mounts() -> None:
    """A daily scenario's shape reaches the generator's mounted ConfigMap as JSON, and the twin's
    generator reads it back from the mount at its start."""
    day = DailyShape(min_users=10, max_users=40, peak_at=600.0, period=3600.0)
    backend = SimBackend()
    try:
        backend.start(replace(get_spec(SCENARIO), load=LoadOptions(shape=day), baseline_seconds=60.0), 0)
        program = _program()
        config = backend.twin.cluster.store.get("ConfigMap", NS, program.config_map)
        assert json.loads(config["data"][program.data]) == {"kind": "daily", "min_users": 10, "max_users": 40,
                                                              "peak_at": 600.0, "period": 3600.0}
        assert config["data"][program.program.name] == program.program.read_text()
        # the model's record of the running process (Instance.load_shape): what it read from the mount
        (read,) = [i.load_shape for i in backend.twin.model._state.instances.values() if i.service == APP.load_service]
        assert read == day
    finally:
        backend.close()


def test_ramp_between_levels_is_at_the_spawn_rate() -> None:
    """Locust starts or stops ``spawn_rate`` users a second towards each new level: 50 -> 150 at 5/s
    takes 20 s (mean 100 over it), 150 -> 50 at a step's own 10/s takes 10 s."""
    shape = StepsShape((LoadStep(0, 50), LoadStep(600, 150), LoadStep(1500, 50, spawn_rate=10.0)))
    state = (0.0, 0.0)
    mean, state = shaped_users(shape, 5.0, state, 580.0, 600.0)
    assert mean == pytest.approx(50.0) and state == (580.0, pytest.approx(50.0))
    mean, state = shaped_users(shape, 5.0, state, 600.0, 620.0)
    assert mean == pytest.approx(100.0)
    mean, state = shaped_users(shape, 5.0, state, 620.0, 640.0)
    assert mean == pytest.approx(150.0)
    mean, state = shaped_users(shape, 5.0, state, 1500.0, 1520.0)
    assert mean == pytest.approx((100.0 * 10 + 50.0 * 10) / 20)


def test_one_level_ramps_as_without_a_shape() -> None:
    """A single step is the generator's own start: the same ramp as :func:`ramped_users`, tick by tick."""
    shape = StepsShape((LoadStep(0, 50),))
    state = (0.0, 0.0)
    for since in range(-15, 60, 15):
        mean, state = shaped_users(shape, 2.0, state, float(since), since + 15.0)
        assert mean == pytest.approx(ramped_users(50.0, 2.0, float(since), since + 15.0))


def _program_tree() -> ast.Module:
    return ast.parse(_program().program.read_text(), filename=str(_program().program))


def test_shape_program_is_a_locust_load_test_shape() -> None:
    """Locust is not installed here: the program parses, and defines a subclass of LoadTestShape
    (imported from locust) with a ``tick`` method."""
    tree = _program_tree()
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "locust" for a in n.names}
    assert "LoadTestShape" in imports
    shapes = [n for n in tree.body if isinstance(n, ast.ClassDef)
              and any(isinstance(b, ast.Name) and b.id == "LoadTestShape" for b in n.bases)]
    assert len(shapes) == 1
    assert any(isinstance(f, ast.FunctionDef) and f.name == "tick" for f in shapes[0].body)


class _LoadTestShape:
    """Locust's LoadTestShape as far as the program uses it: a run time and a runner's options."""

    run_time = 0.0
    runner = types.SimpleNamespace(environment=types.SimpleNamespace(parsed_options=types.SimpleNamespace(spawn_rate=3.0)))

    def get_run_time(self) -> float:
        return self.run_time


@pytest.mark.parametrize("shape", [SURGE, DailyShape(5, 75, peak_at=100.0, period=900.0, spawn_rate=2.0)], ids=["steps", "daily"])
def test_shape_program_ticks_as_the_twin(shape: LoadShape, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped program, run against a stand-in for Locust's base class, returns at every run
    time what the twin's generator runs (the default spawn rate: Locust's -r)."""
    program = _program()
    (tmp_path / program.program.name).write_text(program.program.read_text())
    (tmp_path / program.data).write_text(json.dumps(shape.document()))
    monkeypatch.setitem(sys.modules, "locust", types.SimpleNamespace(LoadTestShape=_LoadTestShape))
    namespace: dict[str, Any] = {"__file__": str(tmp_path / program.program.name)}
    exec(compile(_program_tree(), str(program.program), "exec"), namespace)
    (cls,) = [v for v in namespace.values() if isinstance(v, type) and issubclass(v, _LoadTestShape) and v is not _LoadTestShape]
    locust_shape = cls()
    for run_time in [0.0, 1.0, 599.0, 600.0, 601.5, 1499.9, 1500.0, 3000.0, 123.4, 450.0, 775.0]:
        locust_shape.run_time = run_time
        users, rate = shape.tick(run_time)
        assert locust_shape.tick() == (users, 3.0 if rate is None else rate)
        assert isinstance(locust_shape.tick()[0], int) and not math.isnan(locust_shape.tick()[1])


def _problems(shape: Any) -> list[tuple[str, str]]:
    source = get_spec(SCENARIO).source
    doc = read_document(source)
    doc["environment"].setdefault("load", {})["shape"] = shape
    with pytest.raises(SpecError) as caught:
        spec_from_document(doc, source)
    assert str(source) in str(caught.value)
    return [(p.path, p.message) for p in caught.value.problems]


@pytest.mark.parametrize(("shape", "path", "words"), [
    ({"kind": "steps", "steps": [{"at": 0, "users": 50}, {"at": 900, "users": 150}, {"at": 600, "users": 50}]},
     "environment.load.shape.steps[2].at", "increasing time order"),
    ({"kind": "steps", "steps": [{"at": 60, "users": 50}]}, "environment.load.shape.steps[0].at", "must be at 0"),
    ({"kind": "steps", "steps": [{"at": 0, "users": -5}]}, "environment.load.shape.steps[0].users", "minimum"),
    ({"kind": "daily", "min_users": 100, "max_users": 10}, "environment.load.shape.min_users", "more than max_users"),
    ({"kind": "daily", "min_users": 1, "max_users": 10, "peak_at": 90000}, "environment.load.shape.peak_at", "within the period"),
    ({"kind": "daily", "min_users": 1}, "environment.load.shape", "max_users"),
    ({"kind": "surge", "users": 10}, "environment.load.shape.kind", "surge"),
    ({"kind": "steady", "users": 10}, "environment.load.shape", "users"),
], ids=["steps-out-of-order", "steps-late-start", "negative-users", "daily-range", "daily-peak", "daily-missing",
        "unknown-kind", "steady-extra"])
def test_bad_shape_is_a_spec_error_naming_the_field(shape: Any, path: str, words: str) -> None:
    problems = _problems(shape)
    assert any(p == path and words in message for p, message in problems), problems


def test_spec_builds_frozen_hashable_shapes() -> None:
    """Load options are part of the shared baselines' key: a shape is a frozen value; steady is none."""
    source = get_spec(SCENARIO).source
    doc = read_document(source)
    doc["environment"]["load"] = {"users": 50, "shape": {"kind": "steps", "steps": [{"at": 0, "users": 50}, {"at": 600, "users": 150}]}}
    load = spec_from_document(doc, source).load
    assert load.shape == StepsShape((LoadStep(0.0, 50), LoadStep(600.0, 150)))
    assert hash(load) == hash(replace(load))
    doc["environment"]["load"] = {"shape": {"kind": "steady"}}
    assert spec_from_document(doc, source).load == LoadOptions()
