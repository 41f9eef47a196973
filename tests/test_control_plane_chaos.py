"""Chaos Mesh on the control plane: etcd's disk under IOChaos (ITBench library scenario 55: the member's
WAL syncs and backend commits, the etcd alerts they drive, the wait the API server's writes inherit)
and StressChaos in the API server's container (scenario 54)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import ShopTwin, chaos_schedule
from itbench_gym.backends.sim.kube.etcd import BACKEND_COMMIT, WAL_FSYNC, _Delay, convolve, mean
from itbench_gym.spec import FaultRef

COMMIT_P99 = f'histogram_quantile(0.99, rate({BACKEND_COMMIT}_bucket{{job=~".*etcd.*"}}[5m]))'
FSYNC_P99 = f'histogram_quantile(0.99, rate({WAL_FSYNC}_bucket{{job=~".*etcd.*"}}[5m]))'


def _io_chaos(**spec: Any) -> FaultRef:
    """ITBench 55's Schedule: IOChaos latency on etcd's data dir, 5 minutes at a time."""
    io = {"action": "latency", "delay": "200ms", "duration": "5m", "mode": "all", "percent": 50,
          "selector": {"labelSelectors": {"component": "etcd"}, "namespaces": ["kube-system"]}, "volumePath": "/var/lib/etcd", **spec}
    return chaos_schedule("etcd-io", "IOChaos", io)


def test_delays_combine_per_operation() -> None:
    half = ((0.0, 0.5), (0.2, 0.5))
    two = convolve([half, half])
    assert two == ((0.0, 0.25), (0.2, 0.5), (0.4, 0.25)) and mean(two) == pytest.approx(0.2)
    delay = _Delay("/var/lib/etcd", "", frozenset({"fsync"}), 0.2, 0.5)
    assert delay.covers("/var/lib/etcd/member/wal/x.wal", "fsync")
    assert not delay.covers("/var/lib/etcd/member/wal/x.wal", "write")
    assert not delay.covers("/var/lib/etcdx/member/snap/db", "fsync")
    assert not _Delay("/var/lib/etcd", "*.wal", frozenset(), 0.2, 0.5).covers("/var/lib/etcd/member/snap/db", "fsync")


def test_latency_on_the_data_dir_slows_commits_and_writes_and_fires_the_commit_alert(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    etcd, apiload = shop_twin.backend.twin.cluster.etcd, shop_twin.backend.twin.cluster.apiload
    put = apiload._service("PUT", 0)
    assert shop_twin.value(COMMIT_P99) < 0.01 and etcd.write_delay == 0.0
    shop_twin.inject(_io_chaos())
    shop_twin.backend.advance(1200)
    # a WAL save is a write and a sync, each delayed 200 ms half the time: 200 ms more on average
    assert etcd.write_delay == pytest.approx(0.2)
    assert apiload._service("PUT", 0) == pytest.approx(put + 0.2) and apiload._service("GET", 0) < put
    assert shop_twin.value(COMMIT_P99) > 0.25
    assert 0.2 < shop_twin.value(FSYNC_P99) < 0.5  # one sync: above 200 ms, below the fsync alert
    firing = shop_twin.firing()
    assert "etcdHighCommitDurations" in firing and "etcdHighFsyncDurations" not in firing


@pytest.mark.parametrize("spec", [{"methods": ["read"]}, {"volumePath": "/var/lib/kubelet"},
                                  {"selector": {"labelSelectors": {"component": "kube-apiserver"}, "namespaces": ["kube-system"]}}],
                         ids=["reads-only", "other-volume", "other-pod"])
def test_latency_that_misses_the_wal_and_the_backend_changes_nothing(shop_twin: ShopTwin, spec: dict[str, Any]) -> None:
    shop_twin.reset()
    shop_twin.inject(_io_chaos(**spec))
    shop_twin.backend.advance(600)
    assert shop_twin.backend.twin.cluster.etcd.write_delay == 0.0
    assert shop_twin.value(COMMIT_P99) < 0.01


def test_memory_stress_in_the_api_servers_container_holds_its_size_there(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    working_set = 'sum(container_memory_working_set_bytes{namespace="kube-system",container="kube-apiserver"})'
    before = shop_twin.value(working_set)
    stress = {"duration": "55s", "mode": "one", "selector": {"labelSelectors": {"component": "kube-apiserver"}, "namespaces": ["kube-system"]},
              "stressors": {"memory": {"size": "6GB", "workers": 4}, "cpu": {"workers": 2, "load": 50}}}
    shop_twin.inject(chaos_schedule("api-stress", "StressChaos", stress))
    shop_twin.backend.advance(90)
    assert shop_twin.value(working_set) - before == pytest.approx(6e9, rel=0.01)
    cpu = 'sum(rate(container_cpu_usage_seconds_total{namespace="kube-system",container="kube-apiserver"}[1m]))'
    assert shop_twin.value(cpu) > 1.0  # two workers at half load beside its own 250m
    restarted = [p["metadata"]["name"] for p in shop_twin.store.list("Pod", None)
                 if any(c.get("restartCount") for c in (p.get("status") or {}).get("containerStatuses") or [])]
    assert restarted == []  # the kind host (16 GB) holds the 6 GB
