"""Ids, make(), list_scenarios(), the did-you-mean error, and how the lazy index reports bad files."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import yaml

import itbench_gym
from itbench_gym import registry
from itbench_gym.paths import specs_dir
from itbench_gym.registry import ScenarioIndex
from itbench_gym.spec import SpecError


def test_ids_registered_with_gymnasium() -> None:
    assert "SRE-CacheFailure-v0" in gym.registry
    assert "SRE-CacheFailure-NoTraces-v0" in gym.registry
    assert itbench_gym.get_spec("SRE-CacheFailure-NoTraces-v0").observability.traces is False


def test_unknown_id_suggests_close_ones() -> None:
    with pytest.raises(gym.error.Error, match="Did you mean: SRE-CacheFailure-v0"):
        itbench_gym.make("SRE-CacheFailur-v0")


def test_an_itbench_id_without_a_library_says_how_to_load_one() -> None:
    code = "import itbench_gym\ntry:\n    itbench_gym.make('ITBench-27-v0')\nexcept itbench_gym.registry.UnknownScenarioError as exc:\n    print(exc)\n"
    env = {k: v for k, v in os.environ.items() if k != "ITBENCH_LIBRARY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    assert "set ITBENCH_LIBRARY to its folder" in out and "itbench_gym.load_itbench_library(folder)" in out


def test_list_scenarios_filters() -> None:
    ids = [s["id"] for s in itbench_gym.list_scenarios(domain="sre")]
    assert "SRE-CacheFailure-v0" in ids and all("-NoTraces-" not in i for i in ids)
    assert itbench_gym.list_scenarios(domain="sre", cls="CacheFailure")[0]["complexity"] == "medium"
    finops = itbench_gym.list_scenarios(domain="finops")
    assert "FinOps-AutoscalerMisconfiguration-v0" in [s["id"] for s in finops] and {s["domain"] for s in finops} == {"finops"}


def test_a_listing_piped_into_a_reader_that_stops_early_ends_without_a_traceback() -> None:
    """`itbench-gym list | head -1`: the CLI stops at the closed pipe as a Unix tool does (status 141).
    The pipe holds one page, less than the listing, so the CLI is still writing when the reader goes."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-m", "itbench_gym.cli", "list"], stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        first = reader.readline()
    assert proc.stderr is not None
    errors = proc.stderr.read()
    assert first.split()[0].startswith(b"CISO-") and proc.wait(timeout=60) == 141 and errors == b""


# --- The lazy index: ids are read cheaply at import; bad files are reported on use, never dropped. ---

CACHE_FAILURE = specs_dir() / "sre" / "cache-failure.yaml"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(CACHE_FAILURE.read_text())
    return doc


def _write(folder: Path, name: str, doc: dict[str, Any] | str) -> Path:
    path = folder / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def test_index_registers_ids_without_validating(tmp_path: Path) -> None:
    bad = _doc()
    bad["metadata"]["id"] = "SRE-Broken-v0"
    del bad["budget"]["max_steps"]
    good, broken = _write(tmp_path, "a.yaml", _doc()), _write(tmp_path, "b.yaml", bad)
    index = ScenarioIndex([good, broken])
    assert index.ids() == ["SRE-Broken-NoLogs-v0", "SRE-Broken-NoTraces-v0", "SRE-Broken-v0",
                           "SRE-CacheFailure-NoLogs-v0", "SRE-CacheFailure-NoTraces-v0", "SRE-CacheFailure-v0"]
    assert index.spec("SRE-CacheFailure-NoLogs-v0").observability.logs is False
    assert index.spec("SRE-CacheFailure-v0") is index.spec("SRE-CacheFailure-v0")  # validated once
    # The bad file's problems, in the loader's wording, when that scenario (or a variant) is made ...
    for sid in ("SRE-Broken-v0", "SRE-Broken-NoTraces-v0"):
        with pytest.raises(SpecError) as err:
            index.spec(sid)
        assert err.value.source == str(broken) and err.value.path == "budget" and "max_steps" in err.value.message
    # ... and when the scenarios are listed.
    with pytest.raises(SpecError, match=r"b\.yaml: budget: 'max_steps' is a required property"):
        index.base_specs()


def test_unreadable_file_is_reported_when_listing_or_on_an_unregistered_id(tmp_path: Path) -> None:
    good = _write(tmp_path, "a.yaml", _doc())
    broken = _write(tmp_path, "b.yaml", "metadata:\n  id: [unclosed\n")
    index = ScenarioIndex([good, broken])
    assert index.unread == (broken,) and "SRE-CacheFailure-v0" in index.ids()
    assert index.spec("SRE-CacheFailure-v0").id == "SRE-CacheFailure-v0"
    for use in (index.base_specs, lambda: index.spec("SRE-Missing-v0")):
        with pytest.raises(SpecError, match=r"b\.yaml: <root>: invalid YAML: line 3, column 1"):
            use()


def test_id_of_the_wrong_form_is_left_to_the_schema(tmp_path: Path) -> None:
    doc = _doc()
    doc["metadata"]["id"] = "not an id"
    index = ScenarioIndex([_write(tmp_path, "a.yaml", doc)])
    assert index.ids() == []  # Gymnasium could not register it
    with pytest.raises(SpecError, match=r"a\.yaml: metadata\.id: 'not an id' does not match"):
        index.spec("SRE-CacheFailure-v0")


def test_duplicate_id_is_an_error_of_the_second_file(tmp_path: Path) -> None:
    a, b = _write(tmp_path, "a.yaml", _doc()), _write(tmp_path, "b.yaml", _doc())
    index = ScenarioIndex([a, b])
    for use in (lambda: index.spec("SRE-CacheFailure-NoLogs-v0"), index.base_specs):
        with pytest.raises(SpecError) as err:
            use()
        assert str(err.value) == f"{b}: metadata.id: duplicate id 'SRE-CacheFailure-v0', also in {a}"


def test_file_changed_since_import_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, "a.yaml", _doc())
    index = ScenarioIndex([path])
    doc = _doc()
    doc["metadata"]["id"] = "SRE-Renamed-v0"
    _write(tmp_path, "a.yaml", doc)
    with pytest.raises(SpecError, match="'SRE-Renamed-v0' is not the id registered at import"):
        index.spec("SRE-CacheFailure-v0")


def test_registering_warns_about_an_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = _write(tmp_path, "b.yaml", "metadata: [\n")
    monkeypatch.setattr(registry, "_index", lambda: ScenarioIndex([broken]))
    with pytest.warns(UserWarning, match=r"b\.yaml: scenario not registered, its metadata\.id cannot be read"):
        registry.register_all()
