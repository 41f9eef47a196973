"""The digital twin: Kubernetes, the application and its telemetry, advanced together on one clock.

Time moves in scrape ticks (15 s). Each tick runs the kubelet and controllers, the API server's
request load (``kube/apiload.py``), the application's request-flow model (which also decides OOM
kills and resource usage), scrapes the targets the
cluster's Prometheus discovers (kube-state-metrics, node-exporter, the kubelets' cAdvisor, ``up``;
``exporters/monitoring.py``) into the TSDB, and evaluates the rules of the PrometheusRule objects
that Prometheus selects. Between ticks only Kubernetes' own timers run, so a kubectl command sees
pods start or terminate at the right moment.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itbench_gym.backends.rbac import HARNESS_NAMESPACES, agent_rbac_objects
from itbench_gym.backends.sim.alerting import RuleAwareTSDB
from itbench_gym.backends.sim.app import AppModel
from itbench_gym.backends.sim.app.cluster_view import ClusterView
from itbench_gym.backends.sim.app.fleet import AppFleet
from itbench_gym.backends.sim.app.model import read_manifests
from itbench_gym.backends.sim.containers.mainprocess import FollowedRun
from itbench_gym.backends.sim.containers.network import AppRouting
from itbench_gym.backends.sim.containers.runner import ContainerExec
from itbench_gym.backends.sim.exporters.monitoring import Monitoring
from itbench_gym.backends.sim.gc_pause import gc_paused
from itbench_gym.backends.sim.install import deploy, load_releases
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.backends.sim.kube.registry import shared
from itbench_gym.backends.sim.kube.store import DEFAULT_EVENT_QUOTA_BYTES, DEFAULT_QUOTA_BYTES
from itbench_gym.backends.sim.promql import Engine
from itbench_gym.backends.sim.traces.exchange import AppHttpServers
from itbench_gym.backends.sim.traces.synth import synth_of
from itbench_gym.clock import SimClock
from itbench_gym.lang import yamltext
from itbench_gym.spec.autoscaling import hpa_objects
from itbench_gym.spec.finops import FINOPS_OPTION, finops_manifests
from itbench_gym.spec.loadshape import LoadShape
from itbench_gym.spec.model import LoadOptions

SCRAPE_INTERVAL = 15.0
#: Object-store quota as a multiple of the deployed app's size (at least the store's default).
STORE_HEADROOM = 12
#: The app's own alert rules: PrometheusRule objects created after the app's install, as ITBench does.
APP_RULES = "alert-rules.yaml"


@dataclass(frozen=True)
class TwinSnapshot:
    """A twin's whole state; immutable, so twins of one app may share it (``Twin(state=...)``)."""

    now: float
    next_tick: float
    seed: int
    #: the object store's main and Events quotas, sized for the app when it was deployed
    store_quotas: tuple[int, int]
    cluster: Any
    tsdb: Any
    rules: Any
    model: Any


class Twin:
    """One simulated cluster with one application (installed once, run wherever it is deployed:
    ``app/fleet.py``); thread-safe through ``lock``.

    Built either by deploying the app (``seed`` drives every random choice from the start) or from
    another twin's ``state`` of the same app, which skips the deployment: the new twin continues
    from that state, then draws from ``seed``.
    """

    def __init__(self, app_dir: Path, *, seed: int, clock: SimClock | None = None, load: LoadOptions | None = None,
                 state: TwinSnapshot | None = None, hpa: bool = False, finops: bool = False) -> None:
        self.clock = clock or SimClock()
        self.lock = threading.RLock()
        self.seed = seed
        #: the app as installed, in its own namespace; ``apps`` adds every copy deployed elsewhere
        self.model = AppModel.load(app_dir, seed=seed)
        self.apps = AppFleet(self.model)
        self.cluster = KubeCluster(self.clock, runtime=self.apps.runtime(), seed=seed)
        self.tsdb = RuleAwareTSDB()
        self.engine = Engine(self.tsdb)
        self.monitoring = Monitoring(self.cluster.store, self.engine, self.cluster.apiload.samples, self.cluster.etcd.samples)
        self.rules = self.monitoring.rules
        self._next_tick = self.clock.now()
        self.cluster.kubelet.main_output = self._main_output
        self.apps.runtime().view_now = self._view_now
        self._exec = self.container_exec(frozenset(HARNESS_NAMESPACES))
        with self.lock:
            if state is not None:
                self.restore(state)
                self.reseed(seed)
                return
            self._room_to_deploy()
            manifests = self._with_load(self.model.manifests(), load or LoadOptions())
            # ITBench's tools.finops.enabled: OpenCost, after everything the cluster always runs
            tools = read_manifests(app_dir, finops_manifests(app_dir)) if finops else []
            options = frozenset({FINOPS_OPTION} if finops else ())
            deploy(self.cluster, manifests + tools, load_releases(app_dir, options), seed=seed)
            if hpa:
                self.cluster.apply(hpa_objects(app_dir, manifests, self.model.spec.namespace))
            self.cluster.apply(app_rule_objects(app_dir / APP_RULES))
            # ITBench grants its agent access to the namespaces the scenario works in: the app's.
            self.cluster.apply(agent_rbac_objects([self.model.spec.namespace]))
            self._size_store_quota()
            self._scrape()
            self.monitoring.evaluate(self.clock.now())

    def _with_load(self, manifests: list[dict[str, Any]], load: LoadOptions) -> list[dict[str, Any]]:
        """Set the load generator's environment from the scenario's ``environment.load``: its user
        count, the env var that enables each user class an option asks for, and its load shape."""
        app = self.model.spec
        settings: dict[str, str] = {}
        if load.users is not None:
            settings[app.users_env] = str(load.users)
        if load.spawn_rate is not None and app.spawn_rate_env is not None:
            settings[app.spawn_rate_env] = str(load.spawn_rate)
        for c in app.user_classes:
            if c.option == "browser_traffic" and load.browser_traffic and c.enabled_by is not None:
                settings[c.enabled_by[0]] = "true"
        if load.browser_traffic and not any(c.option == "browser_traffic" for c in app.user_classes):
            raise ValueError(f"{app.directory}: environment.load.browser_traffic: the app's load generator has no browser users")
        if not settings and load.shape is None:
            return manifests
        workload = app.services[app.load_service].workload
        for i, obj in enumerate(manifests):
            if obj.get("kind") == "Deployment" and obj["metadata"]["name"] == workload:
                for container in obj["spec"]["template"]["spec"]["containers"]:
                    _set_env(container, settings)
                if load.shape is not None:
                    # before the Deployment, as Helm orders a chart's ConfigMaps: its pods mount it
                    manifests.insert(i, self._mount_shape(obj, load.shape))
                return manifests
        raise ValueError(f"{app.directory}: no Deployment {workload!r} for the load generator")

    def _mount_shape(self, deployment: dict[str, Any], shape: LoadShape) -> dict[str, Any]:
        """Mount the app's Locust shape program and the scenario's shape (its JSON) into the load
        generator's container from a ConfigMap, and add the program to its locustfiles (Locust uses
        the LoadTestShape class of any of them); the ConfigMap to apply with the Deployment."""
        app = self.model.spec
        files = app.load_shape
        if files is None:
            raise ValueError(f"{app.directory}: environment.load.shape: the app's load generator takes no load shape (app.yaml load.shape)")
        pod = deployment["spec"]["template"]["spec"]
        container = next(c for c in pod["containers"] if c["name"] == app.services[app.load_service].container)
        own = next((e.get("value") for e in container.get("env") or [] if e.get("name") == files.locustfile_env), None)
        _set_env(container, {files.locustfile_env: f"{own or files.default_locustfile},{files.mount_path}/{files.program.name}"})
        pod.setdefault("volumes", []).append({"name": files.config_map, "configMap": {"name": files.config_map}})
        container.setdefault("volumeMounts", []).append({"name": files.config_map, "mountPath": files.mount_path, "readOnly": True})
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": files.config_map, "namespace": deployment["metadata"].get("namespace", app.namespace)},
                "data": {files.program.name: files.text, files.data: json.dumps(shape.document(), indent=2) + "\n"}}

    def _app_bytes(self) -> int:
        """The serialized size of the app's own objects (those in its namespace)."""
        namespace = self.model.spec.namespace
        return sum(len(json.dumps(o, separators=(",", ":"))) for o in self.model.manifests()
                   if (o.get("metadata") or {}).get("namespace") == namespace)

    def _room_to_deploy(self) -> None:
        """Quotas an app of any size deploys within: the defaults plus twelve copies of the app's objects
        (and as much again for the Events its pods' start-up records); resized after the deployment."""
        store, room = self.cluster.store, STORE_HEADROOM * self._app_bytes()
        store.quota_bytes = max(store.quota_bytes, DEFAULT_QUOTA_BYTES + room)
        store.event_quota_bytes = max(store.event_quota_bytes, DEFAULT_EVENT_QUOTA_BYTES + room)

    def _size_store_quota(self) -> None:
        """Give the object store room in proportion to the deployed app, never less than its default.

        A fixed quota would suit one app only: the cluster as deployed plus eleven more copies of the
        app's own objects (what an agent's commands can multiply), so a larger app gets the same
        headroom relative to its own size and the cluster's system objects do not widen it. Events
        keep the room they had for the deployment: their own quota only has to say why a store is full.
        """
        store = self.cluster.store
        store.quota_bytes = max(DEFAULT_QUOTA_BYTES, store.usage().bytes + (STORE_HEADROOM - 1) * self._app_bytes())

    def advance(self, seconds: float) -> None:
        """Move the clock forward, running every tick that falls in the interval."""
        if seconds <= 0:
            return
        with self.lock, gc_paused():
            target = self.clock.now() + seconds
            while self._next_tick <= target:
                self.clock.set(self._next_tick)
                self._scrape()
            self.clock.set(target)
            self.cluster.tick(target)
            self.monitoring.evaluate(target)

    def _scrape(self) -> None:
        """One tick of the model; Prometheus scrapes at its own interval (30 s unless its
        ``scrapeInterval`` says otherwise), on the first tick at or after each multiple of it."""
        t = self._next_tick
        self.cluster.tick(t)
        self.cluster.apiload.tick(SCRAPE_INTERVAL)
        self.cluster.etcd.tick(t, SCRAPE_INTERVAL, self.cluster.apiload.writes_per_s)
        interval = self.monitoring.scrape_interval()
        scraped = math.floor(t / interval + 1e-9) > math.floor((t - SCRAPE_INTERVAL) / interval + 1e-9)
        model_samples = self.apps.tick(t, SCRAPE_INTERVAL, self.cluster, expose=scraped)
        if scraped:
            samples, jobs = self.monitoring.scrape(t, model_samples, self.cluster.usage().nodes, self.apps.exposed())
            self.tsdb.append(t, samples, jobs)
        self._next_tick = t + SCRAPE_INTERVAL

    def reseed(self, seed: int) -> None:
        """Draw everything random from now on from ``seed``: a shared healthy baseline then becomes
        this seed's incident (noise, pod names, connection pins, chaos picks, logs and traces)."""
        with self.lock:
            self.seed = seed
            self.apps.reseed(seed)
            self.cluster.reseed(seed)

    def container_exec(self, hidden: frozenset[str] = frozenset()) -> ContainerExec:
        """``kubectl exec``'s far end for this twin: an app container's process keeps the env it started
        with; names in the ``hidden`` namespaces do not resolve."""
        def started_env(pod: dict[str, Any], container: str) -> dict[str, str] | None:
            model = self.apps.instance(str(pod["metadata"].get("namespace") or ""))
            return model.started_env(pod, container) if model is not None else None

        def routing(namespace: str) -> AppRouting | None:
            model = self.apps.instance(namespace)
            if model is None:
                return None
            now = self.clock.now()
            view = model.view_now(self.cluster.store, now)
            return AppRouting(model.spec, view, AppHttpServers(lambda: synth_of(model), model.last_trace_tick(), now,
                                                               lambda: model.flagd_holds(view, self.cluster), model.catalog_records))

        runtime = self.apps.runtime()
        return ContainerExec(self.cluster.store, self.lock, self.clock, runtime.image_rule,
                             default_home=shared().default_home, started_env=started_env, routing=routing,
                             seed=lambda: self.seed, hidden=hidden, started_sources=self.cluster.kubelet.started_sources,
                             volumes=self.cluster.kubelet, working_set=self.cluster.working_set)

    def _view_now(self, namespace: str) -> ClusterView | bool:
        """The app's namespace as it is now (False: no app runs there)."""
        model = self.apps.instance(namespace)
        return model.view_now(self.cluster.store, self.clock.now()) if model is not None else False

    def _main_output(self, pod: dict[str, Any], spec: dict[str, Any], horizon: float,
                     before: FollowedRun | None) -> FollowedRun | None:
        """A container whose process no model drives, followed through the emulated programs."""
        argv = self.apps.runtime().main_argv(pod, spec)
        return self._exec.main_process(pod, spec, argv, horizon, before) if argv is not None else None

    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        """Every log record of the container (the log store's view: stdout and OTLP)."""
        return self.apps.log_lines(namespace, pod, container, start, end)

    def container_log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        """The container log (what ``kubectl logs`` reads): the model's stdout records, and what an
        emulated process printed (``Kubelet.main_output``)."""
        printed = self.cluster.kubelet.output_lines(namespace, pod, container, start, end)
        modelled = self.apps.container_log_lines(namespace, pod, container, start, end)
        return sorted(modelled + printed, key=lambda line: line[0]) if printed else modelled

    def snapshot(self, *, deferred_rules: bool = False, compact: bool = False) -> TwinSnapshot:
        """The whole state. The rules' snapshot comes first: it runs their deferred evaluations,
        whose recorded series and ``ALERTS`` samples the TSDB's snapshot must then hold — unless
        ``deferred_rules``: those stay due in the snapshot too, and run after a restore when a read
        needs them (evaluated later they give the same, ``RuleManager.defer_until``). For a state
        restored rarely or read little, such as an incident; a shared baseline runs them once.
        ``compact``: the TSDB's series take their rows out of its blocks first (``TSDB.snapshot``),
        for a state restored again and again, such as a shared baseline."""
        with self.lock:
            rules = self.monitoring.snapshot(deferred_rules=deferred_rules)
            return TwinSnapshot(
                now=self.clock.now(),
                next_tick=self._next_tick,
                seed=self.seed,
                store_quotas=(self.cluster.store.quota_bytes, self.cluster.store.event_quota_bytes),
                cluster=self.cluster.snapshot(),
                tsdb=self.tsdb.snapshot(compact=compact),
                rules=rules,
                model=self.apps.snapshot(),
            )

    def restore(self, snap: object) -> None:
        if not isinstance(snap, TwinSnapshot):
            raise TypeError(f"an app's twin cannot restore a {type(snap).__name__}")
        with self.lock:
            self.clock.reset(snap.now)
            self._next_tick = snap.next_tick
            self.cluster.restore(snap.cluster)
            self.tsdb.restore(snap.tsdb)
            self.monitoring.restore(snap.rules)
            self.apps.restore(snap.model)
            self.cluster.store.quota_bytes, self.cluster.store.event_quota_bytes = snap.store_quotas
            self.seed = snap.seed
            self.apps.reseed(snap.seed)


def app_rule_objects(path: Path) -> list[dict[str, Any]]:
    """The PrometheusRule objects of an app's rules file (none when the app has none)."""
    if not path.exists():
        return []
    docs = [d for d in yamltext.load_all(path.read_text()) if d]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "PrometheusRule"]


def _set_env(container: dict[str, Any], settings: dict[str, str]) -> None:
    """Set each env var of ``settings`` to a plain value in the container, in place of any it had."""
    env = container.setdefault("env", [])
    for name, value in settings.items():
        for var in env:
            if var.get("name") == name:
                var.clear()
                var.update({"name": name, "value": value})
                break
        else:
            env.append({"name": name, "value": value})
