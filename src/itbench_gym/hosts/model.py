"""A Linux host as data: load and validate ``envs/<host>/host.yaml``, copy it, and apply misconfigurations.

The host is what the rhel9-opa scenarios assess: no machine or VM exists, the agent's real
``ansible-playbook`` reads a directory tree materialised from this model (``hosts.root``). Keeping the
host as data lets a scenario say its misconfiguration as data too (``changes``: lineinfile-like edits,
file mode/owner/presence, service state, package presence, sysctl values), applied deterministically
to a copy, so the compliant baseline is never mutated and every error names the change at fault.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

_SCHEMA_FILE = Path(__file__).with_name("host.schema.json")
_DEFAULT_DIR_MODE = 0o755
_DEFAULT_FILE_MODE = 0o644


class HostModelError(ValueError):
    """A host model or a change that cannot be used; the message names the file or change and the field."""


@functools.cache
def schema() -> dict[str, Any]:
    """The JSON schema of host models (and, under ``$defs/changes``, of change lists)."""
    loaded: dict[str, Any] = json.loads(_SCHEMA_FILE.read_text(encoding="utf-8"))
    return loaded


def _validate(document: Any, where: str, definition: str | None = None) -> None:
    """Raise HostModelError listing every schema violation of ``document`` with its field path."""
    import jsonschema

    root = schema()
    target = root if definition is None else {"$defs": root["$defs"], "$ref": f"#/$defs/{definition}"}
    validator = jsonschema.Draft202012Validator(target)
    problems = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    if problems:
        lines = [f"{where}: {_field(e.absolute_path) or '(top level)'}: {e.message}" for e in problems[:20]]
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise HostModelError("\n".join(lines) + more)


def _field(path: Iterable[Any]) -> str:
    """``files[3].mode`` from a jsonschema path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


@dataclass(frozen=True)
class FileEntry:
    """One filesystem object of the host: a regular file with content, a directory or a symlink."""

    path: str
    type: str = "file"
    content: str | None = None
    target: str | None = None
    owner: str = "root"
    group: str = "root"
    mode: int = _DEFAULT_FILE_MODE

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "type": self.type}
        if self.type == "file":
            out["content"] = self.content or ""
        if self.type == "symlink":
            out["target"] = self.target
        else:
            out.update(owner=self.owner, group=self.group, mode=f"{self.mode:04o}")
        return out


@dataclass(frozen=True)
class Service:
    """A systemd unit: its unit-file state (``is-enabled``) and active state (``is-active``)."""

    name: str
    enabled: str
    active: str
    description: str = ""


@dataclass(frozen=True)
class Package:
    """An installed rpm package."""

    name: str
    version: str
    release: str
    arch: str
    epoch: int | None = None

    @property
    def nvra(self) -> str:
        return f"{self.name}-{self.version}-{self.release}.{self.arch}"


@dataclass(frozen=True)
class Account:
    """A line of /etc/passwd (users) or /etc/group (groups, ``members`` set)."""

    name: str
    id: int
    members: tuple[str, ...] = ()


@dataclass
class HostModel:
    """A host: files by absolute path, runtime sysctl values, systemd units and rpm packages."""

    name: str
    hostname: str
    files: dict[str, FileEntry]
    sysctl: dict[str, str] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    packages: dict[str, Package] = field(default_factory=dict)
    kernel: dict[str, str] = field(default_factory=dict)
    description: str = ""
    source: str = "<memory>"

    # -- loading -------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> HostModel:
        """The model in ``path`` (a host.yaml, or the folder holding one), validated."""
        path = Path(path)
        if path.is_dir():
            path = path / "host.yaml"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise HostModelError(f"{path}: cannot read the host model: {exc.strerror or exc}") from None
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise HostModelError(f"{path}: not valid YAML: {exc}") from None
        return cls.from_dict(document, str(path))

    @classmethod
    def from_dict(cls, document: Any, source: str = "<memory>") -> HostModel:
        """A model from its parsed YAML/JSON form; HostModelError naming ``source`` and the field otherwise."""
        _validate(document, source)
        files: dict[str, FileEntry] = {}
        for index, raw in enumerate(document["files"]):
            entry = _entry(raw)
            if entry.path in files:
                raise HostModelError(f"{source}: files[{index}].path: {entry.path} is listed twice")
            files[entry.path] = entry
        services: dict[str, Service] = {}
        for index, raw in enumerate(document.get("services") or []):
            if raw["name"] in services:
                raise HostModelError(f"{source}: services[{index}].name: {raw['name']} is listed twice")
            services[raw["name"]] = Service(raw["name"], raw["enabled"], raw["active"], raw.get("description", ""))
        packages: dict[str, Package] = {}
        for index, raw in enumerate(document.get("packages") or []):
            if raw["name"] in packages:
                raise HostModelError(f"{source}: packages[{index}].name: {raw['name']} is listed twice")
            packages[raw["name"]] = Package(raw["name"], raw["version"], raw["release"], raw["arch"], raw.get("epoch"))
        model = cls(
            name=document["metadata"]["name"], hostname=document["hostname"], files=files,
            sysctl={k: str(v) for k, v in (document.get("sysctl") or {}).items()}, services=services, packages=packages,
            kernel=dict(document.get("kernel") or {}), description=document["metadata"].get("description", ""), source=source,
        )
        model._complete_parents()
        model.check(source)
        return model

    def to_dict(self) -> dict[str, Any]:
        """The model in host.yaml's form (round-trips through ``from_dict``)."""
        metadata: dict[str, Any] = {"name": self.name}
        if self.description:
            metadata["description"] = self.description
        out: dict[str, Any] = {"apiVersion": "itbench-gym.io/v1", "kind": "Host", "metadata": metadata, "hostname": self.hostname}
        if self.kernel:
            out["kernel"] = dict(self.kernel)
        out["files"] = [e.to_dict() for _, e in sorted(self.files.items())]
        out["sysctl"] = dict(self.sysctl)
        out["services"] = [{"name": s.name, "description": s.description, "enabled": s.enabled, "active": s.active}
                           for s in self.services.values()]
        out["packages"] = [{"name": p.name, "epoch": p.epoch, "version": p.version, "release": p.release, "arch": p.arch}
                           for p in self.packages.values()]
        return out

    def copy(self) -> HostModel:
        """An independent copy (entries are immutable; the containers are new)."""
        return replace(self, files=dict(self.files), sysctl=dict(self.sysctl), services=dict(self.services),
                       packages=dict(self.packages), kernel=dict(self.kernel))

    # -- consistency ---------------------------------------------------------------------------
    def _complete_parents(self) -> None:
        """Every file's parent folders exist (root:root 0755 unless listed)."""
        for path in sorted(self.files):
            parent = posixpath.dirname(path)
            while parent != "/" and parent not in self.files:
                self.files[parent] = FileEntry(parent, "directory", mode=_DEFAULT_DIR_MODE)
                parent = posixpath.dirname(parent)

    def check(self, where: str) -> None:
        """Semantic rules the schema cannot say: parents are folders, owners are accounts of this host."""
        users = {u.name for u in self.users()}
        groups = {g.name for g in self.groups()}
        for path, entry in sorted(self.files.items()):
            parent = posixpath.dirname(path)
            if parent != "/" and self.files[parent].type != "directory":
                raise HostModelError(f"{where}: {path}: its parent {parent} is a {self.files[parent].type}, not a directory")
            if entry.type == "symlink":
                continue
            if users and entry.owner not in users:
                raise HostModelError(f"{where}: {path}: owner {entry.owner!r} is not a user in /etc/passwd")
            if groups and entry.group not in groups:
                raise HostModelError(f"{where}: {path}: group {entry.group!r} is not a group in /etc/group")

    # -- views ---------------------------------------------------------------------------------
    def read(self, path: str) -> str:
        """Content of the regular file ``path`` (symlinks in the model followed)."""
        entry = self.files.get(self.resolve(path))
        if entry is None or entry.type != "file":
            raise HostModelError(f"host {self.name}: {path} is not a regular file of this host")
        return entry.content or ""

    def resolve(self, path: str) -> str:
        """``path`` with the model's symlinks followed (bounded, as the kernel bounds link loops)."""
        for _ in range(40):
            entry = self.files.get(path)
            if entry is None or entry.type != "symlink":
                return path
            assert entry.target is not None
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), entry.target))
        raise HostModelError(f"host {self.name}: {path}: too many levels of symbolic links")

    def users(self) -> list[Account]:
        return _accounts(self.files.get("/etc/passwd"), members=False)

    def groups(self) -> list[Account]:
        return _accounts(self.files.get("/etc/group"), members=True)

    def uid(self, user: str) -> int:
        return next((u.id for u in self.users() if u.name == user), 0)

    def gid(self, group: str) -> int:
        return next((g.id for g in self.groups() if g.name == group), 0)

    # -- misconfigurations ---------------------------------------------------------------------
    def apply(self, changes: Sequence[Mapping[str, Any]]) -> HostModel:
        """A new model: this one with ``changes`` applied in order (this model is left as it is).

        Each change is a one-key mapping (``lineinfile``, ``file``, ``service``, ``package``, ``sysctl``);
        see host.schema.json ``$defs/change``. HostModelError names the change (index and kind) at fault.
        """
        _validate(list(changes), f"host {self.name}: changes", "changes")
        model = self.copy()
        for index, change in enumerate(changes):
            kind, spec = next(iter(change.items()))
            label = f"host {self.name}: change {index} ({kind} {spec.get('path') or spec.get('name')})"
            try:
                _APPLY[kind](model, spec)
            except HostModelError as exc:
                raise HostModelError(f"{label}: {exc}") from None
            except re.error as exc:
                raise HostModelError(f"{label}: invalid regular expression: {exc}") from None
        model._complete_parents()
        model.check(f"host {self.name} after its changes")
        return model


def _entry(raw: Mapping[str, Any]) -> FileEntry:
    kind = raw.get("type", "file")
    default = _DEFAULT_DIR_MODE if kind == "directory" else (0o777 if kind == "symlink" else _DEFAULT_FILE_MODE)
    return FileEntry(
        path=raw["path"], type=kind, content=(raw.get("content", "") if kind == "file" else None), target=raw.get("target"),
        owner=raw.get("owner", "root"), group=raw.get("group", "root"), mode=int(raw["mode"], 8) if "mode" in raw else default,
    )


def _accounts(entry: FileEntry | None, *, members: bool) -> list[Account]:
    if entry is None or entry.type != "file":
        return []
    out: list[Account] = []
    for line in (entry.content or "").splitlines():
        fields = line.split(":")
        if len(fields) < 4 or not fields[2].isdigit():
            continue
        listed = tuple(m for m in fields[3].split(",") if m) if members else ()
        out.append(Account(fields[0], int(fields[2]), listed))
    return out


# -- the change kinds -----------------------------------------------------------------------------

def _regular(model: HostModel, path: str, *, create: bool = False) -> FileEntry:
    resolved = model.resolve(path)
    entry = model.files.get(resolved)
    if entry is None:
        if not create:
            raise HostModelError(f"{path} does not exist on this host (set create: true to create it)")
        entry = FileEntry(resolved, "file", content="")
        model.files[resolved] = entry
    if entry.type != "file":
        raise HostModelError(f"{path} is a {entry.type}, not a regular file")
    return entry


def _lineinfile(model: HostModel, spec: Mapping[str, Any]) -> None:
    """Ansible's lineinfile: replace the last line matching ``regexp`` (or insert ``line``), or remove matches."""
    entry = _regular(model, spec["path"], create=bool(spec.get("create")))
    lines = (entry.content or "").splitlines()
    regexp = re.compile(spec["regexp"]) if "regexp" in spec else None
    line: str | None = spec.get("line")
    if spec.get("state", "present") == "absent":
        kept = [x for x in lines if not ((regexp is not None and regexp.search(x)) or (regexp is None and x == line))]
        if len(kept) == len(lines):
            return
        lines = kept
    else:
        assert line is not None
        matches = [i for i, x in enumerate(lines) if regexp is not None and regexp.search(x)]
        if matches:
            lines[matches[-1]] = line
        elif line in lines:
            return
        else:
            lines.insert(_insert_at(lines, spec), line)
    model.files[entry.path] = replace(entry, content="\n".join(lines) + ("\n" if lines else ""))


def _insert_at(lines: list[str], spec: Mapping[str, Any]) -> int:
    """Where lineinfile puts a new line: after the last ``insertafter`` / before the last ``insertbefore`` match."""
    after, before = spec.get("insertafter"), spec.get("insertbefore")
    if before is not None:
        if before == "BOF":
            return 0
        hits = [i for i, x in enumerate(lines) if re.search(before, x)]
        return hits[-1] if hits else len(lines)
    if after is not None and after != "EOF":
        hits = [i for i, x in enumerate(lines) if re.search(after, x)]
        return hits[-1] + 1 if hits else len(lines)
    return len(lines)


def _file(model: HostModel, spec: Mapping[str, Any]) -> None:
    """Create, convert or remove a path, or change its content, owner, group or mode."""
    path: str = spec["path"]
    state = spec.get("state")
    if state == "absent":
        if path not in model.files:
            raise HostModelError(f"{path} does not exist on this host; nothing to remove")
        for other in [p for p in model.files if p == path or p.startswith(path + "/")]:
            del model.files[other]
        return
    current = model.files.get(path)
    if current is None and state is None:
        raise HostModelError(f"{path} does not exist on this host; give state: file, directory or symlink to create it")
    kind = state or (current.type if current is not None else "file")
    if current is not None and current.type != kind:
        if current.type == "directory" and any(p.startswith(path + "/") for p in model.files):
            raise HostModelError(f"{path} is a non-empty directory; remove it (state: absent) before replacing it")
        current = None
    if kind == "symlink" and "target" not in spec and current is None:
        raise HostModelError(f"{path}: a symlink needs a target")
    if "content" in spec and kind != "file":
        raise HostModelError(f"{path}: content is only for regular files (this is a {kind})")
    base = current or _entry({"path": path, "type": kind})
    model.files[path] = replace(
        base,
        content=spec.get("content", base.content) if kind == "file" else None,
        target=spec.get("target", base.target) if kind == "symlink" else None,
        owner=spec.get("owner", base.owner), group=spec.get("group", base.group),
        mode=int(spec["mode"], 8) if "mode" in spec else base.mode,
    )


def unit_name(name: str) -> str:
    """``sshd`` -> ``sshd.service`` (systemctl's default suffix)."""
    return name if re.search(r"\.(service|socket|target|timer|mount|path)$", name) else f"{name}.service"


def _service(model: HostModel, spec: Mapping[str, Any]) -> None:
    name = unit_name(spec["name"])
    current = model.services.get(name)
    if current is None:
        if "enabled" not in spec or "active" not in spec:
            raise HostModelError(f"{name} is not a unit of this host; give both enabled and active to add it")
        current = Service(name, spec["enabled"], spec["active"], spec.get("description", ""))
    model.services[name] = replace(current, enabled=spec.get("enabled", current.enabled), active=spec.get("active", current.active),
                                   description=spec.get("description", current.description))


def _package(model: HostModel, spec: Mapping[str, Any]) -> None:
    name = spec["name"]
    if spec["state"] == "absent":
        if name not in model.packages:
            raise HostModelError(f"package {name} is not installed on this host; nothing to remove")
        del model.packages[name]
        return
    model.packages[name] = Package(name, spec["version"], spec["release"], spec.get("arch", "x86_64"), spec.get("epoch"))


def _sysctl(model: HostModel, spec: Mapping[str, Any]) -> None:
    """The running value, and with ``file`` the persistent setting (``name = value`` in that file) too."""
    name, value = spec["name"], str(spec["value"])
    if name not in model.sysctl:
        raise HostModelError(f"{name} is not a kernel parameter of this host model (its sysctl section)")
    model.sysctl[name] = value
    if "file" in spec:
        _lineinfile(model, {"path": spec["file"], "regexp": rf"^\s*{re.escape(name)}\s*=", "line": f"{name} = {value}", "create": True})


_APPLY = {"lineinfile": _lineinfile, "file": _file, "service": _service, "package": _package, "sysctl": _sysctl}

