"""The cluster's own clock: what Prometheus says ``time()`` is.

Alert activation times, pod start times and the API's timestamps are on the cluster's clock, so the
backend measures episodes on it too. On a real cluster that is the wall clock; on a twin served with
``itbench-gym serve --realtime --speed N`` it runs N times as fast, and the same code is right.
"""

from __future__ import annotations

import time

import requests

#: Longest wall-clock sleep between two readings while time passes.
_MAX_SLEEP = 0.5


class ClusterClockError(RuntimeError):
    """Prometheus did not answer with the time."""


class ClusterClock:
    def __init__(self, prometheus: str, http: requests.Session | None = None) -> None:
        self._url = prometheus.rstrip("/") + "/api/v1/query"
        self._http = http or requests.Session()
        #: cluster seconds per wall second, learnt from successive readings
        self._rate = 1.0
        self._last: tuple[float, float] | None = None

    def now(self) -> float:
        try:
            resp = self._http.get(self._url, params={"query": "time()"}, timeout=30)
            resp.raise_for_status()
            value = float(resp.json()["data"]["result"][0])
        except (requests.RequestException, ValueError, KeyError, IndexError, TypeError) as exc:
            raise ClusterClockError(f"cannot read the cluster's time from {self._url}: {exc}") from None
        wall = time.monotonic()
        if self._last is not None and wall - self._last[1] > 0.05 and value > self._last[0]:
            self._rate = 0.5 * self._rate + 0.5 * (value - self._last[0]) / (wall - self._last[1])
        self._last = (value, wall)
        return value

    def advance(self, seconds: float) -> None:
        """Wait until ``seconds`` have passed on the cluster's clock."""
        target = self.now() + max(0.0, seconds)
        while (remaining := target - self.now()) > 0:
            time.sleep(min(max(remaining / self._rate, 0.01), _MAX_SLEEP))

    def close(self) -> None:
        self._http.close()
