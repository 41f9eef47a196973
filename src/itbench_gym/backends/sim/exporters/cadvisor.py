"""cAdvisor (kubelet ``/metrics/cadvisor``) container metrics from the usage the app model sets.

CPU is a cumulative counter per container *instance*: a restarted container is a new cgroup and
starts again from zero, as on a real node.
"""

from __future__ import annotations

from dataclasses import dataclass

Sample = tuple[dict[str, str], float]


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

    def samples(self, usage: list[ContainerUsage], node_ips: dict[str, str]) -> list[Sample]:
        out: list[Sample] = []
        for u in usage:
            lbl = {
                "job": "kubelet", "metrics_path": "/metrics/cadvisor", "instance": f"{node_ips.get(u.node, u.node)}:10250",
                "node": u.node, "namespace": u.namespace, "pod": u.pod, "container": u.container, "image": u.image,
                "name": u.instance_id, "id": f"/kubepods/burstable/pod{u.pod_uid}/{u.instance_id}",
            }
            out.append(({"__name__": "container_cpu_usage_seconds_total", **lbl, "cpu": "total"}, self.cpu_seconds.get(u.instance_id, 0.0)))
            out.append(({"__name__": "container_memory_working_set_bytes", **lbl}, u.memory_bytes))
            usage_bytes = u.memory_bytes * 1.08  # working set plus reclaimable page cache
            if u.memory_limit > 0:
                usage_bytes = min(usage_bytes, u.memory_limit)  # the cgroup cannot hold more than its limit
            out.append(({"__name__": "container_memory_usage_bytes", **lbl}, usage_bytes))
            out.append(({"__name__": "container_memory_rss", **lbl}, u.memory_bytes * 0.92))
            out.append(({"__name__": "container_spec_memory_limit_bytes", **lbl}, u.memory_limit))
            if u.cpu_limit > 0:
                out.append(({"__name__": "container_spec_cpu_quota", **lbl}, u.cpu_limit * 100000.0))
                periods, throttled, seconds = self.cfs.get(u.instance_id, (0.0, 0.0, 0.0))
                out.append(({"__name__": "container_cpu_cfs_periods_total", **lbl}, periods))
                out.append(({"__name__": "container_cpu_cfs_throttled_periods_total", **lbl}, throttled))
                out.append(({"__name__": "container_cpu_cfs_throttled_seconds_total", **lbl}, seconds))
            out.append(({"__name__": "container_spec_cpu_period", **lbl}, 100000.0))
            key = f"{u.namespace}/{u.pod}/{u.container}"
            out.append(({"__name__": "container_oom_events_total", **lbl}, self.oom_events.get(key, 0.0)))
        return out

    def snapshot(self) -> tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float, float]]]:
        return dict(self.cpu_seconds), dict(self.oom_events), dict(self.cfs)

    def restore(self, snap: tuple[dict[str, float], dict[str, float], dict[str, tuple[float, float, float]]]) -> None:
        self.cpu_seconds, self.oom_events, self.cfs = dict(snap[0]), dict(snap[1]), dict(snap[2])

