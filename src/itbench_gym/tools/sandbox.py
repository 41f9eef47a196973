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
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from itbench_gym.tools.clockshim import ClockShim

#: ``ITBENCH_GYM_SANDBOX``: ``auto`` (bwrap when it works), ``bwrap`` (required) or ``none``.
SANDBOX_ENV = "ITBENCH_GYM_SANDBOX"
#: Most bytes kept from each of stdout and stderr; a program that writes more is stopped.
MAX_CAPTURE_BYTES = 8 * 1024 * 1024
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
    #: The program wrote more than ``MAX_CAPTURE_BYTES`` to a stream and was stopped.
    overflowed: bool = False


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
    clock: float | None = None,
) -> Completed:
    """Run ``argv`` (``argv[0]`` an absolute path) in ``workspace``; kill its whole group on timeout.

    With ``clock`` (Unix seconds), the program's wall clock starts there instead of at the host's time
    (``clockshim``; the host clock where the shim cannot work here).
    """
    full_env = {"HOME": str(workspace), "TMPDIR": str(workspace), "PATH": "", "LANG": "C.UTF-8", **env}
    if sandbox_mode() == "bwrap":
        command = _bwrap_argv(argv, workspace, full_env, read_only, writable)
        popen_env: dict[str, str] = {}
    else:
        command = list(argv)
        popen_env = full_env
    shim = ClockShim(clock) if clock is not None else None
    proc = (shim.popen if shim is not None else subprocess.Popen)(
        command,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workspace,
        env=popen_env,
        start_new_session=True,
    )
    try:
        out, err, timed_out, overflowed = _collect(proc, stdin.encode("utf-8") if stdin is not None else b"", timeout)
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        try:
            proc.wait()
        finally:
            if shim is not None:
                shim.close()
    code = 124 if timed_out else proc.returncode
    return Completed(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), timed_out, overflowed)


def _collect(proc: subprocess.Popen[bytes], data: bytes, timeout: float) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin and read both streams until exit, the deadline or ``MAX_CAPTURE_BYTES``."""
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {}
    sizes: dict[int, int] = {}
    with selectors.DefaultSelector() as sel:
        assert proc.stdout is not None and proc.stderr is not None
        for stream in (proc.stdout, proc.stderr):
            sel.register(stream, selectors.EVENT_READ)
            chunks[stream.fileno()], sizes[stream.fileno()] = [], 0
        if proc.stdin is not None:
            if data:
                sel.register(proc.stdin, selectors.EVENT_WRITE)
            else:
                proc.stdin.close()
        view = memoryview(data)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(proc)
                out, err = _split(chunks, proc)
                return out, err, True, False
            for key, _ in sel.select(min(left, 1.0)):
                if key.fileobj is proc.stdin:
                    try:
                        written = os.write(key.fd, view[:65536])
                    except BrokenPipeError:
                        written = len(view)
                    view = view[written:]
                    if not view:
                        sel.unregister(key.fileobj)
                        proc.stdin.close()
                    continue
                block = os.read(key.fd, 65536)
                if not block:
                    sel.unregister(key.fileobj)
                    continue
                chunks[key.fd].append(block)
                sizes[key.fd] += len(block)
                if sizes[key.fd] > MAX_CAPTURE_BYTES:
                    _kill_group(proc)
                    out, err = _split(chunks, proc)
                    return out[:MAX_CAPTURE_BYTES], err[:MAX_CAPTURE_BYTES], False, True
    out, err = _split(chunks, proc)
    return out, err, False, False


def _split(chunks: dict[int, list[bytes]], proc: subprocess.Popen[bytes]) -> tuple[bytes, bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    return b"".join(chunks[proc.stdout.fileno()]), b"".join(chunks[proc.stderr.fileno()])


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
