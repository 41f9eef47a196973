"""Prometheus rule evaluation (alerting and recording rules) on the twin's simulated clock.

Groups evaluate at multiples of their ``interval``. When the clock jumps, :meth:`RuleManager.
evaluate_until` runs every due evaluation in order; each rule's expression is evaluated *once* as a
range query over all due times, then the alert state machine (inactive → pending → firing →
resolved, ``for``, ``keep_firing_for``, 15 minute resolved retention) steps through the results, so
fast-forwarding an hour costs one query per rule rather than one per evaluation.
"""

from __future__ import annotations

import copy
import functools
import ipaddress
import json
import math
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from itbench_gym.lang import gotemplate, regex
from itbench_gym.lang.durations import DurationError, humanize_duration, parse_prometheus_duration
from itbench_gym.lang.gofloat import format_e, format_g, printf
from itbench_gym.lang.timestamps import rfc3339_nano

from .promql.engine import Engine
from .promql.errors import PromQLError
from .tsdb import STALE_NAN, Labels, make_labels

#: How long Prometheus keeps resolved alerts around (and sends them to Alertmanager).
RESOLVED_RETENTION = 15 * 60.0



class RuleError(ValueError):
    """An invalid rules file; the message names the group and rule."""


def parse_duration(value: Any, where: str) -> float:
    """A rule file's ``for``/``interval``: a Prometheus duration (``5m``, ``1h30m``) or a number of seconds."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return parse_prometheus_duration(str(value).strip())
    except DurationError as exc:
        raise RuleError(f"{where}: invalid duration {value!r} ({exc}; expected e.g. 30s, 5m, 1h)") from None


# ------------------------------------------------------------------ templates
#: What Prometheus prepends to every alert label and annotation template (rules/alerting.go).
TEMPLATE_DEFS = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
#: The twin's bounds on one expansion (Prometheus has none; a shared Python process needs some).
TEMPLATE_LIMITS = gotemplate.Limits(max_output=256 * 1024, max_depth=50)
Sample = dict[str, Any]
QueryFunc = Callable[[str], list[Sample]]


def _to_float(v: Any) -> float:
    """Prometheus' ``convertToFloat``: numbers, numeric strings and durations; anything else fails."""
    if isinstance(v, bool):
        raise ValueError(f"can't convert {type(v).__name__} to float")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            if "_" in v:  # Python accepts digit separators; Go's ParseFloat does not
                raise ValueError(v)
            return float(v)
        except ValueError:
            raise ValueError(f'strconv.ParseFloat: parsing "{v}": invalid syntax') from None
    if isinstance(v, timedelta):
        return v.total_seconds()
    raise ValueError(f"can't convert {type(v).__name__} to float")


def _humanize(v: float) -> str:
    """``humanize``: SI prefixes (``1.235M``, ``12.5m``) with four significant digits."""
    if v == 0 or math.isnan(v) or math.isinf(v):
        return printf(v, '.4g')
    prefix = ""
    if abs(v) >= 1:
        for p in ["k", "M", "G", "T", "P", "E", "Z", "Y"]:
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
    else:
        for p in ["m", "u", "n", "p", "f", "a", "z", "y"]:
            if abs(v) >= 1:
                break
            prefix, v = p, v * 1000
    return f"{printf(v, '.4g')}{prefix}"


def _humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return printf(v, '.4g')
    prefix = ""
    for p in ["ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"]:
        if abs(v) < 1024:
            break
        prefix = p
        v /= 1024
    return f"{printf(v, '.4g')}{prefix}"


def _to_time(v: Any) -> datetime:
    """Prometheus' ``convertToTime``: seconds since the epoch, in UTC."""
    f = _to_float(v)
    if math.isnan(f) or math.isinf(f) or not -(2.0**63) <= f * 1e9 < 2.0**63:
        raise ValueError(f"{format_g(f)} cannot be represented as a nanoseconds timestamp since it overflows int64")
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=round(f * 1e6))


def _humanize_timestamp(v: Any) -> str:
    f = _to_float(v)
    if math.isnan(f) or math.isinf(f):
        return printf(f, '.4g')
    return gotemplate.go_str(_to_time(f))


def _match(pattern: Any, text: Any) -> bool:
    """Go's ``regexp.MatchString`` (unanchored)."""
    try:
        return regex.compile(str(pattern)).search(str(text)) is not None
    except regex.RegexError as exc:
        raise ValueError(str(exc)) from None


def _re_replace_all(pattern: Any, repl: Any, text: Any) -> str:
    """``regexp.MustCompile(pattern).ReplaceAllString(text, repl)``; a bad pattern fails the expansion."""
    try:
        compiled = regex.compile(str(pattern))
    except regex.RegexError as exc:
        raise gotemplate.TemplateError(f"regexp: Compile({json.dumps(str(pattern))}): {exc}") from None
    try:
        return compiled.replace_all(str(text), str(repl), max_len=TEMPLATE_LIMITS.max_output)
    except regex.OutputTooLarge:
        raise gotemplate.too_large("reReplaceAll output", TEMPLATE_LIMITS.max_output) from None


def _split_host_port(host_port: str) -> tuple[str, str] | None:
    """Go's ``net.SplitHostPort`` for the forms the templates meet; None when there is no port."""
    if host_port.startswith("["):
        end = host_port.find("]")
        if end < 0 or host_port[end + 1:end + 2] != ":" or ":" in host_port[end + 2:]:
            return None
        return host_port[1:end], host_port[end + 2:]
    host, sep, port = host_port.rpartition(":")
    if not sep or ":" in host:
        return None
    return host, port


def _strip_port(host_port: str) -> str:
    parts = _split_host_port(host_port)
    return host_port if parts is None else parts[0]


def _strip_domain(host_port: str) -> str:
    parts = _split_host_port(host_port)
    host, port = parts if parts is not None else (host_port, "")
    try:
        ipaddress.ip_address(host)
        return host_port
    except ValueError:
        pass
    host = host.split(".")[0]
    if not port:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _first(v: Any) -> Sample:
    if isinstance(v, list) and v:
        return dict(v[0])
    raise ValueError("first() called on vector with no elements")


def _sample_field(s: Any, key: str) -> Any:
    if not isinstance(s, Mapping):
        raise ValueError(f"wrong type for value; expected *template.sample; got {type(s).__name__}")
    return s[key]


def _no_query(_: Any) -> list[Sample]:
    raise ValueError("query is not available here")


def _link(expr: Any, tab: int) -> str:
    return f"/graph?g0.expr={urllib.parse.quote_plus(str(expr))}&g0.tab={tab}"


#: Prometheus' template functions (template/template.go) on top of Go's builtins; ``query`` and
#: ``now`` are per-expansion (:func:`expand_template` overrides them).
FUNCTIONS: dict[str, gotemplate.Function] = {
    **gotemplate.builtins(TEMPLATE_LIMITS.max_output),
    "query": _no_query,
    "now": lambda: 0.0,
    "first": _first,
    "label": lambda name, s: _sample_field(s, "Labels").get(str(name), ""),
    "value": lambda s: _sample_field(s, "Value"),
    "strvalue": lambda s: _sample_field(s, "Labels").get("__value__", ""),
    "sortByLabel": lambda name, v: sorted(v, key=lambda s: str(s["Labels"].get(str(name), ""))),
    "args": lambda *a: {f"arg{i}": x for i, x in enumerate(a)},
    "reReplaceAll": _re_replace_all,
    "safeHtml": lambda s: str(s),
    "match": _match,
    "title": lambda s: gotemplate.strings_title(str(s)),
    "toUpper": lambda s: str(s).upper(),
    "toLower": lambda s: str(s).lower(),
    "graphLink": lambda e: _link(e, 0),
    "tableLink": lambda e: _link(e, 1),
    "humanize": lambda v: _humanize(_to_float(v)),
    "humanize1024": lambda v: _humanize1024(_to_float(v)),
    "humanizeDuration": lambda v: humanize_duration(_to_float(v)),
    "humanizePercentage": lambda v: f"{printf(_to_float(v) * 100, '.4g')}%",
    "humanizeTimestamp": _humanize_timestamp,
    "toTime": _to_time,
    "toDuration": lambda v: timedelta(seconds=_to_float(v)),
    "parseDuration": lambda s: parse_prometheus_duration(str(s)),
    "stripPort": lambda s: _strip_port(str(s)),
    "stripDomain": lambda s: _strip_domain(str(s)),
    "pathPrefix": lambda: "",
    "externalURL": lambda: "",
}


@functools.lru_cache(maxsize=1024)
def _compiled(text: str, name: str) -> gotemplate.Template | str:
    """The template with Prometheus' definitions prepended, or the parse error's text."""
    try:
        return gotemplate.Template(TEMPLATE_DEFS + text, FUNCTIONS, name=name, limits=TEMPLATE_LIMITS)
    except gotemplate.TemplateError as exc:
        return f"error parsing template {name}: {exc}"


def expand_template(text: str, labels: Mapping[str, str], value: float, external: Mapping[str, str] | None = None,
                    *, name: str = "__alert_", query: QueryFunc | None = None, now: float = 0.0) -> str:
    """Expand an alert label or annotation as Prometheus' ``template.Expander`` does.

    The data is ``.Labels``, ``.ExternalLabels``, ``.ExternalURL`` and ``.Value``, also bound to
    ``$labels``, ``$externalLabels``, ``$externalURL`` and ``$value``; the functions are
    :data:`FUNCTIONS` (``query`` runs ``query`` when given, ``now`` returns ``now``). A template
    that fails to parse or execute expands to ``<error expanding template: ...>``.
    """
    if "{{" not in text:
        return text
    template = _compiled(text, name)
    if isinstance(template, str):
        return f"<error expanding template: {template}>"
    dot = {"Labels": dict(labels), "ExternalLabels": dict(external or {}), "ExternalURL": "", "Value": value}
    overrides: dict[str, gotemplate.Function] = {"now": lambda: now}
    if query is not None:
        overrides["query"] = query
    try:
        return template.render(dot, overrides)
    except gotemplate.TemplateError as exc:
        return f"<error expanding template: error executing template {name}: {exc}>"


# ---------------------------------------------------------------------- model
@dataclass
class Alert:
    labels: dict[str, str]
    annotations: dict[str, str]
    state: str  # "pending" | "firing" | "inactive"
    active_at: float
    value: float
    fired_at: float | None = None
    resolved_at: float | None = None
    keep_firing_since: float | None = None
    last_eval: float = 0.0

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "labels": dict(sorted(self.labels.items())),
            "annotations": dict(sorted(self.annotations.items())),
            "state": self.state,
            "activeAt": rfc3339_nano(self.active_at),
            "value": format_e(self.value),
        }
        if self.keep_firing_since is not None:
            out["keepFiringSince"] = rfc3339_nano(self.keep_firing_since)
        return out




@dataclass
class Rule:
    kind: str  # "alerting" | "recording"
    name: str
    expr: str
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    for_s: float = 0.0
    keep_firing_for_s: float = 0.0
    active: dict[Labels, Alert] = field(default_factory=dict)
    health: str = "unknown"
    last_error: str = ""
    last_eval: float | None = None
    prev_output: set[Labels] = field(default_factory=set)

    def state(self) -> str:
        states = {a.state for a in self.active.values()}
        if "firing" in states:
            return "firing"
        if "pending" in states:
            return "pending"
        return "inactive"


@dataclass
class Group:
    name: str
    interval: float
    rules: list[Rule]
    file: str = ""
    next_eval: float | None = None
    last_eval: float | None = None


def _rule_from(raw: Mapping[str, Any], where: str) -> Rule:
    if not isinstance(raw, Mapping):
        raise RuleError(f"{where}: a rule must be a mapping, got {type(raw).__name__}")
    expr = raw.get("expr")
    if not isinstance(expr, (str, int, float)) or str(expr).strip() == "":
        raise RuleError(f"{where}: missing 'expr'")
    labels = {str(k): str(v) for k, v in (raw.get("labels") or {}).items()}
    if "alert" in raw and "record" in raw:
        raise RuleError(f"{where}: a rule cannot have both 'alert' and 'record'")
    if "alert" in raw:
        return Rule(
            "alerting",
            str(raw["alert"]),
            str(expr),
            labels,
            {str(k): str(v) for k, v in (raw.get("annotations") or {}).items()},
            parse_duration(raw.get("for"), f"{where} 'for'"),
            parse_duration(raw.get("keep_firing_for"), f"{where} 'keep_firing_for'"),
        )
    if "record" in raw:
        return Rule("recording", str(raw["record"]), str(expr), labels)
    raise RuleError(f"{where}: a rule needs 'alert' or 'record'")


def load_groups(spec: Any, default_interval: float) -> list[Group]:
    """Accept a rules file (``{"groups": [...]}``), a PrometheusRule (its ``spec``), or the list itself."""
    if isinstance(spec, Mapping) and "spec" in spec and isinstance(spec["spec"], Mapping):
        spec = spec["spec"]
    if isinstance(spec, Mapping):
        spec = spec.get("groups")
    if not isinstance(spec, Sequence) or isinstance(spec, (str, bytes)):
        raise RuleError("rules: expected a list of groups (a 'groups:' key or a PrometheusRule spec)")
    groups = []
    for gi, raw in enumerate(spec):
        if not isinstance(raw, Mapping) or not raw.get("name"):
            raise RuleError(f"groups[{gi}]: each group needs a 'name'")
        where = f"group {raw['name']!r}"
        interval = parse_duration(raw.get("interval"), f"{where} 'interval'") or default_interval
        if interval <= 0:
            raise RuleError(f"{where}: interval must be positive")
        rules = [_rule_from(r, f"{where} rule {ri}") for ri, r in enumerate(raw.get("rules") or [])]
        groups.append(Group(str(raw["name"]), interval, rules, str(raw.get("file", ""))))
    return groups


class RuleManager:
    """Evaluates rule groups against ``engine`` as simulated time advances."""

    def __init__(
        self,
        groups: Any,
        engine: Engine,
        default_interval: float = 30.0,
        start: float | None = None,
        external_labels: Mapping[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self._groups = load_groups(groups, default_interval)
        self.external_labels = dict(external_labels or {})
        for g in self._groups:
            for r in g.rules:
                try:
                    engine.parse(r.expr)
                except PromQLError as exc:
                    raise RuleError(f"group {g.name!r} rule {r.name!r}: invalid expr: {exc.message}") from None
            if start is not None:
                g.next_eval = _align_up(start, g.interval)

    # ---------------------------------------------------------------- running
    def evaluate_until(self, t: float) -> None:
        """Run every evaluation due at or before ``t`` (seconds), in time order per group."""
        for g in self._groups:
            if g.next_eval is None:
                g.next_eval = _align_up(t, g.interval)
            if g.next_eval > t:
                continue
            count = int(math.floor((t - g.next_eval) / g.interval + 1e-9)) + 1
            times = g.next_eval + g.interval * np.arange(count)
            ms = np.round(times * 1000).astype(np.int64)
            for rule in g.rules:
                self._eval_rule(rule, ms)
            g.last_eval = float(times[-1])
            g.next_eval = float(times[-1] + g.interval)

    def _eval_rule(self, rule: Rule, ms: np.ndarray) -> None:
        try:
            res = self.engine.range_ms(rule.expr, ms)
        except PromQLError as exc:
            rule.health, rule.last_error = "err", exc.message
            rule.last_eval = float(ms[-1]) / 1000.0
            return
        rule.health, rule.last_error = "ok", ""
        per_step: list[dict[Labels, float]] = [dict() for _ in ms]
        index = {int(t): i for i, t in enumerate(ms.tolist())}
        if res.type == "scalar":
            assert res.scalar is not None
            per_step[0][()] = res.scalar[1]
        else:
            for lb, ts, vs in res.series:
                for t, v in zip(ts.tolist(), vs.tolist(), strict=True):
                    per_step[index[int(t)]][lb] = v
        for i, t_ms in enumerate(ms.tolist()):
            t = t_ms / 1000.0
            if rule.kind == "recording":
                self._record(rule, t_ms, per_step[i])
            else:
                self._alert_step(rule, t, per_step[i])
            rule.last_eval = t

    def _record(self, rule: Rule, t_ms: int, samples: dict[Labels, float]) -> None:
        out: set[Labels] = set()
        for lb, v in samples.items():
            d = dict(lb)
            d["__name__"] = rule.name
            d.update(rule.labels)
            lbls = make_labels(d)
            out.add(lbls)
            self._store(lbls, t_ms, v)
        for gone in rule.prev_output - out:
            self._store(gone, t_ms, STALE_NAN)
        rule.prev_output = out

    def _store(self, labels: Labels, t_ms: int, value: float) -> None:
        try:
            self.engine.storage.append_ms(labels, t_ms, value)
        except ValueError:
            # Out-of-order (e.g. the TSDB was rewound without the rules): Prometheus drops such samples too.
            pass

    def _alert_step(self, rule: Rule, t: float, samples: dict[Labels, float]) -> None:
        seen: set[Labels] = set()
        for lb, v in samples.items():
            base = {k: val for k, val in lb if k != "__name__"}
            labels = dict(base)
            name, query = "__alert_" + rule.name, self._query_at(t)
            for k, tmpl in rule.labels.items():
                labels[k] = expand_template(tmpl, base, v, self.external_labels, name=name, query=query, now=t)
            labels = {k: val for k, val in labels.items() if val != ""}
            labels["alertname"] = rule.name
            annotations = {k: expand_template(a, base, v, self.external_labels, name=name, query=query, now=t)
                           for k, a in rule.annotations.items()}
            key = make_labels(labels)
            seen.add(key)
            alert = rule.active.get(key)
            if alert is not None and alert.state != "inactive":
                alert.value, alert.annotations, alert.labels = v, annotations, labels
            else:
                alert = Alert(labels, annotations, "pending", t, v)
                rule.active[key] = alert
            alert.last_eval = t
        for key, alert in list(rule.active.items()):
            if key not in seen:
                keep = False
                if alert.state == "firing" and rule.keep_firing_for_s > 0:
                    if alert.keep_firing_since is None:
                        alert.keep_firing_since = t
                    keep = t - alert.keep_firing_since < rule.keep_firing_for_s
                if alert.state == "pending" or (
                    alert.resolved_at is not None and t - alert.resolved_at > RESOLVED_RETENTION
                ):
                    del rule.active[key]
                if alert.state != "inactive" and not keep:
                    alert.state = "inactive"
                    alert.resolved_at = t
                if not keep:
                    continue
            else:
                alert.keep_firing_since = None
            if alert.state == "pending" and t - alert.active_at >= rule.for_s:
                alert.state = "firing"
                alert.fired_at = t
        self._write_alerts_series(rule, t)

    def _query_at(self, t: float) -> QueryFunc:
        """The templates' ``query``: an instant query at the evaluation time, as a list of samples."""

        def query(expr: Any) -> list[Sample]:
            try:
                res = self.engine.instant(str(expr), t)
            except PromQLError as exc:
                raise gotemplate.TemplateError(f"error calling query: {exc.message}") from None
            if res.type == "scalar":
                assert res.scalar is not None
                return [{"Labels": {}, "Value": res.scalar[1]}]
            return [{"Labels": dict(lb), "Value": float(vs[-1])} for lb, _, vs in res.series if len(vs)]

        return query

    def _write_alerts_series(self, rule: Rule, t: float) -> None:
        """Maintain Prometheus' synthetic ``ALERTS`` series (value 1 while pending/firing)."""
        t_ms = int(round(t * 1000))
        now: set[Labels] = set()
        for alert in rule.active.values():
            if alert.state in ("pending", "firing"):
                lbls = make_labels({**alert.labels, "__name__": "ALERTS", "alertstate": alert.state})
                now.add(lbls)
                self._store(lbls, t_ms, 1.0)
        for gone in rule.prev_output - now:
            self._store(gone, t_ms, STALE_NAN)
        rule.prev_output = now

    # -------------------------------------------------------------- accessors
    def alerts(self) -> list[Alert]:
        """Pending and firing alerts (what ``/api/v1/alerts`` shows), ordered by labels."""
        out = [a for g in self._groups for r in g.rules for a in r.active.values() if a.state != "inactive"]
        return sorted(out, key=lambda a: sorted(a.labels.items()))

    def all_alerts(self) -> list[Alert]:
        """Including recently resolved alerts (kept 15 minutes, as Prometheus sends them on)."""
        out = [a for g in self._groups for r in g.rules for a in r.active.values()]
        return sorted(out, key=lambda a: sorted(a.labels.items()))

    def firing(self) -> list[Alert]:
        return [a for a in self.alerts() if a.state == "firing"]

    def rule_groups(self) -> list[Group]:
        return list(self._groups)

    def groups(self, rule_type: str | None = None) -> list[dict[str, Any]]:
        """The ``groups`` list of ``/api/v1/rules`` (``rule_type`` is ``alert`` or ``record``)."""
        out = []
        for g in self._groups:
            rules = []
            for r in g.rules:
                if rule_type == "alert" and r.kind != "alerting" or rule_type == "record" and r.kind != "recording":
                    continue
                item: dict[str, Any] = {
                    "name": r.name,
                    "query": r.expr,
                    "labels": dict(r.labels),
                    "health": r.health,
                    "evaluationTime": 0,
                    "lastEvaluation": rfc3339_nano(r.last_eval) if r.last_eval is not None else "0001-01-01T00:00:00Z",
                    "type": r.kind,
                }
                if r.last_error:
                    item["lastError"] = r.last_error
                if r.kind == "alerting":
                    item.update(
                        state=r.state(),
                        duration=r.for_s,
                        keepFiringFor=r.keep_firing_for_s,
                        annotations=dict(r.annotations),
                        alerts=[a.to_api() for a in sorted(r.active.values(), key=lambda a: sorted(a.labels.items())) if a.state != "inactive"],
                    )
                rules.append(item)
            if rule_type and not rules:
                continue
            out.append(
                {
                    "name": g.name,
                    "file": g.file,
                    "rules": rules,
                    "interval": g.interval,
                    "limit": 0,
                    "evaluationTime": 0,
                    "lastEvaluation": rfc3339_nano(g.last_eval) if g.last_eval is not None else "0001-01-01T00:00:00Z",
                }
            )
        return out

    def snapshot(self) -> object:
        return copy.deepcopy(self._groups)

    def restore(self, snap: object) -> None:
        if not isinstance(snap, list) or not all(isinstance(g, Group) for g in snap):
            raise TypeError("restore() needs an object returned by RuleManager.snapshot()")
        self._groups = copy.deepcopy(snap)


def _align_up(t: float, interval: float) -> float:
    return math.ceil(t / interval - 1e-9) * interval


