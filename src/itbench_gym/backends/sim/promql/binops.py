"""Binary operators: arithmetic, comparisons and set operators with Prometheus vector matching.

Matching is decided per step (series come and go), but all steps are computed together: for every
match signature the right-hand side is folded into one (value, present, source row) column set.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from ..tsdb import Labels, format_labels
from .ast import COMPARISON_OPS, Binary
from .errors import PromQLError
from .values import LABEL_CACHE_SIZE, Block, merge_same_labels, without_name

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


@functools.lru_cache(maxsize=LABEL_CACHE_SIZE)
def _signature(lb: Labels, on: bool, names: tuple[str, ...]) -> Labels:
    """The labels a series is matched on; cached, as rules match the same series at every evaluation."""
    if on:
        keep = set(names)
        return tuple(p for p in lb if p[0] in keep)
    drop = set(names) | {"__name__"}
    return tuple(p for p in lb if p[0] not in drop)


class _Signatures:
    """A block's match signatures numbered in order of first appearance: ``ids[row]`` is its number."""

    def __init__(self, block: Block, on: bool, names: list[str]) -> None:
        self.index: dict[Labels, int] = {}
        by = tuple(names)
        self.ids = np.array([self.index.setdefault(_signature(lb, on, by), len(self.index)) for lb in block.labels],
                            dtype=np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, other: _Signatures) -> np.ndarray:
        """For each of ``other``'s signature numbers, this block's number of the same signature (-1: none)."""
        return np.array([self.index.get(sig, -1) for sig in other.index], dtype=np.int64)

    def any_present(self, block: Block) -> np.ndarray:
        """(signatures, steps): whether any series of the signature is present at the step."""
        out = np.zeros((len(self), block.values.shape[1]), dtype=bool)
        np.logical_or.at(out, self.ids, block.present)
        return out


def _translate(ids: np.ndarray, table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row of a block (its signature numbers ``ids``): the row of ``rows`` (one per signature of
    another block) that ``table`` maps its signature to, zeros (False) where it maps to none (-1)."""
    padded = np.concatenate([rows, np.zeros((1, rows.shape[1]), dtype=rows.dtype)])
    mapped = table[ids]
    return padded[np.where(mapped >= 0, mapped, len(rows))]


def set_op(node: Binary, lhs: Block, rhs: Block) -> Block:
    l_sigs, r_sigs = _Signatures(lhs, node.on, node.matching), _Signatures(rhs, node.on, node.matching)
    if node.op in ("and", "unless"):
        match = _translate(l_sigs.ids, r_sigs.lookup(l_sigs), r_sigs.any_present(rhs))
        present = lhs.present & (match if node.op == "and" else ~match)
        return Block(lhs.labels, lhs.values, present, lhs.drop_name).compact()
    taken = _translate(r_sigs.ids, l_sigs.lookup(r_sigs), l_sigs.any_present(lhs))
    right = Block(rhs.labels, rhs.values, rhs.present & ~taken, rhs.drop_name).compact()
    out = Block(
        lhs.labels + right.labels,
        np.concatenate([lhs.values, right.values]),
        np.concatenate([lhs.present, right.present]),
        np.concatenate([lhs.drop_name, right.drop_name]),
    )
    return merge_same_labels(out.compact())


def _fold_one_side(
    block: Block, sigs: _Signatures, active: np.ndarray, one_side: str, on: bool, names: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Per signature and step: the value and presence of the 'one' side's series (the first present
    in input order); two present at an active step are an error."""
    rows, n = block.values.shape
    counts = np.zeros((len(sigs), n), dtype=np.int64)
    np.add.at(counts, sigs.ids, block.present)
    if ((counts > 1) & active).any():
        _raise_duplicate(block, sigs, active, one_side, on, names)
    src = np.full((len(sigs), n), rows, dtype=np.int64)
    np.minimum.at(src, sigs.ids, np.where(block.present, np.arange(rows)[:, None], rows))
    found = src < rows
    values = block.values[np.where(found, src, 0), np.arange(n)] if rows else np.zeros((len(sigs), n))
    return values, found


def _raise_duplicate(block: Block, sigs: _Signatures, active: np.ndarray, one_side: str, on: bool, names: list[str]) -> None:
    """The error of the first signature (in order of appearance) with two series at an active step."""
    for number in range(len(sigs)):
        rows = np.nonzero(sigs.ids == number)[0]
        dup = (block.present[rows].sum(axis=0) > 1) & active
        if dup.any():
            step = int(np.argmax(dup))
            present_rows = [int(r) for r in rows if block.present[r, step]]
            a, b = sorted(format_labels(block.labels[r]) for r in present_rows[:2])
            matched = format_labels(_signature(block.labels[present_rows[1]], on, tuple(names)))
            raise PromQLError(
                f"found duplicate series for the match group {matched} on the {one_side} hand-side of the "
                f"operation: [{a}, {b}];many-to-many matching not allowed: matching labels must be unique on one side"
            )


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
    one_sigs, many_sigs = _Signatures(one, node.on, node.matching), _Signatures(many, node.on, node.matching)
    active = np.asarray(many.present.any(axis=0) & one.present.any(axis=0))
    folded, found = _fold_one_side(one, one_sigs, active, "left" if swapped else "right", node.on, node.matching)
    table = one_sigs.lookup(many_sigs)
    if node.card == "one-to-one":
        hit = many.present & _translate(many_sigs.ids, table, found)
        matched = np.zeros((len(many_sigs), n), dtype=np.int64)
        np.add.at(matched, many_sigs.ids, hit)
        if (matched > 1).any():
            raise PromQLError("multiple matches for labels: many-to-one matching must be explicit (group_left/group_right)")
        other_v = _translate(many_sigs.ids, table, folded)
        labels = [_result_labels(lb, node, delayed, None) for lb in many.labels]
        many_v, pres = many.values, hit
    else:
        labels, values, present, rows_many_l = [], [], [], []
        one_rows: dict[int, list[int]] = {}
        for j, number in enumerate(one_sigs.ids.tolist()):
            one_rows.setdefault(number, []).append(j)
        for i, number in enumerate(many_sigs.ids.tolist()):
            for j in one_rows.get(int(table[number]), []):
                row_hit = many.present[i] & one.present[j]
                if not row_hit.any():
                    continue
                labels.append(_result_labels(many.labels[i], node, delayed, one.labels[j]))
                values.append(one.values[j])
                present.append(row_hit)
                rows_many_l.append(i)
        seen: dict[tuple[int, Labels], np.ndarray] = {}
        for k, lb in enumerate(labels):
            key = (int(many_sigs.ids[rows_many_l[k]]), lb)
            prev = seen.get(key)
            if prev is not None and (prev & present[k]).any():
                raise PromQLError("multiple matches for labels: grouping labels must ensure unique matches")
            seen[key] = present[k] if prev is None else prev | present[k]
        if not labels:
            return Block.empty(n)
        many_v = many.values[np.asarray(rows_many_l, dtype=np.int64)]
        other_v, pres = np.array(values), np.array(present)
    if not labels:
        return Block.empty(n)
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
