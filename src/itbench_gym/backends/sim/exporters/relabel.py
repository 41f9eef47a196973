"""Prometheus' ``relabel_config``: how scrape targets and scraped series are renamed, kept or dropped.

Semantics of ``prometheus/prometheus:model/relabel/relabel.go``: the source labels' values joined
by ``separator`` (``;``) are matched against ``regex`` (anchored, ``.`` matching newlines), default
``(.*)``; ``replacement`` (default ``$1``) is expanded with the match's groups as Go's
``Regexp.Expand`` does. prometheus-operator writes ServiceMonitor ``relabelings`` and
``metricRelabelings`` in camelCase (``sourceLabels``, ``targetLabel``); both spellings are read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from itbench_gym.lang import regex

ACTIONS = ("replace", "keep", "drop", "keepequal", "dropequal", "hashmod", "labelmap", "labeldrop", "labelkeep",
           "lowercase", "uppercase")


class RelabelError(ValueError):
    """A relabel config Prometheus would refuse to load."""


@dataclass(frozen=True)
class Relabel:
    """One parsed ``relabel_config``."""

    action: str
    source_labels: tuple[str, ...]
    separator: str
    regex: regex.Regex
    target_label: str
    replacement: str
    modulus: int

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Relabel:
        def get(snake: str, camel: str, default: Any) -> Any:
            return raw.get(snake, raw.get(camel, default))

        action = str(get("action", "action", "replace")).lower()
        if action not in ACTIONS:
            raise RelabelError(f"unknown relabel action {action!r}")
        pattern = str(get("regex", "regex", "(.*)"))
        try:
            compiled = regex.compile(pattern, anchored=True)
        except regex.RegexError as exc:
            raise RelabelError(f"invalid relabel regex {pattern!r}: {exc}") from None
        target = str(get("target_label", "targetLabel", ""))
        if action in ("replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal") and not target:
            raise RelabelError(f"relabel action {action} needs a target label")
        return cls(action, tuple(str(s) for s in get("source_labels", "sourceLabels", ()) or ()),
                   str(get("separator", "separator", ";")), compiled, target,
                   str(get("replacement", "replacement", "$1")), int(get("modulus", "modulus", 0) or 0))

    def apply(self, labels: dict[str, str]) -> bool:
        """Relabel ``labels`` in place; False when the action drops the target or series."""
        act = self.action
        if act in ("labelmap", "labeldrop", "labelkeep"):
            for name in list(labels):
                hit = self.regex.matches(name)
                if act == "labeldrop" and hit or act == "labelkeep" and not hit:
                    del labels[name]
                elif act == "labelmap" and hit:
                    m = self.regex.fullmatch(name)
                    if m is not None:
                        labels[self.regex.expand(m, self.replacement)] = labels[name]
            return True
        value = self.separator.join(labels.get(s, "") for s in self.source_labels)
        if act == "keep":
            return self.regex.matches(value)
        if act == "drop":
            return not self.regex.matches(value)
        if act == "keepequal":
            return value == labels.get(self.target_label, "")
        if act == "dropequal":
            return value != labels.get(self.target_label, "")
        if act in ("lowercase", "uppercase"):
            labels[self.target_label] = value.lower() if act == "lowercase" else value.upper()
            return True
        if act == "hashmod":
            digest = int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big")
            labels[self.target_label] = str(digest % self.modulus) if self.modulus else "0"
            return True
        m = self.regex.fullmatch(value)
        if m is None:
            return True
        target = self.regex.expand(m, self.target_label)
        if not _valid_label_name(target):
            return True
        result = self.regex.expand(m, self.replacement)
        if result:
            labels[target] = result
        else:
            labels.pop(target, None)
        return True


def _valid_label_name(name: str) -> bool:
    return bool(name) and (name[0].isalpha() or name[0] == "_") and all(c.isalnum() or c == "_" for c in name) \
        and name.isascii()


def parse_all(raws: Sequence[Mapping[str, Any]] | None) -> tuple[Relabel, ...]:
    return tuple(Relabel.parse(r) for r in raws or () if isinstance(r, Mapping))


def relabel(labels: Mapping[str, str], configs: Sequence[Relabel]) -> dict[str, str] | None:
    """``labels`` after every config in order (a new dict), or None when one of them drops it."""
    out = dict(labels)
    for c in configs:
        if not c.apply(out):
            return None
    return out
