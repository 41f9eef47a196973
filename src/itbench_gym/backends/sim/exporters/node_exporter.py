"""node-exporter: each node's CPU, memory, load, filesystem, network and disk from the cluster's usage.

The CPU the node's containers and system daemons use (what the model sets, as metrics-server sums
it per node) drives the counters: busy time split between modes, load averages as the kernel's
exponentially damped run-queue length, bytes moved in proportion to the work done. Capacity comes
from the Node object, host facts from ``node_exporter.yaml``. Counters live per node and restart
from zero when the node object is replaced (a reboot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import parse_quantity
from itbench_gym.backends.sim.kube.nodes import KERNEL_BUILD, uname_machine
from itbench_gym.lang import yamltext

from .kube_state import _ts

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]
DATA = Path(__file__).with_name("node_exporter.yaml")
MODES = ("idle", "iowait", "irq", "nice", "softirq", "steal", "system", "user")
#: Linux's load-average damping periods (kernel/sched/loadavg.c: 1, 5 and 15 minutes).
LOAD_PERIODS = ((1, 60.0), (5, 300.0), (15, 900.0))


@dataclass
class _NodeState:
    uid: str
    cpu: dict[tuple[int, str], float] = field(default_factory=dict)
    load: dict[int, float] = field(default_factory=dict)
    net_bytes: float = 0.0
    disk_write: float = 0.0
    disk_io_time: float = 0.0
    majfault: float = 0.0
    last: float | None = None
    #: the node's label dicts by their items, the same dict each scrape (the scrape cache finds a series
    #: by its dict's identity)
    labels: dict[tuple[tuple[str, str], ...], dict[str, str]] = field(default_factory=dict)

    def copy(self) -> _NodeState:
        """The counters copied; the label dicts shared (they are never changed)."""
        return _NodeState(self.uid, dict(self.cpu), dict(self.load), self.net_bytes, self.disk_write, self.disk_io_time,
                          self.majfault, self.last, self.labels)


def _load_data() -> dict[str, Any]:
    doc = yamltext.load(DATA.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{DATA}: expected a mapping")
    return doc


class NodeExporter:
    """Per-node counters, advanced when a node is scraped."""

    def __init__(self) -> None:
        self.data = _load_data()
        self._nodes: dict[str, _NodeState] = {}

    def collect(self, node: Obj, now: float, cpu_used: float, mem_used: float, pods: int) -> list[Sample]:
        d = self.data
        meta, status = node["metadata"], node.get("status") or {}
        name, uid = meta["name"], str(meta.get("uid", ""))
        cap = status.get("capacity") or {}
        cores = max(1, int(parse_quantity(cap.get("cpu", "1"))))
        mem_total = parse_quantity(cap.get("memory", "0"))
        st = self._nodes.get(name)
        if st is None or st.uid != uid:
            st = self._nodes[name] = _NodeState(uid)
        dt = 0.0 if st.last is None else max(0.0, now - st.last)
        st.last = now
        busy = min(float(cores), max(0.0, cpu_used))
        shares = d["cpu_mode_shares"]
        for cpu in range(cores):
            per_busy = busy / cores
            for mode in MODES:
                inc = (1.0 - per_busy * (1.0 + shares["iowait"])) if mode == "idle" else per_busy * shares.get(mode, 0.0)
                st.cpu[(cpu, mode)] = st.cpu.get((cpu, mode), 0.0) + max(0.0, inc) * dt
        for minutes, period in LOAD_PERIODS:
            prev = st.load.get(minutes, busy)
            st.load[minutes] = busy + (prev - busy) * math.exp(-dt / period) if dt else prev
        net, disk = d["network"], d["disk"]
        st.net_bytes += (net["base_bytes_per_s"] + net["bytes_per_cpu_second"] * busy) * dt
        st.disk_write += (disk["base_write_bytes_per_s"] + disk["write_bytes_per_cpu_second"] * busy) * dt
        util = min(1.0, disk["base_utilisation"] + disk["utilisation_per_busy_core"] * busy)
        st.disk_io_time += util * dt
        st.majfault += d["major_page_faults_per_s"] * dt

        out: list[Sample] = []
        for (cpu, mode), v in st.cpu.items():
            out.append(({"__name__": "node_cpu_seconds_total", "cpu": str(cpu), "mode": mode}, v))
        cached = min(mem_used * d["page_cache_ratio"], max(0.0, mem_total - mem_used) * 0.5)
        buffers = mem_used * d["buffers_ratio"]
        free = max(0.0, mem_total - mem_used - cached - buffers - d["slab_bytes"])
        available = max(0.0, mem_total - mem_used - d["kernel_reserved_bytes"])
        for field_name, v in (("MemTotal", mem_total), ("MemFree", free), ("MemAvailable", available), ("Cached", cached),
                              ("Buffers", buffers), ("Slab", float(d["slab_bytes"])), ("SwapTotal", 0.0), ("SwapFree", 0.0)):
            out.append(({"__name__": f"node_memory_{field_name}_bytes"}, v))
        for minutes, _ in LOAD_PERIODS:
            out.append(({"__name__": f"node_load{minutes}"}, st.load[minutes]))
        fs = d["root_filesystem"]
        size = parse_quantity(cap.get("ephemeral-storage", "0"))
        fl = {"device": fs["device"], "fstype": fs["fstype"], "mountpoint": fs["mountpoint"], "device_error": ""}
        avail = size * (1.0 - fs["used_ratio"])
        for metric, v in (("size_bytes", size), ("avail_bytes", avail), ("free_bytes", avail), ("files", float(fs["inodes"])),
                          ("files_free", fs["inodes"] * (1.0 - fs["inodes_used_ratio"])), ("readonly", 0.0), ("device_error", 0.0)):
            out.append(({"__name__": f"node_filesystem_{metric}", **fl}, v))
        dev = {"device": net["device"]}
        packets = st.net_bytes * net["packets_per_byte"]
        for direction, share in (("receive", 0.55), ("transmit", 0.45)):
            out.append(({"__name__": f"node_network_{direction}_bytes_total", **dev}, st.net_bytes * share))
            out.append(({"__name__": f"node_network_{direction}_packets_total", **dev}, packets * share))
            out.append(({"__name__": f"node_network_{direction}_errs_total", **dev}, 0.0))
            out.append(({"__name__": f"node_network_{direction}_drop_total", **dev}, 0.0))
        out.append(({"__name__": "node_network_up", **dev}, 1.0))
        out.append(({"__name__": "node_network_carrier_changes_total", **dev}, 1.0))
        disk_l = {"device": disk["device"]}
        for metric, v in (("written_bytes_total", st.disk_write), ("read_bytes_total", st.disk_write * disk["read_ratio"]),
                          ("io_time_seconds_total", st.disk_io_time), ("io_time_weighted_seconds_total", st.disk_io_time * 1.5),
                          ("writes_completed_total", st.disk_write / 16384.0),
                          ("reads_completed_total", st.disk_write * disk["read_ratio"] / 16384.0)):
            out.append(({"__name__": f"node_disk_{metric}", **disk_l}, v))
        info = status.get("nodeInfo") or {}
        out.append(({"__name__": "node_uname_info", "nodename": name, "release": str(info.get("kernelVersion", "")),
                     "machine": uname_machine(str(info.get("architecture", "amd64"))),
                     "sysname": "Linux", "domainname": "(none)", "version": KERNEL_BUILD}, 1.0))
        boot = _ts(meta.get("creationTimestamp"))
        if boot is not None:
            out.append(({"__name__": "node_boot_time_seconds"}, boot))
        out.append(({"__name__": "node_time_seconds"}, now))
        timex = d["timex"]
        out.append(({"__name__": "node_timex_offset_seconds"}, float(timex["offset_seconds"])))
        out.append(({"__name__": "node_timex_maxerror_seconds"}, float(timex["maxerror_seconds"])))
        out.append(({"__name__": "node_timex_sync_status"}, 1.0))
        fd, ct = d["filefd"], d["conntrack"]
        out.append(({"__name__": "node_filefd_allocated"}, float(fd["base_allocated"] + fd["per_pod"] * pods)))
        out.append(({"__name__": "node_filefd_maximum"}, float(fd["maximum"])))
        out.append(({"__name__": "node_nf_conntrack_entries"}, float(ct["base_entries"] + ct["per_pod"] * pods)))
        out.append(({"__name__": "node_nf_conntrack_entries_limit"}, float(ct["limit"])))
        out.append(({"__name__": "node_vmstat_pgmajfault"}, st.majfault))
        return [(st.labels.setdefault(tuple(labels.items()), labels), v) for labels, v in out]

    def snapshot(self) -> dict[str, _NodeState]:
        return {k: v.copy() for k, v in self._nodes.items()}

    def restore(self, snap: dict[str, _NodeState]) -> None:
        self._nodes = {k: v.copy() for k, v in snap.items()}
