"""What the app model keeps of each tick so that traces can be synthesised later, on demand.

A tick's solved flow (per-operation error shares and latency moments, request rates, the knobs that
slowed or broke operations) plus the pods that served each service is everything a trace needs;
keeping references to these per-tick objects costs nothing, because the model builds fresh ones
every tick and never mutates old ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from itbench_gym.backends.sim.app.cluster_view import ClusterView
    from itbench_gym.backends.sim.app.flow import Knobs, OpKey, OpStats
    from itbench_gym.backends.sim.app.spec import AppSpec


@dataclass(frozen=True)
class PodRef:
    """The process a span comes from (Jaeger's ``process`` block)."""

    name: str
    uid: str
    node: str
    ip: str


@dataclass(frozen=True)
class TraceTick:
    """One scrape interval ``(t - dt, t]`` of the request flow."""

    t: float
    dt: float
    stats: dict[OpKey, OpStats]
    rates: dict[OpKey, float]
    client: dict[tuple[str, str, str], tuple[float, float]]
    knobs: Knobs
    pods: dict[str, tuple[PodRef, ...]]
    backlog: dict[tuple[str, str], float]

    @classmethod
    def capture(cls, spec: AppSpec, view: ClusterView, t: float, dt: float, stats: dict[OpKey, OpStats],
                rates: dict[OpKey, float], client: dict[tuple[str, str, str], tuple[float, float]], knobs: Knobs,
                backlog: dict[tuple[str, str], float]) -> TraceTick:
        """Record a tick; the pods per service follow the span-metrics rule (serving pods, or running
        ones for services without a port such as the load generator and Kafka consumers)."""
        pods: dict[str, tuple[PodRef, ...]] = {}
        for svc in spec.services.values():
            chosen = view.serving(svc.name) or (view.running(svc.name) if svc.name == spec.load_service or not svc.port else [])
            if chosen:
                pods[svc.name] = tuple(PodRef(p.name, p.uid, p.node, p.ip) for p in chosen)
        return cls(t, dt, stats, rates, client, knobs, pods, dict(backlog))
