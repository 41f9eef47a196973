"""Tail probabilities of counts: Poisson (the twin's CPU model) and the test of two Poisson counts
(the evaluator's traffic checks).

Every tail is summed from the term at ``k`` away from the mean, where the terms shrink
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


def _binomial_term(k: int, n: int, p: float) -> float:
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p), summed from the term at ``k`` like the Poisson tails."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    if k + 1 > n * p:
        term = total = _binomial_term(k + 1, n, p)
        for i in range(k + 2, n + 1):
            term *= (n - i + 1) * p / (i * (1.0 - p))
            total += term
            if term <= total * _EPSILON:
                break
        return max(0.0, 1.0 - total)
    term = total = _binomial_term(k, n, p)
    for i in range(k, 0, -1):
        term *= i * (1.0 - p) / ((n - i + 1) * p)
        total += term
        if term <= total * _EPSILON:
            break
    return min(total, 1.0)


def fewer_than_chance(count_now: float, seconds_now: float, count_before: float, seconds_before: float) -> float:
    """How likely a count as low as ``count_now`` is were both counts Poisson of one rate: the
    conditional test of two Poisson counts (given their total, the later one is binomial with the
    later window's share of the time), so the earlier count's own spread is weighed too."""
    now, before = math.floor(count_now), round(count_before)
    return binomial_cdf(now, now + before, seconds_now / (seconds_now + seconds_before))
