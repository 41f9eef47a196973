"""PromQL engine semantics users and alert rules depend on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from itbench_gym.backends.sim.promql import Engine, PromQLError
from itbench_gym.backends.sim.tsdb import TSDB


@pytest.fixture()
def db() -> TSDB:
    db = TSDB()
    for k in range(41):  # 10 minutes of 15 s scrapes
        t = 15 * k
        db.append(
            t,
            [
                ({"__name__": "req_total", "job": "api", "code": "200"}, 10.0 * k),
                ({"__name__": "req_total", "job": "api", "code": "500"}, 1.0 * k),
                ({"__name__": "limit", "job": "api"}, 100.0),
            ],
        )
    return db


def vector(engine: Engine, expr: str, t: float) -> dict[tuple[tuple[str, str], ...], float]:
    res = engine.instant(expr, t)
    assert res.type == "vector", res.type
    return {lb: float(vs[0]) for lb, _, vs in res.series}


def test_rate_extrapolates_to_the_window_like_prometheus(db: TSDB) -> None:
    e = Engine(db)
    out = vector(e, 'rate(req_total{code="200"}[1m])', 600)
    # 4 samples 15 s apart inside (540, 600]: 30 per 45 s, extrapolated to the 60 s window.
    assert out == {(("code", "200"), ("job", "api")): pytest.approx(10.0 / 15.0)}
    inc = vector(e, 'increase(req_total{code="200"}[1m])', 600)
    assert list(inc.values()) == [pytest.approx(40.0)]


def test_counter_resets_are_corrected(db: TSDB) -> None:
    db.append(615, [({"__name__": "req_total", "job": "api", "code": "200"}, 5.0)])
    e = Engine(db)
    assert list(vector(e, 'resets(req_total{code="200"}[5m])', 615).values()) == [1.0]
    # Samples 400 (t=600) then 5 (t=615, after a reset): the raw increase is 5, extrapolated over
    # the 15 s before the first sample to the 30 s window.
    inc = vector(e, 'increase(req_total{code="200"}[30s])', 615)
    assert list(inc.values()) == [pytest.approx(10.0)]


def test_staleness_marker_hides_series_immediately_but_lookback_keeps_gaps(db: TSDB) -> None:
    e = Engine(db)
    db.append(615, [({"__name__": "req_total", "job": "api", "code": "200"}, 1.0)])  # code=500 and limit vanish
    assert len(vector(e, "req_total", 620)) == 1
    # Without a staleness marker a series stays visible for the 5 minute lookback.
    db.append_sample({"__name__": "gauge"}, 0, 3)
    assert vector(e, "gauge", 299) == {(("__name__", "gauge"),): 3.0}
    assert vector(e, "gauge", 300) == {}


def test_offset_at_and_subquery(db: TSDB) -> None:
    e = Engine(db)
    assert vector(e, 'req_total{code="500"} offset 5m', 600) == {
        (("__name__", "req_total"), ("code", "500"), ("job", "api")): 20.0
    }
    assert list(vector(e, 'req_total{code="500"} @ 150', 600).values()) == [10.0]
    assert list(vector(e, 'req_total{code="500"} @ start()', 600).values()) == [40.0]
    out = vector(e, 'max_over_time(rate(req_total{code="500"}[1m])[5m:1m])', 600)
    assert list(out.values()) == [pytest.approx(1 / 15)]


def test_aggregations_and_grouping(db: TSDB) -> None:
    e = Engine(db)
    assert vector(e, "sum by (job) (req_total)", 600) == {(("job", "api"),): 440.0}
    assert vector(e, "count without (code) (req_total)", 600) == {(("job", "api"),): 2.0}
    top = e.instant("topk(1, req_total)", 600)
    assert [dict(lb)["code"] for lb, _, _ in top.series] == ["200"]
    assert list(vector(e, "quantile(0.5, req_total)", 600).values()) == [220.0]
    cv = vector(e, 'count_values("v", limit)', 600)
    assert cv == {(("v", "100"),): 1.0}


def test_vector_matching_and_errors(db: TSDB) -> None:
    e = Engine(db)
    ratio = vector(e, 'req_total{code="500"} / ignoring(code) req_total{code="200"}', 600)
    assert ratio == {(("job", "api"),): pytest.approx(0.1)}
    joined = vector(e, "req_total / on(job) group_left limit", 600)
    assert len(joined) == 2
    with pytest.raises(PromQLError, match="many-to-one matching must be explicit") as err:
        e.instant("req_total / on(job) limit", 600)
    assert err.value.error_type == "execution"
    with pytest.raises(PromQLError, match="found duplicate series for the match group"):
        e.instant("limit / on(job) req_total", 600)
    assert len(vector(e, "req_total > bool 100", 600)) == 2
    assert len(vector(e, "req_total > 100", 600)) == 1
    assert len(vector(e, 'req_total unless req_total{code="500"}', 600)) == 1
    assert len(vector(e, 'limit or req_total', 600)) == 3


def test_classic_histogram_quantile_with_monotonicity_fix() -> None:
    db = TSDB()
    for le, v in (("0.1", 10), ("0.5", 50), ("1", 45), ("+Inf", 100)):
        db.append_sample({"__name__": "lat_bucket", "le": le}, 0, v)
    res = Engine(db).instant("histogram_quantile(0.5, lat_bucket)", 0)
    assert res.series[0][2][0] == pytest.approx(0.5)
    assert any("fixed for monotonicity" in i for i in res.infos)


def test_histograms_with_the_same_buckets_are_computed_each_on_its_own() -> None:
    """Histograms sharing a bucket layout are evaluated together; each keeps its own quantile and
    only the one that needed fixing is reported, with its own buckets and sample count."""
    db = TSDB()
    counts = {"ok": (10, 50, 80, 100), "bad": (10, 50, 45, 100), "late": (1, 2, 3, 4)}
    for t in range(0, 120, 15):
        for svc, cs in counts.items():
            for le, v in zip(("0.1", "0.5", "1", "+Inf"), cs, strict=True):
                if svc != "late" or t >= 60:
                    db.append_sample({"__name__": "lat_bucket", "svc": svc, "le": le}, t, v)
    e = Engine(db)
    together = e.range("histogram_quantile(0.5, lat_bucket)", 0, 105, 15)
    for lb, _, vs in together.series:
        alone = e.range(f'histogram_quantile(0.5, lat_bucket{{svc="{dict(lb)["svc"]}"}})', 0, 105, 15)
        assert alone.series[0][2].tolist() == vs.tolist()
        assert alone.infos == ([] if dict(lb)["svc"] != "bad" else together.infos)
    assert len(together.series) == 3
    assert together.infos == [
        "PromQL info: input to histogram_quantile needed to be fixed for monotonicity (see "
        "https://prometheus.io/docs/prometheus/latest/querying/functions/#histogram_quantile), from buckets "
        "1 to 1, with a max diff of 5, over 8 samples from 1970-01-01T00:00:00Z to 1970-01-01T00:01:45Z (1:25)"
    ]


def test_range_query_equals_instant_queries_at_each_step(db: TSDB) -> None:
    e = Engine(db)
    expr = 'sum by (code) (rate(req_total[2m])) / scalar(sum(limit))'
    rng = e.range(expr, 300, 600, 30)
    for lb, ts, vs in rng.series:
        for t, v in zip(ts.tolist(), vs.tolist(), strict=True):
            assert vector(e, expr, t / 1000)[lb] == pytest.approx(v)


def test_label_functions_and_sort(db: TSDB) -> None:
    e = Engine(db)
    out = vector(e, 'label_replace(limit, "svc", "$1-x", "job", "(.*)")', 600)
    assert dict(next(iter(out)))["svc"] == "api-x"
    res = e.instant("sort_desc(req_total)", 600)
    assert [float(v[0]) for _, _, v in res.series] == [400.0, 40.0]


def test_scalar_and_string_results(db: TSDB) -> None:
    e = Engine(db)
    res = e.instant("1 + 2 * 3", 10)
    assert res.type == "scalar" and res.scalar == (10_000, 7.0)
    assert e.instant('"hi"', 10).type == "string"
    assert e.range("time()", 0, 60, 30).to_api()["result"][0]["values"] == [[0, "0"], [30, "30"], [60, "60"]]


def test_errors_are_typed_and_located(db: TSDB) -> None:
    e = Engine(db)
    with pytest.raises(PromQLError) as err:
        e.instant("sum(rate(req_total[1m])", 0)
    assert err.value.error_type == "bad_data"
    assert err.value.message.startswith("1:")
    with pytest.raises(PromQLError, match="range vector"):
        e.range("req_total[1m]", 0, 60, 15)
    with pytest.raises(PromQLError, match="step"):
        e.range("up", 0, 60, 0)
    with pytest.raises(PromQLError, match="invalid time"):
        e.instant("up", math.inf)


def test_annotations_match_prometheus_messages(db: TSDB) -> None:
    e = Engine(db)
    res = e.instant("rate(limit[1m])", 600)
    assert res.infos == [
        'PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: "limit" (1:6)'
    ]
    assert e.instant("rate(req_total[1m])", 600).infos == []


def test_large_range_query_is_vectorised() -> None:
    db = TSDB()
    refs = np.array([db.ref({"__name__": "c_total", "i": str(i), "job": "x"}) for i in range(500)])
    for k in range(240):
        db.append_refs(15 * k, refs, np.full(500, float(k)))
    res = Engine(db).range("sum(rate(c_total[5m]))", 600, 15 * 239, 15)
    assert res.series[0][2] == pytest.approx(np.full(len(res.series[0][2]), 500 / 15))


@pytest.mark.parametrize("seed", range(4))
def test_sums_by_accumulation_equal_the_member_fold_bit_for_bit(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sum`` folds every group at once with two cumulative sums; Prometheus adds member by member
    (Kahan–Neumaier). Values of mixed magnitude and sign, members absent at some steps: the same bits."""
    from itbench_gym.backends.sim.promql import aggregation
    from itbench_gym.backends.sim.promql.errors import Annotations
    from itbench_gym.backends.sim.promql.values import Block

    rng = np.random.default_rng(seed)
    rows, steps = 60, 7
    values = rng.choice([1.0, -1.0], (rows, steps)) * 10.0 ** rng.integers(-8, 17, (rows, steps)) * rng.random((rows, steps))
    block = Block([(("g", str(rng.integers(0, 5))), ("i", str(i))) for i in range(rows)], values,
                  rng.random((rows, steps)) < 0.8, np.ones(rows, dtype=bool))

    def total(grouping: list[str]) -> Block:
        return aggregation.aggregate("sum", block, grouping, False, None, Annotations(), "")

    fast = {grouping: total(list(grouping)) for grouping in ((), ("g",))}
    monkeypatch.setattr(aggregation, "_ACCUMULATION_LIMIT", 0)  # the member-by-member fold
    for grouping, got in fast.items():
        want = total(list(grouping))
        assert got.labels == want.labels
        assert np.array_equal(got.present, want.present)
        assert got.values[got.present].tobytes() == want.values[want.present].tobytes()


@pytest.mark.parametrize("expr", ["sum_over_time(m[10m])", "deriv(m[10m])", "predict_linear(m[10m], 3600)"])
def test_window_sums_by_accumulation_equal_the_sample_fold_bit_for_bit(expr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Window sums (``sum_over_time``, the regressions of ``deriv`` and ``predict_linear``) fold every
    window at once; Prometheus adds sample by sample (Kahan–Neumaier). Same bits, windows of any length."""
    from itbench_gym.backends.sim.promql import window_funcs

    rng = np.random.default_rng(7)
    db = TSDB()
    t = 0.0
    for _ in range(300):
        t += float(rng.choice([15.0, 30.0, 45.0]))
        db.append(t, [({"__name__": "m", "i": str(i)}, float(rng.choice([1.0, -1.0]) * 10.0 ** rng.integers(-6, 15) * rng.random()))
                      for i in range(8) if rng.random() < 0.9])

    def evaluate() -> list[tuple[tuple[tuple[str, str], ...], bytes]]:
        res = Engine(db).range(expr, 900, t, 30)
        return [(lb, vs.tobytes()) for lb, _, vs in res.series]

    fast = evaluate()
    monkeypatch.setattr(window_funcs, "_windows_sums", lambda win, columns: None)  # the sample-by-sample fold
    assert fast == evaluate()
