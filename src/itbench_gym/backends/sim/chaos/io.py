"""IOChaos effects on a service whose operations do disk I/O under the experiment's ``volumePath``.

Which directories a service writes synchronously while serving, and how many file operations one
call makes there, is application data (``disk_io`` in ``app.yaml``). An IOChaos on a ``volumePath``
at or above one of those directories hits each such operation with probability ``percent``:
``latency`` adds ``delay`` per operation, ``fault`` fails it with ``errno``, ``attrOverride`` with a
permission change fails it as EACCES, ``mistake`` corrupts the data so the call fails.
"""

from __future__ import annotations

import errno as errno_codes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext

from .kinds import injected_pods, parse_duration, record_id

Obj = dict[str, Any]


@dataclass(frozen=True)
class DiskIO:
    paths: tuple[str, ...]
    ops_per_call: float


@dataclass(frozen=True)
class IOFault:
    """What the running IOChaos experiments do to every operation of one service."""

    delay_s: float
    error_ratio: float
    message: str


def load_disk_io(app_dir: Path) -> dict[str, DiskIO]:
    """``disk_io`` of the app's ``app.yaml`` (validated with the rest of it by ``load_spec``)."""
    raw = (yamltext.load((app_dir / "app.yaml").read_text()) or {}).get("disk_io") or {}
    return {svc: DiskIO(tuple(d["paths"]), float(d.get("ops_per_call", 1))) for svc, d in raw.items()}


def _under(path: str, volume: str) -> bool:
    volume = volume.rstrip("/") or "/"
    return path == volume or path.startswith(volume + "/") or volume == "/"


def io_fault(experiments: list[Obj], pod: Obj, disk: DiskIO | None) -> IOFault | None:
    """The combined effect of the running IOChaos ``experiments`` on the service of ``pod``."""
    if disk is None or disk.ops_per_call <= 0:
        return None
    delay, ok_share, message = 0.0, 1.0, ""
    container = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
    for exp in experiments:
        spec = exp.get("spec") or {}
        if record_id(pod) not in injected_pods(exp):
            continue
        names = spec.get("containerNames")
        if names and container not in names:
            continue
        if not any(_under(p, str(spec.get("volumePath", ""))) for p in disk.paths):
            continue
        hit = min(max(float(spec.get("percent", 100)), 0.0), 100.0) / 100.0
        action = spec.get("action")
        if action == "latency":
            try:
                delay += parse_duration(str(spec.get("delay", "0"))) * hit * disk.ops_per_call
            except ValueError:
                continue
            continue
        if action == "fault":
            code = int(spec.get("errno", errno_codes.EIO))
        elif action == "attrOverride" and "perm" in (spec.get("attr") or {}):
            code = errno_codes.EACCES
        elif action == "mistake":
            code = errno_codes.EIO
        else:
            continue
        ok_share *= (1.0 - hit) ** disk.ops_per_call
        message = message or f"{disk.paths[0]}: {os.strerror(code)}"
    if delay <= 0 and ok_share >= 1.0:
        return None
    return IOFault(delay, 1.0 - ok_share, message)
