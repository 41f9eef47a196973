"""Active alerts from the Prometheus alerts API (pending and firing), as an SRE would list them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import requests

from itbench_gym.lang.timestamps import TimestampError, parse_rfc3339
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output


def fetch_alerts(prometheus_url: str, timeout: float = 30.0, *, http: requests.Session | None = None) -> list[dict[str, Any]]:
    """The ``alerts`` list of ``/api/v1/alerts``; raises ``requests.RequestException`` on failure.
    A poller passes its ``http`` session to keep one connection open."""
    resp = (http or requests).get(prometheus_url + "/api/v1/alerts", timeout=timeout)
    resp.raise_for_status()
    return list(resp.json()["data"]["alerts"])


@dataclass(frozen=True)
class RuleState:
    """One polled alerting rule: what bounds when it can fire next."""

    name: str
    #: its ``for`` duration (seconds)
    for_seconds: float
    #: its active alerts (pending and firing), as the API lists them
    alerts: tuple[dict[str, Any], ...]
    #: its group's next evaluation (Unix seconds) and interval; None before the group's first evaluation
    next_evaluation: float | None
    interval: float

    def earliest_firing(self, matches: Callable[[Mapping[str, str]], bool], now: float) -> float | None:
        """The first evaluation at or after ``now`` at which an alert of this rule that ``matches`` could
        be firing (None when unknown): now if one is; else when its pending one has held for ``for``;
        else ``for`` after the next evaluation, where it could first turn pending. A lower bound, so a
        poller that sleeps until then misses nothing."""
        if self.next_evaluation is None or self.interval <= 0:
            return None
        firing = pending = False
        since = math.inf
        for alert in self.alerts:
            if not matches(alert.get("labels") or {}):
                continue
            if alert.get("state") == "firing":
                firing = True
            else:
                try:
                    since = min(since, parse_rfc3339(str(alert.get("activeAt", ""))))
                except TimestampError:
                    return None
                pending = True
        if firing:
            return now
        due = since + self.for_seconds if pending else self.next_evaluation + self.for_seconds
        steps = max(0, math.ceil((due - self.next_evaluation) / self.interval - 1e-9))
        return self.next_evaluation + steps * self.interval


@dataclass(frozen=True)
class RulePoll:
    """What one poll of a few alerting rules tells a poller."""

    #: the rules' active alerts (pending and firing)
    alerts: list[dict[str, Any]]
    #: when their groups evaluate next (Unix seconds; None when a group has not evaluated yet)
    next_evaluation: float | None
    #: each polled rule, with its group's timing
    rules: tuple[RuleState, ...] = ()


def poll_rules(prometheus_url: str, rule_names: Iterable[str], timeout: float = 30.0, *,
               http: requests.Session | None = None) -> RulePoll:
    """The named alerting rules' active alerts and their groups' next evaluation
    (``/api/v1/rules?type=alert&rule_name[]=``): what a poller that waits for a few alerts asks,
    without making Prometheus list every rule, and how long nothing can change."""
    params = [("type", "alert"), *(("rule_name[]", n) for n in sorted(set(rule_names)))]
    resp = (http or requests).get(prometheus_url + "/api/v1/rules", params=params, timeout=timeout)
    resp.raise_for_status()
    groups = resp.json()["data"]["groups"]
    alerts = [a for g in groups for r in g["rules"] for a in r.get("alerts") or []]
    upcoming = [_next_evaluation(g) for g in groups]
    rules = tuple(RuleState(str(r.get("name", "")), float(r.get("duration") or 0.0), tuple(r.get("alerts") or ()), due,
                            float(g.get("interval") or 0.0))
                  for g, due in zip(groups, upcoming, strict=True) for r in g["rules"] if r.get("type") == "alerting")
    return RulePoll(alerts, None if not upcoming or None in upcoming else min(t for t in upcoming if t is not None), rules)


def _next_evaluation(group: Mapping[str, Any]) -> float | None:
    """A group's last evaluation plus its interval (None before its first evaluation)."""
    try:
        last = parse_rfc3339(str(group.get("lastEvaluation", "")))
        interval = float(group["interval"])
    except (TimestampError, KeyError, TypeError, ValueError):
        return None
    return last + interval if last > 0 and interval > 0 else None


def alert_key(labels: Mapping[str, str]) -> str:
    inner = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname")
    return f"{labels.get('alertname', '')}{{{inner}}}"


class AlertsTool:
    name = "alerts"
    description = "List the alerts that are pending or firing now, with their labels, start time and description."
    parameters: Mapping[str, Any] = {"type": "object", "properties": {}}
    cost_seconds = 1.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        extra = {k: v for k, v in args.items() if not (k == "text" and v == "")}
        if extra:
            raise ToolInputError(f"alerts takes no arguments; got {', '.join(sorted(map(str, extra)))}")
        url = ctx.endpoints.prometheus
        if url is None:
            return ToolResult(text="alerts are not available in this scenario (no Prometheus endpoint)", exit_status=1)
        try:
            alerts = fetch_alerts(url)
        except (requests.RequestException, ValueError, KeyError) as exc:
            return ToolResult(text=f"alerts request failed: {exc}", exit_status=1)
        if not alerts:
            return ToolResult(text="no alerts are pending or firing")
        lines = []
        for alert in sorted(alerts, key=lambda a: (a["state"], alert_key(a["labels"]))):
            desc = alert.get("annotations", {}).get("description", "")
            lines.append(f"{alert['state'].upper():8} {alert_key(alert['labels'])} since {alert.get('activeAt', '?')}  {desc}".rstrip())
        return ToolResult(text=bound_output("\n".join(lines)), data={"count": len(alerts)})
