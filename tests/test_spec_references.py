"""Scenario specs are checked against their app's data: every broken reference names file, field and fix."""

from __future__ import annotations

import copy
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import SHARED
from itbench_gym import cli
from itbench_gym.evaluation.entities import EntityRef
from itbench_gym.evaluation.episode import evaluate_episode
from itbench_gym.evaluation.groundtruth import Group
from itbench_gym.faults.catalogue import FaultDefinition, argument_refs, catalogue
from itbench_gym.paths import specs_dir
from itbench_gym.spec import SpecError, check_document, load_spec
from itbench_gym.spec.loader import domain_files

SPECS = domain_files(specs_dir())
CACHE_FAILURE = specs_dir() / "sre" / "cache-failure.yaml"
#: ITBench's scenario library beside the project (``../shared``); the test that reads it skips without it.
ITBENCH = SHARED / "itbench" / "scenarios"
#: A spec of each ITBench application's app (its namespace and data), to check that app's injections in.
SPEC_OF_APP = {"opentelemetry-demo": CACHE_FAILURE, "book-info": specs_dir() / "sre" / "strict-mutual-tls.yaml"}
Doc = dict[str, Any]


def _doc(path: Path = CACHE_FAILURE) -> Doc:
    return yaml.safe_load(path.read_text())


def _write(tmp_path: Path, doc: Doc, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _problems(tmp_path: Path, mutate: Callable[[Doc], Any], base: Path = CACHE_FAILURE) -> dict[str, str]:
    doc = _doc(base)
    mutate(doc)
    path = _write(tmp_path, doc)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.source == str(path) and str(path) in str(err.value)
    return {p.path: p.message for p in err.value.problems}


def _chaos(experiment: str, body: Doc, namespace: str = "chaos-mesh", name: str = "kill-recommendation") -> Doc:
    """A scheduled Chaos Mesh experiment fault, as ITBench writes it."""
    return {"id": "scheduled-chaos-mesh-experiment", "args": {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
                             "metadata": {"name": name, "namespace": namespace}},
        "scheduleSpec": {"type": experiment, experiment[0].lower() + experiment[1:]: body}}}


def _selector(component: str = "recommendation", namespaces: list[str] | None = None) -> Doc:
    out: Doc = {"labelSelectors": {"app.kubernetes.io/component": component}}
    if namespaces is not None:
        out["namespaces"] = namespaces
    return out


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_every_shipped_spec_passes_every_reference_check(path: Path) -> None:
    assert check_document(_doc(path)) == []


# -- environment ----------------------------------------------------------------------------------


def test_unknown_app(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["environment"].update(app="astronomy-shopp"))
    assert list(problems) == ["environment.app"]
    assert "no app 'astronomy-shopp'" in problems["environment.app"]
    assert "did you mean 'astronomy-shop'?" in problems["environment.app"]


def test_namespace_must_be_the_apps(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["environment"].update(namespace="shop"))
    assert problems == {"environment.namespace": "'shop', but app 'astronomy-shop' runs in namespace 'otel-demo' "
                                                 "(envs/astronomy-shop/app.yaml namespace)"}


# -- fault arguments, by the catalogue's reference types ----------------------------------------------


def test_unknown_workload(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["faults"][2]["args"]["kubernetesObject"]["metadata"].update(name="recomendation"))
    message = problems["faults[2].args.kubernetesObject.metadata.name"]
    assert message.startswith("no Deployment 'recomendation' in namespace 'otel-demo' of app 'astronomy-shop'; "
                              "did you mean 'recommendation'?")


def test_workload_of_another_kind_or_namespace(tmp_path: Path) -> None:
    def mutate(d: Doc) -> None:
        d["faults"][1]["args"]["kubernetesObject"]["kind"] = "StatefulSet"
        d["faults"][2]["args"]["kubernetesObject"]["metadata"]["namespace"] = "otel"

    problems = _problems(tmp_path, mutate)
    assert problems["faults[1].args.kubernetesObject.metadata.name"].startswith("no StatefulSet 'flagd' in namespace 'otel-demo'")
    assert problems["faults[2].args.kubernetesObject.metadata.namespace"].startswith(
        "namespace 'otel' does not exist in app 'astronomy-shop'; did you mean 'otel-demo'?")


def test_target_config_map_must_exist_where_it_is_named(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["faults"][0]["args"]["kubernetesObject"]["metadata"].update(namespace="default"))
    assert problems == {"faults[0].args.kubernetesObject.metadata.name":
                        "no ConfigMap 'flagd-config' in namespace 'default' of app 'astronomy-shop' (there is one in namespace otel-demo)"}


def test_unknown_flag_and_variant(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["faults"][0]["args"]["flag"].update(name="recommendationCacheFailur"))
    assert problems["faults[0].args.flag.name"].startswith(
        "flag 'recommendationCacheFailur' is not defined in ConfigMap otel-demo/flagd-config (demo.flagd.json); "
        "did you mean 'recommendationCacheFailure'?")
    problems = _problems(tmp_path, lambda d: d["faults"][0]["args"]["flag"].update(state="onn"))
    assert problems == {"faults[0].args.flag.state": "flag 'recommendationCacheFailure' has no variant 'onn'; "
                                                     "did you mean 'on'?; variants: off, on"}


def test_an_old_flag_name_points_to_its_current_name(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["faults"][0]["args"]["flag"].update(name="recommendationServiceCacheFailure"))
    assert "'recommendationServiceCacheFailure' is an alias of 'recommendationCacheFailure' (envs/astronomy-shop/app.yaml): " \
           "use 'recommendationCacheFailure'" in problems["faults[0].args.flag.name"]


def test_container_of_the_pods_a_chaos_selector_picks(tmp_path: Path) -> None:
    kill = _chaos("PodChaos", {"action": "container-kill", "mode": "all", "containerNames": ["recommendation", "recommendaton"],
                               "selector": _selector(namespaces=["otel-demo"])})
    problems = _problems(tmp_path, lambda d: d["faults"].append(kill))
    assert problems == {"faults[3].args.scheduleSpec.podChaos.containerNames[1]":
                        "no container 'recommendaton' in the pods the selector picks (Deployment otel-demo/recommendation); "
                        "did you mean 'recommendation'?; containers: recommendation"}


def test_chaos_selector_must_pick_a_pod_of_the_app(tmp_path: Path) -> None:
    typo = _chaos("StressChaos", {"mode": "all", "selector": _selector("recomendation", ["otel-demo"])})
    problems = _problems(tmp_path, lambda d: d["faults"].append(typo))
    assert problems["faults[3].args.scheduleSpec.stressChaos.selector"].startswith(
        "selects no pod of app 'astronomy-shop': no pod in namespace otel-demo has app.kubernetes.io/component='recomendation'; "
        "did you mean 'recommendation'?")
    own_namespace = _chaos("PodChaos", {"action": "pod-kill", "mode": "one", "selector": _selector()})
    problems = _problems(tmp_path, lambda d: d["faults"].append(own_namespace))
    # Chaos Mesh's own pods are the only ones in its namespace
    assert problems["faults[3].args.scheduleSpec.podChaos.selector"].startswith(
        "selects no pod of app 'astronomy-shop': no pod in namespace chaos-mesh has app.kubernetes.io/component='recommendation'")
    nowhere = _chaos("NetworkChaos", {"action": "partition", "mode": "all", "selector": _selector(namespaces=["otel-demo"]),
                                      "target": {"mode": "all", "selector": _selector("quote", ["otel"])}})
    problems = _problems(tmp_path, lambda d: d["faults"].append(nowhere))
    assert list(problems) == ["faults[3].args.scheduleSpec.networkChaos.target.selector.namespaces[0]"]


def test_objects_a_fault_creates_go_into_an_existing_namespace_and_can_be_ground_truth(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["faults"].append(
        _chaos("PodChaos", {"action": "pod-kill", "mode": "one", "selector": _selector(namespaces=["otel-demo"])}, namespace="chaos")))
    assert problems["faults[3].args.kubernetesObject.metadata.namespace"].startswith("namespace 'chaos' does not exist")

    doc = _doc()
    doc["faults"].append(_chaos("PodChaos", {"action": "pod-kill", "mode": "one", "selector": _selector(namespaces=["otel-demo"])}))
    doc["ground_truth"]["groups"] += [
        {"id": "schedule-1", "kind": "Schedule", "namespace": "chaos-mesh", "name": "kill-recommendation"},
        {"id": "podchaos-1", "kind": "PodChaos", "namespace": "chaos-mesh", "filter": ["kill-recommendation-.*"]},
    ]
    assert check_document(doc) == []
    doc["ground_truth"]["groups"][-1]["filter"] = ["kill-recomendation-.*"]
    assert [p.path for p in check_document(doc)] == ["ground_truth.groups[10].filter[0]"]


def test_kubernetes_own_namespaces_are_not_checked_for_pods(tmp_path: Path) -> None:
    doc = _doc()
    doc["faults"].append(_chaos("StressChaos", {"mode": "one", "selector": {"labelSelectors": {"component": "kube-apiserver"},
                                                                            "namespaces": ["kube-system"]}}))
    assert check_document(doc) == []


def test_container_of_a_workload_reference(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ITBench's container faults name a workload and a container in it; the check follows the x-ref."""
    fault = FaultDefinition("kill-container", "test fault", "Test", "none", {
        "type": "object", "required": ["kubernetesObject", "container"],
        "properties": {
            "kubernetesObject": {"type": "object", "x-ref": {"type": "object"}},
            "container": {"type": "object", "properties": {
                "name": {"type": "string", "x-ref": {"type": "container", "workload": "kubernetesObject"}}}},
        },
    })
    known = {**catalogue(), fault.id: fault}
    # The module, not the package attribute of the same name (which is the catalogue() function).
    monkeypatch.setattr(importlib.import_module("itbench_gym.faults.catalogue"), "catalogue", lambda: known)
    monkeypatch.setattr("itbench_gym.spec.references.catalogue", lambda: known)
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cart", "namespace": "otel-demo"}}
    doc = _doc()
    doc["faults"].append({"id": "kill-container", "args": {"kubernetesObject": target, "container": {"name": "cart"}}})
    assert check_document(doc) == []
    doc["faults"][-1]["args"]["container"]["name"] = "kart"
    problems = {p.path: p.message for p in check_document(doc)}
    assert problems == {"faults[3].args.container.name": "no container 'kart' in the pod template of Deployment otel-demo/cart; "
                                                         "did you mean 'cart'?; containers: wait-for-valkey-cart, cart"}
    refs = argument_refs(fault, doc["faults"][-1]["args"])
    assert [(r.path, r.type) for r in refs] == [("args.kubernetesObject", "object"), ("args.container.name", "container")]
    assert refs[1].params["workload"] == target


def test_catalogue_declares_references_for_every_named_thing() -> None:
    """Every argument that names something in the app carries an x-ref: target objects, containers
    of the target workload, flags and their variants, Chaos Mesh selectors."""
    named = {"kubernetesObject": "object", "selector": "pod-selector", "containerNames": "container"}
    missing: list[str] = []

    def visit(schema: Any, where: str) -> None:
        if not isinstance(schema, dict):
            return
        for prop, sub in (schema.get("properties") or {}).items():
            sub = _deref(sub, schema_root)
            if prop in named and (sub.get("x-ref") or {}).get("type") != named[prop]:
                missing.append(f"{where}.{prop}")
            if prop == "container" and "name" in (sub.get("properties") or {}):
                if (sub["properties"]["name"].get("x-ref") or {}).get("type") != "container":
                    missing.append(f"{where}.container.name")
            visit(sub, f"{where}.{prop}")
        for sub in (schema.get("$defs") or {}).values():
            visit(sub, where)

    for fid, definition in catalogue().items():
        schema_root = definition.args_schema
        visit(schema_root, fid)
    assert missing == []
    flag = catalogue()["opentelemetry-demo-feature-flag"]
    assert sorted({r.type for r in argument_refs(flag, _doc()["faults"][0]["args"])}) == ["flag", "flag-variant", "object"]


def _deref(schema: Any, root: Any) -> Any:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if isinstance(ref, str) and ref.startswith("#/"):
        node = root
        for part in ref[2:].split("/"):
            node = node[part]
        return {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


# -- alerts ---------------------------------------------------------------------------------------


def test_unknown_alert(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["alerts"]["triggering"][0].update(alertname="HighRequestErrRate"))
    assert problems["alerts.triggering[0].alertname"].startswith(
        "no alerting rule 'HighRequestErrRate' in envs/astronomy-shop/alert-rules.yaml or the PrometheusRules of its manifests; did you mean 'HighRequestErrorRate'")


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ({"service_name": "frontend", "pod": "frontend-1"}, "its result has no label 'pod'"),
        ({"service_name": "frontend", "severity": "warning"}, "it sets severity='critical'"),
        ({"service_name": "flagd"}, "no series its expression keeps can have service_name='flagd'"),
        ({"namespace": "default"}, "no series its expression keeps can have namespace='default'"),
    ],
)
def test_alert_labels_must_be_producible_by_a_rule(tmp_path: Path, labels: dict[str, str], reason: str) -> None:
    problems = _problems(tmp_path, lambda d: d["alerts"]["triggering"][0].update(labels=labels))
    message = problems["alerts.triggering[0].labels"]
    assert message.startswith("no HighRequestErrorRate rule in envs/astronomy-shop/alert-rules.yaml or the PrometheusRules of its manifests can fire with {")
    assert reason in message and "the rule in group 'opentelemetrydemo.frontend.goldensignal'" in message


def test_labels_another_rule_of_the_same_name_produces_are_valid() -> None:
    doc = _doc()
    doc["alerts"]["triggering"][0]["labels"] = {"service_name": "cart", "namespace": "otel-demo", "severity": "critical"}
    assert check_document(doc) == []  # the backend HighRequestErrorRate rule keeps service_name=cart


# -- ground truth ---------------------------------------------------------------------------------


def test_invalid_regex_is_caught_at_load_without_knock_on_errors(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["ground_truth"]["groups"][1].update(filter=["flagd(\\b"]))
    assert problems == {"ground_truth.groups[1].filter[0]":
                        "invalid regular expression 'flagd(\\\\b' (missing ), unterminated subpattern at position 5)"}


def test_an_invalid_regex_never_raises_at_grading() -> None:
    group = Group(id="g", kind="Pod", filters=("(unclosed", "cart\\-.*"))
    assert group.specificity(EntityRef("cart-7d9c8b6f5c-x2x4z", "Pod")) is not None
    assert group.specificity(EntityRef("payment", "Pod")) is None


@pytest.mark.parametrize(
    ("index", "change", "path", "expected"),
    [
        (3, {"filter": ["recomendation\\b"]}, "ground_truth.groups[3].filter[0]",
         "'recomendation\\\\b' matches no Service in namespace 'otel-demo' of app 'astronomy-shop'; did you mean 'recommendation'?"),
        (2, {"filter": ["flagg-.*"]}, "ground_truth.groups[2].filter[0]",
         "'flagg-.*' matches no Pod in namespace 'otel-demo' of app 'astronomy-shop'; did you mean 'flagd'?; pods of: accounting, ad,"),
        (0, {"name": "flagd-conf"}, "ground_truth.groups[0].name",
         "no ConfigMap in namespace 'otel-demo' named 'flagd-conf' in app 'astronomy-shop'; did you mean 'flagd-config'?"),
        (0, {"kind": "ConfigMapp"}, "ground_truth.groups[0].kind", "unknown kind 'ConfigMapp'; did you mean 'ConfigMap'?"),
        (0, {"namespace": "otel"}, "ground_truth.groups[0].namespace", "namespace 'otel' does not exist in app 'astronomy-shop'"),
        (2, {"kind": "Pod", "name": "flagd-5d4f8b7c9d-x2x4z", "filter": None}, "ground_truth.groups[2].name",
         "no Pod in namespace 'otel-demo' named 'flagd-5d4f8b7c9d-x2x4z'"),
    ],
)
def test_ground_truth_entities_must_name_objects_of_the_app(tmp_path: Path, index: int, change: Doc, path: str, expected: str) -> None:
    def mutate(d: Doc) -> None:
        group = d["ground_truth"]["groups"][index]
        group.update({k: v for k, v in change.items() if v is not None})
        for k in [k for k, v in change.items() if v is None]:
            group.pop(k)

    problems = _problems(tmp_path, mutate)
    assert list(problems) == [path] and problems[path].startswith(expected), problems


def test_pod_names_are_generated_so_the_error_suggests_a_filter(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: (d["ground_truth"]["groups"][2].pop("filter"),
                                              d["ground_truth"]["groups"][2].update(name="flagd-5d4f8b7c9d-x2x4z")))
    assert "pod names are generated, use a filter such as 'flagd-.*'" in problems["ground_truth.groups[2].name"]


def test_telemetry_services_without_a_kubernetes_service_are_valid_entities() -> None:
    doc = _doc()
    doc["ground_truth"]["groups"].append({"id": "accounting-service-1", "kind": "Service", "namespace": "otel-demo",
                                          "filter": ["accounting\\b"]})
    assert check_document(doc) == []
    doc["faults"][2]["args"]["kubernetesObject"] = {"apiVersion": "apps/v1", "kind": "Deployment",
                                                    "metadata": {"name": "accounting", "namespace": "otel-demo"}}
    assert check_document(doc) == []


def test_ground_truth_alert_ids_are_alert_rules(tmp_path: Path) -> None:
    problems = _problems(tmp_path, lambda d: d["ground_truth"]["alerts"][0].update(id="HighErrorRate"))
    assert problems == {"ground_truth.alerts[0].id": "no alerting rule 'HighErrorRate' in envs/astronomy-shop/alert-rules.yaml or the PrometheusRules of its manifests; "
                                                     "did you mean 'HighRequestErrorRate'?"}


def test_every_problem_of_a_file_is_reported_in_document_order(tmp_path: Path) -> None:
    def mutate(d: Doc) -> None:
        d["ground_truth"]["groups"][1]["filter"] = ["(x"]
        d["alerts"]["triggering"][0]["alertname"] = "Nope"
        d["faults"][1]["args"]["kubernetesObject"]["metadata"]["name"] = "flag"
        d["faults"][0]["args"]["flag"]["state"] = "maybe"
        d["environment"]["namespace"] = "otel"

    problems = _problems(tmp_path, mutate)
    assert list(problems) == ["environment.namespace", "faults[0].args.flag.state", "faults[1].args.kubernetesObject.metadata.name",
                              "alerts.triggering[0].alertname", "ground_truth.groups[1].filter[0]"]


# -- the command line -----------------------------------------------------------------------------


def test_validate_reports_every_bad_file_and_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, _doc(), "good.yaml")
    one = _doc()
    one["metadata"]["id"] = "SRE-CacheFailureA-v0"
    one["faults"][2]["args"]["kubernetesObject"]["metadata"]["name"] = "recomendation"
    one["ground_truth"]["groups"][1]["filter"] = ["flagd(\\b"]
    two = _doc()
    two["metadata"]["id"] = "SRE-CacheFailureB-v0"
    two["environment"]["app"] = "hotel"
    three = tmp_path / "three.yaml"
    three.write_text("metadata: [unclosed\n")
    paths = [good, _write(tmp_path, one, "one.yaml"), _write(tmp_path, two, "two.yaml"), three]
    assert cli.main(["validate", "--static", *map(str, paths)]) == 1
    err = capsys.readouterr().err
    assert f"invalid: {paths[1]}: 2 problem(s)" in err
    assert f"  {paths[1]}: faults[2].args.kubernetesObject.metadata.name: no Deployment 'recomendation'" in err
    assert f"  {paths[1]}: ground_truth.groups[1].filter[0]: invalid regular expression" in err
    assert f"  {paths[2]}: environment.app: no app 'hotel'" in err
    assert f"invalid: {three}: 1 problem(s)" in err and "invalid YAML: line 2" in err
    assert "3 of 4 scenario spec file(s) invalid" in err
    assert str(good) not in err and "Traceback" not in err


def test_validate_accepts_good_files_and_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", "--static"]) == 0
    assert capsys.readouterr().out == f"{len(SPECS)} scenario spec(s) valid\n"
    other = _doc()
    other["metadata"]["id"] = "SRE-CacheFailureCopy-v0"
    (tmp_path / "sre").mkdir()
    _write(tmp_path / "sre", _doc(), "a.yaml")
    _write(tmp_path / "sre", other, "b.yaml")
    assert cli.main(["validate", "--static", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "2 scenario spec(s) valid\n"


def test_validate_reports_duplicate_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _write(tmp_path, _doc(), "a.yaml"), _write(tmp_path, _doc(), "b.yaml")
    assert cli.main(["validate", "--static", str(a), str(b)]) == 1
    assert f"{b}: metadata.id: duplicate id 'SRE-CacheFailure-v0', also in {a}" in capsys.readouterr().err


def test_evaluation_of_a_loaded_spec_never_sees_an_invalid_regex(tmp_path: Path) -> None:
    """What reached grading before (an invalid filter raising out of ``step(submit)``) now stops at load."""
    doc = _doc()
    doc["ground_truth"]["groups"][4]["filter"] = ["recommendation-(.*"]
    with pytest.raises(SpecError, match=r"ground_truth\.groups\[4\]\.filter\[0\]: invalid regular expression"):
        load_spec(_write(tmp_path, doc))
    spec = load_spec(CACHE_FAILURE)
    for report in ({"entities": [{"id": "(", "root_cause": True}]}, "```json\n{]\n```", None, {"entities": [{"id": "*" * 5000}]}):
        ev = evaluate_episode(spec=spec, report=report, report_error=None, mitigation=None, submitted_at=None,
                              incident_start=0.0, commands=[])
        json.dumps(ev.to_dict(), allow_nan=False)


# -- ITBench's own scenarios ------------------------------------------------------------------------


@pytest.mark.skipif(not ITBENCH.is_dir(), reason=f"ITBench reference data not present at {ITBENCH} (../shared beside the project)")
def test_every_itbench_injection_of_a_catalogued_fault_passes_the_reference_checks() -> None:
    """No false alarms: ITBench's injections (flags, restarts, chaos schedules) all refer to real things,
    the app installed with the index's options (its autoscalers)."""
    known = catalogue()
    checked = 0
    for file in sorted(ITBENCH.glob("*.json")):
        scenario = json.loads(file.read_text())
        app = scenario["environment"]["applications"][0]["id"]
        autoscaling = (scenario["environment"]["applications"][0].get("args") or {}).get("autoscaling")
        for disruption in scenario.get("disruptions", []):
            wait = disruption.get("waitFor") or {}
            for fault in [*disruption.get("injections", []), *wait.get("preInjection", []), *wait.get("postInjection", [])]:
                if fault.get("id") not in known:
                    continue
                doc = _doc(SPEC_OF_APP[app])
                doc["faults"] = [copy.deepcopy(fault)]
                if autoscaling:
                    doc["environment"]["autoscaling"] = autoscaling
                assert [str(p) for p in check_document(doc)] == [], file.name
                checked += 1
    assert checked >= 40


# -- odds and ends --------------------------------------------------------------------------------


def test_expression_selectors_and_kubernetes_namespaces_are_understood() -> None:
    doc = _doc()
    doc["faults"].append(_chaos("PodChaos", {"action": "pod-kill", "mode": "one", "selector": {
        "namespaces": ["otel-demo"],
        "expressionSelectors": [{"key": "app.kubernetes.io/component", "operator": "In", "values": ["cart", "quote"]}]}}))
    doc["ground_truth"]["groups"].append({"id": "ns-1", "kind": "Namespace", "name": "kube-system"})
    assert check_document(doc) == []
    doc["faults"][-1]["args"]["scheduleSpec"]["podChaos"]["selector"]["expressionSelectors"][0]["values"] = ["kart"]
    assert [p.path for p in check_document(doc)] == ["faults[3].args.scheduleSpec.podChaos.selector"]
    doc["faults"][-1]["args"]["scheduleSpec"]["podChaos"]["selector"]["expressionSelectors"][0]["operator"] = "Like"
    assert [p.path for p in check_document(doc)] == ["faults[3].args.scheduleSpec.podChaos.selector.expressionSelectors[0].operator"]


def test_a_spec_error_keeps_every_problem_across_processes(tmp_path: Path) -> None:
    import pickle

    doc = _doc()
    doc["environment"]["namespace"] = "otel"
    doc["alerts"]["triggering"][0]["alertname"] = "Nope"
    with pytest.raises(SpecError) as err:
        load_spec(_write(tmp_path, doc))
    copy_ = pickle.loads(pickle.dumps(err.value))
    assert copy_.problems == err.value.problems and len(copy_.problems) == 2 and str(copy_) == str(err.value)


def test_a_reference_type_the_validator_does_not_know_is_a_catalogue_error() -> None:
    from itbench_gym.faults.catalogue import CatalogueError, check_declarations

    typo = FaultDefinition("x", "d", "c", "op", {"type": "object", "properties": {"w": {"x-ref": {"type": "workloadd"}}}})
    with pytest.raises(CatalogueError, match=r"faults\.x\.args\.properties\.w\.x-ref: unknown type 'workloadd'"):
        check_declarations(typo)
    missing = FaultDefinition("x", "d", "c", "op", {"properties": {"f": {"x-ref": {"type": "flag"}}}})
    with pytest.raises(CatalogueError, match=r"missing \['config_map'\]"):
        check_declarations(missing)
