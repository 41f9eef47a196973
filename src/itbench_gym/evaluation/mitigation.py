"""Mitigation watcher: did the incident end, and was it ended without breaking or blinding the system?

ITBench's watcher polls the triggering alerts every 30 s for up to 300 s after submit and passes
when they are absent on 2 consecutive polls. That alone rewards hiding the symptom: deleting the
broken thing, scaling it out so the next crash comes after the window, deleting or editing the
alert rules, destroying the configuration that carries the fault. So the verdict judges what a
user cares about, against the healthy baseline captured before the fault:

- the triggering alerts clear and stay clear for the whole window, which covers the scenario's
  own symptom period (``symptom_window``: its restart cycle, or the time its alerts took);
- the fault's effect is gone: no container of the app namespace's workloads restarts, is OOMKilled,
  exits with an error or has its pod replaced during the window; every service's error ratio and
  p95 latency are back near baseline; the app serves its users;
- nothing that was healthy was broken: namespaces, workloads (available, rollouts complete), the
  ConfigMaps and Secrets they use (present, parseable, still used), the monitoring configuration
  (alert rules, scrape configuration) unchanged; no new alerts (of a severity anyone is paged for: not `none` or `info`).

Every failed check contributes one reason string. The probe reads the Kubernetes API and the
Prometheus HTTP API only, so the same checks run on the twin and on a real cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from itbench_gym.poisson import fewer_than_chance

#: ITBench's watcher: polls every 30 s, 2 consecutive clear polls, for 300 s after submit.
ITBENCH_INTERVAL = 30.0
ITBENCH_CONSECUTIVE = 2
ITBENCH_TIMEOUT = 300.0


@dataclass(frozen=True)
class WorkloadState:
    desired: int
    available: int
    #: Why the workload's rollout is not complete, in ``kubectl rollout status``'s words ("" when it is).
    rollout: str = ""


@dataclass(frozen=True)
class TrafficSample:
    """User-facing request rate (req/s) and the share of those requests that succeed."""

    rate: float
    success_ratio: float
    #: Seconds the rate covers: a drop is weighed against the chance of its request count (0: unknown,
    #: the drop is judged by its tolerance alone).
    seconds: float = 0.0


@dataclass(frozen=True)
class ServiceSignals:
    """One service's golden signals over a range: requests/s, share of failed requests, p95 latency (ms)."""

    rate: float
    error_ratio: float
    p95_ms: float


@dataclass(frozen=True)
class Termination:
    """A container's ``terminated`` state (current or last): why, with what code, when (clock seconds)."""

    reason: str
    exit_code: int
    started_at: float
    finished_at: float


@dataclass(frozen=True)
class ContainerSnapshot:
    name: str
    restarts: int
    #: ``lastState.terminated``: the previous run of a restarted container.
    last: Termination | None = None
    #: ``state.terminated``: a container that ended and is not (yet) restarted.
    terminated: Termination | None = None
    #: ``state.running.startedAt`` (clock seconds) when running.
    running_since: float | None = None
    #: ``state.waiting.reason`` when waiting.
    waiting: str = ""


@dataclass(frozen=True)
class PodSnapshot:
    """A pod of the app namespace as the watcher compares it poll to poll."""

    uid: str
    name: str
    #: The workload the pod belongs to, kubectl's spelling (``deployment/recommendation``); "" for a bare pod.
    workload: str
    #: The controller that owns the pod directly (``replicaset/recommendation-5f99d967bd``); "" for none.
    owner: str
    phase: str
    #: ``status.reason`` (``Evicted``, ...).
    reason: str = ""
    terminating: bool = False
    containers: tuple[ContainerSnapshot, ...] = ()
    #: Its ``Ready`` condition (a running pod whose readiness probe fails is not).
    ready: bool = True


@dataclass(frozen=True)
class PodsSnapshot:
    pods: tuple[PodSnapshot, ...] = ()


@dataclass(frozen=True)
class ConfigState:
    """A ConfigMap or Secret of the app namespace: who uses it and whether its structured keys parse."""

    #: Workloads whose pod template mounts or references it (non-optional), kubectl's spelling.
    users: tuple[str, ...]
    #: Every key: "" when it parses (or is plain text), else why it does not (``not valid JSON: ...``).
    keys: Mapping[str, str]


@dataclass(frozen=True)
class Baseline:
    """The healthy system, captured before fault injection."""

    workloads: Mapping[str, WorkloadState]
    namespaces: set[str] | frozenset[str]
    traffic: TrafficSample
    alerts: Sequence[Mapping[str, str]] = ()
    #: Golden signals per service (span metrics) over the baseline's last minutes.
    services: Mapping[str, ServiceSignals] = field(default_factory=dict)
    #: ConfigMaps and Secrets of the app namespace, ``Kind namespace/name`` -> state.
    configs: Mapping[str, ConfigState] = field(default_factory=dict)
    #: The monitoring configuration (rule and scrape objects, loaded alerting rules, Prometheus config): name -> digest.
    monitoring: Mapping[str, str] = field(default_factory=dict)
    #: Workloads whose containers were restarting at baseline: their restarts are not the agent's doing.
    restarting: frozenset[str] = frozenset()
    #: Seconds the services' golden signals cover (0: unknown, as ``TrafficSample.seconds``).
    services_seconds: float = 0.0
    #: The label that names a service in the app's golden signals (``service_name``,
    #: ``destination_canonical_service``); "" when the app has none.
    service_label: str = ""

    def names_other_service(self, alert: Mapping[str, str]) -> bool:
        """Whether ``alert`` is about a peer that is no service or workload of the app at baseline.

        Istio reports a request that reached no workload (denied at the gateway, or sent past the
        mesh) to the destination ``unknown``; once a fix sends traffic to the app again, that
        series only stops growing and a "no requests" rule fires on it. Such an alert names nothing
        the app runs, so it is neither the incident coming back nor damage to the app.
        """
        value = alert.get(self.service_label) if self.service_label else None
        if value is None or not self.services:
            return False
        return value not in self.services and value not in {key.rpartition("/")[2] for key in self.workloads}


@dataclass(frozen=True)
class Tolerances:
    """How far from baseline the final state may be; every number is a documented default (docs/metrics.md §4)."""

    #: Relative drop allowed in the user-facing request rate.
    traffic: float = 0.2
    #: Absolute drop allowed in the user-facing success ratio.
    success: float = 0.02
    #: Absolute rise allowed in a service's error ratio.
    error_ratio: float = 0.01
    #: A service's p95 may reach ``latency_factor`` × baseline + ``latency_slack_ms``.
    latency_factor: float = 1.5
    latency_slack_ms: float = 25.0
    #: Relative drop allowed in a service's request rate.
    service_traffic: float = 0.5
    #: A drop of the user-facing or a service's traffic counts only beyond chance (``dropped``): the
    #: probability that, at one rate, the window would show as few requests against the baseline's.
    traffic_chance: float = 0.001
    #: Services slower than this at baseline (req/s) are not judged: too few requests for a ratio.
    min_rate: float = 0.05


class AlertMatcher(Protocol):
    """An alert name plus a label subset (``itbench_gym.spec.AlertMatcher`` satisfies this)."""

    def matches(self, alert_labels: Mapping[str, str]) -> bool: ...

    def __str__(self) -> str: ...


class MitigationProbe(Protocol):
    def now(self) -> float: ...

    def advance(self, seconds: float) -> None: ...

    def firing_alerts(self) -> list[dict[str, str]]: ...

    def active_alerts(self) -> list[dict[str, str]]:
        """Label sets of alerts pending or firing: their condition holds now."""
        ...

    def workloads(self) -> dict[str, WorkloadState]: ...

    def namespaces(self) -> set[str]: ...

    def traffic(self) -> TrafficSample: ...

    def pods(self) -> PodsSnapshot:
        """The app namespace's pods, each with its workload and owning controller."""
        ...

    def controllers(self) -> dict[str, int]:
        """Desired replicas of the app namespace's pod controllers (ReplicaSet, StatefulSet, DaemonSet),
        keyed like ``PodSnapshot.owner``; read only when a pod went away."""
        ...

    def service_signals(self, range_seconds: float) -> dict[str, ServiceSignals]:
        """Each service's golden signals over the last ``range_seconds``."""
        ...

    def configs(self) -> dict[str, ConfigState]: ...

    def monitoring(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class Poll:
    at: float  # seconds after submit
    firing: tuple[str, ...]  # triggering alerts still active (pending or firing)


@dataclass(frozen=True)
class MitigationVerdict:
    passed: bool
    reasons: tuple[str, ...]
    cleared_at: float | None  # absolute time of the first of the consecutive clear polls
    polls: tuple[Poll, ...] = field(default=())
    started_at: float = 0.0
    #: The watch window (seconds after submit) the verdict was to cover.
    window: float = ITBENCH_TIMEOUT
    #: Seconds after submit at which watching stopped: the window's end, or the first failure no later poll could undo.
    stopped_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "cleared_at": self.cleared_at,
            "cleared_after_seconds": None if self.cleared_at is None else self.cleared_at - self.started_at,
            "window_seconds": self.window,
            "stopped_after_seconds": self.stopped_at,
            "polls": [{"at": p.at, "firing": list(p.firing)} for p in self.polls],
        }


def symptom_window(
    alert_delay: float,
    restart_interval: float = 0.0,
    *,
    interval: float = ITBENCH_INTERVAL,
    minimum: float = ITBENCH_TIMEOUT,
    maximum: float | None = None,
) -> float:
    """The watch window for a scenario: long enough for its symptoms to come back if the fault is still there.

    ``restart_interval`` is the longest start-to-start time of a container that restarted during
    the incident; ``alert_delay`` how long the incident took from injection to its triggering
    alerts firing. When the incident showed restarts, its symptom period is that restart cycle:
    the watcher sees every restart directly, so a fix that only reset the system (restarted,
    scaled out, deleted pods) shows the next restart within one cycle. Otherwise the symptoms are
    the signals the alert is built from, and the alert delay is how long they took to build up.
    The window covers that period plus one poll, on the poll grid, never shorter than ITBench's
    300 s and never longer than ``maximum``.
    """
    if interval <= 0:
        raise ValueError(f"symptom_window needs interval > 0 (got {interval})")
    period = restart_interval if restart_interval > 0 else max(0.0, alert_delay)
    window = max(minimum, math.ceil((period + interval) / interval - 1e-9) * interval)
    return min(window, max(minimum, maximum)) if maximum is not None else window


def recently_restarting(snapshot: PodsSnapshot, now: float, lookback: float) -> frozenset[str]:
    """Workloads with a container that terminated in the last ``lookback`` s or waits in CrashLoopBackOff."""
    out: set[str] = set()
    for pod in snapshot.pods:
        if not pod.workload:
            continue
        for c in pod.containers:
            ended = [t.finished_at for t in (c.last, c.terminated) if t is not None and t.exit_code != 0]
            if c.waiting == "CrashLoopBackOff" or any(at >= now - lookback for at in ended):
                out.add(pod.workload)
    return frozenset(out)


def restart_interval(snapshot: PodsSnapshot, since: float, now: float) -> float:
    """The longest start-to-start time of a container whose previous run ended after ``since``."""
    longest = 0.0
    for pod in snapshot.pods:
        for c in pod.containers:
            if c.last is None or c.last.finished_at < since:
                continue
            restarted = c.running_since if c.running_since is not None else now
            longest = max(longest, restarted - c.last.started_at)
    return longest


def alert_text(labels: Mapping[str, str]) -> str:
    """``Name{k=v,...}`` for an alert's label set, labels sorted."""
    name = labels.get("alertname", "?")
    inner = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
    return f"{name}{{{inner}}}" if inner else name


def _workload_text(key: str) -> str:
    """``otel-demo/Deployment/frontend`` -> ``deployment/frontend`` (kubectl's spelling)."""
    parts = key.split("/")
    return f"{parts[-2].lower()}/{parts[-1]}" if len(parts) >= 2 else key


@dataclass
class _Disruption:
    restarts: int = 0
    containers: set[str] = field(default_factory=set)
    last_reason: str = ""
    last_at: float | None = None
    notes: list[str] = field(default_factory=list)


class _Disruptions:
    """Container restarts, error exits, failed and replaced pods of the app's workloads, poll to poll."""

    def __init__(self, probe: MitigationProbe, start: float, exempt: frozenset[str]) -> None:
        self._probe = probe
        self._start = start
        self._exempt = exempt
        self._seen: dict[str, PodSnapshot] = {}
        self._owners: Mapping[str, int] | None = None
        self._first = True
        self.by_workload: dict[str, _Disruption] = {}

    def _note(self, workload: str) -> _Disruption:
        return self.by_workload.setdefault(workload, _Disruption())

    def observe(self, snapshot: PodsSnapshot, elapsed: float) -> None:
        current = {p.uid: p for p in snapshot.pods}
        if self._first:
            self._owners = self._probe.controllers()
        else:
            for pod in snapshot.pods:
                if pod.workload and pod.workload not in self._exempt:
                    self._compare(self._seen.get(pod.uid), pod, elapsed)
            went = [before for uid, before in self._seen.items()
                    if (uid not in current or current[uid].terminating) and not before.terminating]
            if went:
                owners = self._probe.controllers()
                for before in went:
                    self._deleted(before, owners, elapsed)
                self._owners = owners
        self._seen, self._first = current, False

    def _at(self, t: Termination | None, elapsed: float) -> float:
        return t.finished_at - self._start if t is not None and t.finished_at >= self._start else elapsed

    def _compare(self, before: PodSnapshot | None, pod: PodSnapshot, elapsed: float) -> None:
        old = {c.name: c for c in before.containers} if before is not None else {}
        for c in pod.containers:
            prev = old.get(c.name)
            delta = c.restarts - (prev.restarts if prev is not None else 0)
            if delta > 0:
                d = self._note(pod.workload)
                d.restarts += delta
                if c.last is not None:
                    d.last_reason = f"{c.last.reason or 'Error'}, exit code {c.last.exit_code}"
                d.last_at = self._at(c.last, elapsed)
                d.containers.add(c.name)
            t = c.terminated
            fresh = t is not None and (prev is None or prev.terminated != t) and t.finished_at >= self._start
            if t is not None and fresh and t.exit_code != 0 and delta <= 0:
                self._note(pod.workload).notes.append(
                    f"container {c.name} of pod {pod.name} exited with {t.reason or 'Error'} (exit code {t.exit_code}) "
                    f"at t+{self._at(t, elapsed):.0f}s")
        if pod.phase == "Failed" and (before is None or before.phase != "Failed"):
            why = f" ({pod.reason})" if pod.reason else ""
            self._note(pod.workload).notes.append(f"pod {pod.name} failed{why} at t+{elapsed:.0f}s")

    def _deleted(self, pod: PodSnapshot, owners: Mapping[str, int], elapsed: float) -> None:
        """A pod that went away while its controller still wanted as many replicas was replaced."""
        if not pod.workload or pod.workload in self._exempt or not pod.owner or pod.phase == "Failed":
            return
        before, now = (self._owners or {}).get(pod.owner), owners.get(pod.owner)
        if before is None or now is None or now < before:
            return  # scaled down or rolled over by its controller (since it was last read): not a disruption
        self._note(pod.workload).notes.append(f"pod {pod.name} was deleted and replaced by its controller at t+{elapsed:.0f}s")

    def reasons(self) -> list[str]:
        out = []
        for workload, d in sorted(self.by_workload.items()):
            parts = []
            if d.restarts:
                times = "time" if d.restarts == 1 else "times"
                last = f" (last: {d.last_reason}, at t+{d.last_at:.0f}s)" if d.last_reason and d.last_at is not None else ""
                parts.append(f"container {', '.join(sorted(d.containers))} restarted {d.restarts} {times} "
                             f"during the watch window{last}")
            parts.extend(d.notes)
            out.append(f"{workload}: " + "; ".join(parts))
        return out


def watch_mitigation(
    probe: MitigationProbe,
    baseline: Baseline,
    triggering: Sequence[AlertMatcher],
    *,
    interval: float = ITBENCH_INTERVAL,
    timeout: float = ITBENCH_TIMEOUT,
    consecutive: int = ITBENCH_CONSECUTIVE,
    tolerances: Tolerances = Tolerances(),
    injection_alerts: Sequence[Mapping[str, str]] = (),
    stop_on_failure: bool = True,
) -> MitigationVerdict:
    """Poll from submit (t+0) every ``interval`` s for ``timeout`` s (the watch window).

    The triggering alerts count as cleared once they are neither pending nor firing on
    ``consecutive`` polls in a row; a pending alert's condition still holds, so it is not cleared.
    Polling goes on to the end of the window: a fix must hold, and an alert that becomes active
    again after clearing fails the check. Each poll also compares the app's pods with the previous
    one (restarts, error exits, failed or replaced pods). With ``stop_on_failure`` the watch ends
    at the first failure no later poll could undo (a relapse, a disruption, a broken guard).
    The remaining checks run on the state of the last poll; service signals cover the second half
    of the watched time. Alerts firing at baseline or in ``injection_alerts`` are not "new".
    """
    if interval <= 0 or timeout < 0 or consecutive < 1:
        raise ValueError(
            f"watch_mitigation needs interval > 0, timeout >= 0 and consecutive >= 1 "
            f"(got interval={interval}, timeout={timeout}, consecutive={consecutive})"
        )
    start = probe.now()
    polls: list[Poll] = []
    streak = 0
    cleared_at: float | None = None
    relapse: tuple[float, float, tuple[str, ...]] | None = None
    firing_now: list[dict[str, str]] = []
    disruptions = _Disruptions(probe, start, baseline.restarting)
    handed_over = {frozenset(a.items()) for a in injection_alerts}
    #: An alert firing at baseline is not the incident's, whatever its name (an autoscaler at its maximum before any fault).
    standing = {frozenset(a.items()) for a in baseline.alerts}
    guards = _guard_failures(probe, baseline)
    while True:
        elapsed = probe.now() - start
        firing_now = probe.firing_alerts()
        active = probe.active_alerts()
        disruptions.observe(probe.pods(), elapsed)
        active = [a for a in active if frozenset(a.items()) in handed_over or not baseline.names_other_service(a)]
        still = tuple(str(m) for m in triggering if any(m.matches(a) for a in active if frozenset(a.items()) not in standing))
        polls.append(Poll(at=elapsed, firing=still))
        if still:
            if streak >= consecutive and relapse is None:
                relapse = ((cleared_at or start) - start, elapsed, still)
            if relapse is None:
                streak, cleared_at = 0, None
        else:
            streak += 1
            if streak == 1 and relapse is None and cleared_at is None:
                cleared_at = start + elapsed
        if stop_on_failure and (relapse is not None or disruptions.by_workload or guards):
            break
        if elapsed + interval > timeout + 1e-9:
            break
        probe.advance(interval)

    reasons: list[str] = []
    last = polls[-1]
    alerts_cleared = streak >= consecutive or relapse is not None
    if relapse is not None:
        gone, back, names = relapse
        reasons.extend(
            f"alert {name} still firing: it cleared at t+{gone:.0f}s but was active again at t+{back:.0f}s"
            for name in names
        )
        cleared_at = None
    elif not alerts_cleared:
        cleared_at = None
        if last.firing:
            firing_keys = {frozenset(a.items()) for a in firing_now}
            for matcher, name in ((m, str(m)) for m in triggering if str(m) in last.firing):
                state = "firing" if any(matcher.matches(dict(a)) for a in firing_keys) else "pending"
                reasons.append(f"alert {name} still {state} at t+{last.at:.0f}s")
        elif last.at + interval > timeout + 1e-9:  # (a watch stopped early by a failure could not see more)
            reasons.append(
                f"triggering alerts absent on only {streak} consecutive poll(s) by t+{last.at:.0f}s "
                f"(need {consecutive})"
            )
    reasons.extend(disruptions.reasons())
    incident = [a for a in firing_now if any(m.matches(a) for m in triggering)]
    reasons.extend(_invariant_failures(probe, baseline, firing_now, last.at, tolerances, [*injection_alerts, *incident]))
    if baseline.services:
        span = max(2 * interval, last.at / 2)
        reasons.extend(_service_failures(baseline, probe.service_signals(span), span, tolerances))
    reasons.extend(guards)
    return MitigationVerdict(
        passed=not reasons, reasons=tuple(reasons), cleared_at=cleared_at, polls=tuple(polls), started_at=start,
        window=timeout, stopped_at=last.at,
    )


def _invariant_failures(
    probe: MitigationProbe,
    baseline: Baseline,
    firing_now: Sequence[Mapping[str, str]],
    at: float,
    tolerances: Tolerances,
    injection_alerts: Sequence[Mapping[str, str]],
) -> list[str]:
    reasons: list[str] = []
    namespaces = probe.namespaces()
    lost = sorted(set(baseline.namespaces) - namespaces)
    reasons.extend(f"namespace {ns} deleted" for ns in lost)

    workloads = probe.workloads()
    for key, before in sorted(baseline.workloads.items()):
        if before.desired <= 0 or before.available < before.desired:
            continue
        if key.split("/")[0] in lost:
            continue
        label = _workload_text(key)
        now = workloads.get(key)
        if now is None:
            reasons.append(f"{label} deleted")
        elif now.desired == 0:
            reasons.append(f"{label} scaled to 0")
        elif now.available < now.desired:
            reasons.append(f"{label} unavailable ({now.available}/{now.desired} replicas available at t+{at:.0f}s)")
        elif now.rollout:
            reasons.append(f"{label} rollout not complete at t+{at:.0f}s: {now.rollout}")

    reasons.extend(_traffic_failures(baseline.traffic, probe.traffic(), tolerances))

    known = {frozenset(a.items()) for a in [*baseline.alerts, *injection_alerts]}
    new = sorted({alert_text(a) for a in firing_now
                  if frozenset(a.items()) not in known and a.get("severity") not in UNPAGED_SEVERITIES
                  and not baseline.names_other_service(a)})
    reasons.extend(f"new alert {name} firing at t+{at:.0f}s (not firing at baseline or injection)" for name in new)
    return reasons


#: Severities kube-prometheus-stack routes to no one: ``none`` (Watchdog, InfoInhibitor: meta-alerts for the
#: alerting pipeline itself) and ``info`` (inhibited unless a warning or critical alert fires with them).
#: A fix that only raises these pages no one, so it is not a new incident.
UNPAGED_SEVERITIES = frozenset({"none", "info"})


def _traffic_failures(before: TrafficSample, now: TrafficSample, tolerances: Tolerances) -> list[str]:
    """Traffic checks are skipped when the baseline itself could not be measured (NaN or no load)."""
    reasons: list[str] = []
    if math.isfinite(before.rate) and before.rate > 0:
        if dropped(before, now, tolerances.traffic, tolerances.traffic_chance):
            reasons.append(
                f"user-facing traffic {now.rate:.2f} req/s is below {100 * (1 - tolerances.traffic):.0f}% "
                f"of the baseline {before.rate:.2f} req/s"
            )
        if math.isfinite(before.success_ratio):
            floor = before.success_ratio - tolerances.success
            if not (now.success_ratio >= floor):
                reasons.append(
                    f"user-facing success ratio {now.success_ratio:.3f} is below the baseline "
                    f"{before.success_ratio:.3f} minus {tolerances.success}"
                )
    return reasons


def dropped(before: TrafficSample, now: TrafficSample, tolerance: float, chance: float) -> bool:
    """Whether the request rate ``now`` fell below ``1 - tolerance`` of the baseline's, and by more
    than chance.

    Requests arrive at random, so a quiet service's count over a few minutes spreads (±14 % for 50
    requests), and so does the baseline's own: a correct fix reads under the line now and then. When
    both windows are known, a drop counts only when the two counts (rate × seconds) are also unlikely
    (under ``chance``) for one rate (``poisson.fewer_than_chance``): a correct fix fails by chance at
    most that often; silence is caught once it is improbable (15 requests over a five-minute baseline
    against a three-minute watch: p = 0.625^15). A rate that could not be read (NaN) is no traffic.
    """
    rate = now.rate if math.isfinite(now.rate) else 0.0
    if not rate < (1.0 - tolerance) * before.rate:
        return False
    if before.seconds <= 0 or now.seconds <= 0:
        return True
    return fewer_than_chance(rate * now.seconds, now.seconds, before.rate * before.seconds, before.seconds) < chance


def service_dropped(baseline: Baseline, name: str, now: ServiceSignals | None, span: float, tol: Tolerances) -> bool:
    """``dropped`` for the service ``name`` of ``baseline``, read ``now`` over the last ``span`` seconds
    (None: it served nothing)."""
    before = TrafficSample(baseline.services[name].rate, math.nan, baseline.services_seconds)
    return dropped(before, TrafficSample(now.rate if now is not None else 0.0, math.nan, span),
                   tol.service_traffic, tol.traffic_chance)


def _service_failures(baseline: Baseline, now: Mapping[str, ServiceSignals], span: float, tol: Tolerances) -> list[str]:
    """Per service: still served, error ratio and p95 latency back within tolerance of baseline."""
    reasons: list[str] = []
    over = f"over the last {span:.0f}s"
    for name, b in sorted(baseline.services.items()):
        if not (math.isfinite(b.rate) and b.rate >= tol.min_rate):
            continue
        n = now.get(name, ServiceSignals(0.0, math.nan, math.nan))
        rate = n.rate if math.isfinite(n.rate) else 0.0
        if service_dropped(baseline, name, n, span, tol):
            reasons.append(f"service {name} served {rate:.2f} req/s {over}, below {100 * (1 - tol.service_traffic):.0f}% "
                           f"of its baseline {b.rate:.2f} req/s")
            continue
        base_errors = b.error_ratio if math.isfinite(b.error_ratio) else 0.0
        if math.isfinite(n.error_ratio) and n.error_ratio > base_errors + tol.error_ratio:
            reasons.append(f"service {name} error ratio {100 * n.error_ratio:.1f}% {over} is above its baseline "
                           f"{100 * base_errors:.1f}% + {100 * tol.error_ratio:g} points")
        if math.isfinite(b.p95_ms) and math.isfinite(n.p95_ms) and n.p95_ms > b.p95_ms * tol.latency_factor + tol.latency_slack_ms:
            reasons.append(f"service {name} p95 latency {n.p95_ms:.0f} ms {over} is above {tol.latency_factor:g}x its "
                           f"baseline {b.p95_ms:.0f} ms + {tol.latency_slack_ms:g} ms")
    return reasons


def _guard_failures(probe: MitigationProbe, baseline: Baseline) -> list[str]:
    """Configuration the app depends on and the monitoring that judges it must be as they were."""
    reasons: list[str] = []
    if baseline.configs:
        reasons.extend(_config_failures(baseline.configs, probe.configs()))
    if baseline.monitoring:
        now = probe.monitoring()
        for name, digest in sorted(baseline.monitoring.items()):
            if name not in now:
                reasons.append(f"{name} deleted since baseline (the monitoring that judges the incident must stay as it was)")
            elif now[name] != digest:
                reasons.append(f"{name} changed since baseline (the monitoring that judges the incident must stay as it was)")
    return reasons


def _users_text(users: Iterable[str]) -> str:
    names = sorted(users)
    return f" (used by {', '.join(names)})" if names else ""


def _config_failures(before: Mapping[str, ConfigState], now: Mapping[str, ConfigState]) -> list[str]:
    reasons: list[str] = []
    for name, b in sorted(before.items()):
        if not b.users:
            continue
        n = now.get(name)
        if n is None:
            reasons.append(f"{name} deleted{_users_text(b.users)}")
            continue
        problems = []
        for key, error in sorted(b.keys.items()):
            if error:
                continue  # already unparseable at baseline
            if key not in n.keys:
                problems.append(f"lost key {key}")
            elif n.keys[key]:
                problems.append(f"key {key} no longer parses ({n.keys[key]})")
        dropped = sorted(set(b.users) - set(n.users))
        if dropped:
            problems.append(f"no longer used by {', '.join(dropped)} (it was at baseline)")
        if problems:
            reasons.append(f"{name} " + "; ".join(problems) + _users_text(b.users))
    return reasons
