"""cAdvisor (kubelet ``/metrics/cadvisor``) container metrics from the usage the app model sets.

CPU is a cumulative counter per container *instance*: a restarted container is a new cgroup and
starts again from zero, as on a real node.
"""

from __future__ import annotations

from dataclasses import dataclass

Sample = tuple[dict[str, str], float]
#: Every series name a container may have (the CFS ones only with a CPU limit).
METRICS = ("container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_usage_bytes",
           "container_memory_rss", "container_spec_memory_limit_bytes", "container_spec_cpu_quota",
           "container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
           "container_cpu_cfs_throttled_seconds_total", "container_spec_cpu_period", "container_oom_events_total")


@dataclass(frozen=True)
class ContainerUsage:
    namespace: str
    pod: str
    pod_uid: str
    container: str
    image: str
    node: str
    instance_id: str
    cpu_cores: float
    memory_bytes: float
    memory_limit: float
    cpu_limit: float
    #: CFS bandwidth counters' rates (only a container with a CPU limit has a quota to run out of).
    cfs_periods_per_s: float = 0.0
    cfs_throttled_periods_per_s: float = 0.0
    cfs_throttled_seconds_per_s: float = 0.0


class Cadvisor:
    def __init__(self) -> None:
        self.cpu_seconds: dict[str, float] = {}
        self.oom_events: dict[str, float] = {}
        #: instance -> (periods, throttled periods, throttled seconds), cumulative like the cgroup's cpu.stat.
        self.cfs: dict[str, tuple[float, float, float]] = {}
        self._labels: dict[tuple[str, ...], dict[str, dict[str, str]]] = {}

    def observe(self, usage: list[ContainerUsage], dt: float) -> None:
        for u in usage:
            self.cpu_seconds[u.instance_id] = self.cpu_seconds.get(u.instance_id, 0.0) + u.cpu_cores * dt
            if u.cpu_limit > 0:
                p, tp, ts = self.cfs.get(u.instance_id, (0.0, 0.0, 0.0))
                self.cfs[u.instance_id] = (p + round(u.cfs_periods_per_s * dt), tp + round(u.cfs_throttled_periods_per_s * dt),
                                           ts + u.cfs_throttled_seconds_per_s * dt)

    def record_oom(self, namespace: str, pod: str, container: str) -> None:
        key = f"{namespace}/{pod}/{container}"
        self.oom_events[key] = self.oom_events.get(key, 0.0) + 1

    def _label_sets(self, u: ContainerUsage, instance: str) -> dict[str, dict[str, str]]:
        """Each metric's labels for one container instance, built once and shared between scrapes (read-only)."""
        key = (u.namespace, u.pod, u.pod_uid, u.container, u.image, u.node, u.instance_id, instance)
        sets = self._labels.get(key)
        if sets is None:
            lbl = {
                "job": "kubelet", "metrics_path": "/metrics/cadvisor", "instance": instance,
                "node": u.node, "namespace": u.namespace, "pod": u.pod, "container": u.container, "image": u.image,
                "name": u.instance_id, "id": f"/kubepods/burstable/pod{u.pod_uid}/{u.instance_id}",
            }
            sets = self._labels[key] = {m: {"__name__": m, **lbl} for m in METRICS}
            sets["container_cpu_usage_seconds_total"]["cpu"] = "total"
        return sets

    def samples(self, usage: list[ContainerUsage], node_ips: dict[str, str]) -> list[Sample]:
        out: list[Sample] = []
        for u in usage:
            lbl = self._label_sets(u, f"{node_ips.get(u.node, u.node)}:10250")
            out.append((lbl["container_cpu_usage_seconds_total"], self.cpu_seconds.get(u.instance_id, 0.0)))
            out.append((lbl["container_memory_working_set_bytes"], u.memory_bytes))
            usage_bytes = u.memory_bytes * 1.08  # working set plus reclaimable page cache
            if u.memory_limit > 0:
                usage_bytes = min(usage_bytes, u.memory_limit)  # the cgroup cannot hold more than its limit
            out.append((lbl["container_memory_usage_bytes"], usage_bytes))
            out.append((lbl["container_memory_rss"], u.memory_bytes * 0.92))
            out.append((lbl["container_spec_memory_limit_bytes"], u.memory_limit))
            if u.cpu_limit > 0:
                out.append((lbl["container_spec_cpu_quota"], u.cpu_limit * 100000.0))
                periods, throttled, seconds = self.cfs.get(u.instance_id, (0.0, 0.0, 0.0))
                out.append((lbl["container_cpu_cfs_periods_total"], periods))
                out.append((lbl["container_cpu_cfs_throttled_periods_total"], throttled))
                out.append((lbl["container_cpu_cfs_throttled_seconds_total"], seconds))
            out.append((lbl["container_spec_cpu_period"], 100000.0))
            key = f"{u.namespace}/{u.pod}/{u.container}"
            out.append((lbl["container_oom_events_total"], self.oom_events.get(key, 0.0)))
        if len(self._labels) > 2 * len(usage) + 64:
            live = {(u.namespace, u.pod, u.pod_uid, u.container, u.image, u.node, u.instance_id) for u in usage}
            self._labels = {k: v for k, v in self._labels.items() if k[:7] in live}
        return out

    def snapshot(self) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float, float]]]:
        return dict(self.cpu_seconds), dict(self.oom_events), dict(self.cfs)

    def restore(self, snap: tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float, float]]]) -> None:
        self.cpu_seconds, self.oom_events, self.cfs = dict(snap[0]), dict(snap[1]), dict(snap[2])

