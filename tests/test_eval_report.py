"""The diagnosis report: ITBench's agent output is accepted; malformed reports explain themselves."""

from __future__ import annotations

import json

import pytest

from itbench_gym.evaluation.entities import EntityRef, parse_entity_ref
from itbench_gym.evaluation.report import parse_report

#: Shape of ITBench-SRE-Agent's agent_output.json: opaque ids, descriptive names, contributing_factor.
ITBENCH_AGENT_OUTPUT = {
    "entities": [
        {"id": "9443e43ade4e8512", "contributing_factor": True, "name": "flagd-config ConfigMap"},
        {"id": "ea79fbb1195e1d3f", "contributing_factor": False, "name": "otel-demo/Service/flagd",
         "reasoning": "propagated the flag", "evidence": "logs"},
    ],
    "propagations": [
        {"source": "9443e43ade4e8512", "target": "ea79fbb1195e1d3f", "condition": "flag set", "effect": "flag served",
         "source_name": "flagd-config ConfigMap", "target_name": "flagd Service"},
        {"source": "otel-demo/Service/flagd", "target": "otel-demo/Deployment/cart"},
    ],
    "alerts_explained": [{"alert": "RequestErrorRate", "explained": True}],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("otel-demo/Deployment/checkout", EntityRef("checkout", "Deployment", "otel-demo")),
        ("Service/frontend", EntityRef("frontend", "Service")),
        ("svc/frontend", EntityRef("frontend", "Service")),
        ("deploy/cart", EntityRef("cart", "Deployment")),
        ("otel-demo/cart", EntityRef("cart", None, "otel-demo")),
        ("frontend", EntityRef("frontend")),
        ("flagd-config ConfigMap", EntityRef("flagd-config", "ConfigMap")),
        ("currency-68d8484df8-c2rsg (Pod)", EntityRef("currency-68d8484df8-c2rsg", "Pod")),
        ("Namespace/otel-demo", EntityRef("otel-demo", "Namespace")),
    ],
)
def test_entity_reference_spellings(text: str, expected: EntityRef) -> None:
    assert parse_entity_ref(text) == expected


def test_explicit_fields_override_embedded_parts() -> None:
    assert parse_entity_ref("frontend", kind="svc", namespace="otel-demo") == EntityRef("frontend", "Service", "otel-demo")


def test_itbench_agent_output_is_accepted_and_resolved() -> None:
    result = parse_report(json.dumps(ITBENCH_AGENT_OUTPUT))
    assert result.valid and result.errors == ()
    report = result.report
    assert report is not None
    assert [e.ref for e in report.root_causes] == [EntityRef("flagd-config", "ConfigMap")]
    first, second = report.propagations
    # Propagation endpoints written as entity ids resolve to the entity's name.
    assert first.source == EntityRef("flagd-config", "ConfigMap")
    assert first.target == EntityRef("flagd", "Service", "otel-demo")
    # Endpoints that name no listed entity are parsed as references themselves.
    assert second.target == EntityRef("cart", "Deployment", "otel-demo")


def test_root_cause_flag_wins_over_contributing_factor() -> None:
    report = parse_report({"entities": [{"name": "a", "root_cause": False, "contributing_factor": True}]}).report
    assert report is not None and report.root_causes == ()


def test_report_in_a_markdown_fence_is_accepted() -> None:
    text = "```json\n" + json.dumps({"entities": [{"id": "otel-demo/ConfigMap/flagd-config", "root_cause": True}]}) + "\n```"
    assert parse_report(text).valid


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("{not json", "report: not valid JSON"),
        ([1, 2], "report: expected object"),
        ({"propagations": []}, "report: 'entities' is a required property"),
        ({"entities": [{"root_cause": True}]}, "report.entities[0]: expected one of"),
        ({"entities": [{"name": "x", "root_cause": "yes"}]}, "report.entities[0].root_cause: expected boolean, got str 'yes'"),
        ({"entities": [], "propagations": [{"source": "a"}]}, "report.propagations[0]: 'target' is a required property"),
        ({"entities": [{"name": ""}]}, "report.entities[0].name"),
        (b"\xff\xfe", "report: not UTF-8"),
    ],
)
def test_malformed_reports_give_located_errors_and_never_raise(data: object, expected: str) -> None:
    result = parse_report(data)
    assert not result.valid
    assert any(expected in e for e in result.errors), result.errors
    assert result.to_dict() == {"valid": False, "errors": list(result.errors)}
