"""NTAM — normalised topology-aware match — for fault localisation and the propagation chain.

ITBench reports NTAM but never published its formula; this is a documented reconstruction
(docs/metrics.md, "NTAM"). Every constant is a field of :class:`NTAMParams`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

from itbench_gym.evaluation.groundtruth import GroundTruth
from itbench_gym.evaluation.scoring_graph import EdgeWeights, Item, ScoringGraph


@dataclass(frozen=True)
class NTAMParams:
    """Every weight of the NTAM reconstruction, with its default."""

    weights: EdgeWeights = field(default_factory=EdgeWeights)
    horizon: float = 4.0  # typed distance at which partial credit reaches 0
    k1: float = 1.2  # BM25 saturation constant of the sub-tree-size factor
    b: float = 0.75  # BM25 length-normalisation strength of the sub-tree-size factor
    chain_decay: float = 0.8  # weight of a chain edge = chain_decay ** (its depth from the root cause)
    length_penalty: float = 0.25  # factor exp(-length_penalty * |len(pred) - len(gt)| / len(gt))

    def __post_init__(self) -> None:
        checks = {
            "horizon": self.horizon > 0,
            "k1": self.k1 > 0,
            "b": 0 <= self.b <= 1,
            "chain_decay": 0 < self.chain_decay <= 1,
            "length_penalty": self.length_penalty >= 0,
        }
        for name, ok in checks.items():
            if not ok or not math.isfinite(getattr(self, name)):
                raise ValueError(f"NTAMParams.{name} is out of range: {getattr(self, name)!r}")

    def graph(self, gt: GroundTruth, topology: nx.MultiDiGraph | None = None) -> ScoringGraph:
        """The scoring graph these parameters describe."""
        return ScoringGraph(gt, topology, weights=self.weights, k1=self.k1, b=self.b)


#: NTAM's documented default weights (see docs/metrics.md); frozen, so one instance serves every default.
DEFAULT_NTAM_PARAMS = NTAMParams()


@dataclass(frozen=True)
class NTAMScore:
    score: float
    precision: float
    recall: float
    length_factor: float

    def to_dict(self) -> dict[str, float]:
        return {
            "score": self.score,
            "precision": self.precision,
            "recall": self.recall,
            "length_factor": self.length_factor,
        }


ZERO = NTAMScore(0.0, 0.0, 0.0, 0.0)


def node_credit(item: Item, class_id: str, graph: ScoringGraph, params: NTAMParams) -> float:
    """1 for the class itself; otherwise distance decay × relative specificity, in [0, 1)."""
    if class_id in item.classes:
        return 1.0
    decay = max(0.0, 1.0 - graph.distance(item, class_id) / params.horizon)
    if decay == 0.0:
        return 0.0
    rho = min(1.0, graph.item_specificity(item) / graph.class_specificity(class_id))
    return decay * rho


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def _length_factor(n_pred: int, n_gt: int, params: NTAMParams) -> float:
    return math.exp(-params.length_penalty * abs(n_pred - n_gt) / max(n_gt, 1))


def ntam_fault_localisation(predicted: Sequence[Item], graph: ScoringGraph, params: NTAMParams) -> NTAMScore:
    """NTAM-FL over the distinct predicted root-cause items against the root-cause classes."""
    truth = graph.gt.root_cause_classes
    if not predicted or not truth:
        return ZERO
    credit = [[node_credit(p, g, graph, params) for g in truth] for p in predicted]
    precision = math.fsum(max(row) for row in credit) / len(predicted)
    recall = math.fsum(max(credit[i][j] for i in range(len(predicted))) for j in range(len(truth))) / len(truth)
    factor = _length_factor(len(predicted), len(truth), params)
    return NTAMScore(_f1(precision, recall) * factor, precision, recall, factor)


def chain_positions(graph: ScoringGraph) -> dict[tuple[str, str], int]:
    """Depth of each ground-truth class edge: causal distance of its source from a root cause."""
    gt = graph.gt
    dag = nx.DiGraph(gt.class_edges)
    roots = [c for c in gt.root_cause_classes if c in dag]
    depth = nx.multi_source_dijkstra_path_length(dag, roots) if roots else {}
    deepest = max(depth.values(), default=-1)
    return {(s, t): int(depth.get(s, deepest + 1)) for s, t in gt.class_edges}


def ntam_propagation(
    predicted: Sequence[tuple[Item, Item]], graph: ScoringGraph, params: NTAMParams
) -> NTAMScore | None:
    """NTAM-FPC: optimal one-to-one edge matching with position-weighted recall; ``None`` without GT edges."""
    truth = graph.gt.class_edges
    if not truth:
        return None
    if not predicted:
        return ZERO
    positions = chain_positions(graph)
    weight = [params.chain_decay ** positions[e] for e in truth]
    credit = [
        [node_credit(ps, s, graph, params) * node_credit(pt, t, graph, params) for s, t in truth]
        for ps, pt in predicted
    ]
    bipartite = nx.Graph()
    for i, row in enumerate(credit):
        for j, c in enumerate(row):
            if c > 0:
                bipartite.add_edge(("p", i), ("g", j), weight=c * weight[j])
    pairs: dict[int, int] = {}
    for u, v in nx.max_weight_matching(bipartite):
        p, g = (u, v) if u[0] == "p" else (v, u)
        pairs[p[1]] = g[1]
    matched = sorted(pairs.items())
    precision = math.fsum(credit[i][j] for i, j in matched) / len(predicted)
    recall = math.fsum(credit[i][j] * weight[j] for i, j in matched) / math.fsum(weight)
    factor = _length_factor(len(predicted), len(truth), params)
    return NTAMScore(_f1(precision, recall) * factor, precision, recall, factor)
