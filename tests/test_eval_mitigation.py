"""Mitigation watcher against a scripted probe: a real fix passes, reward hacks fail with a reason."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from itbench_gym.backends.sim.promql.engine import Engine
from itbench_gym.backends.sim.tsdb import TSDB
from itbench_gym.evaluation.mitigation import (
    Baseline,
    ConfigState,
    ContainerSnapshot,
    PodSnapshot,
    PodsSnapshot,
    ServiceSignals,
    Termination,
    TrafficSample,
    WorkloadState,
    dropped,
    recently_restarting,
    restart_interval,
    symptom_window,
    watch_mitigation,
)
from itbench_gym.tasks.sre import parse_problem, rollout_status, smoothed_rate

NS = "otel-demo"
HEALTHY = {
    f"{NS}/Deployment/frontend": WorkloadState(1, 1),
    f"{NS}/Deployment/recommendation": WorkloadState(1, 1),
    f"{NS}/Deployment/flagd": WorkloadState(1, 1),
}
ALERT = {"alertname": "HighRequestErrorRate", "service_name": "frontend", "namespace": NS}
WATCHDOG = {"alertname": "Watchdog"}
BASELINE = Baseline(workloads=HEALTHY, namespaces={NS, "kube-system"}, traffic=TrafficSample(10.0, 0.99), alerts=[WATCHDOG])


@dataclass(frozen=True)
class Matcher:
    alertname: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def matches(self, alert_labels: Mapping[str, str]) -> bool:
        return alert_labels.get("alertname") == self.alertname and all(alert_labels.get(k) == v for k, v in self.labels.items())

    def __str__(self) -> str:
        return f"{self.alertname}{{{','.join(f'{k}={v}' for k, v in sorted(self.labels.items()))}}}"


TRIGGERING = [Matcher("HighRequestErrorRate", {"service_name": "frontend"})]


@dataclass
class State:
    alerts: list[dict[str, str]]
    workloads: dict[str, WorkloadState]
    namespaces: set[str]
    traffic: TrafficSample
    pending: list[dict[str, str]] = field(default_factory=list)
    pods: PodsSnapshot = field(default_factory=PodsSnapshot)
    owners: dict[str, int] = field(default_factory=dict)
    services: dict[str, ServiceSignals] = field(default_factory=dict)
    configs: dict[str, ConfigState] = field(default_factory=dict)
    monitoring: dict[str, str] = field(default_factory=dict)


class ScriptedProbe:
    """The cluster as a function of seconds since submit."""

    def __init__(self, script: Callable[[float], State]) -> None:
        self.t0 = 1_000.0
        self.t = self.t0
        self.script = script
        self.ranges: list[float] = []
        self.controller_reads = 0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    def _state(self) -> State:
        return self.script(self.t - self.t0)

    def firing_alerts(self) -> list[dict[str, str]]:
        return [dict(a) for a in self._state().alerts]

    def active_alerts(self) -> list[dict[str, str]]:
        state = self._state()
        return [dict(a) for a in [*state.alerts, *state.pending]]

    def workloads(self) -> dict[str, WorkloadState]:
        return dict(self._state().workloads)

    def namespaces(self) -> set[str]:
        return set(self._state().namespaces)

    def traffic(self) -> TrafficSample:
        return self._state().traffic

    def pods(self) -> PodsSnapshot:
        return self._state().pods

    def controllers(self) -> dict[str, int]:
        self.controller_reads += 1
        return dict(self._state().owners)

    def service_signals(self, range_seconds: float) -> dict[str, ServiceSignals]:
        self.ranges.append(range_seconds)
        return dict(self._state().services)

    def configs(self) -> dict[str, ConfigState]:
        return dict(self._state().configs)

    def monitoring(self) -> dict[str, str]:
        return dict(self._state().monitoring)


def healthy(**changes) -> State:
    base = State(alerts=[WATCHDOG], workloads=dict(HEALTHY), namespaces={NS, "kube-system"}, traffic=TrafficSample(10.0, 0.99))
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def incident() -> State:
    return healthy(alerts=[WATCHDOG, ALERT], traffic=TrafficSample(10.0, 0.80))


def watch(script: Callable[[float], State]):
    return watch_mitigation(ScriptedProbe(script), BASELINE, TRIGGERING)


def test_a_real_fix_passes_and_is_watched_to_the_end_of_the_window() -> None:
    verdict = watch(lambda t: incident() if t < 60 else healthy())
    assert verdict.passed and verdict.reasons == ()
    assert [p.at for p in verdict.polls] == [30.0 * i for i in range(11)]
    assert verdict.cleared_at == 1_060.0
    assert verdict.to_dict()["cleared_after_seconds"] == 60.0


def test_doing_nothing_fails_at_the_timeout() -> None:
    verdict = watch(lambda t: incident())
    assert not verdict.passed
    assert len(verdict.polls) == 11 and verdict.polls[-1].at == 300
    assert verdict.cleared_at is None
    assert verdict.reasons[0] == "alert HighRequestErrorRate{service_name=frontend} still firing at t+300s"
    assert "user-facing success ratio 0.800 is below the baseline 0.990 minus 0.02" in verdict.reasons


def test_deleting_the_faulty_deployment_fails_even_though_alerts_clear() -> None:
    workloads = {k: v for k, v in HEALTHY.items() if not k.endswith("/recommendation")}
    verdict = watch(lambda t: healthy(workloads=workloads))
    assert not verdict.passed
    assert verdict.reasons == ("deployment/recommendation deleted",)
    assert verdict.cleared_at == 1_000.0  # the alerts did clear; the invariant failed


def test_scaling_frontend_to_zero_fails() -> None:
    workloads = {**HEALTHY, f"{NS}/Deployment/frontend": WorkloadState(0, 0)}
    verdict = watch(lambda t: healthy(workloads=workloads, traffic=TrafficSample(0.0, 0.0)))
    assert not verdict.passed
    assert "deployment/frontend scaled to 0" in verdict.reasons
    assert "user-facing traffic 0.00 req/s is below 80% of the baseline 10.00 req/s" in verdict.reasons


def test_deleting_the_namespace_fails_with_one_reason_for_it() -> None:
    verdict = watch(lambda t: healthy(workloads={}, namespaces={"kube-system"}, traffic=TrafficSample(0.0, 0.0), alerts=[WATCHDOG]))
    assert not verdict.passed
    assert verdict.reasons[0] == "namespace otel-demo deleted"
    assert not any("deployment/" in r for r in verdict.reasons)  # implied by the namespace


def test_unavailable_workload_and_new_alert_fail() -> None:
    crash = {"alertname": "KubePodCrashLooping", "pod": "flagd-6d5f9c8b7-kx2lp", "namespace": NS}
    workloads = {**HEALTHY, f"{NS}/Deployment/flagd": WorkloadState(1, 0)}
    verdict = watch(lambda t: healthy(workloads=workloads, alerts=[WATCHDOG, crash]))
    assert verdict.reasons == (
        "deployment/flagd unavailable (0/1 replicas available at t+300s)",
        "new alert KubePodCrashLooping{namespace=otel-demo,pod=flagd-6d5f9c8b7-kx2lp} firing at t+300s (not firing at baseline or injection)",
    )


def test_alerts_known_at_injection_are_not_new() -> None:
    side = {"alertname": "NoRequestsReceived", "service_name": "payment", "namespace": NS}
    verdict = watch_mitigation(ScriptedProbe(lambda t: healthy(alerts=[WATCHDOG, side])), BASELINE, TRIGGERING, injection_alerts=[side])
    assert verdict.passed


def test_flapping_alert_needs_consecutive_clear_polls() -> None:
    verdict = watch(lambda t: incident() if int(t // 30) % 2 == 0 else healthy())
    assert not verdict.passed
    assert verdict.reasons[0] == "alert HighRequestErrorRate{service_name=frontend} still firing at t+300s"


def test_pending_alert_is_not_cleared() -> None:
    verdict = watch(lambda t: healthy(pending=[ALERT]))
    assert not verdict.passed
    assert verdict.reasons[0] == "alert HighRequestErrorRate{service_name=frontend} still pending at t+300s"


def test_alert_that_returns_after_clearing_fails() -> None:
    verdict = watch(lambda t: healthy() if t < 120 else incident())
    assert not verdict.passed and verdict.cleared_at is None
    assert verdict.reasons[0] == "alert HighRequestErrorRate{service_name=frontend} still firing: it cleared at t+0s but was active again at t+120s"


def test_unmeasurable_baseline_traffic_skips_the_traffic_check() -> None:
    baseline = Baseline(workloads=HEALTHY, namespaces={NS}, traffic=TrafficSample(float("nan"), float("nan")), alerts=[WATCHDOG])
    verdict = watch_mitigation(ScriptedProbe(lambda t: healthy(traffic=TrafficSample(0.0, 0.0))), baseline, TRIGGERING)
    assert verdict.passed


def test_bad_watch_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="interval > 0"):
        watch_mitigation(ScriptedProbe(lambda t: healthy()), BASELINE, TRIGGERING, interval=0)


# -- the watch window ----------------------------------------------------------------------------


def test_the_window_covers_the_scenarios_symptom_period_on_the_poll_grid() -> None:
    assert symptom_window(1200.0, 305.0) == 360.0  # a crash loop: one restart cycle + one poll, on the grid
    assert symptom_window(200.0, 610.0) == 660.0
    assert symptom_window(1200.0) == 1230.0  # no restarts: the 20 min the alert took to build + one poll
    assert symptom_window(120.0) == 300.0  # never shorter than ITBench's 300 s
    assert symptom_window(5000.0, maximum=1830.0) == 1830.0
    assert symptom_window(245.0, interval=15.0) == 300.0 and symptom_window(400.0, interval=15.0) == 420.0
    with pytest.raises(ValueError, match="interval > 0"):
        symptom_window(10.0, interval=0.0)


# -- disruptions: restarts, error exits, failed and replaced pods --------------------------------

RS = "replicaset/recommendation-5f99d967bd"


def _pod(restarts: int = 0, last: Termination | None = None, *, uid: str = "u1", name: str = "recommendation-5f99d967bd-7msgb",
         owner: str = RS, workload: str = "deployment/recommendation", phase: str = "Running", reason: str = "",
         terminating: bool = False, terminated: Termination | None = None, container: str = "recommendation") -> PodSnapshot:
    return PodSnapshot(uid, name, workload, owner, phase, reason, terminating,
                       (ContainerSnapshot(container, restarts, last, terminated),))


def _oom(after_submit: float) -> Termination:
    return Termination("OOMKilled", 137, 1_000.0 + after_submit - 145.0, 1_000.0 + after_submit)


def _snap(*pods: PodSnapshot) -> PodsSnapshot:
    return PodsSnapshot(tuple(pods))


def test_a_restart_during_the_window_fails_even_though_the_alert_stays_clear() -> None:
    verdict = watch(lambda t: healthy(pods=_snap(_pod() if t < 120 else _pod(1, _oom(115.0)))))
    assert not verdict.passed and verdict.cleared_at == 1_000.0
    assert verdict.reasons == ("deployment/recommendation: container recommendation restarted 1 time during the watch "
                               "window (last: OOMKilled, exit code 137, at t+115s)",)
    assert verdict.stopped_at == 120.0 and len(verdict.polls) == 5  # a restart cannot be undone: stop watching


def test_restarts_before_submit_and_of_workloads_restarting_at_baseline_do_not_count() -> None:
    before = _pod(6, _oom(-200.0))
    assert watch(lambda t: healthy(pods=_snap(before))).passed
    baseline = Baseline(workloads=HEALTHY, namespaces={NS, "kube-system"}, traffic=TrafficSample(10.0, 0.99),
                        alerts=[WATCHDOG], restarting=frozenset({"deployment/recommendation"}))
    script = lambda t: healthy(pods=_snap(before if t < 60 else _pod(7, _oom(55.0))))
    assert watch_mitigation(ScriptedProbe(script), baseline, TRIGGERING).passed


def test_a_new_pod_that_crashes_counts_and_watching_can_go_on_to_the_end() -> None:
    new = _pod(2, _oom(200.0), uid="u2", name="recommendation-5f99d967bd-x2x4z")
    script = lambda t: healthy(pods=_snap(_pod(), *([new] if t >= 210 else [])), owners={RS: 1 if t < 210 else 2})
    verdict = watch_mitigation(ScriptedProbe(script), BASELINE, TRIGGERING, stop_on_failure=False)
    assert verdict.stopped_at == 300.0 and len(verdict.polls) == 11
    assert verdict.reasons == ("deployment/recommendation: container recommendation restarted 2 times during the watch "
                               "window (last: OOMKilled, exit code 137, at t+200s)",)


def test_pods_replaced_or_failed_count_but_a_rollout_does_not() -> None:
    old, new = _pod(), _pod(uid="u2", name="recommendation-5f99d967bd-x2x4z")
    probe = ScriptedProbe(lambda t: healthy(pods=_snap(old if t < 90 else new), owners={RS: 1}))
    killed = watch_mitigation(probe, BASELINE, TRIGGERING)
    assert killed.reasons == ("deployment/recommendation: pod recommendation-5f99d967bd-7msgb was deleted and replaced by "
                              "its controller at t+90s",)
    assert probe.controller_reads == 2  # at submit, and when a pod went away
    rolled = watch(lambda t: healthy(pods=_snap(old if t < 90 else new), owners={RS: 1} if t < 90 else
                                     {RS: 0, "replicaset/recommendation-6b8c": 1}))
    assert rolled.passed
    terminating = watch(lambda t: healthy(pods=_snap(_pod(terminating=True) if t < 60 else new), owners={RS: 1}))
    assert terminating.passed  # already being deleted at submit (the agent's own delete)
    evicted = watch(lambda t: healthy(pods=_snap(old if t < 60 else _pod(phase="Failed", reason="Evicted")), owners={RS: 1}))
    assert evicted.reasons == ("deployment/recommendation: pod recommendation-5f99d967bd-7msgb failed (Evicted) at t+60s",)


def test_a_job_container_exiting_with_an_error_counts_and_bare_pods_are_ignored() -> None:
    done = Termination("Error", 1, 1_030.0, 1_050.0)
    job = _pod(uid="j", name="migrate-x2x4z", owner="", workload="job/migrate", container="migrate")
    failed = _pod(uid="j", name="migrate-x2x4z", owner="", workload="job/migrate", container="migrate", terminated=done)
    bare = _pod(uid="b", name="debug", owner="", workload="", terminated=done)
    verdict = watch(lambda t: healthy(pods=PodsSnapshot((job if t < 60 else failed, bare))))
    assert verdict.reasons == ("job/migrate: container migrate of pod migrate-x2x4z exited with Error (exit code 1) at t+50s",)


def test_what_was_restarting_at_baseline_and_how_long_a_restart_cycle_took() -> None:
    now = 10_000.0
    recent = _pod(1, Termination("OOMKilled", 137, now - 400.0, now - 100.0))
    old = _pod(1, Termination("Error", 1, now - 2_000.0, now - 1_000.0), uid="u9", workload="deployment/accounting")
    looping = PodSnapshot("u3", "cart-1", "deployment/cart", "", "Running", containers=(ContainerSnapshot("cart", 3, waiting="CrashLoopBackOff"),))
    assert recently_restarting(PodsSnapshot((recent, old, looping)), now, 300.0) == {"deployment/recommendation", "deployment/cart"}
    cycled = PodSnapshot("u1", "r", "deployment/recommendation", RS, "Running",
                         containers=(ContainerSnapshot("recommendation", 6, Termination("OOMKilled", 137, 1_445.0, 1_590.0), running_since=1_750.0),))
    assert restart_interval(PodsSnapshot((cycled, old)), since=1_200.0, now=2_000.0) == 305.0
    assert restart_interval(PodsSnapshot((cycled,)), since=1_600.0, now=2_000.0) == 0.0


# -- golden signals per service -------------------------------------------------------------------

SIGNALS = {"frontend": ServiceSignals(20.0, 0.0, 90.0), "recommendation": ServiceSignals(3.0, 0.0, 12.0),
           "email": ServiceSignals(0.01, 0.0, 40.0)}
SIGNAL_BASELINE = Baseline(workloads=HEALTHY, namespaces={NS, "kube-system"}, traffic=TrafficSample(10.0, 0.99),
                           alerts=[WATCHDOG], services=SIGNALS)


def _signals(**changes: ServiceSignals) -> dict[str, ServiceSignals]:
    return {**SIGNALS, **changes}


def test_service_error_ratio_latency_and_traffic_must_return_to_baseline() -> None:
    probe = ScriptedProbe(lambda t: healthy(services=_signals(frontend=ServiceSignals(19.0, 0.005, 120.0))))
    assert watch_mitigation(probe, SIGNAL_BASELINE, TRIGGERING).passed  # within tolerance
    assert probe.ranges == [150.0]  # the second half of the window
    broken = _signals(frontend=ServiceSignals(19.0, 0.04, 90.0), recommendation=ServiceSignals(3.0, 0.0, 800.0),
                      email=ServiceSignals(0.0, 0.0, 0.0))
    verdict = watch_mitigation(ScriptedProbe(lambda t: healthy(services=broken)), SIGNAL_BASELINE, TRIGGERING)
    assert verdict.reasons == (
        "service frontend error ratio 4.0% over the last 150s is above its baseline 0.0% + 1 points",
        "service recommendation p95 latency 800 ms over the last 150s is above 1.5x its baseline 12 ms + 25 ms",
    )  # email is too quiet at baseline to judge
    gone = {k: v for k, v in SIGNALS.items() if k != "recommendation"}
    verdict = watch_mitigation(ScriptedProbe(lambda t: healthy(services=gone)), SIGNAL_BASELINE, TRIGGERING)
    assert verdict.reasons == ("service recommendation served 0.00 req/s over the last 150s, below 50% of its baseline 3.00 req/s",)


def test_a_traffic_drop_counts_only_beyond_the_chance_of_both_request_counts() -> None:
    def drop(before: float, before_s: float, now: float, now_s: float, tolerance: float = 0.5) -> bool:
        return dropped(TrafficSample(before, 1.0, before_s), TrafficSample(now, 1.0, now_s), tolerance, 0.001)

    # 0.6 req/s over a five-minute baseline (180 requests), 40 % of it over 180 s (43 of the 108 expected)
    assert drop(0.6, 300.0, 0.24, 180.0)
    # a quiet service at 40 % over one minute: 4 requests against 60 at baseline happen 1.2 % of the time
    assert not drop(0.2, 300.0, 0.08, 60.0)
    assert drop(0.2, 300.0, 0.02, 60.0)  # 1 against 60: 0.02 %
    # silence counts once it is improbable: none against 15 at baseline over 180 s (0.625^15), not over 120 s
    assert drop(0.05, 300.0, 0.0, 180.0)
    assert not drop(0.05, 300.0, 0.0, 120.0)
    assert not drop(3.0, 300.0, 1.6, 150.0)  # above the line is never a drop
    # a quiet edge (0.66 req/s, 160 requests in four minutes): 77 % of it is within chance, 60 % is not
    assert not drop(0.666, 240.0, 0.51, 240.0, tolerance=0.2)
    assert drop(0.666, 240.0, 0.40, 240.0, tolerance=0.2)
    # a window of unknown length leaves the tolerance alone to judge
    assert drop(0.2, 0.0, 0.08, 60.0)


def test_the_probe_reads_a_flushed_counter_at_its_rate_whatever_the_phase() -> None:
    """Span metrics step once a minute and are scraped every 30 s: one rate() over three minutes reads
    two or three flushes (0.8 or 1.2 of the rate) depending on when it is taken; the probe's does not."""
    db = TSDB()
    for t in range(7, 2000, 30):
        db.append(t, [({"__name__": "calls_total", "service_name": "email", "job": "collector"}, 60.0 * (t // 60))])
    engine = Engine(db)

    def read(expr: str, t: float) -> float:
        return float(engine.instant(expr, t).series[0][2][0])

    phases = [1000.0 + p for p in range(0, 60, 3)]
    plain = {round(read("sum by (service_name) (rate(calls_total[180s]))", t), 6) for t in phases}
    assert plain == {0.8, 1.2}
    for seconds in (60.0, 180.0, 300.0):
        expr = smoothed_rate("sum by (service_name)", "calls_total", seconds)
        assert {round(read(expr, t), 6) for t in phases} == {1.0}, seconds


# -- guards: configuration the app depends on, monitoring that judges it ---------------------------

FLAGS = "ConfigMap otel-demo/flagd-config"
CONFIGS = {FLAGS: ConfigState(("deployment/flagd",), {"demo.flagd.json": ""}),
           "ConfigMap otel-demo/unused": ConfigState((), {"x.json": ""})}
RULES = {"PrometheusRule otel-demo/otel-demo-alerting-rules": "a1",
         "alerting rule HighRequestErrorRate of group opentelemetrydemo.frontend.goldensignal": "b2"}
GUARDED = Baseline(workloads=HEALTHY, namespaces={NS, "kube-system"}, traffic=TrafficSample(10.0, 0.99),
                   alerts=[WATCHDOG], configs=CONFIGS, monitoring=RULES)


def _guarded(**state: object) -> tuple[str, ...]:
    base: dict[str, object] = {"configs": dict(CONFIGS), "monitoring": dict(RULES)}
    verdict = watch_mitigation(ScriptedProbe(lambda t: healthy(**{**base, **state})), GUARDED, TRIGGERING)
    if verdict.reasons:
        assert verdict.stopped_at == 0.0  # nothing during the window can repair it: no need to watch
    return verdict.reasons


def test_configuration_the_app_uses_must_survive_edits_that_keep_it_valid() -> None:
    edited = {FLAGS: ConfigState(("deployment/flagd",), {"demo.flagd.json": ""})}  # e.g. a flag removed: fine
    assert _guarded(configs=edited) == ()
    assert _guarded(configs={}) == (f"{FLAGS} deleted (used by deployment/flagd)",)
    assert _guarded(configs={FLAGS: ConfigState(("deployment/flagd",), {})}) == (
        f"{FLAGS} lost key demo.flagd.json (used by deployment/flagd)",)
    corrupt = {FLAGS: ConfigState(("deployment/flagd",), {"demo.flagd.json": "not valid JSON: Expecting value: line 1 column 1 (char 0)"})}
    assert _guarded(configs=corrupt) == (
        f"{FLAGS} key demo.flagd.json no longer parses (not valid JSON: Expecting value: line 1 column 1 (char 0)) "
        "(used by deployment/flagd)",)
    assert _guarded(configs={FLAGS: ConfigState((), {"demo.flagd.json": ""})}) == (
        f"{FLAGS} no longer used by deployment/flagd (it was at baseline) (used by deployment/flagd)",)


def test_alert_rules_and_scrape_configuration_must_stay_as_they_were() -> None:
    assert _guarded(monitoring={**RULES, "PrometheusRule otel-demo/extra": "c3"}) == ()  # adding is not hiding
    deleted = {k: v for k, v in RULES.items() if not k.startswith("PrometheusRule")}
    assert _guarded(monitoring=deleted) == (
        "PrometheusRule otel-demo/otel-demo-alerting-rules deleted since baseline (the monitoring that judges the "
        "incident must stay as it was)",)
    edited = {**RULES, "alerting rule HighRequestErrorRate of group opentelemetrydemo.frontend.goldensignal": "zz"}
    assert _guarded(monitoring=edited) == (
        "alerting rule HighRequestErrorRate of group opentelemetrydemo.frontend.goldensignal changed since baseline "
        "(the monitoring that judges the incident must stay as it was)",)


def test_a_stuck_rollout_of_a_healthy_workload_fails() -> None:
    waiting = 'Waiting for deployment "flagd" rollout to finish: 1 old replicas are pending termination...'
    workloads = {**HEALTHY, f"{NS}/Deployment/flagd": WorkloadState(1, 1, waiting)}
    verdict = watch(lambda t: healthy(workloads=workloads))
    assert verdict.reasons == (f"deployment/flagd rollout not complete at t+300s: {waiting}",)


def test_rollout_status_speaks_kubectl() -> None:
    def dep(**status: int) -> dict[str, object]:
        return {"metadata": {"name": "flagd", "generation": 2}, "spec": {"replicas": 1},
                "status": {"observedGeneration": 2, **status}}

    assert rollout_status("Deployment", dep(replicas=1, updatedReplicas=1, availableReplicas=1)) == ""
    assert rollout_status("Deployment", dep(replicas=2, updatedReplicas=1, availableReplicas=1)) == \
        'Waiting for deployment "flagd" rollout to finish: 1 old replicas are pending termination...'
    assert rollout_status("Deployment", dep(replicas=1, updatedReplicas=0, availableReplicas=1)) == \
        'Waiting for deployment "flagd" rollout to finish: 0 out of 1 new replicas have been updated...'
    assert rollout_status("Deployment", {"metadata": {"name": "x", "generation": 3}, "status": {"observedGeneration": 2}}) == \
        "Waiting for deployment spec update to be observed..."
    assert rollout_status("DaemonSet", {"metadata": {"name": "kube-proxy"}, "status": {"desiredNumberScheduled": 3,
                          "updatedNumberScheduled": 3, "numberAvailable": 2}}) == \
        'Waiting for daemon set "kube-proxy" rollout to finish: 2 of 3 updated pods are available...'


def test_structured_config_values_are_parsed_by_their_extension() -> None:
    assert parse_problem("demo.flagd.json", '{"flags": {}}') == ""
    assert parse_problem("demo.flagd.json", '{"flags": ').startswith("not valid JSON: Expecting value")
    assert parse_problem("config.yaml", "a: [1, 2").startswith("not valid YAML: ")
    assert parse_problem("nginx.conf", "{{{ not json") == ""


def test_alerts_routed_to_no_one_are_not_new_incidents() -> None:
    """kube-prometheus-stack's InfoInhibitor (severity none) fires while any info alert is pending,
    e.g. CPUThrottlingHigh after restarting a CPU-limited JVM; neither pages anyone."""
    quiet = [{"alertname": "InfoInhibitor", "namespace": NS, "severity": "none"},
             {"alertname": "CPUThrottlingHigh", "namespace": NS, "container": "ad", "severity": "info"}]
    assert watch(lambda t: healthy(alerts=[WATCHDOG, *quiet])).passed
    paged = {"alertname": "KubePodCrashLooping", "namespace": NS, "severity": "warning"}
    assert not watch(lambda t: healthy(alerts=[WATCHDOG, *quiet, paged])).passed


MESH = "destination_canonical_service"
MESH_BASELINE = Baseline(workloads=HEALTHY, namespaces={NS, "kube-system"}, traffic=TrafficSample(10.0, 0.99),
                         alerts=[WATCHDOG], services={"frontend": ServiceSignals(5.0, 0.0, 20.0)}, service_label=MESH)
NO_REQUESTS = Matcher("NoRequestsReceived")


def _no_requests(destination: str) -> dict[str, str]:
    return {"alertname": "NoRequestsReceived", MESH: destination, "source_canonical_service": "gateway"}


def test_an_alert_about_a_destination_the_app_does_not_run_is_neither_a_relapse_nor_new_damage() -> None:
    """Requests the gateway denied were reported to Istio's ``unknown`` destination; after the fix that
    series stops growing and its "no requests" rule fires: it names nothing the app runs."""
    def script(t: float) -> State:
        if t < 60:
            return healthy(alerts=[WATCHDOG, _no_requests("frontend")])
        return healthy(alerts=[WATCHDOG, *([_no_requests("unknown")] if t >= 150 else [])],
                       services=dict(MESH_BASELINE.services))

    verdict = watch_mitigation(ScriptedProbe(script), MESH_BASELINE, [NO_REQUESTS],
                               injection_alerts=[WATCHDOG, _no_requests("frontend")])
    assert verdict.passed, verdict.reasons


def test_the_same_alert_about_a_service_of_the_app_still_counts_as_a_relapse() -> None:
    def script(t: float) -> State:
        on = t < 60 or t >= 150
        return healthy(alerts=[WATCHDOG, *([_no_requests("frontend")] if on else [])])

    verdict = watch_mitigation(ScriptedProbe(script), MESH_BASELINE, [NO_REQUESTS],
                               injection_alerts=[WATCHDOG, _no_requests("frontend")])
    assert not verdict.passed
    assert any("active again" in r for r in verdict.reasons), verdict.reasons


def test_without_baseline_services_no_alert_is_set_aside() -> None:
    """No golden signals measured at baseline: the watcher cannot tell app services apart, so it sets nothing aside."""
    blind = Baseline(workloads=HEALTHY, namespaces={NS}, traffic=TrafficSample(10.0, 0.99), service_label=MESH)
    assert not blind.names_other_service(_no_requests("unknown"))
    assert MESH_BASELINE.names_other_service(_no_requests("unknown"))
    assert not MESH_BASELINE.names_other_service(_no_requests("recommendation"))  # a workload of the app
