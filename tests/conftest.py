"""Fixtures shared by the test modules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from itbench_gym.backends.base import Backend, Endpoints
from itbench_gym.tools import ToolContext

ContextFactory = Callable[[Backend, Endpoints], ToolContext]

#: The project root, and the reference data beside it (``../shared``), which may be absent.
PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED = PROJECT_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def tool_context(tmp_path_factory: pytest.TempPathFactory) -> ContextFactory:
    """Build the ``ToolContext`` an env would give its tools, with a fresh workspace and scratch dir."""

    def make(backend: Backend, endpoints: Endpoints, time_left: float = 3600.0) -> ToolContext:
        root: Path = tmp_path_factory.mktemp("episode")
        (root / "workspace").mkdir()
        (root / "scratch").mkdir()
        return ToolContext(endpoints=endpoints, advance=backend.advance, now=backend.clock.now,
                           time_left=lambda: time_left, workspace=root / "workspace", scratch=root / "scratch")

    return make
