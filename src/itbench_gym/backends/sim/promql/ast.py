"""PromQL syntax tree: ``promql_parser`` output converted once into plain Python nodes.

The parser's nodes are Rust objects whose attribute reads allocate, and reading a negative ``@``
timestamp panics; converting once gives cheap, hashable-by-identity nodes with times in integer
milliseconds, result types, and approximate source positions for annotations.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import promql_parser

from ..tsdb import Matcher, convert_matchers, selector_matchers
from .errors import PromQLError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(eq=False)
class Node(ABC):
    pos: int = field(default=0, init=False)

    @property
    @abstractmethod
    def type(self) -> str:
        """The PromQL value type: "vector", "scalar", "matrix" or "string"."""


@dataclass(eq=False)
class At:
    kind: str  # "at" | "start" | "end"
    ms: int = 0


@dataclass(eq=False)
class NumberLit(Node):
    val: float

    @property
    def type(self) -> str:
        return "scalar"


@dataclass(eq=False)
class StringLit(Node):
    val: str

    @property
    def type(self) -> str:
        return "string"


@dataclass(eq=False)
class VectorSel(Node):
    name: str | None
    matchers: list[Matcher]
    or_groups: list[list[Matcher]]
    offset: int
    at: At | None

    @property
    def type(self) -> str:
        return "vector"

    def matcher_sets(self) -> list[list[Matcher]]:
        """One matcher list per ``or`` alternative (a single list when there is no ``or``)."""
        if not self.or_groups:
            return [self.matchers]
        base = [Matcher("__name__", "=", self.name)] if self.name else []
        return [base + g for g in self.or_groups]


@dataclass(eq=False)
class MatrixSel(Node):
    vs: VectorSel
    range: int

    @property
    def type(self) -> str:
        return "matrix"


@dataclass(eq=False)
class Subquery(Node):
    expr: Node
    range: int
    step: int | None
    offset: int
    at: At | None

    @property
    def type(self) -> str:
        return "matrix"


@dataclass(eq=False)
class Call(Node):
    name: str
    args: list[Node]
    return_type: str

    @property
    def type(self) -> str:
        return self.return_type


@dataclass(eq=False)
class Aggregate(Node):
    op: str
    expr: Node
    param: Node | None
    grouping: list[str]
    without: bool

    @property
    def type(self) -> str:
        return "vector"


@dataclass(eq=False)
class Binary(Node):
    op: str
    lhs: Node
    rhs: Node
    card: str  # "one-to-one" | "many-to-one" | "one-to-many" | "many-to-many"
    on: bool
    matching: list[str]
    include: list[str]
    return_bool: bool
    fill_lhs: float | None
    fill_rhs: float | None

    @property
    def type(self) -> str:
        if self.lhs.type == "scalar" and self.rhs.type == "scalar":
            return "scalar"
        return "vector"


@dataclass(eq=False)
class Unary(Node):
    op: str
    expr: Node

    @property
    def type(self) -> str:
        return self.expr.type


@dataclass(eq=False)
class Paren(Node):
    expr: Node

    @property
    def type(self) -> str:
        return self.expr.type


COMPARISON_OPS = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPS = frozenset({"and", "or", "unless"})

_VT = {"Vector": "vector", "Scalar": "scalar", "Matrix": "matrix", "String": "string"}
_CARD = {
    "OneToOne": "one-to-one",
    "ManyToOne": "many-to-one",
    "OneToMany": "one-to-many",
    "ManyToMany": "many-to-many",
}
_SYSTEM_TIME = re.compile(r"tv_sec:\s*(-?\d+),\s*tv_nsec:\s*(\d+)")


def _name(enum_value: object) -> str:
    """Member name of a ``promql_parser`` enum (they expose no ``.name``)."""
    return str(enum_value).rsplit(".", 1)[-1]


def _ms(td: timedelta | None) -> int:
    if td is None:
        return 0
    return (td.days * 86_400 + td.seconds) * 1000 + td.microseconds // 1000


def _at(owner: object) -> At | None:
    mod = owner.at  # type: ignore[attr-defined]
    if mod is None:
        return None
    kind = _name(mod.type)
    if kind == "Start":
        return At("start")
    if kind == "End":
        return At("end")
    try:
        dt = mod.at
        return At("at", (dt - _EPOCH) // timedelta(milliseconds=1))
    except BaseException:  # the binding panics on times before 1970; read them from the debug form
        found = _SYSTEM_TIME.findall(repr(owner))
        if not found:
            raise PromQLError("cannot read the @ timestamp", "bad_data") from None
        sec, nsec = found[-1]
        return At("at", int(sec) * 1000 + int(nsec) // 1_000_000)


def convert(expr: object) -> Node:
    """Convert a ``promql_parser`` expression into :class:`Node` objects."""
    p = promql_parser
    if isinstance(expr, p.NumberLiteral):
        return NumberLit(float(expr.val))
    if isinstance(expr, p.StringLiteral):
        return StringLit(expr.val)
    if isinstance(expr, p.VectorSelector):
        ms = selector_matchers(expr)
        groups = [convert_matchers(grp) for grp in expr.matchers.or_matchers]
        return VectorSel(expr.name, ms, groups, _ms(expr.offset), _at(expr))
    if isinstance(expr, p.MatrixSelector):
        vs = convert(expr.vector_selector)
        assert isinstance(vs, VectorSel)
        return MatrixSel(vs, _ms(expr.range))
    if isinstance(expr, p.SubqueryExpr):
        step = _ms(expr.step) if expr.step is not None else None
        return Subquery(convert(expr.expr), _ms(expr.range), step, _ms(expr.offset), _at(expr))
    if isinstance(expr, p.Call):
        return Call(expr.func.name, [convert(a) for a in expr.args], _VT[_name(expr.func.return_type)])
    if isinstance(expr, p.AggregateExpr):
        amod = expr.modifier
        grouping = list(amod.labels) if amod is not None else []
        without = amod is not None and _name(amod.type) == "Without"
        param = convert(expr.param) if expr.param is not None else None
        return Aggregate(str(expr.op), convert(expr.expr), param, grouping, without)
    if isinstance(expr, p.BinaryExpr):
        op = str(expr.op)
        mod = expr.modifier
        lhs, rhs = convert(expr.lhs), convert(expr.rhs)
        card, on, matching, include, rb = "one-to-one", False, [], [], False
        fill_l = fill_r = None
        if mod is not None:
            card = _CARD[_name(mod.card)]
            rb = bool(mod.return_bool)
            if mod.matching is not None:
                on = _name(mod.matching.type) == "Include"
                matching = list(mod.matching.labels)
            include = list(mod.group_labels or [])
            fv = mod.fill_values
            if fv is not None:
                fill_l, fill_r = fv.lhs, fv.rhs
        if op in SET_OPS:
            card = "many-to-many"
        return Binary(op, lhs, rhs, card, on, matching, include, rb, fill_l, fill_r)
    if isinstance(expr, p.UnaryExpr):
        return Unary("-", convert(expr.expr))
    if isinstance(expr, p.ParenExpr):
        return Paren(convert(expr.expr))
    raise PromQLError(f"unsupported expression type {type(expr).__name__}", "bad_data")


def children(node: Node) -> list[Node]:
    if isinstance(node, MatrixSel):
        return [node.vs]
    if isinstance(node, (Subquery, Paren, Unary)):
        return [node.expr]
    if isinstance(node, Call):
        return list(node.args)
    if isinstance(node, Aggregate):
        return [node.param, node.expr] if node.param is not None else [node.expr]
    if isinstance(node, Binary):
        return [node.lhs, node.rhs]
    return []


def walk(node: Node) -> list[Node]:
    out = [node]
    for c in children(node):
        out.extend(walk(c))
    return out


_NUMBER = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[iI][nN][fF]|[nN][aA][nN])")


def assign_positions(node: Node, query: str) -> None:
    """Best-effort start offsets of nodes in ``query`` (the parser does not expose spans)."""

    def anchor(n: Node, cursor: int) -> re.Pattern[str] | None:
        if isinstance(n, VectorSel):
            return re.compile(re.escape(n.name) if n.name else r"\{")
        if isinstance(n, Call):
            return re.compile(rf"\b{re.escape(n.name)}\s*\(")
        if isinstance(n, Aggregate):
            return re.compile(rf"\b{re.escape(n.op)}\b")
        if isinstance(n, Paren):
            return re.compile(r"\(")
        if isinstance(n, Unary):
            return re.compile(r"[-+]")
        if isinstance(n, StringLit):
            return re.compile(r"[\"'`]")
        if isinstance(n, NumberLit):
            return _NUMBER
        return None

    def visit(n: Node, cursor: int) -> int:
        pat = anchor(n, cursor)
        if pat is not None:
            m = pat.search(query, cursor)
            n.pos = m.start() if m else cursor
        kids = children(n)
        if isinstance(n, (MatrixSel, Subquery, Binary)) or pat is None:
            # Their text starts with their first child.
            end = cursor
            for i, k in enumerate(kids):
                end = visit(k, cursor if i == 0 else end)
                if i == 0:
                    n.pos = k.pos
            return end
        end = n.pos + 1
        for k in kids:
            end = visit(k, end)
        return max(end, n.pos + 1)

    visit(node, 0)


def line_col(query: str, pos: int) -> str:
    """Render a position like Prometheus' ``PositionRange.StartPosInput``: ``line:column``."""
    before = query[:pos]
    line = before.count("\n") + 1
    col = pos - (before.rfind("\n") + 1) + 1
    return f"{line}:{col}"
