"""The leaderboard as one self-contained HTML page: the SRE, CISO and FinOps tables and matplotlib plots inlined as PNG.

Plots: a scenario × run success grid per agent, time-to-resolution (MTTR) distributions, and the
pass rates by complexity. Nothing is fetched when the page opens.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from typing import Any

from itbench_gym.runner.leaderboard import FINOPS_NOTE, Leaderboard, ciso_cells, finops_cells, table_cells

COMPLEXITIES = ("easy", "medium", "hard")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f2f2f2; }
tr.privileged td { color: #777; font-style: italic; }
img { display: block; max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0; }
"""


def _pyplot() -> Any:
    """pyplot on the file-only Agg backend (no display is needed or opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _agents(board: Leaderboard) -> list[str]:
    return sorted({str(r["agent"]) for r in board.results})


def success_grid(board: Leaderboard) -> str:
    """Scenario × run, one panel per agent: green passed, red failed."""
    import numpy as np

    plt = _pyplot()

    agents = _agents(board)
    scenarios = sorted({str(r["scenario"]) for r in board.results})
    runs = max(int(r["run"]) for r in board.results) + 1
    fig, axes = plt.subplots(1, len(agents), figsize=(2.0 + 1.2 * runs * len(agents), 1.0 + 0.22 * len(scenarios)),
                             squeeze=False, sharey=True)
    for ax, agent in zip(axes[0], agents, strict=True):
        grid = np.full((len(scenarios), runs), np.nan)
        for r in board.results:
            if r["agent"] == agent:
                grid[scenarios.index(str(r["scenario"])), int(r["run"])] = 1.0 if r["evaluation"].get("passed") else 0.0
        ax.imshow(np.ma.masked_invalid(grid), cmap="RdYlGn", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_title(agent, fontsize=9)
        ax.set_xticks(range(runs), [str(i) for i in range(runs)], fontsize=7)
        ax.set_xlabel("run", fontsize=8)
        ax.set_yticks(range(len(scenarios)), scenarios, fontsize=6)
    fig.suptitle("Episodes passed (green) and failed (red)", fontsize=10, y=1.02)
    return _png(fig)


def resolution_times(board: Leaderboard) -> str:
    """MTTR of the episodes that were resolved, per agent (unresolved ones counted in the label; an episode
    whose scenario grades no mitigation has no MTTR and is left out)."""
    plt = _pyplot()
    agents = _agents(board)
    data, labels = [], []
    for agent in agents:
        times = [t for r in board.results if r["agent"] == agent if (t := r["evaluation"].get("times", {}).get("mttr")) is not None]
        finite = [float(t) for t in times if isinstance(t, (int, float)) and math.isfinite(t)]
        data.append(finite or [math.nan])
        labels.append(f"{agent}\n({len(finite)} of {len(times)} resolved)")
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(agents), 3.2))
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.set_ylabel("MTTR (simulated seconds)")
    ax.set_title("Time to resolution", fontsize=10)
    return _png(fig)


def by_complexity(board: Leaderboard) -> str:
    """Diagnosis and mitigation pass rates per complexity, a bar per agent."""
    import numpy as np

    plt = _pyplot()

    agents = _agents(board)
    rows = {(str(s.key["agent"]), str(s.key["complexity"])): s for s in board.table(("complexity",))}
    levels = [c for c in COMPLEXITIES if any(k[1] == c for k in rows)]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    width = 0.8 / max(1, len(agents))
    for ax, column in zip(axes, ("diagnosis pass@1", "mitigation pass@1"), strict=True):
        for i, agent in enumerate(agents):
            means = [rows[(agent, c)].metrics[column].mean if (agent, c) in rows else None for c in levels]
            ax.bar(np.arange(len(levels)) + i * width, [m or 0.0 for m in means], width, label=agent)
        ax.set_xticks(np.arange(len(levels)) + width * (len(agents) - 1) / 2, levels)
        ax.set_ylim(0, 1)
        ax.set_title(column, fontsize=10)
    axes[0].legend(fontsize=8)
    return _png(fig)


def _table_html(board: Leaderboard, by: Sequence[str] = ()) -> str:
    return _rows_html(board, *table_cells(board, by))


def _rows_html(board: Leaderboard, header: list[str], rows: list[tuple[str, list[str]]]) -> str:
    if not rows:
        return "<p>No finished episodes.</p>"
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for agent, cells in rows:
        css = ' class="privileged"' if board.is_privileged(agent) else ""
        out.append(f"<tr{css}>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return "\n".join(out) + "</table>"


def render(board: Leaderboard, title: str = "itbench_gym leaderboard") -> str:
    """The page; without finished episodes it says so instead of plotting nothing."""
    body = [f"<h1>{html.escape(title)}</h1>",
            "<p>Mean ± standard error over episodes; pass@k (unbiased) over scenarios. Rows in grey italics are "
            "privileged agents (they read the ground truth) and are not ranked.</p>",
            "<h2>SRE</h2>", _table_html(board)]
    if board.of_domain("sre"):
        body += ["<h2>SRE by complexity</h2>", _table_html(board, ("complexity",)),
                 f'<img alt="pass rates by complexity" src="{by_complexity(board)}">',
                 "<h2>Episodes</h2>", f'<img alt="scenario by run success grid" src="{success_grid(board)}">',
                 f'<img alt="time to resolution" src="{resolution_times(board)}">',
                 "<h2>SRE by class</h2>", _table_html(board, ("class",))]
    if board.of_domain("ciso"):
        body += ["<h2>CISO</h2>", "<p>pass@1 per class as the paper's Table 5 reports it; TTP: simulated seconds from the "
                 "hand-over to the submit.</p>", _rows_html(board, *ciso_cells(board))]
    if board.of_domain("finops"):
        body += ["<h2>FinOps</h2>", f"<p>{html.escape(FINOPS_NOTE)}</p>", _rows_html(board, *finops_cells(board))]
    if board.errors:
        body += ["<h2>Episodes that did not finish</h2><ul>"]
        body += [f"<li>{html.escape(f'{a} · {s} run {r}: {e.splitlines()[0]}')}</li>" for a, s, r, e in board.errors]
        body += ["</ul>"]
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")
