"""ITBench scenarios as Gymnasium environments.

>>> import itbench_gym
>>> env = itbench_gym.make("SRE-CacheFailure-v0")
>>> obs, info = env.reset(seed=0)

Importing registers every scenario id with Gymnasium and nothing more: specs are validated, and the
env (numpy, the tools, the twin, the Kubernetes client) imported, when a scenario is first made.
``ITBENCH_LIBRARY`` (folders separated by ``os.pathsep``) names ITBench scenario libraries whose
indexes are registered too, as ``ITBench-<id>-v0`` (see :func:`load_itbench_library`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from itbench_gym.registry import (
    get_spec,
    list_scenarios,
    load_itbench_library,
    make,
    make_vec,
    register_all,
    scenario_ids,
)

if TYPE_CHECKING:
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.generator import generate

__version__ = "0.1.0"

register_all()
for _library in filter(None, os.environ.get("ITBENCH_LIBRARY", "").split(os.pathsep)):
    load_itbench_library(_library)

__all__ = ["ITBenchEnv", "__version__", "generate", "get_spec", "list_scenarios", "load_itbench_library", "make",
           "make_vec", "scenario_ids", "tool_schemas"]


def tool_schemas() -> list[dict[str, Any]]:
    """The agent's tools (kubectl, promql, logql, traces, alerts, topology, wait, submit) as OpenAI /
    JSON-Schema function specs, for an LLM's tool calling: what ``env.unwrapped.tool_schemas`` gives."""
    from itbench_gym.tools import default_tools
    from itbench_gym.tools import tool_schemas as schemas

    return schemas(default_tools())


def __getattr__(name: str) -> Any:
    """``ITBenchEnv`` and ``generate`` on first use (PEP 562), so that ``import itbench_gym`` stays cheap."""
    if name == "generate":
        from itbench_gym.generator import generate

        globals()[name] = generate
        return generate
    if name == "ITBenchEnv":
        from itbench_gym.env import ITBenchEnv

        globals()[name] = ITBenchEnv
        return ITBenchEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
