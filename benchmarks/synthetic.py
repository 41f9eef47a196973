"""Synthetic applications of any size, written as an app folder the twin loads like ``envs/astronomy-shop/``.

The scaling figures need apps of 10, 100 and 1,000 services that exercise the same code as the shop:
a seeded random call graph (a tree grown from the frontend, plus a few extra edges, so it stays a
DAG whose request rates do not multiply along paths), mixed runtimes and protocols (gRPC methods
balanced per connection, HTTP routes per request), one Deployment and Service per service, about
1.2 pods per service, and worker nodes in proportion to the pods. The cluster around the app is the
shop's (every cluster file its app.yaml lists: kube-system and the tools ITBench installs), and the app
has the shop's collector in its namespace, so the scraped series grow with the pods as they would on
ITBench's cluster.
"""

from __future__ import annotations

import copy
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from kubernetes.utils.quantity import parse_quantity

from itbench_gym.paths import envs_dir

NAMESPACE = "synthetic"
FRONTEND = "frontend"
LOAD_SERVICE = "load-generator"
IMAGE_REGISTRY = "registry.synthetic.example"
#: Languages the services are drawn from (all have a runtime entry in the shop's app.yaml).
LANGUAGES = ("go", "java", "python", "javascript", "csharp", "rust", "cpp", "ruby", "php", "kotlin")
#: App pods per worker node: with the DaemonSets and the monitoring stack a node stays under kubelet's 110.
PODS_PER_NODE = 80
#: Chance that a service gets a second caller (an extra DAG edge) and that it runs two replicas.
EXTRA_CALLER = 0.15
TWO_REPLICAS = 0.2
LOAD_USERS = 50
#: The shop's collector (its span metrics reach Prometheus through it), moved into the synthetic namespace.
COLLECTOR_MANIFEST = Path("manifests") / "30-otel-collector.yaml"
#: The shop's Helm release of the app itself: not deployed here.
SHOP_RELEASE = "otel-demo"


@dataclass(frozen=True)
class SyntheticApp:
    """What was written: the folder to give ``Twin`` and the sizes the figures are reported against."""

    directory: Path
    services: int
    pods: int
    edges: int
    nodes: int
    operations: int


@dataclass
class _Service:
    name: str
    language: str
    grpc: bool
    replicas: int
    operations: list[dict[str, Any]]


def write_app(directory: Path, services: int, *, seed: int = 0) -> SyntheticApp:
    """Write an app of ``services`` services (the frontend included, the load generator not) into ``directory``."""
    if services < 1:
        raise ValueError(f"an app needs at least one service, not {services}")
    rng = np.random.default_rng(seed)
    shop = envs_dir() / "astronomy-shop"
    shop_spec = yaml.safe_load((shop / "app.yaml").read_text())
    graph = _graph(rng, services)
    pods = sum(s.replicas for s in graph) + 2  # and the load generator and the collector
    workers = max(3, math.ceil(pods / PODS_PER_NODE))
    (directory / "cluster").mkdir(parents=True, exist_ok=True)
    (directory / "manifests").mkdir(exist_ok=True)
    for name in cluster_files(shop_spec):
        shutil.copyfile(shop / "cluster" / name, directory / "cluster" / name)
    _dump_all(directory / "cluster" / "nodes.yaml", _nodes(shop / "cluster" / "nodes.yaml", workers))
    releases = yaml.safe_load((shop / "cluster" / "releases.yaml").read_text())
    releases["releases"] = [r for r in releases["releases"] if r["name"] != SHOP_RELEASE]
    (directory / "cluster" / "releases.yaml").write_text(yaml.safe_dump(releases, sort_keys=False))
    _dump_all(directory / "manifests" / "00-namespace.yaml", [_namespace()])
    _dump_all(directory / "manifests" / "20-services.yaml", [obj for s in graph for obj in _objects(s)] + _objects(_load_generator()))
    _dump_all(directory / COLLECTOR_MANIFEST, _collector(shop / COLLECTOR_MANIFEST))
    _dump_all(directory / "alert-rules.yaml", [_rules()])
    (directory / "app.yaml").write_text(yaml.safe_dump(_app_yaml(graph, shop_spec), sort_keys=False, width=200))
    edges = sum(len(op.get("calls", [])) for s in graph for op in s.operations)
    return SyntheticApp(directory, services, pods, edges, workers + 1, sum(len(s.operations) for s in graph))


def _graph(rng: np.random.Generator, n: int) -> list[_Service]:
    """Services with their operations and calls: service i is called by one earlier service (a random
    recursive tree rooted at the frontend) and, with probability ``EXTRA_CALLER``, by a second one at
    half the rate."""
    out: list[_Service] = []
    # Per service, the operations some caller reaches: a call is placed only in one of those, so every service serves traffic.
    live: list[list[int]] = []
    for i in range(n):
        name = FRONTEND if i == 0 else f"svc-{i:04d}"
        grpc = i > 0 and bool(rng.random() < 0.6)
        language = "typescript" if i == 0 else LANGUAGES[int(rng.integers(len(LANGUAGES)))]
        ops = 2 if i == 0 else 1 + int(rng.random() < 0.4)
        operations = [_operation(rng, name, grpc, k) for k in range(ops)]
        out.append(_Service(name, language, grpc, 1 + int(rng.random() < TWO_REPLICAS), operations))
        live.append(list(range(ops)) if i == 0 else [])  # the load generator calls each of the frontend's
        if i == 0:
            continue
        callers = [int(rng.integers(i))]
        if i > 1 and rng.random() < EXTRA_CALLER:
            second = int(rng.integers(i))
            if second != callers[0]:
                callers.append(second)
        for rank, caller in enumerate(callers):
            reached = live[caller]
            op = out[caller].operations[reached[int(rng.integers(len(reached)))]]
            target = int(rng.integers(len(operations)))
            live[i].append(target)
            op.setdefault("calls", []).append(_call(out[i], operations[target]["id"], 1.0 if rank == 0 else 0.5))
    return out


def _operation(rng: np.random.Generator, service: str, grpc: bool, k: int) -> dict[str, Any]:
    median = float(np.round(rng.uniform(0.2, 5.0), 2))
    op_id = f"synthetic.{_camel(service)}/Method{k}" if grpc else f"{'GET' if k == 0 else 'POST'} /api/{service}/{k}"
    return {"id": op_id, "kind": "SERVER", "latency_ms": {"median": median, "sigma": 0.4}, "cpu_ms": round(median * 0.4, 3)}


def _call(callee: _Service, op_id: str, count: float) -> dict[str, Any]:
    env = callee.name.upper().replace("-", "_") + "_ADDR"
    default = f"{callee.name}:8080" if callee.grpc else f"http://{callee.name}:8080"
    span = op_id if callee.grpc else op_id.split(" ", 1)[0]
    return {"to": f"{callee.name}/{op_id}", "client_span": span, "address": {"env": env, "default": default}, "count": count}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


def _load_generator() -> _Service:
    calls = [{"to": f"{FRONTEND}/GET /api/{FRONTEND}/0", "client_span": "GET", "address": {"default": f"http://{FRONTEND}:8080"},
              "on_error": "ignore"}]
    ops = [{"id": "user_browse", "kind": "INTERNAL", "latency_ms": {"median": 0.2, "sigma": 0.3}, "calls": calls},
           {"id": "user_order", "kind": "INTERNAL", "latency_ms": {"median": 0.2, "sigma": 0.3},
            "calls": [{**calls[0], "to": f"{FRONTEND}/POST /api/{FRONTEND}/1", "client_span": "POST"}]}]
    return _Service(LOAD_SERVICE, "python", False, 1, ops)


def _app_yaml(graph: list[_Service], shop: dict[str, Any]) -> dict[str, Any]:
    services: dict[str, Any] = {}
    for s in [*graph, _load_generator()]:
        services[s.name] = {
            "language": s.language,
            **({"protocol": "grpc"} if s.grpc else {}),
            "container": s.name,
            **({} if s.name == LOAD_SERVICE else {"port": {"default": 8080}}),
            "traced": True,
            "resources": {"memory_mi": 40, "memory_mi_per_rps": 0.2, "cpu_idle": 0.002, "cpu_cores": 1.0},
            "operations": s.operations,
            "logs": {"request": [{"ratio": 0.1, "level": "INFO", "text": "{iso} INFO request served in {ms} ms"}]},
        }
    return {
        "name": f"synthetic-{len(graph)}",
        "namespace": NAMESPACE,
        "manifests": [f"cluster/{name}" for name in ("nodes.yaml", *cluster_files(shop))] + ["manifests"],
        "span_metrics": shop["span_metrics"],
        "images": [*shop["images"], {"pattern": f"{IMAGE_REGISTRY}/*", "architectures": ["amd64", "arm64"]}],
        "load": {"service": LOAD_SERVICE, "users_env": "LOCUST_USERS", "default_users": 1,
                 "classes": [{"name": "WebsiteUser", "wait_seconds": {"min": 1, "max": 10},
                              "tasks": [{"operation": "user_browse", "weight": 3}, {"operation": "user_order", "weight": 1}]}]},
        "runtimes": shop["runtimes"],
        "services": services,
        # No feature flags: the flag file is never found, so every flag keeps its code default.
        "flags": {"config_map": "flagd-config", "key": "flags.json", "service": FRONTEND, "definitions": {}},
    }


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "synthetic"}


def _objects(s: _Service) -> list[dict[str, Any]]:
    """The Deployment (and, for a served service, the Service) of one service."""
    env = [{"name": "OTEL_SERVICE_NAME", "value": s.name}]
    env += [{"name": c["address"]["env"], "value": c["address"]["default"]} for op in s.operations for c in op.get("calls", [])
            if "env" in c["address"]]
    if s.name == LOAD_SERVICE:
        env.append({"name": "LOCUST_USERS", "value": str(LOAD_USERS)})
    container = {"name": s.name, "image": f"{IMAGE_REGISTRY}/{s.name}:1.0", "env": list({e["name"]: e for e in env}.values()),
                 "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}}
    if s.name != LOAD_SERVICE:
        container["ports"] = [{"containerPort": 8080, "name": "service"}]
    selector = {"app.kubernetes.io/name": s.name}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": s.name, "namespace": NAMESPACE, "labels": _labels(s.name)},
        "spec": {"replicas": s.replicas, "selector": {"matchLabels": selector},
                 "template": {"metadata": {"labels": _labels(s.name)}, "spec": {"containers": [container]}}},
    }
    if s.name == LOAD_SERVICE:
        return [deployment]
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": s.name, "namespace": NAMESPACE, "labels": _labels(s.name)},
        "spec": {"type": "ClusterIP", "selector": selector, "ports": [{"name": "tcp-service", "port": 8080, "targetPort": 8080}]},
    }
    return [service, deployment]


def cluster_files(shop_spec: dict[str, Any]) -> list[str]:
    """The files of the cluster the shop runs on, reused as is (nodes and releases are rewritten for the synthetic app)."""
    return [m.removeprefix("cluster/") for m in shop_spec["manifests"] if m.startswith("cluster/") and m != "cluster/nodes.yaml"]


def _collector(path: Path) -> list[dict[str, Any]]:
    """The shop's collector objects, in the synthetic namespace (their own and their bindings' subjects')."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    for doc in docs:
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = NAMESPACE
        for subject in doc.get("subjects") or []:
            subject["namespace"] = NAMESPACE
    return docs


def _namespace() -> dict[str, Any]:
    """The app's namespace, labelled so that the cluster's Prometheus selects the rules in it (as the shop's)."""
    labels = {"kubernetes.io/metadata.name": NAMESPACE, "prometheus.itbench.io/monitor": "true"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": labels}}


def _rules() -> dict[str, Any]:
    """Golden-signal alerts over every service, shaped like the shop's own rules."""
    calls = f'traces_span_metrics_calls_total{{namespace="{NAMESPACE}", status_code="STATUS_CODE_ERROR"}}'
    buckets = f'traces_span_metrics_duration_milliseconds_bucket{{namespace="{NAMESPACE}"}}'
    rules = [
        {"alert": "HighRequestErrorRate", "expr": f"sum by (service_name, namespace) (rate({calls}[2m])) > 0", "for": "3m",
         "labels": {"severity": "warning"}},
        {"alert": "HighRequestLatency", "for": "3m", "labels": {"severity": "warning"},
         "expr": f"histogram_quantile(0.95, sum by (le, service_name, namespace) (rate({buckets}[2m]))) > 1500"},
    ]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "synthetic-alerting-rules", "namespace": NAMESPACE},
            "spec": {"groups": [{"name": "synthetic.goldensignals", "rules": rules}]}}


def _nodes(shop_nodes: Path, workers: int) -> list[dict[str, Any]]:
    """The shop's control plane plus ``workers`` copies of its first worker, each with its own name,
    pod CIDR, address and machine ids (the shop's own workers keep theirs: the cluster's pinned pods name them).

    kind's nodes are containers of one host whose memory and CPUs each reports as its capacity (the
    twin's OOM killer counts them together: ``kube/oom.py``). The shop's host fits the shop; an app
    with more workers than the shop gets a host larger in proportion, as one would run it on, or the
    host's OOM killer would take the cluster's own pods (a 300-service app overruns 16 GB)."""
    docs = [d for d in yaml.safe_load_all(shop_nodes.read_text()) if d]
    control = [copy.deepcopy(d) for d in docs if "node-role.kubernetes.io/control-plane" in d["metadata"]["labels"]]
    shop_workers = [d for d in docs if "node-role.kubernetes.io/control-plane" not in d["metadata"]["labels"]]
    template = copy.deepcopy(shop_workers[0])
    scale = max(1.0, workers / len(shop_workers))
    for node in (*control, template):
        for field in ("capacity", "allocatable"):
            amounts = node["status"][field]
            amounts["memory"] = f"{math.ceil(float(parse_quantity(amounts['memory'])) * scale / 1024)}Ki"
            amounts["cpu"] = str(math.ceil(float(parse_quantity(amounts["cpu"])) * scale))
    out = list(control)
    for k in range(1, workers + 1):
        node = copy.deepcopy(template)
        name = f"worker-{k}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        cidr = f"10.244.{k}.0/24"
        node["spec"].update({"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"kind://docker/kind/{name}"})
        node["status"]["addresses"] = [{"type": "InternalIP", "address": f"172.18.{(k + 2) // 256}.{(k + 2) % 256}"},
                                       {"type": "Hostname", "address": name}]
        info, n = node["status"]["nodeInfo"], k + 1
        info.update({"machineID": f"{n:032x}", "systemUUID": f"5e2c{n:04x}-0000-4000-8000-{n:012x}",
                     "bootID": f"b007{n:04x}-0000-4000-8000-{n:012x}"})
        out.append(node)
    return out


def _dump_all(path: Path, docs: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False, width=200))
