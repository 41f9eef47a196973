"""Run an agent-facing program confined to its episode workspace.

The program gets an argv list (never a shell), a minimal environment, the workspace as cwd, HOME and
TMPDIR, and stdin from the action (or nothing). Where bubblewrap (``bwrap``) works, it also runs in
fresh user/mount/pid/ipc namespaces whose filesystem holds only the program, the workspace and the
paths it is given — so even a flag that slipped past the tool's grammar could read or write no host
file. Without bwrap the behaviour the agent sees is the same; only that second layer is missing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from itbench_gym.backends.programs import RunningPrograms, Traffic, in_flight, wait_readable
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
    #: The episode's simulated time ran out while the program waited on it, and it was stopped.
    out_of_time: bool = False


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
    programs: RunningPrograms | None = None,
    system: bool = False,
    on_twin_time: Sequence[Path] = (),
) -> Completed:
    """Run ``argv`` (``argv[0]`` an absolute path) in ``workspace``; kill its whole group on timeout.

    With ``clock`` (Unix seconds), the program's wall clock starts there instead of at the host's time
    (``clockshim``; the host clock where the shim cannot work here), and the processes of the
    ``on_twin_time`` executables run their timers on the twin's time when ``programs`` has one. With ``system``, the machine's /usr
    (and its top-level links) is shown read-only too, for a helper program the confined one runs by its
    absolute path (kubectl's ``diff``).
    """
    full_env = {"HOME": str(workspace), "TMPDIR": str(workspace), "PATH": "", "LANG": "C.UTF-8", **env}
    if sandbox_mode() == "bwrap":
        command = _bwrap_argv(argv, workspace, full_env, read_only, writable, system)
        popen_env: dict[str, str] = {}
    else:
        command = list(argv)
        popen_env = full_env
    return _execute(command, cwd=workspace, env=popen_env, stdin=stdin, timeout=timeout, clock=clock,
                    programs=programs or RunningPrograms(), on_twin_time=on_twin_time)


def _execute(command: Sequence[str], *, cwd: Path, env: Mapping[str, str], stdin: str | None, timeout: float,
             clock: float | None, programs: RunningPrograms, on_twin_time: Sequence[Path] = ()) -> Completed:
    """Start ``command`` in its own session, feed it ``stdin``, collect its output; kill its group when done.
    It counts among ``programs`` until it has exited."""
    shim = ClockShim(clock, on_twin_time if programs.has_twin_time else ()) if clock is not None else None
    proc = (shim.popen if shim is not None else subprocess.Popen)(
        list(command),
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )
    with proc, programs.running(proc.pid, shim) as run:  # Popen's exit closes the pipes read to their end
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
    code = 124 if timed_out or run.out_of_time else proc.returncode
    return Completed(code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), timed_out, overflowed,
                     run.out_of_time)


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
    argv: Sequence[str], workspace: Path, env: Mapping[str, str], read_only: Sequence[Path], writable: Sequence[Path],
    system: bool = False,
) -> list[str]:
    bwrap = _bwrap()
    assert bwrap is not None
    # No /proc and no /dev: a network client needs neither (its standard streams are inherited), and
    # populating /dev is a quarter of what bwrap costs a call.
    cmd = [
        bwrap, "--unshare-all", "--share-net", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--clearenv", "--tmpfs", "/tmp",
        "--ro-bind", argv[0], argv[0],
    ]
    if system:  # and the /dev/null Go's os/exec opens for a child's unset stdin
        cmd += [*_system_binds(), "--dev-bind", "/dev/null", "/dev/null"]
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


# -- the rooted sandbox: agent playbooks and scripts ------------------------------------------------
#
# An agent's playbook or shell script is a program the agent wrote, not a command line a grammar could
# check, so it only ever runs here: fresh user/mount/pid/ipc/uts/network namespaces (the network one has
# only a loopback interface), a root filesystem built for the run — the real /usr and the Python running
# this package read-only, the host model's tree (a throwaway copy) at /etc, /var, /boot..., a /dev with
# null, zero and urandom, a private /tmp — and the workspace as the one persistent writable place.
# Without bubblewrap and namespaces it does not run at all (``require_isolation``).

#: Top-level folders of the real system shown read-only (as the links they are where /usr is merged).
_SYSTEM_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Files of the real /etc that the dynamic linker and Debian's alternatives links (awk, ...) need.
_ETC_PLUMBING = ("/etc/ld.so.cache", "/etc/alternatives")
#: Devices a program may open; anything else under /dev does not exist.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom")
#: What root's login shell on RHEL searches.
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Capabilities kept inside the user namespace: root reads 0600/0000 files of its tree (/etc/shadow) as on
#: a real host. No CAP_SYS_ADMIN, so no mount can be changed; read-only binds stay read-only.
_CAPS = ("CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH")


def _system_binds() -> list[str]:
    """bwrap options showing the real /usr read-only, with the top-level folders as they are here (the
    links of a merged /usr, or read-only folders)."""
    binds = ["--ro-bind", "/usr", "/usr"]
    for name in _SYSTEM_TOP:
        real = Path("/") / name
        if real.is_symlink():
            binds += ["--symlink", os.readlink(real), f"/{name}"]
        elif real.is_dir():
            binds += ["--ro-bind", str(real), f"/{name}"]
    return binds


#: Size of the sandbox's /tmp (and a quarter of it for /dev/shm): memory a program can fill with files.
_TMPFS_BYTES = 512 * 2**20


@functools.cache
def _bwrap_options() -> str:
    """bwrap's help text, to use options that older releases lack (``--size`` came with 0.8) only where present."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return ""
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _tmpfs(path: str, size: int) -> list[str]:
    """A private tmpfs at ``path``, world-writable with the sticky bit and bounded in size where bwrap can."""
    options = _bwrap_options()
    return [*(["--perms", "1777"] if "--perms" in options else []), *(["--size", str(size)] if "--size" in options else []),
            "--tmpfs", path]


@dataclass(frozen=True)
class Relay:
    """A TCP port on the sandbox's loopback that reaches one loopback ``host:port`` outside, and nothing else."""

    port: int
    target_host: str
    target_port: int


@dataclass(frozen=True)
class RootLayout:
    """What a rooted sandbox shows besides the real /usr: ``tree``'s top-level folders, read-write."""

    #: A materialised host tree (``hosts.root``): its ``etc``, ``var``, ``boot``... become /etc, /var, /boot;
    #: its ``proc/sys`` is shown (read-only) as /proc/sys.
    tree: Path
    hostname: str
    #: Folder shown read-only at /usr/local (commands the layout adds).
    local: Path | None = None
    #: (file, absolute path inside) bound read-only over what is there, e.g. a command over /usr/bin/X.
    overlays: Sequence[tuple[Path, str]] = ()
    #: More host paths shown at their own path, read-only and read-write.
    read_only: Sequence[Path] = ()
    writable: Sequence[Path] = ()


@functools.cache
def _isolation_problem() -> str | None:
    """Why a program cannot run fully isolated here (checked once), or None when it can."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    probe = [bwrap, "--unshare-all", "--die-with-parent", "--uid", "0", "--gid", "0", "--cap-drop", "ALL",
             *[a for cap in _CAPS for a in ("--cap-add", cap)], "--ro-bind", "/", "/", "--tmpfs", "/dev",
             "--dev-bind", "/dev/null", "/dev/null", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(probe, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        return f"bubblewrap cannot create user and network namespaces here: {done.stderr.strip() or done.returncode}"
    return None


def isolation_available() -> bool:
    """Whether ``run_rooted`` can run here (bubblewrap with user and network namespaces, not turned off)."""
    return os.environ.get(SANDBOX_ENV, "auto") != "none" and _isolation_problem() is None


def require_isolation() -> None:
    """Raise SandboxUnavailable unless agent programs can run in the rooted sandbox (never run them without)."""
    refusal = ("agent-written playbooks and scripts run only inside the bubblewrap sandbox (no network, a modelled "
               "root filesystem); they are refused rather than run on this machine")
    if os.environ.get(SANDBOX_ENV, "auto") == "none":
        raise SandboxUnavailable(f"{SANDBOX_ENV}=none: {refusal}")
    problem = _isolation_problem()
    if problem is not None:
        raise SandboxUnavailable(f"{problem}: {refusal}")


def root_home(tree: Path) -> str:
    """The root login's home as the modelled host's ``etc/passwd`` says (uid 0's sixth field; "/" without one,
    as login does), never this machine's."""
    try:
        lines = (tree / "etc" / "passwd").read_text(encoding="utf-8").splitlines()
    except OSError:
        return "/"
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 7 and fields[2] == "0" and fields[5]:
            return fields[5]
    return "/"


def run_rooted(
    argv: Sequence[str],
    *,
    workspace: Path,
    layout: RootLayout,
    env: Mapping[str, str],
    timeout: float,
    stdin: str | None = None,
    relay: Relay | None = None,
    clock: float | None = None,
    programs: RunningPrograms | None = None,
    on_twin_time: Sequence[Path] = (),
) -> Completed:
    """Run ``argv`` (``argv[0]`` a path inside the sandbox) with ``workspace`` as cwd in a rooted sandbox.

    No network except ``relay``; raises SandboxUnavailable where that cannot be guaranteed. ``env`` is
    the program's whole environment on top of a root login's (PATH, HOME, TMPDIR=/tmp, LANG).
    """
    require_isolation()
    full_env = {"PATH": ROOT_PATH, "HOME": root_home(layout.tree), "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
                "TMPDIR": "/tmp", "LANG": "C.UTF-8", "TERM": "dumb", **env}
    programs = programs or RunningPrograms()
    with _RelayServer(relay, programs.traffic) as relay_dir:
        command = list(argv)
        if relay is not None and relay_dir is not None:
            command = [sys.executable, "-I", "-S", "-c", _INNER_RELAY, str(relay.port), str(relay_dir / "relay.sock"), *argv]
        return _execute(_rooted_argv(command, workspace, layout, full_env, relay_dir), cwd=workspace, env={},
                        stdin=stdin, timeout=timeout, clock=clock, programs=programs,
                        on_twin_time=on_twin_time)


def _python_paths() -> list[str]:
    """The folders of the Python running this package (venv and base installation), unless under /usr."""
    found: list[str] = []
    for prefix in sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                          os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}):
        if prefix.startswith("/usr/") or prefix == "/usr" or any(prefix.startswith(p + "/") for p in found):
            continue
        found.append(prefix)
    return found


def _rooted_argv(argv: Sequence[str], workspace: Path, layout: RootLayout, env: Mapping[str, str],
                 relay_dir: Path | None) -> list[str]:
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    cmd = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--uid", "0", "--gid", "0",
           "--hostname", layout.hostname, "--cap-drop", "ALL", *[a for cap in _CAPS for a in ("--cap-add", cap)],
           "--clearenv", *_system_binds()]
    from itbench_gym.hosts.root import RESERVED_TOP

    for entry in sorted(layout.tree.iterdir()):
        if entry.name in RESERVED_TOP:
            continue
        if entry.is_symlink():
            cmd += ["--symlink", os.readlink(entry), f"/{entry.name}"]
        elif entry.is_dir():
            cmd += ["--bind", str(entry), f"/{entry.name}"]
    if (layout.tree / "etc").is_dir():
        for path in _ETC_PLUMBING:
            cmd += ["--ro-bind-try", path, path]
    cmd += ["--proc", "/proc"]
    if (layout.tree / "proc" / "sys").is_dir():
        cmd += ["--ro-bind", str(layout.tree / "proc" / "sys"), "/proc/sys"]
    cmd += ["--tmpfs", "/dev"]
    for device in _DEVICES:
        cmd += ["--dev-bind", device, device]
    cmd += [*_tmpfs("/dev/shm", _TMPFS_BYTES // 4), "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0",
            "/dev/stdin", "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr",
            *_tmpfs("/tmp", _TMPFS_BYTES)]
    if layout.local is not None:
        if not Path("/usr/local").is_dir():
            raise SandboxUnavailable("this machine has no /usr/local folder to show the host's own commands in")
        cmd += ["--ro-bind", str(layout.local), "/usr/local"]
    for source, inside in layout.overlays:
        cmd += ["--ro-bind", str(source), inside]
    for prefix in _python_paths():
        cmd += ["--ro-bind", prefix, prefix]
    for shown in layout.read_only:
        cmd += ["--ro-bind", str(shown), str(shown)]
    for shown in layout.writable:
        cmd += ["--bind", str(shown), str(shown)]
    if relay_dir is not None:
        cmd += ["--ro-bind", str(relay_dir), str(relay_dir)]
    cmd += ["--bind", str(workspace), str(workspace), "--chdir", str(workspace), "--remount-ro", "/"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--", *argv]


#: Runs first inside the sandbox when a relay is asked for: listens on 127.0.0.1:PORT and carries each
#: connection over the Unix socket SOCK (the only way out of the network namespace), then runs the program.
#: Its connections send without Nagle's delay, as kubectl's and the twin's do: an answer's last segment
#: held for the client's delayed ACK is a wait no one is seen doing, and the twin's time ran on meanwhile
#: (every request of a fetch script timed out after 32 simulated seconds).
_INNER_RELAY = """
import socket, subprocess, sys, threading
port, path, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(client):
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    pump(upstream, client)
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
def accept():
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(client,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
try:
    sys.exit(subprocess.call(argv))
except OSError as exc:
    sys.stderr.write(f"{argv[0]}: {exc.strerror}\\n")
    sys.exit(127)
"""


class _RelayServer:
    """Outside end of a ``Relay``: a Unix socket in a private folder; each connection goes on to the target.

    It counts in ``traffic`` as a server does: bytes on their way through it are the servers' turn, so
    a driven kubectl that waits on its request's answer lets no simulated time pass while the relay,
    not the twin, holds the request (a TLS handshake timed out after ten simulated seconds of the
    host's delay).
    """

    def __init__(self, relay: Relay | None, traffic: Traffic) -> None:
        self.relay = relay
        self.traffic = traffic
        self.folder: Path | None = None
        self.listener: socket.socket | None = None
        self.open: list[socket.socket] = []
        #: The open sockets whose stream has not ended.
        self.watched: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.accepting: threading.Thread | None = None

    def __enter__(self) -> Path | None:
        if self.relay is None:
            return None
        if self.relay.target_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"a relay only reaches a loopback address, not {self.relay.target_host}")
        self.folder = Path(tempfile.mkdtemp(prefix="itbench-relay-"))
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(self.folder / "relay.sock"))
        self.listener.listen(64)
        self.traffic.pending.append(self._in_flight)
        self.accepting = threading.Thread(target=self._accept, daemon=True, name="sandbox-relay")
        self.accepting.start()
        return self.folder

    def _in_flight(self) -> bool:
        """Whether a connection waits to be accepted or bytes wait in the relay's sockets."""
        with self.lock:
            sockets = [self.listener, *self.watched] if self.listener is not None else list(self.watched)
        return in_flight(sockets)

    def _accept(self) -> None:
        assert self.listener is not None and self.relay is not None
        while True:
            try:
                wait_readable(self.listener, None)  # a shut listener reads as ended
            except (OSError, ValueError):
                return
            self.traffic.begin()
            try:
                inside, _ = self.listener.accept()
            except OSError:
                self.traffic.end()
                return  # closed: the run is over
            try:
                outside = socket.create_connection((self.relay.target_host, self.relay.target_port), timeout=10)
                outside.settimeout(None)
                outside.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                inside.close()
                self.traffic.end()
                continue
            with self.lock:
                self.open += [inside, outside]
                self.watched |= {inside, outside}
            for src, dst in ((inside, outside), (outside, inside)):
                self.traffic.begin()  # the pump's own count, ended by the pump
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()
            self.traffic.end()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Copy ``src`` to ``dst`` until end of stream, then half-close ``dst``. Counted in the traffic
        (from its start) but while it waits for bytes: bytes that arrive are pending until it counts
        again. An ended ``src`` is looked at no more (it would read as pending for ever)."""
        try:
            while True:
                self.traffic.end()
                try:
                    wait_readable(src, None)
                finally:
                    self.traffic.begin()
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            with self.lock:
                self.watched.discard(src)
            self.traffic.end()
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def __exit__(self, *_exc: object) -> None:
        if self.listener is not None:
            with contextlib.suppress(OSError):  # already shut: nothing to wake
                self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (a close alone does not, on Linux)
            self.listener.close()
        if self.accepting is not None:
            self.accepting.join(timeout=5)  # the run ends with its relay
        with contextlib.suppress(ValueError):
            self.traffic.pending.remove(self._in_flight)
        with self.lock:
            for sock in self.open:
                try:
                    sock.close()
                except OSError:
                    pass
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
