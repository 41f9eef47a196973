"""Can an alerting rule produce an alert with given labels? A static reading of its PromQL.

An alert's labels are the result series' labels (without ``__name__``) overlaid with the rule's
``labels`` and ``alertname``. Which labels a PromQL result can carry, and with which values, follows
from the expression: aggregations keep only their ``by`` labels (or drop their ``without`` labels),
one-to-one binary operations keep the ``on`` labels (or drop the ``ignoring`` ones), ``group_left``
adds its listed labels from the right-hand side, ``histogram_quantile`` drops ``le``,
``label_replace``/``label_join`` may set their target label to anything, and a selector's matchers
restrict the values of the labels they name. The reading is conservative: when in doubt a rule *can*
match, so a valid scenario is never rejected; a scenario is rejected only when no rule of that name
could ever fire with its labels.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import promql_parser

from itbench_gym.lang.regex import Regex, RegexError
from itbench_gym.spec.appfacts import AlertRuleFact


def rule_mismatch(rule: AlertRuleFact, wanted: Mapping[str, str]) -> str | None:
    """Why ``rule`` can never fire with the ``wanted`` labels, or None when it can."""
    node = _parse(rule.expr)
    for label, value in wanted.items():
        if label == "alertname":
            if value != rule.alert:
                return f"its alertname is {rule.alert!r}"
            continue
        if label in rule.labels:
            fixed = rule.labels[label]
            if "{{" not in fixed and fixed != value:
                return f"it sets {label}={fixed!r}"
            continue
        if node is None:
            continue
        if not can_carry(node, label, None):
            return f"its result has no label {label!r}"
        if not can_carry(node, label, value):
            return f"no series its expression keeps can have {label}={value!r}"
    return None


@lru_cache(maxsize=256)
def _parse(expr: str) -> Any:
    """The rule's syntax tree (``promql_parser``'s nodes), or None when it cannot be read."""
    try:
        return promql_parser.parse(expr)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # the Rust parser panics on some inputs; an unreadable rule is not our verdict
        return None


def _value_type(node: Any) -> str:
    """PromQL's type of an expression: ``scalar``, ``string``, ``vector`` or ``matrix``."""
    if isinstance(node, promql_parser.NumberLiteral):
        return "scalar"
    if isinstance(node, promql_parser.StringLiteral):
        return "string"
    if isinstance(node, (promql_parser.MatrixSelector, promql_parser.SubqueryExpr)):
        return "matrix"
    if isinstance(node, promql_parser.Call):
        return str(node.func.return_type).rpartition(".")[2].lower()
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr)):
        return _value_type(node.expr)
    if isinstance(node, promql_parser.BinaryExpr):
        both = {_value_type(node.lhs), _value_type(node.rhs)}
        return "scalar" if both == {"scalar"} else "vector"
    return "vector"


def _matches(matcher: Any, value: str) -> bool:
    op = matcher.op
    if op == promql_parser.MatchOp.Equal:
        return bool(value == matcher.value)
    if op == promql_parser.MatchOp.NotEqual:
        return bool(value != matcher.value)
    try:
        found = Regex(matcher.value, anchored=True).matches(value)
    except RegexError:
        return True  # an invalid regex is the rule's problem, not a reason to reject the scenario
    return found if op == promql_parser.MatchOp.Re else not found


def can_carry(node: Any, label: str, value: str | None) -> bool:
    """Whether a result series of ``node`` can have ``label`` (with ``value``, when given)."""
    if isinstance(node, (promql_parser.NumberLiteral, promql_parser.StringLiteral)):
        return False
    if isinstance(node, promql_parser.VectorSelector):
        if label == "__name__":
            return False
        if value is None:
            return True
        sets = node.matchers.or_matchers or [node.matchers.matchers]
        return any(all(_matches(m, value) for m in matchers if m.name == label) for matchers in sets)
    if isinstance(node, promql_parser.MatrixSelector):
        return can_carry(node.vector_selector, label, value)
    if isinstance(node, (promql_parser.SubqueryExpr, promql_parser.ParenExpr, promql_parser.UnaryExpr)):
        return can_carry(node.expr, label, value)
    if isinstance(node, promql_parser.Call):
        return _call(node, label, value)
    if isinstance(node, promql_parser.AggregateExpr):
        return _aggregate(node, label, value)
    if isinstance(node, promql_parser.BinaryExpr):
        return _binary(node, label, value)
    return True


def _selectors(node: Any) -> list[Any]:
    """Every vector selector under ``node``."""
    if isinstance(node, promql_parser.VectorSelector):
        return [node]
    children: list[Any] = []
    for attr in ("expr", "vector_selector", "lhs", "rhs", "param"):
        child = getattr(node, attr, None)
        if child is not None:
            children.append(child)
    children.extend(getattr(node, "args", None) or ())
    return [s for child in children for s in _selectors(child)]


def _call(node: Any, label: str, value: str | None) -> bool:
    args = list(node.args)
    name = node.func.name
    if name in ("label_replace", "label_join") and len(args) > 1 and isinstance(args[1], promql_parser.StringLiteral):
        if label == args[1].val:
            return True
        return can_carry(args[0], label, value)
    if name in ("absent", "absent_over_time") and args:
        equal = [m.value for s in _selectors(args[0]) for m in s.matchers.matchers
                 if m.name == label and m.op == promql_parser.MatchOp.Equal]
        return bool(equal) and (value is None or value in equal)
    if name == "histogram_quantile":
        return label != "le" and len(args) > 1 and can_carry(args[1], label, value)
    if _value_type(node) not in ("vector", "matrix"):
        return False
    for arg in args:
        if _value_type(arg) in ("vector", "matrix"):
            return can_carry(arg, label, value)
    return False


def _aggregate(node: Any, label: str, value: str | None) -> bool:
    op = str(node.op)
    if op == "count_values" and isinstance(node.param, promql_parser.StringLiteral) and label == node.param.val:
        return True
    if op in ("topk", "bottomk", "limitk", "limit_ratio"):
        return can_carry(node.expr, label, value)
    modifier = node.modifier
    grouping = set(modifier.labels) if modifier is not None else set()
    if modifier is not None and modifier.type == promql_parser.AggModifierType.Without:
        return label not in grouping and can_carry(node.expr, label, value)
    return label in grouping and can_carry(node.expr, label, value)


def _binary(node: Any, label: str, value: str | None) -> bool:
    lhs, rhs = node.lhs, node.rhs
    left, right = _value_type(lhs), _value_type(rhs)
    if left == "scalar" and right == "scalar":
        return False
    if left == "scalar":
        return can_carry(rhs, label, value)
    if right == "scalar":
        return can_carry(lhs, label, value)
    op = str(node.op)
    if op == "or":
        return can_carry(lhs, label, value) or can_carry(rhs, label, value)
    if op in ("and", "unless"):
        return can_carry(lhs, label, value)
    modifier = node.modifier
    card = modifier.card if modifier is not None else promql_parser.VectorMatchCardinality.OneToOne
    include = set(modifier.group_labels or ()) if modifier is not None else set()
    if card == promql_parser.VectorMatchCardinality.ManyToOne:
        return can_carry(rhs if label in include else lhs, label, value)
    if card == promql_parser.VectorMatchCardinality.OneToMany:
        return can_carry(lhs if label in include else rhs, label, value)
    matching = modifier.matching if modifier is not None else None
    if matching is not None and matching.type == promql_parser.LabelModifierType.Include:
        return label in set(matching.labels) and can_carry(lhs, label, value)
    excluded = set(matching.labels) if matching is not None else set()
    return label not in excluded and can_carry(lhs, label, value)
