"""Private temporary directories that never outlive their process for long.

Each holds credentials or an agent's workspace, so it is created 0700 and removed on ``close()``,
when its owner is garbage-collected, and at interpreter exit. A process killed with SIGKILL runs
none of those, so every directory records its owner (pid and the process's start time, which a
reused pid does not share) and the next ``WorkDir`` created on the machine sweeps the dead ones.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path

PREFIX = "itbench-gym-"
_OWNER_FILE = ".owner.json"
#: Directories from releases that wrote no owner file are swept once this old.
_LEGACY_AGE_SECONDS = 24 * 3600


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _alive(pid: int, started: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return started is None or _start_time(pid) in (None, started)


class WorkDir:
    """A 0700 directory under the system temp dir, removed with its owner."""

    def __init__(self, purpose: str) -> None:
        sweep_stale()
        self.path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{purpose}-{os.getpid()}-"))
        os.chmod(self.path, 0o700)
        owner = {"pid": os.getpid(), "started": _start_time(os.getpid())}
        (self.path / _OWNER_FILE).write_text(json.dumps(owner))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.path), True)

    def subdir(self, name: str) -> Path:
        path = self.path / name
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive


def sweep_stale(root: Path | None = None) -> list[Path]:
    """Remove work dirs whose owning process is gone; returns what was removed."""
    root = root or Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir() and not p.is_symlink()]
    except OSError:
        return removed
    for path in candidates:
        try:
            if path.stat().st_uid != os.getuid():
                continue
            owner_file = path / _OWNER_FILE
            if owner_file.exists():
                owner = json.loads(owner_file.read_text())
                stale = not _alive(int(owner["pid"]), owner.get("started"))
            else:
                stale = time.time() - path.stat().st_mtime > _LEGACY_AGE_SECONDS
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
