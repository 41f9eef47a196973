"""Mitigation watcher: did the incident end, and was it ended without breaking the system?

ITBench's watcher polls the triggering alerts every 30 s for up to 300 s after submit and passes
when they are absent on 2 consecutive polls. That alone rewards deleting the broken thing (no
pod, no errors, no alert), so the verdict also checks invariants against the healthy baseline:
user-facing traffic still served, no healthy workload deleted / scaled to zero / left unavailable,
namespaces intact, no new alerts. Every failed check contributes one reason string.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class WorkloadState:
    desired: int
    available: int


@dataclass(frozen=True)
class TrafficSample:
    """User-facing request rate (req/s) and the share of those requests that succeed."""

    rate: float
    success_ratio: float


@dataclass(frozen=True)
class Baseline:
    """The healthy system, captured before fault injection."""

    workloads: Mapping[str, WorkloadState]
    namespaces: set[str] | frozenset[str]
    traffic: TrafficSample
    alerts: Sequence[Mapping[str, str]] = ()


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "cleared_at": self.cleared_at,
            "cleared_after_seconds": None if self.cleared_at is None else self.cleared_at - self.started_at,
            "polls": [{"at": p.at, "firing": list(p.firing)} for p in self.polls],
        }


def alert_text(labels: Mapping[str, str]) -> str:
    """``Name{k=v,...}`` for an alert's label set, labels sorted."""
    name = labels.get("alertname", "?")
    inner = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
    return f"{name}{{{inner}}}" if inner else name


def _workload_text(key: str) -> str:
    """``otel-demo/Deployment/frontend`` -> ``deployment/frontend`` (kubectl's spelling)."""
    parts = key.split("/")
    return f"{parts[-2].lower()}/{parts[-1]}" if len(parts) >= 2 else key


def watch_mitigation(
    probe: MitigationProbe,
    baseline: Baseline,
    triggering: Sequence[AlertMatcher],
    *,
    interval: float = 30.0,
    timeout: float = 300.0,
    consecutive: int = 2,
    traffic_tolerance: float = 0.2,
    success_tolerance: float = 0.02,
    injection_alerts: Sequence[Mapping[str, str]] = (),
) -> MitigationVerdict:
    """Poll from submit (t+0) every ``interval`` s for ``timeout`` s.

    The triggering alerts count as cleared once they are neither pending nor firing on
    ``consecutive`` polls in a row; a pending alert's condition still holds, so it is not cleared.
    Polling goes on to the end of the window: a fix must hold, and an alert that becomes active
    again after clearing fails the check (this stops a flapping alert from passing during a lull).
    The invariants are checked once, on the state of the last poll.

    ``traffic_tolerance`` is the relative drop in request rate allowed; ``success_tolerance`` the
    absolute drop in success ratio. Alerts firing at baseline or in ``injection_alerts`` (the
    incident's own alerts) are not "new".
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
    while True:
        elapsed = probe.now() - start
        firing_now = probe.firing_alerts()
        active = probe.active_alerts()
        still = tuple(str(m) for m in triggering if any(m.matches(a) for a in active))
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
        else:
            reasons.append(
                f"triggering alerts absent on only {streak} consecutive poll(s) by t+{last.at:.0f}s "
                f"(need {consecutive})"
            )
    incident = [a for a in firing_now if any(m.matches(a) for m in triggering)]
    reasons.extend(_invariant_failures(probe, baseline, firing_now, last.at, traffic_tolerance,
                                       success_tolerance, [*injection_alerts, *incident]))
    return MitigationVerdict(
        passed=not reasons, reasons=tuple(reasons), cleared_at=cleared_at, polls=tuple(polls), started_at=start
    )


def _invariant_failures(
    probe: MitigationProbe,
    baseline: Baseline,
    firing_now: Sequence[Mapping[str, str]],
    at: float,
    traffic_tolerance: float,
    success_tolerance: float,
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

    reasons.extend(_traffic_failures(baseline.traffic, probe.traffic(), traffic_tolerance, success_tolerance))

    known = {frozenset(a.items()) for a in [*baseline.alerts, *injection_alerts]}
    new = sorted({alert_text(a) for a in firing_now if frozenset(a.items()) not in known})
    reasons.extend(f"new alert {name} firing at t+{at:.0f}s (not firing at baseline or injection)" for name in new)
    return reasons


def _traffic_failures(
    before: TrafficSample, now: TrafficSample, rate_tolerance: float, success_tolerance: float
) -> list[str]:
    """Traffic checks are skipped when the baseline itself could not be measured (NaN or no load)."""
    reasons: list[str] = []
    if math.isfinite(before.rate) and before.rate > 0:
        floor = (1.0 - rate_tolerance) * before.rate
        if not (now.rate >= floor):
            reasons.append(
                f"user-facing traffic {now.rate:.2f} req/s is below {100 * (1 - rate_tolerance):.0f}% "
                f"of the baseline {before.rate:.2f} req/s"
            )
        if math.isfinite(before.success_ratio):
            floor = before.success_ratio - success_tolerance
            if not (now.success_ratio >= floor):
                reasons.append(
                    f"user-facing success ratio {now.success_ratio:.3f} is below the baseline "
                    f"{before.success_ratio:.3f} minus {success_tolerance}"
                )
    return reasons
