"""Whether a call from one service reaches another, the way the cluster would route it.

The caller dials an address from its own env vars (so an edited ``QUOTE_ADDR`` breaks the call
exactly where the real app breaks): DNS (:mod:`.dns`) → Service → port → ready endpoints → targetPort
on the pod → NetworkPolicies (:mod:`.netpolicy`) → Chaos Mesh network/HTTP faults → the server's
authentication. The first failing step names the cause, and the cause decides how the failure
looks (fast refusal vs. a timeout).
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from itbench_gym.backends.sim.chaos.kinds import TARGET_KEY, injected_pods, record_id
from itbench_gym.backends.sim.chaos.tproxy import HttpFaults, WireRequest, delay_seconds, http_faults, proxy_exits
from itbench_gym.lang.selectors import LabelIndex, SelectorError, chaos_label_selector
from itbench_gym.lang.timestamps import parse_rfc3339

from .balancing import instance_key
from .cluster_view import ClusterView, PodView, container_env, select
from .dns import DNS_PORT, asks_cluster_dns, service_for
from .netpolicy import Endpoint, allows
from .process import argv, container_ports, flag_value, listening_port
from .spec import Address, AppSpec, Listener

#: cause → (seconds the failed call takes when not a timeout, gRPC code, message shape)
CAUSES: dict[str, tuple[float, str, str]] = {
    "dns": (0.004, "UNAVAILABLE", 'name resolver error: produced zero addresses (lookup {host}: no such host)'),
    "refused": (0.001, "UNAVAILABLE", "connection error: desc = \"transport: Error while dialing: dial tcp {target}: connect: connection refused\""),
    "no_endpoints": (0.001, "UNAVAILABLE", "connection error: desc = \"transport: Error while dialing: dial tcp {target}: connect: connection refused\""),
    "timeout": (-1.0, "DEADLINE_EXCEEDED", "context deadline exceeded (dial tcp {target}: i/o timeout)"),
    "http_abort": (0.002, "UNAVAILABLE", "upstream connect error or disconnect/reset before headers. reset reason: connection termination"),
    # the caller's own deadline passed while the callee was still working (Envoy: 504 UT)
    "deadline": (-1.0, "DEADLINE_EXCEEDED", "context deadline exceeded"),
    # the callee's process died with the request in flight (OOM kill, crash)
    "reset": (0.0, "UNAVAILABLE", "error reading from server: EOF"),
    # the destination's ztunnel resets the connection (mesh.py): a plaintext source under STRICT mTLS,
    # or an AuthorizationPolicy it enforces
    "mtls_reset": (0.001, "UNAVAILABLE", "read tcp {target}: connection reset by peer"),
    "rbac_reset": (0.001, "UNAVAILABLE", "read tcp {target}: connection reset by peer"),
    # a gateway's Envoy answers HTTP 403 for an AuthorizationPolicy it enforces
    "rbac_denied": (0.001, "PERMISSION_DENIED", "RBAC: access denied"),
    # the pod's queries to the cluster DNS were dropped (an egress NetworkPolicy): the lookup times out
    "dns_timeout": (-1.0, "UNAVAILABLE", "lookup {host}: i/o timeout"),
    # the server answered, but refused the credentials the caller presented (or that it sent none)
    "auth": (0.002, "UNAUTHENTICATED", "NOAUTH Authentication required."),
}


@dataclass(frozen=True)
class Reach:
    """Outcome of dialing one address: share of calls that arrive, and what happens to the rest."""

    ok_share: float
    cause: str | None
    delay_ms: float
    server_error_share: float
    target: str
    #: Packet loss on the path (0..1) that did not cut it: TCP retransmits it at a latency cost.
    loss: float = 0.0
    #: Variance of the added delay (ms²): netem's jitter.
    delay_var_ms2: float = 0.0
    #: Share of the arriving requests the server answers but whose answer a proxy resets (an HTTPChaos
    #: ``Response`` abort): the server counts them served, the caller sees the connection reset.
    answer_lost: float = 0.0

    @property
    def ok(self) -> bool:
        return self.ok_share >= 1.0


def resolve_address(addr: Address, env: dict[str, str], override: str | None = None) -> tuple[str, int | None]:
    """host and port the caller dials, from its env (or the redirect a flag forces)."""
    raw = override
    if raw is None and addr.env and addr.env in env:
        raw = env[addr.env]
    if raw is None and addr.host_env and addr.host_env in env:
        raw = env[addr.host_env]
        if addr.port_env and addr.port_env in env:
            host = raw.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
            raw = f"{host}:{env[addr.port_env]}"
    return _host_port(addr.default if raw is None else raw)


@functools.lru_cache(maxsize=4096)
def _host_port(raw: str) -> tuple[str, int | None]:
    """The host and port an address setting names: a URL, ``host:port``, a .NET (``Host=...;Port=...``)
    or libpq (``host=... port=...``) connection string (a port that is not a number: -1)."""
    if "Host=" in raw:
        parts = dict(p.split("=", 1) for p in raw.split(";") if "=" in p)
        raw = f"{parts.get('Host', '')}:{parts.get('Port', '')}" if parts.get("Port") else parts.get("Host", "")
    elif raw.startswith("host=") or " host=" in raw:
        # libpq's keyword/value connection string (psycopg2): "host=... port=... dbname=..."
        parts = dict(p.split("=", 1) for p in raw.split() if "=" in p)
        raw = f"{parts.get('host', '')}:{parts.get('port', '')}" if parts.get("port") else parts.get("host", "")
    raw = raw.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    host, _, port = raw.partition(":")
    if port == "":
        return host, None
    try:
        return host, int(port)
    except ValueError:
        return host, -1


def policy_allows(view: ClusterView, src: PodView | None, dst: dict[str, Any], port: int, protocol: str = "TCP") -> bool:
    """Whether the namespace's NetworkPolicies let ``src`` (None: a client outside the pods) reach pod ``dst`` on ``port``."""
    if not view.network_policies:
        return True
    source = None
    if src is not None:
        source = view.fact(("endpoint", src.uid), lambda: Endpoint.of_pod(src.pod))
    target = view.fact(("endpoint", dst["metadata"].get("uid", dst["metadata"]["name"])), lambda: Endpoint.of_pod(dst))
    return allows(view.network_policies, source, target, port, protocol, view.namespace_labels)


def dns_reachable(view: ClusterView, src: PodView | None) -> bool:
    """Whether ``src``'s DNS queries reach a cluster DNS server (UDP 53 through its egress policies).

    Only the policies can drop them here: the DNS servers themselves are taken as up (a cluster
    whose DNS pods the view does not hold answers as if they were)."""
    if src is None or not view.network_policies or not view.dns_servers or not asks_cluster_dns(src.pod.get("spec")):
        return True
    return view.fact(("dns reachable", src.uid), lambda: any(policy_allows(view, src, server, DNS_PORT, "UDP")
                                                             for server in view.dns_servers))


def chaos_selects(sel: dict[str, Any] | None, namespace: str, labels: dict[str, str]) -> bool:
    sel = sel or {}
    namespaces = sel.get("namespaces")
    if namespaces and namespace not in namespaces:
        return False
    try:
        return chaos_label_selector(sel).matches(labels)
    except SelectorError:
        return False  # Chaos Mesh's webhook refuses such a selector


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_NO_FAULTS = HttpFaults()
#: Request methods whose requests carry no body (a JSON body patch finds nothing to parse).
_BODILESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


def wire_requests(spec: AppSpec, values: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], WireRequest]:
    """Each HTTP/1 and gRPC server operation's requests as a proxy on the wire sees them: a route
    template's ``{name}`` takes each of ``values[name]`` in turn (one with no values stays as written);
    gRPC messages and bodiless methods are not JSON, the app's other request bodies are."""
    out: dict[tuple[str, str], WireRequest] = {}
    for svc in spec.services.values():
        for op in svc.operations.values():
            if op.request is None:
                continue
            method, template = op.request
            names = [n for n in dict.fromkeys(_PLACEHOLDER.findall(template)) if values.get(n)]
            paths = tuple(_fill(template, dict(zip(names, combo, strict=True))) for combo in itertools.product(*(values[n] for n in names)))
            out[(svc.name, op.id)] = WireRequest(method, paths, svc.protocol != "grpc" and method not in _BODILESS)
    return out


def _fill(template: str, values: Mapping[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _delay_ms(text: str | None) -> float:
    """Milliseconds in a NetworkChaos ``latency``/``jitter`` (Go duration, as Chaos Mesh parses it)."""
    return delay_seconds(text) * 1000.0


def _shapes(spec: dict[str, Any], selected: frozenset[str], targets: frozenset[str], sender: str | None, receiver: str | None) -> bool:
    """Whether a NetworkChaos shapes packets from pod ``sender`` to pod ``receiver`` (``namespace/name``;
    None: a client outside the cluster), given the pods its records hold: its ``selector``'s and its ``target``'s."""
    direction, has_target = spec.get("direction", "to"), spec.get("target") is not None
    return ((direction in ("to", "both") and sender in selected and (not has_target or receiver in targets))
            or (direction in ("from", "both") and has_target and sender in targets and receiver in selected))


#: NetworkChaos actions Chaos Mesh carries out as one netem qdisc of every tc parameter the spec sets
#: (delay, loss, duplicate, corrupt), whichever of them the action names.
NETEM_ACTIONS = frozenset({"netem", "delay", "loss", "duplicate", "corrupt"})


def _percent(spec: dict[str, Any], name: str) -> float:
    """A netem percentage (``loss.loss``, ``corrupt.corrupt``) as a fraction (Chaos Mesh refuses a malformed one)."""
    try:
        return min(max(float(str((spec.get(name) or {}).get(name, "0")).rstrip("%") or 0) / 100.0, 0.0), 1.0)
    except ValueError:
        return 0.0


def _network_chaos(view: ClusterView, src: PodView | None, dst: dict[str, Any]) -> tuple[bool, float, float, float]:
    """(partitioned, added delay ms, packet loss, the delay's variance in ms²) of a call from ``src`` to a
    destination pod.

    Chaos Mesh shapes the *egress* of the selected pods (``to``: towards the target, ``from``: the
    target's egress towards them, ``both``), so a call is hit on its request leg (caller's egress)
    and on its response leg (callee's egress); without a target every peer counts as one. netem
    draws each packet's delay uniformly within ``jitter`` of ``latency`` (no distribution table given)
    and sends the ``reorder`` share of packets at once.
    """
    blocked, delay, var, kept = False, 0.0, 0.0, 1.0
    sender = record_id(src.pod) if src is not None else None
    receiver = record_id(dst)
    for obj in view.chaos:
        if obj["kind"] != "NetworkChaos":
            continue
        spec = obj.get("spec") or {}
        selected, targets = injected_pods(obj), injected_pods(obj, TARGET_KEY)
        legs = int(_shapes(spec, selected, targets, sender, receiver)) + int(_shapes(spec, selected, targets, receiver, sender))
        if not legs:
            continue
        action = spec.get("action")
        if action == "partition":
            blocked = True
        elif action in NETEM_ACTIONS:
            # a corrupted segment fails TCP's checksum and is dropped as a lost one is; TCP discards duplicates
            passed = (1.0 - _percent(spec, "loss")) * (1.0 - _percent(spec, "corrupt"))
            blocked = blocked or passed <= 0.0
            kept *= passed ** legs
            shape = spec.get("delay") or {}
            # ``reorder``: that share of packets leaves at once, the rest after the delay
            latency, late = _delay_ms(shape.get("latency")), 1.0 - _percent(shape, "reorder")
            delay += legs * latency * late
            var += legs * (late * _delay_ms(shape.get("jitter")) ** 2 / 3.0 + latency ** 2 * late * (1.0 - late))
    return blocked, delay, 1.0 - kept, var


def _listening_port(spec: AppSpec, pod_obj: dict[str, Any], view: ClusterView) -> set[int]:
    """Ports the pod's process listens on (the app's port env, else its declared default, and its other ports)."""
    return view.fact(("listening", pod_obj["metadata"]["name"]), lambda: _listening_ports(spec, pod_obj, view))


def _listening_ports(spec: AppSpec, pod_obj: dict[str, Any], view: ClusterView) -> set[int]:
    ports: set[int] = set()
    for p in view.named(pod_obj["metadata"]["name"]):
        if not p.running:
            return set()  # e.g. the pause image of a PodChaos pod-failure: nothing listens
        svc = spec.services[p.service]
        ports |= container_ports(svc, p.container, view.started_env.get(instance_key(p), p.env)) or set()
        running = {s.get("name") for s in (pod_obj.get("status") or {}).get("containerStatuses") or [] if "running" in (s.get("state") or {})}
        for c in pod_obj["spec"].get("containers") or []:
            if c.get("name") in svc.sidecars and c.get("name") in running:
                ports |= container_ports(svc, c, container_env(c, pod_obj, view.key, view.data)) or set()
    if not ports:
        for c in pod_obj["spec"].get("containers") or []:
            ports |= {int(x["containerPort"]) for x in c.get("ports") or [] if "containerPort" in x}
    return ports


def listener_reached(spec: AppSpec, view: ClusterView, service: str, port: int) -> Listener | None:
    """The listener of ``service``'s server that a connection to its Service's ``port`` reaches: the
    port's target on a serving pod, matched with the ports its process reads (None: none of them)."""
    app = spec.services.get(service)
    ports = ((view.services.get(service) or {}).get("spec") or {}).get("ports") or []
    svc_port = next((p for p in ports if int(p.get("port", 0)) == port), None)
    serving = view.serving(service)
    if app is None or svc_port is None or not serving:
        return None
    pod = serving[0]
    target = _target_port(svc_port, pod.pod)
    env = view.started_env.get(instance_key(pod), pod.env)
    args = argv(pod.container, env)
    return next((lst for lst in app.listeners if target is not None and listening_port(lst, args, env) == target), None)


def _target_port(svc_port: dict[str, Any], pod_obj: dict[str, Any]) -> int | None:
    tp = svc_port.get("targetPort", svc_port.get("port"))
    if isinstance(tp, int) or (isinstance(tp, str) and tp.isdigit()):
        return int(tp)
    for c in pod_obj["spec"].get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == tp:
                return int(p["containerPort"])
    return None


@dataclass(frozen=True)
class _Handover:
    """A Service's endpoint changes as of its view: when each ready endpoint turned Ready (None:
    no transition recorded), whether an endpoint of the previous tick is gone, and when the
    previous tick's endpoints that are still there turned unready."""

    ready_since: tuple[float | None, ...]
    gone: bool
    unready_at: tuple[float, ...]


def _ready_condition(pod: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"), {})


def _handover(view: ClusterView, ready: list[dict[str, Any]], selector: dict[str, str]) -> _Handover:
    since: list[float | None] = []
    for pod in ready:
        cond = _ready_condition(pod)
        since.append(parse_rfc3339(cond["lastTransitionTime"]) if cond.get("lastTransitionTime") else None)
    present = view.fact("pods by uid", lambda: {p["metadata"].get("uid", ""): p for p in view.all_pods})
    before = view.fact("ready before by label", lambda: LabelIndex((uid, uid, labels) for uid, labels in view.ready_before.items()))
    unready: list[float] = []
    for uid in select(before, {"matchLabels": selector}):
        was = present.get(uid)
        if was is None or was["metadata"].get("deletionTimestamp"):
            return _Handover(tuple(since), True, ())
        cond = _ready_condition(was)
        if cond.get("status") == "False" and cond.get("lastTransitionTime"):
            unready.append(parse_rfc3339(cond["lastTransitionTime"]))
    return _Handover(tuple(since), False, tuple(unready))


def _served_fraction(view: ClusterView, handover: _Handover) -> float:
    """Share of the tick during which the Service had a ready endpoint.

    A pod that turned Ready during the tick (e.g. restarting after an OOM kill) served only the
    tick's end. A pod that was Ready at the previous tick served its start: until it turned
    unready, or — when it was deleted, as in a rolling update — until its replacement took over.
    """
    if view.dt <= 0:
        return 1.0
    start = view.now - view.dt
    end_cover = 0.0
    for since in handover.ready_since:
        end_cover = max(end_cover, (view.now - (start if since is None else since)) / view.dt)
    if handover.gone:
        return 1.0
    start_cover = 0.0
    for at in handover.unready_at:
        start_cover = max(start_cover, (at - start) / view.dt)
    return min(1.0, max(0.0, end_cover) + max(0.0, start_cover))


@dataclass(frozen=True)
class _Dial:
    """What dialing an address reached apart from the tick's share of it: the ready endpoints, the
    share of their requests that arrived (an endpoint counts 1), why the others did not (weighted by
    share), and the arriving requests' summed faults."""

    target: str
    ready: int
    ok: float
    causes: tuple[tuple[str, float], ...]
    delay_ms: float
    loss: float
    delay_var_ms2: float
    http_errors: float
    answers_lost: float
    handover: _Handover


def reach(spec: AppSpec, view: ClusterView, src: PodView | None, host: str, port: int | None, target_service: str,
          password: str | None = None, *, handshake: bool = True, request: WireRequest | None = None) -> Reach:
    """Dial ``host:port`` from ``src`` (a pod of the caller, or None for an outside client), presenting
    ``password`` when the server asks for one; without ``handshake`` only the TCP connection counts
    (a port probe such as ``nc -z``). HTTP faults act on ``request`` (None: the connection alone).

    Routing depends on the view's objects only (remembered in ``view.derived``); the share of the
    tick a Service had endpoints depends on the time as well.
    """
    if request is not None and not _any_http_chaos(view):
        request = None  # no proxy to select by it: every request of the address dials alike
    key = ("dial", src.uid if src is not None else None, host, port, target_service, password, handshake, request)
    dial = view.derived.get(key)
    if dial is None:
        dial = view.derived[key] = _dial(spec, view, src, host, port, target_service, password, handshake, request)
    if isinstance(dial, Reach):
        return dial
    share = dial.ok / dial.ready * _served_fraction(view, dial.handover)
    causes = dict(dial.causes)
    if share < 1.0 and not causes:
        causes["no_endpoints"] = 1.0
    cause = max(causes, key=lambda c: causes[c]) if causes else None
    ok = dial.ok
    return Reach(share, cause, dial.delay_ms / ok if ok else 0.0, dial.http_errors / ok if ok else 0.0, dial.target,
                 dial.loss / ok if ok else 0.0, dial.delay_var_ms2 / ok if ok else 0.0, dial.answers_lost / ok if ok else 0.0)


def reachable_once_started(spec: AppSpec, view: ClusterView, src: PodView, addr: Address) -> bool:
    """Whether a process of ``src``, just started, connects to the host the ``addr`` setting names, or
    to any of them for a list (Kafka's ``id@host:port,...`` controller voters): its DNS, the Service
    and its port as for any dial. A pod the Service selects counts among its endpoints, which it
    joins once ready (a single-node broker dials its own Service)."""
    raw = src.env.get(addr.env, addr.default) if addr.env else addr.default
    for item in raw.split(","):
        host, port = _host_port(item.strip())
        r = reach(spec, view, src, host, port, src.service, handshake=False)
        if r.ok_share > 0:
            return True
        if r.cause == "no_endpoints":
            name = service_for(host, src.pod["spec"], view.namespace, view.services)
            selector = ((view.services.get(name) or {}).get("spec") or {}).get("selector") if name is not None else None
            if selector and all(src.labels.get(k) == v for k, v in selector.items()):
                return True
    return False


def _http_chaos(view: ClusterView, pod: dict[str, Any], port: int) -> list[dict[str, Any]]:
    """The specs of the HTTPChaos experiments injected into ``pod`` whose proxy takes ``port`` (requests
    the pod serves on it and requests it sends to it), in the order the view lists them."""
    if not _any_http_chaos(view):
        return []
    rid = record_id(pod)
    return [spec for obj in view.chaos if obj["kind"] == "HTTPChaos" and rid in injected_pods(obj)
            and int((spec := obj.get("spec") or {}).get("port", 0)) == port]


def _any_http_chaos(view: ClusterView) -> bool:
    return view.fact("any HTTPChaos", lambda: any(obj["kind"] == "HTTPChaos" for obj in view.chaos))


def _authenticated(spec: AppSpec, view: ClusterView, pod_obj: dict[str, Any], service: str, password: str | None) -> bool:
    """Whether the server process of ``pod_obj`` accepts ``password``: the value its app.yaml ``auth``
    flag had when it started (empty or absent: it asks for none)."""
    svc = spec.services.get(service)
    if svc is None or svc.auth_password_arg is None:
        return True
    pod = next((p for p in view.named(pod_obj["metadata"]["name"]) if p.service == service), None)
    if pod is None:
        return True
    env = view.started_env.get(instance_key(pod), pod.env)
    required = flag_value(argv(pod.container, env), svc.auth_password_arg)
    return not required or password == required


def _dial(spec: AppSpec, view: ClusterView, src: PodView | None, host: str, port: int | None, target_service: str,
          password: str | None, handshake: bool, request: WireRequest | None) -> Reach | _Dial:
    """DNS → Service → port → ready endpoints → each endpoint's port, policies, chaos and
    authentication; a failure before the endpoints is a complete answer."""
    target = f"{host}:{port}" if port is not None else host
    if not dns_reachable(view, src):
        return Reach(0.0, "dns_timeout", 0.0, 0.0, target)
    name = service_for(host, src.pod["spec"] if src is not None else None, view.namespace, view.services)
    svc = view.services.get(name) if name is not None else None
    if svc is None:
        return Reach(0.0, "dns", 0.0, 0.0, target)
    if port is None:
        port = spec.services[target_service].port if target_service in spec.services else None
    if port is None or port <= 0:
        return Reach(0.0, "refused", 0.0, 0.0, target)
    svc_port = next((p for p in (svc.get("spec") or {}).get("ports") or [] if int(p.get("port", 0)) == port), None)
    if svc_port is None:
        return Reach(0.0, "timeout", 0.0, 0.0, target)
    selector = (svc.get("spec") or {}).get("selector")
    if not selector:
        return Reach(0.0, "no_endpoints", 0.0, 0.0, target)
    ready = [
        p for p in view.selected({"matchLabels": selector})
        if not p["metadata"].get("deletionTimestamp")
        and {c.get("type"): c.get("status") for c in (p.get("status") or {}).get("conditions") or []}.get("Ready") == "True"
    ]
    if not ready:
        return Reach(0.0, "no_endpoints", 0.0, 0.0, target)
    ok, delay, loss, var, http_err, lost_answers = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    causes: defaultdict[str, float] = defaultdict(float)
    # the client's own proxy (an HTTPChaos on its pod for the port it dials) sees every request first
    client_rules = _http_chaos(view, src.pod, port) if src is not None else []
    http = target_service not in spec.services or spec.services[target_service].speaks_http
    for pod_obj in ready:
        tp = _target_port(svc_port, pod_obj)
        if tp is None or tp not in _listening_port(spec, pod_obj, view):
            causes["refused"] += 1.0
            continue
        if not policy_allows(view, src, pod_obj, tp):
            causes["timeout"] += 1.0
            continue
        blocked, extra, lost, spread = _network_chaos(view, src, pod_obj)
        rules = client_rules + _http_chaos(view, pod_obj, tp)
        # a proxy that exited leaves its port's packets dropped
        cause = ("timeout" if blocked or any(proxy_exits(h) for h in rules)
                 else "auth" if handshake and not _authenticated(spec, view, pod_obj, target_service, password) else None)
        if cause is not None:
            causes[cause] += 1.0
            continue
        # a proxy cannot parse a protocol other than HTTP/1 and HTTP/2 and relays it as plain TCP
        faults = http_faults(rules, request) if rules and http and request is not None else _NO_FAULTS
        if faults.aborted > 0:
            causes["http_abort"] += faults.aborted
        arrived = 1.0 - faults.aborted
        ok += arrived
        delay += arrived * (extra + faults.delay_s * 1000.0)
        loss += arrived * lost
        var += arrived * (spread + faults.delay_var_s2 * 1e6)
        # a patched request body is the server's to cope with (the app model); a replaced message breaks the answer
        http_err += faults.broken
        lost_answers += faults.lost
    return _Dial(target, len(ready), ok, tuple(sorted(causes.items())), delay, loss, var, http_err, lost_answers,
                 _handover(view, ready, selector))
