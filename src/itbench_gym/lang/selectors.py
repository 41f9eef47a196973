"""Kubernetes label selectors: the requirements and how they match a label set.

One matcher for every selector the twin and the spec checks evaluate: Deployments' and Services'
``metav1.LabelSelector`` dicts, NetworkPolicy pod selectors, node affinity terms and Chaos Mesh's
``labelSelectors``/``expressionSelectors``. Semantics are apimachinery's ``labels.Requirement``:
``=``/``in``/``exists`` need the label; ``!=``/``notin``/``!`` (DoesNotExist) match an object
without it; ``gt``/``lt`` need an integer value. The string grammar (``?labelSelector=``) is
parsed by the API server, which builds these same requirements.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

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


def _str_pairs(labels: Mapping[str, Any] | None) -> list[tuple[str, str]] | None:
    """The (key, value) pairs of an equality selector or label set, None when a value is not a string
    (no label value is: such a selector matches nothing)."""
    pairs = list((labels or {}).items())
    return pairs if all(isinstance(v, str) for _, v in pairs) else None


class LabelIndex(Generic[K, T]):
    """Items by each (key, value) of their labels: an equality selector (``matchLabels``, a Service's
    ``spec.selector``) looks only at the items carrying its rarest pair instead of at every item,
    which keeps "the pods of every Service" linear in the pods.

    Items are kept under a key in the order of a dict's: :meth:`put` on a known key replaces its
    item in place, a new key goes last, and answers keep that order, as a scan over the dict
    would. So an index fed a cache's events answers as a scan of the cache would.
    """

    def __init__(self, entries: Iterable[tuple[K, T, Mapping[str, str] | None]] = ()) -> None:
        #: key -> (place in the order, item, labels)
        self._entries: dict[K, tuple[int, T, Mapping[str, str]]] = {}
        self._by_pair: dict[tuple[str, str], dict[K, None]] = {}
        self._placed = 0
        for key, item, labels in entries:
            self.put(key, item, labels)

    def put(self, key: K, item: T, labels: Mapping[str, str] | None) -> None:
        """Hold ``item`` with ``labels`` under ``key``, in the place of the key's previous item."""
        labels = labels or {}
        old = self._entries.get(key)
        if old is not None and (old[2] is labels or old[2] == labels):
            self._entries[key] = (old[0], item, old[2])
            return
        if old is None:
            self._placed += 1
        else:
            self._unlink(key, old[2])
        self._entries[key] = (self._placed if old is None else old[0], item, labels)
        for pair in labels.items():
            if isinstance(pair[1], str):
                self._by_pair.setdefault(pair, {})[key] = None

    def remove(self, key: K) -> None:
        """Forget ``key`` (nothing when it is not held)."""
        old = self._entries.pop(key, None)
        if old is not None:
            self._unlink(key, old[2])

    def _unlink(self, key: K, labels: Mapping[str, str]) -> None:
        for pair in labels.items():
            keys = self._by_pair.get(pair) if isinstance(pair[1], str) else None
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del self._by_pair[pair]

    def matching(self, match_labels: Mapping[str, Any]) -> list[T]:
        """The items whose labels hold every pair of ``match_labels`` (every item for an empty one)."""
        pairs = _str_pairs(match_labels)
        if pairs is None:
            return []
        if not pairs:
            return [item for _, item, _ in self._entries.values()]
        rarest = min((self._by_pair.get(pair, {}) for pair in pairs), key=len)
        hits = [self._entries[key] for key in rarest]
        # a key whose labels changed joined its new pairs' lists last: the order is the places'
        return [item for _, item, labels in sorted(hits, key=_place) if all(labels.get(k) == v for k, v in pairs)]

    def scan(self, keep: Callable[[Mapping[str, str]], bool]) -> list[T]:
        """The items whose labels ``keep`` accepts, looking at every item (for selectors with expressions)."""
        return [item for _, item, labels in self._entries.values() if keep(labels)]


def _place(entry: tuple[int, Any, Any]) -> int:
    return entry[0]


class SelectorIndex(Generic[T]):
    """Items by their equality selectors, the other way round from :class:`LabelIndex`: which
    items (Services) select a label set (a pod), looking only at the items whose rarest selector
    pair the labels carry. An empty selector selects nothing, as a Service's does.
    """

    def __init__(self, items: Iterable[tuple[T, Mapping[str, Any] | None]]) -> None:
        entries = [(item, _str_pairs(selector)) for item, selector in items]
        counts: dict[tuple[str, str], int] = {}
        for _, pairs in entries:
            for pair in pairs or ():
                counts[pair] = counts.get(pair, 0) + 1
        self._by_pair: dict[tuple[str, str], list[tuple[int, T, list[tuple[str, str]]]]] = {}
        for position, (item, pairs) in enumerate(entries):
            if pairs:
                rarest = min(pairs, key=lambda pair: counts[pair])
                self._by_pair.setdefault(rarest, []).append((position, item, pairs))

    def selecting(self, *label_sets: Mapping[str, str] | None) -> list[T]:
        """The items whose selector matches any of ``label_sets``, in the order they were given."""
        hits: dict[int, T] = {}
        for labels in label_sets:
            have = labels or {}
            for pair in have.items():
                if not isinstance(pair[1], str):
                    continue
                for position, item, pairs in self._by_pair.get(pair, ()):
                    if position not in hits and all(have.get(k) == v for k, v in pairs):
                        hits[position] = item
        return [hits[position] for position in sorted(hits)]
