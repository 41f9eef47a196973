"""The demo's runtime metrics reach Prometheus through the collector, for the services that export them.

ad and fraud-detection run the OpenTelemetry Java agent (demo 2.2.0's Dockerfiles), whose JMX runtime
metrics the SDK exports over OTLP every minute; payment and frontend run the Node.js runtime
instrumentation (payment at a 5 s monitoring precision); checkout and product-catalog Go's runtime
instrumentation; cart and accounting (.NET 10) the runtime's own meter and the process instrumentation's;
recommendation, product-reviews and load-generator the Python system-metrics instrumentation's process and
CPython metrics. The collector's prometheus exporter serves them
with the pod's ``job``/``instance``, which the scrape exposes as ``exported_job``/``exported_instance``.
Everything is read through the twin's Prometheus HTTP API.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from itbench_gym.backends.sim.app import runtime_metrics
from itbench_gym.backends.sim.app.runtime_metrics import Counters, ProcessState, RuntimeTelemetry
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.faults import fault_context, inject_faults
from itbench_gym.paths import envs_dir
from itbench_gym.registry import get_spec
from itbench_gym.spec import FaultRef
from itbench_gym.spec.appfacts import load_app_facts

NS = "otel-demo"
AD = 'exported_job="opentelemetry-demo/ad"'
REC = 'exported_job="opentelemetry-demo/recommendation"'
MIB = 2**20
#: every runtime-instrumented service of the shop
SERVICES = {"ad", "fraud-detection", "frontend", "payment", "checkout", "product-catalog", "cart", "accounting", "recommendation",
            "product-reviews", "load-generator"}
SYSTEM_METRICS = ("opentelemetry.instrumentation.system_metrics", "0.60b1", "https://opentelemetry.io/schemas/1.11.0")
FULL_GC = f'jvm_gc_duration_seconds_count{{{AD}, jvm_gc_action="end of major GC"}}'


class Shop:
    def __init__(self) -> None:
        self.backend = SimBackend()
        self.backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        self.baseline = self.backend.checkpoint()

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        url = self.backend.endpoints.prometheus
        assert url is not None
        body = requests.get(url + "/api/v1/query", params={"query": expr}, timeout=30).json()
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def value(self, expr: str) -> float:
        (result,) = self.query(expr)
        return result[1]

    def pods(self, service: str) -> list[dict[str, Any]]:
        return list(self.backend.twin.cluster.store.list("Pod", NS, label_selector=f"opentelemetry.io/name={service}"))

    def flag(self, name: str, restart: str = "ad") -> None:
        """Turn a flag on as ITBench's fault does: edit flagd's ConfigMap, restart flagd and ``restart``."""
        faults = [FaultRef("opentelemetry-demo-feature-flag", {
            "flag": {"name": name, "state": "on"},
            "kubernetesObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flagd-config", "namespace": NS}},
        })]
        faults += [FaultRef("restart-kubernetes-workload", {
            "kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": d, "namespace": NS}},
        }) for d in ("flagd", restart)]
        inject_faults(faults, fault_context(self.backend, load_app_facts(envs_dir() / "astronomy-shop")))


@pytest.fixture(scope="module")
def base() -> Iterator[Shop]:
    shop = Shop()
    yield shop
    shop.backend.close()


@pytest.fixture
def shop(base: Shop) -> Shop:
    base.backend.restore(base.baseline)
    return base


def test_jvm_families_carry_the_pods_and_the_collectors_labels_for_the_java_services_only(shop: Shop) -> None:
    (ad,) = shop.pods("ad")
    used = shop.query(f"jvm_memory_used_bytes{{{AD}}}")
    pools = {(lb["jvm_memory_type"], lb["jvm_memory_pool_name"]) for lb, _ in used}
    assert {("heap", "Eden Space"), ("heap", "Tenured Gen"), ("non_heap", "Metaspace")} <= pools
    for labels, value in used:
        assert labels["exported_instance"] == ad["metadata"]["uid"] and labels["job"] == "otel-collector"
        assert labels["otel_scope_name"] == "io.opentelemetry.runtime-telemetry-java8" and value >= 0
    for family in ("jvm_memory_limit_bytes", "jvm_thread_count", "jvm_class_loaded_total", "jvm_cpu_time_seconds_total",
                   "jvm_cpu_count", "jvm_cpu_recent_utilization_ratio", "jvm_gc_duration_seconds_bucket"):
        assert shop.query(f"{family}{{{AD}}}"), family
    threads = shop.query(f"jvm_thread_count{{{AD}}}")
    assert all({"jvm_thread_daemon", "jvm_thread_state"} <= set(lb) for lb, _ in threads)
    # ITBench's ad runs at a 150m CPU limit: the JVM sees one CPU
    assert shop.value(f"jvm_cpu_count{{{AD}}}") == 1
    jobs = {lb["exported_job"] for lb, _ in shop.query("jvm_memory_used_bytes")}
    assert jobs == {"opentelemetry-demo/ad", "opentelemetry-demo/fraud-detection"}


def test_ads_heap_follows_the_containers_memory(shop: Shop) -> None:
    heap = shop.value(f'sum(jvm_memory_used_bytes{{{AD}, jvm_memory_type="heap"}})')
    limit = shop.value(f'sum(jvm_memory_limit_bytes{{{AD}, jvm_memory_type="heap"}})')
    working_set = shop.value('container_memory_working_set_bytes{namespace="otel-demo", container="ad"}')
    non_heap = shop.value(f'sum(jvm_memory_used_bytes{{{AD}, jvm_memory_type="non_heap"}})')
    # HotSpot's default heap for a 512Mi container is a quarter of it; SerialGC's pools add up to that
    # less one of its two survivor spaces (a tenth of the young third): one pool stands for both
    assert limit == pytest.approx(128 * 2**20 * (1 - 1 / 30))
    assert 0 < heap < limit
    # the heap and the non-heap pools are most of the process's memory, measured a minute apart at most
    assert 0.6 * working_set < heap + non_heap < working_set


def test_manual_gc_runs_full_collections_that_the_baseline_does_not(shop: Shop) -> None:
    shop.backend.advance(600)
    baseline = shop.value(f"sum(increase({FULL_GC}[5m]))")
    minor = shop.value(f'sum(increase(jvm_gc_duration_seconds_count{{{AD}, jvm_gc_action="end of minor GC"}}[5m]))')
    assert minor > 0
    shop.backend.restore(shop.baseline)
    shop.flag("adManualGc")
    shop.backend.advance(600)
    flagged = shop.value(f"sum(increase({FULL_GC}[5m]))")
    assert flagged > 10 * max(baseline, 1.0)
    # each pause is a stop-the-world collection of a ~100 MiB old generation: between 0.1 s and 1 s
    slow = shop.value(f'sum(increase(jvm_gc_duration_seconds_bucket{{{AD}, jvm_gc_action="end of major GC", le="1"}}[5m]))'
                      f' - sum(increase(jvm_gc_duration_seconds_bucket{{{AD}, jvm_gc_action="end of major GC", le="0.1"}}[5m]))')
    assert slow == pytest.approx(flagged, rel=0.05)


def test_same_seed_same_runtime_metrics(shop: Shop) -> None:
    runtime = '{__name__=~"(jvm|cpython|process_runtime_cpython)_.*"}'
    shop.backend.advance(300)
    first = sorted((tuple(sorted(lb.items())), v) for lb, v in shop.query(runtime))
    shop.backend.restore(shop.baseline)
    shop.backend.advance(300)
    again = sorted((tuple(sorted(lb.items())), v) for lb, v in shop.query(runtime))
    assert first and first == again


def test_node_services_export_the_event_loop_and_v8_heap_and_go_services_nothing_of_either(shop: Shop) -> None:
    runtime = '{__name__=~"(jvm|nodejs|v8js)_.*", exported_job="opentelemetry-demo/%s"}'
    for service in ("payment", "frontend"):
        (pod,) = shop.pods(service)
        labels = {lb["__name__"] for lb, _ in shop.query(runtime % service)}
        assert {"nodejs_eventloop_delay_p99_seconds", "nodejs_eventloop_utilization_ratio", "nodejs_eventloop_time_seconds_total",
                "v8js_gc_duration_seconds_count", "v8js_memory_heap_used_bytes", "v8js_memory_heap_limit_bytes"} <= labels
        assert not any(name.startswith("jvm_") for name in labels)
        (used, _) = shop.query(f'v8js_memory_heap_used_bytes{{exported_job="opentelemetry-demo/{service}", v8js_heap_space_name="old_space"}}')[0]
        assert used["exported_instance"] == pod["metadata"]["uid"]
        assert used["otel_scope_name"] == "@opentelemetry/instrumentation-runtime-node" and used["otel_scope_version"] == "0.22.0"
    # monitorEventLoopDelay's resolution is the instrumentation's precision: 5 s in payment, the 10 ms default in frontend
    assert shop.value('nodejs_eventloop_delay_min_seconds{exported_job="opentelemetry-demo/payment"}') == 5
    assert shop.value('nodejs_eventloop_delay_min_seconds{exported_job="opentelemetry-demo/frontend"}') == pytest.approx(0.01)
    heap = shop.value('sum(v8js_memory_heap_used_bytes{exported_job="opentelemetry-demo/frontend"})')
    working_set = shop.value('container_memory_working_set_bytes{namespace="otel-demo", container="frontend"}')
    assert 0.5 * working_set < heap < working_set
    assert shop.query(runtime % "checkout") == [] and shop.query(runtime % "shipping") == []


def test_go_services_export_the_runtimes_metrics_from_their_environment(shop: Shop) -> None:
    """checkout and product-catalog (Go 1.24, contrib runtime v0.64.0): GOMEMLIMIT is the limit and caps
    the GC's goal, GOGC the default, GOMAXPROCS the node's CPUs; the memory the runtime reports is within
    the container's working set."""
    shop.backend.advance(120)
    assert {lb["exported_job"] for lb, _ in shop.query("go_goroutine_count")} == {
        "opentelemetry-demo/checkout", "opentelemetry-demo/product-catalog"}
    for service in ("checkout", "product-catalog"):
        (pod,) = shop.pods(service)
        job = f'exported_job="opentelemetry-demo/{service}"'
        used = {lb["go_memory_type"]: v for lb, v in shop.query(f"go_memory_used_bytes{{{job}}}")}
        assert set(used) == {"stack", "other"} and all(v > 0 for v in used.values())
        (labels, _), = shop.query(f"go_memory_limit_bytes{{{job}}}")
        assert labels["otel_scope_name"] == "go.opentelemetry.io/contrib/instrumentation/runtime"
        assert labels["otel_scope_version"] == "0.64.0" and labels["exported_instance"] == pod["metadata"]["uid"]
        assert shop.value(f"go_memory_limit_bytes{{{job}}}") == 16 * 2**20  # the chart's GOMEMLIMIT=16MiB
        assert shop.value(f"go_config_gogc_percent{{{job}}}") == 100
        node_cpus = shop.value(f'kube_node_status_capacity{{resource="cpu", node="{pod["spec"]["nodeName"]}"}}')
        assert shop.value(f"go_processor_limit{{{job}}}") == node_cpus
        working_set = shop.value(f'container_memory_working_set_bytes{{namespace="otel-demo", container="{service}"}}')
        assert sum(used.values()) < working_set
        assert 0 < shop.value(f"go_memory_gc_goal_bytes{{{job}}}") <= 16 * 2**20
        assert shop.value(f"increase(go_memory_allocations_total{{{job}}}[2m])") > 0


def test_cart_exports_the_dotnet_runtime_s_own_meter_and_the_process_instrumentation_s(shop: Shop) -> None:
    """cart (.NET 10): the runtime instrumentation enables the unversioned System.Runtime meter, the
    process instrumentation its own; the heap after a collection lies within the working set; healthy,
    cart throws no exception, so the exceptions counter has no series."""
    shop.backend.advance(120)
    job = 'exported_job="opentelemetry-demo/cart"'
    (pod,) = shop.pods("cart")
    (labels, working_set), = shop.query(f"dotnet_process_memory_working_set_bytes{{{job}}}")
    assert labels["otel_scope_name"] == "System.Runtime" and "otel_scope_version" not in labels
    assert labels["exported_instance"] == pod["metadata"]["uid"]
    (process, _), = shop.query(f"process_memory_usage_bytes{{{job}}}")
    assert (process["otel_scope_name"], process["otel_scope_version"]) == ("OpenTelemetry.Instrumentation.Process", "1.14.0-beta.2")
    container = shop.value('container_memory_working_set_bytes{namespace="otel-demo", container="cart"}')
    assert 0.5 * container < working_set < 2 * container  # the same memory, exported and scraped at different instants
    collections = {lb["gc_heap_generation"]: v for lb, v in shop.query(f"dotnet_gc_collections_total{{{job}}}")}
    assert set(collections) == {"gen0", "gen1", "gen2"} and collections["gen0"] > collections["gen1"] > 0
    heap = {lb["gc_heap_generation"]: v for lb, v in shop.query(f"dotnet_gc_last_collection_heap_size_bytes{{{job}}}")}
    assert set(heap) == {"gen0", "gen1", "gen2", "loh", "poh"} and 0 < sum(heap.values()) < working_set
    modes = {lb["cpu_mode"] for lb, _ in shop.query(f"dotnet_process_cpu_time_seconds_total{{{job}}}")}
    assert modes == {"user", "system"}
    # .NET 9 and 10 create the thread pool's thread count and queue length as observable counters
    assert shop.query(f"dotnet_thread_pool_thread_count_total{{{job}}}") and shop.query(f"dotnet_thread_pool_queue_length_total{{{job}}}")
    assert shop.query(f"dotnet_exceptions_total{{{job}}}") == []
    # accounting runs under the .NET automatic instrumentation, which enables the same two
    assert {lb["exported_job"] for lb, _ in shop.query("dotnet_assembly_count")} == {"opentelemetry-demo/cart", "opentelemetry-demo/accounting"}


def test_cart_s_failed_requests_count_their_exceptions_by_type(shop: Shop) -> None:
    """With cartFailure on, EmptyCart fails on a store that cannot connect: each failure throws the
    store's ApplicationException and the RpcException it is wrapped in (rethrown on its way out)."""
    shop.flag("cartFailure")
    shop.backend.advance(600)
    job = 'exported_job="opentelemetry-demo/cart"'
    thrown = {lb["error_type"]: v for lb, v in shop.query(f"increase(dotnet_exceptions_total{{{job}}}[5m])")}
    assert set(thrown) == {"RpcException", "ApplicationException"} and thrown["ApplicationException"] > 0
    assert thrown["RpcException"] == pytest.approx(3 * thrown["ApplicationException"], rel=0.1)
    failed = shop.value('sum(increase(traces_span_metrics_calls_total{service_name="cart", span_name="POST /oteldemo.CartService/EmptyCart", '
                        'status_code="STATUS_CODE_ERROR"}[5m]))')
    assert thrown["ApplicationException"] == pytest.approx(failed, rel=0.35)


def test_python_services_export_the_system_metrics_instrumentations_process_and_gc_series(shop: Shop) -> None:
    """recommendation and product-reviews (opentelemetry-instrument with the bootstrap's system-metrics
    instrumentation) and load-generator (its locustfile instruments itself) export the default
    configuration's process and CPython series; llm runs no SDK; no node-level system.* series."""
    shop.backend.advance(120)
    python = "process_runtime_cpython_memory_bytes"
    assert {lb["exported_job"] for lb, _ in shop.query(python)} == {
        "opentelemetry-demo/recommendation", "opentelemetry-demo/product-reviews", "opentelemetry-demo/load-generator"}
    for service in ("recommendation", "product-reviews", "load-generator"):
        (pod,) = shop.pods(service)
        job = f'exported_job="opentelemetry-demo/{service}"'
        memory = {lb["type"]: (lb, v) for lb, v in shop.query(f"{python}{{{job}}}")}
        assert set(memory) == {"rss", "vms"}
        labels, rss = memory["rss"]
        assert (labels["otel_scope_name"], labels["otel_scope_version"], labels["otel_scope_schema_url"]) == SYSTEM_METRICS
        assert labels["exported_instance"] == pod["metadata"]["uid"]
        # the process is the container's only one: its RSS is the working set, exported and scraped at different instants
        working_set = shop.value(f'container_memory_working_set_bytes{{namespace="otel-demo", container="{service}"}}')
        assert 0.8 * working_set < rss < 1.25 * working_set and rss < memory["vms"][1]
        assert shop.value(f"process_memory_usage_bytes{{{job}}}") == rss
        for family, label, values in (("process_cpu_time_seconds_total", "type", {"user", "system"}),
                                      ("process_runtime_cpython_cpu_time_seconds_total", "type", {"user", "system"}),
                                      ("process_context_switches_total", "type", {"involuntary", "voluntary"}),
                                      ("process_runtime_cpython_context_switches_total", "type", {"involuntary", "voluntary"}),
                                      ("cpython_gc_collections_total", "generation", {"0", "1", "2"}),
                                      ("cpython_gc_collected_objects_total", "generation", {"0", "1", "2"}),
                                      ("cpython_gc_uncollectable_objects_total", "generation", {"0", "1", "2"}),
                                      ("process_runtime_cpython_gc_count_bytes_total", "count", {"0", "1", "2"})):
            assert {lb[label] for lb, _ in shop.query(f"{family}{{{job}}}")} == values, family
        for family in ("process_memory_virtual_bytes", "process_open_file_descriptor_count", "process_thread_count",
                       "process_runtime_cpython_thread_count", "system_thread_count", "process_cpu_utilization_ratio",
                       "process_runtime_cpython_cpu_utilization_ratio"):
            assert len(shop.query(f"{family}{{{job}}}")) == 1, family
        collections = {lb["generation"]: v for lb, v in shop.query(f"cpython_gc_collections_total{{{job}}}")}
        assert collections["0"] > collections["1"] > 0
        assert shop.value(f"sum(cpython_gc_uncollectable_objects_total{{{job}}})") == 0
        # the OS's threads include gRPC core's and the pool's; threading.active_count() only Python's
        assert shop.value(f"process_thread_count{{{job}}}") > shop.value(f"system_thread_count{{{job}}}") >= 1
        # the CPU since the last export over the node's CPUs (psutil.cpu_count())
        cpus = shop.value(f'kube_node_status_capacity{{resource="cpu", node="{pod["spec"]["nodeName"]}"}}')
        cpu = shop.value(f'rate(container_cpu_usage_seconds_total{{namespace="otel-demo", container="{service}"}}[1m])')
        assert shop.value(f"process_cpu_utilization_ratio{{{job}}}") == pytest.approx(cpu / cpus, rel=0.5, abs=0.001)
    assert shop.query('{exported_job="opentelemetry-demo/llm", __name__=~"process_.*|cpython_.*"}') == []
    assert shop.query('{__name__=~"system_(cpu|memory|swap|disk|network)_.*"}') == []


def test_recommendations_rss_grows_with_its_cache_until_the_oom_kill_and_the_next_process_starts_from_zero(shop: Shop) -> None:
    """SRE-CacheFailure-v0: the exported RSS follows the leaking process's working set up before each OOM
    kill, and each process the kubelet starts again exports its counters from zero."""
    baseline = shop.value(f'process_runtime_cpython_memory_bytes{{{REC}, type="rss"}}')
    shop.flag("recommendationCacheFailure", restart="recommendation")
    shop.backend.advance(30)
    (pod,) = [p for p in shop.pods("recommendation") if not p["metadata"].get("deletionTimestamp")]
    name, job = pod["metadata"]["name"], f'{REC}, exported_instance="{pod["metadata"]["uid"]}"'
    shop.backend.advance(600)
    assert shop.value(f'kube_pod_container_status_restarts_total{{namespace="otel-demo", pod="{name}"}}') >= 2
    assert shop.value(f'max_over_time(kube_pod_container_status_last_terminated_reason{{pod="{name}", reason="OOMKilled"}}[10m])') == 1
    grown = shop.value(f'max_over_time(process_runtime_cpython_memory_bytes{{{job}, type="rss"}}[10m])')
    assert 1.5 * baseline < grown <= 512 * MIB
    # the processes' counters started again from zero: Prometheus sees resets
    assert shop.value(f'resets(process_cpu_time_seconds_total{{{job}, type="user"}}[10m])') >= 1
    assert shop.value(f'resets(cpython_gc_collections_total{{{job}, generation="0"}}[10m])') >= 1
    assert shop.value(f'resets(process_context_switches_total{{{job}, type="voluntary"}}[10m])') >= 1


def _state(working_set: float = 60 * MIB, cpu: float = 0.05, rps: float = 2.0, inflight: float = 0.01) -> ProcessState:
    return ProcessState(working_set=working_set, cpu_cores=cpu, cpus=1, memory_limit=512 * MIB, max_heap=0.0, requests_per_s=rps,
                        inflight=inflight, full_gcs_per_s=0.0, wait_s=0.0, node_cpus=4)


def _run(telemetry: RuntimeTelemetry, counters: Counters, states: list[ProcessState], start: float = 0.0, dt: float = 10.0,
         ) -> list[dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
    """recommendation's process over ``states`` one tick each: what each export pushed."""
    exports: list[dict[tuple[str, tuple[tuple[str, str], ...]], float]] = []
    for i, state in enumerate(states):
        pushed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

        def push(name: str, attrs: tuple[tuple[str, str], ...], value: float, scope: tuple[str, str], into: dict = pushed) -> None:
            assert scope == SYSTEM_METRICS[:2] and ("otel_scope_schema_url", SYSTEM_METRICS[2]) in attrs
            into[(name, tuple(a for a in attrs if a[0] != "otel_scope_schema_url"))] = value

        telemetry.observe("recommendation", counters, state, start + (i + 1) * dt, dt, push)
        if pushed:
            exports.append(pushed)
    return exports


def test_a_python_process_derives_its_series_from_the_model_and_counts_from_zero() -> None:
    """The arithmetic: RSS is the working set, the virtual size adds the unresident mappings and the
    threads' stacks, counters only grow, the pool grows with the requests in flight up to its ten
    workers and keeps them, CPU utilization covers the interval since the last export, and a new
    process's counters start at zero."""
    telemetry = RuntimeTelemetry(envs_dir() / "astronomy-shop", SERVICES)
    model = telemetry.of_service["recommendation"].model
    assert isinstance(model, runtime_metrics.PythonDef)
    counters = Counters()
    exports = _run(telemetry, counters, [_state()] * 30)
    assert len(exports) == 5  # every 60 s after the process started
    first, last = exports[0], exports[-1]
    assert first[("process_cpu_utilization_ratio", ())] == 0  # psutil's first cpu_percent() only starts measuring
    assert last[("process_cpu_utilization_ratio", ())] == pytest.approx(0.05 / 4)
    assert last[("process_runtime_cpython_cpu_utilization_ratio", ())] == 0
    rss = last[("process_runtime_cpython_memory_bytes", (("type", "rss"),))]
    assert rss == last[("process_memory_usage_bytes", ())] == 60 * MIB
    threads = last[("process_thread_count", ())]
    assert last[("process_memory_virtual_bytes", ())] == model.virtual + threads * model.stack_per_thread + rss
    cpu = last[("process_cpu_time_seconds_total", (("type", "user"),))] + last[("process_cpu_time_seconds_total", (("type", "system"),))]
    assert cpu == pytest.approx(0.05 * 300, abs=0.02)
    counter_names = [key for key in last if key[0].endswith("_total") and "gc_count" not in key[0]]
    for earlier, later in zip(exports, exports[1:], strict=False):
        assert all(later[key] >= earlier[key] for key in counter_names)
    collections = sum(last[("cpython_gc_collections_total", (("generation", g),))] for g in "012")
    tracked = 300 * (2.0 * model.tracked_per_request + model.tracked_per_s)
    assert collections == tracked // (model.thresholds[0] + 1)
    for g, limit in zip("012", (model.thresholds[0], model.thresholds[1] + 1, model.gen1_per_gen2), strict=True):
        assert 0 <= last[("process_runtime_cpython_gc_count_bytes_total", (("count", g),))] <= limit
    # a slow downstream: requests pile up, the pool starts workers up to its ten and keeps them
    pool = threads - model.python_threads - model.native_threads
    busy = _run(telemetry, counters, [_state(inflight=40.0)] * 6, start=300)[-1]
    assert busy[("process_thread_count", ())] == model.python_threads + model.native_threads + model.pool_max_workers > threads
    calm = _run(telemetry, counters, [_state(working_set=80 * MIB)] * 6, start=360)[-1]
    assert calm[("process_thread_count", ())] == busy[("process_thread_count", ())]
    assert calm[("system_thread_count", ())] == model.python_threads + model.pool_max_workers
    assert calm[("process_memory_usage_bytes", ())] == 80 * MIB
    assert 1 <= pool < model.pool_max_workers
    # the next process starts from zero
    again = _run(telemetry, Counters(), [_state()] * 6)[0]
    assert again[("process_cpu_time_seconds_total", (("type", "user"),))] < last[("process_cpu_time_seconds_total", (("type", "user"),))]
    assert sum(again[("cpython_gc_collections_total", (("generation", g),))] for g in "012") < collections


@pytest.mark.parametrize(("where", "change", "message"), [
    ("services", lambda r: r["runtimes"]["java-agent"].update(services=["ad", "no-such-service"]), "not services of the app"),
    ("quantity", lambda r: r["runtimes"]["java-agent"]["metrics"][0].update(quantity="heap_used"), "unknown quantity"),
    ("histogram", lambda r: r["runtimes"]["java-agent"]["metrics"][0].update(histogram=[1, 2]), "only it, is a histogram"),
    ("spaces", lambda r: r["runtimes"]["runtime-node-payment"]["node"]["spaces"][2].update(share=0.9), "add up to 1"),
    ("model", lambda r: r["runtimes"]["java-agent"].pop("jvm"), "needs one runtime model"),
    ("generations", lambda r: r["runtimes"]["dotnet-cart"]["dotnet"]["heap"].pop(), "needs the generations"),
    ("scope", lambda r: r["runtimes"]["dotnet-cart"]["metrics"][0].update(scope={"version": "1"}), "missing 'name'"),
    ("python quantity", lambda r: r["runtimes"]["python-recommendation"]["metrics"][0].update(quantity="goroutines"),
     r"runtimes\.python-recommendation\.metrics\[0\]: unknown quantity"),
    ("thresholds", lambda r: r["runtimes"]["python-recommendation"]["python"]["gc"].update(thresholds=[700, 10]),
     r"runtimes\.python-recommendation\.python\.gc\.thresholds: needs three whole numbers"),
    ("gen2", lambda r: r["runtimes"]["python-product-reviews"]["python"]["gc"].update(gen1_per_gen2=5),
     r"runtimes\.python-product-reviews\.python\.gc\.gen1_per_gen2: at least the third threshold plus one \(11\)"),
    ("garbage", lambda r: r["runtimes"]["python-recommendation"]["python"]["gc"].update(garbage_generations=[0.9, 0.2, 0.0]),
     "garbage_generations: the shares must add up to 1"),
    ("fds", lambda r: r["runtimes"]["python-load-generator"]["python"].update(fds="many"),
     r"runtimes\.python-load-generator\.python\.fds: needs a number"),
    ("switches", lambda r: r["runtimes"]["python-recommendation"]["python"].pop("context_switches"),
     r"runtimes\.python-recommendation\.python: missing 'context_switches'"),
])
def test_runtime_metric_definitions_are_checked_against_the_app(where: str, change: Any, message: str) -> None:
    raw = copy.deepcopy(runtime_metrics.raw(envs_dir() / "astronomy-shop"))
    assert {r.name for r in runtime_metrics.parse(raw, SERVICES)} == {
        "java-agent", "runtime-node-frontend", "runtime-node-payment", "go-checkout", "go-product-catalog", "dotnet-cart", "dotnet-accounting",
        "python-recommendation", "python-product-reviews", "python-load-generator"}
    change(raw)
    with pytest.raises(runtime_metrics.RuntimeMetricsError, match=message):
        runtime_metrics.parse(raw, SERVICES)
