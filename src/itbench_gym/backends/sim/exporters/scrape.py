"""One scrape of every target: the exporters' series under their target's labels, and ``up``.

What a target exposes follows from what runs behind it: the image of the container that owns the
port (``kube-state-metrics``, ``node-exporter``) or, for a target that points at a Node, the
kubelet path (``/metrics/cadvisor``). A scrape succeeds (``up`` 1) when the process can answer: the
pod is Running and that container is running and ready, or the node is Ready. A failed scrape
yields only ``up`` 0 and the scrape's own series, so the target's series go stale, as in Prometheus.

Labels merge as Prometheus' scrape loop merges them: with ``honor_labels`` the exposed labels win,
otherwise the target's do and a clashing exposed label is kept as ``exported_<name>``; then the
endpoint's ``metricRelabelings`` run on every series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike, list_kind
from itbench_gym.backends.sim.kube.errors import ApiError

from .relabel import Relabel
from .targets import PrometheusConfig, Target, discover, find_prometheus

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]

#: Labels a target sets on every series, removed from series a source produced with them already.
TARGET_LABEL_NAMES = ("job", "instance", "metrics_path", "node")


@dataclass
class ScrapeInput:
    """What the sources read this tick, besides the store."""

    store: StoreLike
    now: float
    #: series of each node's kubelet ``/metrics/cadvisor``, without target labels
    cadvisor: Mapping[str, list[Sample]] = field(default_factory=dict)
    #: per-container CPU cores and memory bytes by node (what the node's processes use)
    node_usage: Mapping[str, tuple[float, float]] = field(default_factory=dict)


Source = Callable[[ScrapeInput, Target], list[Sample]]


def image_repository(image: str) -> str:
    """The last path element of an image reference without tag or digest (``kube-state-metrics``)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[0]


def _pod(store: StoreLike, key: tuple[str, str]) -> Obj | None:
    try:
        return store.get_stored(store.registry.by_kind("Pod"), key[0], key[1])  # type: ignore[attr-defined, no-any-return]
    except (ApiError, KeyError, LookupError):
        return None


def _condition(obj: Obj, kind: str) -> str:
    return next((str(c.get("status")) for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), "Unknown")


def target_up(store: StoreLike, target: Target, nodes: Mapping[str, Obj]) -> bool:
    """Whether a scrape of ``target`` gets an answer now."""
    if target.pod is not None:
        pod = _pod(store, target.pod)
        if pod is None or (pod.get("status") or {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            return False
        if not target.container:
            return _condition(pod, "Ready") == "True"
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == target.container:
                return "running" in (cs.get("state") or {}) and bool(cs.get("ready"))
        return False
    node = nodes.get(target.node)
    return node is not None and _condition(node, "Ready") == "True"


def merge(target: Mapping[str, str], exposed: Mapping[str, str], honor: bool) -> dict[str, str]:
    """A scraped series' labels: the exposed ones and the target's, as ``honor_labels`` says."""
    if honor:
        out = dict(target)
        out.update(exposed)
        return out
    out = dict(exposed)
    for k, v in target.items():
        if k in out and out[k] != "":
            out[f"exported_{k}"] = out[k]
        out[k] = v
    return out


class MetricFilter:
    """``metricRelabelings`` of one endpoint, with keep/drop decisions cached by the labels they read."""

    def __init__(self, configs: tuple[Relabel, ...]) -> None:
        self.configs = configs
        self.filter_only = all(c.action in ("keep", "drop") for c in configs)
        self.reads = tuple(sorted({s for c in configs for s in c.source_labels}))
        self._cache: dict[tuple[str, ...], bool] = {}

    def __call__(self, labels: dict[str, str]) -> dict[str, str] | None:
        if not self.configs:
            return labels
        if self.filter_only:
            key = tuple(labels.get(s, "") for s in self.reads)
            keep = self._cache.get(key)
            if keep is None:
                keep = all(c.apply(labels) for c in self.configs)
                self._cache[key] = keep
            return labels if keep else None
        for c in self.configs:
            if not c.apply(labels):
                return None
        return labels


class Scraper:
    """Discovers the cluster Prometheus' targets and scrapes them on each tick."""

    def __init__(self, sources: Mapping[str, Source], kubelet_paths: Mapping[str, str]) -> None:
        #: image repository (or kubelet source name) -> source
        self.sources = dict(sources)
        #: kubelet path -> source name
        self.kubelet_paths = dict(kubelet_paths)
        self.targets: list[Target] = []
        self.prometheus: PrometheusConfig | None = None
        self._filters: dict[tuple[Relabel, ...], MetricFilter] = {}
        self._jobs: set[str] = set()

    def _source_of(self, store: StoreLike, target: Target) -> Source | None:
        if target.pod is None:
            name = self.kubelet_paths.get(target.metrics_path) if target.node else None
            return self.sources.get(name) if name else None
        pod = _pod(store, target.pod)
        if pod is None:
            return None
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("name") == target.container:
                return self.sources.get(image_repository(str(c.get("image", ""))))
        return None

    def scrape(self, inputs: ScrapeInput) -> tuple[list[Sample], set[str]]:
        """Every target's series of this tick, and every job ever scraped (for staleness)."""
        store = inputs.store
        self.prometheus = find_prometheus(store)
        self.targets = discover(store, self.prometheus) if self.prometheus is not None else []
        nodes = {n["metadata"]["name"]: n for n in list_kind(store, "Node")}
        out: list[Sample] = []
        for target in self.targets:
            tl = dict(target.labels)
            up = target_up(store, target, nodes)
            scraped = post = 0
            if up:
                source = self._source_of(store, target)
                exposed = source(inputs, target) if source is not None else []
                scraped = len(exposed)
                filt = self._filters.get(target.metric_relabelings)
                if filt is None:
                    filt = self._filters[target.metric_relabelings] = MetricFilter(target.metric_relabelings)
                for labels, value in exposed:
                    kept = filt(merge(tl, labels, target.honor_labels))
                    if kept is not None:
                        out.append((kept, value))
                        post += 1
            # a scrape costs time in proportion to what it reads; a refused connection fails at once
            duration = 0.002 + 4e-6 * scraped if up else 0.001
            out.append(({"__name__": "up", **tl}, 1.0 if up else 0.0))
            out.append(({"__name__": "scrape_duration_seconds", **tl}, duration))
            out.append(({"__name__": "scrape_samples_scraped", **tl}, float(scraped)))
            out.append(({"__name__": "scrape_samples_post_metric_relabeling", **tl}, float(post)))
            self._jobs.add(tl.get("job", ""))
        return out, set(self._jobs)

    def snapshot(self) -> frozenset[str]:
        return frozenset(self._jobs)

    def restore(self, snap: frozenset[str]) -> None:
        self._jobs = set(snap)
        self.targets = []
