"""The Rego adapter, Gatekeeper's match and review semantics, the suite runner, and the gatekeeper-library corpus."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.policy.conformance import format_report
from itbench_gym.policy.gatekeeper import (
    Constraint,
    ConstraintEvaluator,
    ConstraintTemplate,
    GatekeeperError,
    Unsupported,
    inventory_document,
    review_matches,
    review_of,
    run_gatekeeper_suites,
    wildcard_matches,
)
from itbench_gym.policy.rego import RegoEngine, RegoError

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "conformance" / "gatekeeper"
#: The only reasons a corpus case may be skipped: features this runner documents as unsupported.
DOCUMENTED_SKIPS = ("only CEL", "external_data", "marked skip in the suite")

V0_POLICY = """
package k8s.v0
violation[{"msg": msg}] {
  c := input.review.object.spec.containers[_]
  not startswith(c.image, data.allowed)
  msg := sprintf("image %v not allowed", [c.image])
}
"""
V1_POLICY = """
package k8s.v1
violation contains {"msg": msg} if {
  some c in input.review.object.spec.containers
  not startswith(c.image, data.allowed)
  msg := sprintf("image %v not allowed", [c.image])
}
"""
PODS = {"review": {"object": {"spec": {"containers": [{"image": "evil/x"}, {"image": "ok/y"}, {"image": "evil/z"}]}}}}


# --- the Rego adapter -----------------------------------------------------------------------------


def test_v0_and_v1_modules_evaluate_alike_in_one_engine() -> None:
    engine = RegoEngine()
    engine.add_module("v0.rego", V0_POLICY, "v0")
    engine.add_module("v1.rego", V1_POLICY, "v1")
    engine.set_data({"allowed": "ok/"})
    engine.set_input(PODS)
    want = [{"msg": "image evil/x not allowed"}, {"msg": "image evil/z not allowed"}]
    for package in ("v0", "v1"):
        (found,) = engine.evaluate(f"data.k8s.{package}.violation")
        assert sorted(found, key=str) == want


def test_engines_outlive_a_query_that_ends_the_rego_process() -> None:
    """A query past the Rego process's memory ends that process: it fails, and every other engine is
    given back its modules, data and input in the next one."""
    kept = RegoEngine()
    kept.add_module("v1.rego", V1_POLICY, "v1")
    kept.set_data({"allowed": "ok/"})
    kept.set_input(PODS)
    bomb = RegoEngine()
    bomb.add_module("bomb.rego", "package bomb\nimport rego.v1\nbig := numbers.range(1, 1e10)\n")
    with pytest.raises(RegoError, match="more than the 2 GiB of memory the twin gives Rego") as failed:
        bomb.evaluate("data.bomb.big")
    assert failed.value.code == "rego_resource_error"
    (found,) = kept.evaluate("data.k8s.v1.violation")
    assert sorted(found, key=str) == [{"msg": "image evil/x not allowed"}, {"msg": "image evil/z not allowed"}]


def test_v0_module_may_import_rego_v1() -> None:
    engine = RegoEngine()
    engine.add_module("mixed.rego", "package m\nimport rego.v1\nallow if input.x > 1\n", "v0")
    engine.set_input({"x": 2})
    assert engine.evaluate("data.m.allow") == [True]


def test_data_document_is_replaced_and_undefined_is_no_result() -> None:
    engine = RegoEngine()
    engine.add_module("d.rego", "package d\nnames contains ns.metadata.name if some ns in data.inventory.cluster.v1.Namespace\n"
                      "prod := data.inventory.cluster.v1.Namespace.prod.metadata.name\n")
    engine.set_data({"inventory": inventory_document([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}])})
    assert engine.evaluate("data.d.names") == [["prod"]]
    assert engine.evaluate("data.d.prod") == ["prod"]
    engine.set_data({})
    assert engine.evaluate("data.d.names") == [[]]
    assert engine.evaluate("data.d.prod") == []


@pytest.mark.parametrize(("source", "version"), [("package bad\nallow {\n  input.x ==\n}\n", "v0"), ("package bad\nallow { true }\n", "v1")])
def test_syntax_error_names_module_and_position(source: str, version: Any) -> None:
    with pytest.raises(RegoError) as caught:
        RegoEngine().add_module("bad.rego", source, version)
    assert caught.value.module == "bad.rego"
    assert caught.value.line is not None and caught.value.line >= 2 and caught.value.column is not None
    assert str(caught.value).startswith(f"bad.rego:{caught.value.line}:{caught.value.column}: ")


def test_evaluation_error_is_a_rego_error() -> None:
    engine = RegoEngine()
    engine.add_module("conflict.rego", "package c\nx := 1 if input.a\nx := 2 if input.a\n")
    engine.set_input({"a": True})
    with pytest.raises(RegoError, match="conflict.rego:3"):
        engine.evaluate("data.c.x")


# --- match semantics --------------------------------------------------------------------------------


def _pod(namespace: str = "prod", labels: dict[str, str] | None = None, name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}}


NAMESPACES = {
    "prod": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod", "labels": {"tier": "prod"}}},
    "kube-system": {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system", "labels": {}}},
}


@pytest.mark.parametrize(("pattern", "value", "want"), [
    ("kube-*", "kube-system", True), ("*-system", "gatekeeper-system", True), ("kube-*", "default", False),
    ("prod", "prod", True), ("prod", "prod-1", False), ("*", "anything", True),
])
def test_wildcards_take_a_star_at_either_end(pattern: str, value: str, want: bool) -> None:
    assert wildcard_matches(pattern, value) is want


@pytest.mark.parametrize(("match", "obj", "want"), [
    ({"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]}, _pod(), True),
    ({"kinds": [{"apiGroups": ["apps"], "kinds": ["Pod"]}]}, _pod(), False),
    ({"kinds": [{"apiGroups": ["*"], "kinds": ["*"]}]}, _pod(), True),
    ({"namespaces": ["prod"]}, _pod(), True),
    ({"namespaces": ["kube-*"]}, _pod(), False),
    ({"excludedNamespaces": ["kube-*"]}, _pod("kube-system"), False),
    ({"excludedNamespaces": ["kube-*"]}, NAMESPACES["kube-system"], False),  # a Namespace is matched by its own name
    ({"namespaces": ["prod"]}, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}, True),  # cluster-scoped passes
    ({"labelSelector": {"matchLabels": {"app": "web"}}}, _pod(labels={"app": "web"}), True),
    ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}}, _pod(labels={"app": "web"}), False),
    ({"labelSelector": {"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}}, _pod(), True),
    ({"namespaceSelector": {"matchLabels": {"tier": "prod"}}}, _pod(), True),
    ({"namespaceSelector": {"matchLabels": {"tier": "prod"}}}, _pod("kube-system"), False),
    ({"namespaceSelector": {"matchLabels": {"tier": "prod"}}}, NAMESPACES["prod"], True),
    ({"scope": "Cluster"}, _pod(), False),
    ({"scope": "Namespaced"}, _pod(), True),
    ({"scope": "Cluster"}, NAMESPACES["prod"], True),
    ({"name": "web-*"}, _pod(name="web-1"), True),
    ({"name": "web-*"}, _pod(name="api"), False),
])
def test_match_criteria(match: dict[str, Any], obj: dict[str, Any], want: bool) -> None:
    assert review_matches(match, review_of(obj), NAMESPACES) is want


def test_update_matches_when_the_old_object_matches() -> None:
    review = {"kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "UPDATE",
              "object": _pod(labels={}), "oldObject": _pod(labels={"app": "web"})}
    assert review_matches({"labelSelector": {"matchLabels": {"app": "web"}}}, review, NAMESPACES)


def test_namespace_selector_needs_the_namespace() -> None:
    with pytest.raises(GatekeeperError, match="staging"):
        review_matches({"namespaceSelector": {"matchLabels": {"tier": "prod"}}}, review_of(_pod("staging")), NAMESPACES)


def test_delete_review_carries_the_old_object_as_object() -> None:
    review = review_of({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                        "request": {"operation": "DELETE", "oldObject": _pod(), "userInfo": {"username": "alice"}}})
    assert review["object"] == _pod() and review["kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert review["userInfo"] == {"username": "alice"}


def test_inventory_is_keyed_as_gatekeeper_syncs_it() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "prod"}}
    inventory = inventory_document([deployment, NAMESPACES["prod"]])
    assert inventory["namespace"]["prod"]["apps/v1"]["Deployment"]["d"] == deployment
    assert inventory["cluster"]["v1"]["Namespace"]["prod"] == NAMESPACES["prod"]


# --- templates, constraints, evaluation ---------------------------------------------------------------


def _template(target: dict[str, Any], name: str = "k8sdemo") -> dict[str, Any]:
    return {"apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate", "metadata": {"name": name},
            "spec": {"crd": {"spec": {"names": {"kind": "K8sDemo"}, "validation": {"openAPIV3Schema": {
                "type": "object", "properties": {"prefix": {"type": "string"}}}}}},
                     "targets": [{"target": "admission.k8s.gatekeeper.sh", **target}]}}


V1_TEMPLATE = _template({"code": [{"engine": "Rego", "source": {"version": "v1", "rego": textwrap.dedent("""
    package k8sdemo
    import data.lib.images.bad
    violation contains {"msg": msg, "details": {"image": c.image}} if {
      some c in input.review.object.spec.containers
      bad(c.image)
      msg := sprintf("bad image %v", [c.image])
    }
    """), "libs": ["package lib.images\nbad(image) if not startswith(image, input.parameters.prefix)\n"]}}]})


def _constraint(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sDemo", "metadata": {"name": "demo"}, "spec": spec}


def test_v1_template_with_library_finds_violations() -> None:
    template = ConstraintTemplate.from_object(V1_TEMPLATE)
    constraint = Constraint.from_object(_constraint(match={"kinds": [{"apiGroups": [""], "kinds": ["Pod"]}]}, parameters={"prefix": "ok/"}), template)
    evaluator = ConstraintEvaluator(template, constraint)
    pod = {**_pod(), "spec": {"containers": [{"image": "evil/x"}, {"image": "ok/y"}]}}
    (violation,) = evaluator.review(review_of(pod))
    assert violation.msg == "bad image evil/x" and violation.details == {"image": "evil/x"}
    assert evaluator.review(review_of({**pod, "kind": "ConfigMap"})) == []  # outside the match


@pytest.mark.parametrize(("target", "error"), [
    ({"code": [{"engine": "K8sNativeValidation", "source": {"variables": [{"name": "params", "expression": "1"}]}}]}, GatekeeperError),
    ({"code": [{"engine": "K8sNativeValidation", "source": {"validations": [{"expression": "objct.spec != null"}]}}]}, GatekeeperError),
    ({"rego": "package k8sdemo\nviolation[{\"msg\": m}] { r := external_data({\"provider\": \"p\", \"keys\": []}); m := \"x\" }\n"}, Unsupported),
    ({"libs": []}, GatekeeperError),
    ({"rego": "package k8sdemo\ndeny[m] { m := 1 }\n"}, GatekeeperError),  # no violation rule
    ({"rego": "package k8sdemo\nviolation[{\"msg\": \"x\"}]\n", "libs": ["package helpers\n"]}, GatekeeperError),  # lib outside lib.
])
def test_templates_gatekeeper_cannot_run_here(target: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        ConstraintTemplate.from_object(_template(target))


CEL_SOURCE = {
    "variables": [{"name": "images", "expression": "variables.anyObject.spec.containers.map(c, c.image)"},
                  {"name": "bad", "expression": "variables.images.filter(i, !i.startsWith(variables.params.prefix))"}],
    "matchCondition": [{"name": "not-system", "expression": "!has(variables.anyObject.metadata.labels) || "
                                                          "variables.anyObject.metadata.?labels[?'tier'].orValue('') != 'system'"}],
    "validations": [{"expression": "size(variables.bad) == 0", "messageExpression": "'bad images: ' + variables.bad.join(', ')"},
                    {"expression": "variables.anyObject.spec.containers.all(c, has(c.resources))"}],
}


def test_k8s_native_validation_is_preferred_to_rego_as_gatekeeper_does() -> None:
    both = _template({"code": [{"engine": "K8sNativeValidation", "source": CEL_SOURCE}, *V1_TEMPLATE["spec"]["targets"][0]["code"]]})
    template = ConstraintTemplate.from_object(both)
    assert template.cel is not None and template.rego  # both read; CEL evaluates (Gatekeeper registers it first)
    constraint = Constraint.from_object(_constraint(parameters={"prefix": "ok/"}), template)
    evaluator = ConstraintEvaluator(template, constraint)
    pod = {**_pod(), "spec": {"containers": [{"image": "evil/x", "resources": {}}, {"image": "ok/y"}]}}
    assert [v.msg for v in evaluator.review(review_of(pod))] == [
        "bad images: evil/x", "failed expression: variables.anyObject.spec.containers.all(c, has(c.resources))"]
    system = {**pod, "metadata": {**pod["metadata"], "labels": {"tier": "system"}}}
    assert evaluator.review(review_of(system)) == []  # the match condition leaves it out
    # DELETE: object is null, anyObject is the old object; an expression that errs is a violation (Fail)
    deleting = {**review_of(pod), "operation": "DELETE", "oldObject": pod, "object": None}
    assert [v.msg for v in evaluator.review(deleting)][0] == "bad images: evil/x"
    erring = _template({"code": [{"engine": "K8sNativeValidation", "source": {"validations": [{"expression": "object.spec.nodeName == 'n'"}]}}]})
    cel_only = ConstraintTemplate.from_object(erring)
    (violation,) = ConstraintEvaluator(cel_only, Constraint.from_object(_constraint(), cel_only)).review(review_of(_pod()))
    assert "resulted in error" in violation.msg and "nodeName" in violation.msg


def test_a_failing_query_is_one_violation_carrying_the_error() -> None:
    rego = "package k8sdemo\nviolation[{\"msg\": m}] { m := sprintf(\"%v\", [input.parameters.n / 0]) }\n"
    template = ConstraintTemplate.from_object(_template({"rego": rego}))
    evaluator = ConstraintEvaluator(template, Constraint.from_object(_constraint(parameters={"n": 1}), template))
    (violation,) = evaluator.review(review_of(_pod()))
    assert violation.msg.startswith("k8sdemo.rego:2:") and "zero" in violation.msg


def test_constraint_must_fit_its_template() -> None:
    template = ConstraintTemplate.from_object(V1_TEMPLATE)
    with pytest.raises(GatekeeperError, match="prefix"):
        Constraint.from_object(_constraint(parameters={"prefix": 3}), template)
    with pytest.raises(GatekeeperError, match="kind"):
        Constraint.from_object({**_constraint(), "kind": "Other"}, template)
    with pytest.raises(GatekeeperError, match="name"):
        ConstraintTemplate.from_object(_template({"rego": "package x\n"}, name="wrong"))


# --- the suite runner ---------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_runner_checks_assertions_and_reports_broken_files(tmp_path: Path) -> None:
    import yaml

    good = tmp_path / "good"
    _write(good / "template.yaml", yaml.safe_dump(V1_TEMPLATE))
    _write(good / "constraint.yaml", yaml.safe_dump(_constraint(parameters={"prefix": "ok/"})))
    _write(good / "bad_params.yaml", yaml.safe_dump(_constraint(parameters={"prefix": 1})))
    _write(good / "pod.yaml", yaml.safe_dump({**_pod(), "spec": {"containers": [{"image": "evil/x"}, {"image": "evil/y"}]}}))
    _write(good / "suite.yaml", """
        kind: Suite
        apiVersion: test.gatekeeper.sh/v1alpha1
        tests:
        - name: t
          template: template.yaml
          constraint: constraint.yaml
          cases:
          - {name: count, object: pod.yaml, assertions: [{violations: 2}, {violations: 1, message: "evil/x$"}, {violations: no, message: "^ok"}]}
          - {name: wrong, object: pod.yaml, assertions: [{violations: no}]}
          - {name: missing, object: nope.yaml, assertions: [{violations: yes}]}
          - {name: skipped, object: pod.yaml, skip: true, assertions: [{violations: yes}]}
          - {name: malformed, object: pod.yaml, assertions: [3]}
        - name: rejected
          template: template.yaml
          constraint: bad_params.yaml
          invalid: true
        """)
    broken = tmp_path / "broken"
    _write(broken / "template.yaml", yaml.safe_dump(_template({"rego": "package k8sdemo\nviolation[{\"msg\": m}] {\n"})))
    _write(broken / "constraint.yaml", yaml.safe_dump(_constraint()))
    _write(broken / "suite.yaml", "kind: Suite\ntests:\n- {name: t, template: template.yaml, constraint: constraint.yaml, cases: [{name: c, object: o.yaml}]}\n")
    _write(tmp_path / "unparseable" / "suite.yaml", "kind: Suite\ntests: [\n")

    result = run_gatekeeper_suites([tmp_path])
    assert result.passed == 2  # good:t/count and good:rejected
    failures = {(f.suite, f.resource): f for f in result.failures}
    wrong = failures["good/suite.yaml", "wrong"]
    assert (wrong.policy, wrong.rule, wrong.expected) == ("K8sDemo/demo", "t", "no violations") and wrong.got.startswith("2 violations")
    assert "nope.yaml" in failures["good/suite.yaml", "missing"].detail
    broken = failures["broken/suite.yaml", "c"]
    assert broken.got == "error" and "template.yaml" in broken.detail and "k8sdemo.rego:" in broken.detail
    assert [e for e in result.errors if str(tmp_path / "unparseable" / "suite.yaml") in e]
    assert [(k.resource, k.reason) for k in result.skipped] == [("skipped", "marked skip in the suite")]
    assert "AttributeError" in failures["good/suite.yaml", "malformed"].detail
    assert format_report(result).endswith("2 passed, 4 failed, 1 skipped")


# --- the gatekeeper-library corpus ----------------------------------------------------------------------


def test_gatekeeper_library_passes_at_least_95_percent() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"gatekeeper-library corpus not present at {CORPUS}")
    result = run_gatekeeper_suites([CORPUS])
    assert not result.errors, result.errors
    assert result.passed + len(result.failures) >= 200
    assert result.pass_ratio >= 0.95, format_report(result)
    assert all(any(reason in s.reason for reason in DOCUMENTED_SKIPS) for s in result.skipped), format_report(result)


def test_engine_benchmark_prints_one_row_per_engine(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.rego_engines import main

    suite = CORPUS / "library" / "general" / "httpsonly"
    if not suite.is_dir():
        pytest.skip(f"gatekeeper-library corpus not present at {CORPUS}")
    assert main([str(suite)]) == 0
    table = capsys.readouterr().out
    assert "| regorus (Rust) |" in table and "| rego-cpp (C++) |" in table


def test_conformance_command_ends_with_the_counts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from itbench_gym.cli import main

    suite = CORPUS / "library" / "general" / "httpsonly"
    if not suite.is_dir():
        pytest.skip(f"gatekeeper-library corpus not present at {CORPUS}")
    assert main(["conformance", "gatekeeper", str(suite)]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.endswith(" passed, 0 failed, 0 skipped") and int(last.split()[0]) > 0
    assert main(["conformance", "gatekeeper", str(tmp_path)]) == 2
    assert "no test suite under" in capsys.readouterr().err
