"""The twin Loki's per-query limits, their values, and the errors Loki answers when one is hit.

Loki's own limits keep their defaults and messages (``max_entries_limit_per_query``,
``max_query_series``, ``max_query_length``, ``max_streams_matchers_per_query``, ``query_timeout``).
The twin adds bounds Loki does not need in Go but a shared Python process does: the query's text
and shape (see :mod:`itbench_gym.backends.sim.promql.limits`), the output of ``line_format`` and
``label_format`` templates, and the size of one response.
"""

from __future__ import annotations

from dataclasses import dataclass

from itbench_gym.backends.sim.promql.limits import Deadline

from . import ast as A
from .errors import LogQLError

#: ``max_entries_limit_per_query`` (Loki's default).
MAX_ENTRIES = 5000
#: ``max_query_series`` (Loki's default).
MAX_SERIES = 500
#: ``max_query_length`` (Loki's default, 721h).
MAX_QUERY_LENGTH_S = 721 * 3600.0
#: ``max_streams_matchers_per_query`` (Loki's default).
MAX_STREAM_MATCHERS = 1000
#: Points per series of a range query (Loki's and Prometheus' 11,000).
MAX_POINTS = 11_000
#: The twin's ``query_timeout`` (Loki's default is 1m; the twin answers well within the tools' 30 s).
QUERY_TIMEOUT_S = 10.0
#: Longest value one ``line_format``/``label_format`` template may render (Loki's default ``max_line_size``).
MAX_TEMPLATE_OUTPUT = 256 * 1024
#: Characters all templates of one query may render together.
MAX_RENDERED_PER_QUERY = 64 * 1024 * 1024
#: Largest JSON answer served.
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
#: Deepest nesting of parentheses and ``if`` blocks inside one template.
MAX_TEMPLATE_DEPTH = 50

TIMEOUT_MESSAGE = ("request timed out, decrease the duration of the request or add more label matchers "
                   "(prefer exact match over regex match) to reduce the amount of data processed")


class LimitError(LogQLError):
    """A query stopped by a limit; ``status`` is the HTTP status Loki answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def series_limit_error() -> LimitError:
    return LimitError(f"maximum number of series ({MAX_SERIES}) reached for a single query; consider reducing query "
                      "cardinality by adding more specific stream selectors, reducing the time range, or aggregating "
                      "results with functions like sum(), count() or topk()")


def timeout_error() -> LimitError:
    return LimitError(TIMEOUT_MESSAGE, status=504)


def response_too_large(size: int) -> LimitError:
    """Loki's answer when a result exceeds the message size it may send (413)."""
    return LimitError(f"response larger than the max message size ({size} vs {MAX_RESPONSE_BYTES})", status=413)


@dataclass
class QueryBudget:
    """What one query may still spend: wall time and template output."""

    deadline: Deadline
    rendered: int = 0

    @classmethod
    def start(cls, timeout: float | None = QUERY_TIMEOUT_S) -> QueryBudget:
        return cls(Deadline(timeout))

    def check(self) -> None:
        """Raise Loki's timeout error once the deadline has passed."""
        if self.deadline.expired:
            raise timeout_error()

    def charge_rendered(self, chars: int) -> None:
        self.rendered += chars
        if self.rendered > MAX_RENDERED_PER_QUERY:
            raise LimitError(
                f"the query's line_format/label_format templates rendered more than {MAX_RENDERED_PER_QUERY >> 20}MB "
                "(the twin's limit); consider adding more specific stream selectors or line filters before the "
                "template, or reduce the time range of the query")


def selectors(expr: A.Expr) -> list[A.LogSelector]:
    """Every stream selector of a query (iteratively: the tree may be deep)."""
    out: list[A.LogSelector] = []
    todo: list[object] = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, A.LogSelector):
            out.append(node)
        elif isinstance(node, A.RangeAggregation):
            todo.append(node.log_range.selector)
        elif isinstance(node, (A.VectorAggregation, A.LabelReplace)):
            todo.append(node.expr)
        elif isinstance(node, A.BinaryOp):
            todo += [node.lhs, node.rhs]
    return out


def check_matchers(expr: A.Expr) -> None:
    """``max_streams_matchers_per_query``: the query's stream matchers, counted over all selectors."""
    count = sum(len(s.matchers) for s in selectors(expr))
    if count > MAX_STREAM_MATCHERS:
        raise LimitError(f"max streams matchers per query exceeded, matchers-count > limit ({count} > {MAX_STREAM_MATCHERS})")
