"""Leaderboard tables from results stores, in the paper's shape, several agents side by side.

SRE columns (ITBench paper, Table 3): diagnosis pass@1 (fault localisation), FL-NTAM, FPC-NTAM,
MTTD, mitigation pass@1, MTTR — each mean ± standard error — plus pass@k of the whole episode
(diagnosis and mitigation both pass) by the unbiased estimator, and today's ITBench-Evaluations
per-incident metrics: root-cause entity F1, root-cause entity@k and component identification.
Tables: overall, per complexity, per class. Privileged agents (the oracle) are listed apart, never
ranked.

CISO columns (ITBench paper, Table 5): pass@1 of each class (kyverno, k8s-opa, rhel9-opa,
kyverno-update) and over all of them, and the time to process (TTP: simulated seconds from the
hand-over to the submit), each mean ± standard error, plus pass@k.

FinOps columns (ITBench paper, FinOps table): diagnosis pass@1, mitigation pass@1, the proximity to
optimal (1 − |observed − optimal| / optimal) of the namespace's hourly CPU cost, hourly memory cost,
CPU efficiency and memory efficiency (an episode without a measure is left out of that mean), and
MTTR (an episode whose cost alerts never cleared counts as ∞), each mean ± standard error, plus
pass@k of the whole episode; ranked by mitigation pass@1, then diagnosis pass@1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itbench_gym.evaluation.aggregate import GroupSummary, MeanSE, summarise
from itbench_gym.runner.store import AgentInfo, ResultStore

#: Column -> dotted path in an episode's evaluation.
SRE_COLUMNS: dict[str, str] = {
    "diagnosis pass@1": "diagnosis.fl_pass",
    "FL-NTAM": "diagnosis.ntam_fl",
    "FPC-NTAM": "diagnosis.ntam_fpc",
    "MTTD (s)": "times.mttd",
    "mitigation pass@1": "mitigation.passed",
    "MTTR (s)": "times.mttr",
    "RC entity F1": "diagnosis.root_cause_entity.f1",
    "RC entity@3": "diagnosis.root_cause_at_k.3",
    "component id": "diagnosis.component_identification",
}
#: The CISO classes in the paper's order, each a pass@1 column.
CISO_CLASSES = ("kyverno", "k8s-opa", "rhel9-opa", "kyverno-update")
#: FinOps column -> dotted path in an episode's evaluation (``FinOpsEvaluation.to_dict``).
FINOPS_COLUMNS: dict[str, str] = {
    "diagnosis pass@1": "diagnosis.passed",
    "mitigation pass@1": "mitigation.passed",
    "CPU cost proximity": "proximity.cpu_cost_hourly",
    "memory cost proximity": "proximity.ram_cost_hourly",
    "CPU efficiency proximity": "proximity.cpu_efficiency",
    "memory efficiency proximity": "proximity.ram_efficiency",
    "MTTR (s)": "times.mttr",
}
TTP_COLUMN = "TTP (s)"
TIME_COLUMNS = frozenset({"MTTD (s)", "MTTR (s)", TTP_COLUMN})
#: The FinOps section's one-line explanation (Markdown and HTML).
FINOPS_NOTE = ("Proximity: 1 − |observed − optimal| / optimal of the namespace's hourly CPU and memory cost and CPU and "
               "memory efficiency (an episode without the measure is left out); MTTR: simulated seconds from the "
               "hand-over to the cost alerts clearing for good (∞ when the mitigation failed); pass@k: diagnosis and mitigation both pass.")
#: The column an agent is ranked by.
RANK_BY = "diagnosis pass@1"


@dataclass(frozen=True)
class Leaderboard:
    agents: tuple[AgentInfo, ...]
    results: tuple[dict[str, Any], ...]
    k_values: tuple[int, ...]
    errors: tuple[tuple[str, str, int, str], ...]

    def of_domain(self, domain: str) -> tuple[dict[str, Any], ...]:
        return tuple(r for r in self.results if r.get("domain", "sre") == domain)

    def table(self, by: Sequence[str] = ()) -> list[GroupSummary]:
        """SRE summaries grouped by agent and ``by`` (``complexity``, ``class``), best agent first."""
        sre = self.of_domain("sre")
        if not sre:
            return []
        groups = summarise(sre, by=("agent", *by), metrics=SRE_COLUMNS, k_values=self._ks())
        privileged = {a.label for a in self.agents if a.privileged}

        def order(s: GroupSummary) -> tuple[Any, ...]:
            score = s.metrics[RANK_BY].mean
            return (*(str(s.key[k]) for k in by), s.key["agent"] in privileged, -(score or 0.0), str(s.key["agent"]))

        return sorted(groups, key=order)

    def _ks(self) -> list[int]:
        """The asked k that every agent's scenarios have enough runs for."""
        fewest = min((n for n in self.runs_per_scenario().values()), default=1)
        return [k for k in self.k_values if k <= fewest] or [1]

    def runs_per_scenario(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for r in self.results:
            key = (r["agent"], r["scenario"])
            counts[key] = counts.get(key, 0) + 1
        return counts

    def is_privileged(self, label: str) -> bool:
        return any(a.label == label and a.privileged for a in self.agents)


def ciso_cells(board: Leaderboard) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The CISO table's header and rows: per agent, pass@1 of each class and overall, TTP, pass@k."""
    results = board.of_domain("ciso")
    if not results:
        return [], []
    ks = board._ks()
    overall = {str(s.key["agent"]): s for s in summarise(results, by=("agent",), metrics={TTP_COLUMN: "ttp_seconds"}, k_values=ks)}
    per_class = {(str(s.key["agent"]), str(s.key["class"])): s for s in summarise(results, by=("agent", "class"), metrics={})}
    header = ["agent", "episodes", "scenarios", *(f"{c} pass@1" for c in CISO_CLASSES), "pass@1", TTP_COLUMN, *(f"pass@{k}" for k in ks if k != 1)]

    def rank(agent: str) -> tuple[bool, float, str]:
        return board.is_privileged(agent), -(overall[agent].pass_at_k[1].mean or 0.0) if 1 in overall[agent].pass_at_k else 0.0, agent

    rows = []
    for agent in sorted(overall, key=rank):
        s = overall[agent]
        cells = [agent, str(s.episodes), str(s.scenarios)]
        for c in CISO_CLASSES:
            group = per_class.get((agent, c))
            cells.append(group.pass_at_k[1].format() if group is not None else "—")
        cells += [s.pass_at_k[1].format() if 1 in s.pass_at_k else "—", cell(s.metrics[TTP_COLUMN], TTP_COLUMN)]
        cells += [s.pass_at_k[k].format() for k in ks if k != 1]
        rows.append((agent, cells))
    return header, rows


def _unresolved_as_inf(result: dict[str, Any]) -> dict[str, Any]:
    """A FinOps result whose MTTR is null (the cost alerts never cleared) as the SRE tables count it: ∞."""
    evaluation = result.get("evaluation") or {}
    times = evaluation.get("times") or {}
    if times.get("mttr") is not None:
        return result
    return {**result, "evaluation": {**evaluation, "times": {**times, "mttr": "inf"}}}


def finops_cells(board: Leaderboard) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The FinOps table's header and rows: per agent, diagnosis and mitigation pass@1, the four proximities
    to optimal, MTTR, pass@k; ranked by mitigation then diagnosis pass@1, privileged agents last."""
    results = [_unresolved_as_inf(r) for r in board.of_domain("finops")]
    if not results:
        return [], []
    ks = board._ks()
    summaries = {str(s.key["agent"]): s for s in summarise(results, by=("agent",), metrics=FINOPS_COLUMNS, k_values=ks)}
    header = ["agent", "episodes", "scenarios", *FINOPS_COLUMNS, *(f"pass@{k}" for k in ks)]

    def rank(agent: str) -> tuple[bool, float, float, str]:
        metrics = summaries[agent].metrics
        mitigation, diagnosis = metrics["mitigation pass@1"].mean, metrics["diagnosis pass@1"].mean
        return board.is_privileged(agent), -(mitigation or 0.0), -(diagnosis or 0.0), agent

    rows = []
    for agent in sorted(summaries, key=rank):
        s = summaries[agent]
        cells = [agent, str(s.episodes), str(s.scenarios), *(cell(s.metrics[c], c) for c in FINOPS_COLUMNS)]
        cells += [s.pass_at_k[k].format() for k in ks]
        rows.append((agent, cells))
    return header, rows


def load(folders: Iterable[Path | str], k_values: Sequence[int] = (1,)) -> Leaderboard:
    """Every finished episode of every store (an agent label seen in two stores keeps both stores' episodes)."""
    agents: dict[str, AgentInfo] = {}
    results: list[dict[str, Any]] = []
    errors: list[tuple[str, str, int, str]] = []
    for folder in folders:
        with ResultStore.open_existing(folder) as store:
            for agent in store.agents():
                agents.setdefault(agent.label, agent)
            results += store.results()
            errors += store.errors()
    return Leaderboard(tuple(agents.values()), tuple(results), tuple(sorted(set(k_values))), tuple(errors))


def cell(value: MeanSE, column: str) -> str:
    return value.format(1 if column in TIME_COLUMNS else 3)


def table_cells(board: Leaderboard, by: Sequence[str] = ()) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """The header and, per row, the agent's label and the formatted cells (shared by Markdown and HTML)."""
    rows = board.table(by)
    if not rows:
        return [], []
    ks = sorted(rows[0].pass_at_k)
    header = ["agent", *by, "episodes", "scenarios", *SRE_COLUMNS, *(f"pass@{k}" for k in ks)]
    out = []
    for s in rows:
        agent = str(s.key["agent"])
        cells = [agent, *(str(s.key[k]) for k in by), str(s.episodes), str(s.scenarios)]
        cells += [cell(s.metrics[c], c) for c in SRE_COLUMNS] + [s.pass_at_k[k].format() for k in ks]
        out.append((agent, cells))
    return header, out


def markdown_table(board: Leaderboard, by: Sequence[str] = ()) -> str:
    """One Markdown table: a row per agent (and group), the paper's SRE columns, pass@k."""
    return _markdown(board, *table_cells(board, by))


def _markdown(board: Leaderboard, header: list[str], rows: list[tuple[str, list[str]]]) -> str:
    if not rows:
        return "(no finished episodes)"
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for agent, cells in rows:
        label = agent + (" (privileged)" if board.is_privileged(agent) else "")
        lines.append("| " + " | ".join([label, *cells[1:]]) + " |")
    return "\n".join(lines)


def summary_markdown(board: Leaderboard) -> str:
    """The overall table of each track the board holds (what ``itbench-gym run`` prints after a batch)."""
    parts = []
    if board.of_domain("sre"):
        parts.append("SRE\n\n" + markdown_table(board))
    if board.of_domain("ciso"):
        parts.append("CISO\n\n" + _markdown(board, *ciso_cells(board)))
    if board.of_domain("finops"):
        parts.append("FinOps\n\n" + _markdown(board, *finops_cells(board)))
    return "\n\n".join(parts) or "(no finished episodes)"


def markdown_report(board: Leaderboard) -> str:
    """The whole report: SRE overall, per complexity, per class; CISO; FinOps; the episodes that failed to run."""
    parts = ["# Leaderboard", "", "Mean ± standard error over episodes; pass@k (unbiased) over scenarios. "
             "Privileged agents read the ground truth and are not ranked."]
    if board.of_domain("sre"):
        parts += ["", "## SRE", "", markdown_table(board), "",
                  "### SRE by complexity", "", markdown_table(board, ("complexity",)), "",
                  "### SRE by class", "", markdown_table(board, ("class",))]
    if board.of_domain("ciso"):
        parts += ["", "## CISO", "", "pass@1 per class as the paper's Table 5 reports it; TTP: simulated seconds from the hand-over "
                  "to the submit.", "", _markdown(board, *ciso_cells(board))]
    if board.of_domain("finops"):
        parts += ["", "## FinOps", "", FINOPS_NOTE, "", _markdown(board, *finops_cells(board))]
    if board.errors:
        parts += ["", "## Episodes that did not finish", ""]
        parts += [f"- {agent} · {scenario} run {run}: {error.splitlines()[0]}" for agent, scenario, run, error in board.errors]
    return "\n".join(parts) + "\n"
