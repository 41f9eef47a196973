"""``KubeCluster``: the twin's Kubernetes control plane and nodes behind one object.

The lead composes the twin from this: an object store (served by the API server), the
controllers, the scheduler and the kubelets, all driven by the simulated clock. ``reconcile()``
runs the controllers to a fixed point (everything a real cluster does within a second or so;
bulk pod work beyond a controller's burst and client rate limit waits for a timer, so no single
reconcile or tick does unbounded work, see ``controllers/ratelimit.py``);
``tick(now)`` first replays every timed transition due up to ``now`` at its exact instant (image
pulls, container starts, back-offs, probes, HPA syncs), so a 15 s tick and fifteen 1 s ticks
leave the same state.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ....clock import SimClock
from ..chaos import chaos_controllers
from .apiload import ApiLoad, ApiLoadSnapshot
from .apiserver import Usage
from .auth import tls_material
from .controllers.base import WATCHED_KINDS, Cache, Context, Controller, Key, Timers
from .controllers.daemonset import DaemonSetController
from .controllers.deployment import DeploymentController
from .controllers.endpoints import EndpointsController
from .controllers.gatekeeper import GatekeeperEngine, GatekeeperTemplateController
from .controllers.gatekeeper_audit import GatekeeperAuditController
from .controllers.gatewayaddress import GatewayAddressController
from .controllers.hpa import HpaController
from .controllers.job import CronJobController, JobController
from .controllers.kyverno import KyvernoAdmission, PolicyCache
from .controllers.kyverno_reports import KyvernoReportsController
from .controllers.kyverno_webhook import KyvernoWebhookController
from .controllers.loadbalancer import LoadBalancerController
from .controllers.pvcprotection import PVCProtectionController
from .controllers.pvprotection import PVProtectionController
from .controllers.quota import QuotaController
from .controllers.replicaset import ReplicaSetController
from .controllers.rootca import RootCAPublisher
from .controllers.serviceaccounts import ServiceAccountsController
from .controllers.statefulset import StatefulSetController
from .controllers.util import USAGE_WINDOW_SECONDS
from .controllers.volumes import VolumeBinderController
from .errors import ApiError
from .etcd import Etcd, EtcdSnapshot
from .events import EventRecorder, EventState
from .kubelet import Kubelet
from .nodes import NodeController
from .runtime import ContainerRuntime, DefaultRuntime
from .scheduler import SchedulerController
from .store import DEFAULT_EVENT_QUOTA_BYTES, DEFAULT_QUOTA_BYTES, ObjectStore, StoreSnapshot
from .webhooks import WebhookDispatcher

Obj = dict[str, Any]

#: A safety net against controllers that never settle (each sync would have to keep re-dirtying).
MAX_SYNCS_PER_RECONCILE = 200_000

#: What kubelet, container runtime and system daemons use on every node besides the pods.
SYSTEM_DAEMONS_USAGE = (0.1, 512.0 * 2**20)

#: Cluster-scoped kinds first, so namespaced objects find their namespace and nodes exist to schedule on.
_APPLY_ORDER = {"Namespace": 0, "Node": 1, "PriorityClass": 1, "CustomResourceDefinition": 1}


class _ClusterTime:
    """The store's clock: the instant being replayed during ``tick``, otherwise the real clock."""

    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.at: float | None = None

    def now(self) -> float:
        return self.at if self.at is not None else self.clock.now()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)


@dataclass(frozen=True)
class ClusterSnapshot:
    store: StoreSnapshot
    cache: dict[str, dict[Key, Obj]]
    timers: Timers
    name_counter: int
    events: EventState
    usage: dict[tuple[str, str, str], tuple[float, float]]
    controllers: dict[str, Any]
    seed: int
    apiload: ApiLoadSnapshot | None = None
    etcd: EtcdSnapshot | None = None


class KubeCluster:
    """Object store + controllers + scheduler + kubelets on a simulated clock."""

    def __init__(self, clock: SimClock, *, runtime: ContainerRuntime | None = None, seed: int = 0,
                 quota_bytes: int = DEFAULT_QUOTA_BYTES, event_quota_bytes: int = DEFAULT_EVENT_QUOTA_BYTES,
                 root_ca: str | None = None) -> None:
        """``root_ca``: the CA bundle the API server's certificate verifies against (every namespace's
        ``kube-root-ca.crt``); the cache folder's CA (``auth.tls_material``) when not given."""
        self.clock = clock
        self._time = _ClusterTime(clock)
        self.store = ObjectStore(self._time, seed=seed, quota_bytes=quota_bytes, event_quota_bytes=event_quota_bytes)
        self.cache = Cache()
        self.recorder = EventRecorder(self.store, self._time.now)
        self.ctx = Context(self.store, self.cache, self.recorder, self._time.now, seed)
        self._usage: dict[tuple[str, str, str], tuple[float, float]] = {}
        self.kubelet = Kubelet(self.ctx, runtime or DefaultRuntime())
        self.scheduler = SchedulerController(self.ctx)
        self.replicasets = ReplicaSetController(self.ctx)
        self.hpa = HpaController(self.ctx, self._pod_usage)
        self.statefulsets = StatefulSetController(self.ctx)
        self.daemonsets = DaemonSetController(self.ctx)
        self.jobs = JobController(self.ctx)
        self.cronjobs = CronJobController(self.ctx)
        #: the API server's request load (``apiload.py``), worked out on each scrape tick
        #: etcd's disk (``etcd.py``): its syncs and commits, and what a write waits for its save
        self.etcd = Etcd(self.store)
        self.apiload = ApiLoad(self.store, etcd=self.etcd)
        #: the API server's validating-webhook admission, which the policy engines below serve
        self.webhooks = WebhookDispatcher(self.store)
        self.store.webhooks = self.webhooks
        kyverno_policies = PolicyCache(self.store)
        kyverno_reports = KyvernoReportsController(self.ctx, kyverno_policies)
        kyverno_admission = KyvernoAdmission(self.store, kyverno_policies, kyverno_reports.record_admission)
        gatekeeper = GatekeeperEngine(self.store)
        self.controllers: list[Controller] = [
            # first: a new namespace's CA bundle exists before the kubelet mounts any pod's token volume
            RootCAPublisher(self.ctx, root_ca if root_ca is not None else tls_material().ca_pem.decode()),
            DeploymentController(self.ctx),
            self.replicasets,
            self.statefulsets,
            self.daemonsets,
            self.cronjobs,
            self.jobs,
            self.scheduler,
            self.kubelet,
            NodeController(self.ctx),
            EndpointsController(self.ctx),
            LoadBalancerController(self.ctx),
            GatewayAddressController(self.ctx),
            QuotaController(self.ctx),
            ServiceAccountsController(self.ctx),
            VolumeBinderController(self.ctx),
            PVCProtectionController(self.ctx),
            PVProtectionController(self.ctx),
            self.hpa,
            *chaos_controllers(self.ctx, self.kill_container),
            KyvernoWebhookController(self.ctx, self.webhooks, kyverno_policies, kyverno_admission),
            kyverno_reports,
            GatekeeperTemplateController(self.ctx, self.webhooks, gatekeeper),
            GatekeeperAuditController(self.ctx, gatekeeper),
        ]
        self._by_name = {c.name: c for c in self.controllers}
        for kind in WATCHED_KINDS:
            for obj in self.store.list(kind):
                self.cache.apply("ADDED", obj)
        self.store.subscribe(self._on_event)
        self.store.on_settle(self.reconcile)

    # -- event dispatch -------------------------------------------------------------------------

    def _on_event(self, event: str, obj: Obj) -> None:
        kind = obj.get("kind", "")
        if kind not in WATCHED_KINDS:
            return
        old = self.cache.apply(event, obj)
        if kind == "Pod" and event == "DELETED":
            meta = obj["metadata"]
            for k in [k for k in self._usage if k[0] == meta.get("namespace") and k[1] == meta["name"]]:
                del self._usage[k]
        for c in self.controllers:
            for key in c.keys_for(event, kind, obj, old):
                c.enqueue(key)

    def _drain(self) -> None:
        total = 0
        while True:
            progressed = 0
            for c in self.controllers:
                progressed += c.drain()
            if not progressed:
                return
            total += progressed
            if total > MAX_SYNCS_PER_RECONCILE:
                busy = [c.name for c in self.controllers if c.queue]
                raise RuntimeError(f"controllers did not settle after {total} syncs (still busy: {busy})")

    # -- the facade -----------------------------------------------------------------------------

    def apply(self, objs: list[Obj]) -> None:
        """Create or replace objects as an administrator (status included), then reconcile."""
        ordered = sorted(enumerate(objs), key=lambda io: (_APPLY_ORDER.get(io[1].get("kind", ""), 2), io[0]))
        for _, obj in ordered:
            self._apply_one(obj)
        self.reconcile()

    def _apply_one(self, obj: Obj) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ValueError(f"cannot apply {obj!r}: not a Kubernetes object with metadata")
        meta = obj["metadata"]
        where = f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")
        try:
            try:
                self.store.create(obj)
                return
            except ApiError as e:
                if e.code != 409:
                    raise
            current = self.store.get(obj["kind"], meta.get("namespace"), meta["name"], obj.get("apiVersion"))
            replacement = copy.deepcopy(obj)
            replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            updated = self.store.update(replacement)
            if "status" in obj and updated.get("status") != obj["status"]:
                updated["status"] = copy.deepcopy(obj["status"])
                self.store.update(updated, subresource="status")
        except ApiError as e:
            raise ValueError(f"cannot apply {where}: {e.message}") from e

    def reconcile(self) -> None:
        """Run every controller until nothing is left to do at the current instant."""
        self._drain()

    def tick(self, now: float) -> None:
        """Replay every timed transition due up to ``now`` at its own instant, then settle at ``now``."""
        if now > self.clock.now():
            self.clock.set(now)
        try:
            while True:
                due = self.ctx.timers.next_due()
                if due is None or due > now:
                    break
                self._time.at = max(due, self._time.at or due)
                for name, key in self.ctx.timers.pop_due(self._time.at):
                    self._by_name[name].enqueue(key)
                self._drain()
            self._time.at = now
            for key in self.kubelet.probing_pods():
                self.kubelet.enqueue(key)
            self.recorder.expire()
            self._drain()
        finally:
            self._time.at = None

    def kill_container(
        self, namespace: str, pod: str, container: str, *, reason: str = "OOMKilled", exit_code: int = 137,
        message: str = "",
    ) -> None:
        """End a running container from outside (OOM killer); restartPolicy and back-off decide what follows."""
        self.kubelet.kill((namespace, pod), container, reason=reason, exit_code=exit_code, message=message)
        for k in [k for k in self._usage if k == (namespace, pod, container)]:
            del self._usage[k]
        self.reconcile()

    def container_file(self, namespace: str, pod: str, container: str, path: str) -> str | None:
        """The text a container's process reads at absolute ``path`` from its volumes now (the kubelet's view)."""
        obj = self.cache.get("Pod", namespace, pod)
        spec = next((c for key in ("containers", "initContainers") for c in ((obj or {}).get("spec") or {}).get(key) or []
                     if c.get("name") == container), None)
        return self.kubelet.reader(obj, spec)(path) if obj is not None and spec is not None else None

    def set_usage(self, namespace: str, pod: str, container: str, *, cpu_cores: float, memory_bytes: float) -> None:
        """The container's current CPU (cores) and working-set memory (bytes), for metrics and the HPA."""
        obj = self.cache.get("Pod", namespace, pod)
        if obj is None:
            raise KeyError(f"set_usage: pod {namespace}/{pod} does not exist")
        names = {c.get("name") for c in (obj.get("spec") or {}).get("containers") or []} | {
            c.get("name") for c in (obj.get("spec") or {}).get("initContainers") or []}
        if container not in names:
            raise KeyError(f"set_usage: pod {namespace}/{pod} has no container {container!r}")
        if cpu_cores < 0 or memory_bytes < 0:
            raise ValueError(f"set_usage: usage of {namespace}/{pod}/{container} cannot be negative")
        self._usage[(namespace, pod, container)] = (float(cpu_cores), float(memory_bytes))

    def working_set(self, namespace: str, pod: str, container: str) -> float:
        """The container's working-set memory (bytes) as the last tick settled it; 0 when it has none."""
        return self._usage.get((namespace, pod, container), (0.0, 0.0))[1]

    def _pod_usage(self, namespace: str, pod: str) -> dict[str, tuple[float, float]] | None:
        running = self._running_containers(namespace, pod)
        out = {c: self._usage[(namespace, pod, c)] for c in running if (namespace, pod, c) in self._usage}
        return out or None

    def _running_containers(self, namespace: str, pod: str) -> list[str]:
        obj = self.cache.get("Pod", namespace, pod)
        if obj is None:
            return []
        return [
            s["name"] for s in (obj.get("status") or {}).get("containerStatuses") or []
            if "running" in (s.get("state") or {})
        ]

    def usage(self) -> Usage:
        """Usage of every running container now, as metrics-server reports it (``kubectl top``)."""
        pods: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
        nodes: dict[str, tuple[float, float]] = {}
        for n in self.cache.list("Node"):
            nodes[n["metadata"]["name"]] = SYSTEM_DAEMONS_USAGE
        for (ns, pod, name), (cpu, mem) in sorted(self._usage.items()):
            if name not in self._running_containers(ns, pod):
                continue
            pods.setdefault((ns, pod), {})[name] = (cpu, mem)
            node = ((self.cache.get("Pod", ns, pod) or {}).get("spec") or {}).get("nodeName")
            if node in nodes:
                nodes[node] = (nodes[node][0] + cpu, nodes[node][1] + mem)
        return Usage(pods=pods, nodes=nodes, window=USAGE_WINDOW_SECONDS)

    # -- snapshots ------------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """All cluster state (store, controller memory, kubelet state, usage); restoring is cheap."""
        return ClusterSnapshot(
            store=self.store.snapshot(),
            cache=self.cache.snapshot(),
            timers=self.ctx.timers.copy(),
            name_counter=self.ctx.name_counter,
            events=self.recorder.snapshot(),
            usage=dict(self._usage),
            controllers={c.name: c.snapshot_state() for c in self.controllers},
            seed=self.ctx.seed,
            apiload=self.apiload.snapshot(),
            etcd=self.etcd.snapshot(),
        )

    def restore(self, snap: ClusterSnapshot) -> None:
        """Return to ``snap`` (the clock is not moved: it never runs backwards)."""
        self.store.restore(snap.store)
        self.cache.restore(snap.cache)
        self.ctx.timers = snap.timers.copy()
        self.ctx.name_counter = snap.name_counter
        self.recorder.restore(snap.events)
        self._usage = dict(snap.usage)
        if snap.apiload is not None:
            self.apiload.restore(snap.apiload)
        if snap.etcd is not None:
            self.etcd.restore(snap.etcd)
        for c in self.controllers:
            c.queue.clear()
            c.retries.clear()
            c.restore_state(snap.controllers.get(c.name))
        self.reseed(snap.seed)

    def reseed(self, seed: int) -> None:
        """Derive what is generated from now on (uids, names, Service IPs, chaos picks) from ``seed``.

        Objects that exist keep their names and addresses: a cluster restored from a shared baseline
        and reseeded goes on as a cluster built with that seed would, from that moment.
        """
        self.ctx.seed = seed
        self.store.reseed(seed)
