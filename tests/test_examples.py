"""The examples run and do what they say."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason="examples/ is not part of an installed package; run from a checkout")
def test_quickstart_solves_the_incident(capsys: pytest.CaptureFixture[str]) -> None:
    evaluation = runpy.run_path(str(EXAMPLES / "quickstart.py"))["main"]()
    assert evaluation["diagnosis"]["fl_pass"] is True
    assert evaluation["mitigation"]["passed"] is True, evaluation["mitigation"]["reasons"]
    assert "ECONNREFUSED" in capsys.readouterr().out  # the frontend's grpc-js wording of the refused connection
