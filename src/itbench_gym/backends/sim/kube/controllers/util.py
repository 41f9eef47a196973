"""Helpers every controller shares: quantities, timestamps, owners, pod state."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from functools import lru_cache
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from itbench_gym.lang.timestamps import parse_rfc3339, rfc3339

#: Kubernetes' name alphabet (``k8s.io/apimachinery/pkg/util/rand``): no vowels, no 0/1/3.
ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"

Obj = dict[str, Any]

#: metrics-server's sampling window: each usage sample covers the last this many seconds.
USAGE_WINDOW_SECONDS = 15.0


# -- time ---------------------------------------------------------------------------------------


def parse_time(s: str | None) -> float | None:
    """:func:`~itbench_gym.lang.timestamps.parse_rfc3339`, with an absent or empty field as None."""
    return parse_rfc3339(s) if s else None


# -- quantities ----------------------------------------------------------------------------------


def quantity(value: Any) -> Decimal:
    """A Quantity's value (Kubernetes' parser; a text is parsed once per process: controllers read
    the same requests and limits every sync, and a Decimal never changes)."""
    return _parsed_text(value) if isinstance(value, str) else _parse(value)


@lru_cache(maxsize=4096)
def _parsed_text(text: str) -> Decimal:
    return _parse(text)


def _parse(value: Any) -> Decimal:
    parsed: Decimal = parse_quantity(value)
    return parsed


def format_quantity(value: Decimal, resource: str) -> str:
    """Canonical-looking Quantity text: ``500m``, ``2``, ``512Mi``, ``1Gi``."""
    if resource.endswith("cpu"):
        millis = int((value * 1000).to_integral_value())
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    n = int(value.to_integral_value())
    if resource.endswith(("memory", "storage")):
        for suffix, mult in (("Ei", 1 << 60), ("Pi", 1 << 50), ("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if n and n % mult == 0:
                return f"{n // mult}{suffix}"
    return str(n)


def container_requests(container: Obj) -> dict[str, Decimal]:
    """Effective requests: explicit requests, else limits (API server defaulting)."""
    res = container.get("resources") or {}
    out = {k: quantity(v) for k, v in (res.get("limits") or {}).items()}
    out.update({k: quantity(v) for k, v in (res.get("requests") or {}).items()})
    return out


def container_limits(container: Obj) -> dict[str, Decimal]:
    return {k: quantity(v) for k, v in ((container.get("resources") or {}).get("limits") or {}).items()}


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """What the scheduler charges: max(sum of app containers, largest init container) + overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in container_requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in container_requests(c).items():
            if v > total.get(k, Decimal(0)):
                total[k] = v
    for k, v in (spec.get("overhead") or {}).items():
        total[k] = total.get(k, Decimal(0)) + quantity(v)
    return total


def pod_limits(pod: Obj) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        for k, v in container_limits(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    return total


# -- owners and names ----------------------------------------------------------------------------


def controller_ref(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Obj) -> Obj | None:
    refs: list[Obj] = (obj.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return ref
    return None


def owned_by(obj: Obj, owner: Obj) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == owner["metadata"].get("uid")


def name_suffix(*parts: object, length: int = 5) -> str:
    """Deterministic stand-in for ``utilrand.String``: same inputs, same suffix."""
    digest = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=16).digest()
    return "".join(ALPHANUMS[b % len(ALPHANUMS)] for b in digest[:length])


def safe_encode(s: str) -> str:
    """``rand.SafeEncodeString``: how controllers turn a numeric hash into a name-safe string."""
    return "".join(ALPHANUMS[ord(ch) % len(ALPHANUMS)] for ch in s)


def fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


# -- pods ----------------------------------------------------------------------------------------


def condition(obj: Obj, type_: str) -> Obj | None:
    conditions: list[Obj] = (obj.get("status") or {}).get("conditions") or []
    for c in conditions:
        if c.get("type") == type_:
            return c
    return None


def is_terminating(obj: Obj) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def pod_phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def is_pod_active(pod: Obj) -> bool:
    """Counts toward a controller's replicas: not terminal, not being deleted."""
    return pod_phase(pod) not in ("Succeeded", "Failed") and not is_terminating(pod)


def is_pod_ready(pod: Obj) -> bool:
    c = condition(pod, "Ready")
    return c is not None and c.get("status") == "True"


def is_pod_available(pod: Obj, min_ready_seconds: int, now: float) -> bool:
    if not is_pod_ready(pod):
        return False
    if min_ready_seconds <= 0:
        return True
    since = parse_time((condition(pod, "Ready") or {}).get("lastTransitionTime"))
    return since is not None and since + min_ready_seconds <= now


def set_condition(conditions: list[Obj], new: Obj, now: float) -> list[Obj]:
    """Replace the condition of ``new['type']``; keep lastTransitionTime when status is unchanged."""
    out: list[Obj] = []
    found = False
    for c in conditions:
        if c.get("type") != new["type"]:
            out.append(c)
            continue
        found = True
        merged = dict(new)
        if c.get("status") == new.get("status") and c.get("lastTransitionTime"):
            merged["lastTransitionTime"] = c["lastTransitionTime"]
        else:
            merged.setdefault("lastTransitionTime", rfc3339(now))
        out.append(merged)
    if not found:
        merged = dict(new)
        merged.setdefault("lastTransitionTime", rfc3339(now))
        out.append(merged)
    return out


def pod_template_labels(template: Obj) -> dict[str, str]:
    return dict(((template.get("metadata") or {}).get("labels")) or {})


def int_or_percent(value: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        pct = Decimal(text[:-1])
        scaled = pct * total / 100
        return int(scaled.to_integral_value(rounding="ROUND_CEILING" if round_up else "ROUND_FLOOR"))
    return int(text)
