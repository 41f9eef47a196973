"""One scrape of every target: the exporters' series under their target's labels, and ``up``.

What a target exposes follows from what runs behind it: the image of the container that owns the
port (``kube-state-metrics``, ``node-exporter``) or, for a target that points at a Node, the
kubelet path (``/metrics/cadvisor``). A scrape succeeds (``up`` 1) when the process can answer: the
pod is Running and that container is running and ready, or the node is Ready. A failed scrape
yields only ``up`` 0 and the scrape's own series, so the target's series go stale, as in Prometheus.

Labels merge as Prometheus' scrape loop merges them: with ``honor_labels`` the exposed labels win,
otherwise the target's do and a clashing exposed label is kept as ``exported_<name>``; then the
endpoint's ``metricRelabelings`` run on every series. That work is done once per target and
series: later scrapes find the series' handle in the target's :class:`SeriesCache`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, NamedTuple

from itbench_gym.backends.sim.app.cluster_view import StoreLike, list_kind
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.tsdb import TSDB, SampleBatch, SeriesRef, items_key, make_labels

from .relabel import Relabel
from .targets import DiscoveryWatch, PrometheusConfig, Target, discover, find_prometheus

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]

#: Labels a target sets on every series, removed from series a source produced with them already.
TARGET_LABEL_NAMES = ("job", "instance", "metrics_path", "node")


#: Where an app pod serves an exposition: (namespace, pod), or (namespace, pod, port) for one of several ports.
PodEndpoint = tuple[str, str] | tuple[str, str, int]


@dataclass
class ScrapeInput:
    """What the sources read this tick, besides the store."""

    store: StoreLike
    now: float
    #: series of each node's kubelet ``/metrics/cadvisor``, without target labels
    cadvisor: Mapping[str, list[Sample]] = field(default_factory=dict)
    #: per-container CPU cores and memory bytes by node (what the node's processes use)
    node_usage: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    #: what the app model's pods serve, in runs: by (namespace, pod, port) for a process that serves
    #: one exposition per port (the collector), else by (namespace, pod) on whichever port is scraped
    exposed: Mapping[PodEndpoint, Sequence[Sequence[tuple[Mapping[str, str], float]]]] = field(default_factory=dict)


Run = Sequence[tuple[Mapping[str, str], float]]
#: What a target answers: its samples in runs. A run handed out again (the same list) holds the
#: same samples, and label dicts are read-only once exposed, so the scrape cache may go by identity.
Source = Callable[[ScrapeInput, Target], Sequence[Run]]


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


def _host_listeners(store: StoreLike) -> dict[tuple[str, int], Obj]:
    """The containers of host-network pods by (node, port) they serve: what answers a bare host address
    (the API server behind the ``kubernetes`` Service's Endpoints)."""
    out: dict[tuple[str, int], Obj] = {}
    for pod in list_kind(store, "Pod"):
        spec = pod.get("spec") or {}
        if spec.get("hostNetwork"):
            for c in spec.get("containers") or []:
                for port in _ports(c):
                    out.setdefault((str(spec.get("nodeName", "")), port), c)
    return out


def _ports(container: Obj) -> set[int]:
    """Ports a container serves: declared, or probed there (a static pod declares none)."""
    ports = {p.get("containerPort") for p in container.get("ports") or []}
    probes = (container.get(k) or {} for k in ("livenessProbe", "readinessProbe", "startupProbe"))
    ports |= {(p.get("httpGet") or p.get("tcpSocket") or {}).get("port") for p in probes}
    return {p for p in ports if isinstance(p, int)}


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


ExposedKey = tuple[tuple[str, str], ...]
#: What a cache holds for an exposed label set that metricRelabelings drop.
DROPPED = SeriesRef(())


@dataclass(frozen=True)
class _RunEntry:
    """What a run's label dicts resolved to: held with the dicts, so their ids stay theirs."""

    labels: tuple[Mapping[str, str], ...]
    refs: list[SeriesRef]
    #: which samples are kept (None: all of them)
    kept: tuple[bool, ...] | None


class _ListEntry(NamedTuple):
    """A run list of the last scrape (held, so its id stays its own), its label dicts' ids, their
    handles and its kept values."""

    run: Run
    key: tuple[int, ...]
    entry: _RunEntry
    values: Sequence[float]


class SeriesCache:
    """Exposed samples -> their series' handles, so a series' labels are worked out once, not every scrape.

    ``resolve`` turns an exposed label set into its handle (or :data:`DROPPED`) and must depend on
    the labels alone. Lookups go by identity first: a run list handed out again takes its handles
    and values of the last scrape whole; a run whose label dicts are the very dicts, in
    order, of a run of the last scrape takes that run's handles whole (sources build new values
    each scrape around the same label dicts); a label dict seen last scrape maps to its handle; then
    by the labels' items, as Prometheus' scrape cache goes by a series' text.
    """

    def __init__(self, resolve: Callable[[Mapping[str, str]], SeriesRef]) -> None:
        self._resolve = resolve
        self._by_items: dict[ExposedKey, SeriesRef] = {}
        # the last scrape's runs by their label dicts' ids (each entry holds its dicts, so no id is reused)
        self._by_run: dict[tuple[int, ...], _RunEntry] = {}
        # the last scrape's run lists by id: a list handed out again holds the same samples (``Run``)
        self._by_list: dict[int, _ListEntry] = {}

    def feed(self, runs: Sequence[Run], batch: SampleBatch) -> int:
        """Add the samples of ``runs`` to ``batch`` under their series; how many were kept."""
        by_run, by_items, by_list = self._by_run, self._by_items, self._by_list
        by_id: dict[int, tuple[Mapping[str, str], SeriesRef]] | None = None  # built at the first run not seen whole
        runs_now: dict[tuple[int, ...], _RunEntry] = {}
        lists_now: dict[int, _ListEntry] = {}
        kept = 0
        for run in runs:
            if not run:
                continue
            same = by_list.get(id(run))
            if same is not None and same.run is run:
                key, entry, values = same.key, same.entry, same.values
            else:
                labels_seq, raw = zip(*run, strict=True)
                key = tuple(map(id, labels_seq))
                found = by_run.get(key)
                if found is None:
                    if by_id is None:
                        by_id = {}
                        for old in by_run.values():
                            by_id.update(zip(map(id, old.labels), zip(old.labels, _expanded(old), strict=True), strict=True))
                    found = self._entry(labels_seq, by_id, by_items)
                entry, values = found, (raw if found.kept is None else tuple(compress(raw, found.kept)))
            runs_now[key] = entry
            lists_now[id(run)] = _ListEntry(run, key, entry, values)
            batch.series += entry.refs
            batch.values += values
            kept += len(entry.refs)
        self._by_run, self._by_list = runs_now, lists_now
        if len(by_items) > 2 * sum(map(len, runs)) + 64:
            keys = {tuple(labels.items()) for run in runs for labels, _ in run}
            self._by_items = {k: v for k, v in by_items.items() if k in keys}
        return kept

    def refs(self) -> list[SeriesRef]:
        """Every handle the cache holds (:data:`DROPPED` left out; a handle may come more than once)."""
        out = [ref for ref in self._by_items.values() if ref is not DROPPED]
        for entry in self._by_run.values():
            out += entry.refs
        return out

    def _entry(self, labels_seq: tuple[Mapping[str, str], ...], by_id: dict[int, tuple[Mapping[str, str], SeriesRef]],
               by_items: dict[ExposedKey, SeriesRef]) -> _RunEntry:
        """A run's handles: a label dict of the last scrape by identity, else by its items, else resolved."""
        refs: list[SeriesRef] = []
        mask: list[bool] = []
        for labels in labels_seq:
            hit = by_id.get(id(labels))
            if hit is None or hit[0] is not labels:
                items = items_key(labels)
                ref = by_items.get(items)
                if ref is None:
                    ref = by_items[items] = self._resolve(labels)
            else:
                ref = hit[1]
            mask.append(ref is not DROPPED)
            if ref is not DROPPED:
                refs.append(ref)
        return _RunEntry(labels_seq, refs, None if all(mask) else tuple(mask))


def _expanded(entry: _RunEntry) -> list[SeriesRef]:
    """A run's handle for each of its samples (:data:`DROPPED` for the dropped ones)."""
    if entry.kept is None:
        return entry.refs
    refs = iter(entry.refs)
    return [next(refs) if keep else DROPPED for keep in entry.kept]


@dataclass
class _TargetCache:
    """A target's series: the scrape's own (``up``...) and what it exposes.

    Keyed by everything that decides a series' final labels (the target's labels, ``honor_labels``
    and ``metricRelabelings``), so a replaced pod or an edited monitor starts a new cache.
    """

    own: tuple[SeriesRef, ...]
    exposed: SeriesCache

    def refs(self) -> list[SeriesRef]:
        """Every handle the cache holds (a handle may come more than once)."""
        return [*self.own, *self.exposed.refs()]


TargetKey = tuple[ExposedKey, bool, tuple[Relabel, ...]]
#: The series every scrape of a target writes about itself, in order.
SCRAPE_SERIES = ("up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling")


class Scraper:
    """Discovers the cluster Prometheus' targets and scrapes them on each tick.

    Label merging and metricRelabelings run once per target and exposed label set; later scrapes
    look the series up by the exposed labels (as Prometheus' scrape cache does by the series' text).
    """

    def __init__(self, sources: Mapping[str, Source], kubelet_paths: Mapping[str, str]) -> None:
        #: image repository (or kubelet source name) -> source
        self.sources = dict(sources)
        #: kubelet path -> source name
        self.kubelet_paths = dict(kubelet_paths)
        self.targets: list[Target] = []
        self.prometheus: PrometheusConfig | None = None
        self._filters: dict[tuple[Relabel, ...], MetricFilter] = {}
        self._jobs: set[str] = set()
        self._watch = DiscoveryWatch()
        #: what ``targets`` were discovered from (:meth:`DiscoveryWatch.state`)
        self._discovered: tuple[Hashable, ...] | None = None
        self._caches: dict[TargetKey, _TargetCache] = {}
        #: the store and generation the cached handles belong to
        self._cache_owner: tuple[TSDB, int] | None = None

    def _source_of(self, store: StoreLike, target: Target, hosts: Mapping[tuple[str, int], Obj]) -> Source | None:
        if target.pod is None:
            name = self.kubelet_paths.get(target.metrics_path) if target.node else None
            if name:
                return self.sources.get(name)
            host = hosts.get((target.node, target.port)) if target.node else None
            return self.sources.get(image_repository(str(host.get("image", "")))) if host else None
        pod = _pod(store, target.pod)
        if pod is None:
            return None
        spec = pod.get("spec") or {}
        for c in spec.get("containers") or []:
            if c.get("name") == target.container:
                return self.sources.get(image_repository(str(c.get("image", ""))))
        # a host-network pod that declares no port (a static pod: etcd on its metrics port)
        host = hosts.get((str(spec.get("nodeName", "")), target.port)) if spec.get("hostNetwork") else None
        return self.sources.get(image_repository(str(host.get("image", "")))) if host else None

    def _filter(self, configs: tuple[Relabel, ...]) -> MetricFilter:
        filt = self._filters.get(configs)
        if filt is None:
            filt = self._filters[configs] = MetricFilter(configs)
        return filt

    def _target_cache(self, target: Target, tl: dict[str, str]) -> _TargetCache:
        filt, honor = self._filter(target.metric_relabelings), target.honor_labels

        def resolve(exposed: Mapping[str, str]) -> SeriesRef:
            kept = filt(merge(tl, exposed, honor))
            return DROPPED if kept is None else SeriesRef(make_labels(kept))

        return _TargetCache(tuple(SeriesRef(make_labels({"__name__": name, **tl})) for name in SCRAPE_SERIES), SeriesCache(resolve))

    def scrape(self, inputs: ScrapeInput, batch: SampleBatch) -> set[str]:
        """Add every target's series of this tick to ``batch``; every job ever scraped (for staleness)."""
        store = inputs.store
        state = self._watch.state(store)
        if state != self._discovered:
            self.prometheus = find_prometheus(store)
            self.targets = discover(store, self.prometheus) if self.prometheus is not None else []
            self._discovered = state
        nodes = {n["metadata"]["name"]: n for n in list_kind(store, "Node")}
        hosts = _host_listeners(store)
        if self._cache_owner != batch.owner:
            if self._cache_owner is not None and self._cache_owner[0] is batch.tsdb:
                # the same store restored or cleared: its series that remain keep their ids
                batch.tsdb.rebase([ref for cache in self._caches.values() for ref in cache.refs()])
            else:
                self._caches = {}
            self._cache_owner = batch.owner
        caches = self._caches
        live: dict[TargetKey, _TargetCache] = {}
        for target in self.targets:
            tl = dict(target.labels)
            key: TargetKey = (tuple(tl.items()), target.honor_labels, target.metric_relabelings)
            cache = live.get(key) or caches.get(key) or self._target_cache(target, tl)
            live[key] = cache
            up = target_up(store, target, nodes)
            scraped = post = 0
            if up:
                source = self._source_of(store, target, hosts)
                if source is not None:
                    runs = source(inputs, target)
                elif target.pod is not None:
                    runs = inputs.exposed.get((*target.pod, target.port)) or inputs.exposed.get(target.pod) or []
                else:
                    runs = []
                scraped = sum(map(len, runs))
                post = cache.exposed.feed(runs, batch)
            # a scrape costs time in proportion to what it reads; a refused connection fails at once
            duration = 0.002 + 4e-6 * scraped if up else 0.001
            for ref, value in zip(cache.own, (1.0 if up else 0.0, duration, float(scraped), float(post)), strict=True):
                batch.add(ref, value)
            self._jobs.add(tl.get("job", ""))
        self._caches = live
        return set(self._jobs)

    def snapshot(self) -> frozenset[str]:
        return frozenset(self._jobs)

    def restore(self, snap: frozenset[str]) -> None:
        self._jobs = set(snap)
        self.targets = []
        self._discovered = None  # the store's resourceVersions are handed out again after a rewind
