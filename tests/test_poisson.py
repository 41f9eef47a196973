"""Poisson tails against the sum of their terms, for means from a fraction to thousands."""

from __future__ import annotations

import math

import pytest

from itbench_gym.poisson import poisson_cdf, poisson_sf


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
