"""Builders shared by the controller, scheduler and kubelet tests."""

from __future__ import annotations

from typing import Any

from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.backends.sim.kube.runtime import ContainerRuntime
from itbench_gym.clock import SimClock

Obj = dict[str, Any]
NS = "shop"


def node(name: str, index: int, *, cpu: str = "4", memory: str = "8Gi", arch: str = "amd64") -> Obj:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": arch, "kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux"}},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": f"172.18.0.{index + 2}"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def container(name: str = "main", image: str = "ghcr.io/demo/app:1.0", *, cpu: str = "100m", memory: str = "128Mi",
              limit: str | None = "256Mi", **extra: Any) -> Obj:
    resources: Obj = {"requests": {"cpu": cpu, "memory": memory}}
    if limit:
        resources["limits"] = {"memory": limit}
    return {"name": name, "image": image, "ports": [{"name": "http", "containerPort": 8080}],
            "resources": resources, **extra}


def deployment(name: str, replicas: int = 2, *, containers: list[Obj] | None = None, **spec: Any) -> Obj:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": containers or [container()]}}, **spec},
    }


def service(name: str, target: Any = "http") -> Obj:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": target}]}}


def make_cluster(*objs: Obj, runtime: ContainerRuntime | None = None, nodes: int = 3, seed: int = 0,
                 **node_kw: Any) -> tuple[KubeCluster, SimClock]:
    clock = SimClock()
    cluster = KubeCluster(clock, runtime=runtime, seed=seed)
    cluster.apply([node(f"node-{i + 1}", i, **node_kw) for i in range(nodes)]
                  + [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}] + list(objs))
    return cluster, clock


def run(cluster: KubeCluster, clock: SimClock, seconds: float, step: float = 15.0) -> None:
    """Advance in ticks like the twin does."""
    end = clock.now() + seconds
    while clock.now() < end:
        clock.advance(min(step, end - clock.now()))
        cluster.tick(clock.now())


def pods(cluster: KubeCluster, prefix: str = "", namespace: str = NS) -> list[Obj]:
    return [p for p in cluster.store.list("Pod", namespace) if p["metadata"]["name"].startswith(prefix)]


def events(cluster: KubeCluster, reason: str, namespace: str = NS) -> list[Obj]:
    return [e for e in cluster.store.list("Event", namespace) if e["reason"] == reason]


def cstatus(pod: Obj, name: str = "main") -> Obj:
    return next(c for c in pod["status"]["containerStatuses"] if c["name"] == name)
