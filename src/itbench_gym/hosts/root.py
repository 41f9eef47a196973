"""Materialise a host model as a directory tree: what programs in the sandbox see at /etc, /boot, /var...

The tree is a throwaway copy per run (the agent's playbook may edit it with ``become``; nothing of it
outlives the run). Besides the model's files it holds what a booted RHEL host shows and the model says
elsewhere: runtime kernel parameters as ``proc/sys/...`` files (bound over the sandbox's /proc/sys,
so ``cat`` and ``sysctl`` read them), ``run/systemd/system`` (how tools tell that systemd is the init
system) and the ``*.wants`` links of enabled units.

Ownership: files belong to the user running the sandbox, which is uid 0 inside its user namespace, so
they show as root. Other owners in the model (a few files on RHEL, e.g. chrony's) cannot be shown
without privileges; modes are exact.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from itbench_gym.hosts.model import HostModel

#: Top-level folders of a tree the sandbox mounts from elsewhere (the real system or its own mounts).
RESERVED_TOP = frozenset({"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "proc", "dev", "sys", "tmp"})


def materialise(model: HostModel, dest: Path) -> Path:
    """Write ``model`` into the new or empty folder ``dest``; return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise FileExistsError(f"{dest}: not empty; a host tree is written into a fresh folder")
    directories: list[tuple[Path, int]] = []
    for path, entry in sorted(model.files.items()):
        top = path.strip("/").split("/", 1)[0]
        if top in RESERVED_TOP:
            continue  # the sandbox shows the real /usr and its own /proc, /dev, /tmp
        target = dest / path.lstrip("/")
        if entry.type == "directory":
            target.mkdir(parents=True, exist_ok=True)
            directories.append((target, entry.mode))
        elif entry.type == "symlink":
            assert entry.target is not None
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(entry.target, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(entry.content or "", encoding="utf-8")
            os.chmod(target, entry.mode)
    _sysctl_tree(model, dest / "proc" / "sys")
    (dest / "run" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
    _wants_links(model, dest)
    # Folder modes last and deepest first: a 0500 folder written early would refuse its own children.
    for folder, mode in sorted(directories, key=lambda d: len(d[0].parts), reverse=True):
        os.chmod(folder, mode)
    return dest


def _sysctl_tree(model: HostModel, proc_sys: Path) -> None:
    """One file per parameter, as the kernel shows them (``net.ipv4.ip_forward`` -> net/ipv4/ip_forward)."""
    proc_sys.mkdir(parents=True, exist_ok=True)
    for name, value in sorted(model.sysctl.items()):
        file = proc_sys.joinpath(*name.split("."))
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(f"{value}\n", encoding="utf-8")
        os.chmod(file, 0o644)


def _wants_links(model: HostModel, dest: Path) -> None:
    """``systemctl enable`` leaves a link in the installing target's ``.wants`` folder; a masked unit links to /dev/null."""
    system = dest / "etc" / "systemd" / "system"
    for name, unit in sorted(model.services.items()):
        if "@." in name:
            continue
        if unit.enabled == "enabled":
            wants = "local-fs.target.wants" if name.endswith(".mount") else "multi-user.target.wants"
            link = system / wants / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink() and not link.exists():
                os.symlink(f"/usr/lib/systemd/system/{name}", link)
        elif unit.enabled == "masked":
            link = system / name
            system.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink() and not link.exists():
                os.symlink("/dev/null", link)


def remove_tree(root: Path) -> None:
    """Delete a materialised tree, restrictive folder modes (0500, 0000) included."""
    if root.is_symlink() or not root.exists():
        return
    os.chmod(root, stat.S_IRWXU)
    for dirpath, dirnames, _ in os.walk(root):  # top-down: each folder is opened before it is entered
        for name in dirnames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, stat.S_IRWXU)
    shutil.rmtree(root)
