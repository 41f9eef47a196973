"""A read-only ``rpm`` Python module over a modelled host's package list.

Ansible's ``package_facts`` reads the rpm database through the ``rpm`` bindings
(``TransactionSet().dbMatch()`` and header lookups by ``RPMTAG_*``). Inside the sandbox there is no rpm
database, so ``hosts.commands`` installs this file as ``rpm/__init__.py`` on the sandbox's Python path,
next to the model's ``state.json``. Standalone (standard library only) for the same reason as hostcmd.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATE_FILE = Path("/usr/local/lib/itbench-host/state.json")

RPMTAG_NAME = 1000
RPMTAG_VERSION = 1001
RPMTAG_RELEASE = 1002
RPMTAG_EPOCH = 1003
RPMTAG_SUMMARY = 1004
RPMTAG_ARCH = 1022
RPMTAG_NEVRA = 5019
_FIELDS = {RPMTAG_NAME: "name", RPMTAG_VERSION: "version", RPMTAG_RELEASE: "release", RPMTAG_EPOCH: "epoch",
           RPMTAG_SUMMARY: "name", RPMTAG_ARCH: "arch"}
_BY_NAME = {"name": RPMTAG_NAME, "version": RPMTAG_VERSION, "release": RPMTAG_RELEASE, "epoch": RPMTAG_EPOCH, "arch": RPMTAG_ARCH}

__version__ = "4.16.1.3"


class error(Exception):
    """What the bindings raise (``rpm.error``)."""


class hdr:
    """One installed package's header: values by ``RPMTAG_*`` number or tag name."""

    def __init__(self, package: dict[str, Any]) -> None:
        self._package = package

    def __getitem__(self, tag: int | str) -> Any:
        number = _BY_NAME.get(tag.lower(), -1) if isinstance(tag, str) else tag
        if number == RPMTAG_NEVRA:
            p = self._package
            epoch = f"{p['epoch']}:" if p.get("epoch") is not None else ""
            return f"{p['name']}-{epoch}{p['version']}-{p['release']}.{p['arch']}"
        if number not in _FIELDS:
            raise KeyError(tag)
        return self._package.get(_FIELDS[number])

    def __repr__(self) -> str:
        return f"<rpm.hdr {self[RPMTAG_NEVRA]}>"


class TransactionSet:
    """The rpm database of the modelled host, read-only."""

    def __init__(self, root: str = "/") -> None:
        self._packages: list[dict[str, Any]] = json.loads(STATE_FILE.read_text(encoding="utf-8"))["packages"]

    def dbMatch(self, tag: int | str = 0, value: Any = None) -> Iterator[hdr]:
        """Every package, or those whose ``tag`` equals ``value`` (a glob for names)."""
        number = _BY_NAME.get(tag.lower(), 0) if isinstance(tag, str) else tag
        for package in sorted(self._packages, key=lambda p: str(p["name"])):
            if value is None or number == 0:
                yield hdr(package)
                continue
            wanted = value.decode() if isinstance(value, bytes) else str(value)
            field = _FIELDS.get(number)
            if field is not None and fnmatch.fnmatchcase(str(package.get(field)), wanted):
                yield hdr(package)

    def closeDB(self) -> None:
        """Nothing to close: the database is a file read at construction."""
