"""The default scheduler's decisions: filters, scoring, preemption and its failure messages.

Pending pods are the most common symptom an agent must explain, and ``kubectl describe pod``
shows the scheduler's own words ("0/3 nodes are available: 3 Insufficient memory. preemption:
..."), so the filters run in upstream's plugin order, report the first failure per node with the
upstream wording, and the message is assembled exactly like ``framework.FitError``.

The cost of a scheduling attempt does not grow with the number of pods in the cluster: like
kube-scheduler's cache, the controller keeps the pods that hold node resources indexed by node
(updated from watch events, a snapshot reused until placements change), so a flood of Pending
pods is not rescanned for every attempt. The queue is drained at the pace of the scheduler's
client (``clientConnection`` qps 50, burst 100: one request per attempt), the rest waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from itbench_gym.lang.selectors import node_selector_term_matches, selector_matches

from .controllers.base import Cache, Context, Controller, Key
from .controllers.ratelimit import SCHEDULER_BURST, SCHEDULER_QPS, TokenBucket
from .controllers.util import pod_phase, pod_requests, quantity, set_condition
from .controllers.volumes import SELECTED_NODE_ANNOTATION, claim_names, waits_for_consumer
from .errors import ApiError, is_storage_error
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
    #: each pod's requests (same order as ``pods``), so copies need no quantity parsing
    pod_requests: list[dict[str, Decimal]] = field(default_factory=list)
    #: the pods that declare required anti-affinity (the only ones existing-pod checks look at)
    anti: list[Obj] = field(default_factory=list)
    #: pods per controller uid (for spreading replicas)
    owners: Counter[str] = field(default_factory=Counter)

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

    def add(self, pod: Obj, requests: dict[str, Decimal] | None = None) -> None:
        req = pod_requests(pod) if requests is None else requests
        self.pods.append(pod)
        self.pod_requests.append(req)
        for k, v in req.items():
            self.requested[k] = self.requested.get(k, Decimal(0)) + v
        if _required_terms(pod, "podAntiAffinity"):
            self.anti.append(pod)
        owner = _owner_uid(pod)
        if owner:
            self.owners[owner] += 1

    def without(self, victims: list[Obj]) -> NodeInfo:
        gone = {id(v) for v in victims}
        out = NodeInfo(self.node)
        for p, req in zip(self.pods, self.pod_requests, strict=True):
            if id(p) not in gone:
                out.add(p, req)
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
            for other in other_info.anti:
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
            score -= 10.0 * info.owners[owner]
        return score

    # -- the scheduling cycle -----------------------------------------------------------------

    def schedule(self, pod: Obj, infos: list[NodeInfo], rejected: str | None = None) -> Decision:
        """``rejected``: a PreFilter plugin's UnschedulableAndUnresolvable reason (no node is tried)."""
        if rejected is not None:
            n = len(infos)
            return Decision(None, f"0/{n} nodes are available: {rejected}. preemption: 0/{n} nodes are available: "
                                  f"{n} Preemption is not helpful for scheduling..")
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
            lower = sorted(  # most important first (upstream MoreImportantPod: priority, then age)
                (p for p in info.pods if self._priority_of(p) < prio),
                key=lambda p: (-self._priority_of(p), (p.get("status") or {}).get("startTime")
                               or p["metadata"].get("creationTimestamp") or "", p["metadata"].get("namespace", ""),
                               p["metadata"]["name"]),
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


#: A timer key that wakes the scheduling queue when the client has tokens again (names no pod).
_WAKE: Key = ("", "")


def _holds_node(pod: Obj | None) -> str | None:
    """The node whose resources ``pod`` holds: bound and not finished (terminating pods still do)."""
    if pod is None:
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or pod_phase(pod) in ("Succeeded", "Failed"):
        return None
    return str(node)


def _pod_updated(old: Obj, new: Obj) -> bool:
    """A change other than status and bookkeeping metadata (what makes upstream retry a pod)."""
    if old.get("spec") != new.get("spec"):
        return True
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    return any(om.get(k) != nm.get(k) for k in ("labels", "annotations", "deletionTimestamp", "ownerReferences"))


def _nominated_node(pod: Obj | None) -> str | None:
    if pod is None or (pod.get("spec") or {}).get("nodeName") or pod_phase(pod) in ("Succeeded", "Failed"):
        return None
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    return str(nominated) if nominated else None


class SchedulerController(Controller):
    """The scheduling queue: binds pending pods, reports failures, preempts, retries on change."""

    name = "scheduler"
    #: Upstream ``podMaxInUnschedulablePodsDuration``: unschedulable pods are retried at least this often.
    RETRY_SECONDS = 300.0

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.scheduler = Scheduler(self.priority_of)
        self.unschedulable: set[Key] = set()
        self.limiter = TokenBucket.full(SCHEDULER_QPS, SCHEDULER_BURST, ctx.now())
        #: an event freed resources or changed nodes: every unschedulable pod goes back in the queue
        self._flush = False
        self._reset_cache()

    # -- the scheduler cache --------------------------------------------------------------------

    def _reset_cache(self) -> None:
        #: node -> pods holding its resources; pod -> its node; pods nominated to a node
        self._placed: dict[str, dict[Key, Obj]] = {}
        self._where: dict[Key, str] = {}
        self._nominated: dict[Key, Obj] = {}
        self._requests: dict[str, dict[str, Decimal]] = {}
        self._snapshot: dict[str, NodeInfo] | None = None
        self._cache_ready = False

    def _ensure_cache(self) -> None:
        """Build the index from the informer cache (at start and after a restore), then keep it by events."""
        if self._cache_ready:
            return
        self._cache_ready = True
        for pod in self.ctx.cache.list("Pod"):
            self._track(Cache.key_of(pod), pod)

    def _requests_of(self, pod: Obj) -> dict[str, Decimal]:
        uid = str(pod["metadata"].get("uid", ""))
        req = self._requests.get(uid)
        if req is None:  # a pod's resources are immutable, so its uid names its requests
            req = self._requests[uid] = pod_requests(pod)
        return req

    def _track(self, key: Key, pod: Obj | None) -> None:
        """Record where ``pod`` (None: deleted) now holds resources, keeping the snapshot current."""
        old_node = self._where.get(key)
        new_node = _holds_node(pod)
        if old_node is not None:
            old = self._placed[old_node][key]
            if (pod is not None and new_node == old_node and old["metadata"].get("uid") == pod["metadata"].get("uid")
                    and old["metadata"].get("labels") == pod["metadata"].get("labels")):
                self._placed[old_node][key] = pod  # a status change: the snapshot stays valid
            else:
                del self._placed[old_node][key]
                if not self._placed[old_node]:
                    del self._placed[old_node]
                del self._where[key]
                self._snapshot = None
                if pod is None or pod["metadata"].get("uid") != old["metadata"].get("uid"):
                    self._requests.pop(str(old["metadata"].get("uid", "")), None)
        if pod is not None and new_node is not None and key not in self._where:
            self._placed.setdefault(new_node, {})[key] = pod
            self._where[key] = new_node
            if self._snapshot is not None and new_node in self._snapshot:
                self._snapshot[new_node].add(pod, self._requests_of(pod))  # a new binding: add in place
            else:
                self._snapshot = None
        if pod is not None and _nominated_node(pod) is not None:
            self._nominated[key] = pod
        else:
            gone = self._nominated.pop(key, None)
            if gone is not None and key not in self._where:
                self._requests.pop(str(gone["metadata"].get("uid", "")), None)

    def _base_infos(self) -> dict[str, NodeInfo]:
        if self._snapshot is None:
            infos = {n["metadata"]["name"]: NodeInfo(n)
                     for n in sorted(self.ctx.cache.list("Node"), key=lambda n: n["metadata"]["name"])}
            for node, placed in self._placed.items():
                info = infos.get(node)
                if info is not None:
                    for pod in placed.values():
                        info.add(pod, self._requests_of(pod))
            self._snapshot = infos
        return self._snapshot

    def _node_infos(self, pod: Obj) -> list[NodeInfo]:
        """The nodes as the pod sees them: bound pods, plus nominations of pods at least as important."""
        self._ensure_cache()
        infos = self._base_infos()
        me = pod["metadata"].get("uid")
        extra: dict[str, list[Obj]] = {}
        if self._nominated:
            prio = self.priority_of(pod)
            for other in self._nominated.values():
                node = _nominated_node(other)
                if (node in infos and other["metadata"].get("uid") != me
                        and self.priority_of(other) >= prio):
                    extra.setdefault(str(node), []).append(other)
        if not extra:
            return list(infos.values())
        out = []
        for name, info in infos.items():
            if name in extra:
                info = info.without([])
                for other in extra[name]:
                    info.add(other, self._requests_of(other))
            out.append(info)
        return out

    # -- queue ----------------------------------------------------------------------------------

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
            if self._cache_ready:
                self._track(key, None if event == "DELETED" else obj)
            wants = event != "DELETED" and self._wants_scheduling(obj)
            if not wants:
                self.unschedulable.discard(key)
            elif key in self.unschedulable and old is not None and not _pod_updated(old, obj):
                wants = False  # upstream isPodUpdated: its own status write does not requeue a pod
            keys = [key] if wants else []
            was_bound = old is not None and (old.get("spec") or {}).get("nodeName")
            if was_bound and (event == "DELETED" or pod_phase(obj) in ("Succeeded", "Failed")) and self.unschedulable:
                self._flush = True  # its resources are free for the pods waiting
                keys.append(_WAKE)
            return keys
        if kind in ("Node", "PriorityClass", "PersistentVolumeClaim", "StorageClass"):
            if kind == "Node":
                self._snapshot = None
            if self.unschedulable:
                self._flush = True
                return [_WAKE]
        return ()

    def snapshot_state(self) -> tuple[frozenset[Key], TokenBucket]:
        return frozenset(self.unschedulable), self.limiter.copy()

    def restore_state(self, state: tuple[frozenset[Key], TokenBucket] | None) -> None:
        unschedulable, limiter = state if state is not None else (frozenset(), None)
        self.unschedulable = set(unschedulable)
        self.limiter = limiter.copy() if limiter is not None else TokenBucket.full(
            SCHEDULER_QPS, SCHEDULER_BURST, self.ctx.now())
        self._flush = False
        self._reset_cache()

    def drain(self) -> int:
        """Schedule queued pods while the client has tokens; the rest wait for the wake-up timer."""
        if self._flush:
            self._flush = False
            for key in sorted(self.unschedulable):  # upstream MoveAllToActiveOrBackoffQueue
                self.queue[key] = None
        self.queue.pop(_WAKE, None)
        n = 0
        now = self.ctx.now()
        while self.queue:
            if not self.limiter.ready(now):
                wanted = min(len(self.queue), self.limiter.burst)
                self.requeue_at(_WAKE, self.limiter.ready_at(now, wanted))
                break
            key = next(iter(self.queue))
            del self.queue[key]
            self.sync_with_retry(key)
            n += 1
        return n

    def sync(self, key: Key) -> None:
        pod = self.ctx.cache.get("Pod", *key)
        if pod is None or not self._wants_scheduling(pod):
            self.unschedulable.discard(key)
            return
        now = self.ctx.now()
        self.limiter.take(1, now)  # the binding, or the status patch of a failed attempt
        rejected, delayed = self._volume_binding(pod)
        decision = self.scheduler.schedule(pod, self._node_infos(pod), rejected)
        if decision.node is not None:
            self._select_node(delayed, decision.node)
            self._bind(pod, decision.node, now)
            return
        self.unschedulable.add(key)
        for victim in decision.victims:
            vmeta = victim["metadata"]
            self.ctx.recorder.record(victim, "Normal", "Preempted",
                                     f"Preempted by pod {pod['metadata'].get('uid')} on node {decision.nominated}",
                                     component="default-scheduler")
            self.limiter.take(1, now)
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

    def _volume_binding(self, pod: Obj) -> tuple[str | None, list[Obj]]:
        """The VolumeBinding PreFilter: why the pod's claims rule out every node (a missing claim, one
        being deleted, an unbound claim that binds immediately), and the claims that wait for this pod's node."""
        namespace = pod["metadata"].get("namespace", "")
        delayed = []
        unbound_immediate = False
        for name in claim_names(pod):
            claim = self.ctx.cache.get("PersistentVolumeClaim", namespace, name)
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found', []
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                return f'persistentvolumeclaim "{name}" is being deleted', []
            if (claim.get("spec") or {}).get("volumeName"):
                continue
            if waits_for_consumer(self.ctx.cache, claim):
                delayed.append(claim)
            else:
                unbound_immediate = True
        if unbound_immediate:
            return "pod has unbound immediate PersistentVolumeClaims", []
        return None, delayed

    def _select_node(self, claims: list[Obj], node: str) -> None:
        """The volume binder's assumption: ``WaitForFirstConsumer`` claims learn the chosen node
        (their provisioner then makes the volume there)."""
        for claim in claims:
            annotated = clone(claim)
            annotated["metadata"].setdefault("annotations", {})[SELECTED_NODE_ANNOTATION] = node
            try:
                self.ctx.store.update(annotated)
            except ApiError as e:
                if e.code not in (404, 409) and not is_storage_error(e):
                    raise

    def _bind(self, pod: Obj, node: str, now: float) -> None:
        meta = pod["metadata"]
        bound = clone(pod)
        bound["spec"]["nodeName"] = node
        try:
            bound = self.ctx.store.update(bound)
        except ApiError as e:
            if e.code in (404, 409) or is_storage_error(e):
                return  # gone, raced, or the store is full: the pod stays in the queue's retry
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
