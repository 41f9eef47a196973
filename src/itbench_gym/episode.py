"""The record of one episode: every step as it happened, writable as JSONL."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepRecord:
    index: int
    action: str
    tool: str | None
    observation: str
    exit_status: int
    sim_time: float
    sim_cost_seconds: float
    wall_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Episode:
    episode_id: str
    scenario_id: str
    seed: int
    prompt: str = ""
    steps: list[StepRecord] = field(default_factory=list)
    evaluation: dict[str, Any] | None = None

    def transcript(self) -> str:
        """Human-readable transcript (``render()`` in ``ansi`` mode)."""
        parts = [f"# {self.scenario_id} (seed {self.seed}, episode {self.episode_id})", self.prompt]
        for step in self.steps:
            parts.append(f"\n[{step.index}] t+{step.sim_time:.0f}s $ {step.action}\n{step.observation}")
        if self.evaluation is not None:
            parts.append("\n# evaluation\n" + json.dumps(self.evaluation, indent=2, sort_keys=True, default=str))
        return "\n".join(parts) + "\n"

    def to_jsonl(self, path: Path | str) -> Path:
        """One header line, one line per step, one evaluation line (when evaluated)."""
        out = Path(path)
        with out.open("w", encoding="utf-8") as fh:
            header = {"type": "episode", "episode_id": self.episode_id, "scenario_id": self.scenario_id, "seed": self.seed, "prompt": self.prompt}
            fh.write(json.dumps(header) + "\n")
            for step in self.steps:
                fh.write(json.dumps({"type": "step", **step.to_dict()}) + "\n")
            if self.evaluation is not None:
                fh.write(json.dumps({"type": "evaluation", **self.evaluation}, default=str) + "\n")
        return out
