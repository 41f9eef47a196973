"""AppModel: the application's behaviour in the twin, advanced once per scrape interval.

``tick`` reads the cluster, serves the flags flagd loaded at its start, solves the request flow,
moves every container's CPU and memory (killing the ones that exceed their limit), and returns one
scrape of span metrics, app metrics and the cluster exporters' metrics.
"""

from __future__ import annotations

import copy
import json
import math
import posixpath
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import numpy as np

from itbench_gym.backends.sim.chaos.byteman import Rule
from itbench_gym.backends.sim.chaos.io import io_fault, load_disk_io
from itbench_gym.backends.sim.chaos.jvmchaos import experiment_script
from itbench_gym.backends.sim.chaos.kinds import injected_pods, record_id
from itbench_gym.backends.sim.chaos.tproxy import request_body_patch, selects
from itbench_gym.backends.sim.exporters.cadvisor import ContainerUsage
from itbench_gym.backends.sim.exporters.scrape import PodEndpoint
from itbench_gym.backends.sim.traces.catalog import TraceCatalog, load_catalog
from itbench_gym.backends.sim.traces.packing import PackedTick, TickPacker
from itbench_gym.backends.sim.traces.record import TraceTick
from itbench_gym.lang import yamltext
from itbench_gym.lang.flagd import FlagSet
from itbench_gym.lang.sql import SqlError, inserted_rows
from itbench_gym.paths import tree_digest
from itbench_gym.spec.loader import shape_document_problems
from itbench_gym.spec.loadshape import LoadShape, parse_shape, run_ticks

from . import logs as logmod
from .balancing import Balancer, Shares, instance_key, senders
from .cluster_view import (
    ClusterLike,
    ClusterReader,
    ClusterView,
    Derived,
    PodView,
    StoreLike,
    list_kind,
    loaded_flag_set,
    parse_quantity,
    ready_pod_labels,
    served_values,
)
from .collector import KAFKAMETRICS_SCOPE, Collectors
from .cpu import CpuDemand, CpuState, cpu_tick
from .flow import FlowSolver, Knobs, Moments, OpKey, OpStats, all_ok, lognormal, mixture
from .httpbody import body_failure
from .jvm import JvmCode, heap_stress_bytes, max_heap_bytes, script_rules
from .jvm import outcome as jvm_outcome
from .machines import Machines, stress_bytes
from .mesh import MeshReader, MeshState, admit
from .mesh_metrics import MeshTelemetry
from .network import Reach, chaos_selects, reach, reachable_once_started, resolve_address, wire_requests
from .process import StoreWrites, mounted_file, shell_script, started_env, store_writes
from .runtime import AppRuntime
from .runtime_metrics import Counters, ProcessState, RuntimeTelemetry
from .spanmetrics import BucketTables, SeriesKey, SpanMetrics
from .spec import AppSpec, AppSpecError, Effect, Operation, Service, load_spec

Sample = tuple[dict[str, str], float]
MI = 1024.0 * 1024.0
_ROUTE = re.compile(r"(GET|POST|PUT|DELETE) (\S+)$")
#: A failure mode without a log template of its own is logged like its nearest kin.
_LOG_CAUSE_FALLBACK = {"deadline": "timeout", "reset": "refused", "dns_timeout": "dns"}


@dataclass
class Instance:
    """One run of one container (a restart is a new instance: memory and caches start afresh).

    Process state lives here until the process ends: a cache or a leak keeps its memory after the
    flag that grew it is turned off, as a module-global cache does.
    """

    started: float
    service: str = ""
    cache_entries: float = 0.0
    cache_entry_bytes: float = 0.0
    leak_bytes: float = 0.0
    panic_calls: tuple[str, ...] = ()
    cpu: CpuState = field(default_factory=CpuState)
    #: Requests in flight at the last tick (Little's law): what an abrupt death fails.
    inflight: float = 0.0
    #: The env the process started with (ConfigMap and Secret keys as they were then).
    env: dict[str, str] = field(default_factory=dict)
    #: A shell loop in the container storing data through the server's client, and what it stored.
    writes: StoreWrites | None = None
    stored_bytes: float = 0.0
    #: The runtime's cumulative counters its instrumentation exports (CPU time, collections).
    runtime: Counters = field(default_factory=Counters)
    #: A load generator's LoadTestShape as its locustfiles held it at the start, and its users
    #: then: (run time, users) at the start of the last tick.
    load_shape: LoadShape | None = None
    shape_users: tuple[float, float] = (0.0, 0.0)

    def copy(self) -> Instance:
        """A copy the model can change without touching this one (its counters change in place)."""
        out = copy.copy(self)
        out.env = dict(self.env)
        out.runtime = self.runtime.copy()
        return out


@dataclass(frozen=True)
class ServedFlags:
    """What one flagd process serves: the flag file's text it last saw, the flag set it holds and the
    app's flag values it serves from it."""

    process: str
    text: str | None
    flags: dict[str, Any]
    held: FlagSet = FlagSet()


@dataclass
class _State:
    tick: int = 0
    instances: dict[str, Instance] = field(default_factory=dict)
    backlog: dict[tuple[str, str], float] = field(default_factory=dict)
    closes: dict[str, float] = field(default_factory=dict)
    history: list[logmod.TickLog] = field(default_factory=list)
    #: Labels of the pods that were Ready at the previous tick, by uid (endpoint hand-over).
    ready_before: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Each tick's solved flow, from which traces are synthesised on demand (packed: ``traces/packing.py``).
    trace_ticks: list[PackedTick] = field(default_factory=list)
    #: Client connections: "<caller instance>|<callee service>" -> the callee instance they reach.
    pins: dict[str, str] = field(default_factory=dict)
    #: Last tick's share of each service's requests per instance.
    shares: Shares = field(default_factory=dict)
    #: Last tick's requests/s per service (what an abrupt death's lost requests are a share of).
    service_rate: dict[str, float] = field(default_factory=dict)
    #: Last tick's requests/s per operation (how many a proxy's fault filter holds at once).
    op_rate: dict[OpKey, float] = field(default_factory=dict)
    #: What the flag service's process serves (None: no process seen yet).
    flagd: ServedFlags | None = None

    def copy(self) -> _State:
        """An independent copy (the per-tick history lists are append-only and shared)."""
        return _State(self.tick, {k: inst.copy() for k, inst in self.instances.items()},
                      dict(self.backlog), dict(self.closes), list(self.history), dict(self.ready_before), list(self.trace_ticks),
                      dict(self.pins), {svc: dict(shares) for svc, shares in self.shares.items()}, dict(self.service_rate),
                      dict(self.op_rate), self.flagd)


def _injected(obj: dict[str, Any], pods: list[PodView]) -> bool:
    """Whether chaos-daemon injected the experiment into one of ``pods`` (its record says Injected)."""
    injected = injected_pods(obj)
    return any(record_id(p.pod) in injected for p in pods)


def _apply_rules(k: Knobs, service: str, code: JvmCode, rules: tuple[Rule, ...]) -> None:
    """Byteman rules in the service's JVM: their failures and delays on each operation they reach."""
    for op in code.operations:
        out = jvm_outcome(code, op, rules)
        if out is None:
            continue
        key = (service, op)
        if out.failure is not None and out.error_ratio > 0:
            k.self_error[key] = (out.error_ratio, out.failure.grpc_code, out.failure.details)
            k.error_log[key] = (out.failure.log, out.exception)
        if out.delays:
            extra = mixture([(share, Moments(delay, 0.0)) for share, delay in out.delays]
                            + [(max(1.0 - sum(s for s, _ in out.delays), 0.0), Moments(0.0, 0.0))])
            k.extra_latency[key] = extra.plus(k.extra_latency[key]) if key in k.extra_latency else extra


def _route_values(spec: AppSpec, rows: list[dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """What a route template's ``{name}`` takes: a trace field drawn from the catalogue (``traces.yaml``,
    as the load generator's ``productId``) its product ids, another name the catalogue column of that name."""
    ids = tuple(str(row["id"]) for row in rows)
    out = {name: ids for name, (kind, _) in load_catalog(spec).fields.items() if kind == "catalog"}
    for column in dict.fromkeys(c for row in rows for c, v in row.items() if isinstance(v, str)):
        out.setdefault(column, tuple(dict.fromkeys(str(row[column]) for row in rows if isinstance(row.get(column), str))))
    return out


def _apply_body_patch(k: Knobs, svc: Service, chaos: dict[str, Any], ports: set[int]) -> None:
    """An HTTPChaos whose proxy sees requests to the service on one of ``ports`` and patches their JSON bodies."""
    body_patch = request_body_patch(chaos)
    if body_patch is None or int(chaos.get("port", 0)) not in ports:
        return
    for op_id, body in svc.request_bodies.items():
        request = svc.operations[op_id].request
        if request is None or not selects(chaos, *request):
            continue
        error = body_failure(body, body_patch)
        if error is not None:
            k.self_error[(svc.name, op_id)] = (1.0, "UNKNOWN", f"expected 200, got {body.status}")
            k.error_log[(svc.name, op_id)] = (body.log, error)


def _env_number(env: Mapping[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        return default


def ramped_users(users: float, rate: float, since: float, until: float) -> float:
    """Mean number of running users over a tick that spans ``since``..``until`` seconds after the
    generator started (as the twin first saw it running), when it starts ``rate`` users a second up
    to ``users``; the tick it started in has none yet."""
    a, b = max(since, 0.0), max(until, 0.0)
    if b <= a:
        return min(users, rate * b)
    full = users / rate
    lo, hi = min(a, full), min(b, full)
    ramp = rate / 2.0 * (hi * hi - lo * lo) + users * (b - max(a, full)) if b > full else rate / 2.0 * (hi * hi - lo * lo)
    return ramp / (b - a)


def _follow(shape: LoadShape, default_rate: float, start: tuple[float, float], until: float) -> tuple[float, float]:
    """Users at ``until`` and user-seconds since ``start`` (run time, users), the users following the
    target each ``tick()`` call sets at its spawn rate (Locust's runner starts or stops that many a
    second towards the newest target)."""
    t, users = start
    area = 0.0
    ticks = run_ticks(shape, t, until)
    for (at, target, rate), end in zip(ticks, [tick[0] for tick in ticks[1:]] + [until], strict=True):
        span = end - max(at, t)
        r = default_rate if rate is None else rate
        moving = min(abs(target - users) / r, span) if r > 0 else 0.0
        step = math.copysign(r * moving, target - users)
        area += (users + step / 2.0) * moving + (users + step) * (span - moving)
        users += step
    return users, area


def shaped_users(shape: LoadShape, default_rate: float, state: tuple[float, float], since: float,
                 until: float) -> tuple[float, tuple[float, float]]:
    """Mean running users over a tick that spans ``since``..``until`` seconds of run time when a
    LoadTestShape sets them, and the generator's (run time, users) at ``since`` to carry to the next
    tick. Unlike :func:`ramped_users`'s one ramp, levels change over the run and users ramp between
    them at each level's spawn rate, so the users at a time depend on the path: the state carries
    it. The tick it started in has none yet."""
    a, b = max(since, 0.0), max(until, 0.0)
    if a > state[0]:
        state = (a, _follow(shape, default_rate, state, a)[0])
    if b <= a:
        return state[1], state
    _, area = _follow(shape, default_rate, state, b)
    return area / (b - a), state


def load_manifests(spec: AppSpec) -> list[dict[str, Any]]:
    return read_manifests(spec.directory, spec.manifests)


#: Apps whose parse the process keeps (``parsed_app``).
PARSED_APPS = 16


def parsed_app(app_dir: Path) -> tuple[AppSpec, list[dict[str, Any]]]:
    """The app's spec and manifests, parsed once per process while the files of its folder stay as
    they are (every new twin of an app needs them: ~0.15 s of YAML and schema checks; the digest of
    the folder's bytes ~2 ms). Callers share them and must not modify them (:meth:`AppModel.manifests`
    hands out copies)."""
    folder = Path(app_dir)
    return _parse_app(str(folder), tree_digest(folder))


@lru_cache(maxsize=PARSED_APPS)
def _parse_app(app_dir: str, digest: str) -> tuple[AppSpec, list[dict[str, Any]]]:
    """``digest`` keys the cache only: a changed file makes a new key."""
    spec = load_spec(Path(app_dir))
    return spec, load_manifests(spec)


def read_manifests(directory: Path, entries: Iterable[str]) -> list[dict[str, Any]]:
    """The objects of an environment's manifest files and folders (``entries``, relative to
    ``directory``), nodes first, then namespaces, then the rest in file order."""
    files: list[Path] = []
    for entry in entries:
        path = directory / entry
        files += sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    out: list[dict[str, Any]] = []
    for f in files:
        try:
            docs = [d for d in yamltext.load_all(f.read_text()) if d]
        except (OSError, yamltext.YAMLError) as exc:
            raise AppSpecError(f"{f}: cannot read manifest: {exc}") from None
        for i, d in enumerate(docs):
            if not isinstance(d, dict) or "kind" not in d or "metadata" not in d:
                raise AppSpecError(f"{f}: document {i}: not a Kubernetes object (needs kind and metadata)")
        out += docs
    order = {"Node": 0, "Namespace": 1}
    return sorted(out, key=lambda d: order.get(d["kind"], 2))


def catalog_rows(spec: AppSpec, manifests: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The products of the catalogue app.yaml ``catalog`` names, in the catalogue's order, each with an
    ``id`` (none without a catalogue): a JSON catalogue's products, or the rows an SQL one inserts."""
    if spec.catalog is None:
        return []
    name, key = spec.catalog.config_map, spec.catalog.key
    where = f"{spec.directory / 'app.yaml'}: catalog"
    for obj in manifests:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "ConfigMap" or meta.get("name") != name or meta.get("namespace", spec.namespace) != spec.namespace:
            continue
        text = (obj.get("data") or {}).get(key)
        if not isinstance(text, str):
            raise AppSpecError(f"{where}.key: ConfigMap {name} has no key {key!r}")
        products: Any
        if spec.catalog.table is not None:
            try:
                products = _seed_rows(text, spec.catalog.table)
            except SqlError as exc:
                raise AppSpecError(f"{where}: ConfigMap {name} key {key}: {exc}") from None
        else:
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as exc:
                raise AppSpecError(f"{where}: ConfigMap {name} key {key}: not JSON ({exc})") from None
            products = doc.get("products") if isinstance(doc, dict) else None
        rows = [p for p in products or [] if isinstance(p, dict) and p.get("id") is not None]
        if not rows:
            what = f"rows inserted into {spec.catalog.table}" if spec.catalog.table else "products"
            raise AppSpecError(f"{where}: ConfigMap {name} key {key}: no {what} with an id")
        return rows
    raise AppSpecError(f"{where}.config_map: no ConfigMap {name!r} in namespace {spec.namespace} of the manifests")


@lru_cache(maxsize=PARSED_APPS)
def _seed_rows(script: str, table: str) -> tuple[dict[str, Any], ...]:
    """:func:`inserted_rows`, parsed once per process for every twin of an app (~10 ms a script;
    read-only: the twins share the rows)."""
    return tuple(inserted_rows(script, table))


def catalog_records(spec: AppSpec, rows: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """The products as the app's HTTP API lists them: each row through app.yaml ``catalog.json`` (a
    JSON catalogue's products as they are without one), in ``catalog.order_by`` order."""
    catalog = spec.catalog
    if catalog is None:
        return ()
    where = f"{spec.directory / 'app.yaml'}: catalog"
    ordered, order_by = rows, catalog.order_by
    if order_by is not None:
        if any(order_by not in row for row in rows):
            raise AppSpecError(f"{where}.order_by: {order_by!r} is not a column of every product")
        ordered = sorted(rows, key=lambda row: str(row[order_by]))

    def record(template: Mapping[str, Any], row: Mapping[str, Any], at: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field_name, spec_of in template.items():
            if "column" not in spec_of:
                out[field_name] = record(spec_of, row, f"{at}.{field_name}")
                continue
            column = spec_of["column"]
            if column not in row:
                raise AppSpecError(f"{where}.json{at}.{field_name}: {column!r} is not a column of product {row.get('id')!r}")
            value = row[column]
            if "split" in spec_of:  # product-catalog's parseProductRow: a comma list, each trimmed; empty: none
                value = [part.strip() for part in str(value).split(spec_of["split"])] if value else []
            out[field_name] = value
        return out

    return tuple(record(catalog.json, row, "") if catalog.json is not None else dict(row) for row in ordered)


def _kafkametrics(name: str, attrs: tuple[tuple[str, str], ...], version: str) -> dict[str, str]:
    """A series of the collector's kafkametrics receiver as its exporter serves it (no service resource:
    no job or instance; the receiver's scope, versioned with the collector)."""
    return {"__name__": name, **dict(attrs), "otel_scope_name": KAFKAMETRICS_SCOPE, **({"otel_scope_version": version} if version else {})}


def _resource_labels(name: str, job: str, instance: str, attrs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """A pod's OTLP metric as the collector's exporter serves it: ``job`` and ``instance`` from its resource."""
    return {"__name__": name, **dict(attrs), "job": job, "instance": instance}


def _scoped_labels(name: str, job: str, instance: str, attrs: tuple[tuple[str, str], ...], scope: tuple[str, str]) -> dict[str, str]:
    """A pod's OTLP metric with its instrumentation scope, as the collector's exporter serves it."""
    return {**_resource_labels(name, job, instance, attrs), "otel_scope_name": scope[0], **({"otel_scope_version": scope[1]} if scope[1] else {})}


def _rng(seed: int, tick: int, name: str) -> np.random.Generator:
    """The stream of ``name`` at ``tick``: ``default_rng([seed, tick, crc32(name)])``.

    The model builds dozens a tick, so it skips ``default_rng``'s dispatch and, when every entry
    is one 32-bit word (as SeedSequence splits an int), hands SeedSequence the words as an array
    instead of a list of ints it would convert one by one: the same entropy, the same stream.
    """
    entropy = [seed, tick, zlib.crc32(name.encode())]
    words = np.array(entropy, dtype=np.uint32) if 0 <= seed < 2**32 and 0 <= tick < 2**32 else entropy
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))


def _log_context(op: Operation) -> dict[str, str]:
    """What an operation's request lines say about it: method and path (its route, else a POST of
    its id) and the first service it calls."""
    m = _ROUTE.search(op.id)
    ctx = {"method": m.group(1) if m else "POST", "path": m.group(2) if m else "/" + op.id}
    if op.calls:
        ctx["upstream"] = op.calls[0].service
    return ctx


def _node_cpus(node: dict[str, Any]) -> tuple[str, float]:
    return node["metadata"]["name"], parse_quantity(((node.get("status") or {}).get("capacity") or {}).get("cpu", "1"))


def _node_memory(node: dict[str, Any]) -> tuple[str, float]:
    return node["metadata"]["name"], parse_quantity(((node.get("status") or {}).get("capacity") or {}).get("memory", "0"))


def _catchers(spec: AppSpec, catalog: TraceCatalog) -> dict[tuple[str, str, str], tuple[str, ...]]:
    """The ``return`` calls each internal span wraps, by (service, operation, span): the code that
    catches such a call's failure marks the span around it (Python's ``span.set_status(ERROR)``)."""
    out: dict[tuple[str, str, str], tuple[str, ...]] = {}
    for (service, op_id), d in catalog.operations.items():
        returns = {c.id for c in spec.op(service, op_id).calls if c.on_error == "return"}
        for name, inner in d.internal.items():
            caught = tuple(c for c in inner.wraps if c in returns)
            if caught:
                out[(service, op_id, name)] = caught
    return out


def _caught_share(stats: OpStats, calls: tuple[str, ...]) -> float:
    """Share of an operation's successful requests that a caught failure of one of ``calls`` ended."""
    if not calls or stats.p_err >= 1.0:
        return 0.0
    ended = sum(co.frac * (1.0 - all_ok(co.q, co.count)) for co in stats.calls if co.call.id in calls)
    return min(ended / (1.0 - stats.p_err), 1.0)


def _truthy(v: Any) -> bool:
    return bool(v) and v != "off"


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else (1.0 if v is True else 0.0)


#: A span series drawn this tick: its connector, its key and its duration's moments.
Drawn = tuple[SpanMetrics, SeriesKey, Moments]
#: Internal spans an error handler may catch: (the server span's ok count's position, share caught,
#: connector, its keys, moments).
Internal = tuple[int, float, SpanMetrics, SeriesKey, SeriesKey, Moments]


def _count_spans(rng: np.random.Generator, lams: list[float], drawn: list[Drawn], internal: list[Internal],
                 tables: BucketTables, at: np.ndarray) -> None:
    """One service's spans of a tick: every count in one Poisson draw (``lams``, one per ``drawn``
    series before the internal ones), the internal spans an error handler caught in one binomial
    draw, then each connector's series at once (``at``: each series' row in ``tables``)."""
    counts = rng.poisson(lams)
    if internal:
        pos = np.array([i for i, *_ in internal])
        n_ok, served = counts[pos], counts[pos] + counts[pos + 1]
        n_caught = rng.binomial(n_ok, [p for _, p, *_ in internal])
        counts = np.concatenate([counts, np.column_stack([served - n_caught, n_caught]).ravel()])
    first = drawn[0][0]
    if all(spans is first for spans, _, _ in drawn):  # the usual case: one collector counts them all
        first.record([key for _, key, _ in drawn], counts, tables.of(first), at, rng)
        return
    by_connector: dict[int, tuple[SpanMetrics, list[int]]] = {}
    for i, (spans, _, _) in enumerate(drawn):
        by_connector.setdefault(id(spans), (spans, []))[1].append(i)
    for spans, rows in by_connector.values():
        spans.record([drawn[i][1] for i in rows], counts[rows], tables.of(spans), at[rows], rng)


class AppModel:
    def __init__(self, spec: AppSpec, manifests: list[dict[str, Any]], seed: int, *, machines: Machines | None = None) -> None:
        """``machines``: the node-level part shared with the app's other instances (``fleet.py``); by
        default this instance's own, which ``tick`` runs after the app's step."""
        self.spec = spec
        self.seed = seed
        self._manifests = manifests
        #: The catalogue's product ids (URLs, log lines, span attributes).
        rows = catalog_rows(spec, manifests)
        self.products = tuple(str(row["id"]) for row in rows)
        #: each server operation's requests as they travel (route templates filled from the catalogue)
        self._wire = wire_requests(spec, _route_values(spec, rows))
        #: the products as the app's HTTP API answers them (``traces/exchange.py``)
        self.catalog_records = catalog_records(spec, rows)
        self._log_pools = logmod.FieldPools.of(spec, self.products)
        self._solver = FlowSolver(spec)
        self._balancer = Balancer(spec, seed, (key[0] for key in self._solver.order))
        self._collectors = Collectors(spec)
        self._runtime_metrics = RuntimeTelemetry(spec.directory, set(spec.services))
        self._mesh_metrics = MeshTelemetry(spec)
        self._ticks = TickPacker(spec)
        self._bucket_tables = BucketTables()
        self._state = _State()
        self._reader = ClusterReader(spec)
        self._mesh = MeshReader()
        self._node_cpus = Derived(_node_cpus)
        self._node_memory = Derived(_node_memory)
        self._view: ClusterView | None = None
        self._runtime = AppRuntime(spec, self.view_of, manifests)
        self.machines = machines or Machines(self._runtime.idle_usage, self._runtime.installed_memory)
        #: containers whose process writes its logs only to its OTLP exporter
        self._otlp_only_logs = frozenset(s.container for s in spec.services.values() if s.logs.destination == "otlp")
        self._disk_io = load_disk_io(spec.directory)
        self._log_context = {(svc.name, op.id): _log_context(op) for svc in spec.services.values() for op in svc.operations.values()}
        #: each operation's request lines as activities at one line per request (their context worded once)
        self._request_lines = {key: tuple(a for line in spec.services[key[0]].logs.request for a in logmod.activity(line.text, line.ratio, **ctx))
                               for key, ctx in self._log_context.items()}
        self._catchers = _catchers(spec, self._log_pools.catalog)
        #: operations that fail every request by design, as the flow's self errors
        self._always_fails = {(svc.name, op.id): (1.0, *op.always_fails) for svc in spec.services.values()
                              for op in svc.operations.values() if op.always_fails is not None}

    @classmethod
    def load(cls, app_dir: Path, *, seed: int) -> AppModel:
        spec, manifests = parsed_app(app_dir)
        return cls(spec, manifests, seed)

    def manifests(self) -> list[dict[str, Any]]:
        """Everything to deploy, nodes and namespaces first."""
        return copy.deepcopy(self._manifests)

    def manifests_read_only(self) -> Sequence[Mapping[str, Any]]:
        """The manifests as parsed, without a copy: to read, never to modify (other twins share them)."""
        return self._manifests

    def runtime(self) -> AppRuntime:
        return self._runtime

    def view_of(self, namespace: str) -> ClusterView | bool:
        """The last tick's view of ``namespace`` when the app runs there (True before the first tick)."""
        if namespace != self.spec.namespace:
            return False
        return self._view if self._view is not None else True

    def view_now(self, store: StoreLike, now: float) -> ClusterView:
        """The app's namespace as it is at ``now``, for a process that dials between ticks (read by a
        reader of its own, so the tick's reader and its caches are left as they were)."""
        return ClusterReader(self.spec).read(store, now=now, ready_before=self._state.ready_before)

    def reseed(self, seed: int) -> None:
        """Draw noise, connection pins, log lines and traces from ``seed`` (``Twin.reseed``)."""
        self.seed = seed
        self._balancer.seed = seed

    # -- one tick -------------------------------------------------------------------------------

    def tick(self, t: float, dt: float, cluster: ClusterLike, *, expose: bool = True) -> list[Sample]:
        """Advance the model and its machines by one tick ending at ``t``; the kubelets' cAdvisor
        series when ``expose`` (a tick Prometheus scrapes), else nothing: building them costs about as
        much as the model and no one reads them in between. What the pods and the collector serve is
        :meth:`exposed`."""
        usage = self.step(t, dt, cluster)
        return self.machines.settle(cluster, usage, self.modelled(), self.stresses(), dt, self.node_ips() if expose else None)

    def step(self, t: float, dt: float, cluster: ClusterLike) -> list[ContainerUsage]:
        """The app's part of a tick: its request flow, telemetry and logs, and the usage of its own
        containers (those at their limit killed); the machines then settle the whole cluster."""
        st = self._state
        st.tick += 1
        view = self._reader.read(cluster.store, now=t, dt=dt, ready_before=st.ready_before)
        st.ready_before = ready_pod_labels(view.all_pods)
        self._view = view
        self._collectors.observe(view, t)
        starts, dropped = self._track_instances(view, t, dt)
        flags = self._served_flags(view, cluster)
        effects = [(e, flags[e.flag]) for e in self.spec.effects if _truthy(flags.get(e.flag))]
        knobs, burn, mem_add = self._knobs(view, effects, dict(self._node_memory.of(list_kind(cluster.store, "Node"))))
        knobs.dropped.update(dropped)
        mesh = self._mesh.read(cluster.store)
        reaches = self._reaches(view, effects, mesh)
        stats = self._solver.stats(reaches, knobs)
        roots = self._load_roots(view, stats, t, dt)
        rates, client = self._solver.rates(stats, roots)
        consumer_roots, effect_logs = self._kafka(view, rates, client, effects, dt)
        if consumer_roots:
            more_rates, more_client = self._solver.rates(stats, consumer_roots)
            for k, v in more_rates.items():
                rates[k] = rates.get(k, 0.0) + v
            client.update(more_client)
        st.op_rate = dict(rates)
        st.shares, st.pins = self._balancer.shares(view, client, st.tick, st.pins)
        self._mesh_metrics.observe(view, mesh, stats, client, st.shares, dt, _rng(self.seed, st.tick, "mesh"))
        self._record_spans(view, stats, rates, client, dt)
        self._collectors.flush()
        usage = self._resources(view, cluster, t, dt, rates, burn, mem_add, effects, stats)
        st.history.append(logmod.TickLog(t, dt, self._log_activity(view, stats, rates, effects, effect_logs, knobs.error_log), starts))
        st.trace_ticks.append(self._ticks.pack(TraceTick.capture(self.spec, view, t, dt, stats, rates, client, knobs, st.backlog,
                                                                 flags=flags, instances=st.instances)))
        return usage

    def started_env(self, pod: Mapping[str, Any], container: str) -> dict[str, str] | None:
        """The env the app container's current run started with (ConfigMap and Secret keys as they
        were then); None when the model runs no such process."""
        restarts = next((int(c.get("restartCount") or 0) for c in (pod.get("status") or {}).get("containerStatuses") or []
                         if c.get("name") == container), 0)
        inst = self._state.instances.get(f"{pod['metadata'].get('uid', '')}/{container}/{restarts}")
        return dict(inst.env) if inst is not None else None

    def modelled(self) -> set[tuple[str, str]]:
        """The containers this instance drives, as (pod uid, container): the app's and their sidecars."""
        view = self._view
        if view is None:
            return set()
        out = {(p.uid, p.container["name"]) for p in view.pods}
        return out | {(p.uid, side) for p in view.pods for side in self.spec.services[p.service].sidecars}

    def stresses(self) -> list[dict[str, Any]]:
        """The StressChaos experiments the last tick saw (cluster-wide)."""
        return [o for o in self._view.chaos if o["kind"] == "StressChaos"] if self._view is not None else []

    def node_ips(self) -> dict[str, str]:
        """The address of each node this instance's pods run on (cAdvisor's ``instance``)."""
        return {p.node: p.pod.get("status", {}).get("hostIP", p.node) for p in self._view.pods} if self._view is not None else {}

    def _track_instances(self, view: ClusterView, t: float, dt: float) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
        """New container runs (their start times) and, per service, the share of its requests
        that failed because a process serving them died abruptly since the last tick.

        A container that is killed (OOM, crash, failed liveness) while its pod lives on drops the
        requests it had in flight; a pod deleted with a grace period drains first.
        """
        st = self._state
        alive: set[str] = set()
        starts: dict[tuple[str, str], float] = {}
        view.started_env = {k: inst.env for k, inst in st.instances.items()}
        for p in view.pods:
            if not p.running:
                continue
            key = instance_key(p)
            alive.add(key)
            if key not in st.instances:
                env = view.started_env[key] = started_env(p, view)
                st.instances[key] = Instance(started=t, service=p.service, panic_calls=self._panics_at_start(view, p),
                                             env=env, writes=self._store_writes(view, p, env),
                                             load_shape=self._started_shape(view, p, env))
                dependency = self.spec.services[p.service].start_dependency
                if dependency is None or reachable_once_started(self.spec, view, p, dependency.address):
                    starts[(p.name, p.container["name"])] = t  # a server that will exit never says it started
        living_pods = {p["metadata"].get("uid", "") for p in view.all_pods if not p["metadata"].get("deletionTimestamp")}
        lost: dict[str, float] = {}
        for key, inst in st.instances.items():
            if key not in alive and key.split("/", 1)[0] in living_pods and inst.inflight > 0:
                lost[inst.service] = lost.get(inst.service, 0.0) + inst.inflight
        st.instances = {k: v for k, v in st.instances.items() if k in alive}
        dropped = {svc: min(n / (st.service_rate[svc] * dt), 1.0) for svc, n in lost.items()
                   if st.service_rate.get(svc, 0.0) > 0 and dt > 0}
        return starts, dropped

    def _store_writes(self, view: ClusterView, pod: PodView, env: dict[str, str]) -> StoreWrites | None:
        """A loop of the container's shell script that stores data through its server's own client."""
        svc = self.spec.services[pod.service]
        if svc.store_client is None:
            return None
        script = shell_script(pod.container, pod.pod, env, view)
        return store_writes(script, svc.store_client, svc.store_commands) if script else None

    def _started_shape(self, view: ClusterView, pod: PodView, env: dict[str, str]) -> LoadShape | None:
        """The LoadTestShape a load generator's Locust loaded at its start: the app's shape program
        among its locustfiles and the JSON it reads next to itself, as the mounted ConfigMap held
        them. None without one, or when the JSON is not a valid shape (Locust would not start; the
        twin runs the generator's steady users instead)."""
        app = self.spec
        program = app.load_shape
        if pod.service != app.load_service or program is None:
            return None
        for path in env.get(program.locustfile_env, "").split(","):
            path = path.strip()
            if mounted_file(path, pod.container, pod.pod, view) != program.text:
                continue
            text = mounted_file(posixpath.join(posixpath.dirname(path), program.data), pod.container, pod.pod, view)
            try:
                doc = json.loads(text) if text is not None else None
            except ValueError:
                return None
            return parse_shape(doc) if doc is not None and not shape_document_problems(doc) else None
        return None

    def _panics_at_start(self, view: ClusterView, pod: PodView) -> tuple[str, ...]:
        """Calls whose client is built at start-up and is nil when the target was unreachable then."""
        out = []
        for op in self.spec.services[pod.service].operations.values():
            for c in op.calls:
                if c.unreachable_at_start == "panic":
                    host, port = resolve_address(c.address, pod.env)
                    if reach(self.spec, view, pod, host, port, c.service).ok_share <= 0:
                        out.append(f"{op.id}/{c.id}")
        return tuple(out)

    def _served_flags(self, view: ClusterView, cluster: ClusterLike) -> dict[str, Any]:
        """What flagd serves: the flag file it watches in its container (on the Astronomy Shop the
        copy its init container made of the ConfigMap when the pod started, in an emptyDir, so a
        ConfigMap edit shows after a new pod and an edit of the copy at once). A process loads the
        file as it starts (none it accepts: no flags) and each version written after, keeping what
        it served when it rejects one (`cluster_view.loaded_flag_set`)."""
        now = self._flagd_now(view, cluster)
        if now is None:
            return {}  # what a process held stays with it while it serves no one
        self._state.flagd = now
        return now.flags

    def _flagd_now(self, view: ClusterView, cluster: ClusterLike) -> ServedFlags | None:
        """What the flag service's process holds in ``view`` (None: none serves), from what it held at
        the last tick when it is the same process."""
        serving = view.serving(self.spec.flag_service) if self.spec.flag_file is not None else []
        if not serving:
            return None
        pod = serving[0]
        process = f"{pod.uid}/{pod.restarts}"
        text = cluster.container_file(view.namespace, pod.name, pod.container["name"], str(self.spec.flag_file))
        served = self._state.flagd
        if served is not None and served.process == process and served.text == text:
            return served
        loaded = loaded_flag_set(text)
        if loaded is None:
            kept = served if served is not None and served.process == process else None
            return ServedFlags(process, text, kept.flags, kept.held) if kept is not None else ServedFlags(process, text, {})
        return ServedFlags(process, text, served_values(loaded, self.spec), loaded)

    def flagd_holds(self, view: ClusterView, cluster: ClusterLike) -> FlagSet | None:
        """The flag set the flag service's process holds in ``view`` (between ticks: the file it reads
        now), None when no process serves."""
        now = self._flagd_now(view, cluster)
        return now.held if now is not None else None

    def _knobs(self, view: ClusterView, effects: list[tuple[Effect, Any]],
               node_memory: Mapping[str, float]) -> tuple[Knobs, dict[str, float], dict[str, float]]:
        k = Knobs()
        burn: dict[str, float] = {}
        mem_add: dict[str, float] = {}
        k.self_error.update(self._always_fails)
        for e, value in effects:
            mag = float(e.get("magnitude", 0.0)) * (_num(value) if e.get("scale") == "value" else 1.0)
            key = (e.get("service"), e.get("operation"))
            if e.type == "error_ratio":
                k.self_error[key] = (min(max(mag, 0.0), 1.0), e.get("grpc_code", "UNKNOWN"), e.get("error", ""))
            elif e.type == "latency":
                k.extra_latency[key] = lognormal(max(mag, 1e-3) / 1000.0, float(e.get("sigma", 0.5)))
            elif e.type == "cpu_burn":
                burn[e.get("service")] = burn.get(e.get("service"), 0.0) + mag
            elif e.type == "call_count":
                k.call_count[(e.get("service"), e.get("operation"), e.get("call"))] = mag
            elif e.type == "cache_leak":
                k.call_scale[(e.get("service"), e.get("operation"), e.get("call"))] = float(e.get("miss_ratio"))
            elif e.type == "header_delay" and mag > 0:
                # Envoy's fault filter holds a request for the header's milliseconds while fewer than
                # max_active are held; at the last tick's rate that is this share of them.
                held = mag / 1000.0
                busy = self._state.op_rate.get(key, 0.0) * held
                k.fault_delay[key] = (min(1.0, float(e.get("max_active")) / busy) if busy > 0 else 1.0, held)
        for svc in self.spec.services.values():
            labels = {"app.kubernetes.io/component": svc.name, "opentelemetry.io/name": svc.name}
            pods = view.by_service.get(svc.name, [])
            if pods:
                labels = pods[0].labels
            for obj in view.chaos:
                if obj["kind"] == "StressChaos" and _injected(obj, pods):
                    stress = (obj.get("spec") or {}).get("stressors") or {}
                    cpu = stress.get("cpu") or {}
                    burn[svc.name] = burn.get(svc.name, 0.0) + float(cpu.get("workers", 0)) * float(cpu.get("load", 100)) / 100.0
                    memory = stress.get("memory") or {}
                    if memory:
                        mem_add[svc.name] = mem_add.get(svc.name, 0.0) + stress_bytes(str(memory.get("size", "0")), pods[0].limits.get("memory", 0.0) if pods else 0.0)
            for obj in view.chaos:
                j = obj.get("spec") or {}
                if obj["kind"] != "JVMChaos" or not chaos_selects(j.get("selector"), view.namespace, labels):
                    continue
                if j.get("action") == "stress" and svc.jvm is not None and _injected(obj, pods):
                    # StressHelper: cpuCount busy threads, or (memType heap) one list held in the heap.
                    burn[svc.name] = burn.get(svc.name, 0.0) + float(j.get("cpuCount") or 0)
                    if j.get("memType") == "heap":
                        heap = max_heap_bytes(pods[0].env, pods[0].limits.get("memory", 0.0), node_memory.get(pods[0].node, 0.0))
                        mem_add[svc.name] = mem_add.get(svc.name, 0.0) + heap_stress_bytes(heap, svc.jvm.heap_live_bytes)
                elif svc.jvm is not None and _injected(obj, pods) and \
                        (script := experiment_script(obj)) is not None:
                    _apply_rules(k, svc.name, svc.jvm, script_rules(script))
            for obj in view.chaos:
                if obj["kind"] == "HTTPChaos" and svc.request_bodies:
                    # the server's proxy sees the requests on its port, each injected caller's on the port it dials
                    ports = {svc.port} if svc.port is not None and _injected(obj, pods) else set()
                    _apply_body_patch(k, svc, obj.get("spec") or {}, ports | self._dialed_ports(view, obj, svc.name))
            io_chaos = [o for o in view.chaos if o["kind"] == "IOChaos"]
            io = next((hit for p in pods if (hit := io_fault(io_chaos, p.pod, self._disk_io.get(svc.name))) is not None), None)
            if io is not None:
                for op in svc.operations:
                    if io.delay_s > 0:
                        k.extra_latency[(svc.name, op)] = lognormal(io.delay_s, 0.2)
                    if io.error_ratio > 0:
                        k.self_error[(svc.name, op)] = (io.error_ratio, "UNKNOWN", io.message)
        for svc in self.spec.services.values():
            pods = senders(self.spec, view, svc.name)
            shares = self._state.shares.get(svc.name, {})
            parts = [(shares.get(instance_key(p), 1.0 / len(pods)), self._state.instances[instance_key(p)].cpu)
                     for p in pods if instance_key(p) in self._state.instances]
            total = sum(s for s, _ in parts)
            if total <= 0:
                continue
            k.slowdown[svc.name] = sum(s * c.slowdown for s, c in parts) / total
            wait = mixture([(s, Moments(c.wait_s, (c.wait_s / 2) ** 2)) for s, c in parts])
            if wait.mean > 0:
                k.queue_wait[svc.name] = wait
        return k, burn, mem_add

    def _dialed_ports(self, view: ClusterView, chaos: dict[str, Any], callee: str) -> set[int]:
        """The ports on which the pods ``chaos`` was injected into dial ``callee``."""
        out: set[int] = set()
        for svc in self.spec.services.values():
            calls = [c for op in svc.operations.values() for c in op.calls if c.service == callee]
            for p in view.running(svc.name) if calls else ():
                if _injected(chaos, [p]):
                    out |= {port for c in calls if (port := resolve_address(c.address, p.env)[1]) is not None}
        return out

    def _reaches(self, view: ClusterView, effects: list[tuple[Effect, Any]], mesh: MeshState) -> dict[tuple[str, str, str], Reach]:
        redirects = {(e.get("service"), e.get("operation"), e.get("call")): e.get("address") for e, _ in effects if e.type == "redirect"}
        cache: dict[tuple[str, str, int | None, str, str, str | None], Reach] = {}
        out: dict[tuple[str, str, str], Reach] = {}
        for svc in self.spec.services.values():
            pods = view.serving(svc.name) or view.running(svc.name)
            src = pods[0] if pods else None
            env = view.started_env.get(instance_key(src), src.env) if src else {}
            for op in svc.operations.values():
                for c in op.calls:
                    host, port = resolve_address(c.address, env, redirects.get((svc.name, op.id, c.id)))
                    password = env.get(c.password_env) if c.password_env else None
                    key = (svc.name, host, port, c.service, c.operation, password)
                    if key not in cache:
                        cache[key] = admit(mesh, view, src, host, port, c.operation,
                                           reach(self.spec, view, src, host, port, c.service, password,
                                                 request=self._wire.get((c.service, c.operation))))
                    out[(svc.name, op.id, c.id)] = cache[key]
        return out

    def _load_roots(self, view: ClusterView, stats: dict[OpKey, OpStats], t: float, dt: float) -> dict[OpKey, float]:
        """Each user loops over its class's tasks with the class's wait between them; the generator
        shares its users among the classes its environment enables, by weight (Locust's dispatch),
        and starts them at its spawn rate from the process's start, or as its LoadTestShape says."""
        roots: dict[OpKey, float] = {}
        for p in view.running(self.spec.load_service):
            instance = self._state.instances.get(instance_key(p))
            if instance is not None and instance.load_shape is not None:
                # Locust ignores -u/-r when a shape sets the users; -r is still a step's default rate
                rate = (_env_number(p.env, self.spec.spawn_rate_env, self.spec.default_spawn_rate)
                        if self.spec.spawn_rate_env is not None else self.spec.default_spawn_rate)
                users, instance.shape_users = shaped_users(instance.load_shape, rate, instance.shape_users,
                                                           t - dt - instance.started, t - instance.started)
            else:
                users = _env_number(p.env, self.spec.users_env, float(self.spec.default_users))
                if self.spec.spawn_rate_env is not None:
                    rate = _env_number(p.env, self.spec.spawn_rate_env, self.spec.default_spawn_rate)
                    if instance is not None and rate > 0:
                        users = ramped_users(users, rate, t - dt - instance.started, t - instance.started)
            classes = [c for c in self.spec.user_classes if c.enabled(p.env)]
            if not classes:  # every class waits for an env var this generator does not set: no users run
                continue
            total_cw = sum(c.weight for c in classes)
            for c in classes:
                total_w = sum(task.weight for task in c.tasks)
                mean_task = sum(task.weight / total_w * stats[(self.spec.load_service, task.operation)].ok.mean for task in c.tasks)
                per_user = users * c.weight / total_cw / (c.wait_mean_s + mean_task)
                for task in c.tasks:
                    key = (self.spec.load_service, task.operation)
                    roots[key] = roots.get(key, 0.0) + per_user * task.weight / total_w
        return roots

    def _kafka(self, view: ClusterView, rates: dict[OpKey, float], client: dict[tuple[str, str, str], tuple[float, float]],
               effects: list[tuple[Effect, Any]], dt: float) -> tuple[dict[OpKey, float], dict[str, float]]:
        """Each topic's consumption this tick; the collector's kafkametrics receiver reads the groups' lag
        and members, and a JVM consumer exports its client's connection closes over OTLP."""
        st = self._state
        roots: dict[OpKey, float] = {}
        effect_logs: dict[str, float] = {}
        for topic in self.spec.topics.values():
            produce_key = (topic.producer_call_to[0], topic.producer_call_to[1])
            produced = rates.get(produce_key, 0.0)
            extra = sum(float(e.get("magnitude", 0)) * (_num(v) if e.get("scale") == "value" else 1.0)
                        for e, v in effects if e.type == "extra_messages" and e.get("topic") == topic.name)
            produced *= 1.0 + extra
            rates[produce_key] = produced
            for c in topic.consumers:
                pods = view.running(c.service)
                members = 0
                for p in pods:
                    host, port = resolve_address(c.address, p.env)
                    if reach(self.spec, view, p, host, port, self.spec.broker or "").ok_share > 0:
                        members += 1
                    else:
                        st.closes[p.uid] = st.closes.get(p.uid, 0.0) + dt / 5.0
                delay = sum(float(e.get("magnitude", 0)) for e, _ in effects if e.type == "consumer_delay" and e.get("group") == c.group)
                per_pod = min(c.max_per_second_per_pod, 1.0 / delay) if delay > 0 else c.max_per_second_per_pod
                if delay > 0:
                    effect_logs[c.service] = effect_logs.get(c.service, 0.0) + members * per_pod
                backlog = st.backlog.get((topic.name, c.group), 0.0)
                waiting = produced + backlog / dt
                consumed = min(members * per_pod, waiting)
                # consumers that keep up leave no lag at all (not a float's residue of one)
                st.backlog[(topic.name, c.group)] = 0.0 if consumed >= waiting else backlog + (produced - consumed) * dt
                roots[(c.service, c.operation)] = roots.get((c.service, c.operation), 0.0) + consumed
                self._collectors.receive(("lag", topic.name, c.group), partial(_kafkametrics, "kafka_consumer_group_lag_sum_ratio",
                                                                                (("consumergroup", c.group), ("topic", topic.name))),
                                         st.backlog[(topic.name, c.group)])
                self._collectors.receive(("members", c.group), partial(_kafkametrics, "kafka_consumer_group_members",
                                                                       (("consumergroup", c.group),)), float(members))
                if self.spec.services[c.service].language in ("java", "kotlin"):
                    for p in pods:
                        self._collectors.push(view, p, ("closes", p.uid, c.group), partial(
                            _resource_labels, "kafka_consumer_connection_close_rate", self.spec.job_prefix + c.service, p.uid,
                            (("client_id", f"consumer-{c.group}-1"),)), st.closes.get(p.uid, 0.0))
        return roots, effect_logs

    def _record_spans(self, view: ClusterView, stats: dict[OpKey, OpStats], rates: dict[OpKey, float],
                      client: dict[tuple[str, str, str], tuple[float, float]], dt: float) -> None:
        """Count this tick's spans into the span metrics, a service at a time from the service's own
        stream (what one service's pods do never shifts another's draws); the bucket probabilities of
        every series of the tick first, in one computation per set of bucket bounds."""
        batches: list[tuple[str, list[float], list[Drawn], list[Internal]]] = []
        for svc in self.spec.services.values():
            if not svc.traced:
                continue
            pods = senders(self.spec, view, svc.name)
            if not pods:
                continue
            lams: list[float] = []
            drawn: list[Drawn] = []
            internal: list[Internal] = []
            shares = self._state.shares.get(svc.name, {})
            # what a pod sends while no collector answers it is lost
            pod_shares = [(p.uid, shares.get(instance_key(p), 0.0) * dt, spans) for p in pods
                          if (spans := self._collectors.receiver(view, p)) is not None]
            for op in svc.operations.values():
                r = rates.get((svc.name, op.id), 0.0)
                s = stats[(svc.name, op.id)]
                kind = f"SPAN_KIND_{op.kind}"
                caught = {name: _caught_share(s, self._catchers.get((svc.name, op.id, name), ())) for name in op.internal_spans}
                inner = Moments(s.ok.mean * 0.3, s.ok.var * 0.09)
                for uid, share, spans in pod_shares:
                    if r > 0:
                        for name in op.internal_spans:
                            internal.append((len(lams), caught[name], spans, (svc.name, name, "SPAN_KIND_INTERNAL", "STATUS_CODE_UNSET", uid),
                                             (svc.name, name, "SPAN_KIND_INTERNAL", "STATUS_CODE_ERROR", uid), inner))
                        lams += (r * (1.0 - s.p_err) * share, r * s.p_err * share)
                        drawn += ((spans, (svc.name, op.span, kind, "STATUS_CODE_UNSET", uid), s.ok),
                                  (spans, (svc.name, op.span, kind, "STATUS_CODE_ERROR", uid), s.err))
                    for co in s.calls:
                        if co.call.client_span is None:
                            continue
                        ok, err = client.get((svc.name, op.id, co.call.id), (0.0, 0.0))
                        client_kind = f"SPAN_KIND_{co.call.client_kind}"
                        if ok > 0:
                            lams.append(ok * share)
                            drawn.append((spans, (svc.name, co.call.client_span, client_kind, "STATUS_CODE_UNSET", uid), co.ok))
                        if err > 0:
                            lams.append(err * share)
                            drawn.append((spans, (svc.name, co.call.client_span, client_kind, "STATUS_CODE_ERROR", uid), co.err))
            if lams:
                for _, _, spans, unset, error, inner in internal:
                    drawn += ((spans, unset, inner), (spans, error, inner))
                batches.append((svc.name, lams, drawn, internal))
        tables = self._bucket_tables
        tables.next_tick()
        positions = [tables.add(drawn) for _, _, drawn, _ in batches]
        for (name, lams, drawn, internal), at in zip(batches, positions, strict=True):
            _count_spans(_rng(self.seed, self._state.tick, name), lams, drawn, internal, tables, at)

    def _resources(self, view: ClusterView, cluster: ClusterLike, t: float, dt: float, rates: dict[OpKey, float],
                   burn: dict[str, float], mem_add: dict[str, float], effects: list[tuple[Effect, Any]],
                   stats: dict[OpKey, OpStats]) -> list[ContainerUsage]:
        st = self._state
        usage: list[ContainerUsage] = []
        leaks = {(e.get("service"), e.get("operation")): (e, v) for e, v in effects if e.type in ("memory_leak", "cache_leak")}
        rate_of: dict[str, float] = {}
        # the CPUs a container's threads can run on in parallel: its node's
        node_cpus = dict(self._node_cpus.of(list_kind(cluster.store, "Node")))
        node_memory = dict(self._node_memory.of(list_kind(cluster.store, "Node")))
        full_gcs = [e for e, _ in effects if e.type == "full_gc"]
        for svc in self.spec.services.values():
            runtime = self.spec.runtime(svc.name)
            shares = st.shares.get(svc.name, {})
            svc_rps = sum(rates.get((svc.name, op), 0.0) for op in svc.operations)
            rate_of[svc.name] = svc_rps
            cpu_s = sum(rates.get((svc.name, op.id), 0.0) * op.cpu_ms / 1000.0 for op in svc.operations.values())
            running = [p for p in view.by_service.get(svc.name, []) if p.running]
            if not running:
                continue
            rng = _rng(self.seed, st.tick, f"res/{svc.name}")
            # the requests the service fails each second, by error text (a runtime's exceptions count them)
            svc_failures: dict[str, float] = {}
            for op in svc.operations.values() if svc.name in self._runtime_metrics.of_service else ():
                served = stats[(svc.name, op.id)]
                if served.p_err > 0:
                    svc_failures[served.error_text] = svc_failures.get(served.error_text, 0.0) + rates.get((svc.name, op.id), 0.0) * served.p_err
            svc_leaks = [(op, leaks[(svc.name, op.id)]) for op in svc.operations.values() if (svc.name, op.id) in leaks]
            for p in running:
                key = instance_key(p)
                inst = st.instances[key]
                share = shares.get(key, 0.0)
                leak_cpu = 0.0
                for op, (e, v) in svc_leaks if share != 0 else ():
                    pod_rate = rates.get((svc.name, op.id), 0.0) * share
                    if e.type == "memory_leak":
                        inst.leak_bytes += pod_rate * dt * float(e.get("magnitude", 0)) * (_num(v) if e.get("scale") == "value" else 1.0)
                    else:
                        g, add = float(e.get("growth")), float(e.get("entries_per_miss"))
                        fixed = -g * add / (g - 1.0)
                        misses = pod_rate * float(e.get("miss_ratio")) * dt
                        inst.cache_entries = fixed + g ** misses * (inst.cache_entries - fixed)
                        inst.cache_entry_bytes = float(e.get("bytes_per_entry", 0))
                        leak_cpu += pod_rate * inst.cache_entries * float(e.get("cpu_ns_per_entry", 0)) * 1e-9
                limit_mem = p.limits.get("memory", 0.0)
                limit_cpu = p.limits.get("cpu", math.inf) or math.inf
                pod_rps = svc_rps * share
                node_cores = node_cpus.get(p.node) or 1.0
                cpu = cpu_tick(inst.cpu, CpuDemand(
                    cores=min(limit_cpu, runtime.max_cores, svc.cpu_cores, node_cores), limit=limit_cpu, node_cores=node_cores,
                    idle=svc.cpu_idle, busy_threads=burn.get(svc.name, 0.0), request_cpu_s=cpu_s * share + leak_cpu,
                    requests_per_s=pod_rps, cpu_per_request_s=(cpu_s * share + leak_cpu) / pod_rps if pod_rps > 0 else 0.0,
                    wakeups_per_request=runtime.wakeups_per_request, jit_cold_factor=runtime.jit_cold_cpu_factor,
                    jit_warmup_cpu_s=runtime.jit_warmup_cpu_seconds), dt)
                inst.cpu = cpu.state
                inst.inflight = sum(rates.get((svc.name, op.id), 0.0) * share * stats[(svc.name, op.id)].ok.mean
                                    for op in svc.operations.values())
                if inst.writes is not None:
                    writing = min(dt, max(0.0, t - inst.started - inst.writes.delay_s))
                    inst.stored_bytes += inst.writes.bytes_per_s * writing
                mem = (svc.memory_mi + svc.memory_mi_per_rps * pod_rps) * MI + inst.stored_bytes
                mem += inst.leak_bytes + inst.cache_entries * inst.cache_entry_bytes + mem_add.get(svc.name, 0.0)
                mem *= 1.0 + 0.01 * float(rng.standard_normal())
                # The kernel kills at the limit: no scrape ever sees a working set above it.
                seen_mem = min(mem, limit_mem) if limit_mem else mem
                cluster.set_usage(view.namespace, p.name, p.container["name"], cpu_cores=cpu.usage_cores, memory_bytes=seen_mem)
                image = p.container.get("image", "")
                usage.append(ContainerUsage(view.namespace, p.name, p.uid, p.container["name"], image, p.node,
                                            f"{p.uid[:12]}-{p.container['name']}-{p.restarts}", cpu.usage_cores, seen_mem, limit_mem,
                                            p.limits.get("cpu", 0.0), cpu.cfs_periods_per_s, cpu.cfs_throttled_periods_per_s,
                                            cpu.cfs_throttled_s_per_s))
                if svc.name in self._runtime_metrics.of_service:
                    gcs = sum(rates.get((svc.name, str(e.get("operation"))), 0.0) * share * float(e.get("magnitude", 0.0))
                              for e in full_gcs if e.get("service") == svc.name)
                    failures = {text: per_s * share for text, per_s in svc_failures.items()}
                    self._export_runtime(view, p, inst, ProcessState(
                        seen_mem, cpu.usage_cores, math.ceil(limit_cpu) if math.isfinite(limit_cpu) else node_cores, limit_mem,
                        max_heap_bytes(inst.env, limit_mem, node_memory.get(p.node, 0.0)), pod_rps, inst.inflight, gcs, cpu.state.wait_s,
                        node_cores, inst.env, failures), t, dt)
                for side, sidecar in svc.sidecars.items():
                    cluster.set_usage(view.namespace, p.name, side, cpu_cores=sidecar.cpu_idle, memory_bytes=sidecar.memory_mi * MI)
                if limit_mem and mem >= limit_mem:
                    cluster.kill_container(view.namespace, p.name, p.container["name"], reason="OOMKilled", exit_code=137)
                    self.machines.cadvisor.record_oom(view.namespace, p.name, p.container["name"])
                elif inst.panic_calls and any(rates.get((svc.name, c.rsplit("/", 1)[0]), 0.0) * share > 0 for c in inst.panic_calls):
                    cluster.kill_container(view.namespace, p.name, p.container["name"], reason="Error", exit_code=2,
                                           message="panic: runtime error: invalid memory address or nil pointer dereference")
        st.service_rate = rate_of
        return usage

    def _export_runtime(self, view: ClusterView, p: PodView, inst: Instance, state: ProcessState, t: float, dt: float) -> None:
        """The process's runtime metrics, exported through the collector its telemetry goes to."""
        key, job = instance_key(p), self.spec.job_prefix + p.service

        def push(name: str, attrs: tuple[tuple[str, str], ...], value: float, scope: tuple[str, str]) -> None:
            self._collectors.push(view, p, ("runtime", key, name, attrs), partial(_scoped_labels, name, job, p.uid, attrs, scope), value)

        self._runtime_metrics.observe(p.service, inst.runtime, state, t - inst.started, dt, push)

    def _log_activity(self, view: ClusterView, stats: dict[OpKey, OpStats], rates: dict[OpKey, float],
                      effects: list[tuple[Effect, Any]], effect_logs: dict[str, float],
                      error_log: dict[OpKey, tuple[str, str]]) -> dict[tuple[str, str], tuple[logmod.LogActivity, ...]]:
        out: dict[tuple[str, str], tuple[logmod.LogActivity, ...]] = {}
        leak_ops = {(e.get("service"), e.get("operation")): float(e.get("miss_ratio", 0)) for e, _ in effects if e.type == "cache_leak"}
        for svc in self.spec.services.values():
            pods = senders(self.spec, view, svc.name)
            if not pods:
                continue
            # lines per second of the whole service, split over its pods by their share of requests
            acts: list[logmod.LogActivity] = []
            lg = svc.logs
            for op in svc.operations.values():
                r = rates.get((svc.name, op.id), 0.0)
                if r <= 0:
                    continue
                s = stats[(svc.name, op.id)]
                ctx = self._log_context[(svc.name, op.id)]
                served = r * (1.0 - s.p_err)
                acts += [logmod.LogActivity(a.template, served * a.rate, a.context) for a in self._request_lines[(svc.name, op.id)]
                         if served * a.rate > 0]
                if s.p_err > 0:
                    failing = next((co for co in s.calls if co.q > 0 and co.call.on_error == "propagate"), None)
                    error = s.error_text
                    if s.self_error > 0 and (svc.name, op.id) in error_log:
                        log_key, error = error_log[(svc.name, op.id)]
                        template = lg.errors.get(log_key) or lg.errors.get("default")
                    elif s.self_error > 0:
                        template = lg.errors.get("flag") or lg.errors.get("default")
                    elif failing is not None:
                        template = (lg.errors.get(failing.cause or "") or lg.errors.get(_LOG_CAUSE_FALLBACK.get(failing.cause or "", ""))
                                    or lg.errors.get(failing.call.cause_log or "") or lg.errors.get("default"))
                    else:
                        template = lg.errors.get("default")
                    acts += logmod.activity(template, r * s.p_err, error=error, grpc_code=s.grpc_code, status=str(s.op.error_status), **ctx,
                                            **logmod.failure_context(failing if s.self_error <= 0 else None, view))
                for co in s.calls:
                    if co.call.on_error in ("warn", "return") and co.q > 0:
                        acts += logmod.activity(lg.errors.get(co.call.cause_log or ""), r * co.frac * co.count * co.q,
                                                error=co.error_text, grpc_code=co.grpc_code, **ctx, **logmod.failure_context(co, view))
                if (svc.name, op.id) in leak_ops:
                    acts += logmod.activity(lg.effect.get("cache_leak"), r * leak_ops[(svc.name, op.id)])
            if svc.name in effect_logs:
                acts += logmod.activity(lg.effect.get("consumer_delay"), effect_logs[svc.name])
            shares = self._state.shares.get(svc.name, {})
            for p in pods:
                share = shares.get(instance_key(p), 1.0 / len(pods))
                out[(p.name, p.container["name"])] = tuple(logmod.LogActivity(a.template, a.rate * share, a.context)
                                                           for a in acts if a.rate * share > 0)
        return out

    # -- logs and snapshots -----------------------------------------------------------------------

    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        """The container's log records in [start, end] (to stdout or its OTLP exporter), identical on every call."""
        if namespace != self.spec.namespace:
            return []
        return logmod.render(self.spec, self._log_pools, self.seed, self._state.history, pod, container, start, end)

    def container_log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        """What the container writes to stdout (its container log): none of the records a process
        exports only over OTLP (product-catalog's otelslog handler)."""
        if container in self._otlp_only_logs:
            return []
        return self.log_lines(namespace, pod, container, start, end)

    def exposed(self) -> dict[PodEndpoint, list[list[Sample]]]:
        """What the pods serve now, scraped only where a monitor makes them a target: the mesh's proxies
        and the app's call counters on their /metrics, by (namespace, pod); the collector's exporter
        (span metrics, the pods' OTLP metrics) on its port, by (namespace, pod, port)."""
        out: dict[PodEndpoint, list[list[Sample]]] = {pod: [samples] for pod, samples in self._mesh_metrics.exposed().items()}
        for endpoint, runs in self._collectors.exposed().items():
            out[endpoint] = runs
        return out

    def snapshot(self) -> object:
        return (self._state.copy(), self._collectors.snapshot(), self.machines.snapshot(), self._mesh_metrics.snapshot())

    def restore(self, snap: object) -> None:
        if not isinstance(snap, tuple) or len(snap) != 4:
            raise TypeError("restore() takes what snapshot() returned")
        state, collectors, cad, mesh = snap
        self._state = state.copy()
        self._collectors.restore(collectors)
        self.machines.restore(cad)
        self._mesh_metrics.restore(mesh)
        self._view = None

    def log_streams(self, start: float, end: float) -> list[logmod.StreamInfo]:
        """Every container run that could have logged in [start, end], with pods deleted since
        (a log store keeps their lines after the Kubernetes API forgot them)."""
        return logmod.streams(self.spec, self._state.history, start, end)

    def trace_ticks(self) -> tuple[TraceTick, ...]:
        """The recorded flow of every tick so far, oldest first (traces are synthesised from it)."""
        return tuple(self._ticks.unpack(blob) for blob in self._state.trace_ticks)

    def last_trace_tick(self) -> TraceTick | None:
        """The recorded flow of the latest tick (None before the first)."""
        return self._ticks.unpack(self._state.trace_ticks[-1]) if self._state.trace_ticks else None
