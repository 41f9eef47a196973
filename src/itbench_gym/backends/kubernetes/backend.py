"""``KubernetesBackend``: the Backend contract on a real cluster (``make(..., backend="kubernetes")``).

Start provisions the scenario's app from ``envs/<app>/`` where it is missing, grants the agent
ITBench's access (a ServiceAccount token in a kubeconfig of its own) and waits until the app is
ready; the task then injects faults with the fault catalogue's API calls and polls the alerts API,
as on the twin. Time is the cluster's own (Prometheus' ``time()``). Nothing can be checkpointed, so
every reset injects afresh. Before the next episode and on close the cluster is put back to an
inventory taken before (:mod:`.inventory`): the next episode reuses the deployed app (warm), and
close leaves the cluster as it was found, or says what it could not put back. A warm start then
settles: ``settle_seconds`` pass and the app's alerts go back to those of the first episode's start,
so the next healthy baseline neither reads the last incident's telemetry nor counts its alerts as
standing (an alert still firing could never be seen to fire anew).

With a ``namespace_suffix`` (``ClusterConfig.for_worker``) every episode runs in a namespace set of
its own — each namespace the scenario names gets ``-<suffix>``, the app is provisioned there, its
agent is a ServiceAccount of that set with rights in it alone — so backends with different
suffixes run episodes on one cluster at once without seeing each other's objects. A scenario whose
faults change what every episode shares (``cluster_wide`` in the fault catalogue, or a namespace
outside the set) is refused there.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
from kubernetes import config as kube_config
from kubernetes import dynamic

from itbench_gym.backends.base import BackendError, Endpoints, Provisioning
from itbench_gym.backends.kubernetes import access, inventory, provision
from itbench_gym.backends.kubernetes.clock import ClusterClock
from itbench_gym.backends.kubernetes.config import ClusterConfig
from itbench_gym.backends.programs import RunningPrograms
from itbench_gym.backends.rbac import ServiceAccountRef, agent_namespaces, agent_service_account
from itbench_gym.clock import Clock, WallClock
from itbench_gym.faults.catalogue import catalogue
from itbench_gym.lang import yamltext
from itbench_gym.paths import envs_dir
from itbench_gym.spec.relocate import named_namespaces, relocate_spec
from itbench_gym.tools.alerts import alert_key, fetch_alerts
from itbench_gym.workdirs import WorkDir

if TYPE_CHECKING:
    from itbench_gym.spec import ScenarioSpec

#: Cluster seconds between two readings of the alerts while a warm start settles (a rule group's interval).
_SETTLE_POLL_SECONDS = 15.0


def scenario_namespaces(spec: ScenarioSpec) -> list[str]:
    """The app's namespace and every namespace the faults' objects live in (the agent is granted
    ``agent_namespaces``: these without the injection machinery's)."""
    found = [spec.namespace]

    def walk(value: Any) -> Iterator[str]:
        if isinstance(value, Mapping):
            obj = value.get("kubernetesObject")
            if isinstance(obj, Mapping) and isinstance((obj.get("metadata") or {}).get("namespace"), str):
                yield obj["metadata"]["namespace"]
            for v in value.values():
                yield from walk(v)
        elif isinstance(value, list):
            for v in value:
                yield from walk(v)

    for fault in spec.faults:
        found.extend(walk(fault.args))
    return list(dict.fromkeys(found))


class KubernetesBackend:
    """A real cluster through a kubeconfig (see the module doc); ``config`` defaults to ``$ITBENCH_GYM_CLUSTER``."""

    def __init__(self, config: ClusterConfig | None = None, envs_root: Path | None = None) -> None:
        self.config = config or ClusterConfig.from_environment()
        self._envs_root = envs_root or envs_dir()
        self._clock: Clock = ClusterClock(self.config.prometheus) if self.config.prometheus else WallClock()
        self._workdir: WorkDir | None = None
        self._api: Any = None
        self._objects: dynamic.DynamicClient | None = None
        self._endpoints: Endpoints | None = None
        #: the cluster as found, before this backend changed anything (what close puts back)
        self._found: inventory.Inventory | None = None
        #: the cluster right after the last start (what the next start puts back: the warm app)
        self._ready: inventory.Inventory | None = None
        self._app_namespaces: list[str] = []
        #: the alerts active (pending or firing) in the managed namespaces when the first episode's app was ready
        self._standing: set[frozenset[tuple[str, str]]] | None = None
        #: what provisioning, access and cleanup did (the harness's log, never the agent's)
        self.log: list[str] = []
        #: in a namespace set nothing cluster-scoped but the set's Namespaces is the episode's to change
        self._cluster_kinds = ("Namespace",) if self.config.namespace_suffix else inventory.CLUSTER_KINDS
        self._programs = RunningPrograms()

    # -- the contract ----------------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def programs(self) -> RunningPrograms:
        return self._programs

    @property
    def admin_kubeconfig(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the backend has not been started")
        return self._workdir.path / "admin" / "kubeconfig"

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            raise RuntimeError("the backend has not been started")
        return self._endpoints

    @property
    def baseline_key(self) -> Hashable | None:
        return None

    def setting_up(self) -> AbstractContextManager[None]:
        """Nothing: a set-up here mostly waits for the cluster."""
        return nullcontext()

    def place(self, spec: ScenarioSpec) -> ScenarioSpec:
        """The scenario in this backend's namespace set (``<namespace>-<suffix>``), or as it is without a suffix."""
        if spec.compliance is not None:
            raise BackendError(f"scenario {spec.id}: CISO scenarios run on the embedded twin only so far (backend='sim'); "
                               "a real cluster would need Kyverno installed and a RHEL 9 host reachable over SSH")
        if spec.task == "finops":
            raise BackendError(f"scenario {spec.id}: FinOps scenarios run on the embedded twin only so far (backend='sim'): "
                               "their grading compares the episode with a reference run of the healthy installation, which "
                               "needs snapshots a real cluster cannot take")
        suffix = self.config.namespace_suffix
        if suffix is None:
            return spec
        known = catalogue()
        for fault in spec.faults:
            shared = known[fault.id].cluster_wide if fault.id in known else None
            if shared:
                raise BackendError(f"scenario {spec.id}: fault {fault.id} cannot run in a namespace set beside other "
                                   f"episodes: {shared}; run it without namespace_suffix (one episode at a time)")
        try:
            placed = relocate_spec(spec, {ns: f"{ns}-{suffix}" for ns in scenario_namespaces(spec)})
        except ValueError as exc:
            raise BackendError(f"scenario {spec.id}: cannot move it to namespace set -{suffix}: {exc}") from None
        own = set(scenario_namespaces(placed))
        for fault in placed.faults:
            outside = sorted(named_namespaces(fault.args) - own)
            if outside:
                raise BackendError(f"scenario {spec.id}: fault {fault.id} acts in namespace(s) {', '.join(outside)}, which every "
                                   "episode on the cluster shares; run it without namespace_suffix (one episode at a time)")
        return placed

    def start(self, spec: ScenarioSpec, seed: int, provisioning: Provisioning | None = None) -> Endpoints:
        objects = self._connect()
        namespaces = scenario_namespaces(spec)
        account = self._account(spec)
        warm = self._ready  # the last episode's start: this one reuses its app
        if warm is not None:
            self._put_back(warm, "before the next episode")
        self._cover(objects, [*namespaces, account.namespace])
        app_dir = self._envs_root / spec.app
        self.log += provision.provision(objects, provision.app_objects(app_dir, spec.namespace))
        self.log += provision.provision(objects, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces])
        self.log += access.grant(objects, agent_namespaces(spec), account if self.config.namespace_suffix else None)
        if spec.namespace not in self._app_namespaces:
            self._app_namespaces.append(spec.namespace)
        self._wait_ready()
        if warm is not None:
            self._settle()
        elif self._standing is None:
            self._standing = self._active_alerts()
        assert self._workdir is not None
        agent = self._workdir.subdir("agent")
        access.agent_kubeconfig(objects, agent / "kubeconfig", spec.namespace, self.config.token_seconds, account)
        self._endpoints = Endpoints(
            kubeconfig=agent / "kubeconfig", kube_cache_dir=self._workdir.subdir("kube-cache"),
            prometheus=self.config.prometheus, loki=self.config.loki, jaeger=self.config.jaeger,
            grafana=self.config.grafana, alertmanager=self.config.alertmanager, opencost=self.config.opencost,
        )
        if provisioning is not None:
            provisioning.apply(self)
        assert self._found is not None
        self._ready = inventory.take(objects, self._found.namespaces, self._cluster_kinds)
        return self._endpoints

    def _account(self, spec: ScenarioSpec) -> ServiceAccountRef:
        """ITBench's agent account, or in a namespace set one of the set's own (``<app namespace>/agent``)."""
        return ServiceAccountRef(spec.namespace, "agent") if self.config.namespace_suffix else agent_service_account()

    def advance(self, seconds: float) -> None:
        self._clock.advance(seconds)

    @property
    def can_checkpoint(self) -> bool:
        return False

    def checkpoint(self) -> object | None:
        return None

    def restore(self, token: object) -> Endpoints:
        raise TypeError("a real cluster cannot be restored to a checkpoint")

    def save_incident(self, key: Hashable, incident: object) -> None:
        return None

    def restore_incident(self, key: Hashable) -> object | None:
        return None

    def set_time_limit(self, deadline: float | None) -> None:
        return None  # no request of the agent's blocks on the harness's clock here

    def admin_client(self) -> Any:
        self._connect()
        return self._api

    def harness_http(self) -> requests.Session:
        return requests.Session()

    def close(self) -> None:
        """Put the cluster back as it was found, wait for it to settle, and check it is so."""
        try:
            if self._found is not None and self._objects is not None:
                self._put_back(self._found, "on close")
        finally:
            self._found = self._ready = self._objects = self._endpoints = None
            if self._api is not None:
                self._api.close()
                self._api = None
            if isinstance(self._clock, ClusterClock):
                self._clock.close()
            if self._workdir is not None:
                self._workdir.close()
                self._workdir = None

    # -- helpers -----------------------------------------------------------------------------------
    def _connect(self) -> dynamic.DynamicClient:
        if self._objects is not None:
            return self._objects
        source = self.config.kubeconfig_path()
        try:
            document = yamltext.load(source.read_text())
        except OSError as exc:
            raise BackendError(f"{source}: cannot read the kubeconfig: {exc.strerror or exc}") from None
        if not isinstance(document, dict):
            raise BackendError(f"{source}: not a kubeconfig")
        if self.config.context is not None:
            if not any(c.get("name") == self.config.context for c in document.get("contexts") or []):
                raise BackendError(f"{source}: no context {self.config.context!r}")
            document["current-context"] = self.config.context
        self._workdir = WorkDir("cluster")
        admin = self._workdir.subdir("admin") / "kubeconfig"
        admin.touch(mode=0o600)
        admin.write_text(yamltext.dump(document))
        self._api = kube_config.new_client_from_config(config_file=str(admin))
        self._objects = dynamic.DynamicClient(self._api, cache_file=str(admin.parent / "discovery.json"))
        return self._objects

    def _cover(self, objects: dynamic.DynamicClient, namespaces: list[str]) -> None:
        """Record the cluster as found for namespaces not recorded yet (the cluster-scoped kinds the first time)."""
        wanted = list(dict.fromkeys(namespaces))
        if self._found is None:
            self._found = inventory.take(objects, wanted, self._cluster_kinds)
            return
        new = [ns for ns in wanted if ns not in self._found.namespaces]
        if new:
            more = inventory.take(objects, new, self._cluster_kinds)
            namespaced = {k: v for k, v in more.objects.items() if k[2] in new or (k[1] == "Namespace" and k[3] in new)}
            self._found = inventory.Inventory((*self._found.namespaces, *new), {**self._found.objects, **namespaced})

    def _put_back(self, baseline: inventory.Inventory, when: str) -> None:
        assert self._objects is not None
        now = inventory.take(self._objects, baseline.namespaces, self._cluster_kinds)
        self.log += inventory.restore(self._objects, baseline, now)
        self._wait_ready()
        left = baseline.difference(inventory.take(self._objects, baseline.namespaces, self._cluster_kinds))
        if left:
            raise BackendError(f"the cluster is not back at its baseline {when}: {left.summary()}")

    def _active_alerts(self) -> set[frozenset[tuple[str, str]]]:
        """Label sets of the alerts pending or firing in the managed namespaces (none known without Prometheus)."""
        if self.config.prometheus is None or self._found is None:
            return set()
        try:
            alerts = fetch_alerts(self.config.prometheus.rstrip("/"))
        except (requests.RequestException, ValueError, KeyError) as exc:
            raise BackendError(f"cannot read the alerts from {self.config.prometheus}: {exc}") from None
        managed = set(self._found.namespaces)
        return {frozenset(a["labels"].items()) for a in alerts
                if a.get("state") in ("pending", "firing") and a["labels"].get("namespace") in managed}

    def _settle(self) -> None:
        """After a put-back: let ``settle_seconds`` pass, then wait (up to ``ready_timeout``) until no alert
        is active in the managed namespaces that was not at the first episode's start."""
        self._clock.advance(self.config.settle_seconds)
        deadline = self._clock.now() + self.config.ready_timeout
        standing = self._standing or set()
        while left := self._active_alerts() - standing:
            if self._clock.now() >= deadline:
                names = ", ".join(sorted(alert_key(dict(a)) for a in left))
                raise BackendError(f"the app's alerts did not resolve within {self.config.ready_timeout:.0f} s "
                                   f"of putting the cluster back before the next episode: {names}")
            self._clock.advance(_SETTLE_POLL_SECONDS)
        self.log.append(f"settled: {self.config.settle_seconds:.0f} s after putting back, no alert left of the last episode")

    def _wait_ready(self) -> None:
        assert self._objects is not None
        for namespace in self._app_namespaces:
            try:
                provision.wait_ready(self._objects, namespace, self.config.ready_timeout)
            except TimeoutError as exc:
                raise BackendError(str(exc)) from None
