"""Kubernetes label selectors: the requirements and how they match a label set.

One matcher for every selector the twin and the spec checks evaluate: Deployments' and Services'
``metav1.LabelSelector`` dicts, NetworkPolicy pod selectors, node affinity terms and Chaos Mesh's
``labelSelectors``/``expressionSelectors``. Semantics are apimachinery's ``labels.Requirement``:
``=``/``in``/``exists`` need the label; ``!=``/``notin``/``!`` (DoesNotExist) match an object
without it; ``gt``/``lt`` need an integer value. The string grammar (``?labelSelector=``) is
parsed by the API server, which builds these same requirements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``metav1.LabelSelectorRequirement`` operators (``NodeSelectorRequirement`` adds Gt and Lt).
LABEL_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
NODE_OPERATORS = {**LABEL_OPERATORS, "Gt": "gt", "Lt": "lt"}


class SelectorError(ValueError):
    """A selector that cannot be interpreted; the message is the API server's."""


@dataclass(frozen=True)
class Requirement:
    """One term: ``key op values`` with op in ``= != in notin exists ! gt lt``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfies the term (a missing label satisfies only the negative ones)."""
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return self.key not in labels or labels[self.key] not in self.values
        if self.op in ("gt", "lt"):
            try:
                have, bound = int(labels[self.key]), int(self.values[0])
            except (KeyError, ValueError, IndexError):
                return False
            return have > bound if self.op == "gt" else have < bound
        return False


class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    def __init__(self, requirements: list[Requirement], *, match_nothing: bool = False) -> None:
        self.requirements = requirements
        self.match_nothing = match_nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.match_nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def empty(self) -> bool:
        return not self.requirements and not self.match_nothing


def requirements(expressions: list[Mapping[str, Any]] | None, operators: Mapping[str, str] = LABEL_OPERATORS,
                 ) -> list[Requirement]:
    """``matchExpressions`` (or a node term's expressions) as requirements; SelectorError on a bad operator."""
    out = []
    for expr in expressions or []:
        op = operators.get(expr.get("operator", ""))
        if op is None:
            raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector operator")
        out.append(Requirement(str(expr.get("key", "")), op, tuple(str(v) for v in expr.get("values") or ())))
    return out


def selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A ``metav1.LabelSelector`` (``matchLabels`` + ``matchExpressions``) as a matcher.

    ``None`` matches nothing (``LabelSelectorAsSelector(nil)``, as for a Service without selector);
    ``{}`` matches everything.
    """
    if selector is None:
        return LabelSelector([], match_nothing=True)
    reqs = [Requirement(str(k), "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    return LabelSelector(reqs + requirements(selector.get("matchExpressions")))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """Whether a ``metav1.LabelSelector`` dict selects ``labels`` (None selects nothing)."""
    return selector_from_dict(selector).matches(labels)


def chaos_label_selector(selector: Mapping[str, Any] | None) -> LabelSelector:
    """The label part of a Chaos Mesh ``PodSelectorSpec`` (``labelSelectors`` + ``expressionSelectors``)."""
    sel = selector or {}
    return selector_from_dict({"matchLabels": sel.get("labelSelectors") or {},
                               "matchExpressions": sel.get("expressionSelectors") or []})


def node_selector_term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """One ``nodeSelectorTerm``: expressions and fields ANDed; an empty term matches nothing."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    meta = node.get("metadata") or {}
    try:
        label_reqs, field_reqs = requirements(exprs, NODE_OPERATORS), requirements(fields, NODE_OPERATORS)
    except SelectorError:
        return False  # the scheduler treats an invalid term as matching no node
    labels, own = meta.get("labels") or {}, {"metadata.name": meta.get("name", "")}
    return all(r.matches(labels) for r in label_reqs) and all(r.matches(own) for r in field_reqs)
