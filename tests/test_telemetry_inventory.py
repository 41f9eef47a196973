"""Scrape targets, ``up``, exporter families and kube-prometheus-stack's rules on a small cluster.

The cluster carries the monitoring objects of ``envs/astronomy-shop/cluster/kube-prometheus-stack-rules.yaml``
(the CRDs, the Prometheus object with ITBench's selectors, the default PrometheusRules) plus
kube-state-metrics, node-exporter and the kubelet Service shaped as kube-prometheus-stack 88.5.0
renders them, so what is checked is what the twin derives from objects, not names it knows.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from itbench_gym.backends.sim.alerting import RuleAwareTSDB
from itbench_gym.backends.sim.exporters.monitoring import Monitoring
from itbench_gym.backends.sim.exporters.scrape import target_up
from itbench_gym.backends.sim.kube.runtime import DefaultRuntime, FileReader
from itbench_gym.backends.sim.promql import Engine
from kube_fixtures import NS, container, deployment, make_cluster

Obj = dict[str, Any]
STACK = Path(__file__).resolve().parents[1] / "envs" / "astronomy-shop" / "cluster" / "kube-prometheus-stack-rules.yaml"
MON = "prometheus"
MONITOR_LABEL = {"prometheus.itbench.io/monitor": "true"}
CRASHER = "ghcr.io/demo/crasher:1.0"


@pytest.fixture(scope="module")
def stack() -> list[Obj]:
    return [d for d in yaml.load_all(STACK.read_text(), Loader=yaml.CSafeLoader) if d]


class Runtime(DefaultRuntime):
    """Healthy, except that ``CRASHER`` and the containers of ``crashing`` pods exit with 1 a second after they start."""

    def __init__(self) -> None:
        super().__init__()
        self.crashing: set[str] = set()

    def exit_after(self, pod: Obj, c: Obj, files: FileReader, *, emulated: bool = False) -> tuple[float, int] | None:
        if c.get("image") == CRASHER or pod["metadata"]["name"] in self.crashing:
            return (1.0, 1)
        return super().exit_after(pod, c, files)


def _exporters() -> list[Obj]:
    """kube-state-metrics, node-exporter and the kubelet Service/Endpoints as the chart and the operator make them."""
    ksm_labels = {"app.kubernetes.io/name": "kube-state-metrics", "app.kubernetes.io/instance": "prometheus"}
    ne_labels = {"app.kubernetes.io/name": "prometheus-node-exporter", "app.kubernetes.io/instance": "prometheus"}
    ksm = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "prometheus-kube-state-metrics", "namespace": MON},
           "spec": {"replicas": 1, "selector": {"matchLabels": ksm_labels},
                    "template": {"metadata": {"labels": ksm_labels}, "spec": {"containers": [{
                        "name": "kube-state-metrics", "image": "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0",
                        "args": ["--port=8080", "--resources=deployments,endpointslices,namespaces,nodes,pods,replicasets,services"],
                        "ports": [{"name": "http", "containerPort": 8080}, {"name": "metrics", "containerPort": 8081}]}]}}}}
    ne = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "prometheus-prometheus-node-exporter", "namespace": MON},
          "spec": {"selector": {"matchLabels": ne_labels},
                   "template": {"metadata": {"labels": ne_labels}, "spec": {"hostNetwork": True, "containers": [{
                       "name": "node-exporter", "image": "quay.io/prometheus/node-exporter:v1.12.1-distroless",
                       "ports": [{"name": "http-metrics", "containerPort": 9100}]}]}}}}
    services = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "prometheus-kube-state-metrics", "namespace": MON,
                                                             "labels": {**ksm_labels, "release": "prometheus"}},
         "spec": {"selector": ksm_labels, "ports": [{"name": "http", "port": 8080, "targetPort": "http"}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "prometheus-prometheus-node-exporter", "namespace": MON,
                                                             "labels": {**ne_labels, "jobLabel": "node-exporter", "release": "prometheus"}},
         "spec": {"selector": ne_labels, "ports": [{"name": "http-metrics", "port": 9100, "targetPort": 9100}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "prometheus-kube-prometheus-kubelet", "namespace": "kube-system",
                                                             "labels": {"app.kubernetes.io/name": "kubelet", "k8s-app": "kubelet"}},
         "spec": {"clusterIP": "None", "ports": [{"name": "https-metrics", "port": 10250}, {"name": "http-metrics", "port": 10255}]}},
        {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "prometheus-kube-prometheus-kubelet", "namespace": "kube-system",
                                                               "labels": {"app.kubernetes.io/name": "kubelet", "k8s-app": "kubelet"}},
         "subsets": [{"addresses": [{"ip": f"172.18.0.{i + 2}", "targetRef": {"kind": "Node", "name": f"node-{i + 1}"}} for i in range(3)],
                      "ports": [{"name": "https-metrics", "port": 10250}, {"name": "http-metrics", "port": 10255}]}]},
    ]
    return [ksm, ne, *services]


def _service_monitors() -> list[Obj]:
    def sm(name: str, ns: str, spec: Obj) -> Obj:
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": name, "namespace": MON, "labels": {"release": "prometheus"}}, "spec": {**spec,
                                                                                                             "namespaceSelector": {"matchNames": [ns]}}}
    path_label = [{"action": "replace", "sourceLabels": ["__metrics_path__"], "targetLabel": "metrics_path"}]
    return [
        sm("prometheus-kube-state-metrics", MON, {"jobLabel": "app.kubernetes.io/name", "endpoints": [{"port": "http", "honorLabels": True}],
                                                  "selector": {"matchLabels": {"app.kubernetes.io/name": "kube-state-metrics"}}}),
        sm("prometheus-prometheus-node-exporter", MON, {"jobLabel": "jobLabel", "endpoints": [{"port": "http-metrics"}],
                                                        "selector": {"matchLabels": {"app.kubernetes.io/name": "prometheus-node-exporter"}}}),
        sm("prometheus-kube-prometheus-kubelet", "kube-system", {"jobLabel": "k8s-app", "selector": {"matchLabels": {"k8s-app": "kubelet"}},
                                                                  "endpoints": [
            {"port": "https-metrics", "honorLabels": True, "relabelings": path_label},
            {"port": "https-metrics", "path": "/metrics/cadvisor", "honorLabels": True, "relabelings": path_label,
             "metricRelabelings": [{"action": "drop", "regex": "container_spec.*", "sourceLabels": ["__name__"]},
                                   {"action": "drop", "regex": ".+;", "sourceLabels": ["id", "pod"]}]},
            {"port": "https-metrics", "path": "/metrics/probes", "honorLabels": True, "relabelings": path_label}]}),
    ]


class Cluster:
    """A small cluster with the stack's monitoring objects, advanced tick by tick like the twin."""

    def __init__(self, stack: list[Obj], *extra: Obj) -> None:
        self.runtime = Runtime()
        monitoring = [copy.deepcopy(d) for d in stack if d["kind"] in ("Namespace", "CustomResourceDefinition", "Prometheus")]
        rules = [copy.deepcopy(d) for d in stack if d["kind"] == "PrometheusRule"]
        self.cluster, self.clock = make_cluster(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS, "labels": MONITOR_LABEL}},
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}},
            *monitoring, *_exporters(), *_service_monitors(), *extra, runtime=self.runtime)
        self.cluster.apply(rules)
        self.tsdb = RuleAwareTSDB()
        self.engine = Engine(self.tsdb)
        self.monitoring = Monitoring(self.cluster.store, self.engine)
        self.t = self.clock.now()

    def cadvisor(self) -> list[tuple[dict[str, str], float]]:
        """What the app model hands the twin for each running container: cAdvisor series with the kubelet's labels."""
        out: list[tuple[dict[str, str], float]] = []
        for p in self.cluster.store.list("Pod", NS):
            node = p["spec"].get("nodeName", "")
            base = {"job": "kubelet", "metrics_path": "/metrics/cadvisor", "node": node, "instance": f"{node}:10250",
                    "namespace": NS, "pod": p["metadata"]["name"], "container": p["spec"]["containers"][0]["name"],
                    "id": f"/kubepods/pod{p['metadata']['uid']}"}
            out.append(({"__name__": "container_cpu_usage_seconds_total", **base, "cpu": "total"}, self.t * 0.01))
            out.append(({"__name__": "container_spec_memory_limit_bytes", **base}, 2.0**28))
        out.append(({"__name__": "container_cpu_usage_seconds_total", "job": "kubelet", "metrics_path": "/metrics/cadvisor",
                     "node": "node-1", "id": "/system.slice/kubelet.service", "cpu": "total"}, 5.0))
        return out

    def scrape(self) -> None:
        self.cluster.tick(self.t)
        samples, jobs = self.monitoring.scrape(self.t, self.cadvisor(), self.cluster.usage().nodes)
        self.tsdb.append(self.t, samples, jobs)
        self.monitoring.evaluate(self.t)

    def run(self, seconds: float, step: float = 15.0) -> None:
        end = self.t + seconds
        while self.t + step <= end + 1e-9:
            self.t += step
            self.clock.set(self.t)
            self.scrape()

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        res = self.engine.instant(expr, self.t)
        return [(dict(lb), float(vs[-1])) for lb, _, vs in res.series if len(vs)]

    def alerts(self, name: str) -> list[tuple[dict[str, str], str]]:
        return [(a.labels, a.state) for a in self.monitoring.rules.alerts() if a.labels["alertname"] == name]


def test_up_has_one_series_per_target_with_the_operators_labels(stack: list[Obj]) -> None:
    c = Cluster(stack)
    c.run(60)
    up = c.query("up")
    assert len(up) == len(c.monitoring.scraper.targets) == 1 + 3 + 3 * 3  # kube-state-metrics, node-exporter ×3, kubelet 3 paths ×3
    assert all(v == 1.0 for _, v in up)
    ksm = next(lb for lb, _ in up if lb["job"] == "kube-state-metrics")
    assert ksm["namespace"] == MON and ksm["service"] == "prometheus-kube-state-metrics" and ksm["endpoint"] == "http"
    assert ksm["container"] == "kube-state-metrics" and ksm["pod"].startswith("prometheus-kube-state-metrics-")
    assert ksm["instance"].endswith(":8080") and "metrics_path" not in ksm
    kubelet = sorted((lb["node"], lb["metrics_path"], lb["instance"]) for lb, _ in up if lb["job"] == "kubelet")
    assert kubelet[:3] == [("node-1", p, "172.18.0.2:10250") for p in ("/metrics", "/metrics/cadvisor", "/metrics/probes")]
    nodes = {lb["instance"] for lb, _ in up if lb["job"] == "node-exporter"}
    assert nodes == {f"172.18.0.{i}:9100" for i in (2, 3, 4)}  # hostNetwork: the node's address
    assert c.query('scrape_samples_scraped{job="kube-state-metrics"}')[0][1] > 100


def test_up_is_zero_when_the_target_container_is_down_and_its_series_go_stale(stack: list[Obj]) -> None:
    c = Cluster(stack)
    c.run(60)
    assert c.query('count(kube_pod_info{job="kube-state-metrics"})')[0][1] > 0
    pod = next(p["metadata"]["name"] for p in c.cluster.store.list("Pod", MON) if p["metadata"]["name"].startswith("prometheus-kube-state"))
    c.runtime.crashing.add(pod)
    c.cluster.kill_container(MON, pod, "kube-state-metrics", reason="Error", exit_code=1)
    c.run(60)
    assert c.query('up{job="kube-state-metrics"}') == [(c.query('up{job="kube-state-metrics"}')[0][0], 0.0)]
    assert c.query('kube_pod_info{job="kube-state-metrics"}') == []  # a failed scrape leaves stale markers
    kubelet = next(t for t in c.monitoring.scraper.targets if t.node == "node-2")
    node = copy.deepcopy(next(n for n in c.cluster.store.list("Node") if n["metadata"]["name"] == "node-2"))
    assert target_up(c.cluster.store, kubelet, {"node-2": node})
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
    assert not target_up(c.cluster.store, kubelet, {"node-2": node})  # a node-level target is up while its node is Ready


def test_cadvisor_series_reach_prometheus_through_the_kubelet_target_and_its_metric_relabelings(stack: list[Obj]) -> None:
    c = Cluster(stack, deployment("web", 2))
    c.run(30)
    cpu = c.query('container_cpu_usage_seconds_total{namespace="shop"}')
    assert len(cpu) == 2
    assert all(lb["job"] == "kubelet" and lb["metrics_path"] == "/metrics/cadvisor" and lb["endpoint"] == "https-metrics"
               and lb["instance"].endswith(":10250") and lb["node"].startswith("node-") for lb, _ in cpu)
    assert c.query("container_spec_memory_limit_bytes") == []  # the chart's cAdvisor metricRelabelings drop container_spec_*
    assert c.query('container_cpu_usage_seconds_total{id="/system.slice/kubelet.service"}') == []  # and series with an id but no pod


def test_kube_state_metrics_families_carry_their_label_sets(stack: list[Obj]) -> None:
    c = Cluster(stack, deployment("web", 2))
    c.run(30)
    target = {"job": "kube-state-metrics", "namespace": MON, "service": "prometheus-kube-state-metrics", "endpoint": "http",
              "container": "kube-state-metrics"}

    def one(expr: str) -> dict[str, str]:
        found = c.query(expr)
        assert found, expr
        return found[0][0]

    rs = one('kube_replicaset_spec_replicas{namespace="shop"}')
    assert set(rs) == {"__name__", "namespace", "replicaset", "instance", "pod", *target} - {"namespace"} | {"namespace"}
    assert rs["replicaset"].startswith("web-") and rs["namespace"] == "shop"  # honorLabels: the object's namespace wins
    owner = one(f'kube_replicaset_owner{{replicaset="{rs["replicaset"]}"}}')
    assert (owner["owner_kind"], owner["owner_name"], owner["owner_is_controller"]) == ("Deployment", "web", "true")
    info = one('kube_pod_info{namespace="shop"}')
    # (an empty label, here priority_class, is no label in Prometheus)
    assert {"pod", "uid", "node", "pod_ip", "host_ip", "created_by_kind", "created_by_name", "host_network"} <= set(info)
    assert info["created_by_kind"] == "ReplicaSet"
    assert one('kube_pod_start_time{namespace="shop"}')["uid"]
    svc = one('kube_service_spec_type{service="prometheus-kube-state-metrics"}')
    assert svc["type"] == "ClusterIP" and svc["namespace"] == MON
    phase = {lb["phase"]: v for lb, v in c.query('kube_namespace_status_phase{namespace="shop"}')}
    assert phase == {"Active": 1.0, "Terminating": 0.0}
    ready = one('kube_node_status_condition{node="node-1", condition="Ready", status="true"}')
    assert ready["namespace"] == MON  # a node series has no namespace of its own: the target's stays
    assert one("kube_endpointslice_endpoints")["targetref_kind"] == "Pod"
    assert c.query("kube_endpoint_info") == []  # the chart's --resources lists endpointslices, not endpoints
    assert c.query("kube_configmap_info") == []  # nor configmaps in this fixture's flag


def test_node_exporter_follows_node_capacity_and_usage(stack: list[Obj]) -> None:
    c = Cluster(stack)
    c.run(120)
    cpus = c.query('count by (instance) (node_cpu_seconds_total{mode="idle"})')
    assert sorted(v for _, v in cpus) == [4.0, 4.0, 4.0]
    total = c.query('node_memory_MemTotal_bytes{instance="172.18.0.2:9100"}')[0][1]
    assert total == 8 * 2**30
    avail = c.query('node_memory_MemAvailable_bytes{instance="172.18.0.2:9100"}')[0][1]
    assert 0 < avail < total
    busy = c.query('sum by (instance) (rate(node_cpu_seconds_total{mode!="idle", instance="172.18.0.2:9100"}[1m]))')[0][1]
    assert busy > 0  # the node's system daemons use CPU
    fs = c.query('node_filesystem_avail_bytes{mountpoint="/"}')
    assert len(fs) == 3 and all(lb["fstype"] == "ext4" for lb, _ in fs)
    # the recording rules the default node alerts read work on these series
    assert c.query("instance:node_num_cpu:sum") and c.query("instance:node_memory_utilisation:ratio")


def test_watchdog_writes_alerts_and_alerts_for_state_as_prometheus_does(stack: list[Obj]) -> None:
    c = Cluster(stack)
    c.run(60)
    [(labels, state)] = c.alerts("Watchdog")
    assert state == "firing" and labels["severity"] == "none"
    alerts = c.query('ALERTS{alertname="Watchdog"}')
    assert alerts == [({"__name__": "ALERTS", "alertname": "Watchdog", "alertstate": "firing", "severity": "none"}, 1.0)]
    [(for_labels, active_at)] = c.query('ALERTS_FOR_STATE{alertname="Watchdog"}')
    assert "alertstate" not in for_labels
    watchdog = next(a for a in c.monitoring.rules.alerts() if a.labels["alertname"] == "Watchdog")
    assert active_at == watchdog.active_at


def test_groups_run_at_the_prometheus_evaluation_interval_and_their_own(stack: list[Obj]) -> None:
    c = Cluster(stack)
    c.run(15)
    intervals = {g.name: g.interval for g in c.monitoring.rules.rule_groups()}
    assert intervals["kubernetes-apps"] == 30.0  # the operator's default evaluationInterval
    assert intervals["kube-apiserver-availability.rules"] == 180.0  # the group's own interval: 3m
    files = {g.file for g in c.monitoring.rules.rule_groups()}
    assert all(f.startswith("/etc/prometheus/rules/prometheus-prometheus-kube-prometheus-prometheus-rulefiles-0/prometheus-")
               for f in files)


def test_kube_pod_crash_looping_fires_after_itbenchs_five_minutes(stack: list[Obj]) -> None:
    crasher = deployment("crasher", 1, containers=[container("main", CRASHER)])
    c = Cluster(stack, crasher)
    c.run(240)
    assert all(state == "pending" for _, state in c.alerts("KubePodCrashLooping"))
    c.run(180)
    [(labels, state)] = c.alerts("KubePodCrashLooping")
    assert state == "firing" and labels["namespace"] == NS and labels["container"] == "main"
    assert labels["job"] == "kube-state-metrics" and labels["severity"] == "warning"
    assert c.alerts("KubeDeploymentReplicasMismatch") and c.alerts("KubePodNotReady")


def test_a_default_rule_stays_quiet_while_the_workload_is_healthy(stack: list[Obj]) -> None:
    c = Cluster(stack, deployment("web", 2))
    c.run(600)
    names = {a.labels["alertname"] for a in c.monitoring.rules.alerts()}
    # Watchdog always; the control-plane components of this fixture have no scrape targets, so their
    # absent(up{job=...}) rules fire as they would on a cluster that does not expose them.
    assert "Watchdog" in names and not names & {"KubePodCrashLooping", "KubePodNotReady", "KubeDeploymentReplicasMismatch",
                                                    "TargetDown", "KubeletDown", "KubeNodeNotReady", "NodeFilesystemAlmostOutOfSpace",
                                                    "NodeCPUHighUsage", "NodeMemoryHighUtilization"}


def test_rules_reload_when_an_admin_edits_a_prometheusrule(stack: list[Obj]) -> None:
    c = Cluster(stack)
    c.run(30)
    assert c.alerts("Watchdog")
    store = c.cluster.store
    rule = store.get("PrometheusRule", MON, "prometheus-kube-prometheus-general.rules")
    for group in rule["spec"]["groups"]:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != "Watchdog"]
    store.update(rule)
    c.run(30)
    assert c.alerts("Watchdog") == []
    assert c.query('ALERTS{alertname="Watchdog"}') == []  # the removed rule's series went stale
    store.create({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                  "metadata": {"name": "custom", "namespace": NS},
                  "spec": {"groups": [{"name": "custom", "interval": "15s", "rules": [{"alert": "AlwaysOn", "expr": "vector(1)"}]}]}})
    c.run(30)
    assert [s for _, s in c.alerts("AlwaysOn")] == ["firing"]
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "unmonitored"}})
    store.create({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                  "metadata": {"name": "ignored", "namespace": "unmonitored"},
                  "spec": {"groups": [{"name": "ignored", "rules": [{"alert": "NotLoaded", "expr": "vector(1)"}]}]}})
    store.create({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                  "metadata": {"name": "broken", "namespace": NS},
                  "spec": {"groups": [{"name": "broken", "rules": [{"alert": "Broken", "expr": "sum(("}]}]}})
    c.run(60)
    assert c.alerts("NotLoaded") == []  # ruleNamespaceSelector: only namespaces labelled for monitoring
    assert c.alerts("Broken") == [] and [s for _, s in c.alerts("AlwaysOn")] == ["firing"]  # an invalid object is left out
    assert "broken" in c.monitoring.rules.last_reload_error


def test_a_scenario_may_trigger_on_a_default_rule() -> None:
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.alertrules import rule_mismatch
    from itbench_gym.spec.appfacts import load_app_facts

    facts = load_app_facts(envs_dir() / "astronomy-shop")
    crash = [r for r in facts.rules if r.alert == "KubePodCrashLooping"]
    assert crash and rule_mismatch(crash[0], {"namespace": "otel-demo", "container": "recommendation"}) is None
    assert "kube-prometheus-stack-rules.yaml" in crash[0].where
    assert len([r for r in facts.rules if r.alert == "FailedPodsDetected"]) == 2  # ITBench creates it in two PrometheusRules
