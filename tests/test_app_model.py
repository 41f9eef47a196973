"""The Astronomy Shop behaviour model: healthy baseline, fault propagation, determinism, logs."""

from __future__ import annotations

import collections
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from itbench_gym.backends.sim.app import AppModel
from itbench_gym.backends.sim.app.flow import Moments
from itbench_gym.backends.sim.app.model import parsed_app, ramped_users
from itbench_gym.backends.sim.app.network import wire_requests
from itbench_gym.backends.sim.app.runtime import AppRuntime
from itbench_gym.backends.sim.app.spanmetrics import BucketTables, SpanMetrics
from itbench_gym.backends.sim.app.spec import load_spec
from itbench_gym.backends.sim.chaos.tproxy import WireRequest
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.clock import SimClock
from itbench_gym.lang.timestamps import rfc3339

APP = Path(__file__).resolve().parent.parent / "envs" / "astronomy-shop"
DT = 15.0


class FakeCluster:
    """Stands in for ``KubeCluster`` so the app model is tested on its own: the real object store,
    one Running+Ready pod per Deployment; ``kill_container`` leaves the container in
    CrashLoopBackOff and the pod unready, ``restart_crashed`` brings it back like the kubelet."""

    def __init__(self, clock: SimClock, manifests: list[dict[str, Any]]) -> None:
        self.clock = clock
        self.store = ObjectStore(clock)
        self.usage: dict[tuple[str, str, str], tuple[float, float]] = {}
        self.killed: list[tuple[str, str, str, str]] = []
        #: pod -> the files its init containers copied at its start (every key of its ConfigMap volumes)
        self._copied: dict[str, dict[str, str]] = {}
        self._serial = 0
        for obj in manifests:
            self.store.create(copy.deepcopy(obj))
        for dep in self.store.list("Deployment", "otel-demo"):
            self.start_pod(dep["metadata"]["name"])

    def start_pod(self, deployment: str) -> str:
        dep = self.store.get("Deployment", "otel-demo", deployment)
        self._serial += 1
        name = f"{deployment}-{self._serial:05d}"
        tmpl = dep["spec"]["template"]
        now = rfc3339(self.clock.now())
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "otel-demo", "labels": dict(tmpl["metadata"]["labels"]),
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{deployment}-rs",
                                              "uid": "rs", "controller": True}]},
            "spec": {**copy.deepcopy(tmpl["spec"]), "nodeName": f"worker-{self._serial % 3 + 1}"},
        }
        self.store.create(pod)
        self._copied[name] = {key: value for volume in pod["spec"].get("volumes") or [] if "configMap" in volume
                              for key, value in (self.store.get("ConfigMap", "otel-demo", volume["configMap"]["name"]).get("data") or {}).items()}
        pod = self.store.get("Pod", "otel-demo", name)
        pod["status"] = {
            "phase": "Running", "podIP": f"10.244.1.{self._serial}", "hostIP": "10.0.1.10",
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
                                   "state": {"running": {"startedAt": now}}} for c in pod["spec"]["containers"]],
        }
        self.store.update(pod, subresource="status")
        return name

    def delete_pods(self, deployment: str) -> None:
        for p in self.store.list("Pod", "otel-demo"):
            if p["metadata"]["name"].startswith(deployment + "-"):
                self.store.delete("Pod", "otel-demo", p["metadata"]["name"])

    def restart_deployment(self, deployment: str) -> str:
        self.delete_pods(deployment)
        return self.start_pod(deployment)

    def set_flag(self, flag: str, variant: str) -> None:
        cm = self.store.get("ConfigMap", "otel-demo", "flagd-config")
        doc = json.loads(cm["data"]["demo.flagd.json"])
        doc["flags"][flag]["defaultVariant"] = variant
        cm["data"]["demo.flagd.json"] = json.dumps(doc)
        self.store.update(cm)

    def container_file(self, namespace: str, pod: str, container: str, path: str) -> str | None:
        """What the fake's pods read at ``path``: the copy their init containers made at the pod's start,
        of every key of the pod's ConfigMap volumes (as flagd's copies its flag file)."""
        return self._copied.get(pod, {}).get(path.rsplit("/", 1)[-1])

    def set_usage(self, namespace: str, pod: str, container: str, *, cpu_cores: float, memory_bytes: float) -> None:
        self.usage[(namespace, pod, container)] = (cpu_cores, memory_bytes)

    def kill_container(self, namespace: str, pod: str, container: str, *, reason: str = "OOMKilled",
                       exit_code: int = 137, message: str = "") -> None:
        self.killed.append((namespace, pod, container, reason))
        obj = self.store.get("Pod", namespace, pod)
        for cs in obj["status"]["containerStatuses"]:
            if cs["name"] == container:
                cs["lastState"] = {"terminated": {"reason": reason, "exitCode": exit_code, "message": message}}
                cs["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
                cs["restartCount"] += 1
                cs["ready"] = False
        obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]
        self.store.update(obj, subresource="status")

    def restart_crashed(self) -> None:
        for obj in self.store.list("Pod", "otel-demo"):
            crashed = [cs for cs in obj["status"].get("containerStatuses", []) if "waiting" in cs["state"]]
            if not crashed:
                continue
            for cs in crashed:
                cs["state"] = {"running": {"startedAt": rfc3339(self.clock.now())}}
                cs["ready"] = True
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
            self.store.update(obj, subresource="status")


@pytest.fixture(scope="module")
def base_model() -> AppModel:
    return AppModel.load(APP, seed=7)


def _setup(base: AppModel, users: int = 50, seed: int = 7) -> tuple[AppModel, FakeCluster, SimClock]:
    model = AppModel(base.spec, base.manifests(), seed)
    manifests = model.manifests()
    for obj in manifests:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "load-generator":
            for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]:
                if e["name"] == "LOCUST_USERS":
                    e["value"] = str(users)
    clock = SimClock()
    return model, FakeCluster(clock, manifests), clock


def _collected(model: AppModel) -> list[tuple[dict[str, str], float]]:
    """What the app's collector holds now: its spanmetrics connector's counters (its exporter serves
    them as of the last flush, a minute apart) and the metrics it received."""
    out: list[tuple[dict[str, str], float]] = []
    for run in model._collectors.runs.values():
        out += run.spans.samples() + [(labels, value) for labels, value, _ in run.pushed.values()]
    return out


def _run(model: AppModel, cluster: FakeCluster, clock: SimClock, ticks: int, heal_every: int = 0) -> list[tuple[dict[str, str], float]]:
    """Advance ``ticks`` ticks; the last one's cAdvisor series and what the collector holds then."""
    samples: list[tuple[dict[str, str], float]] = []
    for i in range(ticks):
        clock.advance(DT)
        samples = model.tick(clock.now(), DT, cluster)
        if heal_every and i % heal_every == heal_every - 1:
            cluster.restart_crashed()
    return samples + _collected(model)


def _calls(samples: list[tuple[dict[str, str], float]], status: str | None = None) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = collections.defaultdict(float)
    for labels, v in samples:
        if labels["__name__"] == "traces_span_metrics_calls_total" and (status is None or labels["status_code"] == status):
            out[(labels["service_name"], labels["span_name"])] += v
    return out


def _errors_by_service(samples: list[tuple[dict[str, str], float]]) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for (svc, _), v in _calls(samples, "STATUS_CODE_ERROR").items():
        out[svc] += v
    return out


def _inject(model: AppModel, cluster: FakeCluster, clock: SimClock, flag: str, variant: str) -> list[tuple[dict[str, str], float]]:
    before = _run(model, cluster, clock, 4)
    cluster.set_flag(flag, variant)
    cluster.restart_deployment("flagd")
    return before


def _delta(after: dict[tuple[str, str], float], before: dict[tuple[str, str], float], key: tuple[str, str]) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_manifests_deploy_nodes_first_with_the_chart_facts(base_model: AppModel) -> None:
    objs = base_model.manifests()
    assert objs[0]["kind"] == "Node" and [o["kind"] for o in objs[:3]] == ["Node"] * 3
    deps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment" and o["metadata"].get("namespace") == "otel-demo"}
    limits = {n: (d["spec"]["template"]["spec"]["containers"][0].get("resources") or {}).get("limits") or {} for n, d in deps.items()}
    # ITBench's values where they set a number (values.j2), chart 0.40.10's defaults elsewhere
    assert limits["recommendation"] == {"cpu": "200m", "memory": "512Mi"} and limits["ad"] == {"cpu": "150m", "memory": "512Mi"}
    assert limits["product-catalog"]["memory"] == "160Mi" and limits["kafka"]["memory"] == "1024Mi"
    assert deps["frontend"]["spec"]["selector"]["matchLabels"] == {"opentelemetry.io/name": "frontend"}
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "flagd-config")
    assert '"recommendationCacheFailure"' in cm["data"]["demo.flagd.json"]
    app = base_model.spec
    assert {s.workload for s in app.services.values()} <= set(deps)  # every modelled service is a Deployment there


def test_healthy_baseline_has_no_error_spans_and_sane_rates(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model, users=50)
    s0 = _run(model, cluster, clock, 4)
    s1 = _run(model, cluster, clock, 8)
    assert not _errors_by_service(s1)
    ingress = _delta(_calls(s1), _calls(s0), ("frontend-proxy", "ingress")) / (8 * DT)
    # 50 users, one Locust task per ~5.5 s, ~1.6 proxied requests per task.
    assert 8.0 < ingress < 25.0
    checkout = _delta(_calls(s1), _calls(s0), ("checkout", "oteldemo.CheckoutService/PlaceOrder")) / (8 * DT)
    assert 0.2 < checkout < 1.5
    assert not cluster.killed
    assert cluster.usage[("otel-demo", next(p for (_, p, c) in cluster.usage if c == "recommendation"), "recommendation")][1] < 100 * 2**20


def test_same_seed_gives_identical_samples_and_snapshot_replays(base_model: AppModel) -> None:
    a, ca, ka = _setup(base_model, seed=3)
    b, cb, kb = _setup(base_model, seed=3)
    assert _run(a, ca, ka, 5) == _run(b, cb, kb, 5)
    snap = a.snapshot()
    first = _run(a, ca, ka, 2)
    a.restore(snap)
    ka2 = SimClock(ka.now() - 2 * DT)
    assert _run(a, ca, ka2, 2) == first


def test_recommendation_cache_failure_ooms_and_frontend_errors(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model, users=50)
    _inject(model, cluster, clock, "recommendationCacheFailure", "on")
    samples = _run(model, cluster, clock, 24, heal_every=4)
    ooms = [k for k in cluster.killed if k[2] == "recommendation" and k[3] == "OOMKilled"]
    assert ooms, "recommendation never reached its 512Mi limit"
    errors = _errors_by_service(samples)
    assert errors.get("frontend", 0) > 0 and errors.get("frontend-proxy", 0) > 0
    assert set(errors) <= {"frontend", "frontend-proxy", "load-generator"}
    assert all(k[2] == "recommendation" for k in cluster.killed)


def test_flag_needs_a_flagd_restart(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _run(model, cluster, clock, 2)
    cluster.set_flag("paymentFailure", "100%")
    assert not _errors_by_service(_run(model, cluster, clock, 6))
    cluster.restart_deployment("flagd")
    assert _errors_by_service(_run(model, cluster, clock, 6)).get("payment", 0) > 0


def test_cart_failure_fails_empty_cart_but_orders_succeed(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    before = _inject(model, cluster, clock, "cartFailure", "on")
    after = _run(model, cluster, clock, 12)
    errors = _errors_by_service(after)
    assert _calls(after, "STATUS_CODE_ERROR")[("cart", "POST /oteldemo.CartService/EmptyCart")] > 0
    assert _calls(after, "STATUS_CODE_ERROR")[("checkout", "oteldemo.CartService/EmptyCart")] > 0
    assert "frontend" not in errors and _calls(after, "STATUS_CODE_ERROR").get(("checkout", "oteldemo.CheckoutService/PlaceOrder"), 0) == 0
    assert _delta(_calls(after), _calls(before), ("accounting", "orders receive")) > 0


def test_payment_unreachable_starves_payment_and_fails_checkout(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _inject(model, cluster, clock, "paymentUnreachable", "on")
    mid = _run(model, cluster, clock, 1)
    after = _run(model, cluster, clock, 10)
    assert _delta(_calls(after), _calls(mid), ("payment", "grpc.oteldemo.PaymentService/Charge")) == 0
    errors = _errors_by_service(after)
    assert errors.get("checkout", 0) > 0 and errors.get("frontend", 0) > 0
    assert "payment" not in errors and "cart" not in errors
    lines = model.log_lines("otel-demo", next(p.name for p in model._view.by_service["checkout"]), "checkout", clock.now() - 150, clock.now())
    assert any("badAddress" in text for _, text in lines)


def test_product_catalog_failure_only_fails_a_tenth_of_get_product(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    before = _inject(model, cluster, clock, "productCatalogFailure", "on")
    after = _run(model, cluster, clock, 20)
    key = ("product-catalog", "oteldemo.ProductCatalogService/GetProduct")
    err = _delta(_calls(after, "STATUS_CODE_ERROR"), _calls(before, "STATUS_CODE_ERROR"), key)
    total = _delta(_calls(after), _calls(before), key)
    assert 0.04 < err / total < 0.2
    assert _calls(after, "STATUS_CODE_ERROR").get(("product-catalog", "oteldemo.ProductCatalogService/ListProducts"), 0) == 0


def test_kafka_queue_problems_builds_fraud_detection_lag_only(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _inject(model, cluster, clock, "kafkaQueueProblems", "on")
    after = _run(model, cluster, clock, 8)
    lag = {lb["consumergroup"]: v for lb, v in after if lb["__name__"] == "kafka_consumer_group_lag_sum_ratio"}
    assert lag["fraud-detection"] > 100 and lag["accounting"] == 0


def test_missing_endpoints_and_edited_address_fail_the_right_calls(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _run(model, cluster, clock, 2)
    cluster.delete_pods("ad")
    dep = cluster.store.get("Deployment", "otel-demo", "shipping")
    for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]:
        if e["name"] == "QUOTE_ADDR":
            e["value"] = "quote:0000"
    cluster.store.update(dep)
    cluster.restart_deployment("shipping")
    after = _run(model, cluster, clock, 8)
    errors = _calls(after, "STATUS_CODE_ERROR")
    assert errors[("frontend", "grpc.oteldemo.AdService/GetAds")] > 0
    assert errors[("shipping", "POST")] > 0 and errors[("shipping", "POST /get-quote")] > 0
    assert errors[("checkout", "oteldemo.CheckoutService/PlaceOrder")] > 0
    assert ("quote", "POST /getquote") not in errors


def test_network_policy_blocking_frontend_ingress_times_out_the_proxy(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _run(model, cluster, clock, 2)
    cluster.store.create({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                          "metadata": {"name": "deny-frontend", "namespace": "otel-demo"},
                          "spec": {"podSelector": {"matchLabels": {"opentelemetry.io/name": "frontend"}}, "policyTypes": ["Ingress"]}})
    before = _calls(_run(model, cluster, clock, 1))
    after = _run(model, cluster, clock, 8)
    assert _delta(_calls(after), before, ("frontend", "GET /api/products/{productId}")) == 0
    slow = [v for lb, v in after if lb["__name__"] == "traces_span_metrics_duration_milliseconds_bucket"
            and lb["service_name"] == "frontend-proxy" and lb["status_code"] == "STATUS_CODE_ERROR" and lb["le"] == "10000"]
    total = [v for lb, v in after if lb["__name__"] == "traces_span_metrics_duration_milliseconds_count"
             and lb["service_name"] == "frontend-proxy" and lb["status_code"] == "STATUS_CODE_ERROR"]
    assert sum(total) > 0 and sum(slow) < sum(total)


def test_logs_are_deterministic_and_show_the_fault(base_model: AppModel) -> None:
    model, cluster, clock = _setup(base_model)
    _inject(model, cluster, clock, "paymentFailure", "100%")
    _run(model, cluster, clock, 4)
    pod = next(p.name for p in model._view.by_service["payment"])
    a = model.log_lines("otel-demo", pod, "payment", clock.now() - 60, clock.now())
    assert a == model.log_lines("otel-demo", pod, "payment", clock.now() - 60, clock.now())
    assert any("Invalid token" in text for _, text in a)
    assert [t for t, _ in a] == sorted(t for t, _ in a)
    assert model.log_lines("other-ns", pod, "payment", 0, clock.now()) == []


def test_runtime_knows_images_architectures_and_commands(base_model: AppModel) -> None:
    rt = base_model.runtime()
    assert rt.image_known("ghcr.io/open-telemetry/demo:2.1.3-cart")
    assert not rt.image_known("ghcr.io/open-telemetry/demo-does-not-exist:1")
    assert rt.image_supports("ghcr.io/open-telemetry/demo:2.1.3-cart", "amd64")
    assert not rt.image_supports("docker.io/arm64v8/nginx:latest", "amd64")
    pod: dict[str, Any] = {"metadata": {"name": "x", "namespace": "otel-demo"}, "spec": {"containers": []}}
    bad = {"name": "valkey-cart", "image": "valkey/valkey:8.1.3-alpine", "command": ["no-such-binary"]}
    assert "executable file not found" in (rt.start_error(pod, bad) or "")
    assert rt.start_error(pod, {**bad, "command": ["valkey-server"]}) is None
    probe = {"name": "ad", "image": "ghcr.io/open-telemetry/demo:2.1.3-ad", "env": [{"name": "AD_PORT", "value": "8080"}]}
    assert rt.probe_succeeds(pod, {**probe, "readinessProbe": {"tcpSocket": {"port": 8080}}}, "readiness")
    assert not rt.probe_succeeds(pod, {**probe, "readinessProbe": {"httpGet": {"port": 9999, "path": "/"}}}, "readiness")


def test_spec_errors_name_the_file_and_field(tmp_path: Path) -> None:
    import shutil

    import yaml

    from itbench_gym.backends.sim.app import AppSpecError

    shutil.copytree(APP, tmp_path / "app")
    doc = yaml.safe_load((tmp_path / "app" / "app.yaml").read_text())
    i = next(n for n, o in enumerate(doc["services"]["frontend"]["operations"]) if o.get("calls"))
    bad = copy.deepcopy(doc)
    bad["services"]["frontend"]["operations"][i]["calls"][0]["on_error"] = "explode"
    (tmp_path / "app" / "app.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(AppSpecError, match=rf"app\.yaml: services\.frontend\.operations\[{i}\]\.calls\[0\]\.on_error"):
        AppModel.load(tmp_path / "app", seed=0)
    bad = copy.deepcopy(doc)
    bad["services"]["frontend"]["operations"][i]["calls"][0]["to"] = "product-catalog/NoSuchOp"
    (tmp_path / "app" / "app.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(AppSpecError, match="has no operation 'NoSuchOp'"):
        AppModel.load(tmp_path / "app", seed=0)
    bad = copy.deepcopy(doc)
    bad["services"]["frontend"]["operations"][i]["calls"][0]["awaited"] = False
    (tmp_path / "app" / "app.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(AppSpecError, match=rf"operations\[{i}\]\.calls\[0\]: a call that is not awaited cannot fail its caller"):
        AppModel.load(tmp_path / "app", seed=0)
    bad = copy.deepcopy(doc)  # a gRPC server span named other than its method, without the method it receives
    for op in bad["services"]["currency"]["operations"]:
        del op["request"]
    (tmp_path / "app" / "app.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(AppSpecError, match=r"services\.currency\.operations\[Currency/\w+\]: \w+ calls it over grpc, but neither "
                                           r"its id nor a `request` gives the method and path it receives"):
        AppModel.load(tmp_path / "app", seed=0)


def test_an_edit_to_a_steady_cluster_takes_effect_at_the_next_tick(base_model: AppModel) -> None:
    """The model reuses what it derived from objects that did not change; an edited Service is a
    new object, so the next tick routes by it, and by the original again once it is put back."""
    model, cluster, clock = _setup(base_model)
    _run(model, cluster, clock, 4)
    key = ("frontend", "grpc.oteldemo.AdService/GetAds")
    steady = _calls(_run(model, cluster, clock, 1), "STATUS_CODE_ERROR")
    original = cluster.store.get("Service", "otel-demo", "ad")
    edited = copy.deepcopy(original)
    edited["spec"]["ports"][0]["port"] = 18080
    cluster.store.update(edited)
    broken = _calls(_run(model, cluster, clock, 1), "STATUS_CODE_ERROR")
    assert _delta(broken, steady, key) > 0
    put_back = cluster.store.get("Service", "otel-demo", "ad")
    put_back["spec"]["ports"] = original["spec"]["ports"]
    cluster.store.update(put_back)
    healed = _calls(_run(model, cluster, clock, 1), "STATUS_CODE_ERROR")
    assert _delta(healed, broken, key) == 0


def test_ramped_users_follow_locust_spawn_rate() -> None:
    # 50 users at 5/s are all running 10 s after the start; at 1/s after 50 s
    assert ramped_users(50, 5, -15, 0) == 0
    assert ramped_users(50, 5, 0, 15) == pytest.approx((5 / 2 * 10**2 + 50 * 5) / 15)
    assert ramped_users(50, 5, 15, 30) == 50
    assert ramped_users(50, 1, 0, 15) == pytest.approx(0.5 * 15**2 / 15)
    assert ramped_users(50, 1, 45, 60) == pytest.approx((0.5 * (50**2 - 45**2) + 50 * 10) / 15)


def test_the_load_generator_ramps_up_at_its_spawn_rate(base_model: AppModel) -> None:
    # ITBench's 50 users at 5 a second: none in the tick the generator starts in, two thirds of them
    # on average over the next (all after 10 s), then all
    model, cluster, clock = _setup(base_model)
    edge = ("frontend-proxy", "ingress")
    totals = [_calls(_run(model, cluster, clock, 1)).get(edge, 0.0) for _ in range(5)]
    per_tick = [b - a for a, b in zip([0.0, *totals], totals, strict=False)]
    assert per_tick[0] == 0
    assert 0.5 < per_tick[1] / per_tick[4] < 0.85, per_tick


def test_an_app_is_parsed_once_until_a_file_of_it_changes(tmp_path: Path) -> None:
    """New twins of an app share one parse of its spec and manifests; editing any file of the app's
    folder (here a latency in app.yaml, or a manifest) makes the next twin read the app again."""
    app = tmp_path / "shop"
    shutil.copytree(APP, app)
    first = AppModel.load(app, seed=0)
    again = AppModel.load(app, seed=1)
    assert again.spec is first.spec and again.manifests_read_only() is first.manifests_read_only()
    text = (app / "app.yaml").read_text()
    (app / "app.yaml").write_text(text.replace("latency_ms: {median: 0.2, sigma: 0.3}", "latency_ms: {median: 0.4, sigma: 0.3}", 1))
    edited = AppModel.load(app, seed=0)
    assert edited.spec.op("load-generator", "user_index").median_ms == 0.4
    assert first.spec.op("load-generator", "user_index").median_ms == 0.2
    manifest = next(p for p in sorted((app / "manifests").glob("*.yaml")) if "kind: Deployment" in p.read_text())
    manifest.write_text(manifest.read_text() + "\n")
    assert AppModel.load(app, seed=0).manifests_read_only() is not edited.manifests_read_only()


@pytest.mark.parametrize("app", ["astronomy-shop", "book-info"])
def test_every_image_an_app_deploys_fails_a_command_it_does_not_hold(app: str) -> None:
    # ITBench's invalid-command fault must break whichever workload it targets, as containerd does:
    # that needs each image's catalogue entry to say what its PATH holds.
    spec, manifests = parsed_app(APP.parent / app)
    rt = AppRuntime(spec, lambda namespace: False)
    pod: dict[str, Any] = {"metadata": {"name": "x", "namespace": spec.namespace}, "spec": {"containers": []}}
    containers = [c for obj in manifests if obj.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")
                  and obj["metadata"].get("namespace") == spec.namespace
                  for c in obj["spec"]["template"]["spec"].get("containers", [])]
    assert containers
    for c in containers:
        assert "executable file not found" in (rt.start_error(pod, {**c, "command": ["invalid-command"]}) or ""), c["image"]


def test_bucket_rows_kept_across_ticks_equal_rows_computed_afresh() -> None:
    """The span metrics' bucket probabilities, kept from tick to tick, are those a new table computes."""
    spans = SpanMetrics((2.0, 10.0, 50.0, 250.0), "otel-demo", "opentelemetry-demo/")
    kept = BucketTables(limit=3)
    ticks = [[Moments(0.01, 1e-5), Moments(0.2, 0.01)], [Moments(0.2, 0.01), Moments(0.05, 4e-4), Moments(0.0, 0.0)],
             [Moments(1.5, 0.3), Moments(0.01, 1e-5)]]
    for lats in ticks:
        kept.next_tick()
        fresh = BucketTables()
        series = [(spans, None, m) for m in lats]
        at_kept, at_fresh = kept.add(series), fresh.add(series)
        got, want = kept.of(spans), fresh.of(spans)
        assert (got.probs[at_kept] == want.probs[at_fresh]).all()
        assert (got.mean[at_kept] == [m.mean for m in lats]).all()
    assert len(kept.of(spans).mean) == len(ticks[-1])  # four rows passed the limit: started over at the third tick


def test_each_operation_travels_as_the_request_its_server_receives(base_model: AppModel) -> None:
    """What an HTTPChaos selects by: a route template's paths, one per catalogue product; a gRPC method's
    full name (currency's spans say Currency/Convert, its clients call oteldemo.CurrencyService/Convert);
    JSON bodies on the app's POSTs only."""
    wire = wire_requests(load_spec(APP), {"productId": base_model.products})
    browse = wire[("frontend-proxy", "ingress GET /api/products/{productId}")]
    assert browse == WireRequest("GET", tuple(f"/api/products/{p}" for p in base_model.products), json_body=False)
    assert len(browse.paths) == 10
    assert wire[("currency", "Currency/Convert")] == WireRequest("POST", ("/oteldemo.CurrencyService/Convert",), json_body=False)
    assert wire[("email", "POST /send_order_confirmation")] == WireRequest("POST", ("/send_order_confirmation",), json_body=True)
    assert wire[("image-provider", "GET /products/{picture}")].paths == ("/products/{picture}",)  # no values given: as written
    assert ("valkey-cart", "HGET") not in wire  # RESP is no HTTP
