"""Which pods an experiment's ``selector`` and ``mode`` pick (Chaos Mesh's PodSelectorSpec).

Selection happens once, when the experiment starts, and is recorded in its status; random modes
draw from a generator seeded by (twin seed, experiment uid) so a replay picks the same pods.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from itbench_gym.lang.selectors import SelectorError, chaos_label_selector, node_selector_term_matches

Obj = dict[str, Any]


class SelectionError(ValueError):
    """The selector or mode cannot be interpreted (says which field and why)."""


def _field(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def pod_matches(selector: Obj | None, pod: Obj, default_namespace: str, nodes: dict[str, Obj] | None = None) -> bool:
    """Every criterion of the selector holds for ``pod`` (empty namespaces = the experiment's own)."""
    sel = selector or {}
    meta = pod["metadata"]
    ns = meta.get("namespace", "")
    named = sel.get("pods")
    if named:
        return meta["name"] in (named.get(ns) or [])
    if ns not in (sel.get("namespaces") or [default_namespace]):
        return False
    try:
        if not chaos_label_selector(sel).matches(meta.get("labels") or {}):
            return False
    except SelectorError:
        return False  # Chaos Mesh's webhook refuses such a selector; here it selects nothing
    annotations = meta.get("annotations") or {}
    if any(annotations.get(k) != v for k, v in (sel.get("annotationSelectors") or {}).items()):
        return False
    if any(_field(pod, k) != str(v) for k, v in (sel.get("fieldSelectors") or {}).items()):
        return False
    phases = sel.get("podPhaseSelectors")
    if phases and (pod.get("status") or {}).get("phase") not in phases:
        return False
    node_name = (pod.get("spec") or {}).get("nodeName", "")
    if sel.get("nodes") and node_name not in sel["nodes"]:
        return False
    node_labels = sel.get("nodeSelectors")
    if node_labels:
        node = (nodes or {}).get(node_name)
        term = {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in node_labels.items()]}
        if node is None or not node_selector_term_matches(term, node):
            return False
    return True


def _number(value: Any, mode: str) -> float:
    try:
        return float(str(value))
    except ValueError:
        raise SelectionError(f"spec.value: {value!r} is not a number (mode {mode} needs one)") from None


def choose(pods: Iterable[Obj], mode: str, value: Any, seed: int, uid: str) -> list[Obj]:
    """Apply ``mode`` to the matching pods, sorted by name first so the draw is reproducible."""
    pool = sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"]))
    rng = np.random.default_rng([seed, zlib.crc32(uid.encode())])
    if mode == "all":
        return pool
    if mode == "one":
        count = 1
    elif mode == "fixed":
        count = int(_number(value, mode))
    elif mode == "fixed-percent":
        count = math.floor(len(pool) * _number(value, mode) / 100.0)
    elif mode == "random-max-percent":
        count = math.floor(len(pool) * float(rng.integers(0, int(_number(value, mode)) + 1)) / 100.0)
    else:
        raise SelectionError(f'spec.mode: unsupported value "{mode}": one of one, all, fixed, fixed-percent, random-max-percent')
    count = max(0, min(count, len(pool)))
    picked = sorted(int(i) for i in rng.choice(len(pool), size=count, replace=False)) if count else []
    return [pool[i] for i in picked]
