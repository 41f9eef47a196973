"""The kernel's OOM killer when a machine runs out of memory.

A container with a memory limit is killed at its limit (the app model does that); one without is
bounded only by the machine. kind's kubelets set no ``memory.available`` eviction threshold (their
``evictionHard`` lists only the filesystem signals, so the kubelet's defaults do not apply), so the
kubelet never evicts for memory: the kernel's OOM killer acts instead, and the whole container
dies (``memory.oom.group``, as the kubelet sets it on cgroup v2), reported as ``OOMKilled``.

The victim is the container with the highest badness: its memory plus ``oom_score_adj`` thousandths
of the machine's memory, where the kubelet sets ``oom_score_adj`` by QoS class
(pkg/kubelet/qos/policy.go): Guaranteed and node-critical pods -997, BestEffort 1000, Burstable
``1000 - 1000 x memory request / node capacity`` within [3, 999]. The killer runs again while the
machine is still short.

kind's nodes are containers of one host (``providerID`` ``kind://<provider>/<cluster>/<node>``):
they share its memory, which each reports as its capacity. Any other node is a machine of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .controllers.util import container_requests, quantity
from .kubelet import qos_class

Obj = dict[str, Any]

GUARANTEED_ADJ, BEST_EFFORT_ADJ = -997, 1000
NODE_CRITICAL = ("system-node-critical",)


@dataclass(frozen=True)
class Use:
    """One running container's memory."""

    namespace: str
    pod: str
    container: str
    node: str
    memory_bytes: float


def machine_of(node: Obj) -> str:
    """The machine whose memory a node's pods share: a kind cluster's host, else the node itself."""
    provider = str((node.get("spec") or {}).get("providerID") or "")
    if provider.startswith("kind://"):
        return provider.rsplit("/", 1)[0]
    return f"node/{node['metadata']['name']}"


def _capacity(node: Obj) -> float:
    status = node.get("status") or {}
    raw = (status.get("capacity") or {}).get("memory") or (status.get("allocatable") or {}).get("memory")
    return float(quantity(raw)) if raw is not None else 0.0


def oom_score_adj(pod: Obj, container: Obj, capacity: float) -> int:
    if ((pod.get("spec") or {}).get("priorityClassName") or "") in NODE_CRITICAL:
        return GUARANTEED_ADJ
    qos = (pod.get("status") or {}).get("qosClass") or qos_class(pod)
    if qos == "Guaranteed":
        return GUARANTEED_ADJ
    if qos == "BestEffort":
        return BEST_EFFORT_ADJ
    request = float(container_requests(container).get("memory", Decimal(0)))
    adj = 1000 - int(1000 * request / capacity) if capacity > 0 else BEST_EFFORT_ADJ
    return min(max(adj, 1000 + GUARANTEED_ADJ), BEST_EFFORT_ADJ - 1)


def victims(uses: Iterable[Use], nodes: list[Obj], pod: Callable[[str, str], Obj | None]) -> list[Use]:
    """The containers the OOM killer ends, in order, until every machine's memory suffices."""
    machines = {n["metadata"]["name"]: machine_of(n) for n in nodes}
    capacity: dict[str, float] = {}
    for n in nodes:
        m = machines[n["metadata"]["name"]]
        capacity[m] = max(capacity.get(m, 0.0), _capacity(n))
    by_machine: dict[str, list[Use]] = {}
    for u in uses:
        if u.node in machines:
            by_machine.setdefault(machines[u.node], []).append(u)
    out: list[Use] = []
    for m, group in sorted(by_machine.items()):
        total, limit = sum(u.memory_bytes for u in group), capacity[m]
        if limit <= 0 or total <= limit:
            continue
        ranked = sorted(group, key=lambda u: (-_badness(u, pod, limit), u.namespace, u.pod, u.container))
        for u in ranked:
            if total <= limit:
                break
            out.append(u)
            total -= u.memory_bytes
    return out


def _badness(u: Use, pod: Callable[[str, str], Obj | None], capacity: float) -> float:
    obj = pod(u.namespace, u.pod)
    if obj is None:
        return u.memory_bytes
    spec: Obj = next((c for c in (obj.get("spec") or {}).get("containers") or [] if c.get("name") == u.container), {})
    return u.memory_bytes + oom_score_adj(obj, spec, capacity) * capacity / 1000.0
