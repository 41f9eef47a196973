"""The benchmark harness: synthetic apps load and run in the twin and grow with N; the report files keep their shape.

No timing is asserted here: speed is measured by ``python -m benchmarks``, not tested.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.report import JSON_NAME, MARKDOWN_NAME, Report, Row, Section
from benchmarks.synthetic import FRONTEND, NAMESPACE, write_app

from itbench_gym.backends.sim.app.model import AppModel
from itbench_gym.backends.sim.twin import Twin
from itbench_gym.paths import envs_dir


def _app_counts(tmp_path: Path, size: int) -> dict[str, int]:
    """Services, running pods and series of the app after three minutes in the twin (its collector
    flushes the span metrics a minute after it starts, and Prometheus scrapes them after that)."""
    app = write_app(tmp_path / f"app-{size}", size, seed=size)
    twin = Twin(app.directory, seed=0)
    twin.advance(180)
    pods = twin.cluster.store.list("Pod", NAMESPACE)
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    calls = twin.tsdb.series({"__name__": "traces_span_metrics_calls_total", "namespace": NAMESPACE})
    assert app.pods == len(pods) == len(running), "every pod the generator asked for runs"
    return {"services": len(twin.model.spec.services), "pods": len(running), "span_services": len({s["service_name"] for s in calls}),
            "series": len(twin.tsdb.series({"namespace": NAMESPACE}))}


def test_synthetic_apps_run_and_scale_with_size(tmp_path: Path) -> None:
    small, large = _app_counts(tmp_path, 5), _app_counts(tmp_path, 20)
    assert small["services"] == 6 and large["services"] == 21  # the load generator besides the N services
    assert small["span_services"] == 6 and large["span_services"] == 21, "every service serves traffic"
    assert large["pods"] > 3 * small["pods"] - 2
    assert large["series"] > 2 * small["series"]


def test_synthetic_app_is_a_seeded_dag_rooted_at_the_frontend(tmp_path: Path) -> None:
    a = write_app(tmp_path / "a", 30, seed=7)
    b = write_app(tmp_path / "b", 30, seed=7)
    assert (a.directory / "app.yaml").read_text() == (b.directory / "app.yaml").read_text()
    spec = AppModel.load(a.directory, seed=0).spec  # loading checks the graph is acyclic
    callees = {c.service for s in spec.services.values() for op in s.operations.values() for c in op.calls}
    assert callees == set(spec.services) - {spec.load_service}
    assert {c.service for op in spec.services[spec.load_service].operations.values() for c in op.calls} == {FRONTEND}
    assert len({s.language for s in spec.services.values()}) >= 4
    assert {"connection", "request"} <= {c.balance for s in spec.services.values() for op in s.operations.values() for c in op.calls}


def test_harness_writes_the_documented_json_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert harness.main(["--only", "import,synthetic", "--sizes", "5", "--quick", "--out", str(out)]) == 0
    doc = json.loads((out / JSON_NAME).read_text())
    assert doc["schema"] == 1 and doc["options"]["sizes"] == [5]
    assert {"cpu_model", "cores", "python", "kubectl", "itbench_gym", "git_commit"} <= set(doc["machine"])
    assert [s["key"] for s in doc["sections"]] == ["synthetic", "import"]
    for section in doc["sections"]:
        assert section["rows"], section["key"]
        for row in section["rows"]:
            assert row["na"] is None, row
            assert row["summary"]["n"] == len(row["samples"]) > 0
            assert row["summary"]["min"] <= row["summary"]["median"] <= row["summary"]["p95"] <= row["summary"]["max"]
    synthetic = doc["sections"][0]
    assert synthetic["facts"]["sizes"]["5"]["services"] == 5
    markdown = (out / MARKDOWN_NAME).read_text()
    assert markdown == capsys.readouterr().out
    assert "## 5. Scaling with application size" in markdown and "## 7. Import time" in markdown
    assert "| figure | unit | n | median | p95 | min | max |" in markdown


def test_a_figure_that_cannot_be_measured_is_reported_with_its_reason(tmp_path: Path) -> None:
    section = Section("steps", "2. Step latency", [Row("kubectl, bwrap", "ms", na="bubblewrap unavailable"), Row("ok", "ms", [1.0, 3.0])])
    report = Report({"quick": True}, {"python": "3"}, [section], 1.0)
    json_path, md_path = report.write(tmp_path)
    rows = json.loads(json_path.read_text())["sections"][0]["rows"]
    assert rows[0]["summary"] is None and rows[0]["na"] == "bubblewrap unavailable"
    assert rows[1]["summary"]["median"] == 2.0
    assert "| kubectl, bwrap | ms | – | n/a: bubblewrap unavailable | | | |" in md_path.read_text()


def test_a_section_that_raises_becomes_not_available(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def broken(_opts: object) -> Section:
        raise FileNotFoundError("no kubectl here")

    monkeypatch.setattr(harness.MODULES["steps"], "run", broken)
    report = harness.run(harness.options_from(harness_args(["--only", "steps", "--out", str(tmp_path)])))
    (row,) = report.sections[0].rows
    assert row.na == "FileNotFoundError: no kubectl here"


def harness_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    harness.add_arguments(parser)
    return parser.parse_args(argv)


def test_a_large_synthetic_app_runs_on_a_host_large_enough_for_it(tmp_path: Path) -> None:
    """kind's nodes share one host's memory (the twin's OOM killer counts them together): a 400-service
    app on the shop's 16 GB host would have the host's OOM killer take the cluster's own pods."""
    import yaml
    from kubernetes.utils.quantity import parse_quantity

    shop = [d for d in yaml.safe_load_all((envs_dir() / "astronomy-shop" / "cluster" / "nodes.yaml").read_text()) if d]
    app = write_app(tmp_path / "big", 400, seed=1)
    nodes = [d for d in yaml.safe_load_all((app.directory / "cluster" / "nodes.yaml").read_text()) if d]
    host = {float(parse_quantity(n["status"]["capacity"]["memory"])) for n in nodes}
    assert len(nodes) == app.nodes and len(host) == 1, "every kind node reports the one host's memory"
    shop_host = float(parse_quantity(shop[0]["status"]["capacity"]["memory"]))
    assert host.pop() >= shop_host * (app.nodes - 1) / (len(shop) - 1) > shop_host
