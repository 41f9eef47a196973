"""The app wherever it is deployed: one ``AppModel`` per namespace its workloads run in.

A cluster runs whatever is applied to it: a second copy of the app's manifests in another namespace
(a parallel episode's namespace set, or an agent's own copy) is a second app, with its own traffic,
telemetry, logs, faults and state. The twin installs the app in the namespace of its ``app.yaml``
(the first instance); another namespace gets an instance of its own as soon as one of the app's
workloads is deployed there with the image the app's manifests give it, and loses it with the
namespace. Every instance reads only its namespace; the machines (idle containers, the OOM killer,
cAdvisor) and the container runtime are the cluster's, shared by all.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

from itbench_gym.backends.sim.exporters.cadvisor import ContainerUsage
from itbench_gym.backends.sim.exporters.scrape import PodEndpoint
from itbench_gym.spec.relocate import relocate_objects

from . import logs as logmod
from .cluster_view import ClusterLike, ClusterView, list_kind
from .model import AppModel, Sample
from .runtime import AppRuntime


def _workload_images(model: AppModel) -> frozenset[tuple[str, str, str]]:
    """(Deployment, container, image) of each of the app's services as its manifests deploy them."""
    spec = model.spec
    wanted = {(s.workload, s.container) for s in spec.services.values()}
    out = set()
    for obj in model.manifests_read_only():
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "Deployment" or meta.get("namespace") != spec.namespace:
            continue
        for c in ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
            if (meta.get("name"), c.get("name")) in wanted:
                out.add((str(meta["name"]), str(c["name"]), str(c.get("image", ""))))
    return frozenset(out)


def _runs_the_app(deployment: dict[str, Any], signature: frozenset[tuple[str, str, str]]) -> bool:
    name = deployment["metadata"]["name"]
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    return any((name, c.get("name"), c.get("image", "")) in signature for c in containers)


class AppFleet:
    """Every instance of one app in the twin (see the module doc); ``primary`` is the installed one."""

    def __init__(self, primary: AppModel) -> None:
        self.primary = primary
        self._others: dict[str, AppModel] = {}
        self._signature = _workload_images(primary)
        self._runtime = AppRuntime(primary.spec, self.view_of, primary.manifests_read_only())

    # -- the instances ---------------------------------------------------------------------------
    def runtime(self) -> AppRuntime:
        """The cluster's container runtime: it knows the app's images in every namespace."""
        return self._runtime

    def instances(self) -> list[AppModel]:
        """The installed instance first, then the others by namespace."""
        return [self.primary, *(self._others[ns] for ns in sorted(self._others))]

    def instance(self, namespace: str) -> AppModel | None:
        return self.primary if namespace == self.primary.spec.namespace else self._others.get(namespace)

    def view_of(self, namespace: str) -> ClusterView | bool:
        model = self.instance(namespace)
        return model.view_of(namespace) if model is not None else False

    def _seed_of(self, namespace: str, seed: int) -> int:
        """Another instance's stream: its namespace mixed into the twin's seed (never the first one's draws)."""
        return zlib.crc32(f"{seed}/{namespace}".encode())

    def _add(self, namespace: str) -> AppModel:
        first = self.primary
        spec = replace(first.spec, namespace=namespace)
        model = AppModel(spec, relocate_objects(first.manifests(), {first.spec.namespace: namespace}),
                         self._seed_of(namespace, first.seed), machines=first.machines)
        self._others[namespace] = model
        return model

    def _discover(self, cluster: ClusterLike) -> None:
        """New instances where the app's workloads appeared; none left in a deleted namespace."""
        names = {n["metadata"]["name"] for n in list_kind(cluster.store, "Namespace")}
        for gone in [ns for ns in self._others if ns not in names]:
            del self._others[gone]
        for d in list_kind(cluster.store, "Deployment"):
            ns = d["metadata"].get("namespace", "")
            if ns in names and self.instance(ns) is None and _runs_the_app(d, self._signature):
                self._add(ns)

    # -- one tick --------------------------------------------------------------------------------
    def tick(self, t: float, dt: float, cluster: ClusterLike, *, expose: bool = True) -> list[Sample]:
        """Every instance's step, then the machines once over all of them (``AppModel.tick`` for many)."""
        self._discover(cluster)
        usage: list[ContainerUsage] = []
        modelled: set[tuple[str, str]] = set()
        node_ips: dict[str, str] = {}
        for model in self.instances():
            usage += model.step(t, dt, cluster)
            modelled |= model.modelled()
            if expose:
                node_ips = {**model.node_ips(), **node_ips}
        return self.primary.machines.settle(cluster, usage, modelled, self.primary.stresses(), dt, node_ips if expose else None)

    def exposed(self) -> dict[PodEndpoint, list[list[Sample]]]:
        out: dict[PodEndpoint, list[list[Sample]]] = {}
        for model in self.instances():
            out.update(model.exposed())
        return out

    def reseed(self, seed: int) -> None:
        self.primary.reseed(seed)
        for ns, model in self._others.items():
            model.reseed(self._seed_of(ns, seed))

    # -- logs ------------------------------------------------------------------------------------
    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        model = self.instance(namespace)
        return model.log_lines(namespace, pod, container, start, end) if model is not None else []

    def container_log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        model = self.instance(namespace)
        return model.container_log_lines(namespace, pod, container, start, end) if model is not None else []

    def log_streams(self, start: float, end: float) -> list[logmod.StreamInfo]:
        return [s for model in self.instances() for s in model.log_streams(start, end)]

    # -- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> object:
        return self.primary.snapshot(), tuple((ns, self._others[ns].snapshot()) for ns in sorted(self._others))

    def restore(self, snap: object) -> None:
        if not isinstance(snap, tuple) or len(snap) != 2:
            raise TypeError("restore() takes what snapshot() returned")
        first, others = snap
        self.primary.restore(first)
        kept = {ns for ns, _ in others}
        for gone in [ns for ns in self._others if ns not in kept]:
            del self._others[gone]
        for ns, state in others:
            (self._others.get(ns) or self._add(ns)).restore(state)
