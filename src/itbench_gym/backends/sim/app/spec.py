"""Typed view of ``envs/<app>/app.yaml``, validated against ``itbench_gym/spec/app.schema.json``.

The behaviour model is data so that a second app can be added without code; every loading error
names the file and the field path, because the person fixing it is editing YAML, not Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from string import Formatter
from typing import Any

from itbench_gym.backends.sim.app.httpbody import RequestBody, load_bodies
from itbench_gym.backends.sim.app.jvm import JvmCode, load_jvm
from itbench_gym.backends.sim.kube.registry import ImageRule, parse_images
from itbench_gym.lang import yamltext
from itbench_gym.spec.appfacts import app_schema_problems

#: Fields log templates may use; anything else is a typo caught at load time.
LOG_FIELDS = frozenset(
    "iso clf epoch_ms valkey_ts pytime rubytime werkzeug_ts sec ms uuid uuid2 trace span n quantity ip pod email category product product2 "
    "product3 product4 product5 method path status error grpc_code op_text upstream upstream_ip bytes message details".split()
)
#: Fields a log line takes from what the request did (the activity's context), else from
#: app.yaml ``log_values.defaults``.
CONTEXT_FIELDS = frozenset("method path status error grpc_code op_text upstream upstream_ip".split())


class AppSpecError(ValueError):
    """app.yaml is malformed; the message names the file and the field path."""


@dataclass(frozen=True)
class Address:
    env: str | None
    host_env: str | None
    port_env: str | None
    default: str


@dataclass(frozen=True)
class Listener:
    """A port a process listens on: a command-line option's value (the first of ``flags`` given),
    else an env var's, else ``default`` (flags before env, as flagd's viper and most servers rank them)."""

    default: int
    env: str | None = None
    flags: tuple[str, ...] = ()
    #: a protocol the twin answers on this port in place of the service's own routes (``ofrep``)
    serves: str | None = None


@dataclass(frozen=True)
class Sidecar:
    """A container the model runs beside a service's own: its steady use and the ports it listens on."""

    memory_mi: float
    cpu_idle: float
    ports: tuple[Listener, ...] = ()


@dataclass(frozen=True)
class StartDependency:
    """What a server must reach once started, else it exits (app.yaml ``start_dependency``)."""

    address: Address
    within_seconds: float
    exit_code: int


@dataclass(frozen=True)
class Call:
    id: str
    service: str
    operation: str
    #: None: the caller records no span of it (its requests come from code the twin does not trace).
    client_span: str | None
    client_kind: str
    address: Address
    count: float
    parallel: bool
    on_error: str
    unreachable_at_start: str | None
    timeout_ms: float
    cause_log: str | None
    #: The caller's deadline in ms (``timeout_ms`` when app.yaml sets it), None when it waits indefinitely.
    deadline_ms: float | None = None
    retries: int = 0
    #: False: sent without waiting for the answer (its latency and errors never reach the caller).
    awaited: bool = True
    #: "connection": one long-lived connection pinned to one pod; "request": spread per request.
    balance: str = "connection"
    #: The caller's env var holding the password it presents to the callee (None: it sends none).
    password_env: str | None = None
    #: How a refused authentication looks to the caller: "fail" at once, or "wait" until the deadline
    #: (a client that keeps reconnecting and holds the command in its backlog meanwhile).
    auth_failure: str = "fail"


@dataclass(frozen=True)
class Operation:
    service: str
    id: str
    span: str
    kind: str
    median_ms: float
    sigma: float
    cpu_ms: float
    internal_spans: tuple[str, ...]
    calls: tuple[Call, ...]
    #: HTTP status of the operation's own failures (an HTTP server's; gRPC ones carry their code).
    error_status: int = 500
    #: (grpc code, error text) of an operation that fails every request by design (a mock that answers
    #: a rate-limited model with 429), None for the others.
    always_fails: tuple[str, str] | None = None
    #: What its HTTP answer's body is when it succeeds (app.yaml ``response``): the catalogue
    #: (``catalog``) or the product its path names (``catalog_item``); None: the twin does not know it.
    response: str | None = None
    #: The method and path (a route template) of the requests it serves over HTTP/1 or gRPC, as a proxy
    #: on the wire sees them (app.yaml ``request``, else its route or its gRPC method); None: no such request.
    request: tuple[str, str] | None = None


@dataclass(frozen=True)
class LogLine:
    ratio: float
    level: str
    text: str
    #: The one operation whose requests write this line (None: every operation of the service).
    operation: str | None = None


@dataclass(frozen=True)
class Logs:
    #: "stdout" (the container log) or "otlp" (only the OTLP exporter: the log store, not the container log)
    destination: str = "stdout"
    startup: tuple[str, ...] = ()
    request: tuple[LogLine, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    effect: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CallCounter:
    """app.yaml ``services.<name>.metrics.calls``: the process's own counter of the calls it makes."""

    counter: str
    destination_label: str
    status_label: str
    failed_status: str


@dataclass(frozen=True)
class Service:
    name: str
    language: str
    workload: str
    container: str
    #: Where its server's port comes from (None: it serves no port of its own).
    listener: Listener | None
    port: int | None
    traced: bool
    startup_seconds: float
    memory_mi: float
    memory_mi_per_rps: float
    cpu_idle: float
    cpu_cores: float
    sidecars: dict[str, Sidecar]
    operations: dict[str, Operation]
    logs: Logs
    call_counter: CallCounter | None = None
    #: The server flag whose value is the password clients must present (None: no authentication).
    auth_password_arg: str | None = None
    #: The server's own command-line client and the commands through which it stores data in memory.
    store_client: str | None = None
    store_commands: tuple[str, ...] = ()
    #: A JVM service's code as data: what Byteman rules do to its operations (app.yaml ``jvm``).
    jvm: JvmCode | None = None
    #: What its HTTP handlers read of a request's JSON body, by operation (app.yaml ``request_bodies``).
    request_bodies: dict[str, RequestBody] = field(default_factory=dict)
    #: An address its process must reach after starting, else it exits (app.yaml ``start_dependency``).
    start_dependency: StartDependency | None = None
    #: Ports its server listens on besides ``port`` (app.yaml ``other_ports``).
    other_ports: tuple[Listener, ...] = ()
    #: The body its HTTP server answers a failed request with on routes under ``http_error_routes``
    #: (app.yaml ``http``), and whether it passes its upstream's answers through (a proxy).
    http_error_body: str | None = None
    http_error_routes: str = "/"
    passes_bodies: bool = False
    #: A proxy's own answer when it cannot reach its upstream, by the flow's cause (app.yaml ``http.local_replies``).
    local_replies: dict[str, str] = field(default_factory=dict)
    #: The wire protocol its ports speak (app.yaml ``protocol``).
    protocol: str = "http"

    @property
    def speaks_http(self) -> bool:
        """Whether its ports speak HTTP/1 or HTTP/2 (gRPC), the protocols an HTTP proxy can parse."""
        return self.protocol in ("http", "grpc")

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every port its server's process listens on: its own first, then the others."""
        return ((self.listener,) if self.listener is not None else ()) + self.other_ports


@dataclass(frozen=True)
class Runtime:
    """How a language's runtime uses CPU (app.yaml ``runtimes``)."""

    max_cores: float = float("inf")
    wakeups_per_request: float = 1.0
    jit_cold_cpu_factor: float = 1.0
    jit_warmup_cpu_seconds: float = 0.0


@dataclass(frozen=True)
class Effect:
    flag: str
    type: str
    params: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


@dataclass(frozen=True)
class Consumer:
    topic: str
    group: str
    service: str
    operation: str
    max_per_second_per_pod: float
    address: Address


@dataclass(frozen=True)
class Collector:
    """app.yaml ``span_metrics.collector``: the app's OpenTelemetry collector, which turns the pods' OTLP
    spans into span metrics and serves them, with the pods' OTLP metrics, to Prometheus."""

    #: the labels of the collector's pods (its Deployment's selector) and the container of its process
    selector: dict[str, str]
    container: str
    #: where the app's OTLP exporters send, from each pod's env
    otlp: Address
    #: the port of the `prometheus` exporter (the scrape target the span metrics reach Prometheus through)
    metrics_port: int
    #: the spanmetrics connector's ``metrics_flush_interval`` and the exporter's ``metric_expiration``
    flush_interval_s: float
    metric_expiration_s: float


@dataclass(frozen=True)
class Topic:
    name: str
    producer_service: str
    producer_call_to: tuple[str, str]
    consumers: tuple[Consumer, ...]


@dataclass(frozen=True)
class LoadTask:
    operation: str
    weight: float


@dataclass(frozen=True)
class UserClass:
    """app.yaml ``load.classes[]``: one of the load generator's user classes (a Locust User class)."""

    name: str
    weight: float
    wait_mean_s: float
    tasks: tuple[LoadTask, ...]
    #: (env var, the values that enable it, lower-case): a class the generator runs only on request.
    enabled_by: tuple[str, frozenset[str]] | None = None
    #: The scenario's ``environment.load`` option that sets ``enabled_by``'s env var.
    option: str | None = None

    def enabled(self, env: dict[str, str]) -> bool:
        """Whether a generator with this environment runs the class (the locustfile's own test)."""
        return self.enabled_by is None or env.get(self.enabled_by[0], "").lower() in self.enabled_by[1]


@dataclass(frozen=True)
class ShapeProgram:
    """app.yaml ``load.shape``: the Locust program that runs a scenario's ``environment.load.shape``,
    the name of the JSON it reads next to itself, and the ConfigMap and path they are mounted from;
    with ``load.locustfile_env`` and ``load.default_locustfile``, how the generator is told to load it."""

    program: Path
    #: The program's source, as the ConfigMap carries it (the file's name there is the program's).
    text: str
    data: str
    config_map: str
    mount_path: str
    locustfile_env: str
    default_locustfile: str


@dataclass(frozen=True)
class Catalog:
    """app.yaml ``catalog``: the ConfigMap (of the app's namespace) and key holding the product catalogue:
    a JSON document, or with ``table`` an SQL script whose rows inserted into that table are the products."""

    config_map: str
    key: str
    table: str | None = None
    #: a product as the app's HTTP API writes it, from a row (app.yaml ``catalog.json``; None: the
    #: catalogue's JSON products as they are)
    json: Any = None
    #: the column the API lists products by (None: the catalogue's order)
    order_by: str | None = None


@dataclass(frozen=True)
class LogValues:
    """app.yaml ``log_values``: what log templates draw from beyond the request flow."""

    users: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    defaults: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AppSpec:
    directory: Path
    name: str
    namespace: str
    manifests: tuple[str, ...]
    buckets_ms: tuple[float, ...]
    job_prefix: str
    images: tuple[ImageRule, ...]
    load_service: str
    users_env: str
    default_users: int
    user_classes: tuple[UserClass, ...]
    services: dict[str, Service]
    topics: dict[str, Topic]
    broker: str | None
    flag_config_map: str
    flag_key: str
    flag_service: str
    flag_aliases: dict[str, str]
    effects: tuple[Effect, ...]
    catalog: Catalog | None = None
    #: The flag file the flag service's container reads (absolute); None: it serves no flags.
    flag_file: str | None = None
    log_values: LogValues = field(default_factory=LogValues)
    runtimes: dict[str, Runtime] = field(default_factory=dict)
    #: The load generator's env var of users started per second, and its default (Locust's: 1).
    spawn_rate_env: str | None = None
    default_spawn_rate: float = 1.0
    #: The collector the pods' OTLP telemetry goes to (None: the app exports none).
    collector: Collector | None = None
    #: How a scenario's load shape reaches the generator (None: the app's generator has no shapes).
    load_shape: ShapeProgram | None = None

    def op(self, service: str, op_id: str) -> Operation:
        return self.services[service].operations[op_id]

    @property
    def tasks(self) -> tuple[LoadTask, ...]:
        """The tasks of every user class (the roots of the app's traces)."""
        return tuple(t for c in self.user_classes for t in c.tasks)

    def runtime(self, service: str) -> Runtime:
        return self.runtimes.get(self.services[service].language, Runtime())


#: An HTTP route in an operation id ("GET /api/cart", "ingress GET /"): its method and path (the request its
#: server receives), and its callers' pools spread per request.
_HTTP_ROUTE = re.compile(r"(?:^|\s)(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (/\S*)")
#: A gRPC method's full name as its server spans it ("oteldemo.CartService/GetCart").
_GRPC_METHOD = re.compile(r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*/[A-Za-z_]\w*$")


def _parse_request(text: str) -> tuple[str, str] | None:
    """The method and path of a request line ("POST /oteldemo.CartService/GetCart"); None if it is not one."""
    m = _HTTP_ROUTE.match(text)
    return (m.group(1), m.group(2)) if m is not None and m.end() == len(text) else None


def _wire_request(protocol: str, op: dict[str, Any], where: str) -> tuple[str, str] | None:
    """What a SERVER operation of an HTTP/1 or gRPC port receives: app.yaml ``request``, else the route its
    id names (HTTP) or ``POST /<full method>`` (gRPC, when its id is the method's full name)."""
    if "request" in op:
        request = _parse_request(op["request"])
        if request is None:
            raise AppSpecError(f"{where}.request: {op['request']!r} is not a request line (METHOD /path)")
        return request
    if op["kind"] != "SERVER" or protocol not in ("http", "grpc"):
        return None
    if protocol == "grpc":
        return ("POST", "/" + op["id"]) if _GRPC_METHOD.match(op["id"]) else None
    m = _HTTP_ROUTE.search(op["id"])
    return (m.group(1), m.group(2)) if m is not None else None


def _runtime(raw: dict[str, Any]) -> Runtime:
    jit = raw.get("jit") or {}
    return Runtime(
        max_cores=float(raw.get("max_cores", float("inf"))),
        wakeups_per_request=float(raw.get("wakeups_per_request", 1.0)),
        jit_cold_cpu_factor=float(jit.get("cold_cpu_factor", 1.0)),
        jit_warmup_cpu_seconds=float(jit.get("warmup_cpu_seconds", 0.0)),
    )


def _split_target(raw: str) -> tuple[str, str]:
    service, _, op = raw.partition("/")
    return service, op


def _address(raw: dict[str, Any]) -> Address:
    return Address(raw.get("env"), raw.get("host_env"), raw.get("port_env"), raw["default"])


def _collector(raw: dict[str, Any] | None) -> Collector | None:
    if raw is None:
        return None
    return Collector(dict(raw["selector"]), raw["container"], _address(raw["otlp"]), int(raw["metrics_port"]),
                     float(raw["flush_interval_seconds"]), float(raw["metric_expiration_seconds"]))


def _check_template(text: str, where: str) -> None:
    try:
        names = {fname for _, fname, _, _ in Formatter().parse(text) if fname is not None}
    except ValueError as exc:
        raise AppSpecError(f"{where}: bad log template ({exc})") from None
    unknown = sorted(n for n in names if n not in LOG_FIELDS)
    if unknown:
        raise AppSpecError(f"{where}: unknown log field(s) {unknown}; known: {sorted(LOG_FIELDS)}")


def _logs(raw: dict[str, Any], where: str) -> Logs:
    for key in ("startup",):
        for i, text in enumerate(raw.get(key, [])):
            _check_template(text, f"{where}.{key}[{i}]")
    for i, line in enumerate(raw.get("request", [])):
        _check_template(line["text"], f"{where}.request[{i}].text")
    for key in ("errors", "effect"):
        for name, text in raw.get(key, {}).items():
            _check_template(text, f"{where}.{key}.{name}")
    return Logs(
        destination=str(raw.get("destination", "stdout")),
        startup=tuple(raw.get("startup", [])),
        request=tuple(LogLine(x["ratio"], x["level"], x["text"], x.get("operation")) for x in raw.get("request", [])),
        errors=dict(raw.get("errors", {})),
        effect=dict(raw.get("effect", {})),
    )


def _shape_program(app_dir: Path, load: dict[str, Any], where: str) -> ShapeProgram | None:
    """app.yaml ``load.shape`` (the schema requires the locustfile env and default with it)."""
    raw = load.get("shape")
    if raw is None:
        return None
    program = app_dir / raw["program"]
    if not program.is_file():
        raise AppSpecError(f"{where}: no file {program}")
    return ShapeProgram(program, program.read_text(encoding="utf-8"), raw["data"], raw["config_map"], raw["mount_path"].rstrip("/"),
                        load["locustfile_env"], load["default_locustfile"])


def _user_class(raw: dict[str, Any]) -> UserClass:
    wait = raw["wait_seconds"]
    gate = raw.get("enabled_by")
    return UserClass(
        name=raw["name"],
        weight=float(raw.get("weight", 1)),
        wait_mean_s=(float(wait["min"]) + float(wait["max"])) / 2.0,
        tasks=tuple(LoadTask(t["operation"], float(t["weight"])) for t in raw["tasks"]),
        enabled_by=(gate["env"], frozenset(v.lower() for v in gate["values"])) if gate else None,
        option=gate["option"] if gate else None,
    )


def _service(name: str, raw: dict[str, Any], where: str) -> Service:
    ops: dict[str, Operation] = {}
    for i, o in enumerate(raw["operations"]):
        calls = []
        seen: set[str] = set()
        for j, c in enumerate(o.get("calls", [])):
            svc, op = _split_target(c["to"])
            cid = c.get("id", f"{j}")
            if cid in seen:
                raise AppSpecError(f"{where}.operations[{i}].calls[{j}].id: duplicate call id {cid!r}")
            seen.add(cid)
            if c.get("awaited") is False and c.get("on_error") != "ignore":
                raise AppSpecError(f"{where}.operations[{i}].calls[{j}]: a call that is not awaited cannot fail its caller; "
                                   "set on_error: ignore")
            calls.append(
                Call(
                    id=cid,
                    service=svc,
                    operation=op,
                    client_span=c.get("client_span"),
                    client_kind=c.get("client_kind", "CLIENT"),
                    address=_address(c["address"]),
                    count=float(c.get("count", 1)),
                    parallel=bool(c.get("parallel", False)),
                    on_error=c.get("on_error", "propagate"),
                    unreachable_at_start=c.get("unreachable_at_start"),
                    timeout_ms=float(c.get("timeout_ms", 20000)),
                    cause_log=c.get("cause_log"),
                    deadline_ms=float(c["timeout_ms"]) if "timeout_ms" in c else None,
                    retries=int(c.get("retries", 0)),
                    awaited=bool(c.get("awaited", True)),
                    balance=c.get("balance", "request" if _HTTP_ROUTE.search(op) else "connection"),
                    password_env=(c.get("credentials") or {}).get("password_env"),
                    auth_failure=c.get("auth_failure", "fail"),
                )
            )
        if o["id"] in ops:
            raise AppSpecError(f"{where}.operations[{i}].id: duplicate operation {o['id']!r}")
        ops[o["id"]] = Operation(
            service=name,
            id=o["id"],
            span=o.get("span", o["id"]),
            kind=o["kind"],
            median_ms=float(o["latency_ms"]["median"]),
            sigma=float(o["latency_ms"].get("sigma", 0.4)),
            cpu_ms=float(o.get("cpu_ms", 0.0)),
            internal_spans=tuple(o.get("internal_spans", [])),
            calls=tuple(calls),
            error_status=int((o.get("always_fails") or {}).get("http_status", 500)),
            always_fails=(o["always_fails"].get("grpc_code", "UNKNOWN"), o["always_fails"]["error"]) if "always_fails" in o else None,
            response=o.get("response"),
            request=_wire_request(raw.get("protocol", "http"), o, f"{where}.operations[{i}]"),
        )
    for block, op_ids in (("jvm.operations", (raw.get("jvm") or {}).get("operations", {})), ("request_bodies", raw.get("request_bodies", {}))):
        for op_id in op_ids:
            if op_id not in ops:
                raise AppSpecError(f"{where}.{block}.{op_id}: not an operation of the service")
    res = raw["resources"]
    port = raw.get("port")
    calls_metric = (raw.get("metrics") or {}).get("calls")
    return Service(
        name=name,
        language=raw["language"],
        workload=raw.get("workload", name),
        container=raw["container"],
        listener=_listener(port) if port else None,
        port=int(port["default"]) if port else None,
        traced=bool(raw["traced"]),
        startup_seconds=float(raw.get("startup_seconds", 2.0)),
        memory_mi=float(res["memory_mi"]),
        memory_mi_per_rps=float(res.get("memory_mi_per_rps", 0.0)),
        cpu_idle=float(res["cpu_idle"]),
        cpu_cores=float(res["cpu_cores"]),
        sidecars={k: Sidecar(float(v["memory_mi"]), float(v["cpu_idle"]), tuple(map(_listener, v.get("ports", ()))))
                  for k, v in raw.get("sidecars", {}).items()},
        operations=ops,
        logs=_logs(raw.get("logs", {}), f"{where}.logs"),
        call_counter=CallCounter(**calls_metric) if calls_metric else None,
        auth_password_arg=(raw.get("auth") or {}).get("password_arg"),
        store_client=(raw.get("store") or {}).get("client"),
        store_commands=tuple((raw.get("store") or {}).get("commands", ())),
        jvm=load_jvm(raw["jvm"]) if "jvm" in raw else None,
        request_bodies=load_bodies(raw.get("request_bodies") or {}),
        start_dependency=_start_dependency(raw["start_dependency"]) if "start_dependency" in raw else None,
        other_ports=tuple(map(_listener, raw.get("other_ports", ()))),
        protocol=raw.get("protocol", "http"),
        http_error_body=(raw.get("http") or {}).get("error_body"),
        http_error_routes=(raw.get("http") or {}).get("error_routes", "/"),
        passes_bodies=bool((raw.get("http") or {}).get("passes_bodies", False)),
        local_replies=dict((raw.get("http") or {}).get("local_replies", {})),
    )


def _listener(raw: int | dict[str, Any]) -> Listener:
    """A port as app.yaml gives it: a number, or where the process reads it (``flags``, ``env``) and its default."""
    if isinstance(raw, int):
        return Listener(raw)
    return Listener(int(raw["default"]), raw.get("env"), tuple(raw.get("flags", ())), raw.get("serves"))


def _start_dependency(raw: dict[str, Any]) -> StartDependency:
    return StartDependency(_address(raw["address"]), float(raw["within_seconds"]), int(raw["exit_code"]))


def _cross_check(spec: AppSpec, file: str) -> None:
    """References between sections must resolve, and the call graph must be acyclic."""
    services = spec.services

    def need_op(service: str, op: str, where: str) -> None:
        if service not in services:
            raise AppSpecError(f"{file}: {where}: unknown service {service!r}")
        if op not in services[service].operations:
            raise AppSpecError(f"{file}: {where}: service {service!r} has no operation {op!r}")

    for s in services.values():
        for o in s.operations.values():
            for c in o.calls:
                need_op(c.service, c.operation, f"services.{s.name}.operations[{o.id}].calls[{c.id}].to")
                callee = services[c.service]
                if callee.speaks_http and spec.op(c.service, c.operation).request is None:
                    raise AppSpecError(f"{file}: services.{c.service}.operations[{c.operation}]: {s.name} calls it over "
                                       f"{callee.protocol}, but neither its id nor a `request` gives the method and path it receives")
    if spec.load_service not in services:
        raise AppSpecError(f"{file}: load.service: unknown service {spec.load_service!r}")
    for i, uc in enumerate(spec.user_classes):
        for j, t in enumerate(uc.tasks):
            need_op(spec.load_service, t.operation, f"load.classes[{i}].tasks[{j}].operation")
    for name, topic in spec.topics.items():
        need_op(topic.producer_call_to[0], topic.producer_call_to[1], f"kafka.topics.{name}.produced_by.call_to")
        for i, consumer in enumerate(topic.consumers):
            need_op(consumer.service, consumer.operation, f"kafka.topics.{name}.consumers[{i}]")
    for i, e in enumerate(spec.effects):
        where = f"flags.definitions.{e.flag}.effects[{i}]"
        if "service" in e.params and e.params["service"] not in services:
            raise AppSpecError(f"{file}: {where}.service: unknown service {e.params['service']!r}")
        if "operation" in e.params:
            need_op(e.params["service"], e.params["operation"], f"{where}.operation")
            if "call" in e.params:
                calls = {c.id for c in spec.op(e.params["service"], e.params["operation"]).calls}
                if e.params["call"] not in calls:
                    raise AppSpecError(f"{file}: {where}.call: no call {e.params['call']!r} (have {sorted(calls)})")
        if "topic" in e.params and e.params["topic"] not in spec.topics:
            raise AppSpecError(f"{file}: {where}.topic: unknown topic {e.params['topic']!r}")
        if "group" in e.params and not any(c.group == e.params["group"] for t in spec.topics.values() for c in t.consumers):
            raise AppSpecError(f"{file}: {where}.group: unknown consumer group {e.params['group']!r}")
    state: dict[tuple[str, str], int] = {}

    def visit(key: tuple[str, str], trail: list[str]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            raise AppSpecError(f"{file}: services: call cycle {' -> '.join(trail + ['/'.join(key)])}")
        state[key] = 1
        for c in spec.op(*key).calls:
            visit((c.service, c.operation), trail + ["/".join(key)])
        state[key] = 2

    for s in services.values():
        for op_name in s.operations:
            visit((s.name, op_name), [])


def load_spec(app_dir: Path) -> AppSpec:
    """Read, validate and cross-check ``app.yaml`` in ``app_dir``."""
    file = app_dir / "app.yaml"
    try:
        raw = yamltext.load(file.read_text())
    except FileNotFoundError:
        raise AppSpecError(f"{file}: not found") from None
    except yamltext.YAMLError as exc:
        raise AppSpecError(f"{file}: not valid YAML: {exc}") from None
    errors = app_schema_problems(raw)
    if errors:
        where, message = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise AppSpecError(f"{file}: {where or '<root>'}: {message}{more}")
    services = {n: _service(n, s, f"{file}: services.{n}") for n, s in raw["services"].items()}
    topics: dict[str, Topic] = {}
    for tname, t in raw.get("kafka", {}).get("topics", {}).items():
        topics[tname] = Topic(
            name=tname,
            producer_service=t["produced_by"]["service"],
            producer_call_to=_split_target(t["produced_by"]["call_to"]),
            consumers=tuple(
                Consumer(tname, c["group"], c["service"], c["operation"], float(c["max_per_second_per_pod"]), _address(c["address"]))
                for c in t["consumers"]
            ),
        )
    flags = raw["flags"]
    aliases: dict[str, str] = {}
    effects: list[Effect] = []
    for fname, fdef in flags["definitions"].items():
        aliases[fname] = fname
        for a in fdef.get("aliases", []):
            aliases[a] = fname
        effects += [Effect(fname, e["type"], {k: v for k, v in e.items() if k != "type"}) for e in fdef["effects"]]
    load = raw["load"]
    values = raw.get("log_values", {})
    catalog = raw.get("catalog")
    spec = AppSpec(
        directory=app_dir,
        name=raw["name"],
        namespace=raw["namespace"],
        manifests=tuple(raw["manifests"]),
        buckets_ms=tuple(float(b) for b in raw["span_metrics"]["buckets_ms"]),
        job_prefix=raw["span_metrics"]["job_prefix"],
        images=parse_images(raw["images"], str(app_dir / "app.yaml")),
        load_service=load["service"],
        users_env=load["users_env"],
        default_users=int(load["default_users"]),
        spawn_rate_env=load.get("spawn_rate_env"),
        default_spawn_rate=float(load.get("default_spawn_rate", 1.0)),
        user_classes=tuple(_user_class(c) for c in load["classes"]),
        services=services,
        topics=topics,
        broker=raw.get("kafka", {}).get("broker"),
        flag_config_map=flags["config_map"],
        flag_key=flags["key"],
        flag_service=flags["service"],
        flag_file=flags.get("file"),
        flag_aliases=aliases,
        effects=tuple(effects),
        catalog=Catalog(catalog["config_map"], catalog["key"], catalog.get("table"), catalog.get("json"), catalog.get("order_by"))
        if catalog else None,
        log_values=LogValues(tuple(values.get("users", ())), tuple(values.get("categories", ())), dict(values.get("defaults", {}))),
        runtimes={lang: _runtime(r) for lang, r in raw.get("runtimes", {}).items()},
        collector=_collector(raw["span_metrics"].get("collector")),
        load_shape=_shape_program(app_dir, load, f"{file}: load.shape.program"),
    )
    if list(spec.buckets_ms) != sorted(set(spec.buckets_ms)):
        raise AppSpecError(f"{file}: span_metrics.buckets_ms: must be strictly increasing")
    _cross_check(spec, str(file))
    _check_log_values(spec, str(file))
    return spec


def _templates(spec: AppSpec) -> Iterator[tuple[str, str]]:
    """Every log template of the app, with where it is."""
    for s in spec.services.values():
        where = f"services.{s.name}.logs"
        yield from ((f"{where}.startup[{i}]", text) for i, text in enumerate(s.logs.startup))
        yield from ((f"{where}.request[{i}].text", line.text) for i, line in enumerate(s.logs.request))
        for key, texts in (("errors", s.logs.errors), ("effect", s.logs.effect)):
            yield from ((f"{where}.{key}.{name}", text) for name, text in texts.items())


def _check_log_values(spec: AppSpec, file: str) -> None:
    """Every field a template uses has values: e-mails need users, categories need categories,
    products need the catalogue, and context fields need a default."""
    values = spec.log_values
    for svc in spec.services.values():
        for i, line in enumerate(svc.logs.request):
            if line.operation is not None and line.operation not in svc.operations:
                raise AppSpecError(f"{file}: services.{svc.name}.logs.request[{i}].operation: no operation {line.operation!r}")
    unknown = sorted(set(values.defaults) - CONTEXT_FIELDS)
    if unknown:
        raise AppSpecError(f"{file}: log_values.defaults: {unknown} are not context fields; known: {sorted(CONTEXT_FIELDS)}")
    for where, text in _templates(spec):
        for name in sorted({f for _, f, _, _ in Formatter().parse(text) if f}):
            missing = (
                "log_values.users" if name == "email" and not values.users
                else "log_values.categories" if name == "category" and not values.categories
                else "catalog" if name.startswith("product") and spec.catalog is None
                else f"log_values.defaults.{name}" if name in CONTEXT_FIELDS and name not in values.defaults
                else None
            )
            if missing:
                raise AppSpecError(f"{file}: {where}: uses {{{name}}}, which needs {missing}")
