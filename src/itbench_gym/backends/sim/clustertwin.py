"""A twin of a cluster without an application: Kubernetes and the components its manifests install.

Some environments are a cluster and nothing else (``envs/<name>/cluster.yaml`` instead of ``app.yaml``):
ITBench's CISO scenarios run on a fresh kind cluster with Kyverno and the scenario's namespace, and an
agent reads and writes that cluster through kubectl alone. There is no request-flow model, no
Prometheus, Loki or Jaeger: only the API server, the controllers and the kubelets, advanced on the
environment's clock. The interface is the part of ``Twin`` the backend uses, so both are served alike.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from itbench_gym.backends.rbac import agent_rbac_objects
from itbench_gym.backends.sim.app.model import read_manifests
from itbench_gym.backends.sim.containers.runner import ContainerExec
from itbench_gym.backends.sim.install import deploy, load_releases
from itbench_gym.backends.sim.kube.cluster import KubeCluster
from itbench_gym.backends.sim.kube.registry import ImageRule, RegistryRuntime, parse_images, shared
from itbench_gym.backends.sim.twin import Twin, TwinSnapshot
from itbench_gym.clock import SimClock
from itbench_gym.lang import yamltext

#: The file that makes an environment folder a cluster-only environment.
CLUSTER_FILE = "cluster.yaml"
#: How often the cluster's timers and controllers run while time passes (the app twin's tick).
TICK_SECONDS = 15.0

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "namespace", "manifests"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "manifests": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
        "images": {"type": "array", "items": {"type": "object"}},
    },
}


class ClusterEnvError(ValueError):
    """A ``cluster.yaml`` that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class ClusterEnv:
    """``envs/<name>/cluster.yaml``: what the cluster runs and the namespace scenarios work in."""

    directory: Path
    name: str
    namespace: str
    manifests: tuple[str, ...]
    #: Image rules that come before the cluster-wide catalogue (``kube/registry.yaml``).
    images: tuple[ImageRule, ...] = ()

    @classmethod
    def load(cls, directory: Path) -> ClusterEnv:
        path = directory / CLUSTER_FILE
        try:
            raw = yamltext.load(path.read_text(encoding="utf-8"))
        except (OSError, yamltext.YAMLError) as exc:
            raise ClusterEnvError(f"{path}: cannot read: {exc}") from None
        errors = sorted(jsonschema.Draft202012Validator(_SCHEMA).iter_errors(raw), key=lambda e: list(e.absolute_path))
        if errors:
            where = ".".join(str(p) for p in errors[0].absolute_path) or "(top level)"
            raise ClusterEnvError(f"{path}: {where}: {errors[0].message}")
        for entry in raw["manifests"]:
            if not (directory / entry).exists():
                raise ClusterEnvError(f"{path}: manifests: {entry!r} does not exist")
        try:
            images = parse_images(raw.get("images") or [], str(path))
        except ValueError as exc:
            raise ClusterEnvError(str(exc)) from None
        return cls(directory, raw["name"], raw["namespace"], tuple(raw["manifests"]), images)


def is_cluster_env(directory: Path) -> bool:
    """Whether ``directory`` is a cluster-only environment (it has ``cluster.yaml`` and no app)."""
    return (directory / CLUSTER_FILE).is_file() and not (directory / "app.yaml").exists()


@dataclass(frozen=True)
class ClusterTwinSnapshot:
    now: float
    next_tick: float
    seed: int
    cluster: Any


class ClusterTwin:
    """One simulated cluster-only environment; thread-safe through ``lock`` (see the module doc)."""

    def __init__(self, env_dir: Path, *, seed: int, clock: SimClock | None = None,
                 state: ClusterTwinSnapshot | None = None) -> None:
        self.clock = clock or SimClock()
        self.lock = threading.RLock()
        self.seed = seed
        self.env = ClusterEnv.load(env_dir)
        self.cluster = KubeCluster(self.clock, runtime=RegistryRuntime(self.env.images), seed=seed)
        self._next_tick = self.clock.now()
        with self.lock:
            if state is not None:
                self.restore(state)
                self.reseed(seed)
                return
            deploy(self.cluster, read_manifests(env_dir, self.env.manifests), load_releases(env_dir), seed=seed)
            self.cluster.apply(agent_rbac_objects([self.env.namespace]))

    def advance(self, seconds: float) -> None:
        """Move the clock forward, running the cluster at every tick in the interval and at its end."""
        if seconds <= 0:
            return
        with self.lock:
            target = self.clock.now() + seconds
            while self._next_tick <= target:
                self.clock.set(self._next_tick)
                self.cluster.tick(self._next_tick)
                self._next_tick += TICK_SECONDS
            self.clock.set(target)
            self.cluster.tick(target)

    def container_exec(self, hidden: frozenset[str] = frozenset()) -> ContainerExec:
        """``kubectl exec``'s far end for this cluster; names in the ``hidden`` namespaces do not resolve."""
        runtime = RegistryRuntime(self.env.images)
        return ContainerExec(self.cluster.store, self.lock, self.clock, runtime.image_rule, default_home=shared().default_home,
                             hidden=hidden, started_sources=self.cluster.kubelet.started_sources, volumes=self.cluster.kubelet,
                             working_set=self.cluster.working_set)

    def reseed(self, seed: int) -> None:
        with self.lock:
            self.seed = seed
            self.cluster.reseed(seed)

    def container_log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        """No component of a cluster-only environment models its log output: ``kubectl logs`` is empty."""
        return []

    def snapshot(self, *, deferred_rules: bool = False, compact: bool = False) -> ClusterTwinSnapshot:
        """The whole state (a cluster-only twin has no rules or metrics: ``deferred_rules`` and
        ``compact`` change nothing)."""
        with self.lock:
            return ClusterTwinSnapshot(self.clock.now(), self._next_tick, self.seed, self.cluster.snapshot())

    def restore(self, snap: AnySnapshot) -> None:
        if not isinstance(snap, ClusterTwinSnapshot):
            raise TypeError(f"a cluster-only twin cannot restore a {type(snap).__name__}")
        with self.lock:
            self.clock.reset(snap.now)
            self._next_tick = snap.next_tick
            self.cluster.restore(snap.cluster)
            self.seed = snap.seed
            self.cluster.reseed(snap.seed)


#: Either kind of twin, and of the immutable state one restores (``Twin`` with an app, ``ClusterTwin``).
AnyTwin = Twin | ClusterTwin
AnySnapshot = TwinSnapshot | ClusterTwinSnapshot
