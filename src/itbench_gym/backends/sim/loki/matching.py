"""Text primitives LogQL builds on: patterns, logfmt, durations, byte sizes, levels.

Each follows the Go library Loki uses (``time.ParseDuration``, ``humanize.ParseBytes``, go-logfmt,
Loki's own pattern matcher and level detection) closely enough that the queries an operator writes
behave the same. Regular expressions are Go's too, from :mod:`itbench_gym.lang.regex`.
Every function here runs in time linear in its input.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from itbench_gym.lang.durations import DurationError, parse_go_duration, parse_prometheus_duration


@dataclass(frozen=True)
class Pattern:
    """Loki's pattern expression: literals and ``<name>`` / ``<_>`` captures, in order."""

    parts: tuple[tuple[bool, str], ...]

    @property
    def names(self) -> list[str]:
        return [p for is_capture, p in self.parts if is_capture and p != "_"]

    def match(self, line: str, *, whole: bool) -> dict[str, str] | None:
        """Captured values, or None when a literal is missing (or, if ``whole``, text is left over)."""
        out: dict[str, str] = {}
        pos = 0
        parts = self.parts
        for i, (is_capture, text) in enumerate(parts):
            if not is_capture:
                if i == 0:
                    if not line.startswith(text):
                        return None
                    pos = len(text)
                continue
            nxt = parts[i + 1][1] if i + 1 < len(parts) else None
            if nxt is None:
                value, pos = line[pos:], len(line)
            else:
                end = line.find(nxt, pos)
                if end < 0:
                    return None
                value, pos = line[pos:end], end + len(nxt)
            if text != "_":
                out[text] = value
        if whole and pos != len(line):
            return None
        return out


_CAPTURE = re.compile(r"<(_|[A-Za-z_][A-Za-z0-9_]*)>")


def compile_pattern(text: str, *, need_capture: bool) -> Pattern:
    """Raises ValueError with Loki's wording for patterns it rejects."""
    parts: list[tuple[bool, str]] = []
    pos = 0
    for m in _CAPTURE.finditer(text):
        if m.start() > pos:
            parts.append((False, text[pos:m.start()]))
        elif parts and parts[-1][0]:
            raise ValueError("found consecutive capture: invalid expression")
        parts.append((True, m.group(1)))
        pos = m.end()
    if pos < len(text):
        parts.append((False, text[pos:]))
    if not parts:
        raise ValueError("at least one capture or literal is required")
    pattern = Pattern(tuple(parts))
    if need_capture and not pattern.names:
        raise ValueError("at least one capture is required")
    if len(set(pattern.names)) != len(pattern.names):
        raise ValueError("duplicate capture name")
    return pattern


def logfmt_pairs(line: str, *, strict: bool = False) -> list[tuple[str, str | None]]:
    """``key=value`` pairs in order; a bare key has value None. ``strict`` raises ValueError."""
    out: list[tuple[str, str | None]] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] <= " ":
            i += 1
        if i >= n:
            break
        start = i
        while i < n and line[i] > " " and line[i] not in '="':
            i += 1
        key = line[start:i]
        if i < n and line[i] == '"':
            if strict:
                raise ValueError(f"logfmt syntax error at pos {i + 1} : unexpected '\"'")
            while i < n and line[i] > " ":
                i += 1
            continue
        if not key:
            if strict:
                raise ValueError(f"logfmt syntax error at pos {i + 1} : unexpected '='")
            while i < n and line[i] > " ":
                i += 1
            continue
        if i >= n or line[i] != "=":
            out.append((key, None))
            continue
        i += 1
        if i < n and line[i] == '"':
            j = i + 1
            buf = []
            while j < n and line[j] != '"':
                if line[j] == "\\" and j + 1 < n:
                    buf.append(line[j:j + 2])
                    j += 2
                    continue
                buf.append(line[j])
                j += 1
            if j >= n:
                if strict:
                    raise ValueError(f"logfmt syntax error at pos {n + 1} : unterminated quoted value")
                out.append((key, "".join(buf)))
                break
            raw = "".join(buf)
            try:
                value = json.loads(f'"{raw}"')
            except json.JSONDecodeError:
                value = raw
            out.append((key, value))
            i = j + 1
        else:
            start = i
            while i < n and line[i] > " ":
                if line[i] in '="' and strict:
                    raise ValueError(f"logfmt syntax error at pos {i + 1} : unexpected {line[i]!r}")
                i += 1
            out.append((key, line[start:i]))
    return out


def parse_duration(text: str) -> float:
    """A duration in a LogQL query (``[5m]``, ``> 250ms``): Prometheus' grammar first, then Go's, as Loki's lexer.

    ValueError (``DurationError``, with Go's message) if it is neither.
    """
    try:
        return parse_prometheus_duration(text)
    except DurationError:
        return parse_go_duration(text)


def convert_duration(text: str) -> float:
    """``| unwrap duration(label)`` and ``label > 1s`` on extracted values: Go's ``time.ParseDuration``."""
    return parse_go_duration(text)


_BYTES = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgtpe]?i?b?)\s*$", re.I)
_BYTE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mi": 1024**2,
               "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3, "t": 1000**4, "tb": 1000**4,
               "ti": 1024**4, "tib": 1024**4, "p": 1000**5, "pb": 1000**5, "pi": 1024**5, "pib": 1024**5,
               "e": 1000**6, "eb": 1000**6, "ei": 1024**6, "eib": 1024**6}


def parse_bytes(text: str) -> float:
    """Bytes in a humanize size (``5MB``, ``1.5 KiB``, ``300``); ValueError if not one."""
    m = _BYTES.match(text)
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise ValueError(f"strconv.ParseFloat: parsing {text!r}: invalid syntax")
    return float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()]


_INVALID_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label(key: str) -> str:
    """Loki's label-name sanitising for parsed fields: invalid characters become ``_``."""
    key = _INVALID_LABEL_CHAR.sub("_", key)
    if key and key[0].isdigit():
        key = "_" + key
    return key


_LEVEL_KEYS = ("level", "LEVEL", "Level", "severity", "SEVERITY", "Severity", "lvl", "LVL", "Lvl")
_LEVELS = {"trace": "trace", "trc": "trace", "debug": "debug", "dbg": "debug", "info": "info", "inf": "info",
           "warn": "warn", "wrn": "warn", "warning": "warn", "error": "error", "err": "error",
           "critical": "critical", "fatal": "fatal"}
#: Only lines with one of the level keys are worth decoding as logfmt.
_LOGFMT_KEYS = tuple(k + "=" for k in _LEVEL_KEYS)
_LOGFMT_LEVEL = re.compile(r"(?:^|\s)(?:level|LEVEL|Level|severity|SEVERITY|Severity|lvl|LVL|Lvl)=")
_JSON_LEVEL = re.compile(r'"(level|LEVEL|Level|severity|SEVERITY|Severity|lvl|LVL|Lvl)"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|([^,}\s]+))')


def detect_level(line: str) -> str:
    """Loki's ``detected_level`` for a line without OTLP severity (distributor level detection)."""
    value: str | None = None
    stripped = line.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        m = _JSON_LEVEL.search(line)
        if m:
            value = m.group(2) if m.group(2) is not None else m.group(3)
    elif "=" in line and any(key in line for key in _LOGFMT_KEYS) and _LOGFMT_LEVEL.search(line):
        value = next((v for k, v in logfmt_pairs(line) if k in _LEVEL_KEYS and v is not None), None)
    if value is not None:
        level = _LEVELS.get(value.lower())
        if level:
            return level
    return _level_from_text(line)


def _level_from_text(line: str) -> str:
    if "info" in line or "INFO" in line:
        return "info"
    if "err:" in line or "ERR:" in line or "error" in line or "ERROR" in line:
        return "error"
    if "warn:" in line or "WARN:" in line or "warning" in line or "WARNING" in line:
        return "warn"
    if "CRITICAL:" in line or "critical:" in line:
        return "critical"
    if "debug:" in line or "DEBUG:" in line:
        return "debug"
    return "unknown"


IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPRange = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ipaddress.IPv4Address | ipaddress.IPv6Address]


def ip_range(text: str) -> IPNetwork | IPRange:
    """``ip("...")``: one address, a CIDR network or an ``a-b`` range; ValueError names the bad input."""
    try:
        if "-" in text:
            lo, hi = (ipaddress.ip_address(p.strip()) for p in text.split("-", 1))
            return lo, hi
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"invalid ip filter {text!r}: use an address, a CIDR such as 10.0.0.0/8, or a range a-b") from None


def ip_in(value: str, allowed: IPNetwork | IPRange) -> bool:
    try:
        addr = ipaddress.ip_address(value.strip())
    except ValueError:
        return False
    if isinstance(allowed, tuple):
        lo, hi = allowed
        return addr.version == lo.version and lo <= addr <= hi  # type: ignore[operator]
    return addr in allowed
