"""Safe decoding of request bodies (JSON, YAML) into plain JSON values.

Hostile bodies must cost little and answer 400: a few hundred bytes of YAML aliases ("billion
laughs") expand to billions of nodes, deep nesting overflows Python's recursion, ``NaN`` and
``1e400`` are not JSON numbers upstream accepts, and YAML types with no JSON form (timestamps,
sets, recursive anchors) would crash serialisation later. So YAML is composed first and its
*expanded* size and depth are measured on the node graph before anything is constructed, and
every decoded document is walked once (iteratively) for depth, size and non-finite numbers.

Messages follow the decoders kube-apiserver uses: go-yaml's "document contains excessive aliasing"
and "exceeded max depth", Go encoding/json's "exceeded max depth". The limits are lower than Go's
(10000 levels) because Python code walks these documents recursively; real manifests stay far
below them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from . import errors

#: Deepest nesting of objects/arrays accepted (a deep CRD schema is ~40).
MAX_DEPTH = 100
#: Most values (scalars, objects, arrays, counted with aliases expanded) a body may decode to.
MAX_NODES = 1_000_000

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.SafeLoader):
    """SafeLoader whose values all have a JSON form: timestamps and binaries stay strings, sets are maps."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _as_string(loader: yaml.SafeLoader, node: Node) -> Any:
    return loader.construct_scalar(node)  # type: ignore[arg-type]


def _set_as_map(loader: yaml.SafeLoader, node: Node) -> Any:
    return {k: None for k in loader.construct_mapping(node)}  # type: ignore[arg-type]


_Loader.add_constructor(_TIMESTAMP, _as_string)
_Loader.add_constructor("tag:yaml.org,2002:binary", _as_string)
_Loader.add_constructor("tag:yaml.org,2002:set", _set_as_map)


def _yaml_shape(root: Node) -> None:
    """Refuse a node graph that is cyclic, too deep, or too large once aliases are expanded."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_NODES:
                raise errors.bad_request("yaml: document contains excessive aliasing")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise errors.bad_request(f"yaml: anchor {node.start_mark.line + 1}:{node.start_mark.column + 1} "
                                     "value contains itself")
        if isinstance(node, ScalarNode):
            sizes[key] = 1
            continue
        if depth > MAX_DEPTH:
            raise errors.bad_request(f"yaml: exceeded max depth of {MAX_DEPTH}")
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def _yaml_problem(e: yaml.YAMLError) -> str:
    """go-yaml's shape: ``line N: <problem>``."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem:
        mark = e.problem_mark or e.context_mark
        return f"line {mark.line + 1}: {e.problem}" if mark is not None else e.problem
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def load_yaml(text: str) -> Any:
    """One YAML document as JSON values; 400 for anything hostile or without a JSON form."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _yaml_shape(node)
        doc = loader.construct_document(node)
    except yaml.YAMLError as e:
        raise errors.bad_request(f"yaml: {_yaml_problem(e)}") from None
    except RecursionError:
        raise errors.bad_request(f"yaml: exceeded max depth of {MAX_DEPTH}") from None
    finally:
        loader.dispose()
    check_document(doc)
    return doc


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def load_json(text: str) -> Any:
    """A JSON document (no ``NaN``/``Infinity``); 400 for bad syntax, depth or size."""
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise errors.bad_request("exceeded max depth") from None
    except ValueError as e:  # JSONDecodeError, and int() refusing a 5000-digit number
        raise errors.bad_request(str(e)) from None
    check_document(doc)
    return doc


def check_document(doc: Any) -> None:
    """Walk a decoded value once: bounded depth and size, only finite numbers, string keys."""
    count = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise errors.bad_request(f"the request body has more than {MAX_NODES} values")
        if isinstance(value, dict):
            if depth > MAX_DEPTH:
                raise errors.bad_request("invalid character '{' exceeded max depth")
            for k, v in value.items():
                if not isinstance(k, str):
                    if isinstance(k, (bool, int, float)) or k is None:
                        continue  # serialised as a string key, as sigs.k8s.io/yaml does
                    raise errors.bad_request(f"unsupported map key {k!r}")
                stack.append((v, depth + 1))
        elif isinstance(value, list):
            if depth > MAX_DEPTH:
                raise errors.bad_request("invalid character '[' exceeded max depth")
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise errors.bad_request(f"json: unsupported value: {value}")
        elif not isinstance(value, (str, int, float, bool)) and value is not None:
            raise errors.bad_request(f"json: unsupported value of type {type(value).__name__}")
