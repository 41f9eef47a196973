"""Batch runs: seeds that do not depend on scheduling, a store that survives SIGKILL, resume, workers, reports."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.runner import leaderboard
from itbench_gym.runner.batch import SelectionError, run_batch, select_scenarios
from itbench_gym.runner.executors import ProcessPool
from itbench_gym.runner.html_report import render
from itbench_gym.runner.jobs import Job, episode_seed
from itbench_gym.runner.store import AgentInfo, EpisodeRecord, ResultStore, StoreError

SCENARIO = "SRE-CorruptImage-v0"
RUNS = 2


def quiet(_line: str) -> None:
    return None


def scores(folder: Path) -> dict[tuple[str, int], tuple[int, dict[str, Any]]]:
    with ResultStore.open_existing(folder) as store:
        return {(r["scenario"], r["run"]): (r["seed"], r["evaluation"]) for r in store.results()}


@pytest.fixture(scope="module")
def noop_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted noop batch, one worker in this process."""
    out = tmp_path_factory.mktemp("noop-run")
    result = run_batch("noop", [SCENARIO], runs=RUNS, out=out, echo=quiet)
    assert (result.ran, result.errors) == (RUNS, 0)
    return out


def test_seeds_derive_from_base_seed_scenario_and_run_only() -> None:
    seeds = {episode_seed(0, s, r) for s in ("SRE-A-v0", "SRE-B-v0") for r in range(3)}
    assert len(seeds) == 6
    assert episode_seed(0, "SRE-A-v0", 1) == episode_seed(0, "SRE-A-v0", 1) != episode_seed(1, "SRE-A-v0", 1)
    assert all(0 <= s < 2**31 for s in seeds)


def test_globs_select_base_scenarios_and_name_variants_explicitly() -> None:
    chosen = select_scenarios(["SRE-Cache*"])
    assert "SRE-CacheFailure-v0" in chosen and not any("-No" in s for s in chosen)
    assert select_scenarios(["SRE-CacheFailure-NoLogs-v0"]) == ["SRE-CacheFailure-NoLogs-v0"]
    with pytest.raises(SelectionError, match="no scenario matches 'SRE-Nothing\\*'"):
        select_scenarios(["SRE-Nothing*"])


def test_noop_fails_every_episode_and_the_store_holds_steps_and_evaluations(noop_run: Path) -> None:
    stored = scores(noop_run)
    assert sorted(stored) == [(SCENARIO, r) for r in range(RUNS)]
    for (_, run), (seed, evaluation) in stored.items():
        assert seed == episode_seed(0, SCENARIO, run)
        assert evaluation["passed"] is False and evaluation["diagnosis"]["fl_pass"] is False
    db = sqlite3.connect(noop_run / "results.sqlite")
    assert db.execute("SELECT COUNT(*) FROM steps WHERE agent='noop'").fetchone()[0] == RUNS  # one submit each
    assert db.execute("SELECT privileged, package_version FROM agents WHERE label='noop'").fetchone()[0] == 0


def test_a_folder_with_results_is_not_mixed_without_resume(noop_run: Path) -> None:
    with pytest.raises(StoreError, match="pass --resume"):
        run_batch("noop", [SCENARIO], runs=RUNS, out=noop_run, echo=quiet)
    again = run_batch("noop", [SCENARIO], runs=RUNS, out=noop_run, resume=True, echo=quiet)
    assert (again.ran, again.skipped) == (0, RUNS)


def test_two_workers_give_the_same_scores_as_one(noop_run: Path, tmp_path: Path) -> None:
    run_batch("noop", [SCENARIO], runs=RUNS, workers=2, out=tmp_path, echo=quiet)
    assert scores(tmp_path) == scores(noop_run)


def test_a_worker_that_dies_costs_only_its_own_episode(noop_run: Path) -> None:
    """A SIGKILLed worker breaks the pool; the batch goes on, and only the episode that killed it is an error."""
    jobs = [Job("dies", "dying_agents:killed", SCENARIO, 0, episode_seed(0, SCENARIO, 0)),
            *(Job("noop", "noop", SCENARIO, run, episode_seed(0, SCENARIO, run)) for run in range(RUNS))]
    records = {(r.agent, r.run): r for r in ProcessPool(2).run(jobs)}
    assert sorted(records) == [("dies", 0), *(("noop", run) for run in range(RUNS))]
    died = records["dies", 0]
    assert died.status == "error" and died.error is not None and "worker process running this episode died" in died.error
    expected = scores(noop_run)
    for run in range(RUNS):
        assert records["noop", run].status == "finished"
        assert (records["noop", run].seed, records["noop", run].evaluation) == expected[SCENARIO, run]


def test_a_run_killed_halfway_then_resumed_ends_as_an_uninterrupted_run(noop_run: Path, tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "itbench_gym.cli", "run", SCENARIO, "--agent", "noop", "--runs", str(RUNS), "--out", str(tmp_path)]
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    db_path, finished, deadline = tmp_path / "results.sqlite", 0, time.monotonic() + 300
    while finished == 0 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
        if db_path.exists():
            with sqlite3.connect(db_path) as db:
                try:
                    finished = db.execute("SELECT COUNT(*) FROM episodes WHERE status='finished'").fetchone()[0]
                except sqlite3.OperationalError:  # the file exists before the run has created its tables
                    continue
    assert child.poll() is None, f"the run ended before it could be killed: {child.stderr.read() if child.stderr else ''}"
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert len(scores(tmp_path)) == 1  # killed halfway: the finished episode is kept, the other was lost
    resumed = run_batch("noop", [SCENARIO], runs=RUNS, out=tmp_path, resume=True, echo=quiet)
    assert (resumed.ran, resumed.skipped) == (1, 1)
    assert scores(tmp_path) == scores(noop_run)


def _record(**changes: Any) -> EpisodeRecord:
    base: dict[str, Any] = dict(agent="a", scenario="S", run=0, seed=1, scenario_version="v", domain="sre", cls="C",
                                complexity="easy", status="finished", error=None, wall_seconds=1.0, sim_seconds=2.0,
                                agent_stats={}, steps=[], evaluation={"passed": True, "reward": 1.0})
    return EpisodeRecord(**{**base, **changes})


def test_an_episode_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        store.register_agent(AgentInfo("a", "a", False, {}, "0"), resume=False)
        with pytest.raises(KeyError):
            store.write(_record(steps=[{"index": 1}]))  # a step without its fields fails after the episode row
        assert store.done("a") == set()
        store.write(_record())
        assert store.done("a") == {("S", 0)}
        with pytest.raises(StoreError, match="another agent or model"):
            store.register_agent(AgentInfo("a", "other:Agent", False, {}, "0"), resume=True)


def test_report_folder_that_is_not_a_results_folder(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no results.sqlite here"):
        leaderboard.load([tmp_path])


def test_the_leaderboard_has_the_papers_columns(noop_run: Path) -> None:
    board = leaderboard.load([noop_run], k_values=(1, 2))
    text = leaderboard.markdown_report(board)
    for column in ("diagnosis pass@1", "FL-NTAM", "FPC-NTAM", "MTTD (s)", "mitigation pass@1", "MTTR (s)",
                   "RC entity@3", "component id", "pass@2", "## SRE", "### SRE by complexity", "### SRE by class"):
        assert column in text
    noop_row = next(line for line in text.splitlines() if line.startswith("| noop | 2 | 1 |"))
    assert "0.000 ± 0.000" in noop_row and "∞ ×2" in noop_row  # never resolved: MTTD/MTTR infinite


def test_cli_report_writes_markdown_and_html(noop_run: Path, tmp_path: Path) -> None:
    from itbench_gym.cli import main

    assert main(["report", str(noop_run), "--k", "1,2", "--markdown", str(tmp_path / "b.md"), "--html", str(tmp_path / "b.html")]) == 0
    assert "| noop |" in (tmp_path / "b.md").read_text()
    page = (tmp_path / "b.html").read_text()
    assert page.count('src="data:image/png;base64,') == 3 and "http" not in page.split("<body>")[1].replace("https://", "")


def test_the_html_report_shows_tables_and_plots_in_headless_chromium(noop_run: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Debian's chromium is not installed here (.ci/run installs it)")
    import matplotlib.image

    page = tmp_path / "board.html"
    page.write_text(render(leaderboard.load([noop_run])), encoding="utf-8")
    shot = tmp_path / "board.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}", "--window-size=1400,2400",
                    page.as_uri()], check=True, capture_output=True, timeout=120)
    pixels = matplotlib.image.imread(shot)
    red = (pixels[..., 0] > 0.6) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    assert red.sum() > 500  # the success grid's failed cells (noop fails every episode) are on the page
    dump = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                          check=True, capture_output=True, text=True, timeout=120).stdout
    assert "<table>" in dump and "diagnosis pass@1" in dump and dump.count("<img") == 3


def test_agent_stats_are_stored_with_the_episode(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        store.register_agent(AgentInfo("a", "a", False, {"model": "m"}, "0"), resume=False)
        store.write(_record(agent_stats={"prompt_tokens": 12}))
        (result,) = list(store.results())
    assert result["agent_stats"] == {"prompt_tokens": 12} and json.dumps(result)


def test_a_local_ray_cluster_gives_the_same_scores(noop_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'itbench-gym[ray]')")
    run_batch("noop", [SCENARIO], runs=RUNS, workers=2, executor="ray", out=tmp_path, echo=quiet)
    assert scores(tmp_path) == scores(noop_run)


def _finops_record(agent: str, run: int, diagnosis: bool, mitigation: bool, proximity: dict[str, float | None],
                   mttr: float | None, scenario: str = "FinOps-Scale-v0") -> EpisodeRecord:
    """A FinOps episode with an evaluation in ``FinOpsEvaluation.to_dict``'s shape."""
    names = ("cpu_cost_hourly", "ram_cost_hourly", "cpu_efficiency", "ram_efficiency")
    evaluation = {"domain": "finops", "class": "scale", "passed": diagnosis and mitigation, "success": diagnosis and mitigation,
                  "diagnosis": {"passed": diagnosis}, "mitigation": {"passed": mitigation},
                  "proximity": {n: proximity.get(n) for n in names}, "ttp_seconds": 60.0, "times": {"ttp": 60.0, "mttr": mttr}}
    return _record(agent=agent, scenario=scenario, run=run, seed=run, domain="finops", cls="scale", evaluation=evaluation)


def test_the_leaderboard_shows_the_papers_finops_columns(tmp_path: Path) -> None:
    with ResultStore(tmp_path) as store:
        for label, privileged in (("a", False), ("b", False), ("oracle", True)):
            store.register_agent(AgentInfo(label, label, privileged, {}, "0"), resume=False)
        store.write(_finops_record("a", 0, True, True, {"cpu_cost_hourly": 0.8, "ram_cost_hourly": 0.6, "cpu_efficiency": 0.5}, 300.0))
        store.write(_finops_record("a", 1, True, False, {"cpu_cost_hourly": 0.4, "cpu_efficiency": 0.7}, None))
        full = dict.fromkeys(("cpu_cost_hourly", "ram_cost_hourly", "cpu_efficiency", "ram_efficiency"), 1.0)
        store.write(_finops_record("b", 0, False, True, full, 100.0))
        store.write(_finops_record("b", 1, False, True, full, 200.0))
        store.write(_finops_record("oracle", 0, True, True, full, 50.0))
        store.write(_finops_record("oracle", 1, True, True, full, 50.0))
    board = leaderboard.load([tmp_path], k_values=(1, 2))
    header, rows = leaderboard.finops_cells(board)
    assert header == ["agent", "episodes", "scenarios", "diagnosis pass@1", "mitigation pass@1", "CPU cost proximity",
                      "memory cost proximity", "CPU efficiency proximity", "memory efficiency proximity", "MTTR (s)",
                      "pass@1", "pass@2"]
    # Ranked by mitigation pass@1 (b above a despite a's diagnosis); the privileged oracle is last, whatever its score.
    assert [agent for agent, _ in rows] == ["b", "a", "oracle"]
    cells = dict(rows)
    # Null proximities are left out of the mean: one value has no SE, none at all is "–"; a never-cleared MTTR is ∞.
    assert cells["a"] == ["a", "2", "1", "1.000 ± 0.000", "0.500 ± 0.500", "0.600 ± 0.200", "0.600", "0.600 ± 0.100", "–",
                          "300.0 (∞ ×1)", "0.500", "1.000"]
    assert cells["b"][3:] == ["0.000 ± 0.000", "1.000 ± 0.000", *["1.000 ± 0.000"] * 4, "150.0 ± 50.0", "0.000", "0.000"]

    text = leaderboard.markdown_report(board)
    assert "## FinOps" in text and "## SRE" not in text and "## CISO" not in text
    lines = text.splitlines()
    assert lines[lines.index("## FinOps") + 2].startswith("Proximity: 1 − |observed − optimal| / optimal")
    table = [line for line in lines if line.startswith("| ")]
    assert table[0] == "| " + " | ".join(header) + " |"
    assert table[1:] == ["| " + " | ".join(c) + " |" for c in (cells["b"], cells["a"], ["oracle (privileged)", *cells["oracle"][1:]])]

    # what `itbench-gym run` prints after a FinOps batch: the FinOps table, not an empty SRE one
    summary = leaderboard.summary_markdown(board)
    assert summary.startswith("FinOps\n\n| agent |") and "(no finished episodes)" not in summary

    page = render(board)
    section = page.split("<h2>FinOps</h2>")[1]
    assert "1 − |observed − optimal| / optimal" in section and "<th>memory efficiency proximity</th>" in section
    assert "<tr><td>" + "</td><td>".join(cells["a"]) + "</td></tr>" in section
    assert '<tr class="privileged"><td>oracle</td>' in section and section.index(">b<") < section.index(">a<") < section.index(">oracle<")
