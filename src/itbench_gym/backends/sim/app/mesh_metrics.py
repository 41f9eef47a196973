"""What the mesh's proxies and the app's own counters expose about the calls of one tick.

Each series belongs to the process that counts it, and reaches Prometheus only through the scrape
targets the cluster's monitors discover for that pod (:meth:`MeshTelemetry.exposed`):

- a gateway Envoy reports every request it proxies (``reporter="source"``): ``istio_requests_total``
  and ``istio_request_duration_milliseconds`` with Istio's standard labels. The destination's
  workload labels come from the peer metadata of the HBONE connection, so a destination outside
  the mesh is reported as ``unknown`` (its ``destination_service`` stays known). A request the
  gateway's own AuthorizationPolicy denies is reported with response code 403 and an unknown
  destination (it never reached a route);
- each node's ztunnel counts the TCP connections of the captured pods on its node,
  ``istio_tcp_connections_opened_total``/``closed_total``: ``reporter="source"`` for a captured
  caller, ``reporter="destination"`` for a captured callee that accepted them (with the source's
  identity when it came over mTLS). Bookinfo's HTTP/1.1 clients open one connection per attempt;
- a service whose app.yaml declares ``metrics.calls`` counts its own calls (Bookinfo's productpage:
  ``request_result_total{destination_app, response_code}``), by the status it got.

Counters live in the process: they are cumulative and never drop a series while the pod lives, so a
path that stops carrying traffic keeps its series with a rate of zero (what ITBench's
``NoRequests*`` alerts detect). Label names follow Istio's standard metrics (istio.io/latest/docs/
reference/config/metrics) and its default duration buckets.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .balancing import instance_key, senders
from .cluster_view import ClusterView, PodView
from .flow import CallOutcome, Moments, OpKey, OpStats, bucket_probs
from .mesh import MeshState, endpoints
from .network import resolve_address
from .spec import AppSpec

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]
PodKey = tuple[str, str]
LabelKey = tuple[tuple[str, str], ...]

#: Istio's default buckets of istio_request_duration_milliseconds.
DURATION_BUCKETS_MS = (0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000)
_LES = tuple(f"{b:g}" for b in DURATION_BUCKETS_MS) + ("+Inf",)
_LOG_BOUNDS = tuple(math.log(b) for b in DURATION_BUCKETS_MS)
UNKNOWN = "unknown"
CLUSTER_ID = "Kubernetes"
#: Outcomes whose failures came from no server answering: Envoy answers 503 (upstream failure) itself.
_UPSTREAM_FAILURE = ("503", "UF")


def _peer(prefix: str, pod: Obj | None, workload: str) -> dict[str, str]:
    """Istio's workload labels of one side of a call (all ``unknown`` without peer metadata)."""
    if pod is None:
        return {f"{prefix}_{k}": UNKNOWN for k in ("workload", "workload_namespace", "principal", "app", "version",
                                                   "canonical_service", "canonical_revision", "cluster")}
    labels, ns = pod["metadata"].get("labels") or {}, pod["metadata"].get("namespace", "")
    return {
        f"{prefix}_workload": workload,
        f"{prefix}_workload_namespace": ns,
        f"{prefix}_principal": "spiffe://" + MeshState.principal(pod),
        f"{prefix}_app": labels.get("app", UNKNOWN),
        f"{prefix}_version": labels.get("version", UNKNOWN),
        f"{prefix}_canonical_service": labels.get("service.istio.io/canonical-name") or labels.get("app.kubernetes.io/name")
        or labels.get("app") or workload,
        f"{prefix}_canonical_revision": labels.get("service.istio.io/canonical-revision") or labels.get("app.kubernetes.io/version")
        or labels.get("version") or "latest",
        f"{prefix}_cluster": CLUSTER_ID,
    }


def _service_labels(host: str, namespace: str) -> dict[str, str]:
    name = host.split(".", 1)[0]
    return {"destination_service": f"{name}.{namespace}.svc.cluster.local", "destination_service_name": name,
            "destination_service_namespace": namespace}


@dataclass
class _Histogram:
    buckets: np.ndarray
    sum_ms: float = 0.0
    count: float = 0.0


@dataclass
class _Exposition:
    """One process's counters and histograms, keyed by their label items."""

    counters: dict[LabelKey, float] = field(default_factory=dict)
    histograms: dict[LabelKey, _Histogram] = field(default_factory=dict)


class MeshTelemetry:
    """Cumulative series of the gateway Envoys, the ztunnels and the app's own call counters."""

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        self._pods: dict[PodKey, _Exposition] = {}
        self._labels: dict[tuple[LabelKey, str], dict[str, str]] = {}
        #: whether some service counts its own calls
        self._counting = any(s.call_counter is not None for s in spec.services.values())

    # -- counting ---------------------------------------------------------------------------------
    def _count(self, pod: PodKey, labels: Mapping[str, str], n: float) -> None:
        if n <= 0:
            return
        exp = self._pods.setdefault(pod, _Exposition())
        key = tuple(sorted(labels.items()))
        exp.counters[key] = exp.counters.get(key, 0.0) + n

    def _observe_duration(self, pod: PodKey, labels: Mapping[str, str], n: int, lat: Moments, rng: np.random.Generator) -> None:
        if n <= 0:
            return
        exp = self._pods.setdefault(pod, _Exposition())
        key = tuple(sorted(labels.items()))
        h = exp.histograms.get(key)
        if h is None:
            h = exp.histograms[key] = _Histogram(np.zeros(len(_LES)))
        h.buckets += rng.multinomial(n, bucket_probs(_LOG_BOUNDS, np.array([lat.mean]), np.array([lat.var]))[0])
        h.sum_ms += n * lat.mean * 1000.0
        h.count += n

    def observe(self, view: ClusterView, mesh: MeshState, stats: Mapping[OpKey, OpStats],
                client: Mapping[tuple[str, str, str], tuple[float, float]], shares: Mapping[str, Mapping[str, float]],
                dt: float, rng: np.random.Generator) -> None:
        """Count one tick of calls (``client``: ok and failed calls/s per client call) into the processes that see them."""
        if not mesh.present and not self._counting:
            return
        # every count of the tick in one Poisson draw: ok and failed calls and, with a mesh, connections
        per_pod = 3 if mesh.present else 2
        calls: list[tuple[PodView, CallOutcome, str, list[Obj], str]] = []
        lams: list[float] = []
        for (caller, op_id, call_id), (ok, err) in sorted(client.items()):
            co = next(c for c in stats[(caller, op_id)].calls if c.call.id == call_id)
            pods = senders(self.spec, view, caller)
            if not pods:
                continue
            host, _ = resolve_address(co.call.address, pods[0].env)
            dst_pods = endpoints(view, host)
            workload = self.spec.services[co.call.service].workload
            share_of = shares.get(caller, {})
            # a request a gateway answered 403 came over a connection the gateway accepted
            accepted = 1.0 if co.reach.cause == "rbac_denied" else co.reach.ok_share
            for pod in pods:
                share = share_of.get(instance_key(pod), 1.0 / len(pods)) * dt
                calls.append((pod, co, host, dst_pods, workload))
                lams += (ok * share, err * share, (ok + err) * share * co.attempts * accepted)[:per_pod]
        counts = rng.poisson(lams).tolist() if lams else []
        for i, (pod, co, host, dst_pods, workload) in enumerate(calls):
            n_ok, n_err = counts[i * per_pod], counts[i * per_pod + 1]
            self._count_calls(pod, co, host, n_ok, n_err)
            if not mesh.present:
                continue
            if mesh.gateway_of(pod.pod) is not None:
                self._proxy_requests(view, mesh, pod, co, host, dst_pods, workload, n_ok, n_err, rng)
            self._connections(view, mesh, pod, host, dst_pods, workload, counts[i * per_pod + 2])
            if co.cause == "rbac_denied":
                self._denied_at_gateway(view, mesh, dst_pods, n_err)
        alive = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]) for p in [*view.all_pods, *mesh.ztunnels.values()]}
        self._pods = {k: v for k, v in self._pods.items() if k in alive}

    def _count_calls(self, pod: PodView, co: CallOutcome, host: str, n_ok: int, n_err: int) -> None:
        counter = self.spec.services[pod.service].call_counter
        if counter is None:
            return
        key = (pod.pod["metadata"].get("namespace", ""), pod.name)
        base = {"__name__": counter.counter, counter.destination_label: host.split(".", 1)[0]}
        self._count(key, {**base, counter.status_label: "200"}, n_ok)
        failed = "403" if co.cause == "rbac_denied" else counter.failed_status
        self._count(key, {**base, counter.status_label: failed}, n_err)

    def _proxy_requests(self, view: ClusterView, mesh: MeshState, pod: PodView, co: CallOutcome, host: str, dst_pods: list[Obj],
                        workload: str, n_ok: int, n_err: int, rng: np.random.Generator) -> None:
        """What a gateway Envoy reports of the requests it proxied upstream."""
        dst = dst_pods[0] if dst_pods and all(mesh.captured(p) for p in dst_pods) else None
        key = (pod.pod["metadata"].get("namespace", ""), pod.name)
        base = {"reporter": "source", **_peer("source", pod.pod, self.spec.services[pod.service].workload),
                **_service_labels(host, view.namespace), **_peer("destination", dst, workload),
                "request_protocol": "http", "grpc_response_status": "",
                "connection_security_policy": "mutual_tls" if dst is not None else UNKNOWN}
        code, flags = _UPSTREAM_FAILURE if co.cause is not None else ("500", "-")
        for n, response, response_flags, lat in ((n_ok, "200", "-", co.ok), (n_err, code, flags, co.err)):
            labels = {**base, "response_code": response, "response_flags": response_flags}
            self._count(key, {"__name__": "istio_requests_total", **labels}, n)
            self._observe_duration(key, labels, n, lat, rng)

    def _denied_at_gateway(self, view: ClusterView, mesh: MeshState, dst_pods: list[Obj], n: int) -> None:
        """Requests a gateway's AuthorizationPolicy answered 403 before routing them."""
        gateways = [p for p in dst_pods if mesh.gateway_of(p) is not None]
        for i, gw in enumerate(gateways):
            part = n // len(gateways) + (1 if i < n % len(gateways) else 0)
            named = view.named(gw["metadata"]["name"])
            owner = self.spec.services[named[0].service].workload if named else gw["metadata"]["name"]
            labels = {"__name__": "istio_requests_total", "reporter": "source", **_peer("source", gw, owner),
                      "destination_service": UNKNOWN, "destination_service_name": UNKNOWN, "destination_service_namespace": UNKNOWN,
                      **_peer("destination", None, UNKNOWN), "request_protocol": "http", "grpc_response_status": "",
                      "connection_security_policy": UNKNOWN, "response_code": "403", "response_flags": "-"}
            self._count((gw["metadata"].get("namespace", ""), gw["metadata"]["name"]), labels, part)

    def _connections(self, view: ClusterView, mesh: MeshState, pod: PodView, host: str, dst_pods: list[Obj], workload: str,
                     conns: int) -> None:
        """ztunnel's L4 counts: at the caller's node for a captured caller, at each callee's node for a captured callee."""
        if conns <= 0 or not dst_pods:
            return
        src_workload = self.spec.services[pod.service].workload
        src_mtls = mesh.in_mesh(pod.pod)
        common = {"request_protocol": "tcp", "response_flags": "-", **_service_labels(host, view.namespace)}
        if mesh.captured(pod.pod):
            zt = mesh.ztunnels[pod.node]
            dst = dst_pods[0] if mesh.in_mesh(dst_pods[0]) else None
            labels = {"reporter": "source", **_peer("source", pod.pod, src_workload), **_peer("destination", dst, workload), **common,
                      "connection_security_policy": "mutual_tls" if dst is not None else UNKNOWN}
            self._tcp((zt["metadata"]["namespace"], zt["metadata"]["name"]), labels, conns)
        captured = [p for p in dst_pods if mesh.captured(p)]
        for i, dst in enumerate(captured):
            part = conns // len(captured) + (1 if i < conns % len(captured) else 0)
            zt = mesh.ztunnels[(dst.get("spec") or {}).get("nodeName", "")]
            labels = {"reporter": "destination", **_peer("source", pod.pod if src_mtls else None, src_workload),
                      **_peer("destination", dst, workload), **common,
                      "connection_security_policy": "mutual_tls" if src_mtls else UNKNOWN}
            self._tcp((zt["metadata"]["namespace"], zt["metadata"]["name"]), labels, part)

    def _tcp(self, ztunnel: PodKey, labels: Mapping[str, str], n: int) -> None:
        for name in ("istio_tcp_connections_opened_total", "istio_tcp_connections_closed_total"):
            self._count(ztunnel, {"__name__": name, **labels}, n)

    # -- exposition -------------------------------------------------------------------------------
    def _dict(self, key: LabelKey, name: str, extra: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
        """The read-only label dict of one exposed series (the same dict every scrape)."""
        cache_key = (key + extra, name)
        labels = self._labels.get(cache_key)
        if labels is None:
            labels = self._labels[cache_key] = {**dict(key), **dict(extra), **({"__name__": name} if name else {})}
        return labels

    def exposed(self) -> dict[PodKey, list[Sample]]:
        """Each process's /metrics now, by pod (namespace, name)."""
        out: dict[PodKey, list[Sample]] = {}
        for pod, exp in sorted(self._pods.items()):
            samples: list[Sample] = [(self._dict(k, ""), v) for k, v in sorted(exp.counters.items())]
            for k, h in sorted(exp.histograms.items()):
                name = "istio_request_duration_milliseconds"
                samples += [(self._dict(k, f"{name}_bucket", (("le", le),)), float(v))
                            for le, v in zip(_LES, np.cumsum(h.buckets).tolist(), strict=True)]
                samples += [(self._dict(k, f"{name}_sum"), h.sum_ms), (self._dict(k, f"{name}_count"), h.count)]
            out[pod] = samples
        return out

    def snapshot(self) -> dict[PodKey, _Exposition]:
        return copy.deepcopy(self._pods)

    def restore(self, snap: dict[PodKey, _Exposition]) -> None:
        self._pods = copy.deepcopy(snap)
