"""Binary operators: arithmetic, comparisons and set operators with Prometheus vector matching.

Matching is decided per step (series come and go), but all steps are computed together: for every
match signature the right-hand side is folded into one (value, present, source row) column set.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ..tsdb import Labels, format_labels
from .ast import COMPARISON_OPS, Binary
from .errors import PromQLError
from .values import Block, merge_same_labels, without_name

ARITH_OPS = frozenset({"+", "-", "*", "/", "%", "^", "atan2"})


def arith(op: str, a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    with np.errstate(all="ignore"):
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return np.true_divide(a, b)
        if op == "%":
            return np.fmod(a, b)
        if op == "^":
            return np.power(a, b)
        if op == "atan2":
            return np.arctan2(a, b)
    raise PromQLError(f"operator {op!r} not allowed for arithmetic", "bad_data")


def compare(op: str, a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    with np.errstate(all="ignore"):
        # np.equal is what ``a == b`` calls on arrays; the ufunc is typed, ndarray.__eq__ is not.
        if op == "==":
            return np.equal(a, b)
        if op == "!=":
            return np.not_equal(a, b)
        if op == ">":
            return a > b
        if op == "<":
            return a < b
        if op == ">=":
            return a >= b
        if op == "<=":
            return a <= b
    raise PromQLError(f"operator {op!r} is not a comparison", "bad_data")


def scalar_scalar(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op in COMPARISON_OPS:
        return compare(op, a, b).astype(np.float64)
    return arith(op, a, b)


def vector_scalar(op: str, block: Block, s: np.ndarray, swap: bool, return_bool: bool) -> Block:
    lhs, rhs = (s[None, :], block.values) if swap else (block.values, s[None, :])
    if op in COMPARISON_OPS:
        keep = compare(op, lhs, rhs)
        if return_bool:
            return Block(block.labels, keep.astype(np.float64), block.present, np.ones(len(block), dtype=bool))
        return Block(block.labels, block.values, block.present & keep, block.drop_name)
    return Block(block.labels, arith(op, lhs, rhs), block.present, np.ones(len(block), dtype=bool))


def _signature(lb: Labels, on: bool, names: list[str]) -> Labels:
    if on:
        keep = set(names)
        return tuple(p for p in lb if p[0] in keep)
    drop = set(names) | {"__name__"}
    return tuple(p for p in lb if p[0] not in drop)


def _sig_index(block: Block, on: bool, names: list[str]) -> tuple[dict[Labels, list[int]], list[Labels]]:
    groups: dict[Labels, list[int]] = {}
    sigs = []
    for i, lb in enumerate(block.labels):
        sig = _signature(lb, on, names)
        sigs.append(sig)
        groups.setdefault(sig, []).append(i)
    return groups, sigs


def set_op(node: Binary, lhs: Block, rhs: Block) -> Block:
    n = lhs.values.shape[1]
    r_groups, _ = _sig_index(rhs, node.on, node.matching)
    _, l_sigs = _sig_index(lhs, node.on, node.matching)
    r_any = {sig: rhs.present[rows].any(axis=0) for sig, rows in r_groups.items()}
    none = np.zeros(n, dtype=bool)
    if node.op in ("and", "unless"):
        match = np.array([r_any.get(sig, none) for sig in l_sigs], dtype=bool).reshape(len(lhs), n)
        present = lhs.present & (match if node.op == "and" else ~match)
        return Block(lhs.labels, lhs.values, present, lhs.drop_name).compact()
    l_groups, _ = _sig_index(lhs, node.on, node.matching)
    l_any = {sig: lhs.present[rows].any(axis=0) for sig, rows in l_groups.items()}
    _, r_sigs = _sig_index(rhs, node.on, node.matching)
    taken = np.array([l_any.get(sig, none) for sig in r_sigs], dtype=bool).reshape(len(rhs), n)
    right = Block(rhs.labels, rhs.values, rhs.present & ~taken, rhs.drop_name).compact()
    out = Block(
        lhs.labels + right.labels,
        np.concatenate([lhs.values, right.values]),
        np.concatenate([lhs.present, right.present]),
        np.concatenate([lhs.drop_name, right.drop_name]),
    )
    return merge_same_labels(out.compact())


def _fold_one_side(
    block: Block, groups: dict[Labels, list[int]], active: np.ndarray, one_side: str, on: bool, names: list[str]
) -> dict[Labels, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per signature: values, presence and source row of the 'one' side; duplicates are an error."""
    out = {}
    for sig, rows in groups.items():
        pres = block.present[rows]
        if len(rows) > 1:
            dup = (pres.sum(axis=0) > 1) & active
            if dup.any():
                step = int(np.argmax(dup))
                present_rows = [rows[i] for i in range(len(rows)) if pres[i, step]]
                a, b = (format_labels(block.labels[r]) for r in present_rows[:2])
                a, b = sorted([a, b])
                matched = format_labels(_match_labels(block.labels[present_rows[1]], on, names))
                raise PromQLError(
                    f"found duplicate series for the match group {matched} on the {one_side} hand-side of the "
                    f"operation: [{a}, {b}];many-to-many matching not allowed: matching labels must be unique on one side"
                )
        src = np.where(pres.any(axis=0), np.asarray(rows)[np.argmax(pres, axis=0)], -1)
        vals = block.values[np.maximum(src, 0), np.arange(block.values.shape[1])]
        out[sig] = (vals, src >= 0, src)
    return out


def _match_labels(lb: Labels, on: bool, names: list[str]) -> Labels:
    if on:
        keep = set(names)
        return tuple(p for p in lb if p[0] in keep)
    drop = set(names) | {"__name__"}
    return tuple(p for p in lb if p[0] not in drop)


def _result_labels(lb: Labels, node: Binary, delayed: bool, rhs_lb: Labels | None) -> Labels:
    out = dict(without_name(lb) if node.op in ARITH_OPS or (node.return_bool and not delayed) else lb)
    if node.card == "one-to-one":
        if node.on:
            out = {k: v for k, v in out.items() if k in set(node.matching)}
        else:
            for k in node.matching:
                out.pop(k, None)
    if rhs_lb is not None:
        rd = dict(rhs_lb)
        for k in node.include:
            if rd.get(k, ""):
                out[k] = rd[k]
            else:
                out.pop(k, None)
    return tuple(sorted(out.items()))


def vector_vector(node: Binary, lhs: Block, rhs: Block, delayed: bool) -> Block:
    """Arithmetic or comparison between two instant vectors."""
    n = lhs.values.shape[1]
    swapped = node.card == "one-to-many"
    many, one = (rhs, lhs) if swapped else (lhs, rhs)
    one_groups, _ = _sig_index(one, node.on, node.matching)
    _, many_sigs = _sig_index(many, node.on, node.matching)
    active = np.asarray(many.present.any(axis=0) & one.present.any(axis=0))
    folded = _fold_one_side(one, one_groups, active, "left" if swapped else "right", node.on, node.matching)
    labels: list[Labels] = []
    values: list[np.ndarray] = []
    present: list[np.ndarray] = []
    none = (np.zeros(n), np.zeros(n, dtype=bool), np.full(n, -1))
    if node.card == "one-to-one":
        matched_count: dict[Labels, np.ndarray] = {}
        for i, sig in enumerate(many_sigs):
            ov, op_, _ = folded.get(sig, none)
            hit = many.present[i] & op_
            matched_count[sig] = matched_count.get(sig, np.zeros(n, dtype=np.int64)) + hit
            labels.append(_result_labels(many.labels[i], node, delayed, None))
            values.append(ov)
            present.append(hit)
        for cnt in matched_count.values():
            if (cnt > 1).any():
                raise PromQLError("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)")
        rows_many = np.arange(len(many))
    else:
        rows_many_l = []
        for i, sig in enumerate(many_sigs):
            for j in one_groups.get(sig, []):
                hit = many.present[i] & one.present[j]
                if not hit.any():
                    continue
                labels.append(_result_labels(many.labels[i], node, delayed, one.labels[j]))
                values.append(one.values[j])
                present.append(hit)
                rows_many_l.append(i)
        rows_many = np.asarray(rows_many_l, dtype=np.int64)
        seen: dict[tuple[Labels, Labels], np.ndarray] = {}
        for k, lb in enumerate(labels):
            key = (many_sigs[rows_many[k]], lb)
            prev = seen.get(key)
            if prev is not None and (prev & present[k]).any():
                raise PromQLError("multiple matches for labels: grouping labels must ensure unique matches")
            seen[key] = present[k] if prev is None else prev | present[k]
    if not labels:
        return Block.empty(n)
    many_v = many.values[rows_many]
    other_v = np.array(values)
    pres = np.array(present)
    lv, rv = (other_v, many_v) if swapped else (many_v, other_v)
    if node.op in COMPARISON_OPS:
        keep = compare(node.op, lv, rv)
        if node.return_bool:
            vals = keep.astype(np.float64)
        else:
            vals = lv
            pres = pres & keep
    else:
        vals = arith(node.op, lv, rv)
    drop = np.full(len(labels), bool(node.return_bool))
    return merge_same_labels(Block(labels, vals, pres, drop).compact())
