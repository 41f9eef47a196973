"""The results store of a batch run: one SQLite database per output folder.

Each finished episode is written in one transaction (its episode row, its steps and its evaluation),
so a run killed at any moment keeps every episode it finished and never a half-written one; a
resumed run asks :meth:`ResultStore.done` what to skip. Episodes are keyed by (agent label, scenario,
run): one database can hold several agents or models side by side.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DB_NAME = "results.sqlite"
SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS agents (
    label TEXT PRIMARY KEY,      -- how the agent is named in tables (its name, or name/model)
    spec TEXT NOT NULL,          -- what `run --agent` was given
    privileged INTEGER NOT NULL, -- reads the ground truth (the oracle): never ranked
    model TEXT NOT NULL,         -- JSON: the model and its settings (empty for agents without one)
    package_version TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS episodes (
    agent TEXT NOT NULL REFERENCES agents(label),
    scenario TEXT NOT NULL,
    run INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    scenario_version TEXT NOT NULL,
    domain TEXT NOT NULL,
    class TEXT NOT NULL,
    complexity TEXT NOT NULL,
    status TEXT NOT NULL,        -- 'finished' or 'error'
    error TEXT,
    steps INTEGER NOT NULL,
    wall_seconds REAL NOT NULL,
    sim_seconds REAL NOT NULL,
    agent_stats TEXT NOT NULL,   -- JSON: the agent's own accounting (tokens, cost, model latency)
    finished_at TEXT NOT NULL,
    PRIMARY KEY (agent, scenario, run)
);
CREATE TABLE IF NOT EXISTS steps (
    agent TEXT NOT NULL, scenario TEXT NOT NULL, run INTEGER NOT NULL, idx INTEGER NOT NULL,
    action TEXT NOT NULL, tool TEXT, exit_status INTEGER NOT NULL, sim_time REAL NOT NULL,
    wall_seconds REAL NOT NULL, observation TEXT NOT NULL,
    PRIMARY KEY (agent, scenario, run, idx)
);
CREATE TABLE IF NOT EXISTS evaluations (
    agent TEXT NOT NULL, scenario TEXT NOT NULL, run INTEGER NOT NULL,
    passed INTEGER NOT NULL, reward REAL NOT NULL, fl_pass INTEGER, mitigation_pass INTEGER,
    ntam_fl REAL, ntam_fpc REAL, mttd REAL, mttr REAL,
    document TEXT NOT NULL,      -- JSON: the whole evaluation (info["evaluation"])
    PRIMARY KEY (agent, scenario, run)
);
"""


class StoreError(RuntimeError):
    """A results folder that cannot be used as asked (another schema, a clash without --resume)."""


@dataclass(frozen=True)
class AgentInfo:
    label: str
    spec: str
    privileged: bool
    model: Mapping[str, Any]
    package_version: str


@dataclass
class EpisodeRecord:
    """One finished (or failed) episode, as the runner hands it to the store."""

    agent: str
    scenario: str
    run: int
    seed: int
    scenario_version: str
    domain: str
    cls: str
    complexity: str
    status: str
    error: str | None
    wall_seconds: float
    sim_seconds: float
    agent_stats: Mapping[str, Any]
    steps: Sequence[Mapping[str, Any]]
    evaluation: Mapping[str, Any] | None

    @property
    def passed(self) -> bool:
        return bool(self.evaluation and self.evaluation.get("passed"))


def _number(value: Any) -> float | None:
    """A metric as SQLite stores it: None for a missing value, +inf kept (SQLite has no NaN)."""
    if value is None:
        return None
    if value == "inf":
        return float("inf")
    return float(value)


class ResultStore:
    """``DIR/results.sqlite``: agents, episodes, steps and evaluations."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)
        self.path = self.folder / DB_NAME
        self.folder.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        found = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if found is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(found[0]) != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: results of schema version {found[0]}, this package writes {SCHEMA_VERSION}")

    @classmethod
    def open_existing(cls, folder: Path | str) -> ResultStore:
        """A folder a run wrote (``report`` reads it); a clear error for one that holds no results."""
        if not (Path(folder) / DB_NAME).is_file():
            raise StoreError(f"{folder}: no {DB_NAME} here (is it the --out folder of `itbench-gym run`?)")
        return cls(folder)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------------
    def register_agent(self, agent: AgentInfo, *, resume: bool) -> None:
        """Record the agent; without ``resume`` a label that already has episodes is refused."""
        row = self._db.execute("SELECT spec, model FROM agents WHERE label=?", (agent.label,)).fetchone()
        count = self._db.execute("SELECT COUNT(*) FROM episodes WHERE agent=?", (agent.label,)).fetchone()[0]
        if row is not None and count and not resume:
            raise StoreError(f"{self.path} already holds {count} episode(s) of agent {agent.label!r}: "
                             "pass --resume to finish that run, or another --out folder")
        if row is not None and resume and (row[0] != agent.spec or json.loads(row[1]) != dict(agent.model)):
            raise StoreError(f"{self.path}: --resume with another agent or model than the run it resumes "
                             f"(stored {row[0]!r} {row[1]}, given {agent.spec!r} {json.dumps(dict(agent.model))})")
        from datetime import UTC, datetime

        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO agents VALUES (?, ?, ?, ?, ?, ?)",
                (agent.label, agent.spec, int(agent.privileged), json.dumps(dict(agent.model), sort_keys=True),
                 agent.package_version, datetime.now(UTC).isoformat(timespec="seconds")),
            )

    def write(self, record: EpisodeRecord) -> None:
        """One episode with its steps and evaluation, all or nothing (a failed retry replaces its row)."""
        from datetime import UTC, datetime

        key = (record.agent, record.scenario, record.run)
        with self._transaction():
            for table in ("episodes", "steps", "evaluations"):
                self._db.execute(f"DELETE FROM {table} WHERE agent=? AND scenario=? AND run=?", key)
            self._db.execute(
                "INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*key, record.seed, record.scenario_version, record.domain, record.cls, record.complexity, record.status,
                 record.error, len(record.steps), record.wall_seconds, record.sim_seconds,
                 json.dumps(dict(record.agent_stats), sort_keys=True, default=str),
                 datetime.now(UTC).isoformat(timespec="seconds")),
            )
            self._db.executemany(
                "INSERT INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(*key, s["index"], s["action"], s.get("tool"), s["exit_status"], s["sim_time"], s["wall_seconds"],
                  s["observation"]) for s in record.steps],
            )
            ev = record.evaluation
            if ev is not None:
                diagnosis, mitigation, times = ev.get("diagnosis") or {}, ev.get("mitigation") or {}, ev.get("times") or {}
                self._db.execute(
                    "INSERT INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (*key, int(bool(ev.get("passed"))), float(ev.get("reward") or 0.0),
                     None if diagnosis.get("fl_pass") is None else int(diagnosis["fl_pass"]),
                     None if mitigation.get("passed") is None else int(mitigation["passed"]),
                     _number(diagnosis.get("ntam_fl")), _number(diagnosis.get("ntam_fpc")),
                     _number(times.get("mttd")), _number(times.get("mttr")),
                     json.dumps(ev, sort_keys=True, default=str)),
                )

    def _transaction(self) -> Any:
        return _Transaction(self._db)

    # -- reading --------------------------------------------------------------------------------
    def done(self, agent: str) -> set[tuple[str, int]]:
        """(scenario, run) of the agent's finished episodes (errored ones are run again)."""
        cur = self._db.execute("SELECT scenario, run FROM episodes WHERE agent=? AND status='finished'", (agent,))
        return {(s, int(r)) for s, r in cur.fetchall()}

    def agents(self) -> list[AgentInfo]:
        cur = self._db.execute("SELECT label, spec, privileged, model, package_version FROM agents ORDER BY label")
        return [AgentInfo(label, spec, bool(priv), json.loads(model), version) for label, spec, priv, model, version in cur]

    def results(self, agent: str | None = None) -> Iterator[dict[str, Any]]:
        """Every finished episode as a result dict (the keys ``evaluation.aggregate.summarise`` groups by)."""
        query = ("SELECT e.agent, e.scenario, e.run, e.seed, e.domain, e.class, e.complexity, e.steps, e.wall_seconds, "
                 "e.agent_stats, v.document FROM episodes e JOIN evaluations v USING (agent, scenario, run) "
                 "WHERE e.status='finished'" + (" AND e.agent=?" if agent is not None else "") + " ORDER BY e.agent, e.scenario, e.run")
        with closing(self._db.execute(query, (agent,) if agent is not None else ())) as cur:
            for row in cur.fetchall():
                label, scenario, run, seed, domain, cls, complexity, steps, wall, stats, document = row
                yield {"agent": label, "scenario": scenario, "run": run, "seed": seed, "domain": domain, "class": cls,
                       "complexity": complexity, "steps": steps, "wall_seconds": wall, "agent_stats": json.loads(stats),
                       "evaluation": json.loads(document)}

    def errors(self) -> list[tuple[str, str, int, str]]:
        cur = self._db.execute("SELECT agent, scenario, run, error FROM episodes WHERE status='error' ORDER BY agent, scenario, run")
        return [(a, s, int(r), str(e)) for a, s, r, e in cur.fetchall()]


class _Transaction:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (``ROLLBACK`` on an exception) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
