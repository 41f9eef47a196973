"""The scrape cache: a long-lived scraper stores exactly what a scrape without any cache would.

Each scrape looks series up by what the exporters expose instead of merging labels and running
metricRelabelings again. These tests change what decides a series' final labels (a replaced pod,
edited metricRelabelings, a toggled honorLabels, a rewound store) and compare the twin's own
monitoring with a fresh one that has no cache.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from itbench_gym.backends.sim.exporters.monitoring import Monitoring
from itbench_gym.backends.sim.exporters.targets import DiscoveryWatch
from itbench_gym.backends.sim.promql.engine import Engine
from itbench_gym.backends.sim.tsdb import TSDB, Matcher, SampleBatch, SeriesRef, is_stale, make_labels
from itbench_gym.backends.sim.twin import SCRAPE_INTERVAL, Twin
from itbench_gym.paths import envs_dir

APP = envs_dir() / "astronomy-shop"
MON = "prometheus"


def _twin(seconds: float = 120.0) -> Twin:
    twin = Twin(APP, seed=5)
    twin.advance(seconds)
    return twin


def _cached_and_fresh(twin: Twin) -> tuple[list[tuple[dict[str, str], float]], list[tuple[dict[str, str], float]]]:
    """One scrape by the twin's monitoring and one by a new monitoring without a cache, of the same state."""
    t = twin.clock.now() + SCRAPE_INTERVAL
    twin.clock.set(t)
    twin.cluster.tick(t)
    samples = twin.model.tick(t, SCRAPE_INTERVAL, twin.cluster)
    usage, exposed = twin.cluster.usage().nodes, twin.model.exposed()
    cached, _ = twin.monitoring.scrape(t, samples, usage, exposed)
    fresh = Monitoring(twin.cluster.store, Engine(TSDB()), twin.cluster.apiload.samples, twin.cluster.etcd.samples)
    fresh.node_exporter = twin.monitoring.node_exporter  # counters already at t: a second scrape at t reads the same
    uncached, _ = fresh.scrape(t, samples, usage, exposed)
    return list(cached), list(uncached)


def _monitor(twin: Twin, name: str) -> dict[str, Any]:
    return next(m for m in twin.cluster.store.list("ServiceMonitor", MON) if m["metadata"]["name"] == name)


def _names(samples: list[tuple[dict[str, str], float]], job: str) -> set[str]:
    return {lb["__name__"] for lb, _ in samples if lb.get("job") == job}


def test_a_cached_scrape_equals_an_uncached_one() -> None:
    cached, uncached = _cached_and_fresh(_twin())
    assert cached == uncached
    assert len(cached) > 4000
    assert {lb["job"] for lb, _ in cached} >= {"kube-state-metrics", "node-exporter", "kubelet", "otel-collector"}
    assert any(lb["__name__"] == "traces_span_metrics_calls_total" for lb, _ in cached)


def test_a_replaced_exporter_pod_gets_series_under_its_new_name() -> None:
    twin = _twin()
    old = next(p["metadata"]["name"] for p in twin.cluster.store.list("Pod", MON)
               if p["metadata"]["name"].startswith("prometheus-kube-state-metrics-"))
    twin.cluster.store.delete("Pod", MON, old)
    twin.advance(120)
    cached, uncached = _cached_and_fresh(twin)
    assert cached == uncached
    pods = {lb.get("pod") for lb, _ in cached if lb.get("job") == "kube-state-metrics" and lb["__name__"] == "up"}
    assert len(pods) == 1 and old not in pods


def test_edited_metric_relabelings_and_honor_labels_take_effect_on_the_next_scrape() -> None:
    twin = _twin()
    monitor = _monitor(twin, "prometheus-prometheus-node-exporter")
    before, _ = _cached_and_fresh(twin)
    assert "node_load1" in _names(before, "node-exporter")
    monitor["spec"]["endpoints"][0]["metricRelabelings"] = [
        {"sourceLabels": ["__name__"], "regex": "node_load.*", "action": "drop"}]
    twin.cluster.store.update(monitor)
    cached, uncached = _cached_and_fresh(twin)
    assert cached == uncached
    assert "node_load1" not in _names(cached, "node-exporter") and "node_cpu_seconds_total" in _names(cached, "node-exporter")

    kubelet = _monitor(twin, "prometheus-kube-prometheus-kubelet")
    for ep in kubelet["spec"]["endpoints"]:
        ep["honorLabels"] = False
    twin.cluster.store.update(kubelet)
    cached, uncached = _cached_and_fresh(twin)
    assert cached == uncached
    assert any(lb.get("exported_namespace") == "otel-demo" for lb, _ in cached if lb["__name__"] == "container_cpu_usage_seconds_total")


def test_rewinding_the_store_does_not_reuse_series_ids_handed_out_after_the_snapshot() -> None:
    """After a restore the twin scrapes into the store as if it had never left the snapshot."""
    twin = _twin()
    snap = twin.snapshot()
    straight = _twin()
    twin.cluster.store.delete("Pod", MON, next(p["metadata"]["name"] for p in twin.cluster.store.list("Pod", MON)
                                                if p["metadata"]["name"].startswith("prometheus-kube-state-metrics-")))
    twin.advance(300)  # new series (the new pod's), ids the snapshot never had
    twin.restore(snap)
    twin.advance(300)
    straight.advance(300)
    assert len(_scraped(twin)) > 4000
    assert _scraped(twin) == _scraped(straight)


def _scraped(twin: Twin) -> list[tuple[tuple[tuple[str, str], ...], list[int], list[int]]]:
    """Every scraped series (not what rules write) with its samples' times and value bits."""
    scraped = [Matcher("__name__", "!~", ".*:.*|ALERTS.*")]
    return [(s.labels, s.ts.tolist(), s.vs.view(np.uint64).tolist()) for s in twin.tsdb.select_ms(scraped, 0, 2**62)]


def test_targets_are_discovered_again_after_a_rewind_hands_out_the_same_resource_versions() -> None:
    twin = _twin()
    snap = twin.snapshot()

    def drop(pattern: str) -> None:
        monitor = _monitor(twin, "prometheus-prometheus-node-exporter")
        monitor["spec"]["endpoints"][0]["metricRelabelings"] = [
            {"sourceLabels": ["__name__"], "regex": pattern, "action": "drop"}]
        twin.cluster.store.update(monitor)

    drop("node_load.*")
    first, _ = _cached_and_fresh(twin)
    twin.restore(snap)
    drop("node_filesystem.*")  # the same resourceVersion as the first edit
    cached, uncached = _cached_and_fresh(twin)
    assert cached == uncached
    assert "node_load1" in _names(cached, "node-exporter") and "node_load1" not in _names(first, "node-exporter")


def test_series_ids_are_not_reused_across_a_store_rewind() -> None:
    """A series first stored after a snapshot, then rewound away, must not write into the series that took its id."""
    twin = _twin()
    db = TSDB()
    mon = Monitoring(twin.cluster.store, Engine(db))
    usage = twin.cluster.usage().nodes
    t = twin.clock.now()
    (collector,) = twin.cluster.store.list("Pod", "otel-demo", label_selector="app.kubernetes.io/name=opentelemetry-collector")

    def scrape(*names: str) -> None:
        nonlocal t
        t += 30
        served = {("otel-demo", collector["metadata"]["name"], 8888): [[({"__name__": n}, t) for n in names]]}
        samples, jobs = mon.scrape(t, [], usage, served)
        db.append(t, samples, jobs)

    def configmap(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": MON}, "data": {}}

    scrape("a")
    snap = db.snapshot()
    twin.cluster.store.create(configmap("b"))
    scrape("a", "b")  # "b" and the configmap's series get ids the snapshot does not have
    db.restore(snap)
    twin.cluster.store.delete("ConfigMap", MON, "b")
    twin.cluster.store.create(configmap("c"))
    scrape("a", "c")  # ... which "c" and its configmap's series take
    twin.cluster.store.create(configmap("b"))
    scrape("a", "b")
    for name in ("b", "c"):
        (own,) = db.select({"__name__": name})
        info = db.select({"__name__": "kube_configmap_info", "configmap": name})
        assert len(info) == 1 and len(info[0].ts) == len(own.ts) == (1 if name == "b" else 2), name


def _up(job: str, inst: str) -> dict[str, str]:
    return {"__name__": "up", "job": job, "instance": inst}


def test_a_sample_batch_is_stored_like_the_same_samples_as_label_dicts() -> None:
    plain, batched = TSDB(), TSDB()
    refs = {inst: SeriesRef(make_labels(_up("a", inst))) for inst in ("1", "2", "3")}
    scrapes = [(0, ["1", "2", "3"]), (15, ["1", "3", "3"]), (30, ["2"])]  # a duplicate overwrites; "2" goes stale, comes back
    for t, insts in scrapes:
        plain.append(t, [(_up("a", i), float(t) + k) for k, i in enumerate(insts)], jobs=["a"])
        batch = SampleBatch(batched)
        for k, i in enumerate(insts):
            batch.add(refs[i], float(t) + k)
        batched.append(t, batch, jobs=["a"])
    got = [(s.labels, s.ts.tolist(), s.vs.view(np.uint64).tolist()) for s in batched.select("up")]
    assert got == [(s.labels, s.ts.tolist(), s.vs.view(np.uint64).tolist()) for s in plain.select("up")]
    (two,) = batched.select({"instance": "2"})
    assert is_stale(two.vs).tolist() == [False, True, False]
    (three,) = batched.select({"instance": "3"})
    assert three.vs.tolist()[1] == 17.0 and not math.isnan(three.vs[1])


def test_a_batch_made_before_a_restore_is_stored_by_its_labels() -> None:
    db = TSDB()
    a, b = SeriesRef(make_labels(_up("a", "1"))), SeriesRef(make_labels(_up("a", "2")))
    first = SampleBatch(db)
    first.add(a, 1.0)
    db.append(0, first)
    snap = db.snapshot()
    second = SampleBatch(db)
    second.add(b, 2.0)
    db.append(15, second)  # b gets an id the snapshot does not have
    pending = SampleBatch(db)
    pending.add(b, 3.0)
    db.restore(snap)
    db.append(30, pending)
    one, two = db.select("up")
    assert two.metric["instance"] == "2" and two.vs.tolist() == [3.0]
    assert one.vs[0] == 1.0 and is_stale(one.vs).tolist() == [False, True]  # not in the job's scrape at 30
    with pytest.raises(ValueError, match="out-of-order"):
        late = SampleBatch(db)
        late.add(a, 4.0)
        db.append(-15, late)


def test_a_run_list_handed_out_again_keeps_its_handles_and_values_and_a_new_list_its_own() -> None:
    from itbench_gym.backends.sim.exporters.scrape import DROPPED, SeriesCache

    resolved: list[dict[str, str]] = []

    def resolve(exposed: Any) -> Any:
        resolved.append(dict(exposed))
        return DROPPED if exposed["__name__"] == "dropped" else SeriesRef(make_labels(dict(exposed)))

    cache, tsdb = SeriesCache(resolve), TSDB()
    a, b, gone = {"__name__": "a"}, {"__name__": "b"}, {"__name__": "dropped"}
    run = [(a, 1.0), (gone, 2.0), (b, 3.0)]
    batches = []
    for samples in (run, run, [(a, 4.0), (gone, 5.0), (b, 6.0)]):
        batch = SampleBatch(tsdb)
        assert cache.feed([samples], batch) == 2
        batches.append([(dict(ref.labels)["__name__"], v) for ref, v in zip(batch.series, batch.values, strict=True)])
    assert batches == [[("a", 1.0), ("b", 3.0)], [("a", 1.0), ("b", 3.0)], [("a", 4.0), ("b", 6.0)]]
    assert [lb["__name__"] for lb in resolved] == ["a", "dropped", "b"]  # each label set resolved once


def test_a_restore_keeps_the_scrape_cache_of_the_series_that_remain(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewound store keeps the ids of its series: the scraper works out none of their labels again."""
    from itbench_gym.backends.sim.exporters import scrape

    twin = _twin()
    snap = twin.snapshot()
    twin.advance(120)
    twin.restore(snap)
    merged: list[Any] = []
    real = scrape.merge
    monkeypatch.setattr(scrape, "merge", lambda *args: merged.append(args) or real(*args))
    twin.advance(60)
    assert len(_scraped(twin)) > 4000 and len(merged) < 50, merged[:5]


def test_targets_are_discovered_again_only_when_what_discovery_reads_changes() -> None:
    twin = _twin()
    store, watch = twin.cluster.store, DiscoveryWatch()
    name = next(p["metadata"]["name"] for p in store.list("Pod", MON) if p["metadata"]["name"].startswith("prometheus-kube-state-metrics-"))

    def edit(kind: str, ns: str, obj_name: str, change: Any, subresource: str | None = None) -> tuple[Any, ...]:
        obj = store.get(kind, ns, obj_name)
        change(obj)
        store.update(obj, subresource=subresource)
        return watch.state(store)

    state = watch.state(store)
    # status the kubelet writes often that no target depends on: a restart count, a node's heartbeat
    assert edit("Pod", MON, name, lambda p: p["status"]["containerStatuses"][0].update(restartCount=7), "status") == state
    node = store.list("Node")[0]["metadata"]["name"]
    assert edit("Node", "", node, lambda n: n["status"]["conditions"][0].update(lastHeartbeatTime="2026-01-01T01:00:00Z"),
                "status") == state
    # what a target's labels come from: the pod's readiness and labels, a node's addresses, any Endpoints write
    ready = edit("Pod", MON, name, lambda p: next(c for c in p["status"]["conditions"] if c["type"] == "Ready").update(status="False"),
                 "status")
    assert ready != state
    labelled = edit("Pod", MON, name, lambda p: p["metadata"]["labels"].update(team="sre"))
    assert labelled != ready
    moved = edit("Node", "", node, lambda n: n["status"]["addresses"].append({"type": "ExternalIP", "address": "203.0.113.9"}), "status")
    assert moved != labelled
    endpoints = store.list("Endpoints", MON)[0]["metadata"]["name"]
    assert edit("Endpoints", MON, endpoints, lambda e: e["metadata"].setdefault("annotations", {}).update(touched="1")) != moved
    # and the scraper's targets follow: the pod's new label is among its discovered labels
    cached, uncached = _cached_and_fresh(twin)
    assert cached == uncached
    metas = [t.meta for t in twin.monitoring.scraper.targets if t.pod == (MON, name)]
    assert metas and all(m.get("__meta_kubernetes_pod_label_team") == "sre" for m in metas)
