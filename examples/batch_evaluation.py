"""Batch evaluation from Python: two agents over a few scenarios, then the leaderboard as Markdown and HTML.

    python examples/batch_evaluation.py --out eval-results

The same as `itbench-gym run --agent heuristic --scenarios 'SRE-Corrupt*' --runs 2 --out eval-results`
followed by the noop baseline and `itbench-gym report eval-results --k 1,2 --html eval-results/board.html`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from itbench_gym.runner import leaderboard
from itbench_gym.runner.batch import run_batch
from itbench_gym.runner.html_report import render


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("eval-results"))
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    for agent in ("heuristic", "noop"):
        run_batch(agent, ["SRE-Corrupt*"], runs=2, workers=args.workers, out=args.out, resume=True)
    board = leaderboard.load([args.out], k_values=(1, 2))
    print(leaderboard.markdown_report(board))
    (args.out / "board.html").write_text(render(board), encoding="utf-8")
    print(f"wrote {args.out / 'board.html'}")


if __name__ == "__main__":
    main()
