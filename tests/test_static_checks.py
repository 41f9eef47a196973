"""The linter and the type checker pass: ``ruff check src tests benchmarks`` and ``mypy`` (strict, configured in pyproject.toml)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

#: The project root: where pyproject.toml, which configures both tools, lives.
ROOT = Path(__file__).resolve().parents[1]


def _run(tool: str, *args: str) -> None:
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (it is in the 'test' extra: pip install -e '.[test]')")
    proc = subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"{tool} {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}", pytrace=False)


def test_ruff_passes() -> None:
    _run("ruff", "check", "src", "tests", "benchmarks")


def test_mypy_passes() -> None:
    _run("mypy")
