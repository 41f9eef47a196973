"""Relocating a scenario, its app's manifests and its alert rules to other namespaces (parallel episodes)."""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from itbench_gym.backends.sim.app.model import load_manifests
from itbench_gym.backends.sim.app.spec import load_spec
from itbench_gym.backends.sim.promql.parsing import native_parse
from itbench_gym.backends.sim.twin import APP_RULES, app_rule_objects
from itbench_gym.paths import envs_dir
from itbench_gym.spec import ScenarioSpec, load_all_specs
from itbench_gym.spec.relocate import relocate_objects, relocate_rules, relocate_spec
from itbench_gym.tools.kubectl_argv import parse_kubectl_argv

SPECS = {spec.id: spec for spec in load_all_specs()}
APPS = {"astronomy-shop": "otel-demo", "book-info": "book-info"}


def _moved(namespace: str) -> dict[str, str]:
    return {namespace: f"{namespace}-w1"}


def _strings(value: Any) -> Iterator[str]:
    """Every string in YAML-shaped data, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def _names_as_namespace(text: str, namespace: str) -> bool:
    """Whether ``text`` is the namespace, or refers to it as ``<ns>/<name>``."""
    return text == namespace or re.search(rf"(?<![\w./-]){re.escape(namespace)}/\w", text) is not None


def _kubectl_namespace(command: str) -> str | None:
    """The namespace kubectl reads from a command line, by the project's kubectl grammar."""
    argv = shlex.split(command)
    flags = dict(parse_kubectl_argv(argv[1:]).flags)
    return flags.get("namespace")


# Scenarios ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec_id", sorted(SPECS))
def test_relocated_scenario_names_only_the_new_namespace(spec_id: str) -> None:
    spec = SPECS[spec_id]
    old, new = spec.namespace, f"{spec.namespace}-w1"
    moved = relocate_spec(spec, {old: new})
    assert moved.id == spec.id and moved.namespace == new
    parts = {
        "faults": [dict(f.args) for f in moved.faults],
        "ground_truth": moved.ground_truth,
        "alerts": [dict(a.labels) for a in moved.triggering_alerts],
        "commands": [c for m in moved.mitigations for c in m.get("commands", [])],
    }
    for part, data in parts.items():
        stale = [s for s in _strings(data) if _names_as_namespace(s, old)]
        assert not stale, f"{part} still names {old}: {stale}"
    for matcher, original in zip(moved.triggering_alerts, spec.triggering_alerts, strict=True):
        if "namespace" in original.labels:
            assert matcher.labels["namespace"] == new
    for command in parts["commands"]:
        if command.startswith("kubectl"):
            assert _kubectl_namespace(command) == new, command


@pytest.mark.parametrize("spec_id", sorted(SPECS))
def test_relocating_back_restores_the_scenario_and_leaves_the_input_alone(spec_id: str) -> None:
    spec = SPECS[spec_id]
    before = copy.deepcopy(spec)
    mapping = _moved(spec.namespace)
    moved = relocate_spec(spec, mapping)
    assert relocate_spec(moved, {new: old for old, new in mapping.items()}) == spec
    assert spec == before  # its mappings are shared with the registry's copy


def test_namespaces_outside_the_mapping_stay() -> None:
    spec = SPECS["SRE-NetworkDelay-v0"]
    moved = relocate_spec(spec, _moved("otel-demo"))
    schedule = moved.faults[0].args
    assert schedule["kubernetesObject"]["metadata"]["namespace"] == "chaos-mesh"
    assert schedule["scheduleSpec"]["networkChaos"]["selector"]["namespaces"] == ["otel-demo-w1"]


def test_a_namespace_object_is_renamed_in_faults_and_ground_truth() -> None:
    spec = SPECS["SRE-AmbientModeDisabled-v0"]
    moved = relocate_spec(spec, _moved("book-info"))
    assert moved.faults[0].args["kubernetesObject"]["metadata"]["name"] == "book-info-w1"
    root = next(g for g in moved.ground_truth["groups"] if g.get("root_cause"))
    assert (root["kind"], root["name"], root["namespace"]) == ("Namespace", "book-info-w1", "book-info-w1")
    assert moved.ground_truth["fault"][0]["entity"]["name"] == "book-info-w1"


def test_prose_references_move_but_names_containing_the_namespace_do_not() -> None:
    cache = relocate_spec(SPECS["SRE-CacheFailure-v0"], _moved("otel-demo"))
    assert "ConfigMap otel-demo-w1/flagd-config" in cache.desired_outcome["diagnosis"]
    assert "ConfigMap otel-demo-w1/flagd-config" in cache.mitigations[0]["description"]
    pod_fault = SPECS["SRE-PodFault-v0"]
    moved = relocate_spec(pod_fault, _moved("otel-demo"))
    assert moved.ground_truth["recommended_actions"] == pod_fault.ground_truth["recommended_actions"]
    assert "chaos-mesh/otel-demo-product-catalog-network-delay" in str(moved.ground_truth["recommended_actions"])


@pytest.mark.parametrize(
    ("command", "relocated"),
    [
        ("kubectl -n otel-demo get pods", "kubectl -n otel-demo-w1 get pods"),
        ("kubectl get pods --namespace otel-demo", "kubectl get pods --namespace otel-demo-w1"),
        ("kubectl get pods --namespace=otel-demo", "kubectl get pods --namespace=otel-demo-w1"),
        ("kubectl get pods -notel-demo", "kubectl get pods -notel-demo-w1"),
        ("kubectl label namespace otel-demo team=a", "kubectl label namespace otel-demo-w1 team=a"),
        ("kubectl get ns/otel-demo", "kubectl get ns/otel-demo-w1"),
        # A ServiceAccount named like the namespace is not the namespace; TYPE/NAME is not ns/name.
        ("kubectl -n otel-demo get serviceaccount otel-demo", "kubectl -n otel-demo-w1 get serviceaccount otel-demo"),
        ("kubectl get configmap otel-demo/flagd-config", "kubectl get configmap otel-demo/flagd-config"),
        ("kubectl -n kube-system get pods", "kubectl -n kube-system get pods"),
        ("kubectl exec -n otel-demo p -- sh -c 'kubectl -n otel-demo get x'", "kubectl exec -n otel-demo-w1 p -- sh -c 'kubectl -n otel-demo get x'"),
        ("wait 480", "wait 480"),
        ("kubectl apply -f - <<EOF\nkind: ConfigMap\nmetadata: {name: x, namespace: otel-demo}\nEOF",
         "kubectl apply -f - <<EOF\nkind: ConfigMap\nmetadata: {name: x, namespace: otel-demo-w1}\nEOF"),
    ],
)
def test_mitigation_commands_move_what_kubectl_reads_as_a_namespace(command: str, relocated: str) -> None:
    spec = replace(SPECS["SRE-CacheFailure-v0"], mitigations=({"id": "fix", "description": "fix", "commands": [command]},))
    assert relocate_spec(spec, _moved("otel-demo")).mitigations[0]["commands"] == [relocated]


def test_an_untouched_command_keeps_its_quoting() -> None:
    quoted = """kubectl -n kube-system patch deployment x -p "{\\"spec\\": {}}\""""
    spec = replace(SPECS["SRE-CacheFailure-v0"], mitigations=({"id": "fix", "description": "fix", "commands": [quoted]},))
    assert relocate_spec(spec, _moved("otel-demo")).mitigations[0]["commands"] == [quoted]


# Manifests ------------------------------------------------------------------------------------------


def _manifests(app: str) -> list[dict[str, Any]]:
    return load_manifests(load_spec(envs_dir() / app))


@pytest.mark.parametrize("app", sorted(APPS))
def test_manifests_move_to_the_new_namespace(app: str) -> None:
    old = APPS[app]
    new = f"{old}-w1"
    objects = _manifests(app)
    before = copy.deepcopy(objects)
    moved = relocate_objects(objects, {old: new})
    assert objects == before
    assert len(moved) == len(objects)
    for original, obj in zip(objects, moved, strict=True):
        namespace = original["metadata"].get("namespace")
        assert obj["metadata"].get("namespace") == (new if namespace == old else namespace)
        assert obj["kind"] == original["kind"]
    names = {o["metadata"]["name"] for o in moved if o["kind"] == "Namespace"}
    assert new in names and old not in names
    stale = [s for o in moved for s in _strings(o) if re.search(rf"(?<![\w.-])[\w-]+\.{re.escape(old)}(\.svc\b|:|/|$)", s)]
    assert not stale, stale


def test_container_addresses_point_into_the_new_namespace() -> None:
    moved = relocate_objects(_manifests("book-info"), _moved("book-info"))
    containers = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0] for o in moved
                  if o["kind"] == "Deployment" and o["metadata"]["namespace"] == "book-info-w1"}
    assert "book-info-w1.svc.cluster.local" in containers["bookinfo-gateway-istio"]["args"]  # Istio's --domain
    assert "bookinfo-gateway-istio.book-info-w1.svc.cluster.local/productpage" in " ".join(containers["load-generator-product-page"]["args"])


def test_the_collectors_namespace_dimension_follows_and_the_rest_of_its_config_stays() -> None:
    objects = [o for o in _manifests("astronomy-shop") if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "otel-collector"]
    [moved] = relocate_objects(objects, _moved("otel-demo"))
    before, after = objects[0]["data"]["relay"], moved["data"]["relay"]
    assert after == before.replace("- default: otel-demo\n", "- default: otel-demo-w1\n", 1) != before


def test_namespace_selectors_and_role_binding_subjects_move() -> None:
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "otel-demo", "labels": {"kubernetes.io/metadata.name": "otel-demo"}}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "m", "namespace": "prometheus"},
         "spec": {"namespaceSelector": {"matchNames": ["otel-demo", "kube-system"]}}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "otel-demo"},
         "spec": {"ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "otel-demo"},
                                                                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["otel-demo"]}]}}]}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "b"},
         "subjects": [{"kind": "ServiceAccount", "name": "otel-collector", "namespace": "otel-demo"}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "otel-demo"},
         "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "ADDR", "value": "http://cart.otel-demo.svc.cluster.local:8080"},
                                                                           {"name": "POD_NAMESPACE", "value": "otel-demo"}],
                                                        "command": ["run", "--peer=kafka.otel-demo:9092", "--site=shop.otel-demo.example.com"]}]}}}},
    ]
    namespace, monitor, policy, binding, deployment = relocate_objects(objects, _moved("otel-demo"))
    assert namespace["metadata"] == {"name": "otel-demo-w1", "labels": {"kubernetes.io/metadata.name": "otel-demo-w1"}}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["otel-demo-w1", "kube-system"]
    peer = policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]
    assert peer["matchLabels"] == {"kubernetes.io/metadata.name": "otel-demo-w1"}
    assert peer["matchExpressions"][0]["values"] == ["otel-demo-w1"]
    assert binding["subjects"][0]["namespace"] == "otel-demo-w1"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert [e["value"] for e in container["env"]] == ["http://cart.otel-demo-w1.svc.cluster.local:8080", "otel-demo-w1"]
    assert container["command"] == ["run", "--peer=kafka.otel-demo-w1:9092", "--site=shop.otel-demo.example.com"]  # not an in-cluster name


# Alert rules ----------------------------------------------------------------------------------------


def _rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [rule for obj in objects for group in obj["spec"]["groups"] for rule in group["rules"]]


@pytest.mark.parametrize("app", sorted(APPS))
def test_app_rules_select_the_new_namespace(app: str) -> None:
    old = APPS[app]
    new = f"{old}-w1"
    objects = app_rule_objects(envs_dir() / app / APP_RULES)
    before = copy.deepcopy(objects)
    moved = relocate_rules(objects, {old: new})
    assert objects == before
    assert all(obj["metadata"]["namespace"] == new for obj in moved)
    for original, rule in zip(_rules(objects), _rules(moved), strict=True):
        native_parse(rule["expr"])
        assert f'namespace="{old}"' not in rule["expr"]
        assert rule["expr"] == original["expr"].replace(f'namespace="{old}"', f'namespace="{new}"')
        assert f'namespace="{new}"' in rule["expr"]


def _rule_object(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "r", "namespace": "otel-demo"},
            "spec": {"groups": [{"name": "g", "rules": list(rules)}]}}


def test_rule_expressions_change_only_at_namespace_matchers() -> None:
    untouched = "sum by (namespace) (rate(http_requests_total{job=\"otel-demo\"}[5m])) > 0  # otel-demo"
    rules = [
        {"alert": "Other", "expr": untouched},
        {"alert": "Regex", "expr": 'up{namespace=~"otel-demo|kube-system", job!~"otel-demo.*"} == 0'},
        {"alert": "Negative", "expr": "count(up{namespace!='otel-demo'})"},
        {"alert": "Prefix", "expr": 'up{namespace=~"otel-demo.*"}'},
        {"alert": "Labelled", "expr": "vector(1)", "labels": {"namespace": "otel-demo", "severity": "critical"}},
    ]
    moved = {rule["alert"]: rule for rule in _rules(relocate_rules([_rule_object(*rules)], _moved("otel-demo")))}
    assert moved["Other"]["expr"] == untouched
    assert moved["Regex"]["expr"] == 'up{namespace=~"otel-demo-w1|kube-system", job!~"otel-demo.*"} == 0'
    assert moved["Negative"]["expr"] == "count(up{namespace!='otel-demo-w1'})"
    assert moved["Prefix"]["expr"] == 'up{namespace=~"otel-demo.*"}'  # not a name; left for the caller to judge
    assert moved["Labelled"]["labels"] == {"namespace": "otel-demo-w1", "severity": "critical"}


def test_an_invalid_rule_expression_is_named() -> None:
    with pytest.raises(ValueError, match="rule 'Broken'"):
        relocate_rules([_rule_object({"alert": "Broken", "expr": 'up{namespace="otel-demo"'})], _moved("otel-demo"))


def test_only_prometheus_rules_are_rules() -> None:
    with pytest.raises(ValueError, match="ConfigMap 'x' is not a PrometheusRule"):
        relocate_rules([{"kind": "ConfigMap", "metadata": {"name": "x"}}], _moved("otel-demo"))


# Mappings -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"otel-demo": "Otel-Demo"}, "'otel-demo' -> 'Otel-Demo': the target is not a valid namespace name"),
        ({"otel-demo": "otel_demo"}, "'otel-demo' -> 'otel_demo'"),
        ({"otel-demo": "-w1"}, "'otel-demo' -> '-w1'"),
        ({"otel-demo": "w1-"}, "'otel-demo' -> 'w1-'"),
        ({"otel-demo": "otel.demo"}, "'otel-demo' -> 'otel.demo'"),
        ({"otel-demo": ""}, "'otel-demo' -> ''"),
        ({"otel-demo": "x" * 64}, "at most 63 characters"),
        ({"otel-demo": "w1", "book-info": "w1"}, "'book-info' -> 'w1': 'otel-demo' is mapped to 'w1' too"),
    ],
)
def test_bad_mappings_are_refused_with_the_entry(mapping: dict[str, str], message: str) -> None:
    spec: ScenarioSpec = SPECS["SRE-CacheFailure-v0"]
    for relocate in (lambda: relocate_spec(spec, mapping), lambda: relocate_objects([], mapping), lambda: relocate_rules([], mapping)):
        with pytest.raises(ValueError, match=re.escape(message)):
            relocate()


def test_a_63_character_target_and_a_swap_are_fine() -> None:
    spec = SPECS["SRE-CacheFailure-v0"]
    assert relocate_spec(spec, {"otel-demo": "a" * 63}).namespace == "a" * 63
    assert relocate_spec(spec, {"otel-demo": "book-info", "book-info": "otel-demo"}).namespace == "book-info"

