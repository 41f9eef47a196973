"""Where the shipped data lives: inside the wheel (``_data/``) or at the top of a checkout."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Directory ``envs`` or ``scenario_specs`` for an installed wheel or a source checkout."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"itbench_gym data folder {name!r} not found next to {_PACKAGE}")


def envs_dir() -> Path:
    return data_dir("envs")


def specs_dir() -> Path:
    return data_dir("scenario_specs")


def cache_dir() -> Path:
    """Where results worth keeping between processes go: ``$ITBENCH_GYM_CACHE``, else
    ``$XDG_CACHE_HOME/itbench-gym`` (default ``~/.cache/itbench-gym``)."""
    explicit = os.environ.get("ITBENCH_GYM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "itbench-gym"


def tree_digest(root: Path, skip: Path | None = None) -> str:
    """Digest of every file's path and bytes under ``root`` (compiled bytecode and ``skip`` left out):
    what keys a result computed from the folder (a parsed app, a stored baseline)."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and (skip is None or not path.is_relative_to(skip)):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()
