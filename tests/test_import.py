"""``import itbench_gym`` stays cheap by design: it registers ids and imports none of the heavy parts.

Checked through ``sys.modules`` in a fresh interpreter rather than with a clock, so the test holds on
a loaded machine; ``python -m benchmarks --only import`` measures the time itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest

import itbench_gym

#: What ``import itbench_gym`` must not import: the env and everything only a made scenario needs
#: (validation: jsonschema, networkx, the fault injectors' Kubernetes client, the app facts).
DEFERRED = (
    "kubernetes",
    "networkx",
    "jsonschema",
    "itbench_gym.env",
    "itbench_gym.backends.sim",
    "itbench_gym.tasks",
    "itbench_gym.tools",
    "itbench_gym.evaluation",
    "itbench_gym.faults",
    "itbench_gym.spec.references",
    "itbench_gym.spec.appfacts",
    "itbench_gym.agents",
)

_PROBE = """
import json, sys
import itbench_gym
deferred = {deferred!r}
loaded = sorted(m for m in sys.modules if any(m == d or m.startswith(d + ".") for d in deferred))
import gymnasium
spec = gymnasium.spec("SRE-CacheFailure-v0")
env = gymnasium.make("SRE-CacheFailure-NoTraces-v0")
made = env.unwrapped.scenario
env.close()
print(json.dumps({{"loaded": loaded, "entry_point": spec.entry_point, "made": made.id, "traces": made.observability.traces}}))
"""


def _probe() -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(deferred=DEFERRED)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_import_defers_the_env_and_validation_yet_gymnasium_make_works() -> None:
    result = _probe()
    assert result["loaded"] == [], "imported by `import itbench_gym`, which should defer them"
    assert result["entry_point"] == "itbench_gym.env:ITBenchEnv"  # a string: Gymnasium imports the env on make
    assert result["made"] == "SRE-CacheFailure-NoTraces-v0" and result["traces"] is False


def test_public_api_unchanged() -> None:
    from itbench_gym.env import ITBenchEnv

    assert itbench_gym.ITBenchEnv is ITBenchEnv
    assert set(itbench_gym.__all__) <= set(dir(itbench_gym))
    for name in itbench_gym.__all__:
        assert getattr(itbench_gym, name) is not None
    assert "SRE-CacheFailure-v0" in gym.registry and "SRE-CacheFailure-NoLogs-v0" in gym.registry


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        itbench_gym.NoSuchThing  # noqa: B018
