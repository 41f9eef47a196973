"""What the nodes do with the containers' usage, once a tick, whatever app instances run on them.

Containers no app model drives (the cluster's system and observability components, the collector)
idle at their image's idle use or their requests, and StressChaos adds its workers to them; the
kernel's OOM killer picks victims on a node whose memory is exhausted; the kubelets' cAdvisor
counts every container. Each app instance (``fleet.py``) reports its own containers' usage first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any

from itbench_gym.backends.sim.chaos.kinds import injected_pods
from itbench_gym.backends.sim.exporters import Cadvisor
from itbench_gym.backends.sim.exporters.cadvisor import ContainerUsage
from itbench_gym.backends.sim.kube import oom

from .cluster_view import ClusterLike, Derived, list_kind, parse_quantity
from .cpu import BACKGROUND_WAKEUPS_PER_PERIOD, CFS_PERIOD_S
from .processes import only_sleeps

Sample = tuple[dict[str, str], float]
MI = 1024.0 * 1024.0


def stress_bytes(size: str, limit: float) -> float:
    """A memory stressor's ``size``: bytes, or a percentage of the container's limit (the node's
    memory, 16 GiB here, without one)."""
    if size.endswith("%"):
        return float(size[:-1]) / 100.0 * (limit or 16 * 1024 * MI)
    units = {"GB": 1e9, "MB": 1e6, "KB": 1e3, "GiB": 2**30, "MiB": 2**20, "KiB": 2**10, "B": 1.0}
    for u, mult in units.items():
        if size.endswith(u):
            return float(size[: -len(u)]) * mult
    return float(size or 0)


#: Bytes the install gives a container of an image in a namespace, None when it gives none.
InstalledMemory = Callable[[str, str, str], "float | None"]


def _idle_usage(pod: dict[str, Any], idle_of: Callable[[str], tuple[float, float] | None],
                installed_of: InstalledMemory) -> tuple[tuple[str, ContainerUsage], ...]:
    """The running containers of a running pod at what their image's process uses at idle, else at
    their CPU request and the memory the install gave them (a later edit of the limit does not shrink
    the process), else their requests (no CPU for one that only sleeps), each with the uid the model
    knows the pod by."""
    meta, status = pod["metadata"], pod.get("status") or {}
    if status.get("phase") != "Running":
        return ()
    running = {c.get("name") for c in status.get("containerStatuses") or [] if "running" in (c.get("state") or {})}
    out: list[tuple[str, ContainerUsage]] = []
    for c in pod["spec"].get("containers") or []:
        if c.get("name") not in running:
            continue
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        sleeps = only_sleeps([*(c.get("command") or []), *(c.get("args") or [])])
        idle = idle_of(str(c.get("image", "")))
        if idle is not None:
            cpu, mem = idle
        else:
            cpu = parse_quantity(requests.get("cpu", limits.get("cpu", "5m")))
            installed = installed_of(meta["namespace"], str(c.get("name", "")), str(c.get("image", "")))
            mem = installed if installed is not None else parse_quantity(requests.get("memory", limits.get("memory", "32Mi")))
        cpu = 0.0 if sleeps else cpu
        restarts = next((int(s.get("restartCount", 0)) for s in status.get("containerStatuses") or [] if s.get("name") == c["name"]), 0)
        uid = meta.get("uid", meta["name"])
        out.append((meta.get("uid", ""), ContainerUsage(
            meta["namespace"], meta["name"], uid, c["name"], c.get("image", ""), pod["spec"].get("nodeName", ""),
            f"{uid[:12]}-{c['name']}-{restarts}", cpu, mem, parse_quantity(limits["memory"]) if "memory" in limits else 0.0,
            parse_quantity(limits["cpu"]) if "cpu" in limits else 0.0,
            (1.0 - math.exp(-BACKGROUND_WAKEUPS_PER_PERIOD)) / CFS_PERIOD_S if "cpu" in limits else 0.0)))
    return tuple(out)


class Machines:
    """The node-level part of a tick (see the module doc); ``cadvisor`` also records the OOM kills
    the app instances make at a container's limit."""

    def __init__(self, idle_of: Callable[[str], tuple[float, float] | None], installed_of: InstalledMemory) -> None:
        self.cadvisor = Cadvisor()
        self._idle_usage = Derived(partial(_idle_usage, idle_of=idle_of, installed_of=installed_of))

    def settle(self, cluster: ClusterLike, app_usage: list[ContainerUsage], modelled: set[tuple[str, str]],
               stresses: list[dict[str, Any]], dt: float, node_ips: dict[str, str] | None) -> list[Sample]:
        """Add the idle containers to the apps' usage, run the OOM killer, count it all in cAdvisor;
        the kubelets' series when ``node_ips`` is given (a tick Prometheus scrapes), else none."""
        usage = self._machine_oom(cluster, app_usage + self._steady_usage(cluster, modelled, stresses))
        self.cadvisor.observe(usage, dt)
        return self.cadvisor.samples(usage, node_ips) if node_ips is not None else []

    def _machine_oom(self, cluster: ClusterLike, usage: list[ContainerUsage]) -> list[ContainerUsage]:
        """Containers without a memory limit can exhaust their machine: the kernel kills by badness.
        The usage of the containers that survive (a killed one reports nothing)."""
        uses = [oom.Use(u.namespace, u.pod, u.container, u.node, u.memory_bytes) for u in usage]
        pods: dict[tuple[str, str], dict[str, Any]] = {}

        def pod(namespace: str, name: str) -> dict[str, Any] | None:
            if not pods:
                pods.update(((p["metadata"].get("namespace", ""), p["metadata"]["name"]), p) for p in list_kind(cluster.store, "Pod"))
            return pods.get((namespace, name))

        killed = set()
        for u in oom.victims(uses, list_kind(cluster.store, "Node"), pod):
            cluster.kill_container(u.namespace, u.pod, u.container, reason="OOMKilled", exit_code=137)
            self.cadvisor.record_oom(u.namespace, u.pod, u.container)
            killed.add((u.namespace, u.pod, u.container))
        return [u for u in usage if (u.namespace, u.pod, u.container) not in killed] if killed else usage

    def _steady_usage(self, cluster: ClusterLike, modelled: set[tuple[str, str]], stresses: list[dict[str, Any]]) -> list[ContainerUsage]:
        """Containers no app model describes (``modelled``: (pod uid, container)) at their idle use."""
        out: list[ContainerUsage] = []
        for running in self._idle_usage.of(list_kind(cluster.store, "Pod")):
            for uid, u in running:
                if (uid, u.container) in modelled:
                    continue
                u = _stressed(u, stresses) if stresses else u
                if u.memory_limit and u.memory_bytes > u.memory_limit:  # the kernel kills at the limit
                    cluster.kill_container(u.namespace, u.pod, u.container, reason="OOMKilled", exit_code=137)
                    self.cadvisor.record_oom(u.namespace, u.pod, u.container)
                    continue
                cluster.set_usage(u.namespace, u.pod, u.container, cpu_cores=u.cpu_cores, memory_bytes=u.memory_bytes)
                out.append(u)
        return out

    def snapshot(self) -> object:
        return self.cadvisor.snapshot()

    def restore(self, snap: Any) -> None:
        self.cadvisor.restore(snap)


def _stressed(u: ContainerUsage, stresses: Iterable[dict[str, Any]]) -> ContainerUsage:
    """A container the behaviour model does not describe under the StressChaos experiments injected
    into its pod: stress-ng's CPU workers in its cgroup (throttled at its CPU limit) and the memory its
    workers hold."""
    cpu, mem = u.cpu_cores, u.memory_bytes
    for obj in stresses:
        if f"{u.namespace}/{u.pod}" not in injected_pods(obj):
            continue
        names = (obj.get("spec") or {}).get("containerNames")
        if names and u.container not in names:
            continue
        stress = (obj.get("spec") or {}).get("stressors") or {}
        workers = stress.get("cpu") or {}
        cpu += float(workers.get("workers", 0)) * float(workers.get("load", 100)) / 100.0
        if stress.get("memory"):
            mem += stress_bytes(str(stress["memory"].get("size", "0")), u.memory_limit)
    if u.cpu_limit:
        cpu = min(cpu, u.cpu_limit)
    return replace(u, cpu_cores=cpu, memory_bytes=mem) if (cpu, mem) != (u.cpu_cores, u.memory_bytes) else u
