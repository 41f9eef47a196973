"""What Python outside the twin knows about an app, read from the app's own data in ``envs/<app>/``.

This is the one loader of app data for everything but the twin (scenario checks, the SRE task, the
env, faults and agents); the twin reads the same ``app.yaml`` through its own typed model. Both
validate it with ``app.schema.json`` beside this module. The facts come from ``app.yaml`` (name,
namespace, manifest list, feature-flag configuration, the user-facing edge and its traffic series,
example commands), the manifests it lists and ``alert-rules.yaml`` — never from Python lists — so a
new app is described, and checked, by adding its data. To the manifests' objects the Kubernetes
controllers' children are added the way the cluster names them (a Deployment's ReplicaSet
``<name>-<hash>`` and Pods ``<name>-<hash>-<5>``, a StatefulSet's Pods ``<name>-<ordinal>``, a
DaemonSet's or Job's Pods ``<name>-<5>``, a Service's Endpoints and EndpointSlice), plus the
namespaces every cluster has. The services of the behaviour
model (``app.yaml`` ``services``) without a Kubernetes Service are kept apart (``app_services``):
ITBench's ground truths name application services by their telemetry ``service_name``
(``Service/accounting``) even when no Kubernetes Service fronts them (a Kafka consumer has none), but
a fault cannot target them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any

from itbench_gym.evaluation.validation import schema_problems
from itbench_gym.lang import yamltext

#: The JSON Schema of ``envs/<app>/app.yaml`` (the twin's loader validates with it too).
APP_SCHEMA_PATH = Path(__file__).with_name("app.schema.json")

#: Namespaces every Kubernetes cluster has (Kubernetes' own, not the app's).
BUILTIN_NAMESPACES: tuple[str, ...] = ("default", "kube-node-lease", "kube-public", "kube-system")
#: Name parts in Kubernetes' generated-name alphabet (no vowels, no 0/1/3), as the cluster makes them.
POD_TEMPLATE_HASH = "7d9c8b6f5c"
GENERATED_SUFFIX = "x2x4z"
CRONJOB_SCHEDULED = "28391520"
_WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")


@dataclass(frozen=True)
class KubeObject:
    """An object the scenario's cluster will have; ``origin`` says where it comes from."""

    kind: str
    name: str
    namespace: str | None
    origin: str
    body: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: For controller-made Pods: the workload (kind, name) whose template they follow.
    owner: tuple[str, str] | None = None

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.body.get("metadata") or {}).get("labels") or {}

    def containers(self) -> list[str]:
        """Container and init-container names of a Pod, or of a workload's pod template."""
        spec = self.body.get("spec") or {}
        if self.kind != "Pod":
            spec = _template_spec(self.body)
        return [c.get("name", "") for key in ("initContainers", "containers") for c in spec.get(key) or [] if isinstance(c, Mapping)]

    def target_ports(self) -> list[Any]:
        """A Service's ports' target ports (a port without one targets its own number), in order."""
        ports = (self.body.get("spec") or {}).get("ports") or []
        return [p.get("targetPort", p.get("port")) for p in ports if isinstance(p, Mapping)]

    def selects(self, pod: KubeObject) -> bool:
        """Whether this Service's selector picks ``pod``: the same namespace (an object without one is in
        the app's), every selector label; a Service without a selector picks none (its endpoints are
        managed by hand)."""
        selector = (self.body.get("spec") or {}).get("selector") or {}
        same_namespace = None in (self.namespace, pod.namespace) or self.namespace == pod.namespace
        return bool(selector) and same_namespace and all(pod.labels.get(k) == v for k, v in selector.items())

    def env(self, container: str) -> list[Mapping[str, Any]]:
        """The ``env`` entries of a container of the Pod or pod template, in order (repeats kept)."""
        spec = self.body.get("spec") or {} if self.kind == "Pod" else _template_spec(self.body)
        found = next((c for key in ("initContainers", "containers") for c in spec.get(key) or []
                      if isinstance(c, Mapping) and c.get("name") == container), {})
        return [e for e in found.get("env") or [] if isinstance(e, Mapping)]

    def env_names(self, container: str) -> list[str]:
        """The names a container sets in ``env``, in order (repeats kept)."""
        return [str(e.get("name")) for e in self.env(container)]


@dataclass(frozen=True)
class AlertRuleFact:
    """One alerting rule of the app's rules file."""

    alert: str
    group: str
    expr: str
    labels: Mapping[str, str]
    where: str


@dataclass(frozen=True)
class FlagsFact:
    """app.yaml ``flags``: the flagd ConfigMap and key, and the flags the behaviour model defines."""

    config_map: str
    key: str
    definitions: Mapping[str, tuple[str, ...]]

    def canonical(self, name: str) -> str | None:
        """The flag a (possibly old, aliased) name stands for, per app.yaml's ``aliases``."""
        for flag, aliases in self.definitions.items():
            if name == flag or name in aliases:
                return flag
        return None


@dataclass(frozen=True)
class EdgeFact:
    """app.yaml ``edge``: the user-facing service and the Prometheus series of the requests it serves."""

    service: str
    metric: str
    labels: Mapping[str, str]
    error_labels: Mapping[str, str]

    def selector(self, namespace: str, *, errors: bool = False) -> str:
        """PromQL selector of the edge's requests in ``namespace`` (only the failed ones with ``errors``)."""
        labels = {"namespace": namespace, **self.labels, **(self.error_labels if errors else {})}
        return self.metric + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items()) + "}"


@dataclass(frozen=True)
class ConnectionsFact:
    """app.yaml ``golden_signals.connections``: a counter of connections opened to each service, for the
    services that report no requests of their own (a mesh's L4 proxies count connections, not requests)."""

    metric: str
    service_label: str
    #: The label that holds the app's namespace (the proxy's own ``namespace`` is another one).
    namespace_label: str

    def rate(self, namespace: str, window: str = "5m") -> str:
        """PromQL: per service, connections opened per second over ``window``."""
        selector = f"{self.metric}{{{self.namespace_label}={json.dumps(namespace)}}}"
        return f"sum by ({self.service_label}) (rate({selector}[{window}]))"


@dataclass(frozen=True)
class CallCounterFact:
    """app.yaml ``services.<name>.metrics.calls``: a service's own counter of the calls it makes (Bookinfo's
    productpage counts its lookups of details and reviews), found by the ``container`` label of its scrape."""

    service: str
    container: str
    counter: str
    destination_label: str
    status_label: str

    def rate(self, namespace: str, window: str, *, failed: bool = False) -> str:
        """Per (container, destination) rate of the calls (only those that got no 2xx with ``failed``)."""
        status = f',{self.status_label}!~"2.."' if failed else ""
        return (f'sum by (container, {self.destination_label}) (rate({self.counter}{{namespace={json.dumps(namespace)},'
                f'container={json.dumps(self.container)}{status}}}[{window}]))')


@dataclass(frozen=True)
class GoldenSignalsFact:
    """app.yaml ``golden_signals``: each service's calls counter and duration histogram."""

    service_label: str
    calls: str
    error_labels: Mapping[str, str]
    duration_bucket: str
    #: Seconds per unit of the histogram's ``le`` buckets (0.001 for milliseconds).
    duration_unit_seconds: float
    connections: ConnectionsFact | None = None
    #: The labels of a caller's client calls, and the label naming each call (``client_calls``).
    client_labels: Mapping[str, str] | None = None
    client_name_label: str = ""

    def selector(self, metric: str, namespace: str, *, errors: bool = False, client: bool = False) -> str:
        """PromQL selector of ``metric`` in ``namespace`` (only failed calls with ``errors``; only the
        callers' client calls with ``client``)."""
        labels = {"namespace": namespace, **(self.error_labels if errors else {}), **((self.client_labels or {}) if client else {})}
        return metric + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items()) + "}"


@dataclass(frozen=True)
class AppFacts:
    name: str
    directory: Path
    namespace: str | None
    objects: tuple[KubeObject, ...]
    #: Services of the behaviour model without a Kubernetes Service (ground-truth entities only).
    app_services: tuple[KubeObject, ...]
    crd_kinds: frozenset[str]
    #: (caller, callee) service pairs of the behaviour model's calls, sorted (the topology's CALLS edges).
    calls: tuple[tuple[str, str], ...]
    flags: FlagsFact | None
    rules: tuple[AlertRuleFact, ...]
    rules_file: Path
    #: The user-facing service and its traffic series (the mitigation check's traffic probe), if declared.
    edge: EdgeFact | None = None
    #: The per-service golden-signal series (the mitigation check's service probe), if declared.
    golden_signals: GoldenSignalsFact | None = None
    #: Example commands with ``$namespace`` placeholders (``example_actions`` fills them).
    examples: tuple[str, ...] = ()
    #: (caller, callee, the caller's span of the call) of the behaviour model's calls that record one, sorted.
    client_spans: tuple[tuple[str, str, str], ...] = ()
    #: (service, its workload's name) for each service of the behaviour model (app.yaml ``workload``,
    #: else the service's own name): Bookinfo's ``details`` runs in Deployment ``details-v1``.
    service_workloads: tuple[tuple[str, str], ...] = ()
    #: The services' own counters of the calls they make (``services.<name>.metrics.calls``).
    call_counters: tuple[CallCounterFact, ...] = ()
    #: What could not be read (each names the file); the checks that need it are skipped.
    problems: tuple[str, ...] = ()

    def example_actions(self, namespace: str) -> tuple[str, ...]:
        """The app's example commands for a scenario in ``namespace``."""
        return tuple(Template(e).substitute(namespace=namespace) for e in self.examples)

    def namespaces(self) -> set[str]:
        return {o.name for o in self.objects if o.kind == "Namespace"}

    def of_kind(self, kind: str, namespace: str | None = None) -> list[KubeObject]:
        return [o for o in self.objects if o.kind == kind and (namespace is None or o.namespace in (None, namespace))]

    def find(self, kind: str, namespace: str | None, name: str) -> KubeObject | None:
        for o in self.objects:
            if o.kind == kind and o.name == name and (o.namespace is None or o.namespace == namespace):
                return o
        return None

    def kinds(self) -> set[str]:
        return {o.kind for o in self.objects} | set(self.crd_kinds)

    def pods(self) -> list[KubeObject]:
        """The Pods the workloads make (one per template; names as the controllers generate them)."""
        return [o for o in self.objects if o.kind == "Pod"]

    def rule_names(self) -> list[str]:
        return list(dict.fromkeys(r.alert for r in self.rules))

    def service_of(self, workload: str) -> str:
        """The behaviour model's service a workload runs (the workload's own name when it runs none)."""
        return next((service for service, runs in self.service_workloads if runs == workload), workload)

    def workload_of(self, service: str) -> str:
        """The workload a service of the behaviour model runs in (the service's own name when unknown)."""
        return next((runs for name, runs in self.service_workloads if name == service), service)


def load_app_facts(app_dir: Path) -> AppFacts:
    """Facts of the app in ``app_dir`` (cached per directory; the data does not change at runtime)."""
    return _load(str(Path(app_dir).resolve()))


@lru_cache(maxsize=1)
def app_schema() -> Mapping[str, Any]:
    """The JSON Schema every ``app.yaml`` follows."""
    schema: Mapping[str, Any] = json.loads(APP_SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def app_schema_problems(doc: Any) -> list[tuple[str, str]]:
    """Every way a parsed ``app.yaml`` breaks the app schema, as (field path, message), in document order."""
    return schema_problems(doc, app_schema(), "")


@lru_cache(maxsize=16)
def _load(directory: str) -> AppFacts:
    app_dir = Path(directory)
    problems: list[str] = []
    app_file = app_dir / "app.yaml"
    app: Mapping[str, Any] = {}
    try:
        loaded = yamltext.load(app_file.read_text(encoding="utf-8"))
        if isinstance(loaded, Mapping):
            app = loaded
        else:
            problems.append(f"{app_file}: not a mapping")
    except (OSError, ValueError, yamltext.YAMLError) as exc:
        problems.append(f"{app_file}: cannot read: {exc}")
    if app:
        problems += [f"{app_file}: {path or '<root>'}: {message}" for path, message in app_schema_problems(app)]
    objects: list[KubeObject] = []
    crd_kinds: set[str] = set()
    entries = app.get("manifests") or ["manifests"]
    if not isinstance(entries, list):
        problems.append(f"{app_file}: manifests: expected a list of files or folders")
        entries = []
    for doc, origin in _manifest_docs(app_dir, entries, problems):
        meta = doc.get("metadata") or {}
        kind, name = str(doc.get("kind")), str(meta.get("name", ""))
        namespace = meta.get("namespace")
        if kind == "CustomResourceDefinition":
            crd_kind = ((doc.get("spec") or {}).get("names") or {}).get("kind")
            if crd_kind:
                crd_kinds.add(str(crd_kind))
        obj = KubeObject(kind, name, str(namespace) if namespace else None, origin, doc)
        objects.append(obj)
        objects.extend(_children(obj))
    namespace = str(app["namespace"]) if app.get("namespace") else None
    have = {(o.kind, o.namespace, o.name) for o in objects}
    objects += [KubeObject("Namespace", ns, None, "every Kubernetes cluster") for ns in BUILTIN_NAMESPACES
                if ("Namespace", None, ns) not in have]
    app_services = tuple(
        KubeObject("Service", str(service), namespace, f"envs/{app_dir.name}/app.yaml services")
        for service in app.get("services") or {}
        if ("Service", namespace, str(service)) not in have
    )
    flags = _flags(app.get("flags"), app_file, problems)
    calls, client_spans = _calls(app.get("services"))
    rules_file = app_dir / "alert-rules.yaml"
    rules = _rules(rules_file, objects, problems)
    return AppFacts(
        name=str(app.get("name") or app_dir.name),
        directory=app_dir,
        namespace=namespace,
        objects=tuple(objects),
        app_services=app_services,
        crd_kinds=frozenset(crd_kinds),
        calls=calls,
        client_spans=client_spans,
        service_workloads=_service_workloads(app.get("services")),
        call_counters=_call_counters(app.get("services")),
        flags=flags,
        rules=rules,
        rules_file=rules_file,
        edge=_edge(app.get("edge"), app.get("services"), app_file, problems),
        golden_signals=_golden_signals(app.get("golden_signals")),
        examples=_examples(app.get("examples"), app_file, problems),
        problems=tuple(problems),
    )


def _manifest_docs(app_dir: Path, entries: Iterable[Any], problems: list[str]) -> Iterable[tuple[Mapping[str, Any], str]]:
    """Every Kubernetes object document of the manifest files/folders app.yaml lists."""
    for entry in entries:
        path = app_dir / str(entry)
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for file in files:
            try:
                docs = yamltext.load_all(file.read_text(encoding="utf-8"))
            except (OSError, ValueError, yamltext.YAMLError) as exc:
                problems.append(f"{file}: cannot read manifest: {exc}")
                continue
            rel = _relative(file, app_dir)
            for doc in docs:
                if isinstance(doc, Mapping) and "kind" in doc and isinstance(doc.get("metadata"), Mapping):
                    yield doc, rel


def _relative(file: Path, app_dir: Path) -> str:
    try:
        return f"envs/{app_dir.name}/{file.relative_to(app_dir)}"
    except ValueError:
        return str(file)


def _template_spec(body: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = body.get("spec") or {}
    if body.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return ((spec.get("template") or {}).get("spec")) or {}


def _children(obj: KubeObject) -> list[KubeObject]:
    """The objects Kubernetes' controllers make for ``obj``, named as they name them."""
    ns, name, body = obj.namespace, obj.name, obj.body
    origin = f"made by {obj.kind} {ns}/{name}"
    if obj.kind == "Service":
        return [KubeObject("Endpoints", name, ns, origin), KubeObject("EndpointSlice", f"{name}-{GENERATED_SUFFIX}", ns, origin)]
    if obj.kind not in _WORKLOAD_KINDS:
        return []
    spec = body.get("spec") or {}
    if obj.kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    template = spec.get("template") or {}
    meta = template.get("metadata") or {}

    def pod(pod_name: str) -> KubeObject:
        pod_body = {"metadata": {"name": pod_name, "namespace": ns, "labels": dict(meta.get("labels") or {}),
                                 "annotations": dict(meta.get("annotations") or {})},
                    "spec": template.get("spec") or {}}
        return KubeObject("Pod", pod_name, ns, origin, pod_body, owner=(obj.kind, name))

    if obj.kind == "Deployment":
        rs = f"{name}-{POD_TEMPLATE_HASH}"
        return [KubeObject("ReplicaSet", rs, ns, origin), pod(f"{rs}-{GENERATED_SUFFIX}")]
    if obj.kind == "StatefulSet":
        replicas = spec.get("replicas", 1)
        count = replicas if isinstance(replicas, int) and 0 < replicas <= 16 else 1
        return [pod(f"{name}-{i}") for i in range(count)]
    if obj.kind == "CronJob":
        job = f"{name}-{CRONJOB_SCHEDULED}"
        return [KubeObject("Job", job, ns, origin), pod(f"{job}-{GENERATED_SUFFIX}")]
    return [pod(f"{name}-{GENERATED_SUFFIX}")]


def _calls(services: Any) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, str], ...]]:
    """(caller, callee) pairs from ``services.<name>.operations[].calls[].to`` (``<service>/<operation>``),
    and (caller, callee, client span) for the calls whose caller records a span (``client_span``)."""
    pairs: set[tuple[str, str]] = set()
    spans: set[tuple[str, str, str]] = set()
    for name, service in (services or {}).items() if isinstance(services, Mapping) else ():
        operations = service.get("operations") if isinstance(service, Mapping) else None
        for operation in operations if isinstance(operations, list) else ():
            calls = operation.get("calls") if isinstance(operation, Mapping) else None
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, Mapping) and isinstance(call.get("to"), str):
                    pairs.add((str(name), call["to"].partition("/")[0]))
                    if isinstance(call.get("client_span"), str):
                        spans.add((str(name), call["to"].partition("/")[0], call["client_span"]))
    return tuple(sorted(pairs)), tuple(sorted(spans))


def _service_workloads(services: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(services, Mapping):
        return ()
    return tuple((str(name), str(service.get("workload") or name)) for name, service in services.items()
                 if isinstance(service, Mapping))


def _call_counters(services: Any) -> tuple[CallCounterFact, ...]:
    out = []
    for name, service in services.items() if isinstance(services, Mapping) else ():
        calls = ((service.get("metrics") or {}) if isinstance(service, Mapping) else {}).get("calls")
        if isinstance(calls, Mapping) and all(isinstance(calls.get(k), str) for k in ("counter", "destination_label", "status_label")):
            out.append(CallCounterFact(str(name), str(service.get("container") or name), calls["counter"],
                                       calls["destination_label"], calls["status_label"]))
    return tuple(out)


def _edge(raw: Any, services: Any, app_file: Path, problems: list[str]) -> EdgeFact | None:
    """app.yaml ``edge``: a service of the behaviour model; the probe adds the ``namespace`` label itself.
    A malformed ``edge`` was reported by the schema check."""
    if not isinstance(raw, Mapping) or not all(isinstance(raw.get(k), str) for k in ("service", "metric")):
        return None
    labels, errors = raw.get("labels"), raw.get("error_labels")
    if not isinstance(labels, Mapping) or not isinstance(errors, Mapping):
        return None
    if isinstance(services, Mapping) and raw["service"] not in services:
        problems.append(f"{app_file}: edge.service: {raw['service']!r} is not one of the app's services")
    if "namespace" in labels or "namespace" in errors:
        problems.append(f"{app_file}: edge: the namespace label is the scenario's; do not set it")
    return EdgeFact(service=raw["service"], metric=raw["metric"], labels={str(k): str(v) for k, v in labels.items()},
                    error_labels={str(k): str(v) for k, v in errors.items()})


def _golden_signals(raw: Any) -> GoldenSignalsFact | None:
    """app.yaml ``golden_signals`` (a malformed one was reported by the schema check)."""
    if not isinstance(raw, Mapping):
        return None
    names = ("service_label", "calls", "duration_bucket")
    errors, unit = raw.get("error_labels"), raw.get("duration_unit_seconds")
    if not all(isinstance(raw.get(k), str) for k in names) or not isinstance(errors, Mapping) \
            or not isinstance(unit, (int, float)) or unit <= 0:
        return None
    conn = raw.get("connections")
    connections = ConnectionsFact(metric=str(conn["metric"]), service_label=str(conn["service_label"]),
                                  namespace_label=str(conn["namespace_label"])) if isinstance(conn, Mapping) else None
    client = raw.get("client_calls")
    return GoldenSignalsFact(service_label=raw["service_label"], calls=raw["calls"],
                             error_labels={str(k): str(v) for k, v in errors.items()},
                             duration_bucket=raw["duration_bucket"], duration_unit_seconds=float(unit),
                             connections=connections,
                             client_labels={str(k): str(v) for k, v in client["labels"].items()} if isinstance(client, Mapping) else None,
                             client_name_label=str(client["name_label"]) if isinstance(client, Mapping) else "")


def _examples(raw: Any, app_file: Path, problems: list[str]) -> tuple[str, ...]:
    """app.yaml ``examples`` whose placeholders are only ``$namespace`` (the others are problems)."""
    out: list[str] = []
    for i, text in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(text, str):
            continue
        try:
            Template(text).substitute(namespace="")
        except (KeyError, ValueError) as exc:
            problems.append(f"{app_file}: examples[{i}]: only $namespace may be filled in ({type(exc).__name__}: {exc}); "
                            "write $$ for a literal $")
            continue
        out.append(text)
    return tuple(out)


def _flags(raw: Any, app_file: Path, problems: list[str]) -> FlagsFact | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not raw.get("config_map") or not raw.get("key"):
        problems.append(f"{app_file}: flags: needs config_map and key")
        return None
    definitions: dict[str, tuple[str, ...]] = {}
    for name, definition in (raw.get("definitions") or {}).items():
        aliases = definition.get("aliases") if isinstance(definition, Mapping) else None
        definitions[str(name)] = tuple(str(a) for a in aliases or [])
    return FlagsFact(config_map=str(raw["config_map"]), key=str(raw["key"]), definitions=definitions)


def _rules(rules_file: Path, objects: Iterable[KubeObject], problems: list[str]) -> tuple[AlertRuleFact, ...]:
    """Alerting rules the cluster evaluates: the app's rules file and the PrometheusRules of its manifests.

    The rules file holds PrometheusRule objects (what ITBench creates after installing the app) or
    is a Prometheus rules file (``groups[].rules[]``); ``where`` names the file, object and rule.
    """
    out: list[AlertRuleFact] = []
    if rules_file.exists():
        try:
            docs = [d for d in yamltext.load_all(rules_file.read_text(encoding="utf-8")) if d]
        except (OSError, ValueError, yamltext.YAMLError) as exc:
            problems.append(f"{rules_file}: cannot read: {exc}")
            docs = []
        for doc in docs:
            if not isinstance(doc, Mapping):
                continue
            if doc.get("kind") == "PrometheusRule":
                meta = doc.get("metadata") or {}
                out += _group_rules((doc.get("spec") or {}).get("groups"),
                                    f"{rules_file.name} PrometheusRule {meta.get('namespace', '')}/{meta.get('name', '')} ")
            else:
                out += _group_rules(doc.get("groups"), f"{rules_file.name} " if len(docs) > 1 else "")
    for obj in objects:
        if obj.kind == "PrometheusRule":
            out += _group_rules((obj.body.get("spec") or {}).get("groups"), f"{obj.origin} PrometheusRule {obj.namespace}/{obj.name} ")
    return tuple(out)


def _group_rules(groups: Any, where: str) -> list[AlertRuleFact]:
    out: list[AlertRuleFact] = []
    for gi, group in enumerate(groups if isinstance(groups, list) else []):
        if not isinstance(group, Mapping):
            continue
        for ri, rule in enumerate(group.get("rules") or []):
            if isinstance(rule, Mapping) and rule.get("alert"):
                labels = {str(k): str(v) for k, v in (rule.get("labels") or {}).items()}
                out.append(AlertRuleFact(str(rule["alert"]), str(group.get("name", gi)), str(rule.get("expr", "")), labels,
                                         f"{where}groups[{gi}].rules[{ri}]"))
    return out
