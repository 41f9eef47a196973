"""Ground truth of a generated variant, from the app's topology: root cause = the faulted object,
propagation = from the service the fault acts on, along its callers (failures) or its callees
(missing or extra calls), to each service whose alert fired.

The call graph is the behaviour model's (``AppFacts.calls``, the topology's CALLS edges); a
(caller, callee) edge means a failure of the callee reaches the caller. Every service on a chain
gets a Service group and a Pod group (aliases of one another), named as the existing scenarios
name them (``<service>-service-1``, pods by their workload's name).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import networkx as nx

from itbench_gym.backends.sim.app.spec import AppSpec
from itbench_gym.generator.templates import Candidate


def call_graph(calls: Sequence[tuple[str, str]]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_edges_from(calls)
    return graph


def reach(graph: nx.DiGraph, candidates: Sequence[Candidate]) -> set[str]:
    """The services the candidates act on and every service their effects can travel to (callers,
    callees, or both, as each candidate ``reaches``), directly or not."""
    out: set[str] = set()
    for c in candidates:
        for s in c.services:
            out.add(s)
            if s in graph:
                if "callees" in c.reaches:
                    out |= nx.descendants(graph, s)
                if "callers" in c.reaches:
                    out |= nx.ancestors(graph, s)
    return out


def chain(graph: nx.DiGraph, candidate: Candidate, alerting: str) -> list[str] | None:
    """Services from the one the fault acts on to ``alerting`` (the shortest call path against the
    calls, to a caller, or along them, to a callee, as the candidate ``reaches``), or None when
    ``alerting`` is not reached."""
    best: list[str] | None = None
    for start in candidate.services:
        if start == alerting:
            return [start]
        for way in candidate.reaches:
            source, target = (start, alerting) if way == "callees" else (alerting, start)
            if source in graph and target in graph and nx.has_path(graph, source, target):
                path = nx.shortest_path(graph, source, target)
                path = path if way == "callees" else list(reversed(path))
                if best is None or len(path) < len(best):
                    best = path
    return best


def primary(graph: nx.DiGraph, candidate: Candidate, alerting: str) -> bool:
    """Whether ``alerting`` is the service the fault acts on or one its failure reaches as a caller (the
    alerts a triggering alert is chosen from first; a callee's are chosen only when there is none)."""
    path = chain(graph, candidate, alerting)
    return path is not None and (len(path) == 1 or not graph.has_edge(path[0], path[1]))


def _service_id(service: str) -> str:
    return f"{service}-service-1"


def build_ground_truth(candidates: Sequence[Candidate], alerts: Sequence[tuple[str, str, Collection[str]]],
                       model: AppSpec, graph: nx.DiGraph, namespace: str) -> tuple[dict[str, Any], list[str]]:
    """The ``ground_truth`` section and the services on its chains: ``alerts`` are the triggering
    (alertname, service, keys of the candidates that make it fire)."""
    groups: dict[str, dict[str, Any]] = {}
    aliases: list[list[str]] = []
    propagations: list[dict[str, str]] = []
    faults: list[dict[str, Any]] = []

    services: list[str] = []

    def service_groups(service: str) -> str:
        sid = _service_id(service)
        if sid not in groups:
            services.append(service)
            workload = model.services[service].workload if service in model.services else service
            groups[sid] = {"id": sid, "kind": "Service", "namespace": namespace, "filter": [f"{service}\\b"]}
            pid = f"{service}-pod-1"
            groups[pid] = {"id": pid, "kind": "Pod", "namespace": namespace, "filter": [f"{workload}-.*"]}
            aliases.append([sid, pid])
        return sid

    def hop(source: str, target: str, condition: str, effect: str) -> None:
        edge = {"source": source, "target": target, "condition": condition, "effect": effect}
        if not any(p["source"] == source and p["target"] == target for p in propagations):
            propagations.append(edge)

    for c in candidates:
        kind, name = c.root_cause["kind"], c.root_cause["name"]
        root = f"{name}-{kind.lower()}-1"
        groups.setdefault(root, {"id": root, "kind": kind, "name": name, "namespace": namespace, "root_cause": True})
        faults.append({"category": c.category, "condition": c.condition, "fault_mechanism": c.mechanism,
                       "entity": {"group_id": root, "kind": kind, "name": name}})
        source = root
        if c.via:
            via = service_groups(c.via)
            hop(root, via, c.condition, c.served)
            source = via
        for _, service, causes in alerts:
            path = chain(graph, c, service) if c.key in causes else None
            if path is None:
                continue
            first = service_groups(path[0])
            hop(source, first, c.served or c.condition, f"{path[0]} {c.effect.get(path[0], 'misbehaves')}")
            for near, far in zip(path, path[1:], strict=False):
                wording = c.reaches["callees" if graph.has_edge(near, far) else "callers"]
                hop(service_groups(near), service_groups(far), wording["condition"].format(near=near, far=far),
                    wording["effect"].format(near=near, far=far))
    gt_alerts = [{"id": alertname, "group_id": service_groups(service)} for alertname, service, _ in alerts]
    doc = {"groups": list(groups.values()), "aliases": aliases, "propagations": propagations,
           "fault": faults, "alerts": gt_alerts}
    return doc, services


def technologies(services: Sequence[str], model: AppSpec) -> int:
    """Distinct languages of the services on the chains (Eq. 6's technologies), at least 1."""
    return max(1, len({model.services[s].language for s in services if s in model.services}))
