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
    """The rule's syntax tree (the twin's PromQL nodes), or None when it cannot be read."""
    try:
        import promql_parser

        from itbench_gym.backends.sim.promql.ast import convert

        return convert(promql_parser.parse(expr))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # the Rust parser panics on some inputs; an unreadable rule is not our verdict
        return None


def can_carry(node: Any, label: str, value: str | None) -> bool:
    """Whether a result series of ``node`` can have ``label`` (with ``value``, when given)."""
    from itbench_gym.backends.sim.promql import ast

    if isinstance(node, (ast.NumberLit, ast.StringLit)):
        return False
    if isinstance(node, ast.VectorSel):
        if label == "__name__":
            return False
        if value is None:
            return True
        return any(all(m.matches(value) for m in matchers if m.name == label) for matchers in node.matcher_sets())
    if isinstance(node, ast.MatrixSel):
        return can_carry(node.vs, label, value)
    if isinstance(node, (ast.Subquery, ast.Paren, ast.Unary)):
        return can_carry(node.expr, label, value)
    if isinstance(node, ast.Call):
        return _call(node, label, value)
    if isinstance(node, ast.Aggregate):
        return _aggregate(node, label, value)
    if isinstance(node, ast.Binary):
        return _binary(node, label, value)
    return True


def _call(node: Any, label: str, value: str | None) -> bool:
    from itbench_gym.backends.sim.promql import ast

    args = node.args
    if node.name in ("label_replace", "label_join") and len(args) > 1 and isinstance(args[1], ast.StringLit):
        if label == args[1].val:
            return True
        return can_carry(args[0], label, value)
    if node.name in ("absent", "absent_over_time") and args:
        selectors = [n for n in ast.walk(args[0]) if isinstance(n, ast.VectorSel)]
        equal = [m.value for s in selectors for m in s.matchers if m.name == label and m.op == "="]
        return bool(equal) and (value is None or value in equal)
    if node.name == "histogram_quantile":
        return label != "le" and len(args) > 1 and can_carry(args[1], label, value)
    if node.type not in ("vector", "matrix"):
        return False
    for arg in args:
        if arg.type in ("vector", "matrix"):
            return can_carry(arg, label, value)
    return False


def _aggregate(node: Any, label: str, value: str | None) -> bool:
    from itbench_gym.backends.sim.promql import ast

    if node.op == "count_values" and isinstance(node.param, ast.StringLit) and label == node.param.val:
        return True
    if node.op in ("topk", "bottomk", "limitk", "limit_ratio"):
        return can_carry(node.expr, label, value)
    if node.without:
        return label not in node.grouping and can_carry(node.expr, label, value)
    return label in node.grouping and can_carry(node.expr, label, value)


def _binary(node: Any, label: str, value: str | None) -> bool:
    lhs, rhs = node.lhs, node.rhs
    if lhs.type == "scalar" and rhs.type == "scalar":
        return False
    if lhs.type == "scalar":
        return can_carry(rhs, label, value)
    if rhs.type == "scalar":
        return can_carry(lhs, label, value)
    if node.op == "or":
        return can_carry(lhs, label, value) or can_carry(rhs, label, value)
    if node.op in ("and", "unless"):
        return can_carry(lhs, label, value)
    if node.card == "many-to-one":
        return can_carry(rhs if label in node.include else lhs, label, value)
    if node.card == "one-to-many":
        return can_carry(lhs if label in node.include else rhs, label, value)
    if node.on:
        return label in node.matching and can_carry(lhs, label, value)
    return label not in node.matching and can_carry(lhs, label, value)
