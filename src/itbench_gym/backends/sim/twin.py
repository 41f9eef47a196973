"""The digital twin: Kubernetes, the application and its telemetry, advanced together on one clock.

Time moves in scrape ticks (15 s). Each tick runs the kubelet and controllers, the application's
request-flow model (which also decides OOM kills and resource usage), appends one scrape to the TSDB
and evaluates the alert rules. Between ticks only Kubernetes' own timers run, so a kubectl command
sees pods start or terminate at the right moment.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from itbench_gym.backends.rbac import agent_rbac_objects
from itbench_gym.backends.sim.alerting import RuleManager
from itbench_gym.backends.sim.app import AppModel
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.backends.sim.promql import Engine
from itbench_gym.backends.sim.tsdb import TSDB
from itbench_gym.clock import SimClock

SCRAPE_INTERVAL = 15.0
#: Object-store quota as a multiple of the deployed app's size (at least the store's default).
STORE_HEADROOM = 12


@dataclass(frozen=True)
class TwinSnapshot:
    now: float
    next_tick: float
    cluster: Any
    tsdb: Any
    rules: Any
    model: Any


class Twin:
    """One simulated cluster with one application; thread-safe through ``lock``."""

    def __init__(self, app_dir: Path, *, seed: int, clock: SimClock | None = None, load_users: int | None = None) -> None:
        self.clock = clock or SimClock()
        self.lock = threading.RLock()
        self.seed = seed
        self.model = AppModel.load(app_dir, seed=seed)
        self.cluster = KubeCluster(self.clock, runtime=self.model.runtime(), seed=seed)
        self.tsdb = TSDB()
        self.engine = Engine(self.tsdb)
        rules_doc = yaml.safe_load((app_dir / "alert-rules.yaml").read_text())
        self.rules = RuleManager(rules_doc["groups"], self.engine)
        self._next_tick = self.clock.now()
        with self.lock:
            self.cluster.apply(self._with_load(self.model.manifests(), load_users))
            # ITBench grants its agent access to the namespaces the scenario works in: the app's.
            self.cluster.apply(agent_rbac_objects([self.model.spec.namespace]))
            self._size_store_quota()
            self._scrape()
            self.rules.evaluate_until(self.clock.now())

    def _with_load(self, manifests: list[dict[str, Any]], users: int | None) -> list[dict[str, Any]]:
        """Set the load generator's user count (the scenario's ``environment.load.users``)."""
        if users is None:
            return manifests
        app = self.model.spec
        workload = app.services[app.load_service].workload
        for obj in manifests:
            if obj.get("kind") == "Deployment" and obj["metadata"]["name"] == workload:
                for container in obj["spec"]["template"]["spec"]["containers"]:
                    env = container.setdefault("env", [])
                    for var in env:
                        if var.get("name") == app.users_env:
                            var.clear()
                            var.update({"name": app.users_env, "value": str(users)})
                            break
                    else:
                        env.append({"name": app.users_env, "value": str(users)})
                return manifests
        raise ValueError(f"{app.directory}: no Deployment {workload!r} for the load generator")

    def _size_store_quota(self) -> None:
        """Give the object store room in proportion to the deployed app, never less than its default.

        A fixed quota would suit one app only: the default fits the Astronomy Shop twelve times over,
        and a larger app gets the same headroom relative to its own size.
        """
        store = self.cluster.store
        store.quota_bytes = max(store.quota_bytes, STORE_HEADROOM * store.usage().bytes)

    def advance(self, seconds: float) -> None:
        """Move the clock forward, running every tick that falls in the interval."""
        if seconds <= 0:
            return
        with self.lock:
            target = self.clock.now() + seconds
            while self._next_tick <= target:
                self.clock.set(self._next_tick)
                self._scrape()
            self.clock.set(target)
            self.cluster.tick(target)
            self.rules.evaluate_until(target)

    def _scrape(self) -> None:
        t = self._next_tick
        self.cluster.tick(t)
        samples = self.model.tick(t, SCRAPE_INTERVAL, self.cluster)
        self.tsdb.append(t, samples)
        self._next_tick = t + SCRAPE_INTERVAL

    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        return self.model.log_lines(namespace, pod, container, start, end)

    def snapshot(self) -> TwinSnapshot:
        with self.lock:
            return TwinSnapshot(
                now=self.clock.now(),
                next_tick=self._next_tick,
                cluster=self.cluster.snapshot(),
                tsdb=self.tsdb.snapshot(),
                rules=self.rules.snapshot(),
                model=self.model.snapshot(),
            )

    def restore(self, snap: TwinSnapshot) -> None:
        with self.lock:
            self.clock.reset(snap.now)
            self._next_tick = snap.next_tick
            self.cluster.restore(snap.cluster)
            self.tsdb.restore(snap.tsdb)
            self.rules.restore(snap.rules)
            self.model.restore(snap.model)
