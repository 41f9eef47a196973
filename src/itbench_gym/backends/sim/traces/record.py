"""What the app model keeps of each tick so that traces and logs can be synthesised later, on demand.

A tick's solved flow (per-operation error shares and latency moments, request rates, the knobs that
slowed or broke operations) plus the pods that served each service is everything a trace needs; the
model builds fresh ones every tick and never mutates old ones, and keeps each tick packed
(``packing.py``). What is not in the flow but shows in telemetry is copied
here at capture time: the flag values flagd served (span attributes and ``feature_flag`` events),
each process's cache size (``app.products.count`` of a leaking cache) and the Services' ClusterIPs
(the addresses runtimes print when a connection fails).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    """One scrape interval ``(t - dt, t]`` of the request flow.

    ``flags`` is what flagd served during the tick (canonical flag name -> variant value), or None
    when the model did not say; ``cache`` the entries of each pod's process cache (by pod name);
    ``addresses`` the ClusterIP of each Service of the app's namespace.
    """

    t: float
    dt: float
    stats: dict[OpKey, OpStats]
    rates: dict[OpKey, float]
    client: dict[tuple[str, str, str], tuple[float, float]]
    knobs: Knobs
    pods: dict[str, tuple[PodRef, ...]]
    backlog: dict[tuple[str, str], float]
    flags: Mapping[str, Any] | None = None
    cache: Mapping[str, float] = field(default_factory=dict)
    addresses: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def capture(cls, spec: AppSpec, view: ClusterView, t: float, dt: float, stats: dict[OpKey, OpStats],
                rates: dict[OpKey, float], client: dict[tuple[str, str, str], tuple[float, float]], knobs: Knobs,
                backlog: dict[tuple[str, str], float], *, flags: Mapping[str, Any] | None = None,
                instances: Mapping[str, Any] | None = None) -> TraceTick:
        """Record a tick; the pods per service follow the span-metrics rule (serving pods, or running
        ones for services without a port such as the load generator and Kafka consumers).

        ``flags`` are the values flagd served this tick and ``instances`` the model's process
        records keyed ``uid/container/restarts`` (their ``cache_entries`` are read now, since the
        model updates them in place).
        """
        pods: dict[str, tuple[PodRef, ...]] = {}
        cache: dict[str, float] = {}
        for svc in spec.services.values():
            chosen = view.serving(svc.name) or (view.running(svc.name) if svc.name == spec.load_service or not svc.port else [])
            if chosen:
                pods[svc.name] = tuple(PodRef(p.name, p.uid, p.node, p.ip) for p in chosen)
            for p in chosen if instances else ():
                inst = instances.get(f"{p.uid}/{p.container.get('name', '')}/{p.restarts}") if instances else None
                entries = float(getattr(inst, "cache_entries", 0.0) or 0.0)
                if entries > 0:
                    cache[p.name] = entries
        addresses = {name: str((s.get("spec") or {}).get("clusterIP") or "") for name, s in view.services.items()}
        return cls(t, dt, stats, rates, client, knobs, pods, dict(backlog), dict(flags) if flags is not None else None, cache,
                   {k: v for k, v in addresses.items() if v and v != "None"})

