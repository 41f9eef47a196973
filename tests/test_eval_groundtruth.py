"""Ground truth: ITBench's v1 files parse; errors name the field; matching follows groups and aliases."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import SHARED
from itbench_gym.evaluation.entities import parse_entity_ref
from itbench_gym.evaluation.groundtruth import GroundTruthError, load_ground_truth, parse_ground_truth

GROUND_TRUTHS = SHARED / "itbench" / "groundtruth"

GT: dict[str, Any] = {
    "groups": [
        {"id": "flagd-config-1", "kind": "ConfigMap", "name": "flagd-config", "namespace": "otel-demo", "root_cause": True},
        {"id": "checkout-deployment-1", "kind": "Deployment", "namespace": "otel-demo", "filter": ["checkout\\b"]},
        {"id": "checkout-pod-1", "kind": "Pod", "namespace": "otel-demo", "filter": ["checkout-.*"]},
        {"id": "checkout-service-1", "kind": "Service", "namespace": "otel-demo", "filter": ["checkout\\b"]},
        {"id": "frontend-pod-1", "kind": "Pod", "namespace": "otel-demo", "filter": ["frontend-.*"]},
        {"id": "frontend-service-1", "kind": "Service", "namespace": "otel-demo", "filter": ["frontend\\b"]},
        {"id": "frontend-proxy-service-1", "kind": "Service", "namespace": "otel-demo", "filter": ["frontend-proxy\\b"]},
    ],
    "aliases": [["checkout-service-1", "checkout-pod-1"], ["frontend-service-1", "frontend-pod-1"]],
    "propagations": [
        {"source": "flagd-config-1", "target": "checkout-pod-1", "condition": "c", "effect": "e"},
        {"source": "checkout-pod-1", "target": "checkout-service-1", "condition": "c", "effect": "e"},
        {"source": "checkout-service-1", "target": "frontend-service-1", "condition": "c", "effect": "e"},
    ],
    "alerts": [{"id": "HighRequestErrorRate", "group_id": "frontend-service-1", "metadata": {"description": "d"}}],
    "recommended_actions": [{"solution": {"id": "disable", "actions": ["Disable the flag"]}}],
}


def test_aliases_merge_groups_into_classes() -> None:
    gt = parse_ground_truth(GT)
    assert gt.class_of["checkout-pod-1"] == gt.class_of["checkout-service-1"] == "checkout-pod-1"
    assert gt.class_of["checkout-deployment-1"] == "checkout-deployment-1"
    assert gt.root_cause_classes == ("flagd-config-1",)
    # The pod->service propagation is inside one class and disappears after normalisation.
    # A class is named after its first-declared group.
    assert gt.class_edges == (("flagd-config-1", "checkout-pod-1"), ("checkout-pod-1", "frontend-pod-1"))
    assert gt.alerts[0].description == "d" and gt.recommended_actions[0].actions == ("Disable the flag",)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("otel-demo/ConfigMap/flagd-config", {"flagd-config-1"}),
        ("cm/flagd-config", {"flagd-config-1"}),  # kubectl short name for the kind
        ("otel-demo/configmap/FLAGD-CONFIG", {"flagd-config-1"}),  # case-insensitive
        ("other-ns/ConfigMap/flagd-config", set()),  # namespace must agree
        ("otel-demo/Secret/flagd-config", set()),  # kind must agree
        ("svc/checkout", {"checkout-pod-1"}),  # class id of checkout-service-1's alias class
        ("otel-demo/Deployment/checkout", {"checkout-deployment-1"}),  # no alias: a different thing
        ("Pod/checkout-6d5f9c8b7-kx2lp", {"checkout-pod-1"}),
        ("Pod/checkout", {"checkout-pod-1"}),  # the pod idiom X-.* also names workload X
        ("checkout", {"checkout-pod-1", "checkout-deployment-1"}),  # no kind: every kind that fits
        ("otel-demo/Service/frontend-proxy", {"frontend-proxy-service-1"}),
        ("otel-demo/Pod/frontend-proxy-7d9c6b8f4-x2x4z", set()),  # not frontend's pod
        ("otel-demo/Pod/frontend-7d9c6b8f4-x2x4z", {"frontend-pod-1"}),
        ("payment", set()),
    ],
)
def test_matching(text: str, expected: set[str]) -> None:
    assert set(parse_ground_truth(GT).match(parse_entity_ref(text))) == expected


def test_most_specific_filter_wins() -> None:
    gt = parse_ground_truth(
        {
            "groups": [
                {"id": "fe-pod", "kind": "Pod", "filter": ["frontend-.*"], "root_cause": True},
                {"id": "proxy-pod", "kind": "Pod", "filter": ["frontend-proxy-.*"]},
            ]
        }
    )
    assert gt.match(parse_entity_ref("Pod/frontend-proxy-abc")) == {"proxy-pod"}
    assert gt.match(parse_entity_ref("Pod/frontend-abc")) == {"fe-pod"}


def test_wrapped_itbench_document_is_unwrapped() -> None:
    gt = parse_ground_truth({"apiVersion": "itbench.io/v1", "kind": "GroundTruth", "metadata": {"name": "x"}, "spec": GT})
    assert len(gt.groups) == 7


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d.pop("groups"), "ground_truth: 'groups' is a required property"),
        (lambda d: d.update(propagation=[]), "Additional properties are not allowed ('propagation' was unexpected)"),
        (lambda d: d["groups"][1].pop("kind"), "ground_truth.groups[1]: 'kind' is a required property"),
        (lambda d: d["groups"][2].update(filter=["checkout-(.*"]), "ground_truth.groups[2].filter[0]: invalid regular expression"),
        (lambda d: d["propagations"][1].update(target="checkout-svc"), "ground_truth.propagations[1].target: unknown group id 'checkout-svc'"),
        (lambda d: d["aliases"][0].append("nope"), "ground_truth.aliases[0][2]: unknown group id 'nope'"),
        (lambda d: d["groups"][0].update(root_cause=False), "ground_truth.groups: no group has root_cause: true"),
        (lambda d: d["groups"].append(dict(d["groups"][0])), "ground_truth.groups[7].id: duplicate group id 'flagd-config-1'"),
        (lambda d: d.update(fault=[{"entity": {"group_id": "ghost", "kind": "ConfigMap"}}]),
         "ground_truth.fault[0].entity.group_id: unknown group id 'ghost'"),
    ],
)
def test_errors_name_the_field(mutate, expected: str) -> None:
    import copy

    doc = copy.deepcopy(GT)
    mutate(doc)
    with pytest.raises(GroundTruthError) as info:
        parse_ground_truth(doc)
    assert expected in str(info.value)


def test_lenient_mode_drops_dangling_references_with_warnings() -> None:
    import copy

    doc = copy.deepcopy(GT)
    doc["propagations"].append({"source": "checkout-service", "target": "frontend-service-1"})
    doc["alerts"].append({"id": "X", "group_id": "ghost"})
    gt = parse_ground_truth(doc, strict=False)
    assert len(gt.propagations) == 3
    assert gt.alerts[-1].group_id is None
    assert gt.warnings == (
        "ground_truth.propagations[3].source: unknown group id 'checkout-service'",
        "ground_truth.alerts[1].group_id: unknown group id 'ghost'",
    )


@pytest.mark.skipif(not GROUND_TRUTHS.is_dir(), reason=f"ITBench reference data not present at {GROUND_TRUTHS}")
def test_every_itbench_v1_ground_truth_loads_leniently() -> None:
    files = sorted(GROUND_TRUTHS.glob("*_groundtruth_v1.yaml"))
    loaded, unusable = 0, []
    for path in files:
        try:
            gt = load_ground_truth(path, strict=False)
        except GroundTruthError as exc:
            unusable.append(str(exc))
            continue
        assert gt.root_cause_classes
        loaded += 1
    # Scenario 38 has only invalid filters ('*.*') on its root-cause groups; nothing else may fail.
    assert loaded == len(files) - 1, unusable
    assert "38_groundtruth_v1.yaml: spec.groups: no group has root_cause: true" in unusable[0]


@pytest.mark.skipif(not GROUND_TRUTHS.is_dir(), reason=f"ITBench reference data not present at {GROUND_TRUTHS}")
def test_itbench_scenario_12() -> None:
    gt = load_ground_truth(GROUND_TRUTHS / "12_groundtruth_v1.yaml")
    assert gt.root_cause_classes == ("flagd-config-1",)
    assert gt.match(parse_entity_ref("otel-demo/Service/product-catalog")) == {"products-endpoint-2"}
    assert len(gt.class_edges) == 6
