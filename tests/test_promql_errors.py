"""Syntax errors carry the position Prometheus would report, even where the parser gives none."""

from __future__ import annotations

import pytest
from werkzeug.test import Client

from itbench_gym.backends.sim.alerting import RuleManager
from itbench_gym.backends.sim.prometheus_api import make_prometheus_app
from itbench_gym.backends.sim.promql import Engine
from itbench_gym.backends.sim.promql.errors import PromQLError
from itbench_gym.backends.sim.tsdb import TSDB
from itbench_gym.clock import SimClock

CASES = [
    ("1 +* 2", "1:4: parse error: unexpected '*'"),
    ("foo{bar=}", "1:9: parse error: unexpected '}'"),
    ("sum without() bad", "1:15: parse error: unexpected 'bad'"),
    ("rate(x[5m]) +", "1:14: parse error: unexpected end of input"),
    ('sum(rate(calls_total{code="500"}[2m])) by service_name', "1:43: parse error: unexpected 'service_name'"),
    ("sum(rate(x[5m]", "1:15: parse error: unclosed left parenthesis"),
]


@pytest.mark.parametrize("query, message", CASES)
def test_error_positions(query: str, message: str) -> None:
    with pytest.raises(PromQLError) as err:
        Engine(TSDB()).instant(query, 100.0)
    assert err.value.error_type == "bad_data"
    assert err.value.message == message


def test_http_envelope_carries_the_position() -> None:
    engine = Engine(TSDB())
    app = make_prometheus_app(engine, engine.storage, RuleManager([], engine), SimClock())
    resp = Client(app).get("/api/v1/query", query_string={"query": "1 +* 2"})
    assert resp.status_code == 400
    assert resp.json == {"status": "error", "errorType": "bad_data", "error": "1:4: parse error: unexpected '*'"}
