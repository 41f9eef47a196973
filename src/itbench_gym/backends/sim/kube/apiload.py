"""The API server's load: who sends requests, API Priority and Fairness, and the latency that results.

Every scrape tick the model adds up the requests in flight from every client the cluster runs: the
control plane's steady requests (kubelets' leases and node status, leader election), and the
containers that run an API-calling program (``programs`` in ``apiload.yaml``: a closed loop of one
request, the client decoding the answer at its CPU limit, a sleep). APF classifies each request by
upstream's bootstrap FlowSchemas into a priority level, whose seats are its nominal share of the
server's concurrency limit. A level's offered load (requests/s x seconds a request holds its seat)
then gives the wait in its queues, as an M/M/c queue does (Erlang C). At its seats, closed-loop
clients wait as long as it takes to hold their demand to the seats (they cannot queue more requests
than there are clients); what still does not fit within the queue wait limit, or open arrivals
beyond the seats, is rejected with 429. A write holds its seat while etcd saves it: the member's
extra wait (``etcd.py``, IOChaos on its disk) is part of every write verb's service time.

The counters it integrates are upstream's metrics (``apiserver_request_total``, the duration and SLI
histograms, the ``apiserver_flowcontrol_*`` families, ``apiserver_current_inflight_requests``),
served by the apiserver's scrape target. The twin's real API (the agent's kubectl) asks
:meth:`ApiLoad.admit` what one request meets: its latency on the simulated clock, or a 429.
Gaps: levels do not borrow seats from each other; watches are not modelled (they hold no seat).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext

from .controllers.util import quantity
from .etcd import Etcd
from .exposition import LabelSets, histogram_samples
from .store import ObjectStore

Obj = dict[str, Any]
Sample = tuple[dict[str, str], float]
CONFIG = Path(__file__).with_name("apiload.yaml")
#: upstream's ``apiserver_request_duration_seconds`` and ``apiserver_request_sli_duration_seconds`` buckets
DURATION_BUCKETS = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0,
                    15.0, 20.0, 30.0, 45.0, 60.0)
SLI_BUCKETS = DURATION_BUCKETS[2:]
_READ_VERBS = ("GET", "LIST")


@dataclass(frozen=True)
class Level:
    """A PriorityLevelConfiguration: its seats (NominalCL) and queues."""

    name: str
    seats: int
    exempt: bool
    reject: bool
    queue_room: int
    """requests one flow may queue: handSize queues of queueLengthLimit"""


@dataclass(frozen=True)
class Schema:
    name: str
    level: str
    users: frozenset[str]
    groups: frozenset[str]
    sa_namespaces: frozenset[str]
    resources: frozenset[str]

    def matches(self, user: str, groups: Iterable[str], resource: str) -> bool:
        if self.resources and resource not in self.resources:
            return False
        if user in self.users or not self.groups.isdisjoint(groups):
            return True
        parts = user.split(":")
        return len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[2] in self.sa_namespaces


@dataclass(frozen=True)
class RequestClass:
    """Requests with the same metric labels and flow."""

    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    scope: str
    schema: str
    level: str

    @cached_property
    def metric(self) -> RequestClass:
        """The class as the metrics see it: flows of one verb and resource share their series."""
        return dataclasses.replace(self, schema="", level="")

    @property
    def labels(self) -> dict[str, str]:
        return {"verb": self.verb, "dry_run": "", "group": self.group, "version": self.version, "resource": self.resource,
                "subresource": self.subresource, "scope": self.scope, "component": "apiserver"}

    @property
    def read_only(self) -> bool:
        return self.verb in _READ_VERBS


@dataclass(frozen=True)
class LevelState:
    """One level this tick: mean queue wait, the chance a request waits and the wait's decay, rejections."""

    wait: float = 0.0
    p_wait: float = 0.0
    decay: float = 0.0
    rejected: float = 0.0
    saturated: bool = False

    def wait_fraction_within(self, t: float) -> float:
        """Fraction of requests whose queue wait is at most ``t``."""
        if self.saturated:
            return 1.0 if t >= self.wait else 0.0
        return 1.0 - self.p_wait * math.exp(-self.decay * t)


@dataclass(frozen=True)
class Verdict:
    """What one request meets: its latency in the server, or a 429."""

    latency: float
    rejected: bool
    retry_after: int = 1


@dataclass(frozen=True)
class Config:
    limit: int
    wait_limit: float
    levels: dict[str, Level]
    schemas: tuple[Schema, ...]
    service: dict[str, float]
    per_object: float
    clients: tuple[Obj, ...]
    programs: tuple[Obj, ...]


@cache
def load_config(path: Path = CONFIG) -> Config:
    """``apiload.yaml``, parsed once."""
    return parse_config(yamltext.load(path.read_text(encoding="utf-8")), path)


def parse_config(raw: Mapping[str, Any], path: Path = CONFIG) -> Config:
    """The model's configuration, with each level's NominalCL worked out as upstream does."""
    limit = int(raw["serverConcurrencyLimit"])
    specs: dict[str, Obj] = raw["priorityLevels"]
    total = sum(int(s.get("shares", 0)) for s in specs.values() if not s.get("exempt"))
    levels = {name: Level(name, math.ceil(limit * int(s.get("shares", 0)) / total) if not s.get("exempt") else 0,
                          bool(s.get("exempt")), bool(s.get("reject")),
                          int(s.get("handSize", 0)) * int(s.get("queueLengthLimit", 0)))
              for name, s in specs.items()}
    schemas = tuple(Schema(s["name"], s["level"], frozenset(s.get("users", ())), frozenset(s.get("groups", ())),
                           frozenset(s.get("serviceAccountNamespaces", ())), frozenset(s.get("resources", ())))
                    for s in raw["flowSchemas"])
    for s in schemas:
        if s.level not in levels:
            raise ValueError(f"{path}: flowSchemas {s.name!r}: no priority level {s.level!r}")
    return Config(limit, float(raw["requestWaitLimitSeconds"]), levels, schemas,
                  {k: float(v) for k, v in raw["serviceSeconds"].items()}, float(raw["listSecondsPerObject"]),
                  tuple(raw.get("clients") or ()), tuple(raw.get("programs") or ()))


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``offered`` erlangs (< servers)."""
    b = 1.0
    for k in range(1, servers + 1):
        b = offered * b / (k + offered * b)
        if b < 1e-12:
            return 0.0
    return servers * b / (servers - offered * (1.0 - b))


@dataclass
class _Flow:
    cls: RequestClass
    rate: float
    service: float
    #: closed-loop clients: seconds of client time per answer (decoding) and the sleep between requests
    client: float = 0.0
    pause: float = 0.0
    clients: int = 0

    def offered_rate(self, level: LevelState) -> float:
        if not self.clients:
            return self.rate
        served = 1.0 - level.rejected
        cycle = self.pause + level.wait + served * (self.client + self.service)
        return self.clients / cycle


@dataclass(frozen=True)
class ApiLoadSnapshot:
    counters: tuple[tuple[Any, float], ...]
    histograms: tuple[tuple[tuple[str, RequestClass], tuple[float, ...]], ...]
    levels: tuple[tuple[str, LevelState], ...]
    flows: tuple[_Flow, ...]
    rejected_carry: float
    recorded_writes: float = 0.0


class ApiLoad:
    """The API server's request load on the simulated clock; counters for its metrics."""

    def __init__(self, store: ObjectStore, config: Config | None = None, etcd: Etcd | None = None) -> None:
        self.store = store
        self.config = config or load_config()
        #: the storage behind the server: a write waits for etcd's save (None: no wait beyond the verb's)
        self.etcd = etcd
        #: requests/s of the last tick that write to etcd
        self.writes_per_s = 0.0
        self._recorded_writes = 0.0
        self.levels: dict[str, LevelState] = {}
        self.flows: list[_Flow] = []
        #: (family, key...) -> running total of requests
        self.counters: dict[Any, float] = {}
        #: ("duration" | "sli", class) -> cumulative bucket counts, then count and sum
        self.histograms: dict[tuple[str, RequestClass], list[float]] = {}
        self._rejected_carry = 0.0
        self._labels = LabelSets()
        #: request classes by what classifies them (one object per class: its metric labels are worked out once)
        self._classes: dict[tuple[str, tuple[str, ...], str, str, str, str, str, str], RequestClass] = {}
        #: a pod's running API-calling programs by pod (a stored object never changes in place), with the
        #: ConfigMaps its volumes named when they were found
        self._programs: dict[int, tuple[Obj, tuple[Obj | None, ...], list[tuple[Obj, Obj]]]] = {}
        #: the configuration both caches were filled under (a new one empties them)
        self._cached_for = self.config

    # -- classification -----------------------------------------------------------------------
    def classify(self, user: str, groups: Sequence[str], verb: str, group: str, version: str, resource: str,
                 subresource: str, scope: str) -> RequestClass:
        self._check_caches()
        key = (user, tuple(groups), verb, group, version, resource, subresource, scope)
        cls = self._classes.get(key)
        if cls is None:
            schema = next((s for s in self.config.schemas if s.matches(user, groups, resource)), None)
            cls = self._classes[key] = RequestClass(verb, group, version, resource, subresource, scope,
                                                    *((schema.name, schema.level) if schema is not None else ("catch-all", "catch-all")))
        return cls

    def _check_caches(self) -> None:
        if self._cached_for is not self.config:
            self._classes, self._programs, self._cached_for = {}, {}, self.config

    def _stored(self, kind: str, namespace: str | None = None) -> list[Obj]:
        """Stored objects, not copies: read every tick, never changed."""
        return self.store.list_stored(self.store.registry.by_kind(kind), namespace)

    def _service(self, verb: str, objects: int) -> float:
        wait = self.etcd.write_delay if self.etcd is not None and verb not in _READ_VERBS else 0.0
        return self.config.service.get(verb, 0.005) + (self.config.per_object * objects if verb == "LIST" else 0.0) + wait

    # -- demand -------------------------------------------------------------------------------
    def _demand(self) -> list[_Flow]:
        flows: list[_Flow] = []
        nodes = [n for n in self._stored("Node") if _ready(n)]
        for client in self.config.clients:
            identities = ([(f"system:node:{n['metadata']['name']}", tuple(client.get("groups", ()))) for n in nodes]
                          if client.get("perNode") else [(str(client["user"]), tuple(client.get("groups", ())))])
            for user, groups in identities:
                for r in client["requests"]:
                    cls = self.classify(user, groups, r["verb"], r.get("group", ""), r.get("version", "v1"),
                                        r["resource"], r.get("subresource", ""), r["scope"])
                    flows.append(_Flow(cls, float(r["perSecond"]), self._service(cls.verb, 0)))
        pods = self._stored("Pod")
        by_cls: dict[tuple[RequestClass, float, float, float], int] = {}
        self._check_caches()
        programs = self._programs
        self._programs = {}
        for pod in pods:
            maps = _mounted_configmaps(self.store, pod)
            known = programs.get(id(pod))
            if known is not None and known[0] is pod and len(known[1]) == len(maps) and all(map(operator.is_, known[1], maps)):
                running = known[2]
            else:
                running = _running_programs(self.store, pod, self.config.programs)
            self._programs[id(pod)] = (pod, maps, running)
            for program, container in running:
                r = program["request"]
                namespace = pod["metadata"]["namespace"]
                sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
                user = f"system:serviceaccount:{namespace}:{sa}"
                groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated")
                cls = self.classify(user, groups, r["verb"], r.get("group", ""), r.get("version", "v1"), r["resource"],
                                    r.get("subresource", ""), r["scope"])
                objects = len(self._stored(str(program["listsKind"])))
                cores = min(1.0, _cpu_limit(container))
                decode = (float(program["clientCpuSeconds"]) + float(program["clientCpuSecondsPerObject"]) * objects) / cores
                pause = 1.0 / max(1.0, _env_number(container, str(program["intervalEnv"])))
                key = (cls, decode, pause, self._service(cls.verb, objects))
                by_cls[key] = by_cls.get(key, 0) + 1
        for (cls, decode, pause, service), n in sorted(by_cls.items(), key=lambda kv: repr(kv[0])):
            flows.append(_Flow(cls, 0.0, service, decode, pause, n))
        return flows

    def _solve(self, flows: list[_Flow]) -> dict[str, LevelState]:
        by_level: dict[str, list[_Flow]] = {}
        for f in flows:
            by_level.setdefault(f.cls.level, []).append(f)
        levels = {name: self._level_state(self.config.levels[name], group) for name, group in by_level.items()}
        for f in flows:
            f.rate = f.offered_rate(levels[f.cls.level])
        return levels

    def _level_state(self, level: Level, flows: list[_Flow]) -> LevelState:
        """The level's queue wait and rejections for its open flows (fixed rates) and closed ones (N
        clients that each wait for their answer): below its seats an M/M/c queue; at its seats the wait
        that holds the closed clients' demand to the seats (they cannot queue more requests than they
        are), and rejections for what still does not fit within the queue wait limit."""
        if level.exempt:
            return LevelState()
        open_erlangs = sum(f.rate * f.service for f in flows if not f.clients)
        closed = [f for f in flows if f.clients]

        def erlangs(wait: float) -> float:
            return open_erlangs + sum(f.clients * f.service / (f.pause + f.client + f.service + wait) for f in closed)

        rate = sum(f.rate for f in flows if not f.clients) + sum(
            f.clients / (f.pause + f.client + f.service) for f in closed)
        offered = erlangs(0.0)
        if rate <= 0 or offered <= 0:
            return LevelState()
        mean_service = offered / rate
        if offered < level.seats:
            p_wait = erlang_c(level.seats, offered)
            if level.reject or p_wait == 0.0:
                return LevelState()
            decay = (level.seats - offered) / mean_service
            return LevelState(wait=min(self.config.wait_limit, p_wait / decay), p_wait=p_wait, decay=decay)
        if level.reject:
            return LevelState(rejected=1.0 - level.seats / offered)
        limit = self.config.wait_limit
        if open_erlangs >= level.seats or erlangs(limit) > level.seats:
            # open arrivals beyond the seats fill the queues, which drain in this time; closed clients
            # too many to be held back by the longest wait time out of the queue at its limit
            drain = min(limit, level.queue_room * mean_service / level.seats)
            wait = drain if open_erlangs >= level.seats else limit
            return LevelState(wait=wait, p_wait=1.0, rejected=1.0 - level.seats / erlangs(wait), saturated=True)
        low, high = 0.0, limit
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (mid, high) if erlangs(mid) > level.seats else (low, mid)
        return LevelState(wait=high, p_wait=1.0, saturated=True)

    # -- time ---------------------------------------------------------------------------------
    def tick(self, dt: float) -> None:
        """Work out this tick's flows and latencies, and count the ``dt`` seconds of requests they send."""
        self.flows = self._demand()
        self.levels = self._solve(self.flows)
        writes = self._recorded_writes
        for f in self.flows:
            state = self.levels.get(f.cls.level, LevelState())
            n = f.rate * dt
            self._count(f.cls, n * (1.0 - state.rejected), n * state.rejected, f.service, state)
            if not f.cls.read_only:
                writes += n * (1.0 - state.rejected)
        self.writes_per_s, self._recorded_writes = writes / dt if dt > 0 else 0.0, 0.0

    def _count(self, cls: RequestClass, served: float, rejected: float, service: float, state: LevelState,
               code: str = "") -> None:
        c = self.counters
        code = code or ("201" if cls.verb == "POST" else "200")
        flow = (cls.level, cls.schema)
        series = cls.metric
        for key, n in ((("request", series, code), served), (("request", series, "429"), rejected),
                       (("terminated", series, "429"), rejected), (("dispatched", flow), served),
                       (("rejected", flow), rejected)):
            if n > 0:
                c[key] = c.get(key, 0.0) + n
        if served <= 0:
            return
        for family, buckets, wait in (("duration", DURATION_BUCKETS, True), ("sli", SLI_BUCKETS, False)):
            counts = self.histograms.get((family, series))
            if counts is None:
                counts = self.histograms[(family, series)] = [0.0] * (len(buckets) + 2)
            for i, within in enumerate(_within(buckets, service, state if wait else LevelState())):
                counts[i] += served * within
            counts[-2] += served
            counts[-1] += served * (service + (state.wait if wait else 0.0))

    # -- one request of the twin's real API ---------------------------------------------------
    def admit(self, cls: RequestClass, objects: int = 0) -> Verdict:
        """What a request of ``cls`` meets now; rejections are spread evenly over requests (deterministic)."""
        state = self.levels.get(cls.level, LevelState())
        self._rejected_carry += state.rejected
        if self._rejected_carry >= 1.0:
            self._rejected_carry -= 1.0
            return Verdict(0.0, True)
        return Verdict(self._service(cls.verb, objects) + state.wait, False)

    def record(self, cls: RequestClass, code: int, latency: float) -> None:
        """Count one request the twin's API answered, with its code and latency, in the metrics."""
        if code == 429:
            self._count(cls, 0.0, 1.0, 0.0, LevelState())
        else:
            if not cls.read_only and code < 400:
                self._recorded_writes += 1.0
            self._count(cls, 1.0, 0.0, 0.0, LevelState(wait=max(0.0, latency), p_wait=1.0, saturated=True), str(code))

    # -- metrics ------------------------------------------------------------------------------
    def samples(self) -> list[Sample]:
        """The apiserver's /metrics: counters floored to whole requests, gauges of this tick."""
        out: list[Sample] = []
        for key, value in self.counters.items():
            family = key[0]
            if family in ("request", "terminated"):
                cls, code = key[1], key[2]
                name = "apiserver_request_total" if family == "request" else "apiserver_request_terminations_total"
                out.append((self._labels.get(key, lambda n=name, c=cls, k=code: {"__name__": n, **c.labels, "code": k}), math.floor(value)))
            else:
                level, schema = key[1]
                name = ("apiserver_flowcontrol_dispatched_requests_total" if family == "dispatched"
                        else "apiserver_flowcontrol_rejected_requests_total")
                extra = {} if family == "dispatched" else {"reason": "queue-full"}
                out.append((self._labels.get(key, lambda n=name, lv=level, s=schema, e=extra: {"__name__": n, "priority_level": lv,
                                                                                    "flow_schema": s, **e}),
                            math.floor(value)))
        for (family, cls), counts in self.histograms.items():
            base = "apiserver_request_duration_seconds" if family == "duration" else "apiserver_request_sli_duration_seconds"
            buckets = DURATION_BUCKETS if family == "duration" else SLI_BUCKETS
            out.extend(histogram_samples(self._labels, (family, cls), base, cls.labels, buckets, counts))
        out.extend(self._gauges())
        return out

    def _gauges(self) -> list[Sample]:
        out: list[Sample] = []
        inflight = {"readOnly": 0.0, "mutating": 0.0}
        executing: dict[tuple[str, str], list[float]] = {}
        for f in self.flows:
            state = self.levels.get(f.cls.level, LevelState())
            served = f.rate * (1.0 - state.rejected)
            inflight["readOnly" if f.cls.read_only else "mutating"] += served * (f.service + state.wait)
            e = executing.setdefault((f.cls.level, f.cls.schema), [0.0, 0.0])
            e[0] += served * f.service
            e[1] += served * state.wait
        for kind, value in inflight.items():
            out.append((self._labels.get(("inflight", kind), lambda k=kind: {"__name__": "apiserver_current_inflight_requests",
                                                                    "request_kind": k}), float(round(value))))
        for (level, schema), (running, queued) in sorted(executing.items()):
            for name, value in (("apiserver_flowcontrol_current_executing_requests", running),
                                ("apiserver_flowcontrol_current_inqueue_requests", queued)):
                out.append((self._labels.get((name, level, schema), lambda n=name, lv=level, s=schema: {
                    "__name__": n, "priority_level": lv, "flow_schema": s}), float(round(value))))
        for name, config in sorted(self.config.levels.items()):
            if not config.exempt:
                out.append((self._labels.get(("nominal", name), lambda n=name: {"__name__": "apiserver_flowcontrol_nominal_limit_seats",
                                                                       "priority_level": n}), float(config.seats)))
        return out

    # -- snapshots ----------------------------------------------------------------------------
    def snapshot(self) -> ApiLoadSnapshot:
        return ApiLoadSnapshot(tuple(self.counters.items()), tuple((k, tuple(v)) for k, v in self.histograms.items()),
                               tuple(self.levels.items()),
                               tuple(_Flow(f.cls, f.rate, f.service, f.client, f.pause, f.clients) for f in self.flows),
                               self._rejected_carry, self._recorded_writes)

    def restore(self, snap: ApiLoadSnapshot) -> None:
        self.counters = dict(snap.counters)
        self.histograms = {k: list(v) for k, v in snap.histograms}
        self.levels = dict(snap.levels)
        self.flows = [_Flow(f.cls, f.rate, f.service, f.client, f.pause, f.clients) for f in snap.flows]
        self._rejected_carry = snap.rejected_carry
        self._recorded_writes = snap.recorded_writes


@cache
def _within(buckets: tuple[float, ...], service: float, state: LevelState) -> tuple[float, ...]:
    """Fraction of requests taking ``service`` plus a queue wait of ``state`` that end within each bucket."""
    return tuple(0.0 if le < service else state.wait_fraction_within(le - service) for le in buckets)


def _ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def _cpu_limit(container: Obj) -> float:
    limit = ((container.get("resources") or {}).get("limits") or {}).get("cpu")
    return float(quantity(limit)) if limit is not None else 1.0


def _env_number(container: Obj, name: str) -> float:
    for var in container.get("env") or []:
        if var.get("name") == name:
            try:
                return float(var.get("value", ""))
            except ValueError:
                return 0.0
    return 0.0


def _running_programs(store: ObjectStore, pod: Obj, programs: Sequence[Obj]) -> list[tuple[Obj, Obj]]:
    """The programs each running container of ``pod`` runs: a mounted ConfigMap file it names that calls the API."""
    if not programs:
        return []
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    spec = pod.get("spec") or {}
    volumes = {v.get("name"): v.get("configMap") for v in spec.get("volumes") or [] if v.get("configMap")}
    if not volumes:
        return []
    out: list[tuple[Obj, Obj]] = []
    namespace = pod["metadata"]["namespace"]
    for c in spec.get("containers") or []:
        if "running" not in ((statuses.get(c.get("name")) or {}).get("state") or {}):
            continue
        words = " ".join(map(str, [*(c.get("command") or []), *(c.get("args") or [])]))
        for mount in c.get("volumeMounts") or []:
            source = volumes.get(mount.get("name"))
            if source is None:
                continue
            cm = _configmap(store, namespace, str(source.get("name", "")))
            data = (cm or {}).get("data") or {}
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                text = str(data.get(item.get("key"), ""))
                if item.get("path") and str(item["path"]) in words:
                    out.extend((p, c) for p in programs if str(p["call"]) in text)
    return out


def _mounted_configmaps(store: ObjectStore, pod: Obj) -> tuple[Obj | None, ...]:
    """The ConfigMaps the pod's volumes name, in volume order (None where one is missing)."""
    namespace = pod["metadata"]["namespace"]
    return tuple(_configmap(store, namespace, str(v["configMap"].get("name", "")))
                 for v in (pod.get("spec") or {}).get("volumes") or () if v.get("configMap"))


def _configmap(store: ObjectStore, namespace: str, name: str) -> Obj | None:
    try:
        return store.get_stored(store.registry.by_kind("ConfigMap"), namespace, name)
    except Exception:
        return None
