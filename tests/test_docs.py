"""The rendered env documentation in docs/ stays in step with the class docstring and the catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SHARED
from itbench_gym.cli import render_env_doc

DOC = Path(__file__).resolve().parents[1] / "docs" / "environment.md"


@pytest.mark.skipif(not DOC.exists(), reason="docs/ is not part of an installed package; run from a checkout")
def test_environment_doc_is_current() -> None:
    assert DOC.read_text() == render_env_doc(), "regenerate with: itbench-gym docs > docs/environment.md"


def test_doc_has_gymnasium_sections() -> None:
    text = render_env_doc()
    for section in ("Description", "Action Space", "Observation Space", "Rewards", "Starting State", "Episode End", "Arguments", "Version History"):
        assert f"### {section}" in text
    assert "`SRE-CacheFailure-v0`" in text


@pytest.mark.skipif(not (SHARED / "itbench" / "scenarios").is_dir(), reason="needs ITBench's library beside the project (../shared/itbench) to load it")
def test_doc_lists_the_shipped_scenarios_whatever_library_is_loaded() -> None:
    from itbench_gym.registry import list_scenarios, load_itbench_library

    load_itbench_library(SHARED / "itbench")
    assert any(s["id"].startswith("ITBench-") for s in list_scenarios())
    assert "`ITBench-" not in render_env_doc()
