"""The variant generator: templates filled over the app's targets, distinct seeded drafts whose
documents pass the spec checks, ground truth along the call graph, and one variant proven end to end."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

import pytest

from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.clock import SimClock
from itbench_gym.faults.catalogue import catalogue
from itbench_gym.generator.groundtruth import chain
from itbench_gym.generator.templates import load_templates
from itbench_gym.generator.variants import Draft, _Judge, _services_of, draw
from itbench_gym.spec.loader import check_document, load_spec


@pytest.fixture(scope="module")
def judge() -> _Judge:
    return _Judge("astronomy-shop")


def test_templates_cover_the_catalogue_faults_they_name(judge: _Judge) -> None:
    space = judge.space
    by_template = {c.template for c in space.candidates}
    for template in load_templates().faults:
        if template["fault"] in catalogue():
            assert template["id"] in by_template
        else:
            assert any(template["fault"] in note for note in space.skipped)
    flag = next(c for c in space.candidates if c.key == "feature-flag:adFailure=on")
    assert flag.faults[0]["args"]["flag"] == {"name": "adFailure", "state": "on"}
    assert flag.services == ("ad",) and flag.via == "flagd"


def test_service_templates_target_each_workloads_service_and_restore_what_they_change(judge: _Judge) -> None:
    """A Service fault names the model service its selector picks; ``targetPort`` stays an integer;
    the fix puts back the Service's own selector and port."""
    port = next(c for c in judge.space.candidates if c.key == "service-target-port:currency")
    assert port.services == ("currency",) and port.root_cause == {"kind": "Service", "name": "currency"}
    assert port.faults[0]["args"]["targetPort"] == 8080
    assert port.commands == ('kubectl -n otel-demo patch service currency --type=json '
                             '-p \'[{"op": "replace", "path": "/spec/ports/0/targetPort", "value": 8080}]\'',)
    deleted = next(c for c in judge.space.candidates if c.key == "deleted-service:currency")
    assert deleted.commands[0] == "kubectl -n otel-demo create service clusterip currency --tcp=8080:8080"
    assert '"value": {"opentelemetry.io/name": "currency"}' in deleted.commands[1]
    assert not any(c.key.startswith("service-selector:otel-collector") for c in judge.space.candidates)


def test_address_templates_rewrite_each_address_a_container_calls_to_a_closed_port(judge: _Judge) -> None:
    """ITBench 16's and 24's faults are two of the wrong-address candidates: every env var holding a URL
    or host:port of a service the container calls, pointed at port 9999 with its scheme kept; settings
    that are not such an address (connection strings, ports alone) are left out."""
    by_key = {c.key: c for c in judge.space.candidates if c.template == "wrong-address"}
    quote = by_key["wrong-address:shipping/shipping/QUOTE_ADDR"]
    assert quote.faults[0]["args"]["container"] == {"name": "shipping", "env": {"name": "QUOTE_ADDR", "value": "http://quote:9999"}}
    assert quote.services == ("shipping",) and quote.root_cause == {"kind": "Deployment", "name": "shipping"}
    assert quote.condition.endswith("points at http://quote:9999 instead of http://quote:8080")
    assert by_key["wrong-address:checkout/checkout/KAFKA_ADDR"].faults[0]["args"]["container"]["env"]["value"] == "kafka:9999"
    assert not any(key.endswith(("_PORT", "CONNECTION_STRING")) for key in by_key)
    assert all(check_document(judge._document(Draft(0, (c,)), [])) == [] for c in by_key.values())


def test_a_flag_is_fixed_by_replaying_the_journal_and_a_workload_edit_by_its_own_fix(judge: _Judge) -> None:
    """The oracle reverts a flag edit only when the mitigation says ``revert_faults``; with it, the
    journal undoes every fault, so a workload's ``rollout undo`` must not run after it."""
    by_key = {c.key: c for c in judge.space.candidates}
    flag, image = by_key["feature-flag:paymentFailure=100%"], by_key["nonexistent-image:currency/currency"]
    [fix] = judge._document(Draft(0, (flag,)), [])["mitigations"]
    assert fix["revert_faults"] is True and fix["commands"] == ["kubectl -n otel-demo rollout restart deployment flagd"]
    [fix] = judge._document(Draft(0, (flag, image)), [])["mitigations"]
    assert fix["revert_faults"] is True and not any("rollout undo" in c for c in fix["commands"])
    [fix] = judge._document(Draft(0, (image,)), [])["mitigations"]
    assert "revert_faults" not in fix and fix["commands"] == ["kubectl -n otel-demo rollout undo deployment/currency"]


def test_draws_are_distinct_seeded_and_never_combine_one_flag_twice(judge: _Judge) -> None:
    space = judge.space
    first = [d.key for d in islice(draw(space, 3, 2, True), 40)]
    assert first == [d.key for d in islice(draw(space, 3, 2, True), 40)]
    assert len(set(first)) == 40 and first != [d.key for d in islice(draw(space, 4, 2, True), 40)]
    for d in islice(draw(space, 3, 2, True), 40):
        assert len({c.exclusive for c in d.candidates}) == 2
        assert d.noise is not None and (d.noise.workload is None or d.noise.workload not in space.touched(d.candidates))


def test_drafted_documents_pass_the_spec_checks(judge: _Judge) -> None:
    for d in islice(draw(judge.space, 0, 2, True), 5):
        assert check_document(judge._document(d, [])) == []


def test_ground_truth_runs_from_the_root_cause_along_the_callers(judge: _Judge) -> None:
    space = judge.space
    payment = next(c for c in space.candidates if c.key == "feature-flag:paymentFailure=100%")
    assert chain(space.graph, payment, "frontend") == ["payment", "checkout", "frontend"]
    alert = ("HighRequestErrorRate", "frontend", {"service_name": "frontend", "namespace": "otel-demo"}, frozenset({payment.key}))
    doc = judge._document(Draft(0, (payment,)), [alert])
    assert check_document(doc) == []
    gt = doc["ground_truth"]
    assert [g["id"] for g in gt["groups"] if g.get("root_cause")] == ["flagd-config-configmap-1"]
    assert [(p["source"], p["target"]) for p in gt["propagations"]] == [
        ("flagd-config-configmap-1", "flagd-service-1"), ("flagd-service-1", "payment-service-1"),
        ("payment-service-1", "checkout-service-1"), ("checkout-service-1", "frontend-service-1")]
    assert doc["metadata"]["complexity"]["factors"]["propagation_length"] == 4


def test_generate_emits_a_proven_variant_that_loads(tmp_path: Path) -> None:
    from itbench_gym import generate
    from itbench_gym.registry import ScenarioIndex

    result = generate(1, seed=6, out=tmp_path)
    assert len(result.variants) == 1 and len(result.files) == 1
    spec = load_spec(result.files[0])
    assert spec.id.startswith("SRE-Gen-") and spec.id == result.variants[0].draft.scenario_id
    index = ScenarioIndex(result.files)
    assert index.spec(spec.id.replace("-v0", "-NoTraces-v0")).observability.traces is False


def test_an_alert_about_a_pod_alone_is_credited_to_the_service_that_owns_the_pod(judge: _Judge) -> None:
    # A claim that never binds leaves the new pod Pending while the old one serves: the only alert is
    # KubePodNotReady{namespace, pod}, as in ITBench's own unbindable-claim scenario.
    claim = next(c for c in judge.space.candidates if c.key == "unbindable-claim:checkout/checkout")
    outcome = judge.judge(Draft(0, (claim,)))
    assert outcome.doc is not None, outcome.reason
    assert {"alertname": "KubePodNotReady", "labels": {"namespace": "otel-demo"}} in outcome.doc["alerts"]["triggering"]


def test_a_mesh_alert_is_credited_to_the_destination_and_the_source_it_names() -> None:
    # Bookinfo's alerts name services by Istio's destination and source labels: details' Service
    # deleted, productpage's calls to details fail; productpage unable to resolve names, it opens no
    # connection to details (NoRequestsOpened{source_canonical_service="productpage"}): an alert about
    # the faulted service itself is preferred to the errors its callee details records.
    mesh = _Judge("book-info")
    by_key = {c.key: c for c in mesh.space.candidates}
    deleted = mesh.judge(Draft(0, (by_key["deleted-service:details"],)))
    assert deleted.doc is not None, deleted.reason
    assert any(m["labels"].get("destination_app") == "details" or m["labels"].get("destination_canonical_service") == "details"
               for m in deleted.doc["alerts"]["triggering"])
    unresolved = mesh.judge(Draft(1, (by_key["dns-policy:productpage-v1"],)))
    assert unresolved.doc is not None, unresolved.reason
    assert any(m["labels"].get("source_canonical_service") == "productpage" for m in unresolved.doc["alerts"]["triggering"])
    opened = {"alertname": "NoRequestsOpened", "namespace": "book-info", "source_canonical_service": "productpage",
              "destination_canonical_service": "details"}
    assert [s for s, _ in _services_of(opened, mesh.space, ObjectStore(SimClock()))] == ["details", "productpage"]


def test_a_fault_that_stops_a_service_reaches_its_callees() -> None:
    # The load generator scaled to zero: no service of the shop receives requests; the alerts are all
    # downstream of the fault, along the calls.
    shop = _Judge("astronomy-shop")
    idle = shop.judge(Draft(2, (next(c for c in shop.space.candidates if c.key == "scaled-to-zero:load-generator"),)))
    assert idle.doc is not None, idle.reason
    assert [a["alertname"] for a in idle.doc["alerts"]["triggering"]] == ["NoRequestsReceived"]
    hops = idle.doc["ground_truth"]["propagations"]
    assert {"source": "load-generator-service-1", "target": "frontend-proxy-service-1",
            "condition": "load-generator cannot send its requests to frontend-proxy",
            "effect": "frontend-proxy receives none of load-generator's requests"} in hops
