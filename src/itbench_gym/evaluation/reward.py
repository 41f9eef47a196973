"""Episode rewards: small callables over a task's typed evaluation.

A reward reads what every task's evaluation offers (``passed``, named ``parts`` in [0, 1]), never
paths into the JSON dict, so one reward class serves SRE, CISO and FinOps evaluations alike.
``make_reward`` maps the env's ``reward_mode`` shorthand (``"sparse"``, ``"score"``, a function of
the evaluation dict) onto these classes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

REWARD_MODES = ("sparse", "score")


class Evaluation(Protocol):
    """What a task's evaluation of an episode offers to rewards and to ``info["evaluation"]``."""

    @property
    def passed(self) -> bool:
        """The task's own success criterion (SRE: diagnosis and, when there is one, mitigation)."""
        ...

    def parts(self) -> Mapping[str, float | None]:
        """Named scores in [0, 1] a weighted reward combines; None where a part does not apply."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """The strict-JSON form shown as ``info["evaluation"]``."""
        ...


class Reward(Protocol):
    def __call__(self, evaluation: Evaluation) -> float: ...


#: A user reward over the evaluation dict (the ``reward_mode`` callable).
DictRewardFn = Callable[[dict[str, Any]], float]
RewardMode = str | DictRewardFn


def _check_weights(weights: Mapping[str, float], where: str) -> None:
    for name, value in weights.items():
        if isinstance(value, bool) or not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
            raise ValueError(f"{where}.{name} must be a finite number >= 0, got {value!r}")
    if sum(weights.values()) <= 0:
        raise ValueError(f"{where}: at least one weight must be positive")


@dataclass(frozen=True)
class ScoreWeights:
    """Weights of the SRE ``"score"`` reward; parts that do not apply are dropped and the rest renormalised."""

    fl_pass: float = 0.3  # fault localisation pass@1 (0/1)
    ntam_fl: float = 0.1  # NTAM of the root cause, in [0, 1]
    ntam_fpc: float = 0.1  # NTAM of the propagation chain, in [0, 1] (absent when the GT has no chain)
    mitigation: float = 0.5  # mitigation verdict (0/1) (absent for diagnosis-only episodes)

    def __post_init__(self) -> None:
        _check_weights({f.name: getattr(self, f.name) for f in fields(self)}, "ScoreWeights")


@dataclass(frozen=True)
class SparseReward:
    """1.0 iff the episode passed, else 0.0."""

    def __call__(self, evaluation: Evaluation) -> float:
        return 1.0 if evaluation.passed else 0.0


@dataclass(frozen=True)
class ScoreReward:
    """Σ wᵢ·xᵢ / Σ wᵢ over the evaluation's parts that apply; in [0, 1].

    ``weights`` names parts of the evaluation (``ScoreWeights`` for SRE episodes, or a mapping);
    naming none of them is a configuration error, not a reward of 0.
    """

    #: None: the evaluation's own (its ``score_weights``: CISO's assessment, FinOps' diagnosis, mitigation and
    #: proximity), else :class:`ScoreWeights` (SRE).
    weights: ScoreWeights | Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        if self.weights is not None and not isinstance(self.weights, ScoreWeights):
            _check_weights(self.weights, "ScoreReward.weights")

    def _weights(self, evaluation: Evaluation) -> Mapping[str, float]:
        weights = self.weights if self.weights is not None else getattr(evaluation, "score_weights", ScoreWeights())
        return asdict(weights) if isinstance(weights, ScoreWeights) else weights

    def __call__(self, evaluation: Evaluation) -> float:
        weights = self._weights(evaluation)
        parts = evaluation.parts()
        if not set(weights) & set(parts):
            raise ValueError(f"ScoreReward: the weights ({', '.join(weights)}) name none of the evaluation's parts ({', '.join(parts)})")
        present = {name: float(value) for name, value in parts.items() if value is not None and name in weights}
        total = math.fsum(float(weights[name]) for name in present)
        if total <= 0:
            return 0.0
        return math.fsum(float(weights[name]) * value for name, value in present.items()) / total


@dataclass(frozen=True)
class DictReward:
    """A user function of the JSON-ready evaluation dict (what ``info["evaluation"]`` shows)."""

    fn: DictRewardFn

    def __call__(self, evaluation: Evaluation) -> float:
        return self.fn(evaluation.to_dict())


def make_reward(mode: RewardMode) -> Reward:
    """The reward a ``reward_mode`` stands for; fails early (at ``make``), not after the first episode."""
    if mode == "sparse":
        return SparseReward()
    if mode == "score":
        return ScoreReward()
    if callable(mode):
        return DictReward(mode)
    raise ValueError(f"reward_mode must be 'sparse', 'score' or a callable (evaluation: dict) -> float; got {mode!r}")


def episode_reward(reward: Reward, evaluation: Evaluation) -> float:
    """``reward(evaluation)``, refusing anything but a finite number (a bad user reward fails loudly)."""
    value = reward(evaluation)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        fn = reward.fn if isinstance(reward, DictReward) else reward
        name = getattr(fn, "__name__", repr(fn))
        raise ValueError(f"reward function {name} must return a finite number, returned {value!r}")
    return float(value)
