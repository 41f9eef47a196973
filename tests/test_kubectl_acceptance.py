"""Issue 3's acceptance list: the real kubectl (1.37 and, where installed, 1.32) against the twin
serving SRE-CacheFailure-v0 with its fault injected, as ``itbench-gym serve`` runs it.

One twin is shared by the module; every test runs once per kubectl version and names what it
creates after the version, so the two runs do not step on each other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.lang.timestamps import parse_rfc3339
from itbench_gym.registry import get_spec
from itbench_gym.tasks.sre import SRETask

NS = "otel-demo"


def _kubectls() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    for path in (shutil.which("kubectl", path=os.path.dirname(sys.executable)), "/usr/bin/kubectl",
                 shutil.which("kubectl")):
        if not path or not os.path.exists(path) or path in found.values():
            continue
        out = subprocess.run([path, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            minor = json.loads(out.stdout)["clientVersion"]["minor"].rstrip("+")
            found.setdefault(minor, path)
    return sorted(found.items(), reverse=True)


KUBECTLS = _kubectls()
pytestmark = pytest.mark.skipif(not KUBECTLS, reason="kubectl is not installed")


@dataclass
class Shop:
    backend: SimBackend
    endpoints: Endpoints
    tmp: Path


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    task = SRETask(get_spec("SRE-CacheFailure-v0"))
    backend = SimBackend()
    try:
        task.setup(backend, 0)
        yield Shop(backend, backend.endpoints, tmp_path_factory.mktemp("kubectl"))
    finally:
        task.close()
        backend.close()


class Kubectl:
    """One kubectl binary with its own discovery cache, as the agent (or the admin)."""

    def __init__(self, shop: Shop, minor: str, path: str) -> None:
        self.shop, self.minor, self.path = shop, minor, path
        self.v = f"v{minor}"  # suffix for object names

    def __call__(self, *args: str, check: bool = True, admin: bool = False, stdin: str | None = None,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cfg = self.shop.backend.admin_kubeconfig if admin else self.shop.endpoints.kubeconfig
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.shop.tmp), "KUBECONFIG": str(cfg)}
        cache = self.shop.tmp / f"cache-{self.minor}-{'admin' if admin else 'agent'}"
        # registered as the env's tools register kubectl: a watch lets time pass only while it waits
        with subprocess.Popen([self.path, "--cache-dir", str(cache), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) as running, \
                self.shop.backend.programs.running(running.pid):
            out, err = running.communicate(input=stdin or "", timeout=timeout)
        proc = subprocess.CompletedProcess(running.args, running.returncode, out, err)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl 1.{self.minor} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def out(self, *args: str, **kw: object) -> str:
        return self(*args, **kw).stdout  # type: ignore[arg-type]

    def json(self, *args: str) -> dict:  # type: ignore[type-arg]
        return json.loads(self.out(*args, "-o", "json"))


@pytest.fixture(params=KUBECTLS, ids=[f"kubectl-1.{m}" for m, _ in KUBECTLS])
def kc(request: pytest.FixtureRequest, shop: Shop) -> Kubectl:
    minor, path = request.param
    return Kubectl(shop, minor, path)


def header(text: str) -> list[str]:
    return re.split(r"\s{2,}", text.splitlines()[0].strip())


def rows(text: str) -> dict[str, list[str]]:
    return {r[0]: r for r in (re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[1:]) if r}


def recommendation_pod(kc: Kubectl) -> str:
    return kc.out("get", "pods", "-l", "opentelemetry.io/name=recommendation", "-o",
                  "jsonpath={.items[0].metadata.name}")


EXTRA_OBJECTS = """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: frontend-{v}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: frontend}
  minReplicas: 1
  maxReplicas: 3
  metrics:
  - type: Resource
    resource: {name: memory, target: {type: Utilization, averageUtilization: 80}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-{v}}
spec:
  podSelector: {matchLabels: {app: nothing-{v}}}
  policyTypes: [Ingress]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data-{v}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: quota-{v}}
spec:
  hard: {pods: "200", services: "100"}
"""

HEADERS = {
    "pods": ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
    "deploy": ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
    "rs": ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
    "svc": ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"],
    "ep": ["NAME", "ENDPOINTS", "AGE"],
    "cm": ["NAME", "DATA", "AGE"],
    "secret": ["NAME", "TYPE", "DATA", "AGE"],
    "ns": ["NAME", "STATUS", "AGE"],
    "nodes": ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
    "events": ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
    "hpa": ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"],
    "netpol": ["NAME", "POD-SELECTOR", "AGE"],
    "pvc": ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "VOLUMEATTRIBUTESCLASS", "AGE"],
    "quota": ["NAME", "AGE", "REQUEST", "LIMIT"],
}


def sections(text: str) -> dict[str, str]:
    """``kubectl get a,b,c`` output split into one table per kind, keyed by the rows' ``kind/`` prefix."""
    out: dict[str, str] = {}
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        if lines[0].startswith("LAST SEEN"):  # events have no NAME column to prefix
            out["event"] = block
            continue
        kind = lines[1].split("/")[0] if len(lines) > 1 else ""
        out[kind] = "\n".join([lines[0]] + [line.split("/", 1)[1] for line in lines[1:]])
    return out


def test_get_every_kind(kc: Kubectl) -> None:
    assert "created" in kc.out("apply", "-f", "-", stdin=EXTRA_OBJECTS.replace("{v}", kc.v))
    kc("create", "secret", "generic", f"token-{kc.v}", "--from-literal=t=s3cret")
    tables = sections(kc.out("get", ",".join(HEADERS), "-n", NS, admin=True))  # ns and nodes: cluster scope
    kinds = ["pod", "deployment.apps", "replicaset.apps", "service", "endpoints", "configmap", "secret", "namespace",
             "node", "event", "horizontalpodautoscaler.autoscaling", "networkpolicy.networking.k8s.io",
             "persistentvolumeclaim", "resourcequota"]
    assert list(tables) == kinds
    namespaced = [k for k in HEADERS if k not in ("ns", "nodes")]
    assert list(sections(kc.out("get", ",".join(namespaced), "-n", NS))) == [
        k for k in kinds if k not in ("namespace", "node")]  # the agent: everything in its namespace
    for kind, expected in zip(kinds, HEADERS.values(), strict=True):
        assert header(tables[kind]) == expected, (kind, tables[kind])
    assert rows(tables["node"])["worker-1"][1] == "Ready"
    assert rows(tables["pod"])[recommendation_pod(kc)][2] in ("Running", "OOMKilled", "CrashLoopBackOff")
    assert rows(tables["service"])["frontend"][4] == "8080/TCP"
    assert rows(tables["endpoints"])["frontend"][1].endswith(":8080")
    assert rows(tables["secret"])[f"token-{kc.v}"][1:3] == ["Opaque", "1"]
    assert rows(tables["persistentvolumeclaim"])[f"data-{kc.v}"][1] == "Pending"
    hpa = rows(tables["horizontalpodautoscaler.autoscaling"])[f"frontend-{kc.v}"]
    assert hpa[1] == "Deployment/frontend" and hpa[2].startswith("memory: ") and hpa[2].endswith("/80%")
    assert "pods: " in rows(tables["resourcequota"])[f"quota-{kc.v}"][2]
    assert rows(tables["networkpolicy.networking.k8s.io"])[f"deny-{kc.v}"][1] == f"app=nothing-{kc.v}"
    assert "No resources found in otel-demo namespace." in kc("get", "ingress").stderr
    everything = sections(kc.out("get", "all"))
    assert list(everything) == ["pod", "service", "deployment.apps", "replicaset.apps",
                                "horizontalpodautoscaler.autoscaling"]
    assert "frontend" in rows(everything["deployment.apps"])


def test_output_formats_and_selectors(kc: Kubectl) -> None:
    rec = recommendation_pod(kc)
    all_ns = kc.out("get", "pods", "-A", admin=True)
    assert header(all_ns)[:2] == ["NAMESPACE", "NAME"]
    # the cluster ITBench runs: the app, kube-system, the monitoring stack, Chaos Mesh (admin sees it all)
    assert {NS, "kube-system", "prometheus", "chaos-mesh"} <= {r[0] for r in rows(all_ns).values()}
    wide = kc.out("get", "pods", "-o", "wide")
    assert header(wide)[-4:] == ["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
    assert all(re.fullmatch(r"10\.244\.\d+\.\d+", r[5]) and r[6].startswith("worker-") for r in rows(wide).values()
               if r[2] == "Running")
    assert header(kc.out("get", "deploy", "-o", "wide"))[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    doc = yaml.safe_load(kc.out("get", "deploy", "recommendation", "-o", "yaml"))
    assert doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "512Mi"
    assert kc.json("get", "svc", "frontend")["spec"]["ports"][0]["port"] == 8080
    names = kc.out("get", "deploy", "-o", "name").split()
    assert "deployment.apps/recommendation" in names and len(names) >= 20
    assert kc.out("get", "cm", "flagd-config", "-o", "jsonpath={.metadata.name}") == "flagd-config"
    cc = kc.out("get", "pods", "-l", "opentelemetry.io/name=recommendation", "-o",
                "custom-columns=NAME:.metadata.name,LAST:.status.containerStatuses[0].lastState.terminated.reason")
    assert cc.splitlines()[1].split() == [rec, "OOMKilled"]
    selected = kc.out("get", "pods", "-l", "opentelemetry.io/name in (cart,ad)", "-o", "name").split()
    assert selected == sorted(selected) and {n.split("-")[0] for n in selected} == {"pod/ad", "pod/cart"}
    on_node = kc.out("get", "pods", "--field-selector", "spec.nodeName=worker-1,status.phase=Running", "-o", "wide")
    assert rows(on_node) and all(r[6] == "worker-1" for r in rows(on_node).values())
    labels = kc.out("get", "pods", "-l", "opentelemetry.io/name=cart", "--show-labels")
    assert header(labels)[-1] == "LABELS" and "opentelemetry.io/name=cart" in labels
    by_restarts = kc.out("get", "pods", "--sort-by=.status.containerStatuses[0].restartCount", "-o", "name").split()
    assert by_restarts[-1] == f"pod/{rec}"
    bad = kc("get", "pods", "--field-selector", "spec.bogus=1", check=False)
    assert bad.returncode != 0 and "field label not supported" in bad.stderr


def test_describe(kc: Kubectl) -> None:
    pod = kc.out("describe", "pod", recommendation_pod(kc))
    assert re.search(r"Last State:\s+Terminated\n\s+Reason:\s+OOMKilled\n\s+Exit Code:\s+137", pod)
    assert re.search(r"Restart Count:\s+[1-9]", pod) and "memory:  512Mi" in pod and "BackOff" in pod
    deploy = kc.out("describe", "deploy", "recommendation")
    assert re.search(r"Replicas:\s+1 desired \| 1 updated \| 1 total \| [01] available", deploy)
    assert "NewReplicaSet:   recommendation-" in deploy
    svc = kc.out("describe", "svc", "frontend")
    assert re.search(r"Endpoints:\s+10\.244\.\d+\.\d+:8080", svc)
    node = kc.out("describe", "node", "worker-1", admin=True)
    assert re.search(r"Ready\s+True .* KubeletReady\s+kubelet is posting ready status", node)
    assert "HolderIdentity:  worker-1" in node and "Non-terminated Pods:" in node
    hpa = kc.out("describe", "hpa", f"frontend-{kc.v}")
    assert "Reference:" in hpa and "Deployment/frontend" in hpa and "Max replicas:" in hpa


def test_logs(kc: Kubectl) -> None:
    pod = recommendation_pod(kc)
    current = kc.out("logs", pod, "--tail=5").splitlines()
    assert len(current) == 5 and all("recommendation" in line for line in current)
    previous = kc.out("logs", pod, "--previous", "--timestamps", "--tail=3").splitlines()
    assert len(previous) == 3 and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ", line) for line in previous)
    assert previous != current[-3:]
    several = kc.out("logs", "-l", "opentelemetry.io/name in (cart,ad)", "--tail=2", "--prefix")
    assert {re.match(r"\[pod/(\w+)-", line).group(1) for line in several.splitlines()} == {"cart", "ad"}  # type: ignore[union-attr]
    since = kc.out("logs", pod, "--since=30s")
    assert len(since.splitlines()) < len(kc.out("logs", pod).splitlines())
    missing = kc("logs", kc.out("get", "pods", "-l", "opentelemetry.io/name=ad", "-o", "jsonpath={.items[0].metadata.name}"),
                 "--previous", check=False)
    assert missing.returncode != 0 and "previous terminated container" in missing.stderr


def test_top(kc: Kubectl) -> None:
    pods = kc.out("top", "pods")
    assert header(pods) == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert all(re.fullmatch(r"\d+m", r[1]) and re.fullmatch(r"\d+Mi", r[2]) for r in rows(pods).values())
    nodes = kc.out("top", "nodes", admin=True)
    assert header(nodes) == ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"]
    assert set(rows(nodes)) == {"control-plane", "worker-1", "worker-2", "worker-3"}
    denied = kc("top", "nodes", check=False)  # ITBench's agent reads pod metrics in its namespace only
    assert denied.returncode != 0 and "Forbidden" in denied.stderr


def test_deployment_lifecycle(kc: Kubectl) -> None:
    name = f"web-{kc.v}"
    kc("create", "deployment", name, "--image=nginx:1.27", "--replicas=2", "--port=80")
    kc("wait", "--for=condition=Available", f"deploy/{name}", "--timeout=120s")
    assert kc.out("get", "deploy", name, "-o", "jsonpath={.status.availableReplicas}") == "2"
    kc("scale", "deploy", name, "--replicas=3")
    assert len(kc.out("get", "pods", "-l", f"app={name}", "-o", "name").split()) == 3  # the controller reacted
    kc("set", "image", f"deploy/{name}", "nginx=nginx:1.28")
    kc("set", "env", f"deploy/{name}", "MODE=blue")
    kc("set", "resources", f"deploy/{name}", "--limits=memory=128Mi", "--requests=cpu=50m")
    assert "successfully rolled out" in kc.out("rollout", "status", f"deploy/{name}", "--timeout=180s")
    spec = kc.json("get", "deploy", name)["spec"]["template"]["spec"]["containers"][0]
    assert spec["image"] == "nginx:1.28" and spec["env"] == [{"name": "MODE", "value": "blue"}]
    assert spec["resources"] == {"limits": {"memory": "128Mi"}, "requests": {"cpu": "50m"}}
    history = kc.out("rollout", "history", f"deploy/{name}")
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2", "3", "4"]
    kc("rollout", "undo", f"deploy/{name}", "--to-revision=1")
    kc("rollout", "status", f"deploy/{name}", "--timeout=180s")
    spec = kc.json("get", "deploy", name)["spec"]["template"]["spec"]["containers"][0]
    assert spec["image"] == "nginx:1.27" and "env" not in spec
    images = {p["spec"]["containers"][0]["image"] for p in kc.json("get", "pods", "-l", f"app={name}")["items"]
              if not p["metadata"].get("deletionTimestamp")}
    assert images == {"nginx:1.27"}
    kc("rollout", "restart", f"deploy/{name}")
    kc("rollout", "status", f"deploy/{name}", "--timeout=180s")
    annotations = kc.json("get", "deploy", name)["spec"]["template"]["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/restartedAt" in annotations
    if kc.minor == KUBECTLS[0][0]:  # the server's side of a stuck rollout does not depend on the client
        kc("patch", "deploy", name, "--type=merge", "-p", '{"spec":{"progressDeadlineSeconds":60}}')
        kc("set", "image", f"deploy/{name}", "nginx=registry.invalid/nginx:1.0")
        stuck = kc("rollout", "status", f"deploy/{name}", "--timeout=100s", check=False)
        assert stuck.returncode != 0 and f'deployment "{name}" exceeded its progress deadline' in stuck.stderr
        statuses = {r[2] for r in rows(kc.out("get", "pods", "-l", f"app={name}")).values()}
        assert statuses & {"ErrImagePull", "ImagePullBackOff"}
    kc("delete", "deploy", name)
    assert kc("get", "deploy", name, check=False).returncode != 0


def test_patch_every_type_and_apply(kc: Kubectl, tmp_path: Path) -> None:
    cm = f"settings-{kc.v}"
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm},
                                        "data": {"level": "info"}}))
    assert f"configmap/{cm} created" in kc.out("apply", "-f", str(manifest))
    kc("patch", "cm", cm, "--type=merge", "-p", '{"data":{"extra":"1"}}')
    manifest.write_text(manifest.read_text().replace("info", "debug"))
    assert f"configmap/{cm} configured" in kc.out("apply", "-f", str(manifest))
    assert kc.json("get", "cm", cm)["data"] == {"level": "debug", "extra": "1"}
    stdin_doc = yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{cm}-stdin"},
                                "data": {"a": "b"}})
    assert "created" in kc.out("apply", "-f", "-", stdin=stdin_doc)
    typo = kc("apply", "-f", "-", check=False, stdin=stdin_doc.replace("\ndata:", "\ndta:"))
    assert typo.returncode != 0 and 'unknown field "dta"' in typo.stderr
    name = f"patched-{kc.v}"
    kc("create", "deployment", name, "--image=nginx:1.27")
    kc("patch", "deploy", name, "--type=json", "-p", '[{"op":"replace","path":"/spec/replicas","value":2}]')
    kc("patch", "deploy", name, "-p",  # strategic merge: the container is merged by name, not replaced
       '{"spec":{"template":{"spec":{"containers":[{"name":"nginx","env":[{"name":"A","value":"1"}]}]}}}}')
    d = kc.json("get", "deploy", name)
    container = d["spec"]["template"]["spec"]["containers"][0]
    assert d["spec"]["replicas"] == 2 and container["image"] == "nginx:1.27" and container["env"] == [
        {"name": "A", "value": "1"}]
    assert len(kc.out("get", "pods", "-l", f"app={name}", "-o", "name").split()) >= 2
    bad = kc("patch", "deploy", name, "--type=json", "-p", '[{"op":"remove","path":"/spec/nope"}]', check=False)
    assert bad.returncode != 0 and bad.stderr.startswith("The request is invalid") and "nope" in bad.stderr
    kc("delete", "deploy", name)


def test_imperative_create_and_delete(kc: Kubectl, tmp_path: Path) -> None:
    """kubectl's typed clients send protobuf bodies; every field must survive the trip."""
    v = kc.v
    kc("create", "configmap", f"cm-{v}", "--from-literal=a=1", "--from-literal=empty=")
    assert kc.json("get", "cm", f"cm-{v}")["data"] == {"a": "1", "empty": ""}
    kc("create", "deployment", f"zero-{v}", "--image=nginx:1.27", "--replicas=0")
    assert kc.out("get", "deploy", f"zero-{v}", "-o", "jsonpath={.spec.replicas}") == "0"
    kc("create", "secret", "generic", f"sec-{v}", "--from-literal=password=hunter2")
    assert kc.out("get", "secret", f"sec-{v}", "-o", "jsonpath={.data.password}") == "aHVudGVyMg=="
    kc("create", "quota", f"q-{v}", "--hard=pods=50,requests.cpu=10")
    assert kc.json("get", "quota", f"q-{v}")["spec"]["hard"] == {"pods": "50", "requests.cpu": "10"}
    kc("create", "serviceaccount", f"sa-{v}")
    kc("create", "role", f"reader-{v}", "--verb=get,list", "--resource=pods")
    kc("create", "rolebinding", f"reader-{v}", f"--role=reader-{v}", f"--serviceaccount={NS}:sa-{v}")
    assert kc.json("get", "rolebinding", f"reader-{v}")["subjects"] == [
        {"kind": "ServiceAccount", "name": f"sa-{v}", "namespace": NS}]
    kc("create", "poddisruptionbudget", f"pdb-{v}", "--selector=app=x", "--min-available=0")
    assert kc.json("get", "pdb", f"pdb-{v}")["spec"]["minAvailable"] == 0
    kc("create", "job", f"job-{v}", "--image=busybox", "--", "echo", "hi")
    assert kc.json("get", "job", f"job-{v}")["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    kc("create", "cronjob", f"cron-{v}", "--image=busybox", "--schedule=*/5 * * * *", "--", "date")
    kc("create", "ingress", f"ing-{v}", "--rule=shop.example.com/=frontend-proxy:8080")
    ing = kc.json("get", "ing", f"ing-{v}")["spec"]["rules"][0]
    assert ing["host"] == "shop.example.com" and ing["http"]["paths"][0]["backend"]["service"]["port"]["number"] == 8080
    kc("create", "service", "clusterip", f"svc-{v}", "--tcp=5678:8080")
    assert kc.json("get", "svc", f"svc-{v}")["spec"]["ports"][0]["targetPort"] == 8080
    kc("run", f"pod-{v}", "--image=nginx:1.27", "--labels=run=me", "--", "nginx", "-g", "daemon off;")
    assert kc.json("get", "pod", f"pod-{v}")["spec"]["containers"][0]["args"] == ["nginx", "-g", "daemon off;"]
    kc("create", "namespace", f"scratch-{v}", admin=True)
    assert rows(kc.out("get", "ns", admin=True))[f"scratch-{v}"][1] == "Active"
    policy = tmp_path / "np.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                      "metadata": {"name": f"np-{v}"},
                                      "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}))
    kc("create", "-f", str(policy))
    assert kc("create", "-f", str(policy), check=False).stderr.strip().endswith("already exists")
    if kc.minor >= "33":
        kc("autoscale", "deploy", f"zero-{v}", "--cpu=70%", "--min=1", "--max=2")
    else:
        kc("autoscale", "deploy", f"zero-{v}", "--cpu-percent=70", "--min=1", "--max=2")
    assert kc.json("get", "hpa", f"zero-{v}")["spec"]["maxReplicas"] == 2
    created = [f"cm/cm-{v}", f"deploy/zero-{v}", f"secret/sec-{v}", f"pod/pod-{v}", f"netpol/np-{v}", f"job/job-{v}",
               f"cronjob/cron-{v}", f"hpa/zero-{v}", f"quota/q-{v}", f"pdb/pdb-{v}", f"ing/ing-{v}", f"svc/svc-{v}",
               f"sa/sa-{v}", f"role/reader-{v}", f"rolebinding/reader-{v}"]
    assert kc.out("delete", *created).count(" deleted") == len(created)
    gone = kc("get", *created, check=False)
    assert gone.returncode != 0 and gone.stderr.count("(NotFound)") == len(created)
    assert "deleted" in kc.out("delete", f"ns/scratch-{v}", admin=True)


def test_label_annotate_cordon(kc: Kubectl) -> None:
    pod = recommendation_pod(kc)
    kc("label", "pod", pod, f"triage-{kc.v}=yes")
    assert pod in kc.out("get", "pods", "-l", f"triage-{kc.v}=yes", "-o", "name")
    kc("annotate", "deploy", "recommendation", f"note-{kc.v}=looking")
    assert kc.json("get", "deploy", "recommendation")["metadata"]["annotations"][f"note-{kc.v}"] == "looking"
    kc("label", "pod", pod, f"triage-{kc.v}-")
    assert kc.out("get", "pods", "-l", f"triage-{kc.v}=yes", "-o", "name") == ""
    denied = kc("cordon", "worker-3", check=False)  # ITBench's agent may patch nodes but not read them
    assert denied.returncode != 0 and 'cannot get resource "nodes"' in denied.stderr
    kc("cordon", "worker-3", admin=True)
    assert rows(kc.out("get", "nodes", admin=True))["worker-3"][1] == "Ready,SchedulingDisabled"
    assert "node.kubernetes.io/unschedulable:NoSchedule" in kc.out("describe", "node", "worker-3", admin=True)
    kc("uncordon", "worker-3", admin=True)
    assert rows(kc.out("get", "nodes", admin=True))["worker-3"][1] == "Ready"


def test_discovery_explain_auth(kc: Kubectl) -> None:
    resources = rows(kc.out("api-resources"))
    assert resources["deployments"][1:3] == ["deploy", "apps/v1"]
    assert {"endpointslices", "leases", "horizontalpodautoscalers", "networkpolicies"} <= set(resources)
    assert "podchaos" not in kc.out("api-resources", admin=False)
    explain = kc.out("explain", "deployment.spec")
    assert "KIND:       Deployment" in explain and "replicas\t<integer>" in explain
    assert kc.out("auth", "can-i", "create", "pods").strip() == "yes"
    assert kc.out("auth", "can-i", "delete", "deployments", "-n", NS).strip() == "yes"
    denied = kc("auth", "can-i", "list", "pods", "-n", "chaos-mesh", check=False)
    assert denied.returncode == 1 and denied.stdout.startswith("no")
    assert "system:serviceaccount:" in kc.out("auth", "whoami")


def test_watch_and_wait(kc: Kubectl) -> None:
    watched = kc("get", "pods", "-w", "--request-timeout=3s", check=False)
    assert header(watched.stdout) == HEADERS["pods"] and recommendation_pod(kc) in watched.stdout
    assert "condition met" in kc.out("wait", "--for=condition=Available", "deploy/frontend", "--timeout=60s")


def pod_of(kc: Kubectl, component: str) -> dict:  # type: ignore[type-arg]
    return kc.json("get", "pods", "-l", f"app.kubernetes.io/component={component}")["items"][0]


def test_exec_env_is_the_containers(kc: Kubectl) -> None:
    pod = pod_of(kc, "frontend-proxy")
    env = dict(line.split("=", 1) for line in kc.out("exec", pod["metadata"]["name"], "--", "env").splitlines())
    service = kc.json("get", "service", "frontend")
    assert env["HOSTNAME"] == pod["metadata"]["name"] and env["PATH"].endswith("/bin")
    assert env["FRONTEND_PORT"] == "8080" and env["OTEL_SERVICE_NAME"] == "frontend-proxy"  # spec env, a fieldRef
    assert env["FRONTEND_SERVICE_HOST"] == service["spec"]["clusterIP"]  # the kubelet's Service links
    assert env["KUBERNETES_SERVICE_PORT"] == "443"


def test_exec_reads_the_kubelets_files_and_the_mounts(kc: Kubectl) -> None:
    pod = pod_of(kc, "frontend-proxy")["metadata"]["name"]
    assert kc.out("exec", pod, "--", "cat", "/etc/resolv.conf") == (
        "search otel-demo.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n")
    hosts = kc.out("exec", pod, "--", "cat", "/etc/hosts")
    assert hosts.startswith("# Kubernetes-managed hosts file.\n") and hosts.rstrip().endswith(f"\t{pod}")
    postgres = pod_of(kc, "postgresql")["metadata"]["name"]
    init = kc.json("get", "configmap", "postgresql-init")["data"]
    name = sorted(init)[0]
    assert kc.out("exec", postgres, "--", "ls", "/docker-entrypoint-initdb.d").split() == sorted(init)
    assert kc.out("exec", postgres, "--", "cat", f"/docker-entrypoint-initdb.d/{name}") == init[name]


def test_exec_dns_sees_the_cluster_but_not_the_injection_machinery(kc: Kubectl) -> None:
    pod = pod_of(kc, "product-reviews")["metadata"]["name"]
    visible = kc("exec", pod, "--", "nslookup", "kube-dns.kube-system")
    assert visible.returncode == 0 and "Address: 10.96.0.10" in visible.stdout
    missing = kc("exec", pod, "--", "nslookup", "no-such-service.kube-system", check=False)
    assert missing.returncode == 1 and "** server can't find no-such-service.kube-system: NXDOMAIN" in missing.stdout
    # the harness' namespaces are hidden from the agent: their names answer as names outside the cluster do
    hidden = kc("exec", pod, "--", "nslookup", "chaos-mesh-controller-manager.chaos-mesh", check=False)
    outside = kc("exec", pod, "--", "nslookup", "example.org", check=False)
    assert hidden.returncode == outside.returncode == 1
    assert hidden.stderr.replace("chaos-mesh-controller-manager.chaos-mesh", "NAME") == outside.stderr.replace("example.org", "NAME")


def test_exec_exit_codes_and_missing_programs(kc: Kubectl) -> None:
    pod = pod_of(kc, "frontend-proxy")["metadata"]["name"]
    failed = kc("exec", pod, "--", "sh", "-c", "echo out; echo err >&2; exit 3", check=False)
    assert (failed.returncode, failed.stdout) == (3, "out\n")
    assert failed.stderr == "err\ncommand terminated with exit code 3\n"
    piped = kc("exec", "-i", pod, "--", "sh", "-c", "grep -c needle", stdin="hay\nneedle\nneedle\n")
    assert piped.stdout == "2\n"
    checkout = pod_of(kc, "checkout")["metadata"]["name"]  # distroless: no shell
    missing = kc("exec", checkout, "--", "sh", check=False)
    assert missing.returncode == 1
    assert 'exec: "sh": executable file not found in $PATH' in missing.stderr
    denied = kc("exec", "-n", "kube-system", "etcd-control-plane", "--", "ls", check=False)
    assert denied.returncode == 1 and "forbidden" in denied.stderr


def test_a_debug_pod_runs_its_args_and_answers_exec(kc: Kubectl) -> None:
    name = f"exec-debug-{kc.v.replace('.', '')}"
    # ten minutes: a watch lets one simulated second pass per idle step (~18 ms of wall time each here)
    kc("run", name, "--image=busybox:1.36", "--restart=Never", "--", "sleep", "600")
    kc("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    assert kc.out("exec", name, "--", "nslookup", "frontend").startswith("Server:\t\t10.96.0.10\n")
    kc("wait", "--for=condition=Ready=false", f"pod/{name}", "--timeout=2h")  # the twin runs on until it ends
    ended = kc.json("get", "pod", name)["status"]["containerStatuses"][0]["state"]["terminated"]
    ran = parse_rfc3339(ended["finishedAt"]) - parse_rfc3339(ended["startedAt"])
    assert (ended["exitCode"], ran) == (0, 600)  # busybox has no Entrypoint: its args are the command
    kc("delete", "pod", name, "--wait=false")


def test_a_probe_pods_log_is_what_its_programs_print(kc: Kubectl) -> None:
    """The classic connectivity check: a pod that runs ``nslookup`` once; its log and exit code are the
    program's. Where the twin cannot say what a program prints (a server's answer), the log stays empty
    rather than showing the twin's own words."""
    v = kc.v.replace(".", "")
    runs = {f"probe-ok-{v}": ["nslookup", "frontend"], f"probe-nx-{v}": ["nslookup", "no-such-service"],
            f"probe-http-{v}": ["wget", "-qO-", "http://frontend:8080/"]}
    for name, argv in runs.items():
        kc("run", name, "--image=busybox:1.36", "--restart=Never", "--", *argv)
    for name in runs:
        kc("wait", "--for=jsonpath={.status.containerStatuses[0].state.terminated.reason}", f"pod/{name}", "--timeout=120s")
    found = kc.out("logs", f"probe-ok-{v}")
    assert found.startswith("Server:\t\t10.96.0.10\n") and "Name:\tfrontend.otel-demo.svc.cluster.local\n" in found
    missing = kc.json("get", "pod", f"probe-nx-{v}")["status"]
    assert missing["phase"] == "Failed" and missing["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 1
    assert "can't find no-such-service" in kc.out("logs", f"probe-nx-{v}")
    assert kc.out("logs", f"probe-http-{v}") == ""
    for name in runs:
        kc("delete", "pod", name, "--wait=false")
    # Without --restart=Never the pod restarts what ended, as the kubelet does for any container.
    again = f"probe-again-{v}"
    kc("run", again, "--image=busybox:1.36", "--", "nslookup", "frontend")
    kc("wait", "--for=jsonpath={.status.containerStatuses[0].restartCount}=2", f"pod/{again}", "--timeout=300s")
    assert "Name:\tfrontend.otel-demo.svc.cluster.local\n" in kc.out("logs", again, "--previous")
    kc("delete", "pod", again, "--wait=false")


def test_run_interactive_prints_the_probe_once_and_cleans_up(kc: Kubectl) -> None:
    """``kubectl run -i --rm``: the attach (served: no fallback warning) shows what the process prints
    after it, then the pod is deleted. kubectl 1.37 reads the log of what came before the attach first;
    1.32 does not, so a fast process's output, printed as the container started, is not shown (as on a
    cluster, where that race is why kubectl says "If you don't see a command prompt")."""
    name = f"probe-i-{kc.v.replace('.', '')}"
    ran = kc("run", "-i", "--rm", name, "--image=busybox:1.36", "--restart=Never", "--", "nslookup", "frontend", stdin="")
    shown = 1 if int(kc.minor) >= 37 else 0
    assert ran.stdout.count("Name:\tfrontend.otel-demo.svc.cluster.local\n") == shown
    assert f'pod "{name}" deleted' in ran.stdout and "couldn't attach" not in ran.stderr
    assert kc("get", "pod", name, check=False).returncode == 1


def test_an_attach_lets_time_pass_only_while_its_client_is_there(kc: Kubectl) -> None:
    """An attach to a process that runs on follows it in simulated time; once kubectl has gone, the
    stream ends and the clock stops (nothing advances behind the next command's back)."""
    name = f"probe-attached-{kc.v.replace('.', '')}"
    # ten minutes: a watch lets one simulated second pass per idle step (~18 ms of wall time each here)
    kc("run", name, "--image=busybox:1.36", "--restart=Never", "--", "sleep", "600")
    kc("wait", "--for=condition=Ready", f"pod/{name}", "--timeout=60s")
    clock = kc.shop.backend.clock
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(kc.shop.tmp), "KUBECONFIG": str(kc.shop.endpoints.kubeconfig)}
    attached = subprocess.Popen([kc.path, "--cache-dir", str(kc.shop.tmp / f"cache-{kc.minor}-agent"), "attach", name],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    start = clock.now()
    for _ in range(200):
        if clock.now() > start:
            break
        time.sleep(0.02)
    attached.kill()
    attached.wait()
    time.sleep(0.3)  # the stream notices the closed connection
    left_at = clock.now()
    time.sleep(0.3)
    assert start < left_at == clock.now()
    kc("delete", "pod", name, "--wait=false")


def test_debug_is_refused_as_the_agents_role_refuses_it(kc: Kubectl) -> None:
    """ITBench's agent has the `admin` role, which grants no `pods/ephemeralcontainers`: `kubectl debug`
    is forbidden as on a cluster (discovery lists the subresource, so kubectl and access reviews know
    it); the admin gets the twin's own refusal (it runs no ephemeral containers)."""
    pod = recommendation_pod(kc)
    assert kc.out("auth", "can-i", "patch", "pods", "--subresource=ephemeralcontainers", check=False).strip() == "no"
    denied = kc("debug", pod, "--image=busybox:1.36", "--", "nslookup", "frontend", check=False)
    assert denied.returncode == 1 and 'cannot patch resource "pods/ephemeralcontainers"' in denied.stderr
    refused = kc("debug", "-n", NS, pod, "--image=busybox:1.36", "--", "nslookup", "frontend", admin=True, check=False)
    assert refused.returncode == 1 and "runs no ephemeral containers" in refused.stderr


def test_exec_needs_a_running_container(kc: Kubectl) -> None:
    name = f"exec-waiting-{kc.v.replace('.', '')}"
    kc("run", name, "--image=quay.io/it-bench/hello-bench-invalid:1.0", "--restart=Never")
    kc("wait", "--for=condition=PodScheduled", f"pod/{name}", "--timeout=60s")
    waiting = kc("exec", name, "--", "ls", check=False)
    assert waiting.returncode == 1 and f'container not found ("{name}")' in waiting.stderr
    kc("delete", "pod", name, "--wait=false")


def test_drain_evicts_and_reschedules(kc: Kubectl) -> None:
    if kc.minor != KUBECTLS[0][0]:
        pytest.skip("drain's evictions are typed-client protobuf, covered by imperative create with every version")
    node = "worker-2"
    kc("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=120s", admin=True)
    assert not kc.json("get", "pods", "--field-selector", f"spec.nodeName={node}")["items"]
    assert rows(kc.out("get", "nodes", admin=True))[node][1] == "Ready,SchedulingDisabled"
    assert kc.out("rollout", "status", "deploy/frontend", "--timeout=120s")
    kc("uncordon", node, admin=True)
