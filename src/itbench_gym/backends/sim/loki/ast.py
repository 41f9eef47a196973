"""LogQL syntax tree: what the parser produces and the evaluator walks.

Nodes are plain frozen dataclasses; compiled regular expressions are built once at parse time so
a query that cannot compile fails as a parse error, like Loki's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from itbench_gym.lang.regex import Regex

#: Label matcher and line filter operators.
EQ, NEQ, RE, NRE = "=", "!=", "=~", "!~"
#: Line filter operators.
PIPE_EXACT, PIPE_MATCH, PIPE_PATTERN, NOT_PATTERN = "|=", "|~", "|>", "!>"
COMPARISONS = ("==", "!=", ">", ">=", "<", "<=")


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str
    value: str
    regex: Regex | None = field(default=None, compare=False)

    def matches(self, value: str) -> bool:
        if self.op == EQ:
            return value == self.value
        if self.op == NEQ:
            return value != self.value
        assert self.regex is not None
        hit = self.regex.matches(value)
        return hit if self.op == RE else not hit

    def __str__(self) -> str:
        return f"{self.name}{self.op}{_quote(self.value)}"


@dataclass(frozen=True)
class LineFilter:
    """``op`` applied to ``values`` (more than one when chained with ``or``)."""

    op: str
    values: tuple[str, ...]
    #: Compiled regexes for |~ / !~, or pattern matchers for |> / !>.
    compiled: tuple[object, ...] = field(default=(), compare=False)
    ip: bool = False


@dataclass(frozen=True)
class LabelCompare:
    """``name op value``; ``kind`` is string, number, duration, bytes or ip."""

    name: str
    op: str
    kind: str
    value: object
    regex: Regex | None = field(default=None, compare=False)


@dataclass(frozen=True)
class LabelAnd:
    left: LabelFilter
    right: LabelFilter


@dataclass(frozen=True)
class LabelOr:
    left: LabelFilter
    right: LabelFilter


LabelFilter = LabelCompare | LabelAnd | LabelOr


@dataclass(frozen=True)
class LabelFilterStage:
    filter: LabelFilter


@dataclass(frozen=True)
class Extraction:
    """``label="expression"`` for json/logfmt parsers with parameters."""

    label: str
    path: str


@dataclass(frozen=True)
class ParserStage:
    """``json``, ``logfmt``, ``regexp``, ``pattern`` or ``unpack``."""

    kind: str
    argument: str = ""
    extractions: tuple[Extraction, ...] = ()
    flags: tuple[str, ...] = ()
    compiled: object = field(default=None, compare=False)


@dataclass(frozen=True)
class LineFormat:
    template: str
    compiled: object = field(default=None, compare=False)


@dataclass(frozen=True)
class LabelFormatItem:
    target: str
    #: Either a source label to rename (``is_template`` False) or a template.
    source: str
    is_template: bool
    compiled: object = field(default=None, compare=False)


@dataclass(frozen=True)
class LabelFormat:
    items: tuple[LabelFormatItem, ...]


@dataclass(frozen=True)
class NamedMatcher:
    """A bare label name, or a matcher, in ``drop`` / ``keep``."""

    name: str
    matcher: Matcher | None = None


@dataclass(frozen=True)
class DropKeep:
    keep: bool
    names: tuple[NamedMatcher, ...]


@dataclass(frozen=True)
class Decolorize:
    pass


Stage = LineFilter | ParserStage | LabelFilterStage | LineFormat | LabelFormat | DropKeep | Decolorize


@dataclass(frozen=True)
class LogSelector:
    """``{matchers} stages...``: a log query."""

    matchers: tuple[Matcher, ...]
    stages: tuple[Stage, ...] = ()


@dataclass(frozen=True)
class Unwrap:
    label: str
    conversion: str = ""
    post_filters: tuple[LabelFilter, ...] = ()


@dataclass(frozen=True)
class LogRange:
    selector: LogSelector
    range_s: float
    offset_s: float = 0.0
    unwrap: Unwrap | None = None


@dataclass(frozen=True)
class Grouping:
    without: bool
    labels: tuple[str, ...]


@dataclass(frozen=True)
class RangeAggregation:
    op: str
    log_range: LogRange
    param: float | None = None
    grouping: Grouping | None = None


@dataclass(frozen=True)
class VectorAggregation:
    op: str
    expr: MetricExpr
    grouping: Grouping | None = None
    param: float | None = None


@dataclass(frozen=True)
class VectorMatching:
    on: bool = False
    labels: tuple[str, ...] = ()
    card: str = "one-to-one"
    include: tuple[str, ...] = ()


@dataclass(frozen=True)
class BinaryOp:
    op: str
    lhs: MetricExpr
    rhs: MetricExpr
    return_bool: bool = False
    matching: VectorMatching = VectorMatching()


@dataclass(frozen=True)
class Literal:
    value: float


@dataclass(frozen=True)
class VectorLiteral:
    """``vector(x)``: one series without labels."""

    value: float


@dataclass(frozen=True)
class LabelReplace:
    expr: MetricExpr
    dst: str
    replacement: str
    src: str
    regex: Regex = field(compare=False)


MetricExpr = RangeAggregation | VectorAggregation | BinaryOp | Literal | VectorLiteral | LabelReplace
Expr = LogSelector | MetricExpr

RANGE_OPS = frozenset({
    "count_over_time", "rate", "rate_counter", "bytes_over_time", "bytes_rate", "avg_over_time",
    "sum_over_time", "min_over_time", "max_over_time", "stdvar_over_time", "stddev_over_time",
    "quantile_over_time", "first_over_time", "last_over_time", "absent_over_time",
})
#: Range aggregations over log lines themselves; every other one needs ``| unwrap``.
LINE_RANGE_OPS = frozenset({"count_over_time", "rate", "bytes_over_time", "bytes_rate", "absent_over_time"})
VECTOR_OPS = frozenset({"sum", "avg", "min", "max", "count", "stddev", "stdvar", "bottomk", "topk", "sort", "sort_desc"})


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
