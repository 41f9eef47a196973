"""The container registries a cluster pulls from: which images exist, for which platforms, with
which executables, and what a registry answers for a reference it does not serve.

An app's ``app.yaml`` lists its own images (``images:``); ``registry.yaml`` beside this module
lists the images any cluster may be asked to run whatever its app (debug and init images, the
images ITBench's faults set) and each registry's answer for an unknown reference. An app's entry
wins over the shared one; within a list the first matching pattern wins.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from itbench_gym.lang import yamltext

from .runtime import NO_PLATFORM, DefaultRuntime, not_found

_DATA = Path(__file__).with_name("registry.yaml")


@dataclass(frozen=True)
class ImageRule:
    """Images whose reference matches ``pattern`` (fnmatch).

    ``architectures`` are the platforms the image offers. An image index (``index: true``, what
    multi-arch builds and buildx's attestations push) has a manifest per platform, so containerd
    fails the pull on any other node; a single manifest (``index: false``) is pulled anywhere and
    its binaries then fail with ``exec format error``. ``executables`` are what its PATH and
    entrypoint hold (None: not catalogued, every command is taken to exist); ``home`` is the
    image's ``HOME`` (where a shell's ``~`` points; empty: the registry's ``defaultHome``). ``idle``
    is what a process of the image uses when nothing drives it (CPU cores, memory bytes), for images
    whose requests are far from it (istiod requests 2Gi and idles near 150Mi); None: its requests.
    ``workdir`` and ``env`` are the image config's ``WorkingDir`` and ``Env`` (what an exec'd process
    starts in and with, before the pod's own env); empty: not catalogued. ``entrypoint`` is its
    ``Entrypoint`` (empty: it has none, so a container's ``args`` alone are its command); None: not
    catalogued.
    """

    pattern: str
    architectures: tuple[str, ...]
    executables: tuple[str, ...] | None = None
    index: bool = True
    home: str = ""
    idle: tuple[float, float] | None = None
    workdir: str = ""
    env: tuple[tuple[str, str], ...] = ()
    entrypoint: tuple[str, ...] | None = None
    #: versions of programs whose emulated behaviour depends on them (``curl``: its messages' wording)
    versions: tuple[tuple[str, str], ...] = ()

    def has(self, executable: str) -> bool:
        return self.executables is None or executable in self.executables or executable.rsplit("/", 1)[-1] in self.executables


@dataclass(frozen=True)
class Base:
    """A base image's programs on PATH, ``Env`` and ``WorkingDir``, which the images built on it
    inherit (an image's own entries add to them: ``base:`` in an image entry)."""

    executables: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    workdir: str
    versions: tuple[tuple[str, str], ...] = ()


@lru_cache(maxsize=1)
def bases() -> dict[str, Base]:
    """The base images ``registry.yaml`` catalogues, by name."""
    raw = yamltext.load(_DATA.read_text()).get("bases") or {}
    return {str(name): Base(tuple(str(e) for e in b.get("executables") or ()),
                            tuple((str(k), str(v)) for k, v in (b.get("env") or {}).items()), str(b.get("workdir", "")),
                            tuple((str(k), str(v)) for k, v in (b.get("versions") or {}).items()))
            for name, b in raw.items()}


def _merged(base: Sequence[tuple[str, str]], own: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """An image's pairs over its base's (Env, versions): a name set again keeps its place, new names follow
    (as ``ENV`` does)."""
    out = dict(base)
    out.update(own)
    return tuple(out.items())


def parse_images(raw: Iterable[Mapping[str, Any]], where: str) -> tuple[ImageRule, ...]:
    """Image rules from YAML entries; ``where`` names the file for errors."""
    out = []
    for i, entry in enumerate(raw):
        unknown = set(entry) - {"pattern", "architectures", "executables", "index", "home", "idle", "workdir", "env", "base",
                               "entrypoint", "versions"}
        if unknown or "pattern" not in entry or "architectures" not in entry:
            raise ValueError(f"{where}: images[{i}]: needs pattern and architectures; unknown fields {sorted(unknown)}")
        executables = entry.get("executables")
        idle = entry.get("idle")
        if idle is not None and (not isinstance(idle, Mapping) or set(idle) != {"cpu", "memory"}):
            raise ValueError(f"{where}: images[{i}].idle: needs exactly cpu and memory (quantities)")
        env = entry.get("env") or {}
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{where}: images[{i}].env: needs a mapping of names to strings")
        versions = entry.get("versions") or {}
        if not isinstance(versions, Mapping) or not all(isinstance(v, str) for v in versions.values()):
            raise ValueError(f"{where}: images[{i}].versions: needs a mapping of program names to version strings")
        workdir = str(entry.get("workdir", ""))
        if workdir and not workdir.startswith("/"):
            raise ValueError(f"{where}: images[{i}].workdir: needs an absolute path")
        base = Base((), (), "")
        if "base" in entry:
            if str(entry["base"]) not in bases():
                raise ValueError(f"{where}: images[{i}].base: {entry['base']!r} is not a base of {_DATA.name} "
                                 f"(one of {', '.join(sorted(bases()))})")
            base = bases()[str(entry["base"])]
            executables = [*base.executables, *(e for e in executables or () if e not in base.executables)]
        workdir = workdir or base.workdir
        out.append(ImageRule(str(entry["pattern"]), tuple(entry["architectures"]),
                             tuple(str(e) for e in executables) if executables is not None else None,
                             bool(entry.get("index", True)), str(entry.get("home", "")),
                             (float(parse_quantity(idle["cpu"])), float(parse_quantity(idle["memory"]))) if idle is not None else None,
                             workdir, _merged(base.env, [(str(k), v) for k, v in env.items()]),
                             tuple(str(e) for e in entry["entrypoint"]) if entry.get("entrypoint") is not None else None,
                             _merged(base.versions, [(str(k), v) for k, v in versions.items()])))
    return tuple(out)


@dataclass(frozen=True)
class Registry:
    images: tuple[ImageRule, ...]
    #: registry host → containerd's resolve error for a reference it does not serve
    missing: Mapping[str, str]
    #: ``$HOME`` in a container whose image sets none (a path in the image, not the host)
    default_home: str

    def home(self, image: str, first: Sequence[ImageRule] = ()) -> str:
        """Where ``~`` points in a container of ``image``."""
        rule = self.rule(image, first)
        return rule.home if rule is not None and rule.home else self.default_home

    def rule(self, image: str, first: Sequence[ImageRule] = ()) -> ImageRule | None:
        return next((r for r in (*first, *self.images) if fnmatch.fnmatchcase(image, r.pattern)), None)

    def pull_error(self, image: str, arch: str, first: Sequence[ImageRule] = ()) -> str | None:
        """containerd's reason the pull of ``image`` fails on an ``arch`` node, or None."""
        rule = self.rule(image, first)
        if rule is None:
            host, repository, tag = split_reference(image)
            template = self.missing.get(host)
            if template is None:
                return not_found(image)
            detail = template.format(host=host, repository=repository, tag=tag)
            return f'failed to resolve reference "{image}": {detail}'
        if rule.index and arch not in rule.architectures:
            return NO_PLATFORM
        return None


def split_reference(image: str) -> tuple[str, str, str]:
    """(registry host, repository, tag or digest) as containerd's reference parser normalises them."""
    name, tag = image, "latest"
    if "@" in name:
        name, tag = name.split("@", 1)
    elif ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    first = name.split("/", 1)[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        host, repository = name.split("/", 1)
    else:
        host, repository = "docker.io", name if "/" in name else f"library/{name}"
    return host, repository, tag


@lru_cache(maxsize=1)
def shared() -> Registry:
    raw = yamltext.load(_DATA.read_text())
    return Registry(parse_images(raw["images"], str(_DATA)), dict(raw.get("missing") or {}), str(raw["defaultHome"]))


class RegistryRuntime(DefaultRuntime):
    """A runtime whose images are the registry's (``first``, then the cluster-wide catalogue): a
    reference no registry serves fails to pull as containerd words it, whatever runs the images."""

    def __init__(self, first: Sequence[ImageRule] = ()) -> None:
        super().__init__()
        self.first = tuple(first)

    def _rule(self, image: str) -> ImageRule | None:
        return shared().rule(image, self.first)

    def image_rule(self, image: str) -> ImageRule | None:
        """The catalogue entry of ``image`` (the app's images first), None when no registry serves it."""
        return self._rule(image)

    def idle_usage(self, image: str) -> tuple[float, float] | None:
        """CPU cores and memory bytes a process of ``image`` uses at idle, when its catalogue entry says."""
        rule = self._rule(image)
        return rule.idle if rule is not None else None

    def image_known(self, image: str) -> bool:
        return self._rule(image) is not None

    def image_supports(self, image: str, arch: str) -> bool:
        rule = self._rule(image)
        return rule is not None and arch in rule.architectures

    def pull_error(self, image: str, arch: str) -> str | None:
        return shared().pull_error(image, arch, self.first)

    def binary_runs(self, image: str, arch: str) -> bool:
        rule = self._rule(image)
        return rule is None or arch in rule.architectures
