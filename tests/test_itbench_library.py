"""The ITBench library importer: both layouts, flattening, unsupported scenarios with their reason,
ground-truth discrepancies, derived ground truth, the on-disk alert decision, registration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED, fresh_cache
from itbench_gym.runner.store import ResultStore
from itbench_gym.spec.itbench import REMOVE_FAULTS, import_library, open_library, runnable_kubectl, with_triggering, without_unshown
from itbench_gym.spec.loader import spec_from_document

LIBRARY = SHARED / "itbench"
needs_library = pytest.mark.skipif(not (LIBRARY / "scenarios").is_dir(), reason="../shared/itbench is not present")


@pytest.fixture(scope="module")
def imported() -> dict[str, Any]:
    return {s.id: s for s in import_library(LIBRARY)}


@needs_library
def test_every_index_is_imported_or_says_why(imported: dict[str, Any]) -> None:
    assert len(imported) == len(list((LIBRARY / "scenarios").glob("*.json")))
    for scenario in imported.values():
        assert scenario.invalid is None, scenario.id
        assert (scenario.document is None) == (scenario.unsupported is not None), scenario.id
    reasons = {s.unsupported for s in imported.values() if s.unsupported}
    assert all(r.startswith("not yet supported: ") for r in reasons)


@needs_library
def test_finops_indexes_import_as_finops_scenarios(imported: dict[str, Any]) -> None:
    """ITBench 37 injects nothing (a healthy system whose cost is reviewed: the right fix is no change);
    38 lowers three autoscalers, and its v2 ground truth names the index's own targets (its v1 file names
    others), each Deployment aliased with its autoscaler."""
    control, autoscalers = imported["ITBench-37-v0"], imported["ITBench-38-v0"]
    for scenario in (control, autoscalers):
        doc = scenario.document
        assert scenario.domain == "finops" and doc["metadata"]["domain"] == "finops"
        assert doc["environment"]["tools"] == {"finops": {"enabled": True}}
        assert doc["environment"]["autoscaling"] == {"kubernetes": {"hpa": True}}
    assert control.document["faults"] == [] and control.alerts_from == "none"
    assert control.document["metadata"]["class"] == "HealthyControl"
    assert [g["kind"] for g in control.document["ground_truth"]["groups"] if g.get("root_cause")] == ["Namespace"]
    assert autoscalers.alerts_from == "index" and autoscalers.ground_truth_from == "v2"
    gt = autoscalers.document["ground_truth"]
    assert {(g["kind"], g["name"]) for g in gt["groups"] if g.get("root_cause")} == {
        ("Deployment", "fraud-detection"), ("Deployment", "frontend"), ("Deployment", "image-provider")}
    assert ["frontend-deployment-1", "frontend-horizontalpodautoscaler-1"] in gt["aliases"]
    assert any("38_groundtruth_v1.yaml: not used" in d for d in autoscalers.discrepancies)


@needs_library
def test_disruptions_flatten_waiters_around_injections(imported: dict[str, Any]) -> None:
    twelve = [f["id"] for f in imported["ITBench-12-v0"].document["faults"]]
    assert twelve == ["opentelemetry-demo-feature-flag"] * 2 + ["restart-kubernetes-workload"] * 3
    eighty = [f["id"] for f in imported["ITBench-80-v0"].document["faults"]]
    assert eighty == ["scale-kubernetes-workload", "scheduled-chaos-mesh-experiment"]


@needs_library
def test_v1_ground_truth_follows_the_index(imported: dict[str, Any]) -> None:
    """Scenario 18's v1 file names a PodChaos as root cause; the index injected the Schedule."""
    doc, notes = with_triggering(imported["ITBench-18-v0"], [])
    roots = [g for g in doc["ground_truth"]["groups"] if g.get("root_cause")]
    assert [(g["kind"], g["name"]) for g in roots] == [("Schedule", "otel-demo-product-catalog-network-delay")]
    assert any("is none of the index's injected objects" in n for n in notes)
    assert imported["ITBench-18-v0"].ground_truth_from == "v1"


@needs_library
def test_targets_without_symptom_are_dropped_but_never_the_root_cause(imported: dict[str, Any]) -> None:
    """What the twin run found unshown leaves the ground truth with its propagations, each noted."""
    doc, notes = with_triggering(imported["ITBench-20-v0"], [])
    gt = doc["ground_truth"]
    root = next(g["id"] for g in gt["groups"] if g.get("root_cause"))
    target = next(p["target"] for p in gt["propagations"] if p["target"] != root)
    kept, kept_notes = without_unshown(doc, [root, target], notes)
    ids = {g["id"] for g in kept["ground_truth"]["groups"]}
    assert root in ids and target not in ids
    assert all(target not in (p["source"], p["target"]) for p in kept["ground_truth"]["propagations"])
    assert any(f"{target!r}" in n and "shows no symptom on the twin" in n for n in kept_notes[len(notes):])
    spec_from_document(kept, imported["ITBench-20-v0"].source)  # still a valid scenario
    assert without_unshown(doc, [], notes) == (doc, notes)


@needs_library
def test_index_alerts_or_twin(imported: dict[str, Any]) -> None:
    assert imported["ITBench-12-v0"].alerts_from == "twin"
    mitigations = imported["ITBench-12-v0"].document["mitigations"]
    assert [m["id"] for m in mitigations] == [REMOVE_FAULTS, "itbench-solution-1"]
    assert mitigations[0]["revert_faults"] and "commands" not in mitigations[0]
    assert "commands" not in mitigations[1]  # `kubectl edit` is not something the agent's kubectl runs
    assert runnable_kubectl("kubectl -n otel-demo rollout restart deployment")
    assert not runnable_kubectl("kubectl -n otel-demo edit configmap flagd-config")


@needs_library
def test_a_fault_outside_the_agents_grant_is_fixed_by_its_workaround_first(imported: dict[str, Any]) -> None:
    """ITBench 48 relabels the Namespace, which the agent may not patch: the oracle's route is the
    definition's workaround (pod labels), resolved for the scenario's namespace, before the removal."""
    mitigations = imported["ITBench-48-v0"].document["mitigations"]
    assert [m["id"] for m in mitigations][:2] == ["enroll-pods", REMOVE_FAULTS]
    assert mitigations[0]["commands"] == ["kubectl label pods --all istio.io/dataplane-mode=ambient --overwrite -n book-info"]
    assert all(runnable_kubectl(c) for c in mitigations[0]["commands"])


@needs_library
def test_repository_layout(tmp_path: Path) -> None:
    """ITBench's repository keeps indexes, ground truths and schemas elsewhere: same result."""
    indexes = tmp_path / "scenarios/sre/library/indexes/scenarios"
    indexes.mkdir(parents=True)
    for n in ("12", "18"):
        shutil.copy(LIBRARY / "scenarios" / f"{n}.json", indexes)
        where = tmp_path / f"scenarios/sre/project/roles/scenarios/files/scenario_{n}"
        where.mkdir(parents=True)
        shutil.copy(LIBRARY / "groundtruth" / f"{n}_groundtruth_v1.yaml", where / "groundtruth_v1.yaml")
    shutil.copytree(LIBRARY / "schemas", tmp_path / "schemas/json")
    library = open_library(tmp_path)
    assert library.schemas == tmp_path / "schemas/json"
    theirs = {s.id: s for s in import_library(tmp_path)}
    ours = {s.id: s for s in import_library(LIBRARY) if s.id in theirs}
    assert {k: v.document for k, v in theirs.items()} == {k: v.document for k, v in ours.items()}


def _foreign_index(**changes: Any) -> dict[str, Any]:
    """An index someone else wrote: ITBench's format, a flag on another service, no ground truth."""
    index: dict[str, Any] = {
        "id": 900, "category": "sre", "complexity": "low", "description": "The ad service fails a tenth of its calls.",
        "alerts": ["HighRequestErrorRate"],
        "environment": {"applications": [{"id": "opentelemetry-demo"}]},
        "disruptions": [{"injections": [{"id": "opentelemetry-demo-feature-flag", "args": {
            "flag": {"name": "adFailure", "state": "on"},
            "kubernetesObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flagd-config", "namespace": "otel-demo"}}}}],
            "waitFor": {"postInjection": [{"id": "restart-kubernetes-workload", "args": {"kubernetesObject": {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "flagd", "namespace": "otel-demo"}}}}]}}],
    }
    index.update(changes)
    return index


def test_foreign_index_gets_a_derived_ground_truth(tmp_path: Path) -> None:
    (tmp_path / "900.json").write_text(json.dumps(_foreign_index()))
    [scenario] = import_library(tmp_path)
    assert scenario.id == "ITBench-900-v0" and scenario.unsupported is None and scenario.alerts_from == "index"
    doc, _ = with_triggering(scenario, [{"alertname": "HighRequestErrorRate", "labels": {"service_name": "frontend"}}])
    spec = spec_from_document(doc, tmp_path / "900.json")
    gt = spec.ground_truth
    assert [(g["kind"], g["name"]) for g in gt["groups"] if g.get("root_cause")] == [("ConfigMap", "flagd-config")]
    edges = {(p["source"], p["target"]) for p in gt["propagations"]}
    assert ("configmap-flagd-config-0", "flagd-service") in edges  # flagd mounts the ConfigMap
    assert spec.cls == "AdFailure" and spec.complexity.level == "easy"


def test_derived_ground_truth_names_the_services_that_front_a_workload(tmp_path: Path) -> None:
    """Bookinfo's ``details`` runs in Deployment ``details-v1`` and ``reviews-v2``'s pods sit behind Services
    ``reviews`` and ``reviews-v2``: the derived groups name those Services and the workloads' pods, and
    nothing the app lacks has to be dropped."""
    def fault(name: str) -> dict[str, Any]:
        return {"id": "nonexistent-kubernetes-workload-container-image", "args": {
            "container": {"name": name.rsplit("-", 1)[0]},
            "kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "book-info"}}}}
    index = _foreign_index(id=903, alerts=["KubePodNotReady"], environment={"applications": [{"id": "book-info"}]},
                           disruptions=[{"injections": [fault("details-v1"), fault("reviews-v2")]}])
    (tmp_path / "903.json").write_text(json.dumps(index))
    [scenario] = import_library(tmp_path)
    doc, notes = with_triggering(scenario, [{"alertname": "KubePodNotReady", "labels": {"namespace": "book-info"}}])
    assert notes == []
    groups = {g["id"]: g for g in doc["ground_truth"]["groups"]}
    assert groups["details-service"]["filter"] == [r"details\b"] and groups["details-pod"]["filter"] == [r"details\-v1-.*"]
    assert groups["reviews-v2-service"]["filter"] == [r"reviews\b", r"reviews\-v2\b"]
    assert groups["reviews-v2-pod"]["filter"] == [r"reviews\-v2-.*"]
    assert ["details-service", "details-pod"] in doc["ground_truth"]["aliases"]


def test_unsupported_and_invalid_indexes_say_why(tmp_path: Path) -> None:
    (tmp_path / "901.json").write_text(json.dumps(_foreign_index(id=901, environment={"applications": [{"id": "hotel"}]})))
    bad = _foreign_index(id=902)
    bad["disruptions"][0]["injections"][0]["id"] = "no-such-fault"
    (tmp_path / "902.json").write_text(json.dumps(bad))
    (tmp_path / "903.json").write_text("{not json")

    def env_fault(n: int, workload: str, variable: str) -> None:
        """ITBench's environment-variable fault moved to another workload (a variant of its scenario 16)."""
        target = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": workload, "namespace": "otel-demo"}}
        index = _foreign_index(id=n)
        index["disruptions"][0]["injections"] = [{"id": "modified-kubernetes-workload-container-environment-variable", "args": {
            "kubernetesObject": target, "container": {"name": workload, "env": {"name": variable, "value": "localhost:1"}}}}]
        (tmp_path / f"{n}.json").write_text(json.dumps(index))

    env_fault(904, "cart", "QUOTE_ADDR")
    env_fault(905, "kart", "QUOTE_ADDR")
    env_fault(906, "checkout", "CART_ADDR")
    port_fault = _foreign_index(id=908)
    port_fault["disruptions"][0]["injections"] = [{"id": "modified-target-port-kubernetes-service", "args": {
        "kubernetesObject": {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "product-reviews", "namespace": "otel-demo"}},
        "targetPort": 8080}}]  # ITBench 30's change, on a Service that forwards elsewhere
    (tmp_path / "908.json").write_text(json.dumps(port_fault))
    bandwidth = _foreign_index(id=909)  # ITBench 18's Schedule shape with an experiment the twin cannot carry out
    bandwidth["disruptions"][0]["injections"] = [{"id": "scheduled-chaos-mesh-experiment", "args": {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": "slow", "namespace": "chaos-mesh"}},
        "scheduleSpec": {"type": "NetworkChaos", "networkChaos": {"action": "bandwidth", "bandwidth": {"rate": "1kbps", "limit": 100, "buffer": 100},
                                                                  "mode": "all", "selector": {"labelSelectors": {"app.kubernetes.io/component": "cart"}}}}}}]
    (tmp_path / "909.json").write_text(json.dumps(bandwidth))
    by_host = _foreign_index(id=910)  # Chaos Mesh's "specify side": a Host header the app model does not carry
    by_host["disruptions"][0]["injections"] = [{"id": "scheduled-chaos-mesh-experiment", "args": {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": "abort", "namespace": "chaos-mesh"}},
        "scheduleSpec": {"type": "HTTPChaos", "httpChaos": {"target": "Request", "port": 8080, "abort": True, "request_headers": {"Host": "cart"},
                                                            "mode": "all", "selector": {"labelSelectors": {"app.kubernetes.io/component": "frontend"}}}}}}]
    (tmp_path / "910.json").write_text(json.dumps(by_host))
    reasons = {s.id: s.unsupported or s.invalid for s in import_library(tmp_path)}
    assert reasons["ITBench-901-v0"] == "not yet supported: ITBench application 'hotel' has no environment here"
    assert reasons["ITBench-902-v0"] == "not yet supported: fault type no-such-fault is not in the catalogue"
    assert reasons["ITBench-903-v0"].startswith("invalid index file: ")
    assert reasons["ITBench-904-v0"] == (
        "invalid index: faults[0].args.container.env.name: container 'cart' of Deployment otel-demo/cart has no env var "
        "'QUOTE_ADDR' to modify; its env: OTEL_SERVICE_NAME, OTEL_COLLECTOR_NAME, OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, "
        "CART_PORT, ASPNETCORE_URLS, VALKEY_ADDR, FLAGD_HOST, FLAGD_PORT, OTEL_EXPORTER_OTLP_ENDPOINT")
    assert reasons["ITBench-905-v0"].startswith("invalid index: faults[0].args.kubernetesObject.metadata.name: no Deployment 'kart' "
                                                "in namespace 'otel-demo' of app 'astronomy-shop'; did you mean 'cart'?")
    assert reasons["ITBench-906-v0"] is None  # checkout sets CART_ADDR once: the fault applies
    assert reasons["ITBench-909-v0"] == (
        "not yet supported: faults[0] (scheduled-chaos-mesh-experiment) args.scheduleSpec.networkChaos.action: 'bandwidth' is not one of "
        "['netem', 'delay', 'loss', 'duplicate', 'corrupt', 'partition']: a bandwidth limit is not modelled (the app model has no message sizes)")
    assert reasons["ITBench-910-v0"] == (
        "not yet supported: faults[0] (scheduled-chaos-mesh-experiment) args.scheduleSpec.httpChaos.request_headers: "
        "selecting requests by their headers is not modelled (the app model does not carry each request's headers)")
    assert reasons["ITBench-908-v0"] == ("invalid index: faults[0].args.targetPort: Service otel-demo/product-reviews has no port "
                                         "with targetPort 8080; its target ports: 3551")


def test_autoscaler_faults_need_an_autoscaler_of_their_workload(tmp_path: Path) -> None:
    """ITBench's autoscaler fault on a workload without a HorizontalPodAutoscaler is invalid at import,
    naming why: the install option is off, or the app's autoscalers leave the workload out; an
    autoscaled workload imports."""
    def hpa_fault(n: int, workload: str, hpa: bool) -> None:
        app: dict[str, Any] = {"id": "opentelemetry-demo", **({"args": {"autoscaling": {"kubernetes": {"hpa": True}}}} if hpa else {})}
        index = _foreign_index(id=n, environment={"applications": [app]}, disruptions=[{"injections": [{
            "id": "misconfigured-kubernetes-horizontal-pod-autoscaler",
            "args": {"kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": workload, "namespace": "otel-demo"}}}}]}])
        (tmp_path / f"{n}.json").write_text(json.dumps(index))

    hpa_fault(910, "frontend", hpa=True)
    hpa_fault(911, "frontend", hpa=False)
    hpa_fault(912, "load-generator", hpa=True)
    reasons = {s.id: s.unsupported or s.invalid for s in import_library(tmp_path)}
    assert reasons["ITBench-910-v0"] is None
    assert reasons["ITBench-911-v0"] == (
        "invalid index: faults[0].args.kubernetesObject: no HorizontalPodAutoscaler targets Deployment otel-demo/frontend; "
        "the app's autoscalers come with the install option autoscaling.kubernetes.hpa (environment.autoscaling of a "
        "scenario, ITBench's application args), which is not set")
    assert reasons["ITBench-912-v0"].startswith(
        "invalid index: faults[0].args.kubernetesObject: no HorizontalPodAutoscaler targets Deployment otel-demo/load-generator; "
        "envs/astronomy-shop/autoscaling.yaml leaves it out; Deployments with one: accounting, ad, cart, ")


@needs_library
def test_arguments_are_checked_against_itbench_schema(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "groundtruth").mkdir()
    shutil.copytree(LIBRARY / "schemas", tmp_path / "schemas")
    index = _foreign_index()
    index["disruptions"][0]["injections"][0]["args"]["flag"]["state"] = 5
    (tmp_path / "scenarios" / "900.json").write_text(json.dumps(index))
    [scenario] = import_library(tmp_path)
    assert scenario.invalid is not None and "breaks ITBench's own schema: args.flag.state" in scenario.invalid


@needs_library
def test_application_options_become_the_scenarios_environment(tmp_path: Path) -> None:
    """ITBench's application ``args`` (its ``schemas/applications``) set the twin's options; one it cannot
    honour is named, and one that breaks ITBench's schema says where."""
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "groundtruth").mkdir()
    shutil.copytree(LIBRARY / "schemas", tmp_path / "schemas")

    def app(n: int, args: dict[str, Any]) -> None:
        index = _foreign_index(id=n, environment={"applications": [{"id": "opentelemetry-demo", "args": args}]})
        (tmp_path / "scenarios" / f"{n}.json").write_text(json.dumps(index))

    app(900, {"autoscaling": {"kubernetes": {"hpa": True}}, "loadGeneration": {"users": 20, "userSpawnRate": 2}})
    app(901, {"loadGeneration": {"browserTraffic": True}})
    app(902, {"loadGeneration": {"users": "many"}})
    app(903, {"tracing": {"sampling": 0.5}})
    found = {s.id: s for s in import_library(tmp_path)}
    environment = found["ITBench-900-v0"].document["environment"]
    assert environment["autoscaling"] == {"kubernetes": {"hpa": True}}
    assert environment["load"] == {"users": 20, "spawn_rate": 2}
    spec = spec_from_document(with_triggering(found["ITBench-900-v0"], [{"alertname": "HighRequestErrorRate"}])[0],
                              tmp_path / "scenarios" / "900.json")
    assert spec.hpa and spec.load.users == 20
    assert found["ITBench-901-v0"].document["environment"]["load"] == {"browser_traffic": True}
    assert found["ITBench-903-v0"].unsupported == "not yet supported: environment.applications[0].args.tracing"
    assert found["ITBench-902-v0"].invalid is not None
    assert "args break ITBench's own schema" in found["ITBench-902-v0"].invalid and "users" in found["ITBench-902-v0"].invalid


def test_environment_variable_registers_ids(tmp_path: Path) -> None:
    (tmp_path / "900.json").write_text(json.dumps(_foreign_index()))
    (tmp_path / "901.json").write_text(json.dumps(_foreign_index(id=901, category="ciso")))
    code = ("import gymnasium as gym, itbench_gym\n"
            "from itbench_gym.registry import UnsupportedScenarioError\n"
            "print('ITBench-900-NoTraces-v0' in gym.registry, 'ITBench-901-v0' in itbench_gym.scenario_ids())\n"
            "try:\n    itbench_gym.make('ITBench-901-v0')\nexcept UnsupportedScenarioError as exc:\n    print(exc.message)\n")
    env = {**os.environ, "ITBENCH_LIBRARY": str(tmp_path), "ITBENCH_GYM_CACHE": str(fresh_cache(tmp_path / "cache"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.splitlines() == ["True True", "not yet supported: category 'ciso' (the ciso task is not implemented)"]


def test_the_catalogue_lists_a_library_scenario_at_itbench_s_own_level(tmp_path: Path) -> None:
    """`itbench-gym list` runs no twin, so it lists ITBench's level (high: hard) and filters by it."""
    (tmp_path / "900.json").write_text(json.dumps(_foreign_index(complexity="high")))
    [scenario] = import_library(tmp_path)
    assert scenario.summary()["complexity"] == "hard"
    env = {**os.environ, "ITBENCH_LIBRARY": str(tmp_path), "ITBENCH_GYM_CACHE": str(fresh_cache(tmp_path / "cache"))}
    cli = [sys.executable, "-m", "itbench_gym.cli", "list", "--domain", "sre"]
    listed = subprocess.run([*cli, "--complexity", "hard"], env=env, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines() if line.startswith("ITBench-")] == [["ITBench-900-v0", "sre", "hard"]]
    easy = subprocess.run([*cli, "--complexity", "easy"], env=env, capture_output=True, text=True, check=True, timeout=120)
    assert "ITBench-900-v0" not in easy.stdout


@needs_library
def test_a_batch_refuses_a_library_scenario_that_cannot_run_and_goes_on_past_one_that_does_not_settle(tmp_path: Path) -> None:
    """Named, a scenario the import already refuses stops the batch before any episode, saying why; one
    whose alerts never fire on the twin (ITBench 51's HighRequestLatency) is an error episode, and the
    batch plays the next scenario."""
    library = tmp_path / "library"
    library.mkdir()
    shutil.copy(LIBRARY / "scenarios" / "51.json", library)
    (library / "901.json").write_text(json.dumps(_foreign_index(id=901, category="ciso")))
    env = {**os.environ, "ITBENCH_LIBRARY": str(library), "ITBENCH_GYM_CACHE": str(fresh_cache(tmp_path / "cache"))}
    run = [sys.executable, "-m", "itbench_gym.cli", "run", "--agent", "noop"]
    refused = subprocess.run([*run, "--out", str(tmp_path / "refused"), "SRE-CorruptImage-v0", "ITBench-901-v0"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "ITBench-901-v0 cannot run: " in refused.stderr and "the ciso task is not implemented" in refused.stderr
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "played"
    played = subprocess.run([*run, "--out", str(out), "ITBench-51-v0", "SRE-CorruptImage-v0"], env=env, capture_output=True, text=True, timeout=600)
    assert played.returncode == 1, played.stderr  # an error episode: not a clean batch
    with ResultStore.open_existing(out) as store:
        records = {r["scenario"]: r for r in store.results()}
        [(scenario, _, error)] = [(s, run, e) for _, s, run, e in store.errors()]
    assert scenario == "ITBench-51-v0" and "HighRequestLatency never fired on the twin" in error
    assert records["SRE-CorruptImage-v0"]["evaluation"]["passed"] is False


@needs_library
def test_alerts_decided_on_the_twin_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index without alerts: the new paging alerts its faults make fire, cached by content and version."""
    from itbench_gym.validate import triggering

    monkeypatch.setenv("ITBENCH_GYM_CACHE", str(fresh_cache(tmp_path / "cache")))
    [scenario] = [s for s in import_library(LIBRARY) if s.id == "ITBench-4-v0"]
    alerts = triggering.decided_alerts(scenario)
    assert alerts and all(a["labels"].get("namespace") == "otel-demo" for a in alerts)
    assert {a["alertname"] for a in alerts} <= {"HighRequestErrorRate", "HighRequestLatency"}

    def no_twin(_: Any) -> Any:
        raise AssertionError("decided again")

    monkeypatch.setattr(triggering, "observe_new_alerts", no_twin)
    assert triggering.decided_alerts(scenario) == alerts
    assert triggering.decision_record(scenario)["seed"] == triggering.DECIDING_SEED


def test_index_alerts_that_never_fire_are_replaced_by_what_does_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ITBench 102's expectation (KubePodNotReady for a workload the quota admission gives no pod) and
    an index that adds an alert its fault cannot cause: the scenario stays runnable, and says so."""
    from itbench_gym.validate import triggering

    monkeypatch.setenv("ITBENCH_GYM_CACHE", str(fresh_cache(tmp_path / "cache")))
    quota = _foreign_index(id=903, alerts=["KubePodNotReady"], disruptions=[{"injections": [
        {"id": "insufficient-kubernetes-resource-quota", "args": {"kubernetesObject": {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ad", "namespace": "otel-demo"}}}}]}])
    extra = _foreign_index(id=904, alerts=["HighRequestErrorRate", "KubePodCrashLooping"])
    for index in (quota, extra):
        (tmp_path / f"{index['id']}.json").write_text(json.dumps(index))
    scenarios = {s.id: s for s in import_library(tmp_path)}

    alerts, notes = triggering.index_alerts_checked(scenarios["ITBench-903-v0"], ["KubePodNotReady"])
    assert alerts and {a["alertname"] for a in alerts} <= {"HighRequestErrorRate", "NoRequestsReceived", "KubeQuotaExceeded"}
    assert notes and notes[0].startswith("index: alert(s) KubePodNotReady never fired on the twin")

    alerts, notes = triggering.index_alerts_checked(scenarios["ITBench-904-v0"], ["HighRequestErrorRate", "KubePodCrashLooping"])
    assert alerts == [{"alertname": "HighRequestErrorRate"}]
    assert notes == [notes[0]] and "KubePodCrashLooping never fired with HighRequestErrorRate" in notes[0]

    def no_twin(*_: Any) -> Any:
        raise AssertionError("checked again")

    monkeypatch.setattr(triggering, "_observe", no_twin)
    assert triggering.index_alerts_checked(scenarios["ITBench-904-v0"], ["HighRequestErrorRate", "KubePodCrashLooping"])[0] == alerts


def test_an_injection_that_fails_on_the_twin_makes_the_scenario_invalid_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault whose injection fails while the twin decides the alerts (ITBench's own injection would
    fail there too) is the index's error, reported with the operation's reason."""
    from itbench_gym.faults.catalogue import FaultError
    from itbench_gym.registry import LibraryEntry
    from itbench_gym.spec import SpecError
    from itbench_gym.spec.itbench import open_library
    from itbench_gym.validate import triggering

    monkeypatch.setenv("ITBENCH_GYM_CACHE", str(fresh_cache(tmp_path / "cache")))
    (tmp_path / "907.json").write_text(json.dumps(_foreign_index(id=907, alerts=[])))

    def failing(_: Any) -> Any:
        raise FaultError("Deployment otel-demo/flagd was not available 300 s after the restart")

    monkeypatch.setattr(triggering, "observe_new_alerts", failing)
    entry = LibraryEntry(open_library(tmp_path), tmp_path / "907.json")
    with pytest.raises(SpecError) as err:
        entry.spec()
    assert [(p.path, p.message) for p in err.value.problems] == [
        ("disruptions", "its faults cannot be injected: Deployment otel-demo/flagd was not available 300 s after the restart")]


def test_a_derived_target_that_shows_nothing_on_the_twin_is_dropped_with_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2 s delay on Bookinfo's ratings slows productpage's pages, but ratings shows nothing of its own
    (reviews has no telemetry, ztunnel counts connections, not their latency): as for a v1 file, the
    derived target is dropped with a note and the Schedule stays the root cause."""
    from itbench_gym.registry import LibraryEntry
    from itbench_gym.spec.itbench import open_library

    monkeypatch.setenv("ITBENCH_GYM_CACHE", str(fresh_cache(tmp_path / "cache")))
    delay = {"type": "NetworkChaos", "networkChaos": {
        "action": "delay", "mode": "all", "direction": "to", "duration": "600s", "delay": {"latency": "2s"},
        "selector": {"labelSelectors": {"app": "ratings"}, "namespaces": ["book-info"]}}}
    index = _foreign_index(id=908, alerts=["HighRequestLatency"], environment={"applications": [{"id": "book-info"}]},
                           disruptions=[{"injections": [{"id": "scheduled-chaos-mesh-experiment", "args": {
                               "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
                                                    "metadata": {"name": "ratings-delay", "namespace": "chaos-mesh"}},
                               "scheduleSpec": delay}}]}])
    (tmp_path / "908.json").write_text(json.dumps(index))
    entry = LibraryEntry(open_library(tmp_path), tmp_path / "908.json")
    gt = entry.spec().ground_truth
    assert [(g["kind"], g.get("name")) for g in gt["groups"]] == [("Schedule", "ratings-delay")]
    assert any("'ratings-service' (Service) shows no symptom on the twin; dropped" in n for n in entry.discrepancies)


def test_a_fault_in_the_injection_machinerys_namespace_grades_the_diagnosis_only(tmp_path: Path) -> None:
    """A bad image on Chaos Mesh's own controller: the agent never sees chaos-mesh (by design), so no fix
    is within its reach and the scenario says so, as a Chaos Mesh experiment's does."""
    fault = {"id": "nonexistent-kubernetes-workload-container-image", "args": {
        "container": {"name": "chaos-mesh"},
        "kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment",
                             "metadata": {"name": "chaos-controller-manager", "namespace": "chaos-mesh"}}}}
    (tmp_path / "909.json").write_text(json.dumps(_foreign_index(id=909, disruptions=[{"injections": [fault]}])))
    [scenario] = import_library(tmp_path)
    outcome = scenario.document["desired_outcome"]
    assert "mitigation" not in outcome and "chaos-mesh, the injection machinery's namespace" in outcome["mitigation_not_graded"]
