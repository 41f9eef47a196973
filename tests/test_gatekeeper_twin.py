"""OPA Gatekeeper inside the twin: templates become constraint CRDs, the audit fills constraint status,
the webhook denies, seen with the real kubectl and the official Python client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from test_kyverno_twin import NS, PolicyTwin

Obj = dict[str, Any]

REQUIRED_LABELS = """package k8srequiredlabels

violation[{"msg": msg, "details": {"missing_labels": missing}}] {
  provided := {label | input.review.object.metadata.labels[label]}
  required := {label | label := input.parameters.labels[_]}
  missing := required - provided
  count(missing) > 0
  msg := sprintf("you must provide labels: %v", [missing])
}
"""


def template(kind: str, rego: str) -> Obj:
    return {"apiVersion": "templates.gatekeeper.sh/v1", "kind": "ConstraintTemplate", "metadata": {"name": kind.lower()},
            "spec": {"crd": {"spec": {"names": {"kind": kind}, "validation": {"openAPIV3Schema": {
                "type": "object", "properties": {"labels": {"type": "array", "items": {"type": "string"}}}}}}},
                     "targets": [{"target": "admission.k8s.gatekeeper.sh", "rego": rego}]}}


def constraint(name: str, action: str) -> Obj:
    return {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": "K8sRequiredLabels", "metadata": {"name": name},
            "spec": {"enforcementAction": action,
                     "match": {"kinds": [{"apiGroups": [""], "kinds": ["ConfigMap"]}], "namespaces": [NS]},
                     "parameters": {"labels": ["owner"]}}}


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyTwin]:
    t = PolicyTwin(tmp_path_factory.mktemp("gatekeeper"), "gatekeeper")
    yield t
    t.close()


def test_template_becomes_a_constraint_crd(twin: PolicyTwin) -> None:
    twin.apply(template("K8sRequiredLabels", REQUIRED_LABELS))
    crd = client.ApiextensionsV1Api(twin.api).read_custom_resource_definition("k8srequiredlabels.constraints.gatekeeper.sh")
    assert crd.spec.scope == "Cluster" and crd.spec.names.categories == ["constraint", "constraints"]
    assert [v.name for v in crd.spec.versions] == ["v1beta1", "v1alpha1"]
    assert crd.metadata.labels["gatekeeper.sh/constraint"] == "yes"
    status = client.CustomObjectsApi(twin.api).get_cluster_custom_object(
        "templates.gatekeeper.sh", "v1", "constrainttemplates", "k8srequiredlabels")["status"]
    assert status["created"] is True
    assert sorted({tuple(p["operations"]) for p in status["byPod"]}) == [
        ("audit", "mutation-status", "status"), ("mutation-webhook", "webhook")]
    assert len(status["byPod"]) == 4 and not any("errors" in p for p in status["byPod"])


def test_audit_writes_violations_and_admission_denies(twin: PolicyTwin) -> None:
    core = client.CoreV1Api(twin.api)
    core.create_namespaced_config_map(NS, {"metadata": {"name": "unlabelled"}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "owned", "labels": {"owner": "sre"}}})
    twin.apply(constraint("cm-must-have-owner", "deny"))
    twin.run(61)  # one audit interval
    table = twin.kubectl("get", "constraints").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "ENFORCEMENT-ACTION", "TOTAL-VIOLATIONS"]
    assert table[1].split()[:3] == ["cm-must-have-owner", "deny", "2"]
    status = client.CustomObjectsApi(twin.api).get_cluster_custom_object(
        "constraints.gatekeeper.sh", "v1beta1", "k8srequiredlabels", "cm-must-have-owner")["status"]
    assert status["totalViolations"] == 2 and status["auditTimestamp"].endswith("Z")
    # the namespace's CA bundle (root-ca-cert-publisher's, unlabelled) is flagged too, as on a cluster
    assert sorted(status["violations"], key=lambda v: v["name"]) == [
        {"enforcementAction": "deny", "group": "", "version": "v1", "kind": "ConfigMap", "namespace": NS, "name": name,
         "message": 'you must provide labels: {"owner"}'} for name in ("kube-root-ca.crt", "unlabelled")]

    denied = twin.kubectl("create", "configmap", "another", "-n", NS, check=False)
    assert denied.returncode == 1
    assert denied.stderr.strip() == ('error: failed to create configmap: admission webhook "validation.gatekeeper.sh" '
                                     'denied the request: [cm-must-have-owner] you must provide labels: {"owner"}')
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_config_map(NS, {"metadata": {"name": "another"}})
    assert err.value.status == 403 and json.loads(err.value.body)["reason"] == "Forbidden"

    twin.kubectl("patch", "k8srequiredlabels", "cm-must-have-owner", "--type=merge", "-p",
                 '{"spec":{"enforcementAction":"warn"}}')
    warned = twin.kubectl("create", "configmap", "another", "-n", NS)
    assert warned.stderr.startswith("Warning: [cm-must-have-owner] you must provide labels: {")
    twin.run(60)
    status = client.CustomObjectsApi(twin.api).get_cluster_custom_object(
        "constraints.gatekeeper.sh", "v1beta1", "k8srequiredlabels", "cm-must-have-owner")["status"]
    assert status["totalViolations"] == 3 and {v["enforcementAction"] for v in status["violations"]} == {"warn"}


def test_bad_rego_is_refused_and_reported_when_the_webhook_is_down(twin: PolicyTwin) -> None:
    broken = template("K8sBroken", "package k8sbroken\n\nviolation[{\"msg\": msg}] {\n  msg :=\n}\n")
    refused = twin.apply(broken, check=False)
    assert refused.returncode == 1 and 'admission webhook "validation.gatekeeper.sh" denied the request' in refused.stderr
    twin.kubectl("scale", "deployment", "-n", "gatekeeper-system", "gatekeeper-controller-manager", "--replicas=0")
    twin.run(60)
    twin.apply(broken)  # failurePolicy Ignore: admitted while the webhook is down
    twin.kubectl("scale", "deployment", "-n", "gatekeeper-system", "gatekeeper-controller-manager", "--replicas=3")
    twin.run(60)
    status = client.CustomObjectsApi(twin.api).get_cluster_custom_object(
        "templates.gatekeeper.sh", "v1", "constrainttemplates", "k8sbroken")["status"]
    assert status["created"] is False
    assert {e["code"] for p in status["byPod"] for e in p["errors"]} == {"ingest_error"}
    assert twin.kubectl("get", "crd", "k8sbroken.constraints.gatekeeper.sh", check=False).returncode == 1


def test_misspelled_fields_are_refused_or_pruned_as_the_crds_say(twin: PolicyTwin) -> None:
    """ConstraintTemplate's spec and the generated constraint CRDs' spec are Gatekeeper's structural schemas:
    kubectl's strict validation refuses a field Gatekeeper does not have, ``--validate=false`` drops it, and
    the stored objects show the schemas' defaults."""
    misspelled = template("K8sOwnerLabel", REQUIRED_LABELS.replace("k8srequiredlabels", "k8sownerlabel"))
    misspelled["spec"]["targets"][0]["regoo"] = misspelled["spec"]["targets"][0].pop("rego")
    misspelled["spec"]["crd"]["spec"]["name"] = {"kind": "K8sOwnerLabel"}
    refused = twin.apply(misspelled, check=False)
    assert refused.returncode == 1 and "strict decoding error" in refused.stderr
    assert 'unknown field "spec.targets[0].regoo"' in refused.stderr
    assert 'unknown field "spec.crd.spec.name"' in refused.stderr
    misspelled["spec"]["targets"][0]["rego"] = misspelled["spec"]["targets"][0].pop("regoo")
    twin.kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(misspelled))
    stored = json.loads(twin.kubectl("get", "constrainttemplate", "k8sownerlabel", "-o", "json").stdout)
    assert "name" not in stored["spec"]["crd"]["spec"] and "regoo" not in stored["spec"]["targets"][0]
    assert stored["spec"]["crd"]["spec"]["validation"]["legacySchema"] is False  # v1's default
    twin.run(10)
    crd = json.loads(twin.kubectl("get", "crd", "k8sownerlabel.constraints.gatekeeper.sh", "-o", "json").stdout)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert sorted(spec_schema["properties"]) == ["enforcementAction", "match", "parameters", "scopedEnforcementActions"]

    wrong = constraint("owner-misspelled", "warn")
    wrong["kind"] = "K8sOwnerLabel"
    wrong["spec"]["match"]["kind"] = wrong["spec"]["match"].pop("kinds")
    wrong["spec"]["parameter"] = wrong["spec"].pop("parameters")
    del wrong["spec"]["enforcementAction"]
    refused = twin.apply(wrong, check=False)
    assert refused.returncode == 1 and "strict decoding error" in refused.stderr
    assert 'unknown field "spec.match.kind"' in refused.stderr and 'unknown field "spec.parameter"' in refused.stderr
    twin.kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(wrong))
    stored = json.loads(twin.kubectl("get", "k8sownerlabel", "owner-misspelled", "-o", "json").stdout)
    assert stored["spec"] == {"enforcementAction": "deny", "match": {"namespaces": [NS]}}  # the default action
    long_name = constraint("owner-" + "x" * 58, "warn")  # 64 characters: a constraint's name is a label value
    long_name["kind"] = "K8sOwnerLabel"
    refused = twin.apply(long_name, check=False)
    assert refused.returncode == 1 and "metadata.name: Too long: may not be longer than 63" in refused.stderr, refused.stderr
    twin.kubectl("delete", "constrainttemplate", "k8sownerlabel")
