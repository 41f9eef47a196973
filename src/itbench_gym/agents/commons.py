"""What the scripted runbooks share: actions of the agent's tools, reading their observations, and
watching the alert list after a fix."""

from __future__ import annotations

import re
from collections.abc import Collection, Generator
from typing import Any

from itbench_gym.agents.base import Action, Observation
from itbench_gym.lang.timestamps import TimestampError, parse_rfc3339

#: Objects created this long after the application's first Deployment count as made during the incident.
RECENT_SECONDS = 300.0
#: After a fix: wait in steps of a minute until the incident's alerts are quiet, at most this long.
SETTLE_SECONDS = 600.0
SETTLE_STEP_SECONDS = 60.0
ALERT_LINE = re.compile(r"^(?:\s*-\s*)?([A-Za-z_:][\w:]*)\{(.*)\}")
TAB = "{\"\\t\"}"
NL = "{\"\\n\"}"


def kubectl(*argv: str, stdin: str | None = None) -> Action:
    args: dict[str, Any] = {"argv": list(argv)}
    if stdin is not None:
        args["stdin"] = stdin
    return {"tool": "kubectl", "args": args}


def promql(query: str) -> Action:
    return {"tool": "promql", "args": {"query": query}}


def jsonpath(*fields: str) -> str:
    """A kubectl jsonpath printing ``fields`` tab-separated, one item a line."""
    return "jsonpath={range .items[*]}" + TAB.join("{" + f + "}" for f in fields) + NL + "{end}"


def rows(observation: Observation, width: int) -> list[list[str]]:
    """A jsonpath listing's lines as ``width`` cells (empty on a failed command)."""
    if observation.get("exit_status") != 0:
        return []
    out = []
    for line in str(observation.get("text", "")).splitlines():
        if line.strip():
            cells = line.split("\t")
            out.append((cells + [""] * width)[:width])
    return out


def alert_labels(text: str) -> list[dict[str, str]]:
    """``Name{k=v,...}`` lines (the prompt's alert list, the observation's ``firing_alerts``) as label sets."""
    alerts = []
    for line in text.splitlines():
        match = ALERT_LINE.match(line.strip())
        if match:
            labels = dict(kv.split("=", 1) for kv in match.group(2).split(",") if "=" in kv)
            alerts.append({"alertname": match.group(1), **labels})
    return alerts


def created_at(text: str) -> float | None:
    """An RFC 3339 timestamp in seconds (None when it is not one)."""
    try:
        return parse_rfc3339(text)
    except TimestampError:
        return None


def settle_down(names: Collection[str], seconds: float) -> Generator[Action, Observation, None]:
    """Wait after a fix until no alert named in ``names`` fires any more (at most ``seconds``, in minute
    steps), as an engineer watches the alert list before closing the incident."""
    waited = 0.0
    while waited < seconds:
        observation = yield f"wait {SETTLE_STEP_SECONDS:g}"
        waited += SETTLE_STEP_SECONDS
        firing = {a["alertname"] for a in alert_labels(str(observation.get("firing_alerts", "")))}
        if not set(names) & firing:
            yield f"wait {SETTLE_STEP_SECONDS:g}"
            return
