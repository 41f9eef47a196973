"""The container an exec'd process runs in, as the process sees it.

The twin has no image layers: it knows a container's env (as the kubelet built it when the container
started), the files the kubelet puts there (volumes, ``/etc/hosts``, ``/etc/resolv.conf``,
``/etc/hostname``, the termination log) and which programs the image holds (the registry catalogue).
Anything else in the image is *unmodelled*: a program that reads it says so instead of answering
with files the image may not have.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class ExecResult:
    """What an exec'd process wrote and how it ended."""

    stdout: bytes = b""
    stderr: bytes = b""
    code: int = 0


#: What the twin holds for one exec'd process: its data, its output and the files it writes. A real
#: node holds far more, but the twin runs every process inside its own, and no agent command needs more.
EXEC_DATA_CEILING = 16 * 2**20


class OutOfMemory(Exception):
    """An exec'd process held more than its container's memory limit leaves it: the kernel's OOM
    killer ends it (SIGKILL, exit status 137)."""


#: What the twin's shell moves for one exec'd process (words it expands, output its commands write):
#: the twin runs it within one step, so a loop over large data must end.
EXEC_WORK_CEILING = 4 * EXEC_DATA_CEILING


class BeyondTwin(Exception):
    """An exec'd process passed :data:`EXEC_DATA_CEILING` or :data:`EXEC_WORK_CEILING`; the message says which."""


class ProcessWaits(Exception):
    """A container's own process began a wait (``sleep``) that ends past the time the twin follows it
    to: it is still running. ``out`` and ``err`` gather what it printed before, level by level as the
    exception leaves each program (:meth:`printed_before`)."""

    def __init__(self) -> None:
        super().__init__("the process waits")
        self.out, self.err = b"", b""

    def printed_before(self, out: bytes, err: bytes) -> ProcessWaits:
        """What the enclosing program had printed when the wait began comes before what this one printed."""
        self.out, self.err = out + self.out, err + self.err
        return self


@dataclass
class ProcessTime:
    """How far the twin follows a container's own process: its waits add up to ``elapsed`` seconds,
    and the one that would end past ``horizon`` (seconds since the process started) is where it is now."""

    horizon: float
    elapsed: float = 0.0

    def wait(self, seconds: float) -> None:
        if self.elapsed + seconds > self.horizon:
            raise ProcessWaits()
        self.elapsed += seconds


#: Why the twin stopped a process that held too much.
TOO_MUCH_DATA = (f"itbench_gym: the twin holds at most {EXEC_DATA_CEILING // 2**20} MiB of an exec'd process's data, "
                 "output and files; this command went past it")


#: The twin's words for a write outside every volume (the image's writable layer, which it does not model).
NOT_KEPT = "the itbench_gym twin does not keep files written in containers"
#: Why a write fails, as strerror words it (or :data:`NOT_KEPT`).
READ_ONLY, MISSING, IS_DIR, NOT_DIR, EXISTS, BUSY = (
    "Read-only file system", "No such file or directory", "Is a directory", "Not a directory", "File exists",
    "Device or resource busy")


@dataclass(frozen=True)
class VolumeContent:
    """What a pod's containers wrote into one of its emptyDir volumes: files and directories by path
    relative to the volume, and whether that is all it holds (every process that could write there
    ran through the twin's emulation; a server the twin does not emulate may have written more)."""

    files: Mapping[str, bytes] = field(default_factory=dict)
    directories: frozenset[str] = frozenset()
    complete: bool = True


@dataclass(frozen=True)
class WritableMount:
    """A mount the container may write through: the pod's volume and the directory of it mounted."""

    volume: str
    sub: str = ""


@dataclass
class FileTree:
    """The files of a container the twin knows: absolute path → content, and the directories that hold
    them. ``modelled`` are the roots under which the tree is complete (a mount point, the kubelet's
    files): a path under one that is not in ``files`` or ``directories`` does not exist. Any other
    path is the image's own, which the twin does not model.

    A process writes only under ``writable`` mounts (emptyDir volumes: what it writes is kept with the
    pod, :meth:`written`); ``read_only`` mounts (ConfigMap, Secret, projected and downward-API volumes,
    ``readOnly`` mounts) refuse writes as the kernel does; anywhere else is the image's layer."""

    files: dict[str, bytes | bytearray] = field(default_factory=dict)
    directories: set[str] = field(default_factory=lambda: {"/"})
    modelled: frozenset[str] = frozenset()
    #: Symbolic links: path → target as written (relative to the link's directory or absolute). A
    #: ConfigMap, Secret, projected or downwardAPI volume shows each key as ``key -> ..data/key``,
    #: ``..data -> ..<timestamp>`` and the timestamped directory holding the files (atomic writer).
    links: Mapping[str, str] = field(default_factory=dict)
    writable: Mapping[str, WritableMount] = field(default_factory=dict)
    read_only: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.files, self.directories = dict(self.files), set(self.directories)
        #: The writable mounts written since the tree was laid out.
        self._touched: set[str] = set()

    def is_modelled(self, path: str) -> bool:
        """Whether the twin knows everything at ``path`` (absolute, normalised): a file it holds, or a
        path under a modelled root. A directory above a mount (``/``, ``/etc``) is known to exist but
        holds the image's own entries too, so it is not modelled."""
        return path in self.files or any(path == root or path.startswith(root.rstrip("/") + "/") for root in self.modelled)

    def resolve(self, path: str) -> str:
        """``path`` with its symbolic links followed (at most 40, as Linux)."""
        for _ in range(40):
            parts = path.split("/")
            for i in range(2, len(parts) + 1):
                head = "/".join(parts[:i])
                if head in self.links:
                    target = self.links[head]
                    base = target if target.startswith("/") else posixpath.join(posixpath.dirname(head), target)
                    path = posixpath.normpath("/".join([base, *parts[i:]]))
                    break
            else:
                return path
        return path

    def read(self, path: str) -> bytes | None:
        """The content of the file at ``path`` (links followed); None when there is none (or it is a directory)."""
        content = self.files.get(self.resolve(path))
        return bytes(content) if content is not None else None

    def is_dir(self, path: str) -> bool:
        return self.resolve(path) in self.directories

    def entries(self, path: str) -> list[str] | None:
        """The names directly inside directory ``path`` that the twin knows, sorted; None when it is
        not a known directory. Complete only where ``is_modelled(path)``."""
        path = self.resolve(path)
        if path not in self.directories:
            return None
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix):].split("/", 1)[0] for p in (*self.files, *self.directories, *self.links)
                 if p.startswith(prefix) and p != path}
        return sorted(names)

    # --- writing -------------------------------------------------------------------------------------

    def _mount(self, path: str) -> str | None:
        """The innermost writable or read-only mount root holding ``path``."""
        roots = [r for r in (*self.writable, *self.read_only) if path == r or path.startswith(r.rstrip("/") + "/")]
        return max(roots, key=len) if roots else None

    def _where(self, path: str) -> str | None:
        """Why nothing can be created at ``path`` (its parent's state and its mount's), None when it can."""
        root = self._mount(path)
        if root is None:
            return NOT_KEPT
        if root not in self.writable:
            return READ_ONLY
        head = posixpath.dirname(path)
        if head in self.files:
            return NOT_DIR
        if head not in self.directories:
            return NOT_DIR if any(p in self.files for p in _ancestors(head)) else MISSING
        return None

    def write_error(self, path: str) -> str | None:
        """Why a file cannot be opened for writing at ``path`` (absolute), None when it can."""
        real = self.resolve(path)
        if real in self.directories:
            return IS_DIR
        if real in self.files:
            root = self._mount(real)
            return None if root in self.writable else (READ_ONLY if root is not None else NOT_KEPT)
        return self._where(real)

    def open_write(self, path: str, *, append: bool = False) -> bytearray:
        """The buffer a program writes the file at ``path`` through (created, or truncated unless
        ``append``); :meth:`write_error` must have allowed it."""
        real = self.resolve(path)
        content = self.files.get(real, b"")
        buffer = content if isinstance(content, bytearray) else bytearray(content)
        if not append:
            buffer.clear()
        self.files[real] = buffer  # the file's content from now on: what the program writes shows at once
        self._touch(real)
        return buffer

    def make_directory(self, path: str) -> str | None:
        """Create directory ``path``; why not (``EXISTS`` for anything already there), None when done."""
        real = self.resolve(path)
        if real in self.directories or real in self.files:
            return EXISTS
        error = self._where(real)
        if error is None:
            self.directories.add(real)
            self._touch(real)
        return error

    def removal_error(self, path: str) -> str | None:
        """Why the file or directory at ``path`` cannot be removed (a mount point: busy), None when it can."""
        if path not in self.files and path not in self.directories and path not in self.links:
            return MISSING
        root = self._mount(path)
        if root is None:
            return NOT_KEPT
        if root not in self.writable:
            return READ_ONLY
        return BUSY if path == root else None

    def remove(self, path: str) -> str | None:
        """Remove the file or the directory and everything under it at ``path`` (a mount point is
        emptied, and stays); why not all of it, None when done."""
        error = self.removal_error(path)
        if error not in (None, BUSY):
            return error
        root = self._mount(path)
        prefix = path.rstrip("/") + "/"
        for p in [p for p in (*self.files, *self.directories) if (p == path and p != root) or p.startswith(prefix)]:
            self.files.pop(p, None)
            self.directories.discard(p)
        self._touch(path)
        return error

    def _touch(self, path: str) -> None:
        root = self._mount(path)
        if root is not None:
            self._touched.add(root)

    def written(self) -> dict[str, VolumeContent]:
        """The content, relative to its volume's mounted directory, of each writable mount written
        since the tree was laid out (to be kept with the pod), by mount root."""
        out: dict[str, VolumeContent] = {}
        for root in sorted(self._touched):
            prefix = root.rstrip("/") + "/"
            files = {p[len(prefix):]: bytes(content) for p, content in self.files.items() if p.startswith(prefix)}
            dirs = frozenset(p[len(prefix):] for p in self.directories if p.startswith(prefix))
            out[root] = VolumeContent(files, dirs)
        return out


def _ancestors(path: str) -> list[str]:
    out = []
    while path not in ("/", ""):
        out.append(path)
        path = posixpath.dirname(path)
    return out


@dataclass(frozen=True)
class Lookup:
    """A name as the container's resolver answers it: the name that answered and its addresses, or
    why none did: ``nxdomain``, ``timeout`` (the queries never reach the DNS server) or
    ``unmodelled`` (a name outside the cluster, which the twin does not resolve)."""

    name: str
    addresses: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Dial:
    """One TCP connection from the container: the address dialled and ``open``, ``refused``,
    ``timeout``, ``reset`` (accepted, then reset by the peer), or ``unmodelled`` (a destination the
    twin's network model does not cover)."""

    address: str
    outcome: str


@dataclass(frozen=True)
class HttpAnswer:
    """What an app's server answers one HTTP request with: its status (None: the connection was reset
    before any answer), how long it takes and, where the twin knows them, its body and content type
    (``body`` None: the twin knows the status only)."""

    status: int | None
    seconds: float
    body: bytes | None = None
    content_type: str | None = None


class HttpServers(Protocol):
    """The app's HTTP servers as the model runs them now."""

    def answer(self, service: str, method: str, path: str, connection: str, body: bytes, serves: str | None) -> HttpAnswer | None:
        """``service``'s answer to ``method path`` with ``body`` on ``connection``, reaching the listener
        that ``serves`` a protocol of its own (app.yaml ``serves``; None: the service's own routes).
        None: the twin does not know it."""
        ...


class Network(Protocol):
    """The network as a process in the container meets it."""

    @property
    def nameserver(self) -> str:
        """The resolver's server ("" when the pod uses the node's resolver)."""
        ...

    def lookup(self, name: str) -> Lookup: ...

    def dial(self, ip: str, port: int) -> Dial: ...

    def request(self, ip: str, port: int, method: str, path: str, body: bytes = b"") -> HttpAnswer | None:
        """The answer to an HTTP request over an open connection to ``ip:port`` (None: not modelled)."""
        ...


@dataclass(frozen=True)
class Container:
    """One container as a process exec'd into it sees it.

    ``executables`` are the programs its image holds on PATH and the absolute entrypoints it names
    (the registry catalogue); None when the image is not catalogued. ``now`` is the simulated time
    (Unix seconds), for programs that print the date.
    """

    pod: str
    namespace: str
    name: str
    image: str
    hostname: str
    env: Mapping[str, str]
    files: FileTree
    executables: tuple[str, ...] | None
    cwd: str = "/"
    now: float = 0.0
    #: The pod's network (None: the twin does not model it for this pod).
    network: Network | None = None
    #: The node's kernel as ``uname`` shows it: release, build and machine (no release: the node says none).
    kernel: tuple[str, str, str] = ("", "", "")
    #: Versions of the image's programs whose behaviour depends on them (the registry's ``versions``).
    versions: Mapping[str, str] = field(default_factory=dict)
    #: Bytes an exec'd process may hold before its cgroup's OOM killer ends it: the container's memory
    #: limit less what its main process uses (inf: no limit).
    memory_room: float = math.inf
    #: Where the twin follows the container's own process in time (None: an exec, whose waits end at
    #: once, as the twin's clock does not run while it runs).
    process_time: ProcessTime | None = None

    def wait(self, seconds: float) -> None:
        """A wait of the process (``sleep``): it ends at once in an exec; a container's own process
        that would still be waiting at the time the twin follows it to stops there (:class:`ProcessWaits`)."""
        if self.process_time is not None:
            self.process_time.wait(seconds)

    def hold(self, size: int) -> None:
        """Check ``size`` bytes of data a process holds in memory (variables, words, a program's buffers)."""
        if size > self.memory_room:
            raise OutOfMemory(size)
        self.keep(size)

    @staticmethod
    def keep(size: int) -> None:
        """Check ``size`` bytes of a stream or file the twin keeps for a process (output, a pipe, a
        file in a volume): no process memory, but the twin's own."""
        if size > EXEC_DATA_CEILING:
            raise BeyondTwin(TOO_MUCH_DATA)

    def path(self, raw: str, cwd: str | None = None) -> str:
        """``raw`` as an absolute, normalised path (relative to ``cwd``, default the working directory)."""
        joined = posixpath.join(cwd or self.cwd, raw)
        out = posixpath.normpath(joined)
        return "/" + out.lstrip("/") if out.startswith("//") else out
