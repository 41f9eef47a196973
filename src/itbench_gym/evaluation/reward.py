"""Episode reward from the evaluation dict: ``"sparse"``, ``"score"`` or a user callable."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Union, cast

RewardFn = Callable[[dict[str, Any]], float]
RewardMode = Union[str, RewardFn]
REWARD_MODES = ("sparse", "score")


@dataclass(frozen=True)
class ScoreWeights:
    """Weights of the ``"score"`` reward; parts that do not apply are dropped and the rest renormalised."""

    fl_pass: float = 0.3  # fault localisation pass@1 (0/1)
    ntam_fl: float = 0.1  # NTAM of the root cause, in [0, 1]
    ntam_fpc: float = 0.1  # NTAM of the propagation chain, in [0, 1] (absent when the GT has no chain)
    mitigation: float = 0.5  # mitigation verdict (0/1) (absent for diagnosis-only episodes)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise ValueError(f"ScoreWeights.{f.name} must be a finite number >= 0, got {value!r}")
        if sum(getattr(self, f.name) for f in fields(self)) <= 0:
            raise ValueError("ScoreWeights: at least one weight must be positive")


def validate_reward_mode(mode: Any) -> RewardMode:
    """Fail early (at ``make``) rather than at the end of the first episode."""
    if callable(mode) or mode in REWARD_MODES:
        return cast(RewardMode, mode)
    raise ValueError(
        f"reward_mode must be 'sparse', 'score' or a callable (evaluation: dict) -> float; got {mode!r}"
    )


def _get(evaluation: Mapping[str, Any], path: str) -> Any:
    node: Any = evaluation
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(f"evaluation dict has no {path!r} (is it the dict evaluate_episode returned?)")
        node = node[part]
    return node


def diagnosis_and_mitigation_passed(evaluation: Mapping[str, Any]) -> bool:
    """FL pass@1 and (when the episode has one) the mitigation verdict."""
    mitigation = _get(evaluation, "mitigation")
    return bool(_get(evaluation, "diagnosis.fl_pass")) and (mitigation is None or bool(mitigation["passed"]))


def score(evaluation: Mapping[str, Any], weights: ScoreWeights = ScoreWeights()) -> float:
    """Σ wᵢ·xᵢ / Σ wᵢ over the parts that apply; in [0, 1]."""
    mitigation = _get(evaluation, "mitigation")
    parts = {
        "fl_pass": float(bool(_get(evaluation, "diagnosis.fl_pass"))),
        "ntam_fl": _get(evaluation, "diagnosis.ntam_fl"),
        "ntam_fpc": _get(evaluation, "diagnosis.ntam_fpc"),
        "mitigation": None if mitigation is None else float(bool(mitigation["passed"])),
    }
    present = {k: float(v) for k, v in parts.items() if v is not None}
    total = math.fsum(float(getattr(weights, k)) for k in present)
    if total <= 0:
        return 0.0
    return math.fsum(float(getattr(weights, k)) * v for k, v in present.items()) / total


def compute_reward(evaluation: dict[str, Any], mode: RewardMode = "sparse", *, weights: ScoreWeights = ScoreWeights()) -> float:
    """The reward of a finished episode under ``mode``."""
    mode = validate_reward_mode(mode)
    if isinstance(mode, str):
        if mode == "sparse":
            return 1.0 if diagnosis_and_mitigation_passed(evaluation) else 0.0
        return score(evaluation, weights)
    value = mode(evaluation)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        name = getattr(mode, "__name__", repr(mode))
        raise ValueError(f"reward function {name} must return a finite number, returned {value!r}")
    return float(value)
