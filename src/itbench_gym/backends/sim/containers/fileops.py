"""The programs that change files: cp, mv, mkdir, rm, touch and tee (GNU coreutils, or busybox's).

They change only what the twin keeps: the pod's emptyDir volumes (``FileTree.writable``), which
the kubelet keeps with the pod so the pod's other containers, later execs and a restarted container
see them. ConfigMap, Secret, projected and downward-API volumes refuse writes as the kernel does (a
read-only mount); the image's own layer is not modelled, so a write there is refused in the twin's words.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from .context import EXISTS, IS_DIR, NOT_KEPT, ExecResult, FileTree
from .programs import UNMODELLED, Invocation, Program, Stat, Usage, getopt, stat, usage_error


def _failed(inv: Invocation, gnu: str, busybox: str, operand: str, error: str) -> None:
    """Report ``error`` about ``operand`` in the program's words (``{f}``/``{e}`` in the formats)."""
    if error == NOT_KEPT:
        inv.say(f"{operand}: {NOT_KEPT}")
    elif error == "unmodelled":
        inv.say(f"{operand}: {UNMODELLED}")
    else:
        inv.say((gnu if inv.gnu else busybox).format(f=operand, e=error))


def _write_file(inv: Invocation, path: str, content: bytes) -> str | None:
    """Create or replace the file at ``path`` with ``content``; why not, None when done."""
    tree = inv.container.files
    error = tree.write_error(path)
    if error is None:
        tree.open_write(path).extend(content)
    return error


@dataclass(frozen=True)
class _Transfer:
    """One SOURCE of cp or mv: the operand, its absolute path and what is there, where it goes
    (absolute) and how the program names that destination."""

    source: str
    path: str
    found: Stat
    to: str
    shown: str


def _transfers(inv: Invocation, operands: list[str]) -> list[_Transfer] | None:
    """cp's and mv's SOURCE... DEST, each source with where it goes (into DEST when it is a
    directory); None after reporting operands the program refuses."""
    if len(operands) < 2:
        inv.say("missing file operand" if not operands else f"missing destination file operand after '{operands[0]}'")
        return None
    *sources, dest = operands
    target = inv.path(dest)
    into = stat(inv.container, target).kind == "dir"
    if len(sources) > 1 and not into:
        inv.say(f"target '{dest}' is not a directory" if inv.gnu else f"'{dest}' is not a directory")
        return None
    out = []
    for source in sources:
        path = inv.path(source)
        to = posixpath.join(target, posixpath.basename(path.rstrip("/"))) if into else target
        out.append(_Transfer(source, path, stat(inv.container, path, inv.stdin), to, to if into else dest))
    return out


def _unmoved(inv: Invocation, t: _Transfer) -> bool:
    """Whether the source cannot go anywhere (it is not there, or it is its own destination), said."""
    tree = inv.container.files
    if t.found.kind in ("missing", "notdir", "unmodelled"):
        _failed(inv, "cannot stat '{f}': {e}", "can't stat '{f}': {e}", t.source, t.found.error)
        return True
    if tree.resolve(t.to) == tree.resolve(t.path):
        inv.say(f"'{t.source}' and '{t.shown}' are the same file")
        return True
    return False


def _inside(tree: FileTree, path: str, to: str) -> bool:
    """Whether ``to`` is ``path`` or under it (links followed)."""
    return (tree.resolve(to) + "/").startswith(tree.resolve(path).rstrip("/") + "/")


def _cp(inv: Invocation) -> ExecResult:
    """cp [-rRafp] SOURCE... DEST: files, and with -r directories of files (no symbolic links)."""
    flags = "rRafp"
    try:
        opts, operands = getopt(inv, flags, "", {"recursive": "r", "archive": "a", "force": "f", "preserve": "p"})
    except Usage as bad:
        return usage_error(inv, str(bad), flags, "", 1)
    recursive = bool({letter for letter, _ in opts} & {"r", "R", "a"})
    transfers = _transfers(inv, operands)
    if transfers is None:
        return inv.done(1)
    tree = inv.container.files
    code = 0
    for t in transfers:
        if _unmoved(inv, t):
            code = 1
        elif t.found.kind == "file":
            error = _write_file(inv, t.to, t.found.data)
            if error is not None:
                _failed(inv, "cannot create regular file '{f}': {e}", "can't create '{f}': {e}", t.shown, error)
                code = 1
        elif not recursive:
            inv.say(f"-r not specified; omitting directory '{t.source}'" if inv.gnu else f"omitting directory '{t.source}'")
            code = 1
        elif not tree.is_modelled(tree.resolve(t.path)):
            _failed(inv, "", "", t.source, "unmodelled")
            code = 1
        elif _inside(tree, t.path, t.to):
            inv.say(f"cannot copy a directory, '{t.source}', into itself, '{t.to}'" if inv.gnu
                    else "can't copy a directory into itself")
            code = 1
        else:
            code = max(code, _copy_tree(inv, tree.resolve(t.path), t.to))
    return inv.done(code)


def _copy_tree(inv: Invocation, source: str, dest: str) -> int:
    """Copy directory ``source`` (modelled, absolute) to ``dest``: its directories, then its files."""
    tree = inv.container.files
    prefix = source.rstrip("/") + "/"
    if any(link.startswith(prefix) for link in tree.links):
        inv.say(f"{source}: the itbench_gym twin does not emulate copying symbolic links")
        return 1
    dirs = sorted(d for d in tree.directories if d.startswith(prefix))
    files = sorted((p, bytes(c)) for p, c in tree.files.items() if p.startswith(prefix))
    for d in [dest, *(posixpath.join(dest, d[len(prefix):]) for d in dirs)]:
        error = tree.make_directory(d)
        if error not in (None, EXISTS):
            _failed(inv, "cannot create directory '{f}': {e}", "can't create directory '{f}': {e}", d, error)
            return 1
    for path, content in files:
        to = posixpath.join(dest, path[len(prefix):])
        error = _write_file(inv, to, content)
        if error is not None:
            _failed(inv, "cannot create regular file '{f}': {e}", "can't create '{f}': {e}", to, error)
            return 1
    return 0


def _mv(inv: Invocation) -> ExecResult:
    """mv [-f] SOURCE... DEST: a rename, or a copy then a removal across mounts, as rename(2) and mv do."""
    try:
        _, operands = getopt(inv, "f", "", {"force": "f"})
    except Usage as bad:
        return usage_error(inv, str(bad), "f", "", 1)
    transfers = _transfers(inv, operands)
    if transfers is None:
        return inv.done(1)
    tree = inv.container.files
    code = 0
    for t in transfers:
        if _unmoved(inv, t):
            code = 1
            continue
        if t.found.kind == "dir" and _inside(tree, t.path, t.to):
            inv.say(f"cannot move '{t.source}' to a subdirectory of itself, '{t.shown}'")
            code = 1
            continue
        error = tree.removal_error(tree.resolve(t.path))
        if error is None and t.found.kind == "file":
            error = tree.write_error(t.to)
        if error is not None:
            _failed(inv, "cannot move '" + t.source + "' to '{f}': {e}", "can't rename '" + t.source + "': {e}", t.shown, error)
            code = 1
            continue
        if t.found.kind == "dir":
            if _copy_tree(inv, tree.resolve(t.path), t.to):
                code = 1
                continue
        else:
            tree.open_write(t.to).extend(t.found.data)
        tree.remove(tree.resolve(t.path))
    return inv.done(code)


def _mkdir(inv: Invocation) -> ExecResult:
    """mkdir [-p] DIRECTORY...."""
    try:
        opts, operands = getopt(inv, "p", "", {"parents": "p"})
    except Usage as bad:
        return usage_error(inv, str(bad), "p", "", 1)
    parents = any(letter == "p" for letter, _ in opts)
    if not operands:
        inv.say("missing operand")
        return inv.done(1)
    tree = inv.container.files
    code = 0
    for operand in operands:
        path = inv.path(operand)
        steps = _missing_ancestors(inv, path) if parents else [path]
        for step in steps:
            error = tree.make_directory(step)
            if error is not None and not (parents and error == EXISTS and tree.is_dir(step)):
                _failed(inv, "cannot create directory '{f}': {e}", "can't create directory '{f}': {e}", operand, error)
                code = 1
                break
    return inv.done(code)


def _missing_ancestors(inv: Invocation, path: str) -> list[str]:
    """``path`` and the directories above it that do not exist yet, outermost first."""
    out = [path]
    head = posixpath.dirname(path)
    while head != "/" and stat(inv.container, head).kind == "missing":
        out.insert(0, head)
        head = posixpath.dirname(head)
    return out


def _rm(inv: Invocation) -> ExecResult:
    """rm [-rRf] FILE...: -f says nothing of files that are not there."""
    flags = "rRf"
    try:
        opts, operands = getopt(inv, flags, "", {"recursive": "r", "force": "f"})
    except Usage as bad:
        return usage_error(inv, str(bad), flags, "", 1)
    on = {letter for letter, _ in opts}
    if not operands and "f" not in on:
        inv.say("missing operand")
        return inv.done(1)
    tree = inv.container.files
    code = 0
    for operand in operands:
        path = inv.path(operand)
        found = stat(inv.container, path)
        if found.kind in ("missing", "notdir"):
            if "f" not in on:
                _failed(inv, "cannot remove '{f}': {e}", "can't remove '{f}': {e}", operand, found.error)
                code = 1
            continue
        if found.kind == "unmodelled":
            _failed(inv, "", "", operand, "unmodelled")
            code = 1
            continue
        if found.kind == "dir" and path not in tree.links and not on & {"r", "R"}:
            inv.say(f"cannot remove '{operand}': {IS_DIR}" if inv.gnu else f"'{operand}' is a directory")
            code = 1
            continue
        error = tree.remove(path)
        if error is not None:
            _failed(inv, "cannot remove '{f}': {e}", "can't remove '{f}': {e}", operand, error)
            code = 1
    return inv.done(code)


def _touch(inv: Invocation) -> ExecResult:
    """touch [-c] FILE...: creates the files that do not exist (the twin keeps no timestamps)."""
    try:
        opts, operands = getopt(inv, "c", "", {"no-create": "c"})
    except Usage as bad:
        return usage_error(inv, str(bad), "c", "", 1)
    if not operands:
        inv.say("missing file operand")
        return inv.done(1)
    code = 0
    for operand in operands:
        path = inv.path(operand)
        found = stat(inv.container, path)
        if found.kind in ("file", "dir") or (opts and found.kind == "missing"):
            continue
        error = inv.container.files.write_error(path) if found.kind == "missing" else found.error
        if error is None:
            inv.container.files.open_write(path, append=True)
            continue
        _failed(inv, "cannot touch '{f}': {e}", "{f}: {e}", operand, error)
        code = 1
    return inv.done(code)


def _tee(inv: Invocation) -> ExecResult:
    """tee [-a] [FILE...]: standard input to standard output and to each file."""
    try:
        opts, operands = getopt(inv, "ai", "", {"append": "a", "ignore-interrupts": "i"})
    except Usage as bad:
        return usage_error(inv, str(bad), "ai", "", 1)
    append = any(letter == "a" for letter, _ in opts)
    tree = inv.container.files
    code = 0
    for operand in operands:
        path = inv.path(operand)
        error = tree.write_error(path)
        if error is None:
            tree.open_write(path, append=append).extend(inv.stdin)
        else:
            _failed(inv, "{f}: {e}", "can't open '{f}': {e}", operand, error)
            code = 1
    inv.write(inv.stdin)
    return inv.done(code)


PROGRAMS: dict[str, Program] = {"cp": _cp, "mv": _mv, "mkdir": _mkdir, "rm": _rm, "touch": _touch, "tee": _tee}
