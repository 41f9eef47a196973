"""``SimBackend``: the embedded twin behind loopback servers, with baselines and incidents shared in the process."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import requests
from werkzeug.exceptions import NotFound

from itbench_gym.backends.base import Endpoints, Provisioning
from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.programs import RunningPrograms, TwinTime
from itbench_gym.backends.rbac import HARNESS_NAMESPACES, agent_namespaces, agent_rbac_objects
from itbench_gym.backends.sim.baselines import BASELINE_SEED, SHARED_BASELINES, BaselineKey
from itbench_gym.backends.sim.clustertwin import AnySnapshot, AnyTwin, ClusterTwin, ClusterTwinSnapshot, is_cluster_env
from itbench_gym.backends.sim.gc_pause import gc_paused
from itbench_gym.backends.sim.incidents import SHARED_INCIDENTS, SavedIncident
from itbench_gym.backends.sim.inprocess import WSGIPoolManager, in_process_session
from itbench_gym.backends.sim.kube.apiserver import make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, Visibility, tls_material
from itbench_gym.backends.sim.loki import make_loki_app
from itbench_gym.backends.sim.opencost_api import make_opencost_app
from itbench_gym.backends.sim.prometheus_api import make_prometheus_app
from itbench_gym.backends.sim.server import ServerHandle, serve, stop_all
from itbench_gym.backends.sim.traces import make_jaeger_app
from itbench_gym.backends.sim.twin import Twin, TwinSnapshot
from itbench_gym.clock import SIM_EPOCH, SimClock
from itbench_gym.paths import envs_dir
from itbench_gym.spec import ScenarioSpec
from itbench_gym.workdirs import WorkDir

HIDDEN_API_GROUPS = ("chaos-mesh.org",)
#: Twins one backend keeps (one per app and scenario environment), least recently used dropped first.
_CACHED_TWINS = 4

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


@dataclass(frozen=True)
class SimCheckpoint:
    """A whole twin's state plus the scenario it serves."""

    twin: AnyTwin
    spec: ScenarioSpec
    snapshot: AnySnapshot


class _Switch:
    """A WSGI app that forwards to whichever twin is current, so servers outlive resets. Without a
    target (a component the current scenario does not have) every path is 404: nothing is served."""

    def __init__(self) -> None:
        self.target: WSGIApp | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if self.target is None:
            return NotFound()(environ, start_response)
        return self.target(environ, start_response)


class SimBackend:
    """The default backend: no cluster, no network beyond 127.0.0.1, deterministic under a seed."""

    def __init__(self, envs_root: Path | None = None, *, kube_port: int = 0) -> None:
        self._clock = SimClock()
        self._kube_port = kube_port
        self._envs_root = envs_root or envs_dir()
        self._twins: OrderedDict[BaselineKey, AnyTwin] = OrderedDict()
        self._baseline_key: BaselineKey | None = None
        self._twin: AnyTwin | None = None
        self._spec: ScenarioSpec | None = None
        self._deadline: float | None = None
        self._kube_switch = _Switch()
        self._prom_switch = _Switch()
        self._jaeger_switch = _Switch()
        self._loki_switch = _Switch()
        self._opencost_switch = _Switch()
        self._servers: list[ServerHandle] = []
        self._workdir: WorkDir | None = None
        #: Every server the twin runs; ``_endpoints`` is what the current scenario's agent gets of them.
        self._served: Endpoints | None = None
        self._endpoints: Endpoints | None = None
        self._auth: Auth | None = None
        self._admin: Any = None
        self._programs = RunningPrograms(time_source=TwinTime(self._clock.now, self._advance_blocking))

    @property
    def clock(self) -> SimClock:
        return self._clock

    @property
    def programs(self) -> RunningPrograms:
        return self._programs

    @property
    def admin_kubeconfig(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("the backend has not been started")
        return self._workdir.path / "admin" / "kubeconfig"

    def admin_client(self) -> Any:
        """The admin credential and the servers stay the same from the first start to ``close``; the
        client's requests reach the Kubernetes API's app in-process (``inprocess.py``)."""
        if self._admin is None:
            from kubernetes import config as kube_config  # the client library costs its import only when used

            self._admin = kube_config.new_client_from_config(config_file=str(self.admin_kubeconfig))
            self._admin.rest_client.pool_manager = WSGIPoolManager(self._kube_switch)
        return self._admin

    def harness_http(self) -> requests.Session:
        """Requests to the twin's Prometheus (alerts, rules, queries) reach its app in-process."""
        if self._served is None:
            raise RuntimeError("the backend has not been started")
        return in_process_session({self._served.prometheus: self._prom_switch} if self._served.prometheus else {})

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            raise RuntimeError("the backend has not been started")
        return self._endpoints

    @property
    def twin(self) -> AnyTwin:
        if self._twin is None:
            raise RuntimeError("the backend has not been started")
        return self._twin

    @property
    def kube_url(self) -> str:
        if not self._servers:
            raise RuntimeError("the backend has not been started")
        return self._servers[0].url

    def place(self, spec: ScenarioSpec) -> ScenarioSpec:
        """Every scenario runs where it says: each env has a twin of its own."""
        return spec

    def start(self, spec: ScenarioSpec, seed: int, provisioning: Provisioning | None = None) -> Endpoints:
        """The app's healthy baseline (shared by the process, ``baselines.py``), reseeded with ``seed``.

        What ``provisioning`` deploys is part of the shared start: deployed once on the healthy
        baseline (still with ``BASELINE_SEED``), and that state is shared under a key of its own.
        """
        healthy = self._baseline_key_of(spec)
        key = replace(healthy, provisioned=provisioning.key) if provisioning is not None else healthy
        app_dir = Path(key.app_dir)
        built: list[AnyTwin] = []

        def build() -> AnySnapshot:
            self._clock.reset(SIM_EPOCH)
            fresh = self._new_twin(app_dir, BASELINE_SEED, spec)
            fresh.advance(spec.baseline_seconds)
            built.append(fresh)
            return fresh.snapshot(compact=True)

        def build_provisioned() -> AnySnapshot:
            assert provisioning is not None
            start = SHARED_BASELINES.get(healthy, build)
            twin = built[0] if built else self._twin_at(healthy, start, spec)
            self._activate(twin, spec)
            provisioning.apply(self)
            built[:] = [twin]
            return twin.snapshot(compact=True)

        snap = SHARED_BASELINES.get(key, build_provisioned if provisioning is not None else build)
        twin = built[0] if built else self._twin_at(healthy, snap, spec)
        self._keep_twin(healthy, twin)
        twin.reseed(seed)
        self._grant_fault_namespaces(twin, spec)
        self._baseline_key = key
        return self._activate(twin, spec)

    @staticmethod
    def _grant_fault_namespaces(twin: AnyTwin, spec: ScenarioSpec) -> None:
        """ITBench binds its agent in every namespace the faults touch, not only the app's (which the
        shared baseline already grants): a fault on kube-system's CoreDNS is the agent's to fix."""
        existing = {n["metadata"]["name"] for n in twin.cluster.store.list("Namespace")}
        extra = [ns for ns in agent_namespaces(spec) if ns != spec.namespace and ns in existing]
        if extra:
            twin.cluster.apply([obj for obj in agent_rbac_objects(extra) if obj["metadata"].get("namespace") in extra])

    def _twin_at(self, key: BaselineKey, snap: AnySnapshot, spec: ScenarioSpec) -> AnyTwin:
        """The app's twin (this backend's, else a new one) in exactly the state of ``snap``, its seed
        included (a new twin reseeds as it is made)."""
        twin = self._twins.get(key) or self._new_twin(Path(key.app_dir), snap.seed, spec, snap)
        twin.restore(snap)
        return twin

    def _new_twin(self, env_dir: Path, seed: int, spec: ScenarioSpec, state: AnySnapshot | None = None) -> AnyTwin:
        """The environment's twin on this backend's clock: the app's, or a cluster-only one (``clustertwin.py``)."""
        if is_cluster_env(env_dir):
            assert state is None or isinstance(state, ClusterTwinSnapshot)
            return ClusterTwin(env_dir, seed=seed, clock=self._clock, state=state)
        assert state is None or isinstance(state, TwinSnapshot)
        return Twin(env_dir, seed=seed, clock=self._clock, load=spec.load, hpa=spec.hpa, finops=spec.finops, state=state)

    def _baseline_key_of(self, spec: ScenarioSpec) -> BaselineKey:
        app_dir = self._envs_root / spec.app
        return BaselineKey(str(app_dir.resolve()), spec.baseline_seconds, spec.load, spec.hpa, spec.finops)

    def _keep_twin(self, key: BaselineKey, twin: AnyTwin) -> None:
        self._twins[key] = twin
        self._twins.move_to_end(key)
        while len(self._twins) > _CACHED_TWINS:
            self._twins.popitem(last=False)

    def setting_up(self) -> AbstractContextManager[None]:
        """Cyclic collection held off for the whole set-up (``gc_pause.py``): the ticks' survivors are
        then scanned once, not after each fast-forward between alert polls."""
        return gc_paused()

    @property
    def baseline_key(self) -> BaselineKey | None:
        """The shared baseline the last ``start`` restored (None before one and after a restore)."""
        return self._baseline_key

    @property
    def can_checkpoint(self) -> bool:
        return True

    def checkpoint(self) -> SimCheckpoint:
        assert self._twin is not None and self._spec is not None
        return SimCheckpoint(self._twin, self._spec, self._twin.snapshot())

    def restore(self, token: object) -> Endpoints:
        if not isinstance(token, SimCheckpoint):
            raise TypeError(f"not a checkpoint of this backend: {type(token).__name__}")
        token.twin.restore(token.snapshot)
        self._baseline_key = None
        return self._activate(token.twin, token.spec)

    def save_incident(self, key: Hashable, incident: object) -> None:
        """Keep the incident for every backend of the process (``incidents.py``): its snapshot is immutable."""
        assert self._twin is not None and self._spec is not None
        # Rules no read of the incident has needed yet (recording rules no alert reads) stay due.
        snapshot = self._twin.snapshot(deferred_rules=True)
        SHARED_INCIDENTS.put(self._incident_key(key), SavedIncident(self._spec, snapshot, incident))

    def restore_incident(self, key: Hashable) -> object | None:
        saved = SHARED_INCIDENTS.get(self._incident_key(key))
        if saved is None:
            return None
        key = self._baseline_key_of(saved.spec)
        twin = self._twin_at(key, saved.snapshot, saved.spec)
        self._keep_twin(key, twin)
        self._baseline_key = None
        self._activate(twin, saved.spec)
        return saved.record

    def _incident_key(self, key: Hashable) -> Hashable:
        return str(self._envs_root.resolve()), key

    def _activate(self, twin: AnyTwin, spec: ScenarioSpec) -> Endpoints:
        """Make ``twin`` the one the servers answer for, with the scenario's modalities.

        A masked modality is a component the scenario's cluster does not have, not a tool that
        refuses: without logs there is no Loki (no endpoint; its port serves nothing) and the
        containers' logs are empty, as when an app exports its logs only over OTLP to a log store
        that is not there; without traces there is no Jaeger (no endpoint, nothing served). The
        span metrics stay (the collector derives them from spans whether or not Jaeger stores them).
        OpenCost's API is served only when the scenario installs OpenCost (``spec.finops``).
        """
        self._twin = twin
        self._spec = spec
        namespace = spec.namespace
        logs, traces = spec.observability.logs, spec.observability.traces
        self._deadline = None
        self._ensure_servers()
        assert self._auth is not None and self._served is not None
        self._kube_switch.target = make_kube_app(
            twin.cluster.store,
            clock=self._clock,
            auth=self._auth,
            lock=twin.lock,
            advance=self._advance_blocking,
            log_source=twin.container_log_lines if logs else None,
            metrics=twin.cluster.usage,
            load=twin.cluster.apiload,
            exec_source=twin.container_exec(frozenset(HARNESS_NAMESPACES)),
            programs=self._programs,
        )
        if isinstance(twin, Twin):
            self._prom_switch.target = make_prometheus_app(twin.engine, twin.tsdb, twin.rules, self._clock)
            self._jaeger_switch.target = make_jaeger_app(twin.apps.instances, self._clock, twin.lock) if traces else None
            self._loki_switch.target = make_loki_app(twin.apps, self._clock, twin.lock, namespace) if logs else None
            self._opencost_switch.target = make_opencost_app(twin.engine, self._clock) if spec.finops else None
            self._endpoints = replace(self._served, loki=self._served.loki if logs else None,
                                      jaeger=self._served.jaeger if traces else None,
                                      opencost=self._served.opencost if spec.finops else None)
        else:  # a cluster without monitoring: no Prometheus, Grafana, Alertmanager, Loki, Jaeger or OpenCost to serve
            self._prom_switch.target = self._jaeger_switch.target = self._loki_switch.target = None
            self._opencost_switch.target = None
            self._endpoints = replace(self._served, prometheus=None, grafana=None, alertmanager=None, loki=None, jaeger=None,
                                      opencost=None)
        kube_url = self._servers[0].url
        ca_pem = tls_material().ca_pem
        write_kubeconfig(self._endpoints.kubeconfig, kube_url, self._auth.agent_token, ca_pem, namespace=namespace)
        write_kubeconfig(self.admin_kubeconfig, kube_url, self._auth.admin_token, ca_pem, namespace="default")
        return self._endpoints

    def _ensure_servers(self) -> None:
        if self._servers:
            return
        self._workdir = WorkDir("twin")
        self._workdir.subdir("admin")
        self._auth = Auth(Visibility(hidden_namespaces=frozenset(HARNESS_NAMESPACES), hidden_groups=frozenset(HIDDEN_API_GROUPS)))
        traffic = self._programs.traffic
        kube = serve(self._kube_switch, ssl_context=tls_material().server_context(), port=self._kube_port, traffic=traffic)
        prom = serve(self._prom_switch, traffic=traffic)
        jaeger = serve(self._jaeger_switch, traffic=traffic)
        loki = serve(self._loki_switch, traffic=traffic)
        opencost = serve(self._opencost_switch, traffic=traffic)
        self._servers = [kube, prom, jaeger, loki, opencost]
        agent = self._workdir.subdir("agent")
        cache = self._workdir.subdir("kube-cache")
        self._served = self._endpoints = Endpoints(
            kubeconfig=agent / "kubeconfig",
            kube_cache_dir=cache,
            prometheus=prom.url,
            grafana=prom.url,
            alertmanager=prom.url,
            jaeger=jaeger.url,
            loki=loki.url,
            opencost=opencost.url,
        )

    def advance(self, seconds: float) -> None:
        self.twin.advance(seconds)

    def _advance_blocking(self, seconds: float) -> bool:
        """Time passing inside a blocking API request; refused once the episode budget is spent."""
        now = self._clock.now()
        if self._deadline is not None:
            if now >= self._deadline:
                return False
            seconds = min(seconds, self._deadline - now)
        self.twin.advance(seconds)
        return True

    def set_time_limit(self, deadline: float | None) -> None:
        self._deadline = deadline

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        stop_all(self._servers)
        self._servers = []
        if self._workdir is not None:
            self._workdir.close()
            self._workdir = None
        self._endpoints = self._served = None
        self._twins.clear()
        self._baseline_key = None
        self._twin = None
