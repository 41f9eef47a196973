"""Poisson tail probabilities, shared by the twin's CPU model and the evaluator's traffic check.

Both tails are summed from the term at ``k`` away from the mean, where the terms shrink
geometrically, starting in log space: exact to rounding for any mean (no ``exp(-mean)`` underflow
for counts in the thousands) and a few terms past the point that matters.
"""

from __future__ import annotations

import math

#: Terms below this share of the running sum end the series.
_EPSILON = 1e-17


def _term(k: int, mean: float) -> float:
    return math.exp(-mean + k * math.log(mean) - math.lgamma(k + 1))


def poisson_cdf(k: int, mean: float) -> float:
    """P(N <= k) for N ~ Poisson(mean)."""
    if k < 0:
        return 0.0
    if mean <= 0:
        return 1.0
    if k >= mean:
        return 1.0 - poisson_sf(k, mean)
    term = total = _term(k, mean)
    for i in range(k, 0, -1):
        term *= i / mean
        total += term
        if term <= total * _EPSILON:
            break
    return min(total, 1.0)


def poisson_sf(k: int, mean: float) -> float:
    """P(N > k) for N ~ Poisson(mean)."""
    if k < 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if k + 1 < mean:
        return 1.0 - poisson_cdf(k, mean)
    term = total = _term(k + 1, mean)
    i = k + 1
    while term > total * _EPSILON and term > 0.0:
        i += 1
        term *= mean / i
        total += term
    return min(total, 1.0)
