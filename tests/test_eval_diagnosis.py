"""Diagnosis metrics with hand-computed expectations: FL pass@1, entity P/R/F1, chain LCS F1, proximity."""

from __future__ import annotations

import pytest

from itbench_gym.evaluation.diagnosis import evaluate_diagnosis
from itbench_gym.evaluation.groundtruth import parse_ground_truth
from itbench_gym.evaluation.report import parse_report

NS = "otel-demo"
CHAIN = ["flagd-config", "flagd", "recommendation", "frontend", "frontend-proxy"]

#: flagd-config (root cause) -> flagd -> recommendation -> frontend -> frontend-proxy
GT = parse_ground_truth(
    {
        "groups": [
            {"id": "flagd-config-1", "kind": "ConfigMap", "name": "flagd-config", "namespace": NS, "root_cause": True},
            *({"id": f"{n}-service-1", "kind": "Service", "namespace": NS, "filter": [f"{n}\\b"]} for n in CHAIN[1:]),
            {"id": "recommendation-pod-1", "kind": "Pod", "namespace": NS, "filter": ["recommendation-.*"]},
        ],
        "aliases": [["recommendation-service-1", "recommendation-pod-1"]],
        "propagations": [
            {"source": "flagd-config-1", "target": "flagd-service-1"},
            {"source": "flagd-service-1", "target": "recommendation-pod-1"},
            {"source": "recommendation-pod-1", "target": "recommendation-service-1"},
            {"source": "recommendation-service-1", "target": "frontend-service-1"},
            {"source": "frontend-service-1", "target": "frontend-proxy-service-1"},
        ],
    }
)


def svc(name: str) -> str:
    return f"{NS}/ConfigMap/{name}" if name == "flagd-config" else f"{NS}/Service/{name}"


def diagnose(entities: list[tuple[str, bool]], edges: list[tuple[str, str]] = ()):  # type: ignore[assignment]
    doc = {
        "entities": [{"name": n, "root_cause": rc} for n, rc in entities],
        "propagations": [{"source": s, "target": t, "condition": "", "effect": ""} for s, t in edges],
    }
    parsed = parse_report(doc)
    assert parsed.report is not None, parsed.errors
    return evaluate_diagnosis(parsed.report, GT)


def test_fault_localisation_pass() -> None:
    assert diagnose([(svc("flagd-config"), True), (svc("flagd"), False)]).fl_pass


@pytest.mark.parametrize(
    ("entities", "reason"),
    [
        ([(svc("flagd"), False)], "the report flags no entity as root cause"),
        ([(svc("flagd-config"), True), (svc("frontend"), True)],
         "otel-demo/Service/frontend is not a root cause (it is ground-truth frontend-service-1)"),
        ([(svc("flagd-config"), True), ("otel-demo/Service/payment", True)], "otel-demo/Service/payment matches no ground-truth entity"),
    ],
)
def test_fault_localisation_fails_with_reason(entities, reason: str) -> None:
    result = diagnose(entities)
    assert not result.fl_pass
    assert result.fl_reasons == (reason,)


def test_root_cause_through_an_alias_passes() -> None:
    gt = parse_ground_truth(
        {
            "groups": [
                {"id": "checkout-deployment-1", "kind": "Deployment", "namespace": NS, "filter": ["checkout\\b"], "root_cause": True},
                {"id": "checkout-pod-1", "kind": "Pod", "namespace": NS, "filter": ["checkout-.*"]},
            ],
            "aliases": [["checkout-pod-1", "checkout-deployment-1"]],
        }
    )
    report = parse_report({"entities": [{"name": "otel-demo/Pod/checkout-6d5f9c8b7-kx2lp", "root_cause": True}]}).report
    assert report is not None
    assert evaluate_diagnosis(report, gt).fl_pass
    wrong_kind = parse_report({"entities": [{"name": "otel-demo/Service/checkout", "root_cause": True}]}).report
    assert wrong_kind is not None
    assert not evaluate_diagnosis(wrong_kind, gt).fl_pass


def test_entity_precision_recall_f1() -> None:
    # Items: flagd-config, flagd, payment (svc/flagd duplicates flagd). 2 of 3 correct; 2 of 5 classes found.
    result = diagnose([(svc("flagd-config"), True), (svc("flagd"), False), ("otel-demo/Service/payment", False), ("svc/flagd", False)])
    assert result.entity.precision == pytest.approx(2 / 3)
    assert result.entity.recall == pytest.approx(2 / 5)
    assert result.entity.f1 == pytest.approx(0.5)
    assert result.root_cause_entity.to_dict() == {"precision": 1.0, "recall": 1.0, "f1": 1.0}


def test_chain_lcs_ignores_writing_order_of_the_same_chain() -> None:
    edges = [(svc("flagd-config"), svc("flagd")), (svc("recommendation"), svc("frontend")), (svc("flagd"), svc("recommendation"))]
    chain = diagnose([(svc("flagd-config"), True)], edges).propagation
    assert chain is not None
    assert (chain.lcs, chain.predicted_edges, chain.truth_edges) == (3, 3, 4)
    assert chain.f1 == pytest.approx(2 * 1 * 0.75 / 1.75)


def test_chain_lcs_counts_a_reversed_edge_as_wrong() -> None:
    chain = diagnose([(svc("flagd-config"), True)], [(svc("flagd-config"), svc("flagd")), (svc("frontend"), svc("recommendation"))]).propagation
    assert chain is not None
    assert (chain.precision, chain.recall) == (0.5, 0.25)
    assert chain.f1 == pytest.approx(1 / 3)


def test_chain_lcs_penalises_a_wrong_causal_order() -> None:
    # frontend -> flagd-config puts the config change *after* the frontend errors: the two correct
    # edges are then out of order and only one of them counts.
    edges = [(svc("recommendation"), svc("frontend")), (svc("flagd-config"), svc("flagd")), (svc("frontend"), svc("flagd-config"))]
    chain = diagnose([(svc("flagd-config"), True)], edges).propagation
    assert chain is not None
    assert chain.lcs == 1
    assert chain.f1 == pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4))


def test_pod_and_service_of_one_class_are_one_chain_node() -> None:
    edges = [(svc("flagd"), "otel-demo/Pod/recommendation-6d5f9c8b7-kx2lp"), ("otel-demo/Pod/recommendation-6d5f9c8b7-kx2lp", svc("recommendation"))]
    chain = diagnose([(svc("flagd-config"), True)], edges).propagation
    assert chain is not None and (chain.lcs, chain.predicted_edges) == (1, 1)


def test_proximity_is_one_over_one_plus_hops() -> None:
    assert diagnose([(svc("flagd-config"), True)]).proximity.f1 == 1.0
    assert diagnose([(svc("flagd"), True)]).proximity.f1 == pytest.approx(1 / 2)
    assert diagnose([(svc("frontend-proxy"), True)]).proximity.f1 == pytest.approx(1 / 5)
    # Precision averages over the flagged items (1 and 1/3); recall takes the best (1).
    both = diagnose([(svc("flagd-config"), True), (svc("recommendation"), True)]).proximity
    assert (both.precision, both.recall) == (pytest.approx(2 / 3), 1.0)
    assert diagnose([("otel-demo/Service/payment", True)]).proximity.f1 == 0.0


def test_root_cause_entity_at_k_counts_the_first_k_flagged_entities_in_report_order() -> None:
    late = diagnose([(svc("frontend"), True), (svc("recommendation"), True), (svc("flagd-config"), True)])
    assert late.root_cause_at_k[1] == 0.0 and late.root_cause_at_k[2] == 0.0 and late.root_cause_at_k[3] == 1.0
    assert not late.fl_pass  # two of the three flagged entities are not root causes
    assert diagnose([(svc("flagd-config"), True)]).root_cause_at_k[1] == 1.0


def test_component_identification_is_naming_the_first_component_the_fault_reached() -> None:
    assert diagnose([(svc("flagd-config"), True), (svc("flagd"), False)]).component_identification is True
    assert diagnose([(svc("flagd-config"), True), (svc("frontend"), False)]).component_identification is False
    no_chain = parse_ground_truth({"groups": [{"id": "a", "kind": "Service", "name": "a", "namespace": NS, "root_cause": True}]})
    parsed = parse_report({"entities": [{"name": f"{NS}/Service/a", "root_cause": True}], "propagations": []})
    assert parsed.report is not None
    assert evaluate_diagnosis(parsed.report, no_chain).component_identification is None
