"""Scrapes stored as block rows read back exactly as scrapes stored sample by sample.

The TSDB keeps a scrape of unchanged series as one row of a block and lets each series read its rows
when something reads or writes it (``tsdb._Block``). A store fed the same scrapes as plain label/value
pairs takes the per-sample path; both must hold the same samples — values bit for bit, staleness
markers included — through layout changes, direct writes, snapshots, restores and the store's bound on
rows kept in closed blocks.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from itbench_gym.backends.sim.tsdb import TSDB, SampleBatch, SeriesRef, TSDBSnapshot, is_stale, make_labels

JOBS = ("kubelet", "kube-state-metrics", "node-exporter")


def _contents(db: TSDB) -> dict[tuple[tuple[str, str], ...], tuple[list[int], bytes]]:
    """Every series' timestamps and value bits (NaN payloads included)."""
    return {s.labels: (s.ts.tolist(), s.vs.tobytes()) for s in db.select([])}


class _Pair:
    """The same writes to a store fed batches (blocks) and one fed label/value pairs (sample by sample)."""

    def __init__(self) -> None:
        self.blocks, self.samples = TSDB(), TSDB()
        self.refs: dict[int, SeriesRef] = {}

    def scrape(self, t: float, members: list[int], values: list[float], jobs: tuple[str, ...]) -> None:
        batch = SampleBatch(self.blocks)
        for i, v in zip(members, values, strict=True):
            ref = self.refs.setdefault(i, SeriesRef(make_labels(_labels(i))))
            batch.add(ref, v)
        self.blocks.append(t, batch, jobs)
        self.samples.append(t, [(_labels(i), v) for i, v in zip(members, values, strict=True)], jobs)

    def direct(self, i: int, t_ms: int, v: float) -> None:
        for db in (self.blocks, self.samples):
            db.append_ms(make_labels(_labels(i)), t_ms, v)

    def snapshot(self, *, compact: bool = False) -> tuple[TSDBSnapshot, TSDBSnapshot]:
        return self.blocks.snapshot(compact=compact), self.samples.snapshot()

    def restore(self, snaps: tuple[TSDBSnapshot, TSDBSnapshot]) -> None:
        self.blocks.restore(snaps[0])
        self.samples.restore(snaps[1])
        self.refs.clear()  # handles of the store before the restore: the batch falls back to labels

    def assert_equal(self) -> None:
        assert _contents(self.blocks) == _contents(self.samples)
        # the engine's flat read of the same window: the series one after the other, with their offsets
        window = (15_000, 10**12)
        raw = self.blocks.select_raw([], *window)
        labels, ts, vs, starts = self.blocks.select_flat([], *window)
        assert labels == [lb for lb, _, _ in raw] and starts.tolist() == np.cumsum([0, *(len(t) for _, t, _ in raw)]).tolist()
        assert ts.tolist() == [int(x) for _, t, _ in raw for x in t] and vs.tobytes() == b"".join(v.tobytes() for _, _, v in raw)
        for job in JOBS:  # through the label index, which snapshots share
            assert [s.labels for s in self.blocks.select({"job": job})] == [s.labels for s in self.samples.select({"job": job})]


def _labels(i: int) -> dict[str, str]:
    return {"__name__": f"metric_{i % 5}", "job": JOBS[i % len(JOBS)], "series": str(i)}


@pytest.mark.parametrize("seed", range(6))
def test_block_rows_read_back_as_samples_written_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    pair = _Pair()
    members = list(range(40))
    snaps: list[tuple[float, tuple[TSDBSnapshot, TSDBSnapshot]]] = []
    t = 0.0
    for _ in range(160):  # more rows than closed blocks keep, so the bound is crossed
        t += 30.0
        roll = rng.random()
        if roll < 0.15:  # a series goes (stale next scrape) or a new one comes
            if rng.random() < 0.5 and len(members) > 5:
                members.remove(rng.choice(members))
            else:
                members.append(max(members) + 1)
        elif roll < 0.2:  # a rule output, or a test, writes a scraped series directly
            pair.direct(rng.choice(members), int(t * 1000) - 5_000, rng.random())
        elif roll < 0.25:
            snaps.append((t, pair.snapshot(compact=len(snaps) % 2 == 1)))  # every other one compact
        elif roll < 0.28 and snaps:
            t, snap = rng.choice(snaps)
            pair.restore(snap)
            pair.assert_equal()
            t += 30.0
        values = [rng.choice([rng.random(), float(rng.randint(0, 9)), float("nan"), float("inf")]) for _ in members]
        pair.scrape(t, list(members), values, JOBS)
        if rng.random() < 0.2:  # a query reads some series between scrapes: one metric's, or a job's, or all
            pair.blocks.select(rng.choice([{"__name__": f"metric_{rng.randrange(5)}"}, {"job": rng.choice(JOBS)}, {}]))
    pair.assert_equal()
    values = np.concatenate([np.frombuffer(bits) for _ts, bits in _contents(pair.blocks).values()])
    assert is_stale(values).any() and (np.isnan(values) & ~is_stale(values)).any()  # markers and plain NaNs compared


def test_a_snapshot_shares_closed_blocks_and_each_restore_goes_its_own_way() -> None:
    pair = _Pair()
    for k in range(10):
        pair.scrape(30.0 * k, list(range(20)), [float(k)] * 20, JOBS)
    blocks_snap, samples_snap = pair.snapshot()
    assert blocks_snap.blocks, "the rows of a scrape layout stay in blocks the snapshot shares"
    for fork in range(2):
        pair.restore((blocks_snap, samples_snap))
        for k in range(10, 14):
            pair.scrape(30.0 * k, list(range(20)), [100.0 * fork + k] * 20, JOBS)
        pair.assert_equal()
    pair.restore((blocks_snap, samples_snap))
    pair.assert_equal()


def test_a_compact_snapshot_holds_every_row_in_its_series_and_restores_like_any_other() -> None:
    pair = _Pair()
    for k in range(40):  # a closed block and a live one
        pair.scrape(30.0 * k, list(range(20 + k % 3)), [float(k)] * (20 + k % 3), JOBS)
    snaps = pair.snapshot(compact=True)
    assert not snaps[0].blocks, "a compact snapshot keeps no block: each series holds its rows"
    assert all(len(s.ts) == s.n for s in snaps[0].series), "its arrays cut to size"
    for fork in range(2):
        pair.restore(snaps)
        pair.assert_equal()
        for k in range(40, 44):
            pair.scrape(30.0 * k, list(range(22)), [100.0 * fork + k] * 22, JOBS)
        pair.direct(3, 44 * 30_000, -1.0)
        pair.assert_equal()


def test_a_restored_series_copies_its_shared_history_with_room_for_a_few_samples_only() -> None:
    """An episode adds far fewer samples to a shared baseline's series than the history they share:
    doubling every copied history would double the memory of every env on that baseline."""
    pair = _Pair()
    for k in range(100):
        pair.scrape(30.0 * k, list(range(20)), [float(k)] * 20, JOBS)
    snaps = pair.snapshot(compact=True)
    pair.restore(snaps)
    for k in range(100, 140):  # a block of rows closes
        pair.scrape(30.0 * k, list(range(20)), [float(k)] * 20, JOBS)
    pair.assert_equal()  # reads every series: each takes the closed block's rows into a copy of its arrays
    copies = [s for s in pair.blocks._series if s.n > 100]
    assert len(copies) == 20 and all(len(s.ts) < s.n + 20 for s in copies)
    assert all(len(s.ts) == 100 for s in snaps[0].series), "the snapshot's arrays are left as they were"


@pytest.mark.parametrize("members", [[0, 1], [0, 1, 2]], ids=["same series", "a new series too"])
def test_a_batch_out_of_order_is_refused_as_a_sample_would_be(members: list[int]) -> None:
    db = TSDB()
    refs = [SeriesRef(make_labels(_labels(i))) for i in range(3)]

    def scrape(t: float, which: list[int]) -> None:
        batch = SampleBatch(db)
        for i in which:
            batch.add(refs[i], float(i))
        db.append(t, batch, JOBS)

    for k in range(3):
        scrape(30.0 * k, [0, 1])
    with pytest.raises(ValueError, match="out-of-order"):
        scrape(15.0, members)
