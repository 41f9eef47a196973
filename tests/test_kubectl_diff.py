"""``kubectl diff`` through the kubectl tool: the real binary, GNU diff in its sandbox, the change
previewed by a server-side dry run, the headers as on a cluster at the twin's time."""

from __future__ import annotations

import re
from typing import Any

import pytest

from itbench_gym.env import ITBenchEnv
from itbench_gym.tools.kubectl_diff import as_on_a_cluster, diff_program

pytestmark = pytest.mark.skipif(diff_program() is None, reason="kubectl diff runs GNU diff, and this machine has none (diffutils, essential on Debian, is missing)")

SCALED = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: recommendation\n  namespace: otel-demo\nspec:\n  replicas: 2\n"


def _diff(env: ITBenchEnv, manifest: str) -> dict[str, Any]:
    obs, _, _, _, _ = env.step({"tool": "kubectl", "args": {"text": "diff -f -", "stdin": manifest}})
    return obs


def test_a_change_is_shown_as_a_unified_diff_and_not_applied(sre_env: ITBenchEnv) -> None:
    obs = _diff(sre_env, SCALED)
    assert obs["exit_status"] == 1, obs["text"]  # kubectl diff: 1 means the objects differ
    lines = obs["text"].splitlines()
    name = "apps.v1.Deployment.otel-demo.recommendation"
    assert re.fullmatch(rf"diff -u -N /tmp/LIVE-\d+/{name} /tmp/MERGED-\d+/{name}", lines[0])
    assert re.fullmatch(rf"--- /tmp/LIVE-\d+/{name}\t2026-01-01 \d\d:\d\d:\d\d\.\d{{9}} \+0000", lines[1])
    assert lines[1].split("\t")[1] == lines[2].split("\t")[1]
    assert "-  replicas: 1" in lines and "+  replicas: 2" in lines
    replicas = sre_env.backend.twin.cluster.store.get("Deployment", "otel-demo", "recommendation")["spec"]["replicas"]
    assert replicas == 1
    workspace = sre_env._workdir.path / "workspace"  # type: ignore[union-attr]
    assert not list(workspace.iterdir())  # kubectl removes its LIVE-/MERGED- folders


def test_the_same_actions_give_the_same_diff(sre_env: ITBenchEnv) -> None:
    sre_env.reset(seed=0)
    first = _diff(sre_env, SCALED)["text"]
    sre_env.reset(seed=0)
    assert _diff(sre_env, SCALED)["text"] == first


def test_no_change_is_an_empty_diff(sre_env: ITBenchEnv) -> None:
    obs = _diff(sre_env, SCALED.replace("replicas: 2", "replicas: 1"))
    assert obs["exit_status"] == 0 and obs["text"] == ""


def test_only_diffs_headers_take_the_clusters_paths_and_time() -> None:
    ws = "/tmp/itbench-gym-episode-1/workspace"
    raw = (f"diff -u -N {ws}/LIVE-12/v1.ConfigMap.a.b {ws}/MERGED-34/v1.ConfigMap.a.b\n"
           f"--- {ws}/LIVE-12/v1.ConfigMap.a.b\t2031-05-06 07:08:09.123456789 +0000\n"
           f"+++ {ws}/MERGED-34/v1.ConfigMap.a.b\t2031-05-06 07:08:09.223456789 +0000\n"
           "@@ -1 +1 @@\n"
           "--- /tmp/x\t2031-05-06 07:08:09.1 +0000\n")
    shown = as_on_a_cluster(raw, ws, 1767225600.5).splitlines()
    assert shown[1].endswith("\t2026-01-01 00:00:00.500000000 +0000") and shown[2].endswith("\t2026-01-01 00:00:00.500000000 +0000")
    assert ws not in "\n".join(shown) and shown[0].startswith("diff -u -N /tmp/LIVE-")
    assert shown[4] == "--- /tmp/x\t2031-05-06 07:08:09.1 +0000"  # a removed line of the content stays as it is
