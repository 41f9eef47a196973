"""pass@k, mean ± SE and grouped tables against hand-computed closed forms."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from itbench_gym.evaluation.aggregate import format_table, mean_se, pass_at_k, summarise


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
        (5, 2, 4, 1.0),  # fewer than k failures: some k-subset always contains a success
        (10, 0, 3, 0.0),
        (10, 10, 10, 1.0),
        (1, 1, 1, 1.0),
    ],
)
def test_pass_at_k_closed_forms(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n() -> None:
    n, c, k = 2000, 3, 100
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-12)


@pytest.mark.parametrize(
    ("args", "message"),
    [((5, 2, 6), "k must be between 1 and n=5"), ((5, 2, 0), "k must be between 1"), ((5, 6, 1), "0 <= c <= n"),
     ((0, 0, 1), "n >= 1"), ((5, 2.0, 1), "c must be an integer"), ((5, True, 1), "c must be an integer")],
)
def test_pass_at_k_rejects_bad_arguments(args: tuple, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        pass_at_k(*args)


def test_mean_and_standard_error() -> None:
    stats = mean_se([True, False, True, True])
    assert (stats.mean, stats.se, stats.n) == (0.75, pytest.approx(0.25), 4)
    times = mean_se([10.0, "inf", 20.0, None, math.inf])
    assert (times.mean, times.se, times.n, times.n_inf) == (15.0, pytest.approx(5.0), 2, 2)
    assert mean_se([0.5]).se is None
    assert mean_se([]).mean is None
    with pytest.raises(TypeError, match="metric values"):
        mean_se(["fast"])


def result(scenario: str, cls: str, complexity: str, passed: bool, mttd: float | str) -> dict:
    return {
        "scenario": scenario,
        "class": cls,
        "complexity": complexity,
        "evaluation": {"passed": passed, "diagnosis": {"fl_pass": passed, "ntam_fl": 1.0 if passed else 0.5},
                       "mitigation": None, "times": {"mttd": mttd}},
    }


RESULTS = [
    result("A", "Cache", "medium", True, 100.0),
    result("A", "Cache", "medium", False, "inf"),
    result("A", "Cache", "medium", True, 200.0),
    result("B", "Cache", "high", False, "inf"),
    result("B", "Cache", "high", False, "inf"),
]


def test_summary_per_scenario() -> None:
    a, b = summarise(RESULTS, k_values=(1, 2, 3))
    assert a.key == {"scenario": "A"} and a.episodes == 3
    assert a.pass_at_k[1].mean == pytest.approx(2 / 3)
    assert a.pass_at_k[2].mean == 1.0 and a.pass_at_k[3].mean == 1.0
    assert b.pass_at_k[3].mean is None  # only 2 runs of B
    assert a.metrics["mttd"].mean == 150.0 and a.metrics["mttd"].n_inf == 1
    assert a.metrics["ntam_fl"].mean == pytest.approx(2.5 / 3)
    assert a.metrics["mitigation"].n == 0  # diagnosis-only episodes: no mitigation verdict


def test_summary_per_class_averages_pass_at_k_over_scenarios() -> None:
    (cache,) = summarise(RESULTS, by=("class",), k_values=(1, 2))
    assert (cache.episodes, cache.scenarios) == (5, 2)
    assert cache.pass_at_k[1].mean == pytest.approx(1 / 3)  # mean of 2/3 and 0
    assert cache.pass_at_k[1].se == pytest.approx(1 / 3)  # std([2/3, 0], ddof=1)/sqrt(2)
    assert cache.pass_at_k[2].mean == pytest.approx(0.5)


def test_table_rendering_and_errors() -> None:
    table = format_table(summarise(RESULTS, by=("complexity",)), metrics=["fl_pass@1", "mttd"])
    lines = table.splitlines()
    assert lines[0] == "| complexity | episodes | pass@1 | fl_pass@1 | mttd |"
    assert lines[2] == "| high | 2 | 0.000 | 0.000 ± 0.000 | ∞ ×2 |"
    assert lines[3] == "| medium | 3 | 0.667 | 0.667 ± 0.333 | 150.0 ± 50.0 (∞ ×1) |"
    with pytest.raises(KeyError, match="has no 'complexity'"):
        summarise([{"scenario": "A", "evaluation": {"passed": True}}], by=("complexity",))
    with pytest.raises(KeyError, match="metric 'nope' was not summarised"):
        format_table(summarise(RESULTS), metrics=["nope"])
