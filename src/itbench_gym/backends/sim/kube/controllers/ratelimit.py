"""Client-side rate limits of the control plane, on the simulated clock.

A real controller cannot flood the API server: its client-go client holds a token bucket
(``flowcontrol.NewTokenBucketRateLimiter``) that makes every request wait for a token, so a
ReplicaSet that wants a million pods gets them at the client's QPS, 500 per sync. The twin's
controllers run to completion at one simulated instant, so the bucket here may be overdrawn by
one batch; the overdraft is the time the real client would still be sending those requests, and
``ready_at`` is when the controller may start its next batch. That keeps the work of one sync
bounded and the simulated rate the real one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: kube-controller-manager's ``--kube-api-qps`` / ``--kube-api-burst`` defaults; every controller
#: gets its own client (``ClientBuilder.ClientOrDie(name)``) and so its own bucket.
CONTROLLER_QPS, CONTROLLER_BURST = 20.0, 30
#: kube-scheduler's ``clientConnection.qps`` / ``burst`` defaults (KubeSchedulerConfiguration).
SCHEDULER_QPS, SCHEDULER_BURST = 50.0, 100
#: Rounding slack (tokens): simulated times are epoch seconds, good to ~0.25 µs, so at ``ready_at``
#: the refill may fall short by a hair; the bucket must still count as ready there.
_EPSILON = 1e-3


@dataclass
class TokenBucket:
    """A token bucket of ``burst`` tokens refilled at ``qps`` per simulated second."""

    qps: float
    burst: int
    tokens: float
    at: float

    @classmethod
    def full(cls, qps: float, burst: int, now: float) -> TokenBucket:
        return cls(qps, burst, float(burst), now)

    def _refill(self, now: float) -> None:
        if now > self.at:
            self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.qps)
            self.at = now

    def available(self, now: float) -> float:
        """Tokens in the bucket at ``now`` (negative while an earlier burst is still being sent)."""
        self._refill(now)
        return self.tokens

    def take(self, n: int, now: float) -> None:
        """Spend ``n`` requests' tokens, overdrawing if need be."""
        self._refill(now)
        self.tokens -= n

    def ready(self, now: float, need: float = 1.0) -> bool:
        """Whether the bucket holds ``need`` tokens at ``now``."""
        return self.available(now) >= need - _EPSILON

    def ready_at(self, now: float, need: float = 1.0) -> float:
        """When the bucket will hold ``need`` tokens (``now`` if it already does)."""
        if self.ready(now, need):
            return now
        return max(now + (need - self.tokens) / self.qps, math.nextafter(now, math.inf))

    def copy(self) -> TokenBucket:
        return replace(self)
