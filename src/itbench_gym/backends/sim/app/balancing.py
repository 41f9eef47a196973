"""Which pod of a service serves which share of its requests.

kube-proxy balances *connections*, not requests: it picks a random ready endpoint when a client
opens a connection to the Service's virtual IP. A gRPC client (grpc-go, grpc-js, grpc-dotnet, ...)
keeps one HTTP/2 connection per target and multiplexes every call over it, so all of one client
pod's calls land on the one server pod it connected to, however many replicas there are; it picks
again only when that connection breaks (the pod died, restarted or left the endpoints). Clients that
spread requests themselves (Envoy's HTTP/1.1 pools, browsers, Locust's many users) reach every
ready pod evenly. ``Call.balance`` says which applies.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

import numpy as np

from .cluster_view import ClusterView, PodView
from .spec import AppSpec

#: service -> instance key -> share of the service's requests it serves this tick (sums to 1).
Shares = dict[str, dict[str, float]]


def instance_key(pod: PodView) -> str:
    """One run of the app container of a pod (a restart is a new process with new connections)."""
    return f"{pod.uid}/{pod.container['name']}/{pod.restarts}"


def senders(spec: AppSpec, view: ClusterView, service: str) -> list[PodView]:
    """Pods of ``service`` that handle requests now: its ready endpoints, or (for a service nobody
    dials, like the load generator) its running pods."""
    svc = spec.services[service]
    return view.serving(service) or (view.running(service) if not svc.port or service == spec.load_service else [])


class Balancer:
    """Pins each client connection to one server pod and spreads the rest per request."""

    def __init__(self, spec: AppSpec, seed: int, service_order: Iterable[str]) -> None:
        self.spec = spec
        self.seed = seed
        self.order = list(dict.fromkeys(service_order))
        self._calls = {(s.name, o.id, c.id): c for s in spec.services.values() for o in s.operations.values() for c in o.calls}

    def shares(self, view: ClusterView, client: Mapping[tuple[str, str, str], tuple[float, float]], tick: int,
               pins: Mapping[str, str]) -> tuple[Shares, dict[str, str]]:
        """Per-pod shares of every service (callers before callees) from this tick's call rates,
        and the connections after this tick. ``pins`` maps "<caller instance>|<callee service>" to
        the callee instance the connection reaches; a broken one is re-dialled to a random ready pod."""
        pinned = dict(pins)
        out: Shares = {}
        pods = {name: sorted(senders(self.spec, view, name), key=lambda p: p.name) for name in self.order}
        incoming: dict[str, list[tuple[str, str, float]]] = {}
        for (caller, op_id, call_id), (ok, err) in client.items():
            call = self._calls[(caller, op_id, call_id)]
            incoming.setdefault(call.service, []).append((caller, call.balance, ok + err))
        for name in self.order:
            targets = pods[name]
            if not targets:
                continue
            keys = [instance_key(p) for p in targets]
            load = dict.fromkeys(keys, 0.0)
            for caller, balance, rate in incoming.get(name, []):
                if rate <= 0:
                    continue
                if balance == "request" or caller not in out:
                    for k in keys:
                        load[k] += rate / len(keys)
                    continue
                for src, src_share in out[caller].items():
                    pin = f"{src}|{name}"
                    if pinned.get(pin) not in load:
                        rng = np.random.default_rng([self.seed, tick, zlib.crc32(pin.encode())])
                        pinned[pin] = keys[int(rng.integers(len(keys)))]
                    load[pinned[pin]] += rate * src_share
            total = sum(load.values())
            out[name] = {k: v / total for k, v in load.items()} if total > 0 else {k: 1.0 / len(keys) for k in keys}
        # a connection lives as long as its client process
        alive = {instance_key(p) for ps in view.by_service.values() for p in ps if p.running}
        return out, {k: v for k, v in pinned.items() if k.split("|", 1)[0] in alive}
