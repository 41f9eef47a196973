"""Scenario specs: every shipped file is valid, and bad files say where they are wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from itbench_gym.paths import specs_dir
from itbench_gym.spec import SpecError, load_all_specs, load_spec

CACHE_FAILURE = specs_dir() / "sre" / "cache-failure.yaml"


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _doc() -> dict:
    return yaml.safe_load(CACHE_FAILURE.read_text())


def test_shipped_specs_load() -> None:
    specs = {s.id: s for s in load_all_specs()}
    spec = specs["SRE-CacheFailure-v0"]
    assert spec.domain == "sre" and spec.cls == "CacheFailure"
    assert spec.complexity.level == "medium"
    assert [f.id for f in spec.faults][0] == "opentelemetry-demo-feature-flag"
    assert str(spec.triggering_alerts[0]) == "HighRequestErrorRate{namespace=otel-demo,service_name=frontend}"


def test_missing_field_names_file_and_path(tmp_path: Path) -> None:
    doc = _doc()
    del doc["budget"]["max_steps"]
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    assert err.value.path == "budget"
    assert "max_steps" in err.value.message and "bad.yaml" in str(err.value)


def test_wrong_type_deep_in_the_tree(tmp_path: Path) -> None:
    doc = _doc()
    doc["metadata"]["complexity"]["factors"]["technologies"] = "three"
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    assert err.value.path == "metadata.complexity.factors.technologies"
    assert "integer" in err.value.message


def test_fault_args_are_checked_against_the_catalogue(tmp_path: Path) -> None:
    doc = _doc()
    doc["faults"][0]["args"]["flag"] = {"name": "recommendationCacheFailure"}
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    assert err.value.path == "faults[0].args.flag"
    assert "state" in err.value.message


def test_unknown_fault_is_reported(tmp_path: Path) -> None:
    doc = _doc()
    doc["faults"][0]["id"] = "melt-the-datacenter"
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    assert err.value.path == "faults[0].id" and "unknown fault" in err.value.message


def test_propagation_must_reference_groups(tmp_path: Path) -> None:
    doc = _doc()
    doc["ground_truth"]["propagations"][0]["target"] = "nowhere-1"
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    assert err.value.path == "ground_truth.propagations[0].target"


def test_invalid_yaml_gives_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("metadata: [unclosed\n")
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert "invalid YAML" in err.value.message and "line" in err.value.message


def test_every_schema_violation_is_listed(tmp_path: Path) -> None:
    doc = _doc()
    del doc["budget"]["max_steps"]
    doc["metadata"]["complexity"]["level"] = "extreme"
    doc["alerts"]["triggering"][0]["labels"]["namespace"] = 7
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    paths = [p.path for p in err.value.problems]
    assert paths == ["metadata.complexity.level", "alerts.triggering[0].labels.namespace", "budget"]  # file order
    assert str(err.value).startswith(f"{tmp_path / 'bad.yaml'}: 3 problems:\n")


def test_ground_truth_problems_are_spec_problems(tmp_path: Path) -> None:
    doc = _doc()
    doc["ground_truth"]["groups"][0]["root_cause"] = False
    doc["ground_truth"]["aliases"][0].append("ghost-1")
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    assert {(p.path, p.message) for p in err.value.problems} == {
        ("ground_truth.groups", "no group has root_cause: true"),
        ("ground_truth.aliases[0][2]", "unknown group id 'ghost-1'"),
    }
