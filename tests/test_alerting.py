"""Alert and recording rules on the simulated clock."""

from __future__ import annotations

import numpy as np
import pytest

from itbench_gym.backends.sim.alerting import RESOLVED_RETENTION, RuleAwareTSDB, RuleError, RuleManager, expand_template
from itbench_gym.backends.sim.promql import Engine
from itbench_gym.backends.sim.tsdb import TSDB, is_stale

RULES = {
    "groups": [
        {
            "name": "errors",
            "interval": "15s",
            "rules": [
                {"record": "job:errors:rate1m", "expr": "sum by (job) (rate(errors_total[1m]))"},
                {
                    "alert": "HighErrorRate",
                    "expr": "job:errors:rate1m > 0",
                    "for": "1m",
                    "labels": {"severity": "critical", "team": "{{ $labels.job }}-oncall"},
                    "annotations": {"summary": "{{ $labels.job }} fails {{ $value | humanize }}/s"},
                },
            ],
        }
    ]
}


def scrape(db: TSDB, start: int, end: int, failing: tuple[int, int]) -> None:
    value = 0.0
    for t in range(start, end, 15):
        if failing[0] <= t < failing[1]:
            value += 3
        db.append(t, [({"__name__": "errors_total", "job": "api"}, value)])


def states(rm: RuleManager) -> list[str]:
    return [a.state for a in rm.all_alerts()]


def test_pending_firing_resolved_lifecycle() -> None:
    db = TSDB()
    scrape(db, 0, 1200, failing=(300, 480))
    rm = RuleManager(RULES, Engine(db), start=0)
    rm.evaluate_until(290)
    assert rm.alerts() == []
    rm.evaluate_until(300)
    (alert,) = rm.alerts()
    assert alert.state == "pending" and alert.active_at == 300
    assert alert.labels == {"job": "api", "severity": "critical", "team": "api-oncall", "alertname": "HighErrorRate"}
    # First increase (0 -> 3) seen at t=300: no extrapolation below zero, 3 over the 60 s window.
    assert alert.annotations["summary"] == "api fails 50m/s"
    rm.evaluate_until(345)
    assert states(rm) == ["pending"]
    rm.evaluate_until(360)  # 'for: 1m' elapsed
    assert states(rm) == ["firing"] and rm.firing()[0].fired_at == 360
    rm.evaluate_until(600)  # errors stopped at 480; the 1m rate drops to 0
    assert rm.alerts() == [] and states(rm) == ["inactive"]
    resolved_at = rm.all_alerts()[0].resolved_at
    assert resolved_at is not None and 480 < resolved_at <= 560
    rm.evaluate_until(resolved_at + RESOLVED_RETENTION + 15)
    assert rm.all_alerts() == []


def test_recording_rule_writes_series_and_stale_markers() -> None:
    db = TSDB()
    scrape(db, 0, 300, failing=(0, 300))
    e = Engine(db)
    rm = RuleManager(RULES, e, start=0)
    rm.evaluate_until(285)
    res = e.instant("job:errors:rate1m", 285)
    assert [dict(lb) for lb, _, _ in res.series] == [{"__name__": "job:errors:rate1m", "job": "api"}]
    assert float(res.series[0][2][0]) == pytest.approx(0.2)
    alerts = e.instant('ALERTS{alertname="HighErrorRate"}', 285)
    assert dict(alerts.series[0][0])["alertstate"] == "firing"


def test_batched_and_tick_by_tick_evaluation_agree() -> None:
    def run(step: int) -> list[tuple[str, float]]:
        db = TSDB()
        scrape(db, 0, 900, failing=(300, 480))
        rm = RuleManager(RULES, Engine(db), start=0)
        seen = []
        for t in range(0, 900, step):
            rm.evaluate_until(t)
            seen += [(a.state, a.active_at) for a in rm.all_alerts()]
        rm.evaluate_until(900)
        return seen[-1:] + [(a.state, a.active_at) for a in rm.all_alerts()]

    assert run(15) == run(300)


FLAKY = {"groups": [{"name": "flaky", "interval": "15s", "rules": [
    {"record": "job:flaky:up", "expr": "flaky > 0"},
    # the rule's label overwrites what tells the two jobs apart: both record under one label set
    {"record": "flaky:any", "expr": "flaky > 0", "labels": {"job": "any"}},
]}]}


def _recorded(db: TSDB, name: str) -> list[tuple[tuple[tuple[str, str], ...], list[int], bytes]]:
    return [(s.labels, s.ts.tolist(), s.vs.tobytes()) for s in db.select({"__name__": name})]


def test_a_batch_of_instants_records_and_marks_stale_as_each_instant_does() -> None:
    """Recorded series that come and go inside one batch get their values and a staleness marker at
    each instant they went missing, as evaluating instant by instant writes them."""
    def run(batch: int) -> list[object]:
        db = TSDB()
        for k, t in enumerate(range(0, 600, 15)):
            db.append(t, [({"__name__": "flaky", "job": job}, float((k + shift) % 3 == 0)) for job, shift in (("a", 0), ("b", 1))])
        rm = RuleManager(FLAKY, Engine(db), start=0)
        for t in [*range(0, 585, batch), 585]:
            rm.evaluate_until(t)
        return _recorded(db, "job:flaky:up") + _recorded(db, "flaky:any")

    one_by_one = run(15)
    assert one_by_one == run(300) == run(600)
    values = np.concatenate([np.frombuffer(bits) for _, _, bits in one_by_one])
    assert is_stale(values).any() and (values == 1.0).any()


def test_keep_firing_for_holds_the_alert() -> None:
    db = TSDB()
    for t in range(0, 600, 15):
        db.append(t, [({"__name__": "up", "job": "x"}, 0 if 60 <= t < 120 else 1)])
    rules = {"groups": [{"name": "g", "interval": "15s", "rules": [
        {"alert": "Down", "expr": "up == 0", "keep_firing_for": "2m"}]}]}
    rm = RuleManager(rules, Engine(db), start=0)
    rm.evaluate_until(120)
    assert states(rm) == ["firing"]
    rm.evaluate_until(225)
    assert states(rm) == ["firing"] and rm.alerts()[0].keep_firing_since == 120
    rm.evaluate_until(240)
    assert states(rm) == ["inactive"]


def test_prometheusrule_spec_and_api_groups() -> None:
    rm = RuleManager({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "spec": RULES}, Engine(TSDB()))
    assert [r["type"] for r in rm.groups()[0]["rules"]] == ["recording", "alerting"]
    assert [r["name"] for r in rm.groups("alert")[0]["rules"]] == ["HighErrorRate"]
    assert rm.groups()[0]["interval"] == 15.0


def test_invalid_rules_are_reported_with_their_location() -> None:
    with pytest.raises(RuleError, match="group 'g' rule 0: missing 'expr'"):
        RuleManager({"groups": [{"name": "g", "rules": [{"alert": "A"}]}]}, Engine(TSDB()))
    with pytest.raises(RuleError, match="invalid duration"):
        RuleManager({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "for": "5 minutes"}]}]}, Engine(TSDB()))
    with pytest.raises(RuleError, match="rule 'A': invalid expr"):
        RuleManager({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "sum("}]}]}, Engine(TSDB()))


def test_evaluation_errors_mark_rule_unhealthy() -> None:
    db = TSDB()
    db.append(0, [({"__name__": "a", "x": "1"}, 1), ({"__name__": "a", "x": "2"}, 1), ({"__name__": "b"}, 1)])
    rules = {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "a * on() b + on() a"}]}]}
    rm = RuleManager(rules, Engine(db), start=0)
    rm.evaluate_until(0)
    rule = rm.groups()[0]["rules"][0]
    assert rule["health"] == "err" and "matching" in rule["lastError"]


def test_snapshot_restore_rewinds_alert_state() -> None:
    db = TSDB()
    scrape(db, 0, 600, failing=(0, 600))
    rm = RuleManager(RULES, Engine(db), start=0)
    rm.evaluate_until(30)
    snap = rm.snapshot()
    rm.evaluate_until(300)
    assert states(rm) == ["firing"]
    rm.restore(snap)
    assert states(rm) == ["pending"]


def test_template_subset() -> None:
    labels = {"pod": "cart-1"}
    assert expand_template("{{ $labels.pod }} at {{ $value }}", labels, 0.5) == "cart-1 at 0.5"
    assert expand_template('{{ printf "%.1f" $value }}%', labels, 12.345) == "12.3%"
    assert expand_template("{{ humanizePercentage $value }}", labels, 0.256) == "25.6%"
    assert expand_template("{{ $value | humanizeDuration }}", labels, 3725) == "1h 2m 5s"  # Prometheus template_test.go: "1h 0m 0s", "14m 59s"
    assert expand_template("{{ .Labels.pod | toUpper }}", labels, 1) == "CART-1"
    assert expand_template("{{ nosuch }}", labels, 1).startswith("<error expanding template")


def test_deferred_evaluation_runs_at_the_first_read_and_matches_eager_evaluation() -> None:
    def run(deferred: bool) -> tuple[list[tuple[str, float]], list[float]]:
        db = RuleAwareTSDB()
        engine = Engine(db)
        rm = RuleManager(RULES, engine)
        db.rules = rm
        scrape(db, 0, 600, failing=(300, 480))
        for t in range(0, 600, 15):
            rm.defer_until(t) if deferred else rm.evaluate_until(t)
        recorded = engine.range_ms("job:errors:rate1m", np.arange(15_000, 600_000, 15_000, dtype=np.int64))
        values = [float(v) for _, _, vs in recorded.series for v in vs]
        return [(a.state, a.active_at) for a in rm.all_alerts()], values

    eager, deferred = run(False), run(True)
    assert deferred == eager and eager[0] == [("inactive", 300.0)] and max(eager[1]) > 0  # fired at 360, resolved


def test_rule_files_reload_keeps_the_state_of_unchanged_rules_and_skips_invalid_ones() -> None:
    db = TSDB()
    scrape(db, 0, 600, failing=(300, 600))
    rm = RuleManager([], Engine(db))
    assert rm.load_files([("a.yaml", RULES)], now=0)
    rm.evaluate_until(420)
    (before,) = rm.alerts()
    broken = {"groups": [{"name": "b", "rules": [{"alert": "Broken", "expr": "rate(("}]}]}
    assert rm.load_files([("a.yaml", RULES), ("b.yaml", broken)], skip_invalid=True, now=420)
    assert "b.yaml" in rm.last_reload_error and [g.file for g in rm.rule_groups()] == ["a.yaml"]
    (after,) = rm.alerts()
    assert after is before and after.state == "firing"  # the same alert object, its 'for' already served
    assert not rm.load_files([("b.yaml", broken)])  # a strict reload that fails keeps the rules it had
    assert [g.file for g in rm.rule_groups()] == ["a.yaml"]


POLLED = {
    "groups": [
        {"name": "errors", "interval": "15s", "rules": [
            *RULES["groups"][0]["rules"],
            {"alert": "Flood", "expr": "job:errors:rate1m > 1000", "labels": {"severity": "warning"}},
        ]},
        {"name": "volume", "interval": "30s", "rules": [{"alert": "AnyErrors", "expr": "errors_total > 0"}]},
    ]
}


def _deferred(rules: dict[str, object], end: int) -> tuple[RuleAwareTSDB, Engine, RuleManager]:
    db = RuleAwareTSDB()
    engine = Engine(db)
    rm = RuleManager(rules, engine)
    db.rules = rm
    scrape(db, 0, end, failing=(300, 480))
    return db, engine, rm


def test_a_poll_of_one_rule_runs_it_and_the_rules_it_reads_and_leaves_the_rest_due() -> None:
    _, engine, rm = _deferred(POLLED, 600)
    for t in range(0, 600, 15):
        rm.defer_until(t)
    (group,) = rm.groups("alert", rule_names=["HighErrorRate"])
    assert [r["name"] for r in group["rules"]] == ["HighErrorRate"] and group["lastEvaluation"] == "1970-01-01T00:09:45Z"
    by_name = {r.name: r for g in rm._groups for r in g.rules}
    assert by_name["HighErrorRate"].last_eval == 585.0 and by_name["job:errors:rate1m"].last_eval == 585.0
    assert by_name["Flood"].last_eval is None and by_name["AnyErrors"].last_eval is None  # still due
    # the rest runs when read, and everything ends as evaluating each instant as it came
    deferred = [(a.labels["alertname"], a.state, a.active_at) for a in rm.all_alerts()]
    recorded = engine.range_ms("job:errors:rate1m", np.arange(15_000, 600_000, 15_000, dtype=np.int64))
    _, eager_engine, eager = _deferred(POLLED, 600)
    for t in range(0, 600, 15):
        eager.evaluate_until(t)
    assert deferred == [(a.labels["alertname"], a.state, a.active_at) for a in eager.all_alerts()]
    assert any(name == "AnyErrors" for name, _, _ in deferred)
    expected = eager_engine.range_ms("job:errors:rate1m", np.arange(15_000, 600_000, 15_000, dtype=np.int64))
    assert [list(vs) for _, _, vs in recorded.series] == [list(vs) for _, _, vs in expected.series]



def test_a_list_of_the_alerting_rules_runs_them_and_what_they_read_and_leaves_other_recordings_due() -> None:
    rules = {"groups": [*POLLED["groups"], {"name": "capacity", "interval": "30s", "rules": [
        {"record": "job:errors:total", "expr": "sum by (job) (errors_total)"}]}]}
    _, engine, rm = _deferred(rules, 600)
    for t in range(0, 600, 15):
        rm.defer_until(t)
    listed = rm.groups("alert")
    assert [g["name"] for g in listed] == ["errors", "volume"]
    by_name = {r.name: r for g in rm._groups for r in g.rules}
    assert by_name["job:errors:rate1m"].last_eval == 585.0 and by_name["AnyErrors"].last_eval == 570.0
    assert by_name["job:errors:total"].last_eval is None  # no alert reads it: still due
    assert [r["name"] for g in rm.groups("record") for r in g["rules"]] == ["job:errors:rate1m", "job:errors:total"]
    assert by_name["job:errors:total"].last_eval == 570.0
    assert engine.instant("job:errors:total", 570.0).series

ALERTS_READERS = {
    "groups": [
        # kube-prometheus' InfoInhibitor shape: its selectors exclude its own alert, so the group runs as a batch
        {"name": "general", "interval": "15s", "rules": [
            {"alert": "Info", "expr": "errors_total > 0", "labels": {"severity": "info"}},
            {"alert": "Inhibitor", "expr": 'ALERTS{severity="info"} unless on (job) ALERTS{alertname!="Inhibitor", severity="critical"}',
             "labels": {"severity": "none"}},
        ]},
        # a rule reading a later rule's alert sees it as of the group's previous evaluation
        {"name": "meta", "interval": "15s", "rules": [
            {"alert": "Echo", "expr": 'ALERTS{alertname="Later", alertstate="firing"}'},
            {"alert": "Later", "expr": "errors_total > 0"},
        ]},
    ]
}


def test_a_batch_of_instants_agrees_with_evaluating_each_instant_whatever_the_rules_read() -> None:
    def run(step: int) -> list[tuple[str, str, float]]:
        db = TSDB()
        scrape(db, 0, 600, failing=(300, 480))
        rm = RuleManager(ALERTS_READERS, Engine(db), start=0)
        for t in range(0, 600, step):
            rm.evaluate_until(t)
        rm.evaluate_until(600)
        return [(a.labels["alertname"], a.state, a.active_at) for a in rm.all_alerts()]

    batched = run(600)
    assert batched == run(15)
    assert {name for name, _, _ in batched} == {"Info", "Inhibitor", "Echo", "Later"}
