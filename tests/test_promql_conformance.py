"""Prometheus' own promqltest suite run against our engine, and the runner's own behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from itbench_gym.backends.sim.promql.promqltest import main, run_files

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "promql"


@pytest.mark.skipif(not CONFORMANCE.is_dir(), reason=f"reference suite not present at {CONFORMANCE}")
def test_upstream_promqltest_files_pass_at_least_95_percent() -> None:
    results = run_files(sorted(CONFORMANCE.glob("*.test")))
    assert results, "no .test files found"
    assert not [r.error for r in results if r.error]
    passed = sum(r.count("pass") for r in results)
    failed = sum(r.count("fail") for r in results)
    failures = [f"{r.path.name}:{c.line} {c.expr}: {c.message}" for r in results for c in r.cases if c.status == "fail"]
    assert passed + failed > 500
    assert passed / (passed + failed) >= 0.95, failures


SCRIPT = """
load 1m
    m{a="x"} 1+1x4 _ stale 9
    h{a="y"} {{schema:0 sum:1 count:1}}

eval instant at 4m m
    m{a="x"} 5

eval range from 0 to 7m step 1m m
    m{a="x"} 1 2 3 4 5 5 _ 9

eval instant at 4m m
    m{a="x"} 6

eval instant at 0m h
    {a="y"} {{schema:0 sum:1 count:1}}

eval instant at 1m sum(
    expect fail

eval instant at 1m rate(m[5m])
    expect info msg: PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: "m" (1:6)
    {a="x"} 0.005
"""


def test_runner_reports_pass_fail_and_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "mini.test"
    script.write_text(SCRIPT)
    (result,) = run_files([script])
    assert result.error == ""
    assert [c.status for c in result.cases] == ["pass", "pass", "fail", "skip", "pass", "pass"]
    assert "expected 6.0" in result.cases[2].message
    assert main([str(script)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "4 passed, 1 failed, 1 skipped"


def test_runner_reports_malformed_scripts(tmp_path: Path) -> None:
    script = tmp_path / "bad.test"
    script.write_text("load 1m\n    m 1 2 zz\n")
    (result,) = run_files([script])
    assert "invalid series value 'zz'" in result.error
