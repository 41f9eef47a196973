"""Poisson tails against the sum of their terms, for means from a fraction to thousands."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from itbench_gym.poisson import binomial_cdf, fewer_than_chance, poisson_cdf, poisson_sf


def _terms(k_from: int, k_to: int, mean: float) -> float:
    return math.fsum(math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1)) for i in range(k_from, k_to + 1))


@pytest.mark.parametrize("mean", [0.02, 0.7, 4.5, 50.0, 1700.0, 9000.0])
def test_tails_match_their_terms_and_add_up_to_one(mean: float) -> None:
    far = int(mean + 40 * math.sqrt(mean) + 40)
    for k in sorted({0, 1, int(mean / 2), int(mean) - 1, int(mean), int(mean) + 1, int(mean * 1.3) + 2}):
        if k < 0:
            continue
        cdf, sf = poisson_cdf(k, mean), poisson_sf(k, mean)
        assert cdf == pytest.approx(_terms(0, k, mean), rel=1e-9, abs=1e-300)
        assert sf == pytest.approx(_terms(k + 1, far, mean), rel=1e-9, abs=1e-15)
        assert cdf + sf == pytest.approx(1.0, abs=1e-10)  # each term exact to ~1e-12 (lgamma of thousands)


def test_edges() -> None:
    assert poisson_cdf(-1, 3.0) == 0.0 and poisson_sf(-1, 3.0) == 1.0
    assert poisson_cdf(0, 0.0) == 1.0 and poisson_sf(0, 0.0) == 0.0
    assert poisson_cdf(0, 4.5) == pytest.approx(math.exp(-4.5))
    assert 0.0 < poisson_cdf(3500, 5000.0) < 1e-50  # far in the lower tail: no exp(-5000) underflowing on the way


@pytest.mark.parametrize(("n", "p"), [(10, 0.3), (270, 0.5), (400, 0.375), (3000, 0.01)])
def test_binomial_tail_matches_its_terms(n: int, p: float) -> None:
    for k in sorted({0, 1, int(n * p / 2), int(n * p), int(n * p) + 1, min(n, int(n * p * 1.5) + 3), n}):
        q = Fraction(str(p))  # exact rational terms: no float overflow or rounding in the reference
        exact = float(sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1)))
        assert binomial_cdf(k, n, p) == pytest.approx(exact, rel=1e-9, abs=1e-13)


def test_two_counts_of_one_rate() -> None:
    # equal windows: the later count is Binomial(total, 1/2); 80 against 160 is a five-sigma shortfall
    assert fewer_than_chance(80, 240, 160, 240) == pytest.approx(binomial_cdf(80, 240, 0.5))
    assert fewer_than_chance(80, 240, 160, 240) < 1e-6
    assert fewer_than_chance(150, 240, 160, 240) > 0.2
    assert fewer_than_chance(0, 60, 0, 300) == 1.0  # nothing either time: no evidence of a drop
