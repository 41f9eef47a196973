"""Moving a scenario, its app's manifests and its alert rules to another set of namespaces.

Parallel episodes on one cluster run each episode's copy of the app in namespaces of its
own (``otel-demo`` -> ``otel-demo-w1``). This module is the pure-data part: from a mapping of old to
new namespace names it returns relocated copies and never changes its inputs. Only whole names in
the mapping are rewritten: ``chaos-mesh`` or ``kube-system`` stay when the mapping does not name
them, and a name that merely contains a namespace (``otel-demo-product-catalog-network-delay``) stays.

What is read as a namespace in structured data (fault arguments, ground truth, manifests, and YAML
or JSON documents held in a manifest's strings, such as the collector's ConfigMap):

- the string of a ``namespace`` key, the strings of a ``namespaces`` list, and the keys of a ``pods``
  map (a Chaos Mesh selector's ``{namespace: [pod names]}``);
- the name of a Namespace: ``metadata.name`` of an object of kind Namespace and its
  ``kubernetes.io/metadata.name`` label; ``name`` of a ground-truth group or entity of kind Namespace;
- namespace selectors (``namespaceSelector``, ``*NamespaceSelector``): ``matchNames``, and the
  ``kubernetes.io/metadata.name`` label in ``matchLabels`` and ``matchExpressions``;
- the ``value`` or ``default`` of an entry whose ``name`` is a namespace label (``namespace``,
  ``*_namespace``, any case): an env var ``POD_NAMESPACE``, and the collector's spanmetrics dimension
  ``{name: namespace, default: otel-demo}``, which gives the app's span metrics their namespace;
- in any other string, DNS names into a namespace: ``<svc>.<ns>``, ``<svc>.<ns>.svc``,
  ``<svc>.<ns>.svc.cluster.local`` and ``<ns>.svc.<domain>`` (Istio's ``--domain``), ``<ns>`` a
  whole DNS label.

In text: the namespace kubectl reads from a command line (``-n``, ``--namespace``, ``-nX``, ``-n=X``,
``--namespace=X``, and a Namespace named as the resource: ``namespace X``, ``ns/X``); PromQL label
matchers and alert labels on ``namespace`` or ``*_namespace`` (Istio's ``source_workload_namespace``);
and in prose (descriptions, desired outcome, ground-truth conditions) ``<ns>/<name>`` references only:
a whole-token ``<ns>/`` prefix followed by a name (``ConfigMap otel-demo/flagd-config``).

Deliberately not rewritten: names that equal a namespace without meaning it (the Helm release label
``app.kubernetes.io/instance: otel-demo``, ServiceAccount ``otel-demo``), OpenTelemetry's
``service.namespace`` (a logical service namespace, not a Kubernetes one), prose that names a
namespace without ``/`` (``created in otel-demo``), and the names of cluster-scoped objects and of
objects in namespaces outside the mapping, which episodes sharing a cluster still share.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

import yaml

from itbench_gym.backends.sim.promql import ast as promql_ast
from itbench_gym.backends.sim.promql.errors import PromQLError
from itbench_gym.backends.sim.promql.parsing import native_parse
from itbench_gym.backends.sim.promql.syntax_position import tokens as promql_tokens
from itbench_gym.evaluation.entities import canonical_kind
from itbench_gym.lang import regex, yamltext
from itbench_gym.lang.gostrings import UnquoteError, unquote
from itbench_gym.spec.model import ScenarioSpec
from itbench_gym.tools.kubectl import HEREDOC

Obj = dict[str, Any]

#: Kubernetes' rule for a namespace name (``validation.IsDNS1123Label``).
_DNS1123_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS1123_MAX = 63
#: The label the API server gives every Namespace, by which namespace selectors pick one.
_NAME_LABEL = "kubernetes.io/metadata.name"
#: A dotted host name, as a whole token.
_HOST = re.compile(r"(?<![A-Za-z0-9.-])[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+(?![A-Za-z0-9-])")
#: kubectl's spellings of the Namespace resource.
_NAMESPACE_RESOURCES = frozenset({"namespace", "namespaces", "ns"})
_MATCH_OPS = frozenset({"=", "!=", "=~", "!~"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REGEX_META = frozenset(".+*?()|[]{}^$")


def relocate_spec(spec: ScenarioSpec, mapping: Mapping[str, str]) -> ScenarioSpec:
    """``spec`` with every namespace it names moved by ``mapping`` (see the module docstring); its id stays."""
    r = _Relocator(mapping)
    return replace(
        spec,
        description=r.prose(spec.description),
        namespace=r.name(spec.namespace),
        faults=tuple(replace(fault, args=r.data(fault.args, r.string)) for fault in spec.faults),
        triggering_alerts=tuple(
            replace(alert, labels={k: r.name(v) if _is_namespace_label(k) else v for k, v in alert.labels.items()})
            for alert in spec.triggering_alerts
        ),
        ground_truth=r.data(spec.ground_truth, r.prose),
        mitigations=tuple(r.mitigation(m) for m in spec.mitigations),
        desired_outcome={k: r.prose(v) for k, v in spec.desired_outcome.items()},
    )


def relocate_objects(objects: Iterable[Mapping[str, Any]], mapping: Mapping[str, str]) -> list[Obj]:
    """Deep copies of Kubernetes objects moved to the mapped namespaces, in the same order.

    PrometheusRule objects get their rules relocated too (:func:`relocate_rules`), so the app's
    objects and rules can be moved in one call (``provision.app_objects`` returns both).
    """
    r = _Relocator(mapping)
    return [r.kube_object(obj) for obj in objects]


def relocate_rules(objects: Iterable[Mapping[str, Any]], mapping: Mapping[str, str]) -> list[Obj]:
    """PrometheusRule objects moved to the mapped namespaces, their rules with them.

    In each rule's ``expr``, a matcher on ``namespace`` (or ``*_namespace``) whose value is a mapped
    namespace gets the new one: ``=`` and ``!=`` by value, ``=~`` and ``!~`` per top-level alternative
    that is exactly a mapped name (``otel-demo|other``). Only the matcher's string literal changes;
    the rest of the expression stays byte for byte. Rule ``labels`` equal to a mapped namespace move
    too. Anything but a PrometheusRule is a ValueError: the rules file holds nothing else.
    """
    objects = list(objects)
    for obj in objects:
        if obj.get("kind") != "PrometheusRule":
            raise ValueError(f"relocate_rules: {obj.get('kind')} {(obj.get('metadata') or {}).get('name')!r} is not a PrometheusRule")
    return relocate_objects(objects, mapping)


def named_namespaces(value: Any) -> set[str]:
    """Every namespace structured data (a fault's arguments, manifests) names, read exactly where the
    relocation reads one: what a namespace set must hold for the data to stay inside it."""
    recorder = _Recorder()
    recorder.data(value, str)
    return recorder.seen


def _checked(mapping: Mapping[str, str]) -> dict[str, str]:
    """The mapping, if every target is a namespace name and no two sources share one."""
    sources: dict[str, str] = {}
    for source, target in mapping.items():
        if not isinstance(target, str) or len(target) > _DNS1123_MAX or not _DNS1123_LABEL.fullmatch(target):
            raise ValueError(f"namespace mapping {source!r} -> {target!r}: the target is not a valid namespace name "
                             f"(a DNS-1123 label: at most {_DNS1123_MAX} characters of a-z, 0-9 and '-', "
                             "starting and ending with a letter or digit)")
        if target in sources:
            raise ValueError(f"namespace mapping {source!r} -> {target!r}: {sources[target]!r} is mapped to {target!r} too")
        sources[target] = source
    return dict(mapping)


def _is_namespace_label(name: object) -> bool:
    """Whether a label (or variable) named ``name`` holds a namespace: ``namespace``, ``source_workload_namespace``..."""
    return isinstance(name, str) and (name.lower() == "namespace" or name.lower().endswith("_namespace"))


def _splice(text: str, edits: Iterable[tuple[int, int, str]]) -> str:
    """``text`` with each ``(start, end)`` span replaced (spans do not overlap)."""
    parts, pos = [], 0
    for start, end, new in sorted(edits):
        parts += [text[pos:start], new]
        pos = end
    return "".join(parts) + text[pos:]


class _Relocator:
    """The rewrites for one mapping (its patterns are built once)."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.map = _checked(mapping)
        names = "|".join(re.escape(source) for source in sorted(self.map, key=len, reverse=True))
        self._prefix = re.compile(rf"(?<![\w./-])(?:{names})(?=/\w)") if self.map else None

    def name(self, value: Any) -> Any:
        """A value that is a namespace: its new name when mapped."""
        return self.map.get(value, value) if isinstance(value, str) else value

    def _mentions(self, text: str) -> bool:
        return any(source in text for source in self.map)

    def prose(self, text: str) -> str:
        """Free text: ``<ns>/<name>`` references only (a namespace named in a sentence is not one to rewrite)."""
        if self._prefix is None or not self._mentions(text):
            return text
        return self._prefix.sub(lambda m: self.map[m.group()], text)

    def dns(self, text: str) -> str:
        """``text`` with its in-cluster DNS names pointed at the new namespaces."""
        return _HOST.sub(self._host, text) if self._mentions(text) else text

    def _host(self, match: re.Match[str]) -> str:
        labels = match.group().split(".")
        for i, label in enumerate(labels):
            rest = labels[i + 1 :]
            if label in self.map and (rest[:1] == ["svc"] or (not rest and i > 0)):
                labels[i] = self.map[label]
        return ".".join(labels)

    def string(self, text: str) -> str:
        """A string in Kubernetes data: a YAML or JSON document in it moves as data does, other text by its DNS names."""
        if not self._mentions(text):
            return text
        if "\n" in text.strip() or text.lstrip()[:1] in ("{", "["):
            moved = self._document(text)
            if moved is not None:
                return moved
        return self.dns(text)

    # Structured data --------------------------------------------------------------------------

    def data(self, value: Any, leaf: Callable[[str], str]) -> Any:
        """A relocated deep copy of YAML-shaped data; ``leaf`` rewrites the strings whose place does not make them namespaces."""
        if isinstance(value, Mapping):
            kind = value.get("kind")
            of_namespace = isinstance(kind, str) and canonical_kind(kind) == "Namespace"
            return {key: self._field(key, item, value, of_namespace, leaf) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.data(item, leaf) for item in value)
        if isinstance(value, str):
            return leaf(value)
        return copy.deepcopy(value)

    def _field(self, key: Any, item: Any, parent: Mapping[str, Any], of_namespace: bool, leaf: Callable[[str], str]) -> Any:
        """One entry of a mapping, by what its key means."""
        if isinstance(item, str) and (
            key == "namespace"
            or (key == "name" and of_namespace)
            or (key in ("value", "default") and _is_namespace_label(parent.get("name")))
        ):
            return self.name(item)
        if key == "namespaces" and isinstance(item, list):
            return [self.name(v) if isinstance(v, str) else self.data(v, leaf) for v in item]
        if key == "pods" and isinstance(item, Mapping):  # Chaos Mesh: {namespace: [pod names]}
            return {self.name(ns): self.data(pods, leaf) for ns, pods in item.items()}
        if key == "metadata" and of_namespace and isinstance(item, Mapping):
            meta = self.data(item, leaf)
            if "name" in meta:
                meta["name"] = self.name(meta["name"])
            labels = meta.get("labels")
            if isinstance(labels, dict) and _NAME_LABEL in labels:
                labels[_NAME_LABEL] = self.name(labels[_NAME_LABEL])
            return meta
        if isinstance(key, str) and (key == "namespaceSelector" or key.endswith("NamespaceSelector")) and isinstance(item, Mapping):
            return self._namespace_selector(item, leaf)
        return self.data(item, leaf)

    def _namespace_selector(self, selector: Mapping[str, Any], leaf: Callable[[str], str]) -> Obj:
        """A selector of namespaces: ServiceMonitor's ``matchNames``, or a label selector on the name label."""
        moved: Obj = self.data(selector, leaf)
        if isinstance(moved.get("matchNames"), list):
            moved["matchNames"] = [self.name(v) for v in moved["matchNames"]]
        labels = moved.get("matchLabels")
        if isinstance(labels, dict) and _NAME_LABEL in labels:
            labels[_NAME_LABEL] = self.name(labels[_NAME_LABEL])
        requirements = moved.get("matchExpressions")
        for requirement in requirements if isinstance(requirements, list) else []:
            if isinstance(requirement, dict) and requirement.get("key") == _NAME_LABEL and isinstance(requirement.get("values"), list):
                requirement["values"] = [self.name(v) for v in requirement["values"]]
        return moved

    # Documents inside strings -----------------------------------------------------------------

    def _document(self, text: str) -> str | None:
        """A YAML/JSON text relocated with its formatting kept (each changed scalar replaced where it
        stands), or None when it is not a document of mappings or lists.

        Where the scalar-by-scalar edit does not read back as the relocated data (a merge key can
        make the text and the data differ), the relocated data is written out again instead.
        """
        try:
            docs = list(yaml.load_all(text, Loader=yaml.SafeLoader))
        except yaml.YAMLError:
            return None
        if not any(isinstance(doc, (dict, list)) for doc in docs):
            return None
        moved = [self.data(doc, self.string) for doc in docs]
        if moved == docs:
            return text
        edits: dict[tuple[int, int], str] = {}
        for node, doc in zip(yaml.compose_all(text, Loader=yaml.SafeLoader), moved, strict=True):
            self._scalar_edits(node, doc, text, edits)
        out = _splice(text, ((start, end, new) for (start, end), new in edits.items()))
        try:
            if list(yaml.load_all(out, Loader=yaml.SafeLoader)) == moved:
                return out
        except yaml.YAMLError:
            pass
        return "---\n".join(yamltext.dump(doc) for doc in moved)

    def _scalar_edits(self, node: yaml.Node | None, new: Any, text: str, edits: dict[tuple[int, int], str]) -> None:
        """The source spans of the string scalars under ``node`` whose relocated value ``new`` differs."""
        # Not strict: a merge key (<<) makes the data differ from the text, which the caller's read-back catches.
        if isinstance(node, yaml.MappingNode) and isinstance(new, dict):
            for (key_node, value_node), (key, value) in zip(node.value, new.items(), strict=False):
                self._scalar_edits(key_node, key, text, edits)
                self._scalar_edits(value_node, value, text, edits)
        elif isinstance(node, yaml.SequenceNode) and isinstance(new, list):
            for child, value in zip(node.value, new, strict=False):
                self._scalar_edits(child, value, text, edits)
        elif isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:str" and isinstance(new, str) and new != node.value:
            start, end = node.start_mark.index, node.end_mark.index
            source = text[start:end]
            if node.style in ("|", ">"):  # a block scalar: rewrite its body as written, indentation and all
                header, _, body = source.partition("\n")
                edits[start, end] = f"{header}\n{self.string(body)}"
            elif node.style == "'":
                edits[start, end] = "'" + new.replace("'", "''") + "'"
            elif node.style is None and "\n" not in source:
                edits[start, end] = new
            else:
                edits[start, end] = json.dumps(new, ensure_ascii=False)

    # Objects, rules ----------------------------------------------------------------------------

    def kube_object(self, obj: Mapping[str, Any]) -> Obj:
        """One Kubernetes object moved; a PrometheusRule's expressions are PromQL, not text with DNS names."""
        if obj.get("kind") != "PrometheusRule":
            moved: Obj = self.data(obj, self.string)
            return moved
        moved = self.data(obj, self.dns)
        where = f"PrometheusRule {(obj.get('metadata') or {}).get('namespace')}/{(obj.get('metadata') or {}).get('name')}"
        spec = moved.get("spec")
        for group in spec.get("groups") or [] if isinstance(spec, dict) else []:
            for rule in group.get("rules") or [] if isinstance(group, dict) else []:
                if not isinstance(rule, dict):
                    continue
                if isinstance(rule.get("expr"), str):
                    try:
                        rule["expr"] = self.expr(rule["expr"])
                    except ValueError as exc:
                        raise ValueError(f"{where}, rule {rule.get('alert') or rule.get('record')!r}: {exc}") from None
                if isinstance(rule.get("labels"), dict):
                    rule["labels"] = {k: self.name(v) for k, v in rule["labels"].items()}
        return moved

    def expr(self, expr: str) -> str:
        """A PromQL expression with its namespace matchers relocated, the rest kept byte for byte.

        The parser's tree has no source positions, so the matchers are found with the project's
        PromQL tokenizer, and the result is checked against the tree: it must parse to the original's
        matchers with exactly the namespace values moved.
        """
        spans = _code_tokens(expr)
        texts = [expr[start:end] for start, end in spans]
        edits = []
        depth = 0
        for i, token in enumerate(texts):
            depth += (token == "{") - (token == "}")
            if depth <= 0 or i + 2 >= len(texts) or texts[i + 1] not in _MATCH_OPS or texts[i + 2][:1] not in "\"'`":
                continue
            label = _label_name(token)
            try:
                value = unquote(texts[i + 2])
            except UnquoteError:
                continue  # the parser reports it below
            new = self._matcher_value(label, texts[i + 1], value) if label is not None else value
            if new != value:
                edits.append((*spans[i + 2], _quoted_like(texts[i + 2], new)))
        out = _splice(expr, edits)
        expected = sorted((label, op, self._matcher_value(label, op, value)) for label, op, value in _matchers(expr))
        if sorted(_matchers(out)) != expected:
            raise ValueError(f"cannot find every namespace matcher of {expr!r} in its text")
        return out

    def _matcher_value(self, label: str, op: str, value: str) -> str:
        if not _is_namespace_label(label):
            return value
        if op in ("=", "!="):
            return str(self.name(value))
        expanded = regex.expand_quoted(value)
        parts = _alternatives(expanded)
        moved = [regex.quote_meta(self.map[literal]) if (literal := _regex_literal(p)) in self.map else p for p in parts]
        return "|".join(moved) if moved != parts else value

    # Scenario parts ----------------------------------------------------------------------------

    def mitigation(self, mitigation: Mapping[str, Any]) -> dict[str, Any]:
        """A mitigation: its description as prose, its commands as kubectl command lines."""
        return {
            key: self.prose(value) if key == "description" and isinstance(value, str)
            else [self.command(c) for c in value] if key == "commands" and isinstance(value, list)
            else copy.deepcopy(value)
            for key, value in mitigation.items()
        }

    def command(self, line: str) -> str:
        """A kubectl command line with the namespaces kubectl reads in it moved, and its heredoc's manifests.

        The line is re-quoted by ``shlex.join`` only when an argument changed; others stay byte for byte.
        """
        heredoc = HEREDOC.search(line)
        head = line[: heredoc.start()] if heredoc else line
        try:
            argv = shlex.split(head)
        except ValueError as exc:
            raise ValueError(f"cannot read the command line {line!r}: {exc}") from None
        moved = self._kubectl(argv) if argv[:1] == ["kubectl"] else argv
        out = head if moved == argv else shlex.join(moved) + head[len(head.rstrip()) :]
        if heredoc is None:
            return out
        return out + line[len(head) : heredoc.start(3)] + self.string(heredoc.group(3)) + line[heredoc.end(3) :]

    def _kubectl(self, argv: list[str]) -> list[str]:
        """``argv`` (``kubectl ...``) with the values kubectl reads as namespaces moved: the ``-n``
        flag's, and the names given to the Namespace resource (``namespace X``, ``ns/X``)."""
        out = list(argv)
        names_namespaces = False
        i = 1
        while i < len(out):
            token = out[i]
            if token == "--":  # what follows is a command run in a container
                break
            if token in ("-n", "--namespace") and i + 1 < len(out):
                out[i + 1] = self.name(out[i + 1])
                i += 1
            elif token.startswith("--namespace="):
                out[i] = "--namespace=" + self.name(token.partition("=")[2])
            elif token.startswith("-n") and not token.startswith("--"):
                prefix = "-n=" if token.startswith("-n=") else "-n"
                out[i] = prefix + self.name(token[len(prefix) :])
            elif not token.startswith("-"):
                resource, slash, name = token.partition("/")
                if slash and resource.lower() in _NAMESPACE_RESOURCES:
                    out[i] = f"{resource}/{self.name(name)}"
                elif names_namespaces:
                    out[i] = self.name(token)
                elif not slash:
                    names_namespaces = any(r.lower() in _NAMESPACE_RESOURCES for r in token.split(","))
            i += 1
        return out


class _Recorder(_Relocator):
    """A relocation that moves nothing and remembers every value it reads as a namespace."""

    def __init__(self) -> None:
        super().__init__({})
        self.seen: set[str] = set()

    def name(self, value: Any) -> Any:
        if isinstance(value, str):
            self.seen.add(value)
        return value


def _code_tokens(expr: str) -> list[tuple[int, int]]:
    """(start, end) of the PromQL tokens of ``expr`` outside ``#`` comments."""
    out: list[tuple[int, int]] = []
    comment_end = -1
    for start, end in promql_tokens(expr):
        if start < comment_end:
            continue
        if expr[start] == "#":
            newline = expr.find("\n", start)
            comment_end = len(expr) if newline < 0 else newline
            continue
        out.append((start, end))
    return out


def _label_name(token: str) -> str | None:
    """The label a matcher's first token names (an identifier or, since Prometheus 3, a quoted name)."""
    if _IDENTIFIER.fullmatch(token):
        return token
    try:
        return unquote(token)
    except UnquoteError:
        return None


def _matchers(expr: str) -> list[tuple[str, str, str]]:
    """Every label matcher of ``expr`` as the parser reads it; ValueError when it does not parse."""
    try:
        tree = promql_ast.convert(native_parse(expr)[0])
    except PromQLError as exc:
        raise ValueError(f"invalid PromQL {expr!r}: {exc.message}") from None
    return [
        (m.name, m.op, m.value)
        for node in promql_ast.walk(tree) if isinstance(node, promql_ast.VectorSel)
        for m in [*node.matchers, *(m for group in node.or_groups for m in group)]
    ]


def _quoted_like(literal: str, value: str) -> str:
    """``value`` as a PromQL string literal, in ``literal``'s quotes when it needs no escapes."""
    quote = literal[0]
    if quote == "`" and "`" not in value:
        return f"`{value}`"
    if quote in "\"'" and not any(c in value for c in (quote, "\\", "\n")):
        return f"{quote}{value}{quote}"
    return json.dumps(value, ensure_ascii=False)


def _alternatives(pattern: str) -> list[str]:
    """The top-level ``|`` alternatives of a Go regex (a ``|`` in a group or a class does not split)."""
    parts: list[str] = []
    start = depth = i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 1
        elif c == "[":
            i += 1 + (pattern[i + 1 : i + 2] == "^")
            i += pattern[i : i + 1] == "]"  # a leading ] is literal
            while i < len(pattern) and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    return [*parts, pattern[start:]]


def _regex_literal(pattern: str) -> str | None:
    """The text a regex matches when it is a plain literal (``otel-demo``, ``otel\\-demo``), else None."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            escaped = pattern[i + 1 : i + 2]
            if not escaped or escaped.isalnum():  # \d, \Q, \x41...: not a plain literal
                return None
            out.append(escaped)
            i += 2
            continue
        if c in _REGEX_META:
            return None
        out.append(c)
        i += 1
    return "".join(out)
