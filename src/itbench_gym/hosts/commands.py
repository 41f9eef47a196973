"""Install a host model's own commands into the folder the sandbox shows at /usr/local.

A RHEL host answers ``systemctl``, ``rpm``, ``sysctl``, ``getenforce``, ``sshd -T``, ``uname`` and ``sudo`` from systemd, its rpm
database and its kernel; the sandbox runs on another Linux, so these come from the model instead
(``hostcmd``, with the model's units and packages in ``state.json``, and ``rpm_module`` for Python
callers such as ansible's package_facts). The real system's programs of the same names, and the
Debian-family package tools a RHEL host does not have, are covered so that nothing answers for the
wrong machine — ansible looks in /usr/bin before PATH for some of them.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from itbench_gym.hosts.model import HostModel

COMMANDS = ("systemctl", "rpm", "sysctl", "getenforce", "sudo", "sshd", "uname")
#: Package tools of other distributions: shown as empty, non-executable files (ansible's package_facts and
#: ``which`` then find none of them, as on RHEL).
FOREIGN_TOOLS = ("apt", "apt-get", "apt-cache", "aptitude", "dpkg", "dpkg-query", "apk", "pacman", "zypper", "emerge", "pkg")
_SYSTEM_BIN = ("/usr/bin", "/usr/sbin")
#: Where RHEL keeps them: administrator commands in sbin.
_SBIN = {"sysctl", "getenforce", "sshd"}
#: Where the sandbox shows ``local`` and, inside it, the model's state and Python modules.
INSIDE = "/usr/local"
STATE_DIR = "lib/itbench-host"
PYTHON_DIR = "lib/itbench-host/python"


@dataclass(frozen=True)
class InstalledCommands:
    """What the sandbox mounts: ``local`` at /usr/local, then ``overlays`` (file, path inside) on top."""

    local: Path
    overlays: tuple[tuple[Path, str], ...]
    #: Directory to put on PYTHONPATH inside the sandbox (holds the model-backed ``rpm`` module).
    python_path: str


def install(model: HostModel, local: Path, python: str | None = None) -> InstalledCommands:
    """Write the commands of ``model`` under ``local`` (a new folder) for a sandbox run with ``python``."""
    interpreter = python or sys.executable
    here = Path(__file__).resolve().parent
    state_dir = local / STATE_DIR
    (state_dir / "python" / "rpm").mkdir(parents=True)
    (local / "bin").mkdir(parents=True)
    (local / "sbin").mkdir(parents=True)
    state = {
        "hostname": model.hostname,
        "kernel": dict(model.kernel),
        "services": [{"name": s.name, "description": s.description, "enabled": s.enabled, "active": s.active}
                     for s in model.services.values()],
        "packages": [{"name": p.name, "epoch": p.epoch, "version": p.version, "release": p.release, "arch": p.arch}
                     for p in model.packages.values()],
    }
    (state_dir / "state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    program = state_dir / "hostcmd"
    program.write_text(f"#!{interpreter} -IS\n" + (here / "hostcmd.py").read_text(encoding="utf-8"), encoding="utf-8")
    program.chmod(0o755)
    (state_dir / "python" / "rpm" / "__init__.py").write_text((here / "rpm_module.py").read_text(encoding="utf-8"), encoding="utf-8")
    absent = state_dir / "absent"
    absent.write_text("", encoding="utf-8")
    absent.chmod(0o644)
    overlays: list[tuple[Path, str]] = []
    for name in COMMANDS:
        os.symlink(f"../{STATE_DIR}/hostcmd", local / ("sbin" if name in _SBIN else "bin") / name)
        overlays += [(program, f"{d}/{name}") for d in _SYSTEM_BIN if _plain_file(f"{d}/{name}")]
    for name in FOREIGN_TOOLS:
        overlays += [(absent, f"{d}/{name}") for d in _SYSTEM_BIN if _plain_file(f"{d}/{name}")]
    return InstalledCommands(local, tuple(overlays), f"{INSIDE}/{PYTHON_DIR}")


def _plain_file(path: str) -> bool:
    """A regular file, not a link: a bind mount over a link would land on its target (maybe outside /usr)."""
    return os.path.isfile(path) and not os.path.islink(path)
