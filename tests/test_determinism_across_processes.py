"""Same seed, same actions ⇒ same observations and scores, also between processes: two processes with
different string-hash randomisation and their own caches play one episode at the same time, so the host's
load differs for each while it runs, and must give the same record.

SRE-ValkeyOutOfMemory-v0's oracle rolls a Deployment back and waits on ``kubectl rollout status``: a watch
whose simulated time once depended on how fast kubectl read its events (``backends/programs.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_PLAY = """
import json, sys
import itbench_gym
from itbench_gym.agents import OracleAgent, run_episode
env = itbench_gym.make(sys.argv[1])
info = run_episode(env, OracleAgent(env.unwrapped), seed=int(sys.argv[2]))
steps = [[step.action if isinstance(step.action, str) else json.dumps(step.action, sort_keys=True), step.observation,
          step.sim_time] for step in env.unwrapped.episode.steps]
evaluation = {k: v for k, v in info["evaluation"].items() if k != "timings"}
print(json.dumps({"steps": steps, "evaluation": evaluation}, sort_keys=True, default=str))
env.close()
"""


def test_an_episode_is_the_same_in_two_processes_at_once(tmp_path: Path) -> None:
    runs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "ITBENCH_GYM_CACHE": str(tmp_path / hash_seed)}
        runs.append(subprocess.Popen([sys.executable, "-c", _PLAY, "SRE-ValkeyOutOfMemory-v0", "4"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    records = []
    for run in runs:
        out, err = run.communicate(timeout=600)
        assert run.returncode == 0, err[-2000:]
        records.append(json.loads(out))
    first, second = records
    assert any("rollout status" in action for action, _, _ in first["steps"])
    assert first["steps"] == second["steps"]
    assert first["evaluation"] == second["evaluation"]
    assert first["evaluation"]["mitigation"]["passed"] is True
