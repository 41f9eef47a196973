"""Run an agent-facing program confined to its episode workspace.

The program gets an argv list (never a shell), a minimal environment, the workspace as cwd, HOME and
TMPDIR, and stdin from the action (or nothing). Where bubblewrap (``bwrap``) works, it also runs in
fresh user/mount/pid/ipc namespaces whose filesystem holds only the program, the workspace and the
paths it is given — so even a flag that slipped past the tool's grammar could read or write no host
file. Without bwrap the behaviour the agent sees is the same; only that second layer is missing.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: ``ITBENCH_GYM_SANDBOX``: ``auto`` (bwrap when it works), ``bwrap`` (required) or ``none``.
SANDBOX_ENV = "ITBENCH_GYM_SANDBOX"
#: Host files a network client may need, shown read-only when present (none is a secret).
_SYSTEM_FILES = ("/etc/hosts", "/etc/resolv.conf", "/etc/nsswitch.conf", "/etc/ssl/certs")


class SandboxUnavailable(RuntimeError):
    """``ITBENCH_GYM_SANDBOX=bwrap`` was asked for and bubblewrap cannot run here."""


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


@functools.cache
def _bwrap() -> str | None:
    """The bwrap binary if it can create namespaces on this machine (checked once)."""
    path = shutil.which("bwrap")
    if path is None:
        return None
    probe = [path, "--unshare-all", "--share-net", "--die-with-parent", "--ro-bind", "/", "/", "true"]
    try:
        ok = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return path if ok else None


def sandbox_mode() -> str:
    """``bwrap`` or ``none``: the confinement the next ``run`` will use."""
    wanted = os.environ.get(SANDBOX_ENV, "auto")
    if wanted == "none":
        return "none"
    available = _bwrap() is not None
    if wanted == "bwrap" and not available:
        raise SandboxUnavailable(f"{SANDBOX_ENV}=bwrap but bubblewrap is not installed or cannot create namespaces here")
    return "bwrap" if available else "none"


def run_confined(
    argv: Sequence[str],
    *,
    workspace: Path,
    env: Mapping[str, str],
    stdin: str | None,
    timeout: float,
    read_only: Sequence[Path] = (),
    writable: Sequence[Path] = (),
) -> Completed:
    """Run ``argv`` (``argv[0]`` an absolute path) in ``workspace``; kill its whole group on timeout."""
    full_env = {"HOME": str(workspace), "TMPDIR": str(workspace), "PATH": "", "LANG": "C.UTF-8", **env}
    if sandbox_mode() == "bwrap":
        command = _bwrap_argv(argv, workspace, full_env, read_only, writable)
        popen_env: dict[str, str] = {}
    else:
        command = list(argv)
        popen_env = full_env
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workspace,
        env=popen_env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin.encode("utf-8") if stdin is not None else None, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return Completed(124, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), timed_out=True)
    return Completed(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _bwrap_argv(
    argv: Sequence[str], workspace: Path, env: Mapping[str, str], read_only: Sequence[Path], writable: Sequence[Path]
) -> list[str]:
    bwrap = _bwrap()
    assert bwrap is not None
    cmd = [
        bwrap, "--unshare-all", "--share-net", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--clearenv", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--ro-bind", argv[0], argv[0],
    ]
    for system_file in _SYSTEM_FILES:
        cmd += ["--ro-bind-try", system_file, system_file]
    for path in read_only:
        cmd += ["--ro-bind", str(path), str(path)]
    for path in (*writable, workspace):
        cmd += ["--bind", str(path), str(path)]
    cmd += ["--chdir", str(workspace)]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--", *argv]
