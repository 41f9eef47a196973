"""Batch statistics: unbiased pass@k, mean ± standard error, tables per scenario/class/complexity."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Metric name -> dotted path inside an episode's evaluation dict (see ``evaluate_episode``).
DEFAULT_METRICS: dict[str, str] = {
    "fl_pass@1": "diagnosis.fl_pass",
    "mitigation": "mitigation.passed",
    "pass": "passed",
    "ntam_fl": "diagnosis.ntam_fl",
    "ntam_fpc": "diagnosis.ntam_fpc",
    "entity_f1": "diagnosis.entity.f1",
    "rc_entity_f1": "diagnosis.root_cause_entity.f1",
    "rc_entity@3": "diagnosis.root_cause_at_k.3",
    "component_id": "diagnosis.component_identification",
    "chain_f1": "diagnosis.propagation.f1",
    "proximity_f1": "diagnosis.proximity.f1",
    "mttd": "times.mttd",
    "mttr": "times.mttr",
    "destructive": "safety.destructive_count",
    "reward": "reward",
}
_TIME_METRICS = frozenset({"mttd", "mttr"})


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k = 1 − C(n−c, k)/C(n, k) (Chen et al., 2021), as a stable product.

    C(n−c, k)/C(n, k) = ∏_{i=n−c+1}^{n} (1 − k/i), which never forms large binomials.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"pass_at_k: {name} must be an integer, got {value!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: k must be between 1 and n={n} (the number of runs), got k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


@dataclass(frozen=True)
class MeanSE:
    """Mean and standard error (sample std / √n) of the finite values; infinities counted apart."""

    mean: float | None
    se: float | None
    n: int
    n_inf: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "se": self.se, "n": self.n, "n_inf": self.n_inf}

    def format(self, digits: int = 3) -> str:
        if self.mean is None:
            return "–" if not self.n_inf else f"∞ ×{self.n_inf}"
        text = f"{self.mean:.{digits}f}"
        if self.se is not None:
            text += f" ± {self.se:.{digits}f}"
        return text + (f" (∞ ×{self.n_inf})" if self.n_inf else "")


def _as_number(value: Any) -> float | None:
    if value is None:
        return None
    if value == "inf":
        return math.inf
    if isinstance(value, (bool, int, float, np.integer, np.floating)):
        return float(value)
    raise TypeError(f"metric values must be numbers, booleans, None or 'inf'; got {value!r}")


def mean_se(values: Iterable[Any]) -> MeanSE:
    """None is skipped; ``inf``/``"inf"`` (MTTD/MTTR not achieved) is counted in ``n_inf`` only."""
    numbers = [v for v in (_as_number(x) for x in values) if v is not None]
    finite = np.array([v for v in numbers if math.isfinite(v)], dtype=np.float64)
    n_inf = len(numbers) - len(finite)
    if finite.size == 0:
        return MeanSE(None, None, 0, n_inf)
    se = float(finite.std(ddof=1) / math.sqrt(finite.size)) if finite.size > 1 else None
    return MeanSE(float(finite.mean()), se, int(finite.size), n_inf)


@dataclass(frozen=True)
class GroupSummary:
    key: dict[str, Any]
    episodes: int
    scenarios: int
    pass_at_k: dict[int, MeanSE] = field(default_factory=dict)
    metrics: dict[str, MeanSE] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.key,
            "episodes": self.episodes,
            "scenarios": self.scenarios,
            "pass_at_k": {str(k): v.to_dict() for k, v in self.pass_at_k.items()},
            "metrics": {name: v.to_dict() for name, v in self.metrics.items()},
        }


def _lookup(result: Mapping[str, Any], path: str, where: str, required: bool) -> Any:
    node: Any = result
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif node is None or not required:
            return None
        else:
            raise KeyError(f"{where} has no {path!r}")
    return node


def summarise(
    results: Iterable[Mapping[str, Any]],
    by: Sequence[str] = ("scenario",),
    *,
    metrics: Mapping[str, str] = DEFAULT_METRICS,
    success: str = "passed",
    scenario_key: str = "scenario",
    k_values: Sequence[int] = (1,),
) -> list[GroupSummary]:
    """Group episode results and summarise each group.

    Each result is a dict with the grouping keys (``scenario``, ``class``, ``complexity``, ... —
    dotted paths allowed) and the episode's ``evaluation`` dict; metric and ``success`` paths are
    read inside ``evaluation`` (or the result itself when it has no ``evaluation``). pass@k of a
    group is the mean over its scenarios of each scenario's unbiased pass@k (± SE across
    scenarios); it is ``None`` for a k larger than some scenario's number of runs.
    """
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for i, result in enumerate(results):
        if not isinstance(result, Mapping):
            raise TypeError(f"result #{i} must be a dict, got {type(result).__name__}")
        key = tuple(_lookup(result, k, f"result #{i}", True) for k in by)
        groups.setdefault(key, []).append(result)
    summaries = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
        per_scenario: dict[Any, list[bool]] = {}
        values: dict[str, list[Any]] = {name: [] for name in metrics}
        for i, result in enumerate(members):
            evaluation = result.get("evaluation", result)
            where = f"result {dict(zip(by, key, strict=True))} #{i}"
            scenario = _lookup(result, scenario_key, where, True)
            per_scenario.setdefault(scenario, []).append(bool(_lookup(evaluation, success, where, True)))
            for name, path in metrics.items():
                values[name].append(_lookup(evaluation, path, where, False))
        pak: dict[int, MeanSE] = {}
        for k in k_values:
            if all(len(runs) >= k for runs in per_scenario.values()):
                pak[k] = mean_se(pass_at_k(len(runs), sum(runs), k) for runs in per_scenario.values())
            else:
                pak[k] = MeanSE(None, None, 0)
        summaries.append(
            GroupSummary(
                key=dict(zip(by, key, strict=True)),
                episodes=len(members),
                scenarios=len(per_scenario),
                pass_at_k=pak,
                metrics={name: mean_se(v) for name, v in values.items()},
            )
        )
    return summaries


def format_table(summaries: Sequence[GroupSummary], metrics: Sequence[str] | None = None) -> str:
    """A Markdown table: one row per group, ``mean ± se`` cells (times in seconds)."""
    if not summaries:
        return "(no results)"
    keys = list(summaries[0].key)
    ks = sorted(summaries[0].pass_at_k)
    names = list(metrics) if metrics is not None else list(summaries[0].metrics)
    header = [*keys, "episodes", *(f"pass@{k}" for k in ks), *names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in summaries:
        cells = [str(s.key[k]) for k in keys] + [str(s.episodes)]
        cells += [s.pass_at_k[k].format() for k in ks]
        for name in names:
            if name not in s.metrics:
                raise KeyError(f"metric {name!r} was not summarised; known: {', '.join(s.metrics)}")
            cells.append(s.metrics[name].format(1 if name in _TIME_METRICS else 3))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
