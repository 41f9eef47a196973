"""Kyverno engine semantics (anchors, operators, wildcards, variables, autogen) and corpus conformance."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.policy.conformance import format_report
from itbench_gym.policy.kyverno import Admission, PolicyError, evaluate_policy, load_policy, run_kyverno_suites
from itbench_gym.policy.kyverno.conditions import check
from itbench_gym.policy.kyverno.engine import RuleResult
from itbench_gym.policy.kyverno.pattern import match_pattern
from itbench_gym.policy.kyverno.variables import Context, VariableError, substitute

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "conformance" / "kyverno"
# Skips allowed in the corpus run: unsupported features, missing input files, and rules that do not apply
# to the resource (which `kyverno test` itself reports as "excluded" rather than comparing).
UNSUPPORTED_REASONS = ("rules are not supported", "input file not found", "patched or generated resources", "is not supported", "excluded")


def pod(spec: dict[str, Any], name: str = "p", namespace: str = "default", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": spec}


def policy(rule: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    rule = {"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, **rule}
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {"rules": [rule]},
    }


def status(rule: dict[str, Any], resource: dict[str, Any], rule_name: str = "r", operation: str = "CREATE") -> str:
    results = evaluate_policy(load_policy(policy(rule)), resource, Admission(operation), {}, {})
    return next(r.status for r in results if r.rule == rule_name)


def outcome(resource: Any, pattern: Any) -> str:
    failure = match_pattern(resource, pattern)
    return "pass" if failure is None else "skip" if failure.skip else "fail"


# --- string operators and wildcards in pattern leaves -------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        ("nginx:1.2", "*:*", "pass"),
        ("nginx", "*:*", "fail"),
        ("abc", "a?c", "pass"),
        ("", "?*", "fail"),
        ("prod", "!default", "pass"),
        ("default", "!default", "fail"),
        ("b", "a | b", "pass"),
        (5, ">3", "pass"),
        (5, "<=4", "fail"),
        (150, "100-200", "pass"),
        (250, "100-200 | 500-600", "fail"),
        (250, "100!-200", "pass"),
        ("512Mi", "<1Gi", "pass"),
        ("2Gi", "<=1Gi", "fail"),
        ("1024Mi", "1Gi", "pass"),
        ("250m", ">=0.25", "pass"),
        (3, ">1 & <5", "pass"),
        (True, True, "pass"),
        ("true", True, "fail"),
        (2, 2, "pass"),
    ],
)
def test_leaf_operators(value: Any, pattern: Any, expected: str) -> None:
    assert outcome({"f": value}, {"f": pattern}) == expected


def test_star_needs_the_field_and_missing_fields_fail() -> None:
    assert outcome({"a": {"b": 1}}, {"a": "*"}) == "pass"
    assert outcome({}, {"a": "*"}) == "fail"
    assert outcome({}, {"a": "?*"}) == "fail"


def test_scalar_pattern_applies_to_each_list_item() -> None:
    assert outcome({"groups": [150, 550]}, {"groups": "100-200 | 500-600"}) == "pass"
    assert outcome({"groups": [150, 300]}, {"groups": "100-200 | 500-600"}) == "fail"


def test_wildcard_keys_expand_over_resource_keys() -> None:
    assert outcome({"labels": {"app.kubernetes.io/name": "x"}}, {"labels": {"app.kubernetes.io/*": "?*"}}) == "pass"
    assert outcome({"labels": {"team": "x"}}, {"labels": {"app.kubernetes.io/*": "?*"}}) == "fail"


# --- anchors -----------------------------------------------------------------------------------------


def test_conditional_anchor_skips_when_condition_fails() -> None:
    pattern = {"spec": {"(hostNetwork)": True, "hostPID": False}}
    assert outcome({"spec": {"hostNetwork": False, "hostPID": True}}, pattern) == "skip"
    assert outcome({"spec": {"hostPID": True}}, pattern) == "skip"
    assert outcome({"spec": {"hostNetwork": True, "hostPID": True}}, pattern) == "fail"
    assert outcome({"spec": {"hostNetwork": True, "hostPID": False}}, pattern) == "pass"


def test_conditional_anchor_in_array_applies_per_item() -> None:
    pattern = {"containers": [{"(name)": "web*", "image": "*:*"}]}
    assert outcome({"containers": [{"name": "web1", "image": "a:1"}, {"name": "db", "image": "b"}]}, pattern) == "pass"
    assert outcome({"containers": [{"name": "web1", "image": "a"}]}, pattern) == "fail"
    assert outcome({"containers": [{"name": "db", "image": "b"}]}, pattern) == "skip"


def test_equality_anchor_checks_only_present_keys() -> None:
    pattern = {"=(securityContext)": {"=(privileged)": False}}
    assert outcome({}, pattern) == "pass"
    assert outcome({"securityContext": {}}, pattern) == "pass"
    assert outcome({"securityContext": {"privileged": True}}, pattern) == "fail"


def test_negation_anchor_forbids_key() -> None:
    assert outcome({"spec": {"volumes": [{"hostPath": {}}]}}, {"spec": {"=(volumes)": [{"X(hostPath)": "null"}]}}) == "fail"
    assert outcome({"spec": {"volumes": [{"emptyDir": {}}]}}, {"spec": {"=(volumes)": [{"X(hostPath)": "null"}]}}) == "pass"


def test_existence_anchor_needs_one_matching_item() -> None:
    pattern = {"^(containers)": [{"image": "nginx*"}]}
    assert outcome({"containers": [{"image": "busybox"}, {"image": "nginx:1"}]}, pattern) == "pass"
    assert outcome({"containers": [{"image": "busybox"}]}, pattern) == "fail"


def test_global_anchor_skips_whole_rule() -> None:
    pattern = {"spec": {"containers": [{"<(image)": "corp.io/*"}], "imagePullSecrets": [{"name": "regcred"}]}}
    assert outcome({"spec": {"containers": [{"image": "docker.io/x"}], "imagePullSecrets": []}}, pattern) == "skip"
    assert outcome({"spec": {"containers": [{"image": "corp.io/x"}], "imagePullSecrets": [{"name": "other"}]}}, pattern) == "fail"


def test_add_if_not_present_anchor_is_ignored_in_validation() -> None:
    assert outcome({}, {"+(dnsPolicy)": "None"}) == "pass"


# --- conditions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "operator", "value", "expected"),
    [
        ("nginx:latest", "Equals", "*:latest", True),
        ("a", "NotEquals", "a", False),
        ("1Gi", "Equals", "1024Mi", True),
        (["a", "b"], "AnyIn", ["b", "c"], True),
        (["a", "b"], "AllIn", ["b", "c"], False),
        (["a", "b"], "AnyNotIn", ["a", "b"], False),
        (["x", "y"], "AllNotIn", ["a", "b"], True),
        ("default", "In", '["default", "test"]', True),
        ("kube-system", "AnyIn", ["kube-*"], True),
        (5, "AnyIn", "1-10", True),
        (5, "AnyIn", ["1-10"], False),
        (None, "AnyNotIn", ["a"], False),
        (None, "NotEquals", "a", False),
        ("2h", "GreaterThan", "90m", True),
        ("500m", "LessThan", "1", True),
        (3, "GreaterThanOrEquals", "3", True),
        ("1.22.0", "LessThan", "1.24.1", True),
        ("5000h", "DurationGreaterThan", "4380h", True),
    ],
)
def test_condition_operators(key: Any, operator: str, value: Any, expected: bool) -> None:
    assert check(key, operator, value) is expected


def test_deny_conditions_fail_the_rule() -> None:
    rule = {
        "validate": {
            "message": "no host ports",
            "deny": {
                "conditions": {
                    "any": [
                        {"key": "{{ request.object.spec.containers[].ports[].hostPort || `[]` }}", "operator": "AnyNotIn", "value": [0]}
                    ]
                }
            },
        }
    }
    assert status(rule, pod({"containers": [{"name": "c", "ports": [{"hostPort": 80}]}]})) == "fail"
    assert status(rule, pod({"containers": [{"name": "c"}]})) == "pass"


def test_preconditions_skip_and_treat_missing_variables_as_empty() -> None:
    rule = {
        "preconditions": {"all": [{"key": "{{ request.object.metadata.labels.tier }}", "operator": "Equals", "value": "web"}]},
        "validate": {"pattern": {"spec": {"hostNetwork": False}}},
    }
    assert status(rule, pod({"hostNetwork": True})) == "skip"
    assert status(rule, pod({"hostNetwork": True}, labels={"tier": "web"})) == "fail"
    assert status(rule, pod({"hostNetwork": True}, labels={"tier": "web"}), operation="UPDATE") == "fail"


# --- variables ------------------------------------------------------------------------------------------


def test_variables_keep_types_and_nest() -> None:
    ctx = Context({"request": {"object": {"spec": {"replicas": 3}}, "namespace": "prod"}, "dict": {"prod": ["a"]}})
    assert substitute("{{ request.object.spec.replicas }}", ctx) == 3
    assert substitute("n={{ request.object.spec.replicas }}", ctx) == "n=3"
    assert substitute('{{ dict."{{request.namespace}}" }}', ctx) == ["a"]
    assert substitute("{{ to_upper('{{request.namespace}}') }}", ctx) == "PROD"
    with pytest.raises(VariableError):
        substitute("{{ request.object.spec.missing }}", ctx)
    assert substitute("{{ request.object.spec.missing || 'x' }}", ctx) == "x"


def test_missing_keys_error_only_on_plain_paths() -> None:
    ctx = Context({"element": {"verbs": ["get"]}, "request": {"object": {"spec": {"containers": [{"name": "a"}]}}}})
    assert substitute("{{ element.resourceNames[] }}", ctx) is None
    assert substitute("{{ request.object.spec.containers[].resources.keys(@)[] }}", ctx) == []
    with pytest.raises(VariableError):
        substitute("{{ element.resourceNames }}", ctx)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("split('a:b', ':')", ["a", "b"]),
        ("regex_match('^v[0-9]+$', 'v12')", True),
        ("regex_replace_all('^(docker.io/)?(.*)$', 'docker.io/nginx', '$2')", "nginx"),
        ('label_match(`{"app": "x"}`, `{"app": "x", "b": "c"}`)', True),
        ("divide('2Gi', '512Mi')", 4),
        ("add(`1`, `2`)", 3),
        ("truncate('abcdef', `3`)", "abc"),
        ("base64_decode('aGk=')", "hi"),
        ("parse_json('{\"a\": 1}').a", 1),
        ("parse_yaml('a: [1, 2]').a[1]", 2),
        ("semver_compare('1.4.2', '>=1.2.0 <2.0.0')", True),
        ("items(`{\"a\": 1}`, 'k', 'v')", [{"k": "a", "v": 1}]),
        ("object_from_lists(['a'], [`1`])", {"a": 1}),
        ("time_since('', '2020-01-01T00:00:00Z', '2020-01-02T01:00:00Z')", "25h0m0s"),
    ],
)
def test_custom_jmespath_functions(expression: str, expected: Any) -> None:
    assert substitute("{{ " + expression + " }}", Context({})) == expected


# --- foreach, match, autogen ---------------------------------------------------------------------------


def test_foreach_checks_every_element() -> None:
    rule = {
        "validate": {
            "foreach": [
                {
                    "list": "request.object.spec.containers",
                    "deny": {"conditions": {"all": [{"key": "{{ element.image }}", "operator": "Equals", "value": "*:latest"}]}},
                }
            ]
        }
    }
    assert status(rule, pod({"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:latest"}]})) == "fail"
    assert status(rule, pod({"containers": [{"name": "a", "image": "x:1"}]})) == "pass"
    assert status(rule, pod({"containers": []})) == "skip"


def test_match_kinds_namespaces_and_exclude() -> None:
    rule = {
        "match": {"any": [{"resources": {"kinds": ["apps/v1/Deployment"], "namespaces": ["prod-*"]}}]},
        "exclude": {"any": [{"resources": {"names": ["legacy-*"]}}]},
        "validate": {"pattern": {"spec": {"replicas": ">1"}}},
    }
    pol = load_policy(policy(rule))
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "prod-eu"}, "spec": {"replicas": 1}}
    assert evaluate_policy(pol, deploy, Admission(), {}, {})[0].status == "fail"
    assert (
        evaluate_policy(pol, {**deploy, "metadata": {"name": "legacy-web", "namespace": "prod-eu"}}, Admission(), {}, {})[0].status
        == "skip"
    )
    assert evaluate_policy(pol, {**deploy, "metadata": {"name": "web", "namespace": "dev"}}, Admission(), {}, {})[0].status == "skip"


def test_autogen_rules_check_pod_templates() -> None:
    pol = load_policy(policy({"validate": {"pattern": {"spec": {"=(hostNetwork)": False}}}}))
    assert [r["name"] for r in pol.rules] == ["r", "autogen-r", "autogen-cronjob-r"]
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"hostNetwork": True}}},
    }
    results = {r.rule: r.status for r in evaluate_policy(pol, deploy, Admission(), {}, {})}
    assert results == {"r": "skip", "autogen-r": "fail", "autogen-cronjob-r": "skip"}
    off = load_policy(policy({"validate": {"pattern": {"spec": {}}}}, annotations={"pod-policies.kyverno.io/autogen-controllers": "none"}))
    assert [r["name"] for r in off.rules] == ["r"]


def test_unscored_policy_warns_and_mutate_is_unsupported() -> None:
    doc = policy({"validate": {"pattern": {"spec": {"hostNetwork": False}}}}, annotations={"policies.kyverno.io/scored": "false"})
    assert evaluate_policy(load_policy(doc), pod({"hostNetwork": True}), Admission(), {}, {})[0].status == "warn"
    mutate = load_policy(policy({"mutate": {"patchStrategicMerge": {}}}))
    assert "r" in mutate.unsupported and not mutate.rules


def test_user_info_in_exclude() -> None:
    rule = {
        "exclude": {"any": [{"clusterRoles": ["cluster-admin"]}]},
        "validate": {"pattern": {"spec": {"hostNetwork": False}}},
    }
    pol = load_policy(policy(rule))
    resource = pod({"hostNetwork": True})
    assert evaluate_policy(pol, resource, Admission(), {}, {})[0].status == "fail"
    assert evaluate_policy(pol, resource, Admission(cluster_roles=("cluster-admin",)), {}, {})[0].status == "skip"


def cel_results(cel: dict[str, Any], resource: dict[str, Any], **rule: Any) -> dict[str, RuleResult]:
    results = evaluate_policy(load_policy(policy({"validate": {"cel": cel}, **rule})), resource, Admission(), {}, {})
    return {r.rule: r for r in results}


def test_cel_rules_pass_fail_and_deny_what_they_cannot_evaluate() -> None:
    no_host_network = {"expressions": [{"expression": "!object.spec.?hostNetwork.orValue(false)", "message": "no host network"}]}
    assert cel_results(no_host_network, pod({}))["r"].status == "pass"
    failed = cel_results(no_host_network, pod({"hostNetwork": True}))["r"]
    assert failed.status == "fail" and "no host network" in failed.message
    # the default message names the expression; an error fails the rule as the failure policy Fail does
    missing = cel_results({"expressions": [{"expression": "object.spec.hostNetwork == false"}]}, pod({}))["r"]
    assert missing.status == "fail" and "resulted in error" in missing.message and "no such key" in missing.message
    ruled = evaluate_policy(load_policy(policy({"validate": {"message": "pods need a name", "cel": {"expressions": [
        {"expression": "object.metadata.name == 'other'"}]}}})), pod({}), Admission(), {}, {})[0]
    assert ruled.message == "pods need a name"  # an expression without a message takes the rule's
    not_bool = cel_results({"expressions": [{"expression": "object.metadata.name"}]}, pod({}))["r"]
    assert not_bool.status == "fail" and "must evaluate to a bool" in not_bool.message


def test_cel_variables_message_expressions_and_preconditions() -> None:
    cel = {
        "variables": [{"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
                      {"name": "latest", "expression": "variables.images.filter(i, i.endsWith(':latest'))"}],
        "expressions": [{"expression": "size(variables.latest) == 0",
                         "messageExpression": "'images with :latest: ' + variables.latest.join(', ')"}],
    }
    bad = pod({"containers": [{"name": "a", "image": "nginx:latest"}, {"name": "b", "image": "busybox:1.36"}]})
    assert cel_results(cel, bad)["r"].message.endswith("images with :latest: nginx:latest")
    skipped = cel_results(cel, bad, celPreconditions=[{"name": "labelled", "expression": "has(object.metadata.labels.app)"}])["r"]
    assert skipped.status == "skip" and skipped.message == "cel preconditions not met"
    in_default = {"expressions": [{"expression": "namespaceObject.metadata.name != 'default'"}]}
    assert cel_results(in_default, pod({}, namespace="default"))["r"].status == "fail"
    assert cel_results(in_default, pod({}, namespace="team-a"))["r"].status == "pass"


def test_cel_rules_are_autogenerated_for_pod_controllers() -> None:
    cel = {"expressions": [{"expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))"}]}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
              "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "a", "securityContext": {"privileged": True}}]}}}}
    results = cel_results(cel, deploy)
    assert results["autogen-r"].status == "fail" and results["r"].status == "skip"
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}}}}
    assert cel_results(cel, cron)["autogen-cronjob-r"].status == "pass"


def validating_policy(validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "ValidatingPolicy", "metadata": {"name": "vp"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                                                             "resources": ["pods"]}]},
                     "validations": validations, **spec}}


def vpol_results(doc: dict[str, Any], resource: dict[str, Any], operation: str = "CREATE") -> dict[str, RuleResult]:
    return {r.rule: r for r in evaluate_policy(load_policy(doc), resource, Admission(operation), {}, {})}


NO_PRIVILEGED = [{"expression": "object.spec.containers.all(c, !c.?securityContext.?privileged.orValue(false))",
                  "messageExpression": "'privileged containers in ' + object.metadata.name"}]


def test_validating_policy_matches_by_resource_rules_and_fails_on_the_first_false_validation() -> None:
    privileged = pod({"containers": [{"name": "a", "securityContext": {"privileged": True}}]}, name="priv")
    result = vpol_results(validating_policy(NO_PRIVILEGED), privileged)[""]
    assert (result.status, result.message) == ("fail", "privileged containers in priv")
    assert vpol_results(validating_policy(NO_PRIVILEGED), pod({"containers": [{"name": "a"}]}))[""].status == "pass"
    assert not vpol_results(validating_policy(NO_PRIVILEGED), privileged, operation="DELETE")[""].matched
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "default"}, "spec": {}}
    assert not vpol_results(validating_policy(NO_PRIVILEGED), service)[""].matched
    # no message: the index; a validation that errs is an error, not a failure (unlike a ClusterPolicy's CEL rule)
    plain = vpol_results(validating_policy([{"expression": "true"}, {"expression": "false"}]), privileged)[""]
    assert plain.message == "CEL expression validation failed at index 1"
    assert vpol_results(validating_policy([{"expression": "object.spec.hostNetwork"}]), privileged)[""].status == "error"


def test_validating_policy_match_conditions_and_lazy_variables() -> None:
    doc = validating_policy([{"expression": "variables.images.all(i, !i.endsWith(':latest'))"}],
                            matchConditions=[{"name": "team-pods", "expression": "object.metadata.?labels[?'team'].hasValue()"}],
                            variables=[{"name": "images", "expression": "object.spec.containers.map(c, c.image)"},
                                       {"name": "unused", "expression": "object.spec.missing"}])
    latest = {"containers": [{"name": "a", "image": "nginx:latest"}]}
    assert vpol_results(doc, pod(latest))[""].status == "skip"
    assert vpol_results(doc, pod(latest, labels={"team": "shop"}))[""].status == "fail"


def test_validating_policy_autogen_reads_pod_templates_but_not_their_namespace() -> None:
    checks = [*NO_PRIVILEGED, {"expression": "object.metadata.namespace != 'default'"}]
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
              "spec": {"template": {"metadata": {}, "spec": {"containers": [{"name": "a"}]}}}}
    results = vpol_results(validating_policy(checks), deploy)
    assert set(results) == {"", "autogen-", "autogen-cronjob-"} and not results[""].matched
    assert results["autogen-"].status == "fail" and results["autogen-"].message == "CEL expression validation failed at index 1"
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "jobs"},
            "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "securityContext": {"privileged": True}}]}}}}}}
    # as in Kyverno, the copy reads the template's metadata, which has no name
    cron_result = vpol_results(validating_policy(checks), cron)["autogen-cronjob-"]
    assert cron_result.status == "fail" and cron_result.message.startswith("failed to evaluate message expression")
    assert "object.spec.jobTemplate.spec.template.metadata.name" in cron_result.message
    only_pods = validating_policy(checks, autogen={"podControllers": {"controllers": []}})
    assert [r["name"] for r in load_policy(only_pods).rules] == [""]


# --- runner ---------------------------------------------------------------------------------------------


def test_bad_suite_files_become_failures_not_exceptions(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kyverno-test.yaml").write_text("results: [\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "policy.yaml").write_text("kind: ClusterPolicy\nmetadata: {name: p}\nspec: {rules: [{name: r}]}\n")
    (tmp_path / "b" / "kyverno-test.yaml").write_text(
        "policies: [policy.yaml]\nresources: []\nresults: [{policy: p, rule: r, kind: Pod, resources: [x], result: pass}]\n"
    )
    result = run_kyverno_suites([tmp_path])
    assert len(result.failures) == 2 and result.passed == 0
    assert any("policy.yaml" in e for e in result.errors)
    assert format_report(result).splitlines()[-1] == "0 passed, 2 failed, 0 skipped"


def test_suite_with_exception_mocked_api_call_and_operation(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(
        """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: quota}
spec:
  rules:
  - name: max-pods
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: count
      apiCall: {urlPath: "/api/v1/namespaces/{{request.namespace}}/pods", jmesPath: "items | length(@)"}
    preconditions: {all: [{key: "{{request.operation}}", operator: NotEquals, value: DELETE}]}
    validate: {deny: {conditions: {all: [{key: "{{count}}", operator: GreaterThanOrEquals, value: 2}]}}}
"""
    )
    (tmp_path / "exception.yaml").write_text(
        """
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: allow-system}
spec:
  exceptions: [{policyName: quota, ruleNames: [max-pods]}]
  match: {any: [{resources: {kinds: [Pod], namespaces: [kube-system]}}]}
"""
    )
    (tmp_path / "resources.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: kube-system}\n"
    )
    (tmp_path / "kyverno-test.yaml").write_text(
        """
policies: [policy.yaml]
resources: [resources.yaml]
exceptions: [exception.yaml]
apiCallResponses:
- urlPath: /api/v1/namespaces/default/pods
  response: {body: {items: [1, 2]}}
- urlPath: /api/v1/namespaces/kube-system/pods
  response: {body: {items: [1, 2, 3]}}
results:
- {policy: quota, rule: max-pods, kind: Pod, resources: [a], result: fail}
- {policy: quota, rule: max-pods, kind: Pod, resources: [a], result: skip, operation: DELETE}
- {policy: quota, rule: max-pods, kind: Pod, resources: [kube-system/b], result: skip}
"""
    )
    result = run_kyverno_suites([tmp_path / "kyverno-test.yaml"])
    assert (result.passed, result.failures, result.skipped) == (3, [], []), format_report(result)


def test_corpus_conformance() -> None:
    if not CORPUS.is_dir():
        pytest.skip(f"Kyverno conformance corpus not present at {CORPUS}")
    result = run_kyverno_suites([CORPUS])
    report = format_report(result)
    assert result.passed > 0, report
    assert result.pass_ratio >= 0.95, report
    assert all(any(r in k.reason for r in UNSUPPORTED_REASONS) for k in result.skipped), report


def test_suite_context_answers_kyvernos_resource_and_image_libraries(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("""
apiVersion: policies.kyverno.io/v1alpha1
kind: ValidatingPolicy
metadata: {name: registries}
spec:
  autogen: {podControllers: {controllers: []}}
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  variables:
  - name: allowed
    expression: resource.Get("v1", "configmaps", "default", "registries").data.allowed.split(",")
  - name: teamRegistry
    expression: namespaceObject.metadata.?annotations[?"corp.com/registry"].orValue("none")
  validations:
  - expression: object.spec.containers.all(c, variables.allowed.exists(r, c.image.startsWith(r)) || c.image.startsWith(variables.teamRegistry))
  - expression: object.spec.containers.all(c, !has(image.GetMetadata(c.image).config.Volumes))
    message: images that declare volumes are refused
""")
    (tmp_path / "resources.yaml").write_text("""
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: team-a}
spec: {containers: [{name: a, image: ghcr.io/app:1}, {name: b, image: team.io/tool:2}]}
---
apiVersion: v1
kind: Pod
metadata: {name: volumes, namespace: team-a}
spec: {containers: [{name: a, image: ghcr.io/db:1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: elsewhere, namespace: default}
spec: {containers: [{name: a, image: team.io/tool:2}]}
""")
    (tmp_path / "context.yaml").write_text("""
apiVersion: cli.kyverno.io/v1alpha1
kind: Context
spec:
  resources:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: registries, namespace: default}, data: {allowed: "ghcr.io/,docker.io/"}}
  images:
  - {image: ghcr.io/app:1, config: {}}
  - {image: team.io/tool:2, config: {}}
  - {image: ghcr.io/db:1, config: {Volumes: {/data: {}}}}
""")
    (tmp_path / "values.yaml").write_text("""
namespaces:
- {apiVersion: v1, kind: Namespace, metadata: {name: team-a, annotations: {corp.com/registry: team.io/}}}
""")
    (tmp_path / "kyverno-test.yaml").write_text("""
policies: [policy.yaml]
resources: [resources.yaml]
context: context.yaml
variables: values.yaml
results:
- {policy: registries, isValidatingPolicy: true, kind: Pod, resources: [team-a/good], result: pass}
- {policy: registries, isValidatingPolicy: true, kind: Pod, resources: [team-a/volumes], result: fail}
- {policy: registries, isValidatingPolicy: true, kind: Pod, resources: [default/elsewhere], result: fail}
""")
    result = run_kyverno_suites([tmp_path])
    assert (result.passed, result.failures, result.skipped) == (3, [], []), format_report(result)


@pytest.mark.parametrize(("doc", "where"), [
    (policy({"validate": {"cel": {"expressions": [{"expression": "object.spec.containers.all(c,"}]}}}),
     "policy p, rule r: validate.cel.expressions[0].expression: syntax error at line 1, column 29"),
    (policy({"validate": {"cel": {"expressions": [{"expression": "true", "messageExpression": "'a' +"}]}}}),
     "validate.cel.expressions[0].messageExpression: syntax error"),
    (policy({"celPreconditions": [{"name": "x", "expression": ""}], "validate": {"cel": {"expressions": [{"expression": "true"}]}}}),
     "celPreconditions[0].expression must be a non-empty string"),
    (validating_policy([{"expression": "object.?"}]), "ValidatingPolicy vp: spec.validations[0].expression: syntax error"),
    # names and functions are checked as Kubernetes' compiler checks them
    (policy({"validate": {"cel": {"expressions": [{"expression": "obj.spec.hostNetwork != true"}]}}}),
     "validate.cel.expressions[0].expression: undeclared reference to 'obj' at line 1, column 1"),
    (policy({"validate": {"cel": {"expressions": [{"expression": "object.spec.containers.all(c, c.image.endswith(':1'))"}]}}}),
     "undeclared reference to 'endswith'"),
    (validating_policy([{"expression": "time.now() > timestamp('2020-01-01T00:00:00Z')"}]),
     "the CEL function now() is not supported by this engine"),
])
def test_a_policy_whose_cel_does_not_compile_is_refused_with_where(doc: dict[str, Any], where: str) -> None:
    # Kyverno refuses such a policy when it is applied; evaluating it would fail every resource
    with pytest.raises(PolicyError, match=re.escape(where)):
        load_policy(doc)
