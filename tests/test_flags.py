"""Every Astronomy Shop feature flag (DESIGN §7.2) shows its real symptom on the composed twin — and only it.

One twin runs the healthy shop (50 Locust users, 10 minutes of baseline) and is checkpointed. Each
flag restores the checkpoint, turns the flag on through the Kubernetes API exactly as ITBench's fault
catalogue does (edit ConfigMap ``flagd-config``, then ``rollout restart`` flagd — it copies the
ConfigMap only at start — and the service ITBench's scenario restarts), lets simulated time run and
reads the outcome with PromQL and the alert rules. A control run restarts flagd without a flag, so
"unchanged" is measured against the same procedure.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.faults import fault_context, inject_faults
from itbench_gym.paths import envs_dir
from itbench_gym.registry import get_spec
from itbench_gym.spec import FaultRef
from itbench_gym.spec.appfacts import load_app_facts
from itbench_gym.spec.model import LoadOptions

NS = "otel-demo"
APP = load_app_facts(envs_dir() / "astronomy-shop")
SEED = 0

Key = tuple[str, ...]  # a result's labels, in the order of the query's ``by`` clause


@dataclass(frozen=True)
class Flag:
    variant: str
    restart: str  # the workload ITBench's scenario restarts after flagd
    minutes: int = 15


FLAGS: dict[str, Flag] = {
    "adFailure": Flag("on", "ad"),
    "adHighCpu": Flag("on", "ad"),
    "adManualGc": Flag("on", "ad"),
    "cartFailure": Flag("on", "cart"),
    "paymentFailure": Flag("100%", "payment"),
    "paymentUnreachable": Flag("on", "payment"),
    "productCatalogFailure": Flag("on", "product-catalog"),
    "recommendationCacheFailure": Flag("on", "recommendation", minutes=25),
    "emailMemoryLeak": Flag("100x", "email"),
    "kafkaQueueProblems": Flag("on", "kafka"),
    "loadGeneratorFloodHomepage": Flag("on", "load-generator"),
    "imageSlowLoad": Flag("10sec", "frontend"),
    "llmRateLimitError": Flag("on", "product-reviews"),
    "llmInaccurateResponse": Flag("on", "product-reviews"),
}

#: Named PromQL queries read at the end of every run; ``{w}`` is the run's window (since injection).
QUERIES: dict[str, str] = {
    "calls": 'sum by (service_name, span_name, span_kind) (increase(traces_span_metrics_calls_total{{status_code!="STATUS_CODE_ERROR"}}[{w}]))',
    "errors": 'sum by (service_name, span_name, span_kind) (increase(traces_span_metrics_calls_total{{status_code="STATUS_CODE_ERROR"}}[{w}])) > 0',
    "p95": "histogram_quantile(0.95, sum by (le, service_name) (rate(traces_span_metrics_duration_milliseconds_bucket"
           '{{span_kind=~"SPAN_KIND_SERVER|SPAN_KIND_CONSUMER"}}[{w}])))',
    "mean_ms": "sum by (service_name, span_name) (rate(traces_span_metrics_duration_milliseconds_sum[{w}]))"
               " / sum by (service_name, span_name) (rate(traces_span_metrics_duration_milliseconds_count[{w}]))",
    # span metrics move once a minute (the collector's spanmetrics flush): a rate needs two flushes in its window
    "peak_rps": 'max_over_time(sum by (service_name) (rate(traces_span_metrics_calls_total{{span_kind="SPAN_KIND_SERVER"}}[2m]))[{w}:1m])',
    "cpu": 'sum by (container) (rate(container_cpu_usage_seconds_total{{namespace="otel-demo", container!=""}}[{w}]))',
    "mem_max": 'max by (container) (max_over_time(container_memory_working_set_bytes{{namespace="otel-demo", container!=""}}[{w}]))',
    # kube-prometheus-stack drops cAdvisor's container_spec_* series; kube-state-metrics has the limits
    "mem_limit": 'max by (container) (max_over_time(kube_pod_container_resource_limits{{namespace="otel-demo", resource="memory"}}[{w}]))',
    "restarts": 'max by (container) (kube_pod_container_status_restarts_total{{namespace="otel-demo"}})',
    "oom_killed": 'max by (container) (kube_pod_container_status_last_terminated_reason{{namespace="otel-demo", reason="OOMKilled"}})',
    "lag": 'max by (consumergroup) (max_over_time(kafka_consumer_group_lag_sum_ratio{{namespace="otel-demo"}}[{w}]))',
    "fired": 'max by (alertname, service_name, consumergroup, container, deployment) (max_over_time(ALERTS{{alertstate="firing"}}[{w}]))',
}


#: Services (each the name of its container) whose log lines a run keeps.
LOGGED = ("checkout", "product-reviews")


@dataclass
class Run:
    """What one flag did to the shop in its window."""

    results: dict[str, dict[Key, float]]
    #: the window's log lines of the services whose logs the tests read (LOGGED), by container
    logs: dict[str, list[str]] = field(default_factory=dict)

    def get(self, query: str, *key: str) -> float:
        return self.results[query].get(key, 0.0)

    @property
    def errors(self) -> dict[Key, float]:
        """Error spans in the window by (service_name, span_name, span_kind)."""
        return self.results["errors"]

    def error_services(self) -> set[str]:
        """Services with error spans, the load generator's own client spans aside."""
        return {svc for svc, _, _ in self.errors if svc != "load-generator"}

    def calls(self, service: str, span: str, kind: str = "SPAN_KIND_SERVER") -> float:
        return self.get("calls", service, span, kind)

    def error_calls(self, service: str, span: str, kind: str = "SPAN_KIND_SERVER") -> float:
        return self.errors.get((service, span, kind), 0.0)

    def fired(self) -> set[tuple[str, str]]:
        """(alertname, subject) of every alert that fired during the window; the subject is the first
        of service_name, consumergroup, container, deployment the alert carries (a Kafka alert's
        container is the collector's, whose target its series come through)."""
        return {(name, next((x for x in subjects if x), "")) for name, *subjects in self.results["fired"]}


def _labels_key(query: str, metric: dict[str, str]) -> Key:
    by = re.search(r"by \(([^)]*)\)", QUERIES[query])
    assert by is not None
    return tuple(metric.get(name, "") for name in (n.strip() for n in by.group(1).split(",")) if name != "le")


class Shop:
    """The shared twin: a checkpointed healthy baseline and one cached run per flag."""

    def __init__(self, load: LoadOptions | None = None) -> None:
        self.backend = SimBackend()
        spec = get_spec("SRE-CacheFailure-v0")
        self.endpoints: Endpoints = self.backend.start(dataclasses.replace(spec, load=load) if load else spec, SEED)
        self.baseline = self.backend.checkpoint()
        self._runs: dict[str | None, Run] = {}

    def run(self, flag: str | None) -> Run:
        """The shop after turning ``flag`` on (None: the control run, same flagd restart, no flag)."""
        if flag not in self._runs:
            self._runs[flag] = self._run(flag)
        return self._runs[flag]

    def _run(self, flag: str | None) -> Run:
        self.backend.restore(self.baseline)
        twin = self.backend.twin
        start = self.backend.clock.now()
        faults = []
        restarts = ["flagd"]
        minutes = 15
        if flag is not None:
            faults.append(FaultRef("opentelemetry-demo-feature-flag", {
                "flag": {"name": flag, "state": FLAGS[flag].variant},
                "kubernetesObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flagd-config", "namespace": NS}},
            }))
            restarts.append(FLAGS[flag].restart)
            minutes = FLAGS[flag].minutes
        faults += [FaultRef("restart-kubernetes-workload", {
            "kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS}},
        }) for name in restarts]
        inject_faults(faults, fault_context(self.backend, APP))
        self.backend.advance(minutes * 60)
        end = self.backend.clock.now()
        results: dict[str, dict[Key, float]] = {}
        for name, template in QUERIES.items():
            data = twin.engine.instant(template.format(w=f"{minutes}m"), end).data
            results[name] = {_labels_key(name, s.metric): s.value for s in data}
        logs: dict[str, list[str]] = {}
        for service in LOGGED:
            for pod in twin.cluster.store.list("Pod", NS, label_selector=f"opentelemetry.io/name={service}"):
                logs.setdefault(service, []).extend(line for _, line in twin.log_lines(NS, pod["metadata"]["name"], service, start, end))
        return Run(results, logs)

    def close(self) -> None:
        self.backend.close()


@pytest.fixture(scope="module")
def shop() -> Iterator[Shop]:
    s = Shop()
    yield s
    s.close()


@pytest.fixture(scope="module")
def browser_shop() -> Iterator[Shop]:
    """The shop with Locust's browser users too (ITBench's ``loadGeneration.browserTraffic``)."""
    s = Shop(LoadOptions(browser_traffic=True))
    yield s
    s.close()


# -- where errors appear -----------------------------------------------------------------------------

#: Services whose spans carry errors while the flag is on (the load generator's client spans aside).
ERROR_SERVICES: dict[str, set[str]] = {
    "adFailure": {"ad", "frontend", "frontend-proxy"},
    "adHighCpu": set(),
    "adManualGc": set(),
    "cartFailure": {"cart", "checkout"},
    "paymentFailure": {"payment", "checkout", "frontend", "frontend-proxy"},
    "paymentUnreachable": {"checkout", "frontend", "frontend-proxy"},
    "productCatalogFailure": {"product-catalog", "checkout", "frontend", "frontend-proxy"},
    "recommendationCacheFailure": {"frontend", "frontend-proxy"},
    "emailMemoryLeak": {"checkout"},
    "kafkaQueueProblems": set(),
    "loadGeneratorFloodHomepage": {"frontend-proxy"},
    "imageSlowLoad": set(),
    # the caught 429: the rate-limited completion's client span, never the gRPC answer
    "llmRateLimitError": {"product-reviews"},
    "llmInaccurateResponse": set(),
}


def test_control_run_is_healthy(shop: Shop) -> None:
    control = shop.run(None)
    assert control.error_services() == set()
    assert control.fired() <= ALWAYS_FIRING
    assert control.calls("checkout", "oteldemo.CheckoutService/PlaceOrder") > 100


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_errors_appear_exactly_on_the_services_the_real_app_fails(shop: Shop, flag: str) -> None:
    run = shop.run(flag)
    assert run.error_services() == ERROR_SERVICES[flag], sorted(run.errors)
    # Locust never fails a task: its user_* spans stay unset whatever the shop answers.
    assert not [k for k in run.errors if k[0] == "load-generator" and k[2] == "SPAN_KIND_INTERNAL"]


# -- which alerts fire ---------------------------------------------------------------------------------

#: Alerts that must fire during the window, as (alertname, service / container / consumer group).
REQUIRED_ALERTS: dict[str, set[tuple[str, str]]] = {
    "adFailure": {("HighRequestErrorRate", s) for s in ("ad", "frontend", "frontend-proxy")},
    "adHighCpu": {("HighRequestLatency", "ad"), ("HighRequestLatency", "frontend")},
    "adManualGc": {("HighRequestLatency", "ad")},
    "cartFailure": {("HighRequestErrorRate", "cart"), ("HighRequestErrorRate", "checkout")},
    "paymentFailure": {("HighRequestErrorRate", s) for s in ("payment", "checkout", "frontend", "frontend-proxy")}
    | {("NoRequestsReceived", s) for s in ("email", "accounting", "fraud-detection")} | {("NoDatabaseOperations", "accounting")},
    "paymentUnreachable": {("HighRequestErrorRate", s) for s in ("checkout", "frontend", "frontend-proxy")}
    | {("NoRequestsReceived", s) for s in ("payment", "email", "accounting", "fraud-detection")} | {("NoDatabaseOperations", "accounting")},
    "productCatalogFailure": {("HighRequestErrorRate", s) for s in ("product-catalog", "checkout", "frontend", "frontend-proxy")},
    "recommendationCacheFailure": {("HighRequestErrorRate", "frontend"), ("HighRequestErrorRate", "frontend-proxy"),
                                   ("KubePodCrashLooping", "recommendation")},
    "emailMemoryLeak": {("KubePodCrashLooping", "email")},
    "kafkaQueueProblems": {("HighKafkaConsumerLag", "fraud-detection")},
    "loadGeneratorFloodHomepage": {("HighRequestErrorRate", "frontend-proxy")},
    "imageSlowLoad": set(),
    "llmRateLimitError": {("HighRequestErrorRate", "product-reviews")},
    "llmInaccurateResponse": set(),
}

#: Alerts that may also fire: consequences of the same fault (slow ads push the shop's p95 near the
#: threshold; a crash-looping pod's deployment is short of replicas and may receive nothing for minutes;
#: checkout's errors come only while email is down, and a minute of the collector's flushes without one
#: puts the 2m error rate back to 0, so the alert may never stay pending for its 3 minutes).
MAY_ALSO_FIRE: dict[str, set[tuple[str, str]]] = {
    "adHighCpu": {("HighRequestLatency", "frontend-proxy"), ("CPUThrottlingHigh", "ad")},
    "adManualGc": {("HighRequestLatency", "frontend"), ("HighRequestLatency", "frontend-proxy")},
    "recommendationCacheFailure": {("KubeContainerWaiting", "recommendation"), ("KubeDeploymentReplicasMismatch", "recommendation")},
    "emailMemoryLeak": {("KubeContainerWaiting", "email"), ("KubeDeploymentReplicasMismatch", "email"), ("NoRequestsReceived", "email"),
                        ("HighRequestErrorRate", "checkout")},
    "loadGeneratorFloodHomepage": {("KubePodCrashLooping", "frontend"), ("KubeContainerWaiting", "frontend"),
                                   ("KubeDeploymentReplicasMismatch", "frontend"), ("KubePodNotReady", "")},
}


#: kube-prometheus-stack's always-firing alerts: Watchdog (the alerting pipeline is alive) and
#: InfoInhibitor (fires with any info-severity alert, e.g. CPUThrottlingHigh).
ALWAYS_FIRING = {("Watchdog", ""), ("InfoInhibitor", "")}


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_alerts_fire_for_the_symptom_and_nothing_else(shop: Shop, flag: str) -> None:
    fired = shop.run(flag).fired()
    assert REQUIRED_ALERTS[flag] <= fired, sorted(REQUIRED_ALERTS[flag] - fired)
    assert fired <= REQUIRED_ALERTS[flag] | MAY_ALSO_FIRE.get(flag, set()) | ALWAYS_FIRING, sorted(fired - REQUIRED_ALERTS[flag])


# -- each flag's own symptom -------------------------------------------------------------------------------


def test_ad_failure_fails_one_get_ads_in_ten(shop: Shop) -> None:
    run = shop.run("adFailure")
    share = run.error_calls("ad", "oteldemo.AdService/GetAds") / (
        run.error_calls("ad", "oteldemo.AdService/GetAds") + run.calls("ad", "oteldemo.AdService/GetAds"))
    assert 0.05 < share < 0.17
    assert run.error_calls("frontend", "grpc.oteldemo.AdService/GetAds", "SPAN_KIND_CLIENT") > 0
    assert run.error_calls("frontend", "GET /api/data") > 0


def test_ad_high_cpu_pins_ad_at_its_cpu_limit_and_slows_it_without_errors(shop: Shop) -> None:
    run, control = shop.run("adHighCpu"), shop.run(None)
    # the four busy threads want four cores; ITBench's 150m quota is all ad gets
    assert 0.1501 >= run.get("cpu", "ad") > 0.12 > 10 * control.get("cpu", "ad")
    assert run.get("p95", "ad") > 5 * control.get("p95", "ad")
    others = [c for c in control.results["cpu"] if c != ("ad",)]
    assert all(run.get("cpu", *c) < 1.5 * control.get("cpu", *c) + 0.005 for c in others)


def test_ad_manual_gc_pauses_show_as_latency_on_ad_and_its_callers(shop: Shop) -> None:
    run, control = shop.run("adManualGc"), shop.run(None)
    assert run.get("p95", "ad") > 1500 > 20 * control.get("p95", "ad")
    assert run.get("p95", "frontend") > 5 * control.get("p95", "frontend")
    assert run.get("p95", "cart") < 1.5 * control.get("p95", "cart")


def test_cart_failure_fails_empty_cart_but_checkout_ignores_it(shop: Shop) -> None:
    run, control = shop.run("cartFailure"), shop.run(None)
    assert set(run.errors) == {("cart", "POST /oteldemo.CartService/EmptyCart", "SPAN_KIND_SERVER"),
                               ("checkout", "oteldemo.CartService/EmptyCart", "SPAN_KIND_CLIENT")}
    assert run.calls("cart", "POST /oteldemo.CartService/EmptyCart") == 0
    # Orders still go through: checkout's PlaceOrder succeeds and accounting receives them.
    placed = run.calls("checkout", "oteldemo.CheckoutService/PlaceOrder")
    assert placed > 0.8 * control.calls("checkout", "oteldemo.CheckoutService/PlaceOrder")
    assert run.calls("accounting", "orders receive", "SPAN_KIND_CONSUMER") > 0.8 * placed
    assert not [line for line in run.logs["checkout"] if '"level":"ERROR"' in line]


def test_payment_failure_fails_charge_and_every_checkout(shop: Shop) -> None:
    run = shop.run("paymentFailure")
    assert run.calls("payment", "grpc.oteldemo.PaymentService/Charge") == 0
    assert run.error_calls("payment", "grpc.oteldemo.PaymentService/Charge") > 0
    assert run.calls("checkout", "oteldemo.CheckoutService/PlaceOrder") == 0
    assert run.error_calls("frontend", "POST /api/checkout") > 0
    assert run.calls("email", "POST /send_order_confirmation") == 0
    assert any("failed to charge card" in line and "Invalid token" in line for line in run.logs["checkout"])


def test_payment_unreachable_drops_payment_traffic_to_zero(shop: Shop) -> None:
    run = shop.run("paymentUnreachable")
    assert run.calls("payment", "grpc.oteldemo.PaymentService/Charge") == 0
    assert run.error_calls("payment", "grpc.oteldemo.PaymentService/Charge") == 0
    assert run.error_calls("checkout", "oteldemo.PaymentService/Charge", "SPAN_KIND_CLIENT") > 0
    assert any("badAddress" in line for line in run.logs["checkout"])


def test_product_catalog_failure_fails_only_one_product(shop: Shop) -> None:
    run = shop.run("productCatalogFailure")
    span = "oteldemo.ProductCatalogService/GetProduct"
    share = run.error_calls("product-catalog", span) / (run.error_calls("product-catalog", span) + run.calls("product-catalog", span))
    assert 0.05 < share < 0.15  # one product of the ten the load generator picks from
    assert run.error_calls("product-catalog", "oteldemo.ProductCatalogService/ListProducts") == 0
    assert run.error_services() >= {"checkout"} and "recommendation" not in run.error_services()


def test_recommendation_cache_failure_leaks_until_oom_killed(shop: Shop) -> None:
    run = shop.run("recommendationCacheFailure")
    assert run.get("restarts", "recommendation") >= 2
    assert run.get("oom_killed", "recommendation") == 1
    limit = run.get("mem_limit", "recommendation")
    assert limit == 512 * 2**20  # ITBench values.j2
    assert 0.8 * limit < run.get("mem_max", "recommendation") <= limit
    assert run.error_calls("frontend", "grpc.oteldemo.RecommendationService/ListRecommendations", "SPAN_KIND_CLIENT") > 0
    assert all(run.get("restarts", c) == 0 for c in ("frontend", "product-catalog", "checkout"))


def test_email_memory_leak_ooms_email_and_checkout_only_warns(shop: Shop) -> None:
    run = shop.run("emailMemoryLeak")
    assert run.get("restarts", "email") >= 2 and run.get("oom_killed", "email") == 1
    assert run.get("mem_max", "email") <= run.get("mem_limit", "email") == 100 * 2**20
    assert set(run.errors) == {("checkout", "POST", "SPAN_KIND_CLIENT")}
    assert run.error_calls("checkout", "oteldemo.CheckoutService/PlaceOrder") == 0
    warnings = [line for line in run.logs["checkout"] if "failed to send order confirmation" in line]
    assert warnings and all('"level":"WARN"' in line for line in warnings)
    assert not [line for line in run.logs["checkout"] if '"level":"ERROR"' in line]


def test_kafka_queue_problems_lags_fraud_detection_only(shop: Shop) -> None:
    run, control = shop.run("kafkaQueueProblems"), shop.run(None)
    assert run.get("lag", "fraud-detection") > 10_000
    assert run.get("lag", "accounting") == 0 and control.get("lag", "fraud-detection") == 0
    # fraud-detection sleeps a second per record, inside its process span (the window's first flush of
    # the span metrics may still hold up to a minute of records from before the flag)
    assert 950 < run.get("mean_ms", "fraud-detection", "orders process") < 1050
    assert control.get("mean_ms", "fraud-detection", "orders process") < 5
    assert run.calls("fraud-detection", "orders process", "SPAN_KIND_CONSUMER") < 1.05 * 15 * 60
    # accounting receives every copy, but only the first copy of an order reaches postgresql
    received = run.calls("accounting", "orders receive", "SPAN_KIND_CONSUMER")
    assert received > 50 * control.calls("accounting", "orders receive", "SPAN_KIND_CONSUMER")
    inserts = run.calls("accounting", "postgresql", "SPAN_KIND_CLIENT")
    assert 0.7 < inserts / control.calls("accounting", "postgresql", "SPAN_KIND_CLIENT") < 1.3


def test_flood_homepage_surges_requests_on_the_frontend(shop: Shop) -> None:
    run, control = shop.run("loadGeneratorFloodHomepage"), shop.run(None)
    assert run.get("peak_rps", "frontend-proxy") > 5 * control.get("peak_rps", "frontend-proxy")
    assert run.get("peak_rps", "frontend") > 3 * control.get("peak_rps", "frontend")
    assert run.calls("load-generator", "user_flood_home", "SPAN_KIND_INTERNAL") > 0
    assert control.calls("load-generator", "user_flood_home", "SPAN_KIND_INTERNAL") == 0


def test_image_slow_load_has_no_backend_symptom(shop: Shop) -> None:
    run, control = shop.run("imageSlowLoad"), shop.run(None)
    for (service,), rps in control.results["peak_rps"].items():
        assert abs(run.get("peak_rps", service) - rps) <= 0.25 * rps + 0.5, service
    for (service,), p95 in control.results["p95"].items():
        assert run.get("p95", service) < 1.5 * p95 + 1.0, service
    assert run.results["restarts"] == control.results["restarts"]


def test_llm_rate_limit_fails_half_the_first_completions_and_the_assistant_still_answers(shop: Shop) -> None:
    run, control = shop.run("llmRateLimitError"), shop.run(None)
    ask = "/oteldemo.ProductReviewService/AskProductAIAssistant"
    limited = run.error_calls("product-reviews", "chat astronomy-llm-rate-limit", "SPAN_KIND_CLIENT")
    asked = run.calls("product-reviews", ask)
    assert 0.4 < limited / asked < 0.6  # random.random() < 0.5
    # the handler marks its own span when it catches the error
    marked = run.error_calls("product-reviews", "get_ai_assistant_response", "SPAN_KIND_INTERNAL")
    assert 0.4 < marked / asked < 0.6 and control.error_calls("product-reviews", "get_ai_assistant_response", "SPAN_KIND_INTERNAL") == 0
    assert run.error_calls("product-reviews", ask) == 0 and run.error_calls("frontend", "grpc.oteldemo.ProductReviewService/AskProductAIAssistant", "SPAN_KIND_CLIENT") == 0
    # a rate-limited request answers at once: no tool call, no second completion, no query
    completions = run.calls("product-reviews", "chat astronomy-llm", "SPAN_KIND_CLIENT") / asked
    assert completions == pytest.approx(2 * 0.5, rel=0.15)
    # two completions per question, each operation's spans drawn on their own (a few hundred in the window)
    assert control.calls("product-reviews", "chat astronomy-llm", "SPAN_KIND_CLIENT") / control.calls("product-reviews", ask) == pytest.approx(2, rel=0.15)
    assert control.error_calls("product-reviews", "chat astronomy-llm-rate-limit", "SPAN_KIND_CLIENT") == 0
    caught = [line for line in run.logs["product-reviews"] if "Caught Exception: Error code: 429" in line]
    assert caught and not [line for line in control.logs["product-reviews"] if "Caught Exception" in line]


def test_browser_users_load_pages_and_images_on_a_healthy_shop(browser_shop: Shop, shop: Shop) -> None:
    control = browser_shop.run(None)
    assert control.error_services() == set()
    # ad's JVM is still warming up under the browser users' extra requests when the baseline ends; the
    # span metrics' minute-long flush keeps its slow start in the 2m rates long enough to fire at the start
    assert control.fired() <= ALWAYS_FIRING | {("HighRequestLatency", "ad")}
    assert control.calls("load-generator", "browser_add_to_cart", "SPAN_KIND_INTERNAL") > 100
    assert control.calls("image-provider", "image-provider") > 10 * control.calls("load-generator", "browser_add_to_cart", "SPAN_KIND_INTERNAL")
    assert shop.run(None).calls("image-provider", "image-provider") == 0


def test_image_slow_load_holds_the_browsers_images_at_envoy(browser_shop: Shop) -> None:
    """ProductCard sends the flag's 10000 as x-envoy-fault-delay-request; frontend-proxy's fault filter
    holds those requests (100 at most at once), before they reach image-provider."""
    run, control = browser_shop.run("imageSlowLoad"), browser_shop.run(None)
    assert ("HighRequestLatency", "frontend-proxy") in run.fired() - control.fired()
    assert run.get("p95", "frontend-proxy") > 1500 > control.get("p95", "frontend-proxy")
    assert run.get("p95", "image-provider") < 50
    assert run.error_services() == set()
