"""Baselines on disk (``BaselineStore``): found by every process, never stale, built by one process at a time."""

from __future__ import annotations

import multiprocessing
import shutil
import time
from pathlib import Path

import pytest

from itbench_gym.backends.sim import baselines
from itbench_gym.backends.sim.baselines import BaselineCache, BaselineKey, BaselineStore, default_store, key_digest
from itbench_gym.backends.sim.twin import TwinSnapshot
from itbench_gym.paths import envs_dir
from itbench_gym.spec.model import LoadOptions

APP = envs_dir() / "astronomy-shop"


def _snapshot(marker: int) -> TwinSnapshot:
    """A stand-in snapshot (the store only pickles it): ``seed`` tells which build made it."""
    return TwinSnapshot(now=0.0, next_tick=0.0, seed=marker, store_quotas=(0, 0), cluster=None, tsdb=None, rules=None, model=None)


def _key(app_dir: Path = APP, **changes: object) -> BaselineKey:
    fields: dict[str, object] = {"app_dir": str(app_dir), "seconds": 1800.0, "load": LoadOptions(), "hpa": False, **changes}
    return BaselineKey(**fields)  # type: ignore[arg-type]


def test_a_baseline_built_once_is_found_by_a_new_cache(tmp_path: Path) -> None:
    builds: list[int] = []

    def build() -> TwinSnapshot:
        builds.append(1)
        return _snapshot(len(builds))

    first = BaselineCache(store=lambda: BaselineStore(tmp_path))
    assert first.get(_key(), build).seed == 1
    fresh = BaselineCache(store=lambda: BaselineStore(tmp_path))  # another process' cache
    assert fresh.get(_key(), build).seed == 1 and len(builds) == 1
    assert fresh.get(_key(hpa=True), build).seed == 2  # another key is another baseline


def test_any_change_to_what_a_baseline_depends_on_is_a_new_name(tmp_path: Path) -> None:
    app = tmp_path / "envs" / "astronomy-shop"
    shutil.copytree(APP.parent, tmp_path / "envs")
    before = key_digest(_key(app))
    assert key_digest(_key(app, seconds=600.0)) != before
    assert key_digest(_key(app, load=LoadOptions(users=50))) != before
    (app / "app.yaml").write_text((app / "app.yaml").read_text() + "\n# edited\n")
    baselines._envs_digest.cache_clear()
    assert key_digest(_key(app)) != before


def test_an_unreadable_file_is_built_again_and_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = BaselineStore(tmp_path)
    store.get(_key(), lambda: _snapshot(1))
    (stored,) = tmp_path.glob("*.pickle")
    stored.write_bytes(stored.read_bytes()[:20])
    assert store.get(_key(), lambda: _snapshot(2)).seed == 2
    assert "unreadable" in caplog.text and str(stored) in caplog.text
    assert store.get(_key(), lambda: _snapshot(3)).seed == 2


def test_only_the_most_recently_used_baselines_stay(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, keep=2)
    for users in (1, 2, 3):
        store.get(_key(load=LoadOptions(users=users)), lambda: _snapshot(users))  # noqa: B023 - called at once
        time.sleep(0.01)
    assert len(list(tmp_path.glob("*.pickle"))) == 2
    assert store.get(_key(load=LoadOptions(users=1)), lambda: _snapshot(9)).seed == 9  # the oldest went


def test_the_cache_folder_is_the_projects_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ITBENCH_GYM_CACHE", str(tmp_path))
    assert default_store().directory == tmp_path / "baselines"
    monkeypatch.delenv("ITBENCH_GYM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_store().directory == tmp_path / "xdg" / "itbench-gym" / "baselines"


def _slow_get(directory: str, marks: str) -> None:
    def build() -> TwinSnapshot:
        with open(marks, "a") as f:
            f.write("built\n")
        time.sleep(1.0)
        return _snapshot(1)

    BaselineStore(Path(directory)).get(_key(), build)


def test_processes_that_need_one_baseline_at_once_build_it_once(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_slow_get, args=(str(tmp_path / "cache"), str(marks))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert marks.read_text() == "built\n"
