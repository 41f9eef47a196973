"""The default scheduler's decisions: filters, scoring, preemption and its failure messages.

Pending pods are the most common symptom an agent must explain, and ``kubectl describe pod``
shows the scheduler's own words ("0/3 nodes are available: 3 Insufficient memory. preemption:
..."), so the filters run in upstream's plugin order, report the first failure per node with the
upstream wording, and the message is assembled exactly like ``framework.FitError``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Iterable

from .controllers.base import Cache, Context, Controller, Key
from .controllers.util import (
    node_selector_term_matches,
    pod_phase,
    pod_requests,
    quantity,
    selector_matches,
    set_condition,
)
from .errors import ApiError
from .store import clone

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass
class NodeInfo:
    """A node and what is already placed on it (bound pods plus higher-priority nominations)."""

    node: Obj
    pods: list[Obj] = field(default_factory=list)
    requested: dict[str, Decimal] = field(default_factory=dict)
    allocatable: dict[str, Decimal] = field(init=False)

    @property
    def name(self) -> str:
        return str(self.node["metadata"]["name"])

    @property
    def labels(self) -> dict[str, str]:
        return (self.node.get("metadata") or {}).get("labels") or {}

    def __post_init__(self) -> None:
        status = self.node.get("status") or {}
        raw = status.get("allocatable") or status.get("capacity") or {}
        self.allocatable = {k: quantity(v) for k, v in raw.items()}

    def add(self, pod: Obj) -> None:
        self.pods.append(pod)
        for k, v in pod_requests(pod).items():
            self.requested[k] = self.requested.get(k, Decimal(0)) + v

    def without(self, victims: list[Obj]) -> NodeInfo:
        gone = {id(v) for v in victims}
        out = NodeInfo(self.node)
        for p in self.pods:
            if id(p) not in gone:
                out.add(p)
        return out


@dataclass(frozen=True)
class Decision:
    """Where a pod goes, or why it cannot go anywhere (and whom to preempt for it)."""

    node: str | None
    message: str = ""
    nominated: str | None = None
    victims: tuple[Obj, ...] = ()


@dataclass(frozen=True)
class _Failure:
    reasons: tuple[str, ...]
    resolvable: bool


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol.get("effect") != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        key = tol.get("key", "")
        if not key and op == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if op == "Exists" or tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _taint_text(taint: Obj) -> str:
    return "{" + f"{taint.get('key', '')}: {taint.get('value', '')}" + "}"


class Scheduler:
    """Stateless placement logic; the caller owns binding, events and retries."""

    def __init__(self, priority_of: Callable[[Obj], int]) -> None:
        self._priority_of = priority_of

    # -- filters (upstream order) ------------------------------------------------------------

    def _filter(self, pod: Obj, info: NodeInfo, all_infos: list[NodeInfo]) -> _Failure | None:
        spec = pod.get("spec") or {}
        node_spec = info.node.get("spec") or {}
        tolerations = spec.get("tolerations") or []
        if node_spec.get("unschedulable") and not tolerates(
            tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        ):
            return _Failure(("node(s) were unschedulable",), False)
        for taint in node_spec.get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
                return _Failure((f"node(s) had untolerated taint {_taint_text(taint)}",), False)
        if not self._node_affinity_ok(pod, info.node):
            return _Failure(("node(s) didn't match Pod's node affinity/selector",), False)
        if not self._ports_free(pod, info):
            return _Failure(("node(s) didn't have free ports for the requested pod ports",), True)
        short = self._insufficient(pod, info)
        if short:
            return _Failure(tuple(short), True)
        return self._inter_pod(pod, info, all_infos)

    @staticmethod
    def _node_affinity_ok(pod: Obj, node: Obj) -> bool:
        spec = pod.get("spec") or {}
        labels = (node.get("metadata") or {}).get("labels") or {}
        for k, v in (spec.get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                return False
        required = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution")
        )
        if required is None:
            return True
        return any(node_selector_term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])

    @staticmethod
    def _host_ports(pod: Obj) -> set[tuple[str, int]]:
        out = set()
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    out.add((p.get("protocol", "TCP"), int(p["hostPort"])))
        return out

    def _ports_free(self, pod: Obj, info: NodeInfo) -> bool:
        wanted = self._host_ports(pod)
        if not wanted:
            return True
        return all(not (wanted & self._host_ports(p)) for p in info.pods)

    @staticmethod
    def _insufficient(pod: Obj, info: NodeInfo) -> list[str]:
        alloc = info.allocatable
        out = []
        if "pods" in alloc and len(info.pods) + 1 > alloc["pods"]:
            out.append("Too many pods")
        for res, want in sorted(pod_requests(pod).items()):
            if want <= 0 or res == "pods":
                continue
            have = alloc.get(res, Decimal(0))
            if info.requested.get(res, Decimal(0)) + want > have:
                out.append(f"Insufficient {res}")
        return out

    def _inter_pod(self, pod: Obj, info: NodeInfo, all_infos: list[NodeInfo]) -> _Failure | None:
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "")
        labels = meta.get("labels") or {}
        for term in _required_terms(pod, "podAffinity"):
            key = term.get("topologyKey", "")
            if key not in info.labels:
                return _Failure(("node(s) didn't match pod affinity rules",), False)
            in_domain = [
                p for i in all_infos if i.labels.get(key) == info.labels[key] for p in i.pods
            ]
            if any(_term_selects(term, pod, p["metadata"].get("namespace", ""), p["metadata"].get("labels") or {}) for p in in_domain):
                continue
            anywhere = any(
                _term_selects(term, pod, p["metadata"].get("namespace", ""), p["metadata"].get("labels") or {})
                for i in all_infos
                for p in i.pods
            )
            # The first pod of a self-affine group may go anywhere (upstream special case).
            if anywhere or not _term_selects(term, pod, ns, labels):
                return _Failure(("node(s) didn't match pod affinity rules",), False)
        for term in _required_terms(pod, "podAntiAffinity"):
            key = term.get("topologyKey", "")
            if key not in info.labels:
                continue
            for other_info in all_infos:
                if other_info.labels.get(key) != info.labels[key]:
                    continue
                for p in other_info.pods:
                    if _term_selects(term, pod, p["metadata"].get("namespace", ""), p["metadata"].get("labels") or {}):
                        return _Failure(("node(s) didn't match pod anti-affinity rules",), True)
        # Upstream checks the incoming pod's terms first, then existing pods' anti-affinity.
        for other_info in all_infos:
            for other in other_info.pods:
                for term in _required_terms(other, "podAntiAffinity"):
                    key = term.get("topologyKey", "")
                    if (
                        _term_selects(term, other, ns, labels)
                        and key in info.labels
                        and other_info.labels.get(key) == info.labels[key]
                    ):
                        return _Failure(("node(s) didn't satisfy existing pods anti-affinity rules",), True)
        return None

    # -- scoring ------------------------------------------------------------------------------

    @staticmethod
    def _score(pod: Obj, info: NodeInfo) -> float:
        alloc = info.allocatable
        req = pod_requests(pod)
        free = []
        for res in ("cpu", "memory"):
            cap = alloc.get(res, Decimal(0))
            if cap > 0:
                used = info.requested.get(res, Decimal(0)) + req.get(res, Decimal(0))
                free.append(float(max(Decimal(0), cap - used) / cap))
        score = 100.0 * sum(free) / len(free) if free else 0.0
        preferred = (
            ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
        ).get("preferredDuringSchedulingIgnoredDuringExecution") or []
        for pref in preferred:
            if node_selector_term_matches(pref.get("preference") or {}, info.node):
                score += float(pref.get("weight", 0))
        owner = _owner_uid(pod)
        if owner:
            score -= 10.0 * sum(1 for p in info.pods if _owner_uid(p) == owner)
        return score

    # -- the scheduling cycle -----------------------------------------------------------------

    def schedule(self, pod: Obj, infos: list[NodeInfo]) -> Decision:
        failures: dict[str, _Failure] = {}
        feasible: list[NodeInfo] = []
        for info in infos:
            failure = self._filter(pod, info, infos)
            if failure is None:
                feasible.append(info)
            else:
                failures[info.name] = failure
        if feasible:
            best = max(feasible, key=lambda i: (self._score(pod, i), _neg_name(i.name)))
            return Decision(best.name)
        if not infos:
            return Decision(None, "no nodes available to schedule pods")
        histogram = Counter(r for f in failures.values() for r in f.reasons)
        head = f"0/{len(infos)} nodes are available: " + ", ".join(
            sorted(f"{n} {r}" for r, n in histogram.items())
        ) + "."
        victims, node, post = self._preempt(pod, infos, failures)
        if node is not None:
            return Decision(None, head, nominated=node, victims=tuple(victims))
        return Decision(None, f"{head} {post}.")

    def _preempt(
        self, pod: Obj, infos: list[NodeInfo], failures: dict[str, _Failure]
    ) -> tuple[list[Obj], str | None, str]:
        if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
            return [], None, "preemption: not eligible due to preemptionPolicy=Never."
        prio = self._priority_of(pod)
        candidates: list[tuple[tuple[int, int, int, str], str, list[Obj]]] = []
        not_helpful = 0
        for info in infos:
            if not failures[info.name].resolvable:
                not_helpful += 1
                continue
            lower = sorted(
                (p for p in info.pods if self._priority_of(p) < prio),
                key=lambda p: -self._priority_of(p),
            )
            if not lower or self._filter(pod, info.without(lower), [i if i is not info else info.without(lower) for i in infos]) is not None:
                continue
            victims = list(lower)
            for p in list(lower):  # reprieve the most important victims first
                trial = [v for v in victims if v is not p]
                reduced = info.without(trial)
                if self._filter(pod, reduced, [i if i is not info else reduced for i in infos]) is None:
                    victims = trial
            key = (
                max(self._priority_of(v) for v in victims),
                sum(self._priority_of(v) for v in victims),
                len(victims),
                info.name,
            )
            candidates.append((key, info.name, victims))
        if candidates:
            _, node, victims = min(candidates, key=lambda c: c[0])
            return victims, node, ""
        parts = []
        if not_helpful:
            parts.append(f"{not_helpful} Preemption is not helpful for scheduling")
        if len(infos) - not_helpful:
            parts.append(f"{len(infos) - not_helpful} No preemption victims found for incoming pod")
        return [], None, f"preemption: 0/{len(infos)} nodes are available: " + ", ".join(sorted(parts)) + "."


def _neg_name(name: str) -> tuple[int, ...]:
    """Sort key that prefers the alphabetically first node among equal scores."""
    return tuple(-ord(ch) for ch in name)


def _owner_uid(pod: Obj) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _required_terms(pod: Obj, kind: str) -> list[Obj]:
    aff = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    return list(aff.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _term_selects(term: Obj, owner: Obj, namespace: str, labels: dict[str, str]) -> bool:
    """Does ``term`` (declared by ``owner``) select a pod in ``namespace`` with ``labels``?"""
    namespaces = term.get("namespaces") or []
    if namespaces:
        if namespace not in namespaces:
            return False
    elif term.get("namespaceSelector") is None and namespace != (owner.get("metadata") or {}).get("namespace"):
        return False
    return selector_matches(term.get("labelSelector"), labels)


class SchedulerController(Controller):
    """The scheduling queue: binds pending pods, reports failures, preempts, retries on change."""

    name = "scheduler"
    #: Upstream ``podMaxInUnschedulablePodsDuration``: unschedulable pods are retried at least this often.
    RETRY_SECONDS = 300.0

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.scheduler = Scheduler(self.priority_of)
        self.unschedulable: set[Key] = set()

    def priority_of(self, pod: Obj) -> int:
        spec = pod.get("spec") or {}
        name = spec.get("priorityClassName")
        if name:
            pc = self.ctx.cache.get("PriorityClass", "", name)
            if pc is not None:
                return int(pc.get("value", 0))
        if spec.get("priority") is not None:
            return int(spec["priority"])
        for pc in self.ctx.cache.list("PriorityClass"):
            if pc.get("globalDefault"):
                return int(pc.get("value", 0))
        return 0

    @staticmethod
    def _wants_scheduling(pod: Obj) -> bool:
        spec = pod.get("spec") or {}
        return (
            not spec.get("nodeName")
            and spec.get("schedulerName", "default-scheduler") == "default-scheduler"
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
            and ((pod.get("status") or {}).get("phase") or "Pending") == "Pending"
        )

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "Pod":
            key = Cache.key_of(obj)
            wants = event != "DELETED" and self._wants_scheduling(obj)
            if not wants:
                self.unschedulable.discard(key)
            keys = [key] if wants else []
            was_bound = old is not None and (old.get("spec") or {}).get("nodeName")
            if was_bound and (event == "DELETED" or pod_phase(obj) in ("Succeeded", "Failed")):
                keys.extend(sorted(self.unschedulable))  # its resources are free for the pods waiting
            return keys
        if kind in ("Node", "PriorityClass"):
            return sorted(self.unschedulable)
        return ()

    def snapshot_state(self) -> frozenset[Key]:
        return frozenset(self.unschedulable)

    def restore_state(self, state: frozenset[Key]) -> None:
        self.unschedulable = set(state)

    def _node_infos(self, pod: Obj) -> list[NodeInfo]:
        infos = {n["metadata"]["name"]: NodeInfo(n) for n in sorted(self.ctx.cache.list("Node"), key=lambda n: n["metadata"]["name"])}
        prio = self.priority_of(pod)
        me = pod["metadata"].get("uid")
        for p in self.ctx.cache.list("Pod"):
            if pod_phase(p) in ("Succeeded", "Failed") or p["metadata"].get("uid") == me:
                continue
            spec = p.get("spec") or {}
            node = spec.get("nodeName")
            if node is None:
                nominated = (p.get("status") or {}).get("nominatedNodeName")
                if nominated and self.priority_of(p) >= prio and nominated in infos:
                    infos[nominated].add(p)
                continue
            if node in infos:
                infos[node].add(p)
        return list(infos.values())

    def sync(self, key: Key) -> None:
        pod = self.ctx.cache.get("Pod", *key)
        if pod is None or not self._wants_scheduling(pod):
            self.unschedulable.discard(key)
            return
        decision = self.scheduler.schedule(pod, self._node_infos(pod))
        now = self.ctx.now()
        if decision.node is not None:
            self._bind(pod, decision.node, now)
            return
        self.unschedulable.add(key)
        for victim in decision.victims:
            vmeta = victim["metadata"]
            self.ctx.recorder.record(victim, "Normal", "Preempted",
                                     f"Preempted by pod {pod['metadata'].get('uid')} on node {decision.nominated}",
                                     component="default-scheduler")
            try:
                self.ctx.store.delete("Pod", vmeta.get("namespace"), vmeta["name"])
            except ApiError as e:
                if e.code != 404:
                    raise
        self.ctx.recorder.record(pod, "Warning", "FailedScheduling", decision.message, component="default-scheduler")
        status = clone(pod.get("status") or {})
        status["phase"] = "Pending"
        status["conditions"] = set_condition(
            status.get("conditions") or [],
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
             "reason": "Unschedulable", "message": decision.message},
            now,
        )
        if decision.nominated:
            status["nominatedNodeName"] = decision.nominated
        self.write_status(pod, status)
        self.requeue_at(key, now + self.RETRY_SECONDS)

    def _bind(self, pod: Obj, node: str, now: float) -> None:
        meta = pod["metadata"]
        bound = clone(pod)
        bound["spec"]["nodeName"] = node
        try:
            bound = self.ctx.store.update(bound)
        except ApiError as e:
            if e.code in (404, 409):
                return
            raise
        self.unschedulable.discard(Cache.key_of(pod))
        status = clone(bound.get("status") or {})
        status.pop("nominatedNodeName", None)
        status["conditions"] = set_condition(
            status.get("conditions") or [],
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None},
            now,
        )
        self.write_status(bound, status)
        self.ctx.recorder.record(bound, "Normal", "Scheduled",
                                 f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}",
                                 component="default-scheduler")
