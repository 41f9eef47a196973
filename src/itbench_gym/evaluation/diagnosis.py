"""Diagnosis metrics: fault-localisation pass@1, entity P/R/F1, chain LCS F1, proximity, NTAM.

Formulas are in docs/metrics.md. Everything compares alias classes of the ground truth
(:meth:`GroundTruth.match`), never raw strings.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from itbench_gym.evaluation.groundtruth import GroundTruth
from itbench_gym.evaluation.ntam import DEFAULT_NTAM_PARAMS, NTAMParams, NTAMScore, ntam_fault_localisation, ntam_propagation
from itbench_gym.evaluation.report import DiagnosisReport
from itbench_gym.evaluation.scoring_graph import Item, ScoringGraph, make_item, unique_items


@dataclass(frozen=True)
class PRF:
    precision: float
    recall: float
    f1: float

    @staticmethod
    def of(precision: float, recall: float) -> PRF:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return PRF(precision, recall, f1)

    def to_dict(self) -> dict[str, float]:
        return {"precision": self.precision, "recall": self.recall, "f1": self.f1}


ZERO_PRF = PRF(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class ChainScore:
    """Propagation-chain LCS F1 over alias-normalised edges."""

    precision: float
    recall: float
    f1: float
    lcs: int
    predicted_edges: int
    truth_edges: int

    def to_dict(self) -> dict[str, float | int]:
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "lcs": self.lcs,
            "predicted_edges": self.predicted_edges,
            "truth_edges": self.truth_edges,
        }


@dataclass(frozen=True)
class EntityMatch:
    entity: str
    root_cause: bool
    classes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"entity": self.entity, "root_cause": self.root_cause, "matches": list(self.classes)}


@dataclass(frozen=True)
class DiagnosisResult:
    fl_pass: bool
    fl_reasons: tuple[str, ...]
    entity: PRF
    root_cause_entity: PRF
    propagation: ChainScore | None
    proximity: PRF
    ntam_fl: NTAMScore
    ntam_fpc: NTAMScore | None
    matches: tuple[EntityMatch, ...] = ()
    #: ITBench-Evaluations' root-cause entity@k: the share of the true root causes among the first k flagged.
    root_cause_at_k: Mapping[int, float] = field(default_factory=dict)
    #: Whether the report names the first component the fault reached (None: the truth has no propagation).
    component_identification: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "fl_pass": self.fl_pass,
            "fl_reasons": list(self.fl_reasons),
            "entity": self.entity.to_dict(),
            "root_cause_entity": self.root_cause_entity.to_dict(),
            "propagation": self.propagation.to_dict() if self.propagation else None,
            "proximity": self.proximity.to_dict(),
            "ntam_fl": self.ntam_fl.score,
            "ntam_fpc": self.ntam_fpc.score if self.ntam_fpc else None,
            "ntam_fl_parts": self.ntam_fl.to_dict(),
            "ntam_fpc_parts": self.ntam_fpc.to_dict() if self.ntam_fpc else None,
            "matches": [m.to_dict() for m in self.matches],
            "root_cause_at_k": {str(k): v for k, v in self.root_cause_at_k.items()},
            "component_identification": self.component_identification,
        }


def failed_diagnosis(gt: GroundTruth, reason: str) -> DiagnosisResult:
    """The all-zero result of a missing or malformed report."""
    zero_chain = ChainScore(0.0, 0.0, 0.0, 0, 0, len(gt.class_edges)) if gt.class_edges else None
    zero_ntam = NTAMScore(0.0, 0.0, 0.0, 0.0)
    return DiagnosisResult(
        fl_pass=False,
        fl_reasons=(reason,),
        entity=ZERO_PRF,
        root_cause_entity=ZERO_PRF,
        propagation=zero_chain,
        proximity=ZERO_PRF,
        ntam_fl=zero_ntam,
        ntam_fpc=zero_ntam if gt.class_edges else None,
        root_cause_at_k=dict.fromkeys(AT_K, 0.0),
        component_identification=False if first_symptom(gt) is not None else None,
    )


def evaluate_diagnosis(
    report: DiagnosisReport,
    gt: GroundTruth,
    *,
    topology: nx.MultiDiGraph | None = None,
    params: NTAMParams = DEFAULT_NTAM_PARAMS,
) -> DiagnosisResult:
    """Score a parsed report against the ground truth (and the cluster topology, if given)."""
    graph = params.graph(gt, topology)
    entities = unique_items((e.ref for e in report.entities), gt)
    root_causes = unique_items((e.ref for e in report.root_causes), gt)
    edges = _predicted_edges(report, gt)
    fl_pass, reasons = _fault_localisation(root_causes, gt)
    return DiagnosisResult(
        fl_pass=fl_pass,
        fl_reasons=reasons,
        entity=_coverage(entities, gt.classes.keys()),
        root_cause_entity=_coverage(root_causes, gt.root_cause_classes),
        propagation=_chain_lcs(edges, gt),
        proximity=_proximity(root_causes, graph),
        ntam_fl=ntam_fault_localisation(root_causes, graph, params),
        ntam_fpc=ntam_propagation(edges, graph, params),
        matches=tuple(
            EntityMatch(str(e.ref), e.root_cause, tuple(sorted(gt.match(e.ref)))) for e in report.entities
        ),
        root_cause_at_k={k: _recall_at(root_causes, gt, k) for k in AT_K},
        component_identification=_names_first_symptom(entities, gt),
    )


#: The k of root-cause entity@k (ITBench-Evaluations reports k = 1..5).
AT_K = (1, 2, 3, 4, 5)


def _recall_at(root_causes: Sequence[Item], gt: GroundTruth, k: int) -> float:
    """The share of the true root-cause classes among the first ``k`` flagged entities, in report order."""
    truth = set(gt.root_cause_classes)
    if not truth:
        return 0.0
    found = {c for item in root_causes[:k] for c in item.classes} & truth
    return len(found) / len(truth)


def first_symptom(gt: GroundTruth) -> str | None:
    """The class the fault reaches first: the target of the first propagation out of a root cause."""
    roots = set(gt.root_cause_classes)
    return next((target for source, target in gt.class_edges if source in roots and target not in roots), None)


def _names_first_symptom(entities: Sequence[Item], gt: GroundTruth) -> bool | None:
    first = first_symptom(gt)
    return None if first is None else any(first in item.classes for item in entities)


def _fault_localisation(root_causes: Sequence[Item], gt: GroundTruth) -> tuple[bool, tuple[str, ...]]:
    """Pass iff ≥1 root cause is flagged and every flagged item denotes a root-cause class."""
    if not root_causes:
        return False, ("the report flags no entity as root cause",)
    truth = set(gt.root_cause_classes)
    reasons = []
    for item in root_causes:
        if not item.classes:
            reasons.append(f"{item.ref} matches no ground-truth entity")
        elif not item.classes & truth:
            reasons.append(
                f"{item.ref} is not a root cause (it is ground-truth {', '.join(sorted(item.classes))})"
            )
    return not reasons, tuple(reasons)


def _coverage(items: Sequence[Item], classes: Iterable[str]) -> PRF:
    """Precision: share of items denoting a truth class; recall: share of truth classes named."""
    truth = set(classes)
    if not items or not truth:
        return ZERO_PRF
    hits = [item.classes & truth for item in items]
    precision = sum(1 for h in hits if h) / len(items)
    recall = len(set().union(*hits)) / len(truth)
    return PRF.of(precision, recall)


def _predicted_edges(report: DiagnosisReport, gt: GroundTruth) -> list[tuple[Item, Item]]:
    """Alias-normalised reported edges: no self-loops, each edge once, in report order."""
    seen: dict[tuple[str, str], tuple[Item, Item]] = {}
    for p in report.propagations:
        s, t = make_item(p.source, gt), make_item(p.target, gt)
        if s.key != t.key:
            seen.setdefault((s.key, t.key), (s, t))
    return list(seen.values())


def _causal_order(edges: Sequence[tuple[str, str]]) -> list[int]:
    """Edge indices in causal order: topological by source then target, ties by label.

    Two reports of the same DAG linearise identically whatever order they were written in; a
    cyclic report keeps its written order.
    """
    dag = nx.DiGraph(edges)
    try:
        rank = {n: i for i, n in enumerate(nx.lexicographical_topological_sort(dag))}
    except nx.NetworkXUnfeasible:
        return list(range(len(edges)))
    return sorted(range(len(edges)), key=lambda i: (rank[edges[i][0]], rank[edges[i][1]]))


def _lcs(a: Sequence[Any], b: Sequence[Any], same: Callable[[Any, Any], bool]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if same(x, y) else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def _chain_lcs(predicted: Sequence[tuple[Item, Item]], gt: GroundTruth) -> ChainScore | None:
    truth = list(gt.class_edges)
    if not truth:
        return None
    if not predicted:
        return ChainScore(0.0, 0.0, 0.0, 0, 0, len(truth))
    pred_order = _causal_order([(s.label, t.label) for s, t in predicted])
    pred = [predicted[i] for i in pred_order]
    gold = [truth[i] for i in _causal_order(truth)]
    length = _lcs(pred, gold, lambda p, g: g[0] in p[0].classes and g[1] in p[1].classes)
    prf = PRF.of(length / len(pred), length / len(gold))
    return ChainScore(prf.precision, prf.recall, prf.f1, length, len(pred), len(gold))


def _proximity(root_causes: Sequence[Item], graph: ScoringGraph) -> PRF:
    """Soft P/R of 1/(1+hops) between flagged root causes and true root causes (ITBench's rubric)."""
    truth = graph.gt.root_cause_classes
    if not root_causes or not truth:
        return ZERO_PRF

    def score(item: Item, cid: str) -> float:
        hops = graph.hops(item, cid)
        return 0.0 if math.isinf(hops) else 1.0 / (1.0 + hops)

    table = [[score(item, cid) for cid in truth] for item in root_causes]
    precision = math.fsum(max(row) for row in table) / len(root_causes)
    recall = math.fsum(max(table[i][j] for i in range(len(root_causes))) for j in range(len(truth))) / len(truth)
    return PRF.of(precision, recall)
