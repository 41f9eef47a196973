"""TSDB behaviour the engine, the scraper and env resets rely on."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from itbench_gym.backends.sim.tsdb import TSDB, Matcher, is_stale, make_labels


def _up(job: str, inst: str) -> dict[str, str]:
    return {"__name__": "up", "job": job, "instance": inst}


def test_select_returns_samples_in_range_sorted_by_labels() -> None:
    db = TSDB()
    for t in range(0, 60, 15):
        db.append(t, [(_up("b", "1"), 1.0), (_up("a", "1"), float(t))])
    series = db.select('up{job=~"a|b"}', 15, 30)
    assert [s.metric["job"] for s in series] == ["a", "b"]
    assert series[0].times.tolist() == [15.0, 30.0]
    assert series[0].vs.tolist() == [15.0, 30.0]
    assert not series[0].vs.flags.writeable


def test_series_missing_from_a_scrape_of_its_job_get_a_staleness_marker() -> None:
    db = TSDB()
    db.append(0, [(_up("a", "1"), 1), (_up("a", "2"), 1), (_up("b", "1"), 1)])
    db.append(15, [(_up("a", "1"), 1)])  # job b not scraped in this call: untouched
    (gone,) = db.select({"instance": "2"})
    assert is_stale(gone.vs).tolist() == [False, True]
    assert not math.isnan(gone.vs[0])
    (b,) = db.select({"job": "b"})
    assert len(b.vs) == 1
    db.append(30, [], jobs=["b"])  # an empty scrape of job b stales all of it
    (b,) = db.select({"job": "b"})
    assert is_stale(b.vs).tolist() == [False, True]


def test_ordinary_nan_is_not_a_staleness_marker() -> None:
    db = TSDB()
    db.append_sample({"__name__": "x"}, 0, float("nan"))
    assert not is_stale(db.select("x")[0].vs).any()


def test_out_of_order_sample_is_rejected_with_the_series_named() -> None:
    db = TSDB()
    db.append_sample({"__name__": "x", "a": "1"}, 10, 1)
    with pytest.raises(ValueError, match=r'x.*a="1".*before the last sample'):
        db.append_sample({"__name__": "x", "a": "1"}, 5, 1)


def test_matchers_follow_prometheus_semantics() -> None:
    db = TSDB()
    db.append_sample({"__name__": "m", "env": "prod"}, 0, 1)
    db.append_sample({"__name__": "m"}, 0, 2)
    # A matcher that matches the empty string also selects series without the label.
    assert len(db.select([Matcher("env", "!=", "prod")])) == 1
    assert len(db.select([Matcher("__name__", "=", "m"), Matcher("env", "=~", "")])) == 1
    assert len(db.select([Matcher("env", "=~", "PR.*")])) == 0
    assert len(db.select([Matcher("env", "=~", "(?i)PR.*")])) == 1
    with pytest.raises(ValueError, match=r"error parsing regexp: missing closing \): `\(`"):
        Matcher("env", "=~", "(")


def test_label_names_and_values_respect_matchers_and_time() -> None:
    db = TSDB()
    db.append_sample({"__name__": "a", "x": "1"}, 0, 1)
    db.append_sample({"__name__": "b", "y": "2"}, 100, 1)
    assert db.label_names() == ["__name__", "x", "y"]
    assert db.label_names("b") == ["__name__", "y"]
    assert db.label_values("__name__", start=50, end=150) == ["b"]


def test_snapshot_restore_is_isolated_from_later_writes() -> None:
    db = TSDB()
    db.append(0, [(_up("a", "1"), 1)])
    snap = db.snapshot()
    db.append(15, [(_up("a", "1"), 2), (_up("a", "9"), 3)])
    db.restore(snap)
    assert len(db) == 1
    assert db.select("up")[0].vs.tolist() == [1.0]
    db.append(15, [(_up("a", "1"), 5)])  # writes after restore must not corrupt the snapshot
    db.restore(snap)
    assert db.select("up")[0].vs.tolist() == [1.0]
    with pytest.raises(TypeError):
        db.restore(object())  # type: ignore[arg-type]


def test_append_refs_matches_append() -> None:
    a, b = TSDB(), TSDB()
    refs = np.array([b.ref(_up("a", str(i))) for i in range(3)])
    for t in (0, 15):
        a.append(t, [(_up("a", str(i)), t + i) for i in range(3)])
        b.append_refs(t, refs, [t + i for i in range(3)])
    assert [s.vs.tolist() for s in a.select("up")] == [s.vs.tolist() for s in b.select("up")]
    with pytest.raises(ValueError, match="unknown series ref"):
        b.append_refs(30, [99], [1.0])


@pytest.mark.parametrize("matchers", [
    [Matcher("__name__", "=", "up"), Matcher("job", "=~", "a|c"), Matcher("instance", "!=", "2")],
    [Matcher("__name__", "=", "up"), Matcher("job", "=", "")],  # series without a job
    [Matcher("job", "=~", "a|b")],  # no equality matcher to narrow the new series by
], ids=["equality and regex", "empty equality", "regex only"])
def test_a_repeated_selection_sees_series_added_in_between(matchers: list[Matcher]) -> None:
    """Selections are kept between queries; series created later (one, a few or many, after a clear
    too) must still be found, in label order, exactly as a fresh store finds them."""
    db = TSDB()
    added: list[dict[str, str]] = []

    def grow(labels: list[dict[str, str]]) -> None:
        for lb in labels:
            db.append_sample(lb, len(added), 1.0)
            added.append(lb)

    def fresh() -> list[tuple[tuple[str, str], ...]]:
        other = TSDB()
        for t, lb in enumerate(added):
            other.append_sample(lb, t, 1.0)
        return [s.labels for s in other.select(matchers)]

    grow([_up("c", "1"), _up("b", "1")])
    assert [s.labels for s in db.select(matchers)] == fresh()
    grow([_up("a", "3"), _up("a", "2"), {"__name__": "up", "instance": "1"}, _up("c", "0")])
    assert [s.labels for s in db.select(matchers)] == fresh()
    grow([_up("b", "0"), {"__name__": "down", "job": "a"}])
    assert [s.labels for s in db.select(matchers)] == fresh()
    grow([_up("a", str(i)) for i in range(10, 400)] + [{"__name__": "up", "instance": str(i)} for i in range(300)])
    assert [s.labels for s in db.select(matchers)] == fresh()
    assert len(fresh()) > 256  # more than are checked one by one
    grow([_up("b", "5"), _up("a", "250")])  # a few among many: placed one by one
    assert [s.labels for s in db.select(matchers)] == fresh()
    db.clear()
    added.clear()
    grow([_up("a", "9")])
    assert [s.labels for s in db.select(matchers)] == fresh()


def test_many_samples_at_once_are_stored_as_one_by_one_with_refusals_left_out() -> None:
    labels = (("__name__", "x"),)
    ts, vs = np.array([10_000, 20_000, 30_000, 40_000], dtype=np.int64), np.array([1.0, 2.0, 3.0, 4.0])
    one, many = TSDB(), TSDB()
    for db in (one, many):
        db.append_ms(labels, 20_000, 9.0)
    for t, v in zip(ts.tolist(), vs.tolist(), strict=True):
        with contextlib.suppress(ValueError):
            one.append_ms(labels, t, v)
    assert many.append_many_ms(labels, ts, vs) == 1  # 10 s is before the last sample
    assert [(s.ts.tolist(), s.vs.tolist()) for s in many.select([])] == [(s.ts.tolist(), s.vs.tolist()) for s in one.select([])]
    assert many.select([])[0].vs.tolist() == [2.0, 3.0, 4.0]  # the sample at the last time took the new value


def test_label_sets_share_their_pairs_and_the_shared_pairs_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new pod's series repeat names and values: one tuple per pair, so a set-up leaves the collector
    a few new pairs to walk rather than one per label of every new series."""
    from itbench_gym.backends.sim import tsdb

    a = make_labels({"__name__": "up", "job": "kubelet", "pod": "a"})
    b = make_labels([("pod", "b"), ("job", "kubelet"), ("__name__", "up")])
    assert a[0] is b[0] and a[1] is b[1] and a[2] != b[2]
    assert tsdb.items_key({"job": "kubelet", "__name__": "up"}) == (("job", "kubelet"), ("__name__", "up"))
    assert tsdb.items_key({"job": "kubelet"})[0] is a[1]
    monkeypatch.setattr(tsdb, "_PAIRS_KEPT", 10)
    for i in range(50):
        make_labels({"pod": f"p{i}"})
    assert len(tsdb._PAIRS) <= 11
