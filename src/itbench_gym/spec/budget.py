"""Budget alerts: PromQL ``<cost expression> > <number>``, read and rewritten by their threshold.

ITBench's FinOps budget alerts compare a namespace's cost with a fixed budget, e.g.
``sum by (namespace) (container_namespace_node:container_cpu_allocation_cost_per_node:avg5m{...}) > 3``.
The fault that misconfigures a budget and the grader that reads it both need the two halves, so the
parsing lives here, once: a regular expression over the end of the expression (a comparison with a
plain number literal, nothing after it), which leaves the left-hand side as written.
"""

from __future__ import annotations

import math
import re

#: A PromQL float literal as budgets write them: 3, 0.05, .5, 1e-2, +4.
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
#: ``> <number>`` at the very end (``>=`` and ``> bool`` do not match: the character after ``>`` is
#: whitespace or the number itself).
_THRESHOLD = re.compile(rf">\s*({_NUMBER})\s*$")


def budget_threshold(expr: str) -> tuple[str, float] | None:
    """``(left-hand side, stripped; threshold)`` of ``<lhs> > <number>``, or None for any other form."""
    match = _THRESHOLD.search(expr)
    if match is None:
        return None
    lhs = expr[:match.start()].strip()
    if not lhs:
        return None
    return lhs, float(match.group(1))


def with_threshold(expr: str, value: float) -> str:
    """``expr`` with the number of its trailing ``> <number>`` replaced by ``value`` (all else kept as
    written); ValueError when ``expr`` does not have that form or ``value`` is not finite."""
    match = _THRESHOLD.search(expr)
    if match is None or not expr[:match.start()].strip():
        raise ValueError(f"not of the form '<expression> > <number>': {expr.strip()!r}")
    return expr[:match.start(1)] + format_number(value) + expr[match.end(1):]


def format_number(value: float) -> str:
    """The shortest PromQL literal for ``value``: ``3`` for 3.0, ``0.05``, ``1e-05``."""
    if not math.isfinite(value):
        raise ValueError(f"a budget threshold must be a finite number, got {value!r}")
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))
