"""One tick's read of the cluster: which pods of each service run and serve, and what the
configuration (env vars, Services, NetworkPolicies, Chaos Mesh objects, flags) says.

Reading everything once per tick keeps the flow model free of store calls and makes the tick's
inputs explicit: the model is a function of this view and its own state.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from itbench_gym.backends.sim.chaos import API_VERSION as CHAOS_API
from itbench_gym.backends.sim.chaos import PAUSE_IMAGE, active
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.lang.flagd import FlagFileError, FlagSet, load_flag_set
from itbench_gym.lang.selectors import LabelIndex, SelectorError, selector_from_dict

from .dns import CLUSTER_DNS
from .spec import AppSpec

T = TypeVar("T")

#: The experiment kinds whose effects the model computes (PodChaos acts on pods through its controller).
CHAOS_KINDS = ("NetworkChaos", "StressChaos", "HTTPChaos", "JVMChaos", "IOChaos")


class StoreLike(Protocol):
    @property
    def registry(self) -> Any: ...

    def list_stored(self, rt: Any, namespace: str | None = None) -> list[dict[str, Any]]: ...

    def get(self, kind: str, namespace: str | None, name: str, api_version: str | None = None) -> dict[str, Any]: ...

    def list(self, kind: str, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, api_version: str | None = None) -> list[dict[str, Any]]: ...


class ClusterLike(Protocol):
    """What the app model needs from ``KubeCluster``."""

    @property
    def store(self) -> StoreLike: ...

    def set_usage(self, namespace: str, pod: str, container: str, *, cpu_cores: float, memory_bytes: float) -> None: ...

    def kill_container(self, namespace: str, pod: str, container: str, *, reason: str = "OOMKilled",
                       exit_code: int = 137, message: str = "") -> None: ...

    def container_file(self, namespace: str, pod: str, container: str, path: str) -> str | None:
        """The text a container's process reads at absolute ``path`` from its volumes now (None: no such file)."""
        ...


def _match_labels(selector: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``matchLabels`` of a selector made of them alone (a Service's, a Deployment's), else None."""
    if selector is not None and selector.keys() == {"matchLabels"} and isinstance(selector["matchLabels"], dict):
        match: dict[str, Any] = selector["matchLabels"]
        return match
    return None


def selector_matches(selector: dict[str, Any] | None, labels: Mapping[str, str] | None) -> bool:
    """A LabelSelector where an absent one means "every pod" (NetworkPolicy peers, app-level views).

    Matching is Kubernetes' (:mod:`itbench_gym.lang.selectors`); a selector the API server would
    have refused (an unknown operator) selects nothing. A selector of ``matchLabels`` alone (a
    Service's, a Deployment's) is matched directly: the model asks thousands of times a tick.
    """
    match = _match_labels(selector)
    if match is not None:
        have = labels or {}
        return all(isinstance(v, str) and have.get(k) == v for k, v in match.items())
    try:
        return selector_from_dict(selector or {}).matches(labels)
    except SelectorError:
        return False


def select(index: LabelIndex[Any, T], selector: dict[str, Any] | None) -> list[T]:
    """The indexed items whose labels ``selector`` matches (:func:`selector_matches`), in index order:
    looked up for a ``matchLabels`` selector, so finding every Service's pods stays linear in the pods."""
    match = _match_labels(selector)
    if match is not None:
        return index.matching(match)
    return index.scan(lambda labels: selector_matches(selector, labels))


def parse_quantity(q: Any) -> float:
    """Kubernetes resource quantity → float (bytes or cores)."""
    if q is None:
        return 0.0
    if isinstance(q, (int, float)):
        return float(q)
    s = str(q).strip()
    suffixes = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
                "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
    for suf in sorted(suffixes, key=len, reverse=True):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * suffixes[suf]
    return float(s)


@dataclass
class PodView:
    """A pod of one of the app's services, as this tick sees it (read-only: the views of later
    ticks share it while the pod object is unchanged)."""

    name: str
    uid: str
    service: str
    labels: dict[str, str]
    node: str
    ip: str
    running: bool
    ready: bool
    restarts: int
    started_at: str
    env: dict[str, str]
    container: dict[str, Any]
    limits: dict[str, float]
    pod: dict[str, Any]


@dataclass
class ClusterView:
    namespace: str
    pods: list[PodView]
    by_service: dict[str, list[PodView]]
    services: dict[str, dict[str, Any]]
    all_pods: list[dict[str, Any]]
    network_policies: list[dict[str, Any]]
    chaos: list[dict[str, Any]]
    #: ``all_pods`` by label.
    pod_index: LabelIndex[int, dict[str, Any]]
    #: Each namespace's labels (what NetworkPolicy namespaceSelectors match).
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The namespace's ConfigMaps and Secrets by name (stored objects: read, never modified).
    config_maps: dict[str, dict[str, Any]] = field(default_factory=dict)
    secrets: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The pods behind the cluster DNS Service (the one at the kubelet's clusterDNS address).
    dns_servers: list[dict[str, Any]] = field(default_factory=list)
    #: Each container run's env as its process started with it (by ``instance_key``): ConfigMap
    #: and Secret keys are read when the container starts, so later edits reach only new runs.
    started_env: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The tick this view closes: endpoints that became ready during it served only part of it.
    now: float = 0.0
    dt: float = 0.0
    ready_before: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Facts derived from the view's objects and ``ready_before`` alone, never from the time (the
    #: endpoints of a Service, what a dial reaches before the tick's share of it): filled on first
    #: use, and inherited by the next tick's view while none of those inputs changed.
    derived: dict[Hashable, Any] = field(default_factory=dict)

    def selected(self, selector: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The pods ``selector`` matches, in ``all_pods`` order."""
        return select(self.pod_index, selector)

    def fact(self, key: Hashable, make: Callable[[], T]) -> T:
        """``derived[key]``, made on first use (only from what ``derived`` may depend on)."""
        if key not in self.derived:
            self.derived[key] = make()
        value: T = self.derived[key]
        return value

    def named(self, name: str) -> list[PodView]:
        """The views of the pod called ``name`` (one per service whose Deployment selects it), in ``pods`` order."""
        return self.fact("pods by name", self._by_name).get(name, [])

    def _by_name(self) -> dict[str, list[PodView]]:
        out: dict[str, list[PodView]] = {}
        for p in self.pods:
            out.setdefault(p.name, []).append(p)
        return out

    def key(self, kind: str, name: str, key: str) -> str | None:
        """Key ``key`` of ConfigMap or Secret ``name`` as a container sees it (a Secret's decoded), None when absent."""
        if kind == "Secret":
            obj = self.secrets.get(name) or {}
            if key in (obj.get("stringData") or {}):
                return str(obj["stringData"][key])
            raw = (obj.get("data") or {}).get(key)
            try:
                return base64.b64decode(str(raw)).decode("utf-8", "replace") if raw is not None else None
            except ValueError:
                return None
        value = ((self.config_maps.get(name) or {}).get("data") or {}).get(key)
        return None if value is None else str(value)

    def data(self, kind: str, name: str) -> dict[str, str] | None:
        """Every key of ConfigMap or Secret ``name`` as :meth:`key` reads it, None when absent."""
        obj = (self.secrets if kind == "Secret" else self.config_maps).get(name)
        if obj is None:
            return None
        keys = {*(obj.get("data") or {}), *(obj.get("stringData") or {})} if kind == "Secret" else set(obj.get("data") or {})
        return {k: v for k in keys if (v := self.key(kind, name, k)) is not None}

    def serving(self, service: str) -> list[PodView]:
        return [p for p in self.by_service.get(service, []) if p.ready]

    def running(self, service: str) -> list[PodView]:
        return [p for p in self.by_service.get(service, []) if p.running]


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or [])


def ready_pod_labels(pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """uid -> labels of the pods that are Ready endpoints now."""
    return {
        p["metadata"].get("uid", ""): dict(p["metadata"].get("labels") or {})
        for p in pods
        if is_ready(p) and not p["metadata"].get("deletionTimestamp")
    }


#: Reads key ``key`` of the ConfigMap or Secret ``name`` ("ConfigMap" / "Secret"); None when absent.
KeyLookup = Callable[[str, str, str], "str | None"]
#: Every key of the ConfigMap or Secret ``name`` (a Secret's decoded); None when absent.
DataLookup = Callable[[str, str], "Mapping[str, str] | None"]

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
#: What a C identifier-like env var name must match for ``envFrom`` to import a key (the kubelet
#: skips the others with an event).
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def _no_lookup(kind: str, name: str, key: str) -> str | None:
    return None


def _no_data(kind: str, name: str) -> Mapping[str, str] | None:
    return None


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (env values, command, args): ``$$`` is ``$``; an undefined
    reference stays as written."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def downward_field(pod: Mapping[str, Any], path: str) -> str | None:
    """A pod field as the downward API renders it for an env var (``fieldRef.fieldPath``); None
    for a path the API would not accept there."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    for field_name in ("labels", "annotations"):
        prefix = f"metadata.{field_name}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str((meta.get(field_name) or {}).get(path[len(prefix):-2], ""))
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.host": spec.get("nodeName"),  # v1's old name, which ConvertDownwardAPIFieldLabel maps
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.hostIP": status.get("hostIP"),
              "status.podIP": status.get("podIP"),
              "status.podIPs": ",".join(str(i.get("ip", "")) for i in status.get("podIPs") or []),
              "status.hostIPs": ",".join(str(i.get("ip", "")) for i in status.get("hostIPs") or [])}
    if path not in simple:
        return None
    value = simple[path]
    return "" if value is None else str(value)


def resource_field(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str | None:
    """``resourceFieldRef`` as the kubelet renders it: the container's request or limit over the
    divisor, rounded up; None when the container does not set it (the kubelet would then use the
    node's allocatable, which a container's view does not hold)."""
    from kubernetes.utils.quantity import parse_quantity

    kind, _, resource = str(ref.get("resource", "")).partition(".")
    value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
    if kind not in ("limits", "requests") or value is None:
        return None
    try:
        divisor = parse_quantity(str(ref.get("divisor") or "1"))
        amount = parse_quantity(str(value))
    except ValueError:
        return None
    if divisor <= 0:
        return None
    return str(math.ceil(amount / divisor))


def container_env(container: Mapping[str, Any], pod: Mapping[str, Any], lookup: KeyLookup = _no_lookup,
                  data: DataLookup = _no_data) -> dict[str, str]:
    """Container env as the kubelet builds it: ``envFrom`` sources (each valid key, with the
    source's prefix), then ``env`` in order with ``$(VAR)`` expansion of what came before, the
    downward API (``fieldRef``, ``resourceFieldRef``) and ConfigMap / Secret keys through ``lookup``
    (a reference it cannot resolve is left out: the kubelet would not have started the container)."""
    out: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for field_name, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            ref = source.get(field_name)
            found = data(kind, str(ref.get("name", ""))) if ref else None
            for k, v in sorted((found or {}).items()):
                if _ENV_NAME.match(prefix + k):
                    out[prefix + k] = v
    for e in container.get("env") or []:
        if "valueFrom" not in e:
            out[e["name"]] = expand_vars(str(e.get("value", "")), out)
            continue
        source = e["valueFrom"] or {}
        value: str | None = None
        if "fieldRef" in source:
            value = downward_field(pod, str((source["fieldRef"] or {}).get("fieldPath", "")))
        elif "resourceFieldRef" in source:
            value = resource_field(container, source["resourceFieldRef"] or {})
        for field_name, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = source.get(field_name)
            if ref:
                value = lookup(kind, str(ref.get("name", "")), str(ref.get("key", "")))
        if value is not None:
            out[e["name"]] = value
    return out


def _container_status(pod: dict[str, Any], name: str) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == name:
            return cs
    return {}


def list_kind(store: StoreLike, kind: str, namespace: str | None = None, api_version: str | None = None) -> list[dict[str, Any]]:
    """Stored objects of ``kind``, not copies (none when the cluster does not know the kind): for
    readers that run every tick and never modify what they read."""
    try:
        return store.list_stored(store.registry.by_kind(kind, api_version), namespace)
    except (ApiError, KeyError, LookupError):
        return []


def _flag_config_map(store: StoreLike, spec: AppSpec) -> dict[str, Any] | None:
    """The stored ConfigMap flagd's flag file comes from, None when there is none."""
    return next((cm for cm in list_kind(store, "ConfigMap", spec.namespace) if cm["metadata"]["name"] == spec.flag_config_map), None)


def flags_of(cm: dict[str, Any] | None, spec: AppSpec) -> dict[str, Any]:
    """Flag values as a flagd starting on the ConfigMap's flag file would serve them (:func:`flag_values`)."""
    text = str((cm.get("data") or {}).get(spec.flag_key) or "") if cm is not None else None
    return flag_values(text, spec) or {}


def flag_values(text: str | None, spec: AppSpec) -> dict[str, Any] | None:
    """Flag values as flagd loads the flag file ``text`` (``defaultVariant`` → variant value); None
    when it rejects the file or there is none (:func:`loaded_flag_set`, :func:`served_values`)."""
    loaded = loaded_flag_set(text)
    return served_values(loaded, spec) if loaded is not None else None


def loaded_flag_set(text: str | None) -> FlagSet | None:
    """What flagd holds once it loads the flag file ``text``; None when it rejects the file or there is none.

    flagd accepts a flag file only as a whole (:mod:`itbench_gym.lang.flagd`, flagd's
    ``JSON.SetState``): one it rejects (not JSON, a flag that is not an object, a ``defaultVariant``
    that is not a variant) changes nothing — a flagd starting on it runs and is ready with no flags,
    so every evaluation fails with FLAG_NOT_FOUND and the app uses its code defaults; a running one
    keeps what it served.
    """
    if text is None:
        return None
    try:
        return load_flag_set(text)
    except FlagFileError:
        return None


def served_values(flag_set: FlagSet, spec: AppSpec) -> dict[str, Any]:
    """The app's flags (by their canonical names) that ``flag_set`` serves a value of: disabled flags and
    flags without a default variant evaluate to the code default, so they are left out."""
    out: dict[str, Any] = {}
    for name, flag in flag_set.flags.items():
        canonical = spec.flag_aliases.get(name)
        served, value = flag.served()
        if canonical and served:
            out[canonical] = value
    return out


def read_flags(store: StoreLike, spec: AppSpec) -> dict[str, Any]:
    """Flag values as flagd would load the flag ConfigMap now (:func:`flags_of`)."""
    return flags_of(_flag_config_map(store, spec), spec)


def pod_view(spec: AppSpec, service: str, p: dict[str, Any]) -> PodView | None:
    """A pod its Deployment selects as a pod of ``service``, None when it is not one (gone, or without the service's container)."""
    svc = spec.services[service]
    meta = p["metadata"]
    if meta.get("deletionTimestamp") and not (p.get("status") or {}).get("containerStatuses"):
        return None
    container = next((c for c in p["spec"].get("containers") or [] if c.get("name") == svc.container), None)
    if container is None:
        return None
    status = p.get("status") or {}
    cs = _container_status(p, svc.container)
    running = "running" in (cs.get("state") or {}) and container.get("image") != PAUSE_IMAGE
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = running and conditions.get("Ready") == "True" and not meta.get("deletionTimestamp")
    limits = {k: parse_quantity(v) for k, v in ((container.get("resources") or {}).get("limits") or {}).items()}
    return PodView(
        name=meta["name"], uid=meta.get("uid", meta["name"]), service=service, labels=meta.get("labels") or {},
        node=p["spec"].get("nodeName", ""), ip=status.get("podIP", ""), running=running, ready=ready,
        restarts=int(cs.get("restartCount", 0)),
        started_at=str(((cs.get("state") or {}).get("running") or {}).get("startedAt", "")),
        env=container_env(container, p), container=container, limits=limits, pod=p,
    )


def _dns_servers(store: StoreLike) -> list[dict[str, Any]]:
    """The pods the cluster DNS Service (ClusterIP ``CLUSTER_DNS``) selects, as stored."""
    svc = next((s for s in list_kind(store, "Service") if (s.get("spec") or {}).get("clusterIP") == CLUSTER_DNS), None)
    if svc is None or not (svc.get("spec") or {}).get("selector"):
        return []
    selector = {"matchLabels": svc["spec"]["selector"]}
    return [p for p in list_kind(store, "Pod", svc["metadata"].get("namespace")) if selector_matches(selector, p["metadata"].get("labels"))]


def same_objects(a: list[Any], b: list[Any]) -> bool:
    """Whether two reads returned the very same stored objects (stored objects are never modified in place)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class Derived(Generic[T]):
    """What ``derive`` makes of each stored object, made again only for the objects that were not
    in the previous call.

    Stored objects are never modified in place (every write stores a fresh dict), so the very
    object read last tick derives the same value. The memo holds the objects it was derived from:
    an identity check cannot be fooled by a recycled ``id``, and it forgets what left the store.
    """

    def __init__(self, derive: Callable[[dict[str, Any]], T]) -> None:
        self._derive = derive
        self._memo: dict[int, tuple[dict[str, Any], T]] = {}
        self._last: tuple[list[dict[str, Any]], list[T]] = ([], [])

    def of(self, objs: list[dict[str, Any]]) -> list[T]:
        if same_objects(objs, self._last[0]):
            return list(self._last[1])
        memo, self._memo = self._memo, {}
        out: list[T] = []
        for o in objs:
            hit = memo.get(id(o))
            value = hit[1] if hit is not None and hit[0] is o else self._derive(o)
            self._memo[id(o)] = (o, value)
            out.append(value)
        self._last = (list(objs), out)
        return list(out)


class ClusterReader:
    """Reads the cluster once per tick, deriving again only from the objects that changed.

    The cluster rarely changes between ticks: a steady tick then does no parsing, label matching or
    env expansion (:class:`Derived`), and its view inherits the previous view's ``derived`` facts.
    Each Deployment's pods are looked up in the view's label index, not found by a scan of every pod.
    """

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        #: service -> the pods its Deployment selects as that service's
        self._pod_views: dict[str, Derived[PodView | None]] = {
            svc.name: Derived(partial(pod_view, spec, svc.name)) for svc in spec.services.values()}
        self._last: tuple[list[list[dict[str, Any]]], ClusterView] | None = None

    def read(self, store: StoreLike, *, now: float = 0.0, dt: float = 0.0,
             ready_before: dict[str, dict[str, str]] | None = None) -> ClusterView:
        ns = self.spec.namespace
        pods = list_kind(store, "Pod", ns)
        deployments = {d["metadata"]["name"]: d for d in list_kind(store, "Deployment", ns)}
        services = {s["metadata"]["name"]: s for s in list_kind(store, "Service", ns)}
        last = self._last
        same_pods = last is not None and same_objects(pods, last[1].all_pods)
        index = last[1].pod_index if last is not None and same_pods else LabelIndex(
            (i, p, p["metadata"].get("labels")) for i, p in enumerate(pods))
        views: list[PodView] = []
        by_service: dict[str, list[PodView]] = {}
        for svc in self.spec.services.values():
            dep = deployments.get(svc.workload)
            if dep is None:
                continue
            selected = select(index, (dep.get("spec") or {}).get("selector") or {})
            mine = [v for v in self._pod_views[svc.name].of(selected) if v is not None]
            if mine:
                views += mine
                by_service[svc.name] = mine
        chaos: list[dict[str, Any]] = []
        for kind in CHAOS_KINDS:
            chaos += active(list_kind(store, kind, None, CHAOS_API), now)
        policies = list_kind(store, "NetworkPolicy", ns)
        namespaces = list_kind(store, "Namespace")
        dns_servers = _dns_servers(store)
        config_maps = {c["metadata"]["name"]: c for c in list_kind(store, "ConfigMap", ns)}
        before = dict(ready_before or {})
        inputs = [list(deployments.values()), list(services.values()), policies, chaos, namespaces, dns_servers]
        derived: dict[Hashable, Any] = {}
        if (last is not None and same_pods and all(same_objects(a, b) for a, b in zip(inputs, last[0], strict=True))
                and before == last[1].ready_before):
            derived = last[1].derived
        view = ClusterView(
            namespace=ns, pods=views, by_service=by_service, services=services, all_pods=pods,
            network_policies=policies, chaos=chaos, pod_index=index,
            namespace_labels={n["metadata"]["name"]: dict(n["metadata"].get("labels") or {}) for n in namespaces},
            config_maps=config_maps, secrets={s["metadata"]["name"]: s for s in list_kind(store, "Secret", ns)}, dns_servers=dns_servers,
            now=now, dt=dt, ready_before=before, derived=derived,
        )
        self._last = (inputs, view)
        return view
