"""The container an exec'd process runs in, as the process sees it.

The twin has no image layers: it knows a container's env (as the kubelet built it when the container
started), the files the kubelet puts there (volumes, ``/etc/hosts``, ``/etc/resolv.conf``,
``/etc/hostname``, the termination log) and which programs the image holds (the registry catalogue).
Anything else in the image is *unmodelled*: a program that reads it says so instead of answering
with files the image may not have.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class FileTree:
    """The files of a container the twin knows: absolute path → content, and the directories that hold
    them. ``modelled`` are the roots under which the tree is complete (a mount point, the kubelet's
    files): a path under one that is not in ``files`` or ``directories`` does not exist. Any other
    path is the image's own, which the twin does not model."""

    files: Mapping[str, bytes] = field(default_factory=dict)
    directories: frozenset[str] = frozenset({"/"})
    modelled: frozenset[str] = frozenset()
    #: Symbolic links: path → target as written (relative to the link's directory or absolute). A
    #: ConfigMap, Secret, projected or downwardAPI volume shows each key as ``key -> ..data/key``,
    #: ``..data -> ..<timestamp>`` and the timestamped directory holding the files (atomic writer).
    links: Mapping[str, str] = field(default_factory=dict)

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
        return self.files.get(self.resolve(path))

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


class Network(Protocol):
    """The network as a process in the container meets it."""

    @property
    def nameserver(self) -> str:
        """The resolver's server ("" when the pod uses the node's resolver)."""
        ...

    def lookup(self, name: str) -> Lookup: ...

    def dial(self, ip: str, port: int) -> Dial: ...


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

    def path(self, raw: str, cwd: str | None = None) -> str:
        """``raw`` as an absolute, normalised path (relative to ``cwd``, default the working directory)."""
        joined = posixpath.join(cwd or self.cwd, raw)
        out = posixpath.normpath(joined)
        return "/" + out.lstrip("/") if out.startswith("//") else out
