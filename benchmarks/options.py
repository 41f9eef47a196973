"""What one harness run measures (parsed from the command line) and what its sections share."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: Section keys in report order (the figures of issue 12 §1).
SECTIONS = ("reset", "steps", "episodes", "memory", "synthetic", "vector", "import")
#: The agent the throughput figure plays when none is named: the first of these that exists.
PREFERRED_AGENTS = ("heuristic", "oracle")
FULL_SIZES = (10, 30, 100, 1000)
QUICK_SIZES = (10, 100)
#: The scenario of the sections that measure one (steps, episodes, memory, vector, import) when no
#: ``--scenario`` is given: the SRE incident of the README's example, which every agent can play.
REFERENCE_SCENARIO = "SRE-CacheFailure-v0"


@dataclass(frozen=True)
class Options:
    quick: bool
    out: Path
    only: tuple[str, ...] = SECTIONS
    sizes: tuple[int, ...] = FULL_SIZES
    agent: str | None = None
    scenarios: tuple[str, ...] = ()
    vector_sizes: tuple[int, ...] = (1, 2, 4, 8)

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}


def default_agent() -> str:
    """The heuristic agent when the package has one, else the oracle."""
    from itbench_gym.agents import AGENTS

    return next(name for name in (*PREFERRED_AGENTS, *AGENTS) if name in AGENTS)


def shop_scenarios() -> list[str]:
    """Every registered Astronomy Shop scenario id (variants excluded)."""
    import itbench_gym

    return [s["id"] for s in itbench_gym.list_scenarios() if s["app"] == "astronomy-shop"]


def reference_scenario(opts: Options) -> str:
    """The scenario a single-scenario section measures: the first ``--scenario``, else :data:`REFERENCE_SCENARIO`."""
    return opts.scenarios[0] if opts.scenarios else REFERENCE_SCENARIO


def child_env() -> dict[str, str]:
    """The environment for a child Python that must import this very itbench_gym and benchmarks package."""
    import itbench_gym

    here = [str(Path(itbench_gym.__file__).resolve().parent.parent), str(Path(__file__).resolve().parent.parent)]
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(here + rest))}
