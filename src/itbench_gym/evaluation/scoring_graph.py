"""The graph partial credit is measured on: cluster topology + ground-truth classes + causal edges.

Nodes are the topology's objects plus one node per ground-truth class. A class node is joined at
distance 0 to every topology object the class denotes, and class nodes are joined along the
ground truth's propagations. So a reported entity is "near" a root cause if the cluster wiring
or the known causal chain puts it near, and ground-truth entities absent from the topology
(chaos objects, span operations) are still reachable through the causal chain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

import networkx as nx

from itbench_gym.evaluation.entities import EntityRef
from itbench_gym.evaluation.groundtruth import GroundTruth


@dataclass(frozen=True)
class EdgeWeights:
    """Cost of crossing one topology edge, by relation type (see docs/metrics.md).

    Relations inside one workload are cheap; shared infrastructure (a Node, the Namespace, the
    cluster) is expensive, so that two objects are not "close" merely for sharing a namespace.
    """

    ownership: float = 0.5  # <KIND>_OWNS_<KIND>, SERVICE_SELECTS_POD, SERVICE_HAS_ENDPOINTS, ENDPOINTS_TARGET_POD
    port: float = 0.5  # SERVICE_OWNS_PORT, POD_OWNS_PORT, SERVICE_TARGETS_PORT
    mount: float = 1.0  # POD_MOUNTS_CONFIGMAP|SECRET|PVC
    storage: float = 1.0  # PV_BOUND_TO_PVC
    calls: float = 1.0  # CALLS (application call graph)
    propagation: float = 1.0  # a ground-truth propagation between two classes
    node: float = 2.0  # NODE_RUNS_POD
    namespace: float = 3.0  # NAMESPACE_OWNS_<KIND>
    cluster: float = 4.0  # CLUSTER_OWN_RESOURCE / CLUSTER_OWN_NAMESPACE
    default: float = 1.0  # any other relation

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and value >= 0 and math.isfinite(value)):
                raise ValueError(f"EdgeWeights.{f.name} must be a finite number >= 0, got {value!r}")

    def category(self, verbose_type: str) -> str:
        """The weight field that governs an edge of this ``verbose_type``."""
        t = verbose_type.upper()
        if t == "CALLS":
            return "calls"
        if t.startswith("NAMESPACE_OWNS_"):
            return "namespace"
        if t.startswith("CLUSTER_OWN"):
            return "cluster"
        if t == "NODE_RUNS_POD":
            return "node"
        if t.startswith("POD_MOUNTS_"):
            return "mount"
        if t == "PV_BOUND_TO_PVC":
            return "storage"
        if t.endswith("_PORT"):
            return "port"
        if "_OWNS_" in t or t in ("SERVICE_SELECTS_POD", "SERVICE_HAS_ENDPOINTS", "ENDPOINTS_TARGET_POD"):
            return "ownership"
        return "default"


#: Edge categories that are shared infrastructure, not dependencies; hop counts ignore them.
HUB_CATEGORIES = frozenset({"node", "namespace", "cluster"})


@dataclass(frozen=True)
class Item:
    """A reported entity after alias normalisation: entities naming the same classes are one item."""

    key: str
    ref: EntityRef
    classes: frozenset[str] = field(default_factory=frozenset)

    @property
    def label(self) -> str:
        """Sort/compare label: the class id when matched, so equal chains linearise identically."""
        return min(self.classes) if self.classes else "~" + str(self.ref)


def make_item(ref: EntityRef, gt: GroundTruth) -> Item:
    classes = gt.match(ref)
    key = "class:" + ",".join(sorted(classes)) if classes else "entity:" + "/".join(ref.key())
    return Item(key=key, ref=ref, classes=classes)


def unique_items(refs: Iterable[EntityRef], gt: GroundTruth) -> list[Item]:
    """Items in first-mention order, each once."""
    seen: dict[str, Item] = {}
    for ref in refs:
        item = make_item(ref, gt)
        seen.setdefault(item.key, item)
    return list(seen.values())


def _class_node(class_id: str) -> str:
    return f"gt:{class_id}"


class ScoringGraph:
    """Distances between reported items and ground-truth classes; built once per evaluation."""

    def __init__(
        self,
        gt: GroundTruth,
        topology: nx.MultiDiGraph | None = None,
        *,
        weights: EdgeWeights = EdgeWeights(),
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        self.gt = gt
        self._k1, self._b = k1, b
        self._graph = nx.Graph()
        self._by_name: dict[str, list[str]] = {}
        self._refs: dict[str, EntityRef] = {}
        self._members: dict[str, list[str]] = {c: [] for c in gt.classes}
        for cid in gt.classes:
            self._graph.add_node(_class_node(cid))
        if topology is not None:
            self._add_topology(topology, weights)
        for s, t in gt.class_edges:
            self._link(_class_node(s), _class_node(t), weights.propagation, "propagation")
        self._specificity = self._subtree_specificity(topology) if topology is not None else {}
        self._dist_cache: dict[tuple[str, bool], dict[str, float]] = {}

    def _link(self, u: str, v: str, weight: float, category: str) -> None:
        current = self._graph.get_edge_data(u, v)
        if current is None or weight < current["weight"]:
            self._graph.add_edge(u, v, weight=weight, category=category)

    def _add_topology(self, topology: nx.MultiDiGraph, weights: EdgeWeights) -> None:
        for node, data in topology.nodes(data=True):
            self._graph.add_node(node)
            name = str(data.get("name", node))
            self._by_name.setdefault(name.lower(), []).append(node)
            ref = EntityRef(name=name, kind=data.get("kind"), namespace=data.get("namespace") or None)
            self._refs[node] = ref
            for cid in self.gt.match(ref):
                self._members[cid].append(node)
                self._link(node, _class_node(cid), 0.0, "member")
        for u, v, data in topology.edges(data=True):
            category = weights.category(str(data.get("verbose_type", data.get("type", ""))))
            self._link(u, v, getattr(weights, category), category)

    def _subtree_specificity(self, topology: nx.MultiDiGraph) -> dict[str, float]:
        """BM25-style specificity of each object from the size of the sub-tree it owns.

        size(v) = 1 + |ownership descendants of v|; norm(v) = (1-b) + b·size(v)/mean size;
        f(v) = (k1+1)/(k1+norm(v)). A namespace or node that owns hundreds of objects scores
        near 0, a leaf object slightly above 1.
        """
        owns = nx.DiGraph()
        owns.add_nodes_from(topology.nodes)
        owns.add_edges_from((u, v) for u, v, d in topology.edges(data=True) if d.get("type") == "OWNS")
        sizes = {n: 1 + len(nx.descendants(owns, n)) for n in owns.nodes}
        if not sizes:
            return {}
        mean = sum(sizes.values()) / len(sizes)
        k1, b = self._k1, self._b
        return {n: (k1 + 1) / (k1 + (1 - b) + b * s / mean) for n, s in sizes.items()}

    def topology_nodes(self, item: Item) -> list[str]:
        """Topology objects the item denotes: its classes' members, else exact name/kind/ns matches."""
        if item.classes:
            return [n for c in sorted(item.classes) for n in self._members.get(c, [])]
        ref = item.ref
        out = []
        for node in self._by_name.get(ref.name.lower(), []):
            data = self._refs[node]
            if ref.kind is not None and (data.kind or "").lower() != ref.kind.lower():
                continue
            if ref.namespace is not None and data.namespace is not None and data.namespace != ref.namespace:
                continue
            out.append(node)
        return out

    def _sources(self, item: Item) -> list[str]:
        return [_class_node(c) for c in sorted(item.classes)] + self.topology_nodes(item)

    def _distances(self, item: Item, hops: bool) -> dict[str, float]:
        cached = self._dist_cache.get((item.key, hops))
        if cached is not None:
            return cached
        sources = [s for s in self._sources(item) if s in self._graph]
        if not sources:
            result: dict[str, float] = {}
        elif hops:
            result = nx.multi_source_dijkstra_path_length(self._graph, sources, weight=_hop_weight)
        else:
            result = nx.multi_source_dijkstra_path_length(self._graph, sources, weight="weight")
        self._dist_cache[(item.key, hops)] = result
        return result

    def distance(self, item: Item, class_id: str) -> float:
        """Typed (edge-weighted) distance from the item to a class; ``inf`` if unconnected."""
        if class_id in item.classes:
            return 0.0
        return self._distances(item, False).get(_class_node(class_id), math.inf)

    def hops(self, item: Item, class_id: str) -> float:
        """Number of dependency hops (hub edges excluded, class membership free); ``inf`` if none."""
        if class_id in item.classes:
            return 0.0
        return self._distances(item, True).get(_class_node(class_id), math.inf)

    def item_specificity(self, item: Item) -> float:
        values = [self._specificity[n] for n in self.topology_nodes(item) if n in self._specificity]
        return max(values) if values else 1.0

    def class_specificity(self, class_id: str) -> float:
        values = [self._specificity[n] for n in self._members.get(class_id, []) if n in self._specificity]
        return max(values) if values else 1.0


def _hop_weight(u: str, v: str, data: dict[str, object]) -> float | None:
    category = data["category"]
    if category in HUB_CATEGORIES:
        return None
    return 0.0 if category == "member" else 1.0
