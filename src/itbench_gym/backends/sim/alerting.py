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
import threading
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from itbench_gym.lang import gotemplate, regex
from itbench_gym.lang.durations import DurationError, humanize_duration, parse_prometheus_duration
from itbench_gym.lang.gofloat import format_e, format_g, printf
from itbench_gym.lang.timestamps import rfc3339_nano

from .app.cluster_view import list_kind
from .exporters.targets import MONITORING_API, PrometheusConfig, find_prometheus
from .promql.ast import VectorSel, walk
from .promql.engine import Engine
from .promql.errors import PromQLError
from .promql.values import LABEL_CACHE_SIZE
from .tsdb import STALE_NAN, TSDB, Labels, Matcher, make_labels

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
    #: its next evaluation when a read ran it ahead of its group (None: the group's next)
    next_eval: float | None = None

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
    """Evaluates rule groups against ``engine`` as simulated time advances.

    Groups come as one list (``groups``) or as rule files (:meth:`load_files`, what
    prometheus-operator writes from PrometheusRule objects). A reload keeps the state of every group
    whose file and name are unchanged and of its rules that are unchanged, as Prometheus does; series
    of rules that went away get staleness markers. A reload that fails keeps the previous rules.
    """

    def __init__(
        self,
        groups: Any,
        engine: Engine,
        default_interval: float = 30.0,
        start: float | None = None,
        external_labels: Mapping[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.default_interval = default_interval
        self.external_labels = dict(external_labels or {})
        self.last_reload_error = ""
        self._start = start
        self._groups = self._checked(load_groups(groups, default_interval))
        #: bumped whenever the rule set is replaced (keys the caches derived from it)
        self._generation = 0
        #: an expression -> what must exist for it to return anything (``_needs``)
        self._needs: dict[str, Any] = {}
        self._names: frozenset[str] = frozenset()
        self._names_at = -1
        #: deferred evaluation: every evaluation due up to this time runs when someone reads
        self._due: float | None = None
        self._busy = False
        self._lock = threading.RLock()
        self._outputs: tuple[int, frozenset[str]] = (-1, frozenset())
        #: (groups' identity, groups read) -> the groups to run, in order
        self._plans: dict[tuple[int, frozenset[str] | None, bool], list[Group]] = {}
        #: an expression -> the metric names it selects
        self._reads: dict[str, frozenset[str]] = {}
        #: a group's rules -> whether its evaluations must run one instant at a time (``_stepwise``)
        self._stepwise_groups: dict[tuple[tuple[str, str, str, tuple[tuple[str, str], ...]], ...], bool] = {}

    def _checked(self, groups: list[Group]) -> list[Group]:
        for g in groups:
            for r in g.rules:
                try:
                    self.engine.parse(r.expr)
                except PromQLError as exc:
                    where = f"{g.file}: " if g.file else ""
                    raise RuleError(f"{where}group {g.name!r} rule {r.name!r}: invalid expr: {exc.message}") from None
            if self._start is not None and g.next_eval is None:
                g.next_eval = _align_up(self._start, g.interval)
        return groups

    # ---------------------------------------------------------------- loading
    def load_files(self, files: Sequence[tuple[str, Any]], default_interval: float | None = None,
                   external_labels: Mapping[str, str] | None = None, *, skip_invalid: bool = False,
                   now: float | None = None) -> bool:
        """Replace the rules with those of ``files`` (``(file name, rules document)`` pairs).

        An invalid file makes the reload fail: the current rules stay and :attr:`last_reload_error`
        says why (Prometheus keeps its rules when a reload fails). With ``skip_invalid`` the invalid
        files are left out instead, as prometheus-operator leaves out a PrometheusRule that does not
        validate; the error still names them. New groups first run at their first interval after
        ``now`` (when given).
        """
        self.catch_up()  # evaluations due before the change run with the rules they were due under
        interval = default_interval or self.default_interval
        new: list[Group] = []
        errors: list[str] = []
        for name, doc in files:
            try:
                groups = load_groups(doc, interval)
                for g in groups:
                    g.file = name
                self._checked(groups)
            except RuleError as exc:
                errors.append(f"{name}: {exc}")
                continue
            new += groups
        if errors and not skip_invalid:
            self.last_reload_error = "; ".join(errors)
            return False
        self.last_reload_error = "; ".join(errors)
        self.default_interval = interval
        if external_labels is not None:
            self.external_labels = dict(external_labels)
        old = {(g.file, g.name): g for g in self._groups}
        kept: set[int] = set()
        for g in new:
            prev = old.get((g.file, g.name))
            if prev is None or prev.interval != g.interval:
                continue
            g.next_eval, g.last_eval = prev.next_eval, prev.last_eval
            by_rule = {(r.kind, r.name, r.expr, tuple(sorted(r.labels.items()))): r for r in prev.rules}
            for i, r in enumerate(g.rules):
                same = by_rule.pop((r.kind, r.name, r.expr, tuple(sorted(r.labels.items()))), None)
                if same is not None and same.for_s == r.for_s and same.keep_firing_for_s == r.keep_firing_for_s:
                    same.annotations = r.annotations
                    g.rules[i] = same
                    kept.add(id(same))
        now_ms = int(round(max((g.last_eval or 0.0) for g in self._groups) * 1000)) if self._groups else 0
        for g in self._groups:
            for r in g.rules:
                if id(r) not in kept:
                    for gone in r.prev_output:
                        self._store(gone, now_ms, STALE_NAN)
        if now is not None:
            for g in new:
                if g.next_eval is None:
                    g.next_eval = _align_up(now, g.interval)
        self._groups = new
        self._generation += 1
        return True

    # ---------------------------------------------------------------- running
    def defer_until(self, t: float) -> None:
        """Make every evaluation due at or before ``t`` run at the next read, all at once.

        A rule's evaluation at an instant reads only samples at or before it, and the TSDB is
        append-only, so evaluating later in one batch (one range query per rule) gives what
        evaluating at each instant gave. Reads are :meth:`catch_up` (the accessors call it; the
        TSDB of :class:`RuleAwareTSDB` calls it before selecting series the rules write).
        """
        with self._lock:
            for g in self._groups:
                if g.next_eval is None:  # a group's first evaluation is at its first interval after it loaded
                    g.next_eval = _align_up(t, g.interval)
            self._due = t if self._due is None else max(self._due, t)

    def catch_up(self, *, alerts_only: bool = False, groups: frozenset[str] | None = None,
                 rules: frozenset[str] | None = None) -> None:
        """Run the deferred evaluations now (nothing when none is due, or from inside an evaluation).

        ``alerts_only`` (a read of alerts) runs the groups with alerting rules and the recording
        groups whose series those rules read, recorded series first; ``groups`` (a read of some
        groups' rules) runs only those and the recording groups they read, and with ``rules`` only
        those rules of them (and the rules of their group they read from). What is not read stays
        due until it is. Each group and rule keeps its own next evaluation time, so what runs later
        gives what running now would have.
        """
        with self._lock:
            if self._busy or self._due is None:
                return
            t = self._due
            if not alerts_only and groups is None:
                self._due = None
                self.evaluate_until(t)
                return
            busy, self._busy = self._busy, True
            try:
                self._run_until(t, self._groups_to_run(groups), groups if rules is not None else None, rules)
            finally:
                self._busy = busy

    def _groups_to_run(self, selected: frozenset[str] | None = None, *, every: bool = False) -> list[Group]:
        """Groups a read needs, in evaluation order: recording groups they read from, then the
        groups read (those named, every group with alerting rules, or ``every`` group).

        A batch of evaluations over a window must run a group that records a series before the
        groups that read it: run the other way round, a reader finds nothing recorded yet in the
        whole window, where Prometheus' groups, each evaluating on its own schedule, see the series
        from the recorder's first evaluation on.
        """
        key = (self._generation, selected, every)
        if key in self._plans:
            return self._plans[key]
        writers: dict[str, list[Group]] = {}
        for g in self._groups:
            for name in sorted(set().union(*(_writes(r) for r in g.rules))):
                writers.setdefault(name, []).append(g)
        needed: list[Group] = []
        seen: set[int] = set()

        def need(g: Group) -> None:
            if id(g) in seen:
                return
            seen.add(id(g))
            for name in sorted(set().union(*(self._reads_of(r) for r in g.rules))):
                for dep in writers.get(name, ()):
                    need(dep)
            needed.append(g)

        for g in self._groups:
            if every or (g.name in selected if selected is not None else any(r.kind == "alerting" for r in g.rules)):
                need(g)
        self._plans = {k: v for k, v in self._plans.items() if k[0] == key[0]}
        self._plans[key] = needed
        return needed

    def _reads_of(self, rule: Rule) -> frozenset[str]:
        """The metric names the rule's expression selects."""
        names = self._reads.get(rule.expr)
        if names is None:
            names = self._reads[rule.expr] = frozenset(
                node.name for node in walk(self.engine.parse(rule.expr)) if isinstance(node, VectorSel) and node.name)
        return names

    def _stepwise(self, g: Group) -> bool:
        """Whether a rule of the group can select a series it or a later rule of the group writes.

        Prometheus runs a group's rules in order at each instant, so such a rule sees those series
        as of the group's previous evaluation; a batch that ran each rule over the whole window in
        turn would show it none of them. Its instants then run one after the other. A selector
        whose matchers exclude every series a rule writes (another alert's name, a label value the
        rule sets otherwise) does not read it.
        """
        key = tuple((r.kind, r.name, r.expr, tuple(r.labels.items())) for r in g.rules)
        stepwise = self._stepwise_groups.get(key)
        if stepwise is None:
            stepwise = any(_may_select(node, later)
                           for i, r in enumerate(g.rules)
                           for node in walk(self.engine.parse(r.expr)) if isinstance(node, VectorSel)
                           for later in g.rules[i:])
            self._stepwise_groups[key] = stepwise
        return stepwise

    def output_names(self) -> frozenset[str]:
        """The metric names the rules write: ``ALERTS``, ``ALERTS_FOR_STATE`` and every recorded name."""
        key = self._generation
        if self._outputs[0] != key:
            names = {"ALERTS", "ALERTS_FOR_STATE"} | {r.name for g in self._groups for r in g.rules if r.kind == "recording"}
            self._outputs = (key, frozenset(names))
        return self._outputs[1]

    def evaluate_until(self, t: float) -> None:
        """Run every evaluation due at or before ``t`` (seconds), in time order per group, recorders first."""
        with self._lock:
            busy, self._busy = self._busy, True
            try:
                self._run_until(t, self._groups_to_run(every=True))
            finally:
                self._busy = busy

    def _run_until(self, t: float, groups: Sequence[Group] | None = None, read: frozenset[str] | None = None,
                   only: frozenset[str] | None = None) -> None:
        """Every evaluation due at or before ``t`` of ``groups``; of the groups named in ``read``, only
        the rules ``only`` names and those of the group they read from (a group that runs instant
        by instant runs whole)."""
        for g in self._groups if groups is None else groups:
            if g.next_eval is None:
                g.next_eval = _align_up(t, g.interval)
            if g.next_eval > t:
                continue
            partial = read is not None and only is not None and g.name in read and not self._stepwise(g)
            rules = self._with_inputs(g, only) if partial and only is not None else g.rules
            if self._stepwise(g):
                count = int(math.floor((t - g.next_eval) / g.interval + 1e-9)) + 1
                times = g.next_eval + g.interval * np.arange(count)
                for k in range(count):
                    for rule in rules:
                        self._eval_due(rule, np.round(times[k:k + 1] * 1000).astype(np.int64))
                last = float(times[-1])
            else:
                last = g.last_eval or 0.0
                for rule in rules:
                    start = rule.next_eval if rule.next_eval is not None else g.next_eval
                    if start > t:
                        continue
                    count = int(math.floor((t - start) / g.interval + 1e-9)) + 1
                    times = start + g.interval * np.arange(count)
                    self._eval_due(rule, np.round(times * 1000).astype(np.int64))
                    last = max(last, float(times[-1]))
                    rule.next_eval = float(times[-1] + g.interval)
            g.last_eval = last
            if len(rules) == len(g.rules):
                g.next_eval = last + g.interval
                for rule in g.rules:
                    rule.next_eval = None

    def _with_inputs(self, g: Group, names: frozenset[str]) -> list[Rule]:
        """The rules of ``g`` named in ``names`` and, before them, those of its rules whose output they read."""
        wanted = {id(r) for r in g.rules if r.name in names}
        for r in reversed(g.rules):
            if id(r) in wanted:
                reads = self._reads_of(r)
                wanted |= {id(w) for w in g.rules if _writes(w) & reads}
        return [r for r in g.rules if id(r) in wanted]

    def _eval_due(self, rule: Rule, window: np.ndarray) -> None:
        """Evaluate ``rule`` at the instants of ``window`` (ms), or note an evaluation that could find nothing."""
        if not rule.active and not rule.prev_output and not self._may_produce(rule):
            # nothing it reads exists: an evaluation would return nothing and change nothing
            rule.health, rule.last_error, rule.last_eval = "ok", "", float(window[-1]) / 1000.0
            return
        self._eval_rule(rule, window)

    def _may_produce(self, rule: Rule) -> bool:
        """Whether ``rule``'s expression can return anything, given the metric names the TSDB has."""
        storage = self.engine.storage
        size = len(storage)
        if size != self._names_at:
            self._names = frozenset(storage.label_values("__name__"))
            self._names_at = size
        need = self._needs.get(rule.expr)
        if need is None:
            need = self._needs[rule.expr] = _needs(self.engine.parse(rule.expr))
        return _holds(need, self._names)

    def _eval_rule(self, rule: Rule, ms: np.ndarray) -> None:
        try:
            res = self.engine.range_ms(rule.expr, ms)
        except PromQLError as exc:
            rule.health, rule.last_error = "err", exc.message
            rule.last_eval = float(ms[-1]) / 1000.0
            return
        rule.health, rule.last_error = "ok", ""
        if rule.kind == "recording" and res.type != "scalar" and self._record_all(rule, ms, res.series):
            return
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

    def _record_all(self, rule: Rule, ms: np.ndarray, series: Sequence[tuple[Labels, np.ndarray, np.ndarray]]) -> bool:
        """A recording rule's evaluations at the instants ``ms``, written series by series: each
        recorded series' values at the instants it had one, and a staleness marker at each instant
        it had none after one (or after the last evaluation's output), as :meth:`_record` at each
        instant in turn writes them. False (nothing written) when two results record under one
        label set (the rule's labels overwrite what told them apart): those go instant by instant."""
        extra = tuple(rule.labels.items())
        present: dict[Labels, tuple[np.ndarray, np.ndarray]] = {}
        for lb, ts, vs in series:
            recorded = _recorded_labels(lb, rule.name, extra)
            if recorded in present:
                return False
            at = np.zeros(len(ms), dtype=bool)
            values = np.empty(len(ms))
            idx = np.searchsorted(ms, ts)
            at[idx], values[idx] = True, vs
            present[recorded] = (at, values)
        none = (np.zeros(len(ms), dtype=bool), np.empty(len(ms)))
        for labels in [*present, *(gone for gone in rule.prev_output if gone not in present)]:
            at, values = present.get(labels, none)
            before = np.concatenate(([labels in rule.prev_output], at[:-1]))
            write = at | before
            if write.any():
                self.engine.storage.append_many_ms(labels, ms[write], np.where(at, values, STALE_NAN)[write])
        rule.prev_output = {labels for labels, (at, _) in present.items() if at[-1]}
        rule.last_eval = float(ms[-1]) / 1000.0
        return True

    def _record(self, rule: Rule, t_ms: int, samples: dict[Labels, float]) -> None:
        out: set[Labels] = set()
        extra = tuple(rule.labels.items())
        for lb, v in samples.items():
            lbls = _recorded_labels(lb, rule.name, extra)
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
        """Prometheus' synthetic series for each pending or firing alert.

        ``ALERTS`` (value 1, labels plus ``alertstate``) and ``ALERTS_FOR_STATE`` (value: when the
        alert became active, in Unix seconds; what Prometheus restores ``for`` state from), as
        ``rules/alerting.go`` writes them; both go stale when the alert stops being active.
        """
        t_ms = int(round(t * 1000))
        now: set[Labels] = set()
        for alert in rule.active.values():
            if alert.state in ("pending", "firing"):
                lbls = make_labels({**alert.labels, "__name__": "ALERTS", "alertstate": alert.state})
                now.add(lbls)
                self._store(lbls, t_ms, 1.0)
                for_state = make_labels({**alert.labels, "__name__": "ALERTS_FOR_STATE"})
                now.add(for_state)
                self._store(for_state, t_ms, alert.active_at)
        for gone in rule.prev_output - now:
            self._store(gone, t_ms, STALE_NAN)
        rule.prev_output = now

    # -------------------------------------------------------------- accessors
    def alerts(self) -> list[Alert]:
        """Pending and firing alerts (what ``/api/v1/alerts`` shows), ordered by labels."""
        self.catch_up(alerts_only=True)
        out = [a for g in self._groups for r in g.rules for a in r.active.values() if a.state != "inactive"]
        return sorted(out, key=lambda a: sorted(a.labels.items()))

    def all_alerts(self) -> list[Alert]:
        """Including recently resolved alerts (kept 15 minutes, as Prometheus sends them on)."""
        self.catch_up(alerts_only=True)
        out = [a for g in self._groups for r in g.rules for a in r.active.values()]
        return sorted(out, key=lambda a: sorted(a.labels.items()))

    def firing(self) -> list[Alert]:
        return [a for a in self.alerts() if a.state == "firing"]

    def rule_groups(self) -> list[Group]:
        self.catch_up()
        return list(self._groups)

    def groups(self, rule_type: str | None = None, *, rule_names: Collection[str] = (),
               group_names: Collection[str] = ()) -> list[dict[str, Any]]:
        """The ``groups`` list of ``/api/v1/rules`` (``rule_type`` is ``alert`` or ``record``),
        filtered as its ``rule_name[]`` and ``rule_group[]`` parameters filter it: only what is
        listed is brought up to date, so a poll of a few rules costs those rules alone (and a list of the
        alerting rules, those rules and the recording rules they read)."""
        names, wanted = set(rule_names), set(group_names)
        selected = [g for g in self._groups if (not wanted or g.name in wanted) and (not names or any(r.name in names for r in g.rules))]
        if names or wanted:
            self.catch_up(groups=frozenset(g.name for g in selected), rules=frozenset(names) if names else None)
        else:
            self.catch_up(alerts_only=rule_type == "alert")
        out = []
        for g in selected:
            rules = []
            for r in g.rules:
                if rule_type == "alert" and r.kind != "alerting" or rule_type == "record" and r.kind != "recording":
                    continue
                if names and r.name not in names:
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

    def snapshot(self, *, deferred: bool = False) -> object:
        """The rules' state; with ``deferred``, evaluations still due stay due in the snapshot (and run
        when a read of the restored state needs them) instead of running first."""
        if not deferred:
            self.catch_up()
        return (_copy_groups(self._groups), self.default_interval, dict(self.external_labels), self.last_reload_error, self._due)

    def restore(self, snap: object) -> None:
        if not (isinstance(snap, tuple) and len(snap) == 5 and isinstance(snap[0], list)
                and all(isinstance(g, Group) for g in snap[0])):
            raise TypeError("restore() needs an object returned by RuleManager.snapshot()")
        groups, interval, external, error, due = snap
        self._groups = _copy_groups(groups)
        self._generation += 1
        self.default_interval, self.external_labels, self.last_reload_error = interval, dict(external), error
        self._due = due


def _writes(rule: Rule) -> frozenset[str]:
    """The metric names a rule writes: its own for a recording rule, ``ALERTS`` and ``ALERTS_FOR_STATE`` for an alert."""
    return frozenset({rule.name}) if rule.kind == "recording" else frozenset({"ALERTS", "ALERTS_FOR_STATE"})


def _may_select(node: VectorSel, writer: Rule) -> bool:
    """Whether the vector selector ``node`` can select a series ``writer`` writes, judged by what
    every such series carries: its metric name, the rule's static labels and, for an alert, its
    ``alertname`` and (``ALERTS``) its ``alertstate``. Labels it cannot know may match."""
    for name in sorted(_writes(writer)):
        known: dict[str, tuple[str, ...]] = {k: (v,) for k, v in writer.labels.items() if "{{" not in v}
        known["__name__"] = (name,)
        if writer.kind == "alerting":
            known["alertname"] = (writer.name,)
            if name == "ALERTS":
                known["alertstate"] = ("pending", "firing")
        for matchers in node.matcher_sets():
            if node.name is not None and node.name != name:
                continue
            if all(m.name not in known or any(m.matches(v) for v in known[m.name]) for m in matchers):
                return True
    return False


def _copy_groups(groups: list[Group]) -> list[Group]:
    """The groups with their own rules and alerts, for a snapshot or a restore.

    What evaluation changes is copied: groups' times, rules' state and output, each alert's fields.
    Label, annotation and output collections are replaced whole when they change, never edited in
    place, so the copies share them (a deep copy of every rule's dicts took most of a checkpoint).
    """
    return [replace(g, rules=[replace(r, active={k: copy.copy(a) for k, a in r.active.items()}) for r in g.rules])
            for g in groups]


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def _recorded_labels(labels: Labels, name: str, extra: tuple[tuple[str, str], ...]) -> Labels:
    """A recording rule's output labels for one input series (cached: the same series come at every evaluation)."""
    d = dict(labels)
    d["__name__"] = name
    d.update(extra)
    return make_labels(d)


def _align_up(t: float, interval: float) -> float:
    return math.ceil(t / interval - 1e-9) * interval


# ------------------------------------------------------- which rules can produce anything
Need = bool | str | tuple[str, tuple[Any, ...]]
"""True (may produce output whatever exists), a metric name that must exist, or ("all"|"any", parts)."""

#: Functions whose result does not depend on their argument having series (``absent`` of nothing is 1).
_PRODUCE_ANYWAY = frozenset({"absent", "absent_over_time", "vector", "time", "pi", "scalar"})


def _needs(node: Any) -> Need:
    """What must exist for ``node`` to return a series: an over-approximation (never skips a producer)."""
    from .promql import ast

    if node.type in ("scalar", "string"):
        return True
    if isinstance(node, ast.VectorSel):
        eq = [m.value for m in node.matchers if m.name == "__name__" and m.op == "="]
        if node.or_groups or not eq:
            return True
        return eq[0]
    if isinstance(node, ast.MatrixSel):
        return _needs(node.vs)
    if isinstance(node, (ast.Subquery, ast.Paren, ast.Unary)):
        return _needs(node.expr)
    if isinstance(node, ast.Call):
        if node.name in _PRODUCE_ANYWAY:
            return True
        parts = [_needs(a) for a in node.args if a.type in ("vector", "matrix")]
        return ("all", tuple(parts)) if parts else True
    if isinstance(node, ast.Aggregate):
        return _needs(node.expr)
    if isinstance(node, ast.Binary):
        if node.lhs.type == "scalar":
            return _needs(node.rhs)
        if node.rhs.type == "scalar":
            return _needs(node.lhs)
        if node.op == "or" or node.fill_lhs is not None or node.fill_rhs is not None:
            return ("any", (_needs(node.lhs), _needs(node.rhs)))
        if node.op == "unless":
            return _needs(node.lhs)
        return ("all", (_needs(node.lhs), _needs(node.rhs)))
    return True


def _holds(need: Need, names: frozenset[str]) -> bool:
    if need is True:
        return True
    if need is False:
        return False
    if isinstance(need, str):
        return need in names
    op, parts = need
    if op == "all":
        return all(_holds(p, names) for p in parts)
    return any(_holds(p, names) for p in parts)


# ------------------------------------------------------- rules from PrometheusRule objects
def rule_file_name(prometheus_name: str, rule: Mapping[str, Any]) -> str:
    """Where prometheus-operator writes a PrometheusRule: ``<namespace>-<name>-<uid>.yaml``."""
    meta = rule.get("metadata") or {}
    return (f"/etc/prometheus/rules/prometheus-{prometheus_name}-rulefiles-0/"
            f"{meta.get('namespace', '')}-{meta.get('name', '')}-{meta.get('uid', '')}.yaml")


class PrometheusRuleSource:
    """The rule files the cluster's Prometheus loads: PrometheusRule objects it selects.

    Selection is prometheus-operator's: objects matching ``ruleSelector`` in namespaces matching
    ``ruleNamespaceSelector`` (nil: the Prometheus' own namespace); groups without ``interval``
    run at the Prometheus' ``evaluationInterval``. :meth:`sync` reloads the manager only when a
    resourceVersion it depends on changed.
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._fingerprint: tuple[Any, ...] | None = None

    def _selected(self) -> tuple[PrometheusConfig | None, list[dict[str, Any]]]:
        prometheus = find_prometheus(self.store)
        if prometheus is None:
            return None, []
        out: list[dict[str, Any]] = []
        for ns in prometheus.namespaces(self.store, "ruleNamespaceSelector"):
            out += [r for r in list_kind(self.store, "PrometheusRule", ns, MONITORING_API) if prometheus.selects("ruleSelector", r)]
        return prometheus, out

    def fingerprint(self) -> tuple[Any, ...]:
        prometheus = find_prometheus(self.store)
        namespaces = tuple((n["metadata"]["name"], n["metadata"].get("resourceVersion")) for n in list_kind(self.store, "Namespace"))
        rules = tuple((r["metadata"].get("namespace"), r["metadata"]["name"], r["metadata"].get("resourceVersion"))
                      for r in list_kind(self.store, "PrometheusRule", None, MONITORING_API))
        return (prometheus.resource_version if prometheus else None, namespaces, rules)

    def sync(self, manager: RuleManager, now: float | None = None) -> bool:
        """Reload ``manager`` if the selected rules (or what selects them) changed; True when it did."""
        fp = self.fingerprint()
        if fp == self._fingerprint:
            return False
        self._fingerprint = fp
        prometheus, selected = self._selected()
        if prometheus is None:
            return manager.load_files([], skip_invalid=True, now=now)
        files = [(rule_file_name(prometheus.name, r), r.get("spec") or {}) for r in selected]
        return manager.load_files(files, prometheus.evaluation_interval, prometheus.external_labels, skip_invalid=True, now=now)

    def snapshot(self) -> tuple[Any, ...] | None:
        return self._fingerprint

    def restore(self, snap: tuple[Any, ...] | None) -> None:
        self._fingerprint = snap


class RuleAwareTSDB(TSDB):
    """A TSDB that runs a rule manager's deferred evaluations before anyone reads what the rules write.

    Selecting ``ALERTS``, ``ALERTS_FOR_STATE``, a recorded name or series by a name pattern, or
    listing label names or values, first calls :meth:`RuleManager.catch_up`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.rules: RuleManager | None = None

    def _catch_up(self, matchers: Sequence[Matcher] | None) -> None:
        rules = self.rules
        if rules is None:
            return
        if matchers is not None:
            names = [m.value for m in matchers if m.name == "__name__" and m.op == "="]
            if names and names[0] not in rules.output_names():
                return
        rules.catch_up()

    def select_raw(self, matchers: Sequence[Matcher], mint: int, maxt: int,
                   check: Callable[[], None] | None = None) -> list[tuple[Labels, np.ndarray, np.ndarray]]:
        self._catch_up(matchers)
        return super().select_raw(matchers, mint, maxt, check)

    def select_flat(self, matchers: Sequence[Matcher], mint: int, maxt: int,
                    check: Callable[[], None] | None = None) -> tuple[list[Labels], np.ndarray, np.ndarray, np.ndarray]:
        self._catch_up(matchers)
        return super().select_flat(matchers, mint, maxt, check)

    def label_names(self, matchers: Any = None, start: float | None = None, end: float | None = None) -> list[str]:
        self._catch_up(None)
        return super().label_names(matchers, start, end)

    def label_values(self, name: str, matchers: Any = None, start: float | None = None, end: float | None = None) -> list[str]:
        self._catch_up(None)
        return super().label_values(name, matchers, start, end)
