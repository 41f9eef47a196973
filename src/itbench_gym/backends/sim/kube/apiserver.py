"""The twin's Kubernetes API server: a WSGI app speaking the real wire protocol over the store.

It serves what kubectl (1.32–1.37) and the official Python client use: legacy discovery, CRUD with
every patch type, list pagination, watch (streamed, with simulated time passing while the client
waits), server-side ``Table`` printing, subresources (status, scale, log, eviction, binding),
access reviews, ``metrics.k8s.io`` and OpenAPI. Every failure is a ``Status`` object.

Every request is authorized with RBAC (``rbac.py``) before anything is looked up, so a denied
request answers the same ``403`` whether its target exists or not; ``Visibility`` then hides the
injection machinery from discovery, OpenAPI and lists for everyone but the admin. Request bodies
are decoded by ``bodies.py``, which bounds what a hostile body can cost.

Simulated time: a blocking request (a watch) that has nothing to send calls ``advance(step)``
under the shared lock so controllers make progress — this is how ``kubectl rollout status`` sees a
rollout finish —, once its client waits for more: with ``programs``, every program the agent runs is
waiting (``backends/programs``), so how long the client took to read an event does not decide how much
simulated time passed; a stream whose client has left ends. ``advance`` returning False (the episode
budget is spent) ends the watch. A client that runs on the twin's time (the env's kubectl) is driven
instead: its stream waits (``RunningPrograms.idle_wait``) while the driver lets the time pass, also up
to the client's own timers. A GET of an object that is being deleted advances ``POLL_STEP`` too, so
clients that poll for the deletion (``kubectl drain``) see the grace period end — but for a driven
client, whose own poll interval passes on the twin's time. Every answer is preceded by showing the
driven clients the time it was served at (``sync_clock``). After every write the store settles, so controllers
react before the response is sent (a scaled Deployment has its new pods at once).
"""

from __future__ import annotations

import base64
import bisect
import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Request, Response

from itbench_gym.lang.durations import DurationError, parse_go_duration
from itbench_gym.lang.timestamps import parse_rfc3339, rfc3339

from ...programs import RunningPrograms
from ..server import PEER_GONE, PEER_UNREAD, UPGRADE
from . import bodies, errors, openapi, protobuf, rbac, remotecommand, tables, webhooks
from .apiload import ApiLoad
from .auth import TOKEN_ISSUER, Auth, BoundAccount, BoundObject, Identity, issue_token
from .resources import ResourceType, split_api_version
from .selectors import fields_match, parse_field_selector, parse_label_selector
from .store import ObjectStore, WatchEvent, clone

log = logging.getLogger(__name__)

Obj = dict[str, Any]
#: ``(namespace, pod, container, start, end) -> [(timestamp, line), ...]`` for one container run.
LogSource = Callable[[str, str, str, float, float], list[tuple[float, str]]]
#: Runs a process in a container: (namespace, pod, container, argv, stdin, tty) → what it wrote and the
#: error channel's Status (the kubelet and the container runtime's part of ``kubectl exec``).
ExecSource = Callable[[str, str, str, list[str], bytes, bool], remotecommand.Outcome]

SERVER_VERSION = {
    "major": "1", "minor": "34", "emulationMajor": "1", "emulationMinor": "34",
    "minCompatibilityMajor": "1", "minCompatibilityMinor": "33",
    "gitVersion": "v1.34.1", "gitCommit": "itbench-gym-twin", "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.6", "compiler": "gc", "platform": "linux/amd64",
}
MAX_BODY = 3 * 1024 * 1024
WATCH_STEP = 1.0  # simulated seconds per idle step of a watch
POLL_STEP = 1.0  # simulated seconds a GET of a terminating object lets pass (kubectl polls once a second)
BOOKMARK_EVERY = 60.0  # simulated seconds between bookmarks
#: A served request moves the simulated clock by its modelled latency from this long on; a healthy
#: server's milliseconds are below what any episode can tell apart, and are left out.
LATENCY_RESOLUTION = 0.05
#: The ``verb`` label of upstream's request metrics, by authorizer verb.
_METRIC_VERBS = {"get": "GET", "list": "LIST", "create": "POST", "update": "PUT", "patch": "PATCH",
                 "delete": "DELETE", "deletecollection": "DELETE"}
DEFAULT_WATCH_TIMEOUT = 1800.0  # simulated seconds, when the client asks for none
MAX_LOG_FOLLOW = 300.0  # simulated seconds a `logs -f` stays open
#: Media types a request body may have (kube-apiserver's input serializers, CBOR not enabled).
BODY_MEDIA_TYPES = ("application/json", "application/yaml", protobuf.MEDIA_TYPE)
_INT64 = (-(2**63), 2**63 - 1)


class _Request(Request):
    """Bodies beyond ``MAX_BODY`` are refused without being read whole, chunked or not.

    werkzeug refuses a declared Content-Length over the limit, but silently truncates a chunked
    body at it; reading one byte more lets ``_body`` tell a truncated stream from a full one.
    """

    max_content_length = MAX_BODY + 1


@dataclass(frozen=True)
class Usage:
    """Resource usage for ``metrics.k8s.io`` (what ``kubectl top`` prints).

    ``pods`` maps ``(namespace, pod)`` to ``{container: (cpu_cores, memory_bytes)}``; ``nodes`` maps
    a node to ``(cpu_cores, memory_bytes)`` — nodes missing there are the sum of their pods.
    ``window`` is the sampling window in seconds.
    """

    pods: Mapping[tuple[str, str], Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    nodes: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    window: float = 15.0


MetricsSource = Callable[[], Usage]


@dataclass(frozen=True)
class Route:
    group: str
    version: str
    namespace: str | None
    plural: str
    name: str | None
    sub: str | None
    watch_path: bool


class KubeApp:
    """WSGI callable; ``close()`` ends open watches (call before stopping the server)."""

    def __init__(self, store: ObjectStore, *, clock: Any, auth: Auth, lock: threading.RLock,
                 advance: Callable[[float], bool], log_source: LogSource | None = None,
                 metrics: MetricsSource | None = None, load: ApiLoad | None = None,
                 exec_source: ExecSource | None = None, programs: RunningPrograms | None = None) -> None:
        self.store = store
        #: the API server's request load; None serves every request at once, as before
        self.load = load
        self.clock = clock
        self.auth = auth
        self.lock = lock
        self.advance = advance
        self.log_source = log_source
        self.exec_source = exec_source
        #: the agent's running programs: a stream lets time pass only while they wait (``backends/programs``)
        self.programs = programs
        self.metrics = metrics
        self._closed = threading.Event()
        self._polled: set[tuple[tuple[str, str], str | None, str | None]] = set()
        self._openapi = openapi.OpenAPIBuilder(store.registry, self._crd)
        self.authz = rbac.RBACAuthorizer(store)
        with lock:  # the API server's bootstrap-roles hook: a store restored from anywhere has its policy
            rbac.bootstrap(store)

    def close(self) -> None:
        self._closed.set()

    def _client_waits(self, req: Request) -> bool:
        """Block until the client of a stream waits for it (the agent's programs are all waiting; see
        ``backends/programs``); False when the client has left or the server is closing."""
        gone: Callable[[], bool] = req.environ.get(PEER_GONE) or (lambda: False)
        if self.programs is None:
            return not gone() and not self._closed.is_set()
        return self.programs.wait_until_waiting(gone, self._closed, req.environ.get(PEER_UNREAD) or (lambda: False))

    def _pass_time(self, req: Request, stop_at: float, step: float, changed: Callable[[], bool] = lambda: False) -> bool:
        """A stream with nothing to send lets up to ``step`` simulated seconds pass, never past
        ``stop_at``, once its client waits for it; True to look again (time passed, or ``changed()``),
        False to end the stream (the client left, the server closes, the episode's time is spent).

        A client on the twin's time (``RunningPrograms.drives_time``) is driven: the driver lets the
        time pass, also up to the client's own timers. Any other client: the stream advances itself.
        """
        if self.programs is not None and self.programs.drives_time():
            gone: Callable[[], bool] = req.environ.get(PEER_GONE) or (lambda: False)
            return self.programs.idle_wait(stop_at, step, gone, self._closed, changed)
        if not self._client_waits(req):
            return False
        with self.lock:
            if changed():
                return True
            return self.advance(min(step, stop_at - self.clock.now()))

    def _written_since(self, rv: int) -> bool:
        return self.store.resource_version != rv

    def _crd(self, name: str) -> Obj | None:
        try:
            return self.store.get_stored(self.store.registry.by_kind("CustomResourceDefinition"), None, name)
        except errors.ApiError:
            return None

    # -- WSGI entry --------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        req = _Request(environ)
        try:
            resp = self._dispatch(req)
        except errors.ApiError as e:
            resp = _status_response(e)
        except RequestEntityTooLarge:
            resp = _status_response(_too_large())
        except Exception as e:  # a bug must not leak a traceback to the client
            log.exception("kube API request %s %s failed", req.method, req.path)
            resp = _status_response(errors.internal(f"{type(e).__name__}: {e}"))
        if self.programs is not None:
            self.programs.sync_clock()  # the time this answer was served at, before the client reads it
        return resp(environ, start_response)

    def _dispatch(self, req: Request) -> Response:
        path = req.path.rstrip("/") or "/"
        if path in ("/healthz", "/readyz", "/livez"):
            return Response("ok", mimetype="text/plain")
        ident = self._impersonate(req, self.auth.authenticate(req.headers.get("Authorization"), self.clock.now(),
                                                              self._object_uid))
        attrs = rbac.request_attributes(req.method, req.path, req.args, ident.username, ident.groups)
        with self.lock:
            decision = self.authz.authorize(attrs)
        if not decision.allowed:
            raise rbac.forbidden(attrs, decision.reason)
        if self.load is not None and attrs.resource_request and attrs.verb != "watch":
            return self._metered(self.load, req, ident, attrs, path)
        return self._serve(req, ident, attrs, path)

    def _metered(self, load: ApiLoad, req: Request, ident: Identity, attrs: rbac.Attributes, path: str) -> Response:
        """Serve a request through the API server's load model: it may be rejected by APF, and the
        simulated clock moves by its latency once that is long enough to matter (``LATENCY_RESOLUTION``)."""
        scope = "resource" if attrs.name else "namespace" if attrs.namespace else "cluster"
        verb = _METRIC_VERBS.get(attrs.verb, attrs.verb.upper())
        with self.lock:
            cls = load.classify(ident.username, ident.groups, verb, attrs.group, attrs.version, attrs.resource,
                                     attrs.subresource, scope)
            objects = self._list_size(attrs) if verb == "LIST" else 0
            verdict = load.admit(cls, objects)
            if verdict.rejected:
                load.record(cls, 429, 0.0)
                raise errors.too_many_requests(verdict.retry_after)
        try:
            resp = self._serve(req, ident, attrs, path)
        except errors.ApiError as e:
            with self.lock:
                load.record(cls, e.code, verdict.latency)
            raise
        with self.lock:
            load.record(cls, resp.status_code, verdict.latency)
        if verdict.latency >= LATENCY_RESOLUTION:
            self.advance(verdict.latency)
        return resp

    def _list_size(self, attrs: rbac.Attributes) -> int:
        """Objects a list would return (what its encoding costs the server)."""
        try:
            rt = self.store.registry.by_plural(attrs.group, attrs.version, attrs.resource)
        except (errors.ApiError, KeyError):
            return 0
        return len(self.store.list_stored(rt, attrs.namespace or None))

    def _serve(self, req: Request, ident: Identity, attrs: rbac.Attributes, path: str) -> Response:
        if path == "/version":
            return _json(SERVER_VERSION)
        if path == "/api":
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": req.host}]})
        if path == "/apis":
            return _json(self._group_list(ident))
        if path.startswith("/openapi/"):
            with self.lock:
                return _json(self._openapi.document(path, ident.visibility))
        parts = [p for p in path.split("/") if p]
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 2:
            if not ident.visibility.group_visible(parts[1]):
                raise errors.not_found_path()
            if len(parts) == 2:
                return _json(self._group(parts[1], ident))
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.not_found_path()
        if not ident.visibility.group_visible(group) or not any(
                t.group == group and t.version == version for t in self.store.registry.all()):
            raise errors.not_found_path()
        if not rest:
            if req.method != "GET":
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return _json(self._resource_list(group, version, ident))
        route = self._route(group, version, rest)
        return self._resource(req, ident, route, attrs)

    def _impersonate(self, req: Request, ident: Identity) -> Identity:
        """Honour ``Impersonate-*`` headers the way kube-apiserver does: each one needs ``impersonate``."""
        user = req.headers.get("Impersonate-User")
        groups = tuple(req.headers.getlist("Impersonate-Group"))
        uid = req.headers.get("Impersonate-Uid")
        extras = [(k[len("Impersonate-Extra-"):].lower(), v) for k, v in req.headers.items()
                  if k.lower().startswith("impersonate-extra-")]
        if not user:
            if groups or uid or extras:
                raise errors.bad_request("requested impersonation of groups, extras or uid without impersonating a user")
            return ident
        checks: list[rbac.Attributes] = []
        parts = user.split(":")
        if user.startswith("system:serviceaccount:") and len(parts) == 4:
            checks.append(rbac.Attributes(ident.username, ident.groups, "impersonate", True, namespace=parts[2],
                                          resource="serviceaccounts", name=parts[3]))
        else:
            checks.append(rbac.Attributes(ident.username, ident.groups, "impersonate", True, resource="users", name=user))
        checks.extend(rbac.Attributes(ident.username, ident.groups, "impersonate", True, resource="groups", name=g)
                      for g in groups)
        checks.extend(rbac.Attributes(ident.username, ident.groups, "impersonate", True, group="authentication.k8s.io",
                                      resource="userextras", subresource=k, name=v) for k, v in extras)
        if uid:
            checks.append(rbac.Attributes(ident.username, ident.groups, "impersonate", True,
                                          group="authentication.k8s.io", resource="uids", name=uid))
        with self.lock:
            for check in checks:
                decision = self.authz.authorize(check)
                if not decision.allowed:
                    raise rbac.forbidden(check, decision.reason)
        return self.auth.impersonated(user, groups, uid or "")

    # -- discovery ---------------------------------------------------------------------------

    def _group_entry(self, group: str, versions: list[str]) -> Obj:
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}

    def _group_list(self, ident: Identity) -> Obj:
        groups = [self._group_entry(g, vs) for g, vs in self.store.registry.groups()
                  if g and ident.visibility.group_visible(g)]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _group(self, group: str, ident: Identity) -> Obj:
        for g, vs in self.store.registry.groups():
            if g == group:
                return {"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(g, vs)}
        raise errors.not_found_path()

    def _resource_list(self, group: str, version: str, ident: Identity) -> Obj:
        resources: list[Obj] = []
        for t in self.store.registry.resources_in(group, version):
            entry: Obj = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind,
                          "verbs": list(t.verbs)}
            if t.short_names:
                entry["shortNames"] = list(t.short_names)
            if t.categories:
                entry["categories"] = list(t.categories)
            resources.append(entry)
            for sub in t.subresources:
                kind, verbs, extra = _SUBRESOURCES.get(sub, ("", ["get", "patch", "update"], {}))
                resources.append({"name": f"{t.plural}/{sub}", "singularName": "", "namespaced": t.namespaced,
                                  "kind": kind or t.kind, "verbs": verbs, **extra})
        gv = f"{group}/{version}" if group else version
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}

    # -- routing -----------------------------------------------------------------------------

    def _route(self, group: str, version: str, rest: list[str]) -> Route:
        registry = self.store.registry
        watch_path = False
        if rest and rest[0] == "watch":
            watch_path, rest = True, rest[1:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            try:
                candidate = registry.by_plural(group, version, rest[2])
            except errors.ApiError:
                candidate = None
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise errors.not_found_path()
        rt = registry.by_plural(group, version, rest[0])
        if rt.namespaced and namespace is None and len(rest) > 1:
            raise errors.not_found_path()
        return Route(group, version, namespace, rest[0], rest[1] if len(rest) > 1 else None,
                     rest[2] if len(rest) > 2 else None, watch_path)

    def _resource(self, req: Request, ident: Identity, r: Route, attrs: rbac.Attributes) -> Response:
        rt = self.store.registry.by_plural(r.group, r.version, r.plural)
        vis = ident.visibility
        if r.namespace is not None and not vis.namespace_visible(r.namespace):
            return self._hidden_namespace(req, rt, r)
        if rt.kind == "Namespace" and rt.group == "" and r.name and not vis.namespace_visible(r.name):
            raise errors.not_found("", "namespaces", r.name)
        if r.sub is not None and r.sub not in rt.subresources:
            raise errors.not_found_path()
        method = req.method
        q = req.args
        if r.group == "metrics.k8s.io":
            if method != "GET":
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return self._metrics(req, ident, rt, r)
        if not rt.stored:
            if method != "POST" or r.name:
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            return self._review(req, ident, rt, r.namespace)
        if r.sub == "exec" and rt.kind == "Pod" and self.exec_source is not None and r.name:
            return self._exec(req, attrs, r.namespace or "", r.name, self.exec_source)
        if r.sub == "attach" and rt.kind == "Pod" and self.log_source is not None and r.name:
            return self._attach(req, attrs, r.namespace or "", r.name, self.log_source)
        if r.sub in ("exec", "attach", "portforward", "proxy"):
            raise errors.bad_request(f"{r.sub} is not supported by the itbench_gym twin; use `kubectl exec`, `kubectl logs`, "
                                     "`kubectl describe` and the metrics/trace tools instead")
        if r.sub in _UNRUN_POD_CHANGES and method != "GET":
            raise errors.bad_request(f"pods/{r.sub} is served for discovery and reads only: the itbench_gym twin "
                                     f"{_UNRUN_POD_CHANGES[r.sub]}")
        if r.name is None:
            if method == "GET":
                if r.watch_path or _truthy(q.get("watch")):
                    return self._watch(req, ident, rt, r.namespace)
                return self._list(req, ident, rt, r.namespace)
            if method == "POST":
                return self._create(req, ident, rt, r.namespace, attrs)
            if method == "DELETE":
                return self._delete_collection(req, ident, rt, r.namespace)
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        with self.lock:
            self._require_visible(ident, rt, r.namespace, r.name)
        if r.sub == "log":
            return self._logs(req, r.namespace or "", r.name)
        if r.sub == "eviction" and method == "POST":
            return self._evict(req, ident, rt, r.namespace or "", r.name)
        if r.sub == "binding" and method == "POST":
            return self._bind(req, rt, r.namespace or "", r.name)
        if r.sub == "token" and method == "POST":
            return self._token(req, rt, r.namespace or "", r.name)
        if r.sub == "scale":
            return self._scale(req, ident, rt, r.namespace, r.name)
        if method == "GET":
            if r.watch_path or _truthy(q.get("watch")):
                return self._watch(req, ident, rt, r.namespace, name=r.name)
            with self.lock:
                stored = self.store.get_stored(rt, r.namespace, r.name)
                if (stored.get("metadata") or {}).get("deletionTimestamp") and self._poll_round(rt, r):
                    # A client polling until the object is gone (`kubectl drain`) must see time pass.
                    stored = self.store.get_stored(rt, r.namespace, r.name)
                obj = self.store.registry.convert(stored, rt)
                return self._render_one(req, rt, obj)
        if method == "PUT":
            return self._update(req, ident, rt, r, attrs)
        if method == "PATCH":
            return self._patch(req, ident, rt, r, attrs)
        if method == "DELETE":
            return self._delete(req, ident, rt, r.namespace, r.name)
        raise errors.method_not_allowed("the server does not allow this method on the requested resource")

    def _poll_round(self, rt: ResourceType, r: Route) -> bool:
        """Advance ``POLL_STEP`` once per round of polls: a client polling several terminating
        objects each second (drain waits for every evicted pod) must not make time run faster."""
        key = (rt.storage_key, r.namespace, r.name)
        if key not in self._polled:
            self._polled.add(key)
            return False
        self._polled = {key}
        if self.programs is not None and self.programs.drives_time():
            return False  # a driven client's own poll interval lets the time pass
        return self.advance(POLL_STEP)

    def _hidden_namespace(self, req: Request, rt: ResourceType, r: Route) -> Response:
        """For the agent, a hidden namespace behaves like one that does not exist."""
        if req.method == "GET" and r.name is None and not (r.watch_path or _truthy(req.args.get("watch"))):
            return self._list_response(req, rt, [], str(self.store.resource_version), None, None)
        if req.method == "POST" and r.name is None:
            raise errors.not_found("", "namespaces", r.namespace or "")
        raise errors.not_found(rt.group, rt.plural, r.name or "")

    # -- reads -------------------------------------------------------------------------------

    def _visible(self, ident: Identity, rt: ResourceType, obj: Obj) -> bool:
        vis = ident.visibility
        if ident.admin:
            return True
        meta = obj.get("metadata") or {}
        if not vis.namespace_visible(meta.get("namespace")):
            return False
        if rt.kind == "Namespace" and rt.group == "" and not vis.namespace_visible(meta.get("name")):
            return False
        if rt.kind == "Event":
            io = obj.get("involvedObject") or obj.get("regarding") or {}
            if not vis.api_version_visible(io.get("apiVersion")) or not vis.namespace_visible(io.get("namespace")):
                return False
        if rt.kind == "CustomResourceDefinition" and not vis.group_visible(str((obj.get("spec") or {}).get("group", ""))):
            return False
        return True

    def _require_visible(self, ident: Identity, rt: ResourceType, namespace: str | None, name: str) -> None:
        """A hidden object is as absent for reads and writes by name as one that does not exist."""
        if ident.admin:
            return
        try:
            stored = self.store.get_stored(rt, namespace, name)
        except errors.ApiError:
            return  # the handler answers its own NotFound
        if not self._visible(ident, rt, stored):
            raise errors.not_found(rt.group, rt.plural, name)

    def _list(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None) -> Response:
        q = req.args
        limit = _int_param(q, "limit", 0)
        cont = q.get("continue") or ""
        with self.lock:
            objs = self.store.list_stored(rt, namespace, q.get("labelSelector"), q.get("fieldSelector"))
            if not ident.admin:
                objs = [o for o in objs if self._visible(ident, rt, o)]
            rv = str(self.store.resource_version)
            start = 0
            if cont:
                # Like etcd's continue key: resume after the last object served, so a page is
                # neither skipped nor repeated when objects come and go between the requests.
                rv, after = _decode_continue(cont)
                start = bisect.bisect_right([(o["metadata"].get("namespace") or "", o["metadata"]["name"])
                                             for o in objs], after)
            token = None
            remaining = None
            if limit > 0 and start + limit < len(objs):
                page = objs[start:start + limit]
                last = page[-1]["metadata"]
                token = _encode_continue(rv, (last.get("namespace") or "", last["name"]))
                remaining = len(objs) - start - limit
            else:
                page = objs[start:]
            if rt.storage_version != rt.api_version:
                page = [self.store.registry.convert(o, rt) for o in page]
            return self._list_response(req, rt, page, rv, token, remaining)

    def _list_response(self, req: Request, rt: ResourceType, objs: list[Obj], rv: str, token: str | None,
                       remaining: int | None) -> Response:
        if _wants_table(req):
            table = tables.to_table(objs, rt, self.clock.now(), include_object=req.args.get("includeObject", "Metadata"),
                                    resource_version=rv, continue_token=token,
                                    printer_columns=self._printer_columns(rt))
            return _json(table)
        meta: Obj = {"resourceVersion": rv}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        return _json({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": objs})

    def _render_one(self, req: Request, rt: ResourceType, obj: Obj) -> Response:
        if _wants_table(req):
            return _json(tables.to_table([obj], rt, self.clock.now(),
                                         include_object=req.args.get("includeObject", "Metadata"),
                                         resource_version=str(obj["metadata"].get("resourceVersion", "")),
                                         printer_columns=self._printer_columns(rt)))
        return _json(obj)

    def _printer_columns(self, rt: ResourceType) -> list[Obj] | None:
        if not rt.custom:
            return None
        try:
            crd = self.store.get_stored(self.store.registry.by_kind("CustomResourceDefinition"), None,
                                        f"{rt.plural}.{rt.group}")
        except errors.ApiError:
            return None
        versions: list[Obj] = (crd.get("spec") or {}).get("versions") or []
        for v in versions:
            if v.get("name") == rt.version:
                columns: list[Obj] | None = v.get("additionalPrinterColumns")
                return columns
        return None

    # -- watch -------------------------------------------------------------------------------

    def _watch(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None,
               name: str | None = None) -> Response:
        q = req.args
        labels = parse_label_selector(q.get("labelSelector"))
        field_sel = q.get("fieldSelector") or ""
        if name:
            field_sel = ",".join(x for x in (field_sel, f"metadata.name={name}") if x)
        fields = parse_field_selector(field_sel, rt.kind, rt.custom)
        timeout = _watch_timeout(q)
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        initial_events = _truthy(q.get("sendInitialEvents"))
        if initial_events and q.get("resourceVersionMatch") != "NotOlderThan":
            raise errors.invalid("meta.k8s.io", "ListOptions", "", [(
                "FieldValueForbidden", "resourceVersionMatch",
                "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")])
        rv_param = q.get("resourceVersion") or ""
        table = _wants_table(req)
        include = q.get("includeObject", "Metadata")
        printer_columns = self._printer_columns(rt) if table else None
        with self.lock:
            start_rv = self.store.resource_version
            initial: list[Obj] = []
            if initial_events or rv_param in ("", "0"):
                initial = [o for o in self.store.list_stored(rt, namespace, None, None)
                           if (not labels.requirements and not labels.match_nothing or labels.matches(o["metadata"].get("labels")))
                           and fields_match(o, fields) and self._visible(ident, rt, o)]
            else:
                try:
                    start_rv = int(rv_param)
                except ValueError:
                    raise errors.bad_request(f"invalid resource version: {rv_param!r}") from None
                self.store.events_since(start_rv, rt, namespace)  # raises 410 when too old
            deadline = self.clock.now() + timeout

        def encode(ev_type: str, obj: Obj, first: bool) -> bytes:
            if ev_type != "BOOKMARK" and table:
                obj = tables.to_table([obj], rt, self.clock.now(), include_object=include,
                                      resource_version=obj["metadata"].get("resourceVersion", ""),
                                      printer_columns=printer_columns, with_columns=first)
            return json.dumps({"type": ev_type, "object": obj}, separators=(",", ":")).encode() + b"\n"

        def bookmark(rv: int, initial_end: bool = False) -> bytes:
            meta: Obj = {"resourceVersion": str(rv)}
            if initial_end:
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return encode("BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}, False)

        def stream() -> Iterator[bytes]:
            first = True
            for o in initial:
                yield encode("ADDED", self.store.registry.convert(o, rt), first)
                first = False
            last_rv = start_rv
            if initial_events:
                yield bookmark(last_rv, initial_end=True)
            last_bookmark = self.clock.now()
            while not self._closed.is_set():
                out: list[bytes] = []
                idle = False
                with self.lock:
                    try:
                        events = self.store.events_since(last_rv, rt, namespace)
                    except errors.ApiError as e:
                        out.append(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
                        events = []
                        done = True
                    else:
                        done = False
                    for ev in events:
                        last_rv = ev.resource_version
                        if self._event_matches(ev, labels, fields, ident, rt):
                            out.append(encode(ev.type, self.store.registry.convert(ev.obj, rt), first))
                            first = False
                    if not done:  # everything up to now has been seen: compaction must not outrun a quiet watch
                        last_rv = max(last_rv, self.store.resource_version)
                    if not out and not done:
                        done = self.clock.now() >= deadline
                        idle = not done
                if idle:
                    # Time passes only once the client has taken in what it was sent and waits for more;
                    # something written meanwhile (by this client's other requests) is sent first.
                    if not self._pass_time(req, deadline, WATCH_STEP, functools.partial(self._written_since, last_rv)):
                        return
                    if bookmarks and self.clock.now() - last_bookmark >= BOOKMARK_EVERY:
                        with self.lock:
                            last_bookmark = self.clock.now()
                            out.append(bookmark(self.store.resource_version))
                yield from out
                if done:
                    return

        return Response(stream(), status=200, mimetype="application/json", direct_passthrough=True,
                        headers={"Cache-Control": "no-cache, private"})

    def _event_matches(self, ev: WatchEvent, labels: Any, fields: list[Any], ident: Identity,
                       rt: ResourceType) -> bool:
        o = ev.obj
        if (labels.requirements or labels.match_nothing) and not labels.matches(o["metadata"].get("labels")):
            return False
        if fields and not fields_match(o, fields):
            return False
        return self._visible(ident, rt, o)

    # -- writes ------------------------------------------------------------------------------

    def _create(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None,
                attrs: rbac.Attributes) -> Response:
        body = _body(req)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a single object")
        self._check_body_type(body, rt)
        meta = body.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = namespace
        self._check_write_visibility(ident, rt, body, attrs)
        with self.lock:
            warnings = self._field_validation(req, rt, body)
            self._openapi.prune(rt, body)
            if rt.group == rbac.GROUP:
                self.authz.check_write(attrs, rt.kind, body, None)
            with webhooks.requested_by(self.store, ident.username, ident.groups) as warned:
                obj = self.store.create(body, dry_run=_dry_run(req))
            self._after_write(rt)
        return _warn(_json(obj, 201), warnings + warned)

    def _update(self, req: Request, ident: Identity, rt: ResourceType, r: Route, attrs: rbac.Attributes) -> Response:
        body = _body(req)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a single object")
        self._check_body_type(body, rt)
        meta = body.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != r.name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL ({r.name})")
        meta["name"] = r.name
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != r.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the request")
            meta["namespace"] = r.namespace
        self._check_write_visibility(ident, rt, body, attrs)
        with self.lock:
            warnings = self._field_validation(req, rt, body)
            self._openapi.prune(rt, body)
            if rt.group == rbac.GROUP:
                self.authz.check_write(attrs, rt.kind, body, self.store.get_stored(rt, r.namespace, r.name or ""))
            with webhooks.requested_by(self.store, ident.username, ident.groups) as warned:
                obj = self.store.update(body, subresource=r.sub, dry_run=_dry_run(req))
            self._after_write(rt)
        return _warn(_json(obj), warnings + warned)

    def _patch(self, req: Request, ident: Identity, rt: ResourceType, r: Route, attrs: rbac.Attributes) -> Response:
        raw = req.get_data(cache=False)
        if len(raw) > MAX_BODY:
            raise _too_large()
        warnings: list[str] = []
        if (req.args.get("fieldValidation") or "Warn") != "Ignore":
            from . import patch as patching

            ptype = patching.normalize_patch_type(req.content_type or "")
            if ptype != patching.JSON:
                warnings = self._field_validation(req, rt, patching.decode_patch(raw, ptype))
        with self.lock:
            def patch(dry_run: bool) -> Obj:
                return self.store.patch(rt.kind, r.namespace, r.name or "", raw, req.content_type or "",
                                        subresource=r.sub, field_manager=req.args.get("fieldManager"),
                                        api_version=rt.api_version, force=_truthy(req.args.get("force")),
                                        dry_run=dry_run, decode=self._decode)

            if rt.group == rbac.GROUP:  # the escalation check needs the object the patch produces
                try:
                    old: Obj | None = self.store.get_stored(rt, r.namespace, r.name or "")
                except errors.ApiError:
                    old = None
                self.authz.check_write(attrs, rt.kind, patch(True), old)
            with webhooks.requested_by(self.store, ident.username, ident.groups) as warned:
                obj = patch(_dry_run(req))
            self._after_write(rt)
        return _warn(_json(obj), warnings + warned)

    def _field_validation(self, req: Request, rt: ResourceType, body: Any) -> list[str]:
        """``fieldValidation=Strict`` refuses unknown fields (kubectl's default); ``Warn`` (the API server's
        default, for a client that sends none) reports them; either way a stored object loses them (``prune``)."""
        mode = req.args.get("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise errors.bad_request(f'fieldValidation: Unsupported value: "{mode}": supported values: '
                                     '"Ignore", "Strict", "Warn"')
        if mode == "Ignore" or not isinstance(body, dict):
            return []
        unknown = self._openapi.unknown_fields(rt, body)
        if not unknown:
            return []
        if mode == "Strict":
            detail = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise errors.bad_request(f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                                     f"strict decoding error: {detail}")
        return [f'unknown field "{u}"' for u in unknown]

    def _delete_options(self, req: Request) -> Obj:
        opts: Obj = {}
        raw = req.get_data(cache=True)
        if raw.strip():
            body = _decode(raw, req.content_type)
            if isinstance(body, dict):
                opts.update(_delete_options_body(body))
        q = req.args
        if q.get("propagationPolicy"):
            opts["propagationPolicy"] = q["propagationPolicy"]
        if q.get("gracePeriodSeconds"):
            opts["gracePeriodSeconds"] = _int_param(q, "gracePeriodSeconds", 0)
        if q.get("orphanDependents") is not None and "propagationPolicy" not in opts:
            opts["propagationPolicy"] = "Orphan" if _truthy(q.get("orphanDependents")) else "Background"
        if opts.get("orphanDependents") is True and "propagationPolicy" not in opts:
            opts["propagationPolicy"] = "Orphan"
        if q.getlist("dryRun"):
            opts["dryRun"] = q.getlist("dryRun")
        return opts

    def _delete(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None, name: str) -> Response:
        opts = self._delete_options(req)
        with self.lock:
            stored = self.store.get_stored(rt, namespace, name)
            if not self._visible(ident, rt, stored):
                raise errors.not_found(rt.group, rt.plural, name)
            with webhooks.requested_by(self.store, ident.username, ident.groups) as warned:
                obj = self.store.delete(rt.kind, namespace, name, api_version=rt.api_version,
                                        propagation_policy=opts.get("propagationPolicy") or "Background",
                                        grace_period_seconds=opts.get("gracePeriodSeconds"),
                                        preconditions=opts.get("preconditions"), dry_run=bool(opts.get("dryRun")))
            self._after_write(rt)
        return _warn(_json(obj), warned)

    def _delete_collection(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None) -> Response:
        if "deletecollection" not in rt.verbs:
            raise errors.method_not_allowed("the server does not allow this method on the requested resource")
        opts = self._delete_options(req)
        with self.lock:
            victims = [o for o in self.store.list_stored(rt, namespace, req.args.get("labelSelector"),
                                                         req.args.get("fieldSelector"))
                       if self._visible(ident, rt, o)]
            deleted = [self.store.delete(rt.kind, o["metadata"].get("namespace"), o["metadata"]["name"],
                                         api_version=rt.api_version,
                                         propagation_policy=opts.get("propagationPolicy") or "Background",
                                         grace_period_seconds=opts.get("gracePeriodSeconds"),
                                         dry_run=bool(opts.get("dryRun")))
                       for o in victims]
            self._after_write(rt)
            rv = str(self.store.resource_version)
        return _json({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": rv},
                      "items": deleted})

    def _check_types(self, rt: ResourceType, obj: Obj) -> None:
        """400 for a value of the wrong JSON type, as decoding into the Go struct fails upstream."""
        problem = self._openapi.type_error(rt, obj)
        if problem:
            raise errors.bad_request(problem)

    def _decode(self, rt: ResourceType, obj: Obj) -> None:
        """What decoding a patch's result does: the type check, then the unknown fields dropped."""
        self._check_types(rt, obj)
        self._openapi.prune(rt, obj)

    def _check_body_type(self, body: Obj, rt: ResourceType) -> None:
        kind, av = body.get("kind"), body.get("apiVersion")
        if not kind:
            body["kind"] = rt.kind
        elif kind != rt.kind:
            raise errors.bad_request(f"the kind of the object ({kind}) does not match the resource ({rt.plural})")
        if not av:
            body["apiVersion"] = rt.api_version
        elif split_api_version(str(av))[0] != rt.group:
            raise errors.bad_request(f"the API version in the data ({av}) does not match the expected API version "
                                     f"({rt.api_version})")
        self._check_types(rt, body)

    def _check_write_visibility(self, ident: Identity, rt: ResourceType, body: Obj, attrs: rbac.Attributes) -> None:
        meta = body.get("metadata") or {}
        if not ident.visibility.namespace_visible(meta.get("namespace")):
            raise errors.not_found("", "namespaces", meta["namespace"])
        if rt.kind == "Namespace" and rt.group == "" and not ident.visibility.namespace_visible(meta.get("name")):
            raise rbac.forbidden(attrs)  # taking a hidden namespace's name would reveal it exists

    def _after_write(self, rt: ResourceType) -> None:
        """Controllers react before the response; ClusterRole changes re-aggregate admin/edit/view."""
        if rt.group == rbac.GROUP and rt.kind == "ClusterRole":
            rbac.aggregate(self.store)
        self.store.settle()

    # -- subresources ------------------------------------------------------------------------

    def _scale(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None, name: str) -> Response:
        with self.lock:
            obj = self.store.registry.convert(self.store.get_stored(rt, namespace, name), rt)
            scale = _to_scale(obj, rt)
            if req.method == "GET":
                return _json(scale)
            if req.method == "PUT":
                body = _body(req)
                if not isinstance(body, dict):
                    raise errors.bad_request("the request body must be a Scale object")
                new_scale = body
            elif req.method == "PATCH":
                from . import patch as patching

                ptype = patching.normalize_patch_type(req.content_type or "")
                if ptype == patching.APPLY:
                    raise errors.unsupported_media_type("apply patches are not supported on the scale subresource")
                doc = patching.decode_patch(req.get_data(cache=False), ptype)
                new_scale = patching.apply_patch(scale, doc, ptype, rt)
            else:
                raise errors.method_not_allowed("the server does not allow this method on the requested resource")
            for key in ("metadata", "spec"):
                if not isinstance(new_scale, dict) or not isinstance(new_scale.get(key) or {}, dict):
                    raise errors.bad_request(f"Scale in version \"v1\" cannot be handled as a Scale: json: cannot "
                                             f"unmarshal into Go struct field Scale.{key} of type v1.Scale{key.title()}")
            rv = (new_scale.get("metadata") or {}).get("resourceVersion")
            if rv and rv != obj["metadata"]["resourceVersion"]:
                raise errors.modified_conflict(rt.group, rt.plural, name)
            replicas = (new_scale.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise errors.invalid("autoscaling", "Scale", name, [(
                    "FieldValueInvalid", "spec.replicas", f"Invalid value: {replicas}: must be greater than or equal to 0")])
            updated = clone(obj)
            _set_path(updated, _replicas_path(rt, "specReplicasPath", ".spec.replicas"), replicas)
            out = self.store.update(updated, dry_run=_dry_run(req))
            self.store.settle()
            return _json(_to_scale(out, rt))

    def _evict(self, req: Request, ident: Identity, rt: ResourceType, namespace: str, name: str) -> Response:
        body = _body(req) if req.get_data(cache=True).strip() else {}
        if not isinstance(body, dict):
            raise errors.bad_request("json: cannot unmarshal into Go value of type v1.Eviction: the body must be an object")
        opts = _delete_options_body(body.get("deleteOptions") or {})
        with self.lock:
            pod = self.store.get_stored(rt, namespace, name)
            self._check_pdb(pod)
            self.store.delete("Pod", namespace, name, grace_period_seconds=opts.get("gracePeriodSeconds"),
                              dry_run=_dry_run(req))
            self.store.settle()
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    def _check_pdb(self, pod: Obj) -> None:
        ns = pod["metadata"].get("namespace")
        labels = pod["metadata"].get("labels") or {}
        pdb_rt = self.store.registry.by_kind("PodDisruptionBudget")
        from .selectors import selector_from_dict

        for pdb in self.store.list_stored(pdb_rt, ns):
            if selector_from_dict((pdb.get("spec") or {}).get("selector") or {}).matches(labels):
                if int((pdb.get("status") or {}).get("disruptionsAllowed", 1)) <= 0:
                    raise errors.ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                          "disruption budget.", {"causes": [{"reason": "DisruptionBudget", "message":
                                          f"The disruption budget {pdb['metadata']['name']} needs "
                                          f"{(pdb.get('status') or {}).get('desiredHealthy', 0)} healthy pods and has "
                                          f"{(pdb.get('status') or {}).get('currentHealthy', 0)} currently"}]})

    def _object_uid(self, kind: str, namespace: str, name: str) -> str | None:
        """The uid of an object that exists and whose deletion is not past due (what a bound token is
        checked against: a deleted pod's token works through its grace period)."""
        with self.lock:
            try:
                stored = self.store.get_stored(self.store.registry.by_kind(kind), namespace or None, name)
            except (errors.ApiError, KeyError, LookupError):
                return None
            meta = stored.get("metadata") or {}
            if meta.get("deletionTimestamp") and parse_rfc3339(str(meta["deletionTimestamp"])) < self.clock.now():
                return None
        return str(meta.get("uid", ""))

    def _token(self, req: Request, rt: ResourceType, namespace: str, name: str) -> Response:
        """``TokenRequest``: a token bound to the ServiceAccount (and to ``spec.boundObjectRef``: a Pod,
        Secret or Node of the same uid), valid for ``spec.expirationSeconds`` (default one hour; at least
        ten minutes, as the API server requires)."""
        body = _body(req) if req.get_data(cache=True).strip() else {}
        if not isinstance(body, dict) or not isinstance(body.get("spec") or {}, dict):
            raise errors.bad_request("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: the body must be an object")
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds", 3600)
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 600:
            raise errors.invalid("authentication.k8s.io", "TokenRequest", name, [
                ("FieldValueInvalid", "spec.expirationSeconds", "may not specify a duration less than 10 minutes")])
        audiences = spec.get("audiences") or [TOKEN_ISSUER]
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise errors.bad_request("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: spec.audiences must be a list of strings")
        with self.lock:
            account = self.store.get_stored(rt, namespace, name)
            uid = str((account.get("metadata") or {}).get("uid", ""))
            bound, node = self._bound_objects(namespace, name, spec.get("boundObjectRef"))
            now = self.clock.now()
        token, expires = issue_token(BoundAccount(namespace, name, uid), now, seconds, audiences=tuple(audiences), bound=bound, node=node)
        return _json({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                      "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
                      "spec": {"audiences": audiences, "expirationSeconds": seconds,
                               **({"boundObjectRef": spec["boundObjectRef"]} if spec.get("boundObjectRef") else {})},
                      "status": {"token": token, "expirationTimestamp": rfc3339(expires)}}, 201)

    def _bound_objects(self, namespace: str, account: str, ref: Any) -> tuple[BoundObject | None, BoundObject | None]:
        """The object a TokenRequest binds its token to, and a pod's node (as the token's claims name them)."""
        if not ref:
            return None, None
        if not isinstance(ref, dict):
            raise errors.bad_request("TokenRequest in version \"v1\" cannot be handled as a TokenRequest: spec.boundObjectRef must be an object")
        kind, obj_name = str(ref.get("kind", "")), str(ref.get("name", ""))
        if kind not in ("Pod", "Secret", "Node") or str(ref.get("apiVersion", "v1")) != "v1":
            raise errors.bad_request(f'cannot bind token for serviceaccount "{account}" to object of type '
                                     f'{ref.get("apiVersion", "")}, Kind={kind}')
        try:
            obj = self.store.get_stored(self.store.registry.by_kind(kind), None if kind == "Node" else namespace, obj_name)
        except errors.ApiError:
            raise errors.not_found("", f"{kind.lower()}s", obj_name) from None
        meta = obj.get("metadata") or {}
        if ref.get("uid") and ref["uid"] != meta.get("uid"):
            raise errors.conflict("", f"{kind.lower()}s", obj_name,
                                  f"the UID in the bound object reference ({ref['uid']}) does not match the UID in record. "
                                  "The object might have been deleted and then recreated")
        bound = BoundObject(kind, obj_name, str(meta.get("uid", "")))
        node_name = (obj.get("spec") or {}).get("nodeName") if kind == "Pod" else None
        node = None
        if node_name:
            node_uid = self._object_uid("Node", "", str(node_name))
            node = BoundObject("Node", str(node_name), node_uid) if node_uid is not None else None
        return bound, node

    def _bind(self, req: Request, rt: ResourceType, namespace: str, name: str) -> Response:
        body = _body(req)
        if not isinstance(body, dict) or not isinstance(body.get("target") or {}, dict):
            raise errors.bad_request("Binding in version \"v1\" cannot be handled as a Binding: json: cannot unmarshal "
                                     "into Go struct field Binding.target of type v1.ObjectReference")
        target = (body.get("target") or {}).get("name")
        if not target:
            raise errors.invalid("", "Binding", name, [("FieldValueRequired", "target.name", "Required value")])
        with self.lock:
            pod = clone(self.store.get_stored(rt, namespace, name))
            if (pod.get("spec") or {}).get("nodeName"):
                raise errors.conflict("", "pods", name, f"pod {name} is already assigned to node "
                                      f"\"{pod['spec']['nodeName']}\"")
            pod["spec"]["nodeName"] = target
            self.store.update(pod)
            self.store.settle()
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)

    def _stream_target(self, req: Request, attrs: rbac.Attributes, namespace: str, name: str) -> tuple[str, bool, bool]:
        """``pods/exec`` and ``pods/attach`` alike: the API server's checks (the options, the container, the
        node), the kubelet's (the container runs), the protocol's; the container, and whether stdin and a
        tty were asked. A WebSocket upgrade is authorised for ``create`` as well as ``get`` (Kubernetes
        1.35's AuthorizePodWebsocketUpgradeCreatePermission); an SPDY request, kubectl's fallback, gets the
        same errors and is otherwise refused."""
        q = req.args
        websocket = remotecommand.requested(req.headers)
        if websocket and req.method == "GET":
            create = rbac.Attributes(attrs.user, attrs.groups, "create", True, path=attrs.path, group=attrs.group,
                                     version=attrs.version, namespace=attrs.namespace, resource=attrs.resource,
                                     subresource=attrs.subresource, name=attrs.name)
            with self.lock:
                decision = self.authz.authorize(create)
            if not decision.allowed:
                raise rbac.forbidden(create, decision.reason)
        stdin, stdout, stderr, tty = (_truthy(q.get(k)) for k in ("stdin", "stdout", "stderr", "tty"))
        if attrs.subresource == "exec" and not q.getlist("command"):
            raise errors.bad_request("you must specify at least 1 command")
        if not (stdin or stdout or stderr):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        if tty and stderr:
            raise errors.bad_request("tty and stderr cannot both be true")
        with self.lock:
            pod = self.store.get_stored(self.store.registry.by_kind("Pod", "v1"), namespace, name)
            spec = pod.get("spec") or {}
            containers = [str(c.get("name")) for c in spec.get("containers") or []]
            container = q.get("container") or ""
            if not container:
                if len(containers) != 1:
                    raise errors.bad_request(f"a container name must be specified for pod {name}, "
                                             f"choose one of: [{' '.join(containers)}]")
                container = containers[0]
            names = {str(c.get("name")) for key in ("containers", "initContainers", "ephemeralContainers")
                     for c in spec.get(key) or []}
            if container not in names:
                raise errors.bad_request(f"container {container} is not valid for pod {name}")
            if not spec.get("nodeName"):
                raise errors.bad_request(f"pod {name} does not have a host assigned")
            running = self._running(pod, container)
        if not running:  # the kubelet finds only running containers; kubectl prints its words as they are
            raise errors.ApiError(500, "InternalError", f'container not found ("{container}")')
        if not websocket or req.method != "GET":
            raise errors.bad_request(f"the itbench_gym twin serves {attrs.subresource} over a WebSocket "
                                     f"({remotecommand.PROTOCOL}, kubectl 1.30 or later), not over SPDY")
        if not remotecommand.offers_protocol(req.headers):
            raise errors.bad_request(f"the WebSocket must offer subprotocol {remotecommand.PROTOCOL}")
        return container, stdin, tty

    @staticmethod
    def _running(pod: Obj, container: str) -> bool:
        status = pod.get("status") or {}
        return any(c.get("name") == container and "running" in (c.get("state") or {})
                   for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
                   for c in status.get(key) or [])

    def _exec(self, req: Request, attrs: rbac.Attributes, namespace: str, name: str, run: ExecSource) -> Response:
        """``pods/exec``: the checks (:meth:`_stream_target`), then the process, run to its end."""
        container, stdin, tty = self._stream_target(req, attrs, namespace, name)
        argv = req.args.getlist("command")

        def started(data: bytes) -> remotecommand.Outcome:
            try:
                return run(namespace, name, container, list(argv), data if stdin else b"", tty)
            except Exception as e:  # a bug must end the stream with a Status, not a dropped connection
                log.exception("exec in %s/%s (%s) failed", namespace, name, container)
                return remotecommand.Outcome(b"", b"", remotecommand.internal_error(f"{type(e).__name__}: {e}"))

        def session(reader: Any, writer: Any) -> None:
            remotecommand.Session(reader, writer).serve(started, stdin=stdin)

        req.environ[UPGRADE] = session
        return Response(status=101, headers=remotecommand.handshake_headers(req.headers))

    def _attach(self, req: Request, attrs: rbac.Attributes, namespace: str, name: str, logs: LogSource) -> Response:
        """``pods/attach``: what the container's process prints after now until it ends, as ``logs -f``
        would show it (at most ``MAX_LOG_FOLLOW`` simulated seconds; time passes while the client waits);
        what it printed before is the log's (``kubectl run -i`` reads it first). The process does not read
        the attached stdin: the twin's programs ran when the container started."""
        container, _, tty = self._stream_target(req, attrs, namespace, name)
        since = self.clock.now()

        def printed(gone: Callable[[], bool]) -> remotecommand.Outcome:
            out: list[str] = []
            last, stop_at = since, since + MAX_LOG_FOLLOW
            while not self._closed.is_set() and not gone():
                with self.lock:
                    now = self.clock.now()
                    out += [line for t, line in logs(namespace, name, container, last, now) if t > last]
                    last = now
                    try:
                        pod = self.store.get_stored(self.store.registry.by_kind("Pod", "v1"), namespace, name)
                    except errors.ApiError:
                        break  # deleted meanwhile: the kubelet closes the streams
                    if not self._running(pod, container) or now >= stop_at:
                        break
                if gone() or not self._pass_time(req, stop_at, WATCH_STEP):
                    break
            text = "".join(f"{line}\n" for line in out).encode("utf-8", "replace")
            return remotecommand.Outcome(text.replace(b"\n", b"\r\n") if tty else text, b"", remotecommand.success())

        def session(reader: Any, writer: Any) -> None:
            remotecommand.Session(reader, writer).follow(printed)

        req.environ[UPGRADE] = session
        return Response(status=101, headers=remotecommand.handshake_headers(req.headers))

    def _logs(self, req: Request, namespace: str, name: str) -> Response:
        q = req.args
        _validate_log_options(q, name)
        with self.lock:
            pod = self.store.get_stored(self.store.registry.by_kind("Pod", "v1"), namespace, name)
            containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
            init = [c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []]
            container = q.get("container")
            if not container:
                if len(containers) != 1:
                    raise errors.bad_request(
                        f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"
                        + (f" or one of the init containers: [{' '.join(init)}]" if init else ""))
                container = containers[0]
            if container not in containers and container not in init:
                raise errors.bad_request(f"container {container} is not valid for pod {name}")
            status = pod.get("status") or {}
            cstatus = next((c for c in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
                            if c.get("name") == container), None)
            now = self.clock.now()
            previous = _truthy(q.get("previous"))
            if previous:
                term = ((cstatus or {}).get("lastState") or {}).get("terminated")
                if not term or not term.get("startedAt"):
                    raise errors.bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
                start, end = parse_rfc3339(term["startedAt"]), parse_rfc3339(term.get("finishedAt") or term["startedAt"])
            else:
                state = (cstatus or {}).get("state") or {}
                if state.get("running"):
                    start, end = parse_rfc3339(state["running"].get("startedAt") or rfc3339(now)), now
                elif state.get("terminated") and state["terminated"].get("startedAt"):
                    t = state["terminated"]
                    start, end = parse_rfc3339(t["startedAt"]), parse_rfc3339(t.get("finishedAt") or t["startedAt"])
                elif ((cstatus or {}).get("lastState") or {}).get("terminated", {}).get("startedAt"):
                    # Waiting to restart (CrashLoopBackOff): the kubelet serves the exited instance's log.
                    t = (cstatus or {})["lastState"]["terminated"]
                    start, end = parse_rfc3339(t["startedAt"]), parse_rfc3339(t.get("finishedAt") or t["startedAt"])
                else:
                    reason = ((state.get("waiting") or {}).get("reason")) or "ContainerCreating"
                    raise errors.bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                             f"{_waiting_message(reason)}")
            follow = _truthy(q.get("follow")) and not previous and bool(((cstatus or {}).get("state") or {}).get("running"))
            lines = self._log_lines(namespace, name, container, start, end, q, now)
        if not follow:
            return Response(lines, mimetype="text/plain")

        def stream() -> Iterator[bytes]:
            yield lines
            last, stop_at = end, end + MAX_LOG_FOLLOW
            while not self._closed.is_set():
                if self.clock.now() >= stop_at or not self._pass_time(req, stop_at, WATCH_STEP * 5):
                    return
                with self.lock:
                    now = self.clock.now()
                    chunk = [f"{rfc3339(t, 9)} {line}\n" if _truthy(q.get("timestamps")) else f"{line}\n"
                             for t, line in (self.log_source(namespace, name, container, last, now)
                                             if self.log_source else [])
                             if t > last]
                    last = now
                if chunk:
                    yield "".join(chunk).encode()

        return Response(stream(), mimetype="text/plain", direct_passthrough=True)

    def _log_lines(self, namespace: str, name: str, container: str, start: float, end: float,
                   q: Mapping[str, str], now: float) -> bytes:
        if q.get("sinceSeconds"):
            start = max(start, now - _int_param(q, "sinceSeconds", 0))
        if q.get("sinceTime"):
            try:
                start = max(start, parse_rfc3339(q["sinceTime"]))
            except ValueError:
                raise errors.bad_request(f"sinceTime: invalid RFC 3339 time {q['sinceTime']!r}") from None
        entries = self.log_source(namespace, name, container, start, end) if self.log_source else []
        tail = _int_param(q, "tailLines", -1)
        if tail >= 0:
            entries = entries[-tail:] if tail else []
        ts = _truthy(q.get("timestamps"))
        text = "".join(f"{rfc3339(t, 9)} {line}\n" if ts else f"{line}\n" for t, line in entries).encode()
        limit = _int_param(q, "limitBytes", 0)
        return text[:limit] if limit > 0 else text

    # -- reviews and metrics -----------------------------------------------------------------

    def _review(self, req: Request, ident: Identity, rt: ResourceType, namespace: str | None) -> Response:
        body = _body(req)
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be an object")
        out = dict(body)
        out["apiVersion"], out["kind"] = rt.api_version, rt.kind
        out.setdefault("metadata", {})
        if rt.kind == "SelfSubjectReview":
            out["status"] = {"userInfo": {"username": ident.username, "groups": list(ident.groups)}}
        elif rt.kind == "TokenReview":
            out["status"] = self._token_review(body.get("spec"))
        elif rt.kind == "SelfSubjectAccessReview":
            out["status"] = self._access_review(ident.username, ident.groups, body.get("spec"), rt.kind)
        elif rt.kind in ("SubjectAccessReview", "LocalSubjectAccessReview"):
            subject = out["spec"] = _subject_review_spec(body.get("spec"), rt.kind, namespace)
            out["status"] = self._access_review(str(subject.get("user") or ""), tuple(subject.get("groups") or ()), subject, rt.kind)
        else:  # SelfSubjectRulesReview
            raw_spec = body.get("spec")
            spec: Obj = raw_spec if isinstance(raw_spec, dict) else {}
            namespace = spec.get("namespace") or ""
            if not isinstance(namespace, str):
                raise errors.bad_request("spec.namespace must be a string")
            with self.lock:
                rules, problems = self.authz.rules_for(ident.username, ident.groups, namespace)
            resource_rules, non_resource_rules = [], []
            for rule in rules:
                if rule.get("nonResourceURLs"):
                    non_resource_rules.append({"verbs": list(rule.get("verbs") or []),
                                               "nonResourceURLs": list(rule["nonResourceURLs"])})
                else:
                    entry = {"verbs": list(rule.get("verbs") or [])}
                    entry.update({k: list(rule[k]) for k in ("apiGroups", "resources", "resourceNames") if rule.get(k)})
                    resource_rules.append(entry)
            out["status"] = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                             "incomplete": bool(problems)}
            if problems:
                out["status"]["evaluationError"] = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        return _json(out, 201)

    def _token_review(self, spec: Any) -> Obj:
        """A TokenReview's status: whom the token authenticates as, as the request itself would be."""
        token = spec.get("token") if isinstance(spec, dict) else None
        if not isinstance(token, str) or not token:
            raise errors.invalid("authentication.k8s.io", "TokenReview", "", [
                ("FieldValueRequired", "spec.token", "Required value")])
        try:
            who = self.auth.authenticate(f"Bearer {token}", self.clock.now(), self._object_uid)
        except errors.ApiError:
            return {"user": {}, "error": "[invalid bearer token, token lookup failed]"}
        user: Obj = {"username": who.username, "groups": list(who.groups)}
        if who.uid:
            user["uid"] = who.uid
        return {"authenticated": True, "user": user, "audiences": [TOKEN_ISSUER]}

    def _access_review(self, username: str, groups: tuple[str, ...], spec: Any, kind: str) -> Obj:
        """An access review's status: the decision a request of ``username`` in ``groups`` with the
        spec's attributes would get."""
        spec = spec if isinstance(spec, dict) else {}
        res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if (res is None) == (non is None) or not isinstance(res or non, dict):
            raise errors.invalid("authorization.k8s.io", kind, "", [(
                "FieldValueInvalid", "spec.resourceAttributes",
                'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified')])
        fields = {k: v for k, v in (res or non).items() if k != "fieldSelector" and k != "labelSelector"}
        if not all(isinstance(v, str) for v in fields.values()):
            raise errors.bad_request("the access review's attributes must be strings")
        if res is not None:
            attrs = rbac.Attributes(username, groups, fields.get("verb", ""), True,
                                    group=fields.get("group", ""), version=fields.get("version", ""),
                                    namespace=fields.get("namespace", ""), resource=fields.get("resource", ""),
                                    subresource=fields.get("subresource", ""), name=fields.get("name", ""))
        else:
            attrs = rbac.Attributes(username, groups, fields.get("verb", ""), False, path=fields.get("path", ""))
        with self.lock:
            decision = self.authz.authorize(attrs)
        status: Obj = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        return status

    def _metrics(self, req: Request, ident: Identity, rt: ResourceType, r: Route) -> Response:
        if self.metrics is None:
            raise errors.ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request "
                                  "(metrics are not available in this twin)")
        with self.lock:
            usage = self.metrics()
            now = self.clock.now()
            ts, window = rfc3339(now), f"{int(usage.window)}s"
            items: list[Obj] = []
            if rt.kind == "NodeMetrics":
                pod_rt = self.store.registry.by_kind("Pod", "v1")
                per_node: dict[str, list[float]] = {}
                for o in self.store.list_stored(pod_rt):
                    node = (o.get("spec") or {}).get("nodeName")
                    cont = usage.pods.get((o["metadata"].get("namespace", ""), o["metadata"]["name"]))
                    if node and cont:
                        acc = per_node.setdefault(node, [0.0, 0.0])
                        for cpu, mem in cont.values():
                            acc[0] += cpu
                            acc[1] += mem
                node_rt = self.store.registry.by_kind("Node", "v1")
                for n in self.store.list_stored(node_rt, None, req.args.get("labelSelector"), None):
                    nm = n["metadata"]["name"]
                    if r.name and nm != r.name:
                        continue
                    cpu, mem = usage.nodes.get(nm) or tuple(per_node.get(nm, [0.0, 0.0]))
                    items.append({"metadata": {"name": nm, "creationTimestamp": ts, "labels": n["metadata"].get("labels", {})},
                                  "timestamp": ts, "window": window, "usage": _usage(cpu, mem)})
                if r.name and not items:
                    raise errors.not_found("metrics.k8s.io", "nodes", r.name)
            else:
                pod_rt = self.store.registry.by_kind("Pod", "v1")
                for o in self.store.list_stored(pod_rt, r.namespace, req.args.get("labelSelector"),
                                                req.args.get("fieldSelector")):
                    meta = o["metadata"]
                    if (r.name and meta["name"] != r.name) or not self._visible(ident, pod_rt, o):
                        continue
                    cont = usage.pods.get((meta.get("namespace", ""), meta["name"]))
                    if cont is None:
                        continue
                    items.append({"metadata": {"name": meta["name"], "namespace": meta.get("namespace"),
                                               "creationTimestamp": ts, "labels": meta.get("labels", {})},
                                  "timestamp": ts, "window": window,
                                  "containers": [{"name": c, "usage": _usage(cpu, mem)}
                                                 for c, (cpu, mem) in sorted(cont.items())]})
                if r.name and not items:
                    raise errors.not_found("metrics.k8s.io", "pods", r.name)
        if r.name:
            return _json({"kind": rt.kind, "apiVersion": rt.api_version, **items[0]})
        return _json({"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": {}, "items": items})


#: Pod subresources a cluster serves (so kubectl and access reviews know them) whose changes the twin's
#: kubelet does not carry out: a write is refused saying so (RBAC, checked first, refuses the agent's).
_UNRUN_POD_CHANGES = {"ephemeralcontainers": "runs no ephemeral containers (kubectl debug); `kubectl run` a probe pod instead",
                      "resize": "resizes no pod in place; change the workload's resources instead"}
_SUBRESOURCES: dict[str, tuple[str, list[str], Obj]] = {
    "status": ("", ["get", "patch", "update"], {}),
    "scale": ("Scale", ["get", "patch", "update"], {"group": "autoscaling", "version": "v1"}),
    "log": ("Pod", ["get"], {}),
    "exec": ("PodExecOptions", ["create", "get"], {}),
    "attach": ("PodAttachOptions", ["create", "get"], {}),
    "portforward": ("PodPortForwardOptions", ["create", "get"], {}),
    "proxy": ("PodProxyOptions", ["create", "delete", "get", "patch", "update"], {}),
    "eviction": ("Eviction", ["create"], {"group": "policy", "version": "v1"}),
    "binding": ("Binding", ["create"], {}),
    "token": ("TokenRequest", ["create"], {"group": "authentication.k8s.io", "version": "v1"}),
    "finalize": ("Namespace", ["update"], {}),
}
def _subject_review_spec(spec: Any, kind: str, namespace: str | None) -> Obj:
    """A (Local)SubjectAccessReview's spec, checked as upstream checks it: a user or a group, and for a
    local review the request's namespace (filled in when the attributes name none)."""
    if not isinstance(spec, dict):
        raise errors.bad_request(f"{kind} in version \"v1\" cannot be handled as a {kind}: spec must be an object")
    groups = spec.get("groups") or []
    if not isinstance(spec.get("user") or "", str) or not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise errors.bad_request(f"{kind} in version \"v1\" cannot be handled as a {kind}: spec.user must be a string and spec.groups strings")
    if not spec.get("user") and not groups:
        raise errors.invalid("authorization.k8s.io", kind, "", [
            ("FieldValueInvalid", "spec.user", 'Invalid value: "": at least one of user or group must be specified')])
    out = dict(spec)
    if kind == "LocalSubjectAccessReview":
        res = spec.get("resourceAttributes")
        if isinstance(res, dict):
            if res.get("namespace") and res["namespace"] != namespace:
                raise errors.bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
            out["resourceAttributes"] = {**res, "namespace": namespace}
        elif spec.get("nonResourceAttributes") is not None:
            raise errors.invalid("authorization.k8s.io", kind, "", [
                ("FieldValueInvalid", "spec.nonResourceAttributes", "disallowed on this kind of request")])
    return out


def make_kube_app(store: ObjectStore, *, clock: Any, auth: Auth, lock: threading.RLock,
                  advance: Callable[[float], bool], log_source: LogSource | None = None,
                  metrics: MetricsSource | None = None, load: ApiLoad | None = None,
                  exec_source: ExecSource | None = None, programs: RunningPrograms | None = None) -> KubeApp:
    """The Kubernetes API as a WSGI app over ``store`` (see module docstring for ``advance`` and ``programs``)."""
    return KubeApp(store, clock=clock, auth=auth, lock=lock, advance=advance, log_source=log_source, metrics=metrics,
                   load=load, exec_source=exec_source, programs=programs)


# -- helpers -------------------------------------------------------------------------------------


def _json(obj: Any, status: int = 200) -> Response:
    return Response(json.dumps(obj, separators=(",", ":")), status=status, mimetype="application/json")


def _warn(resp: Response, warnings: list[str]) -> Response:
    """Each warning as a ``Warning: 299 - "text"`` header, the text quoted as Go's ``strconv.Quote``
    quotes it (``\\"`` inside), which clients unquote: kubectl prints ``Warning: unknown field "x"``."""
    for w in warnings:
        resp.headers.add("Warning", f"299 - {json.dumps(w)}")
    return resp


def _status_response(e: errors.ApiError) -> Response:
    resp = _json(e.status(), e.code)
    if e.code == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="itbench-gym"'
    if e.code == 429 and e.details:
        resp.headers["Retry-After"] = str(e.details.get("retryAfterSeconds", 1))
    return resp


def _truthy(v: str | None) -> bool:
    """A boolean query parameter, read as kube-apiserver reads one (anything but ``0``/``false`` is true)."""
    return rbac.query_bool(v)


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _int_param(q: Mapping[str, str], name: str, default: int) -> int:
    """An int64 query parameter; Go's ``strconv.ParseInt`` errors for anything else."""
    v = q.get(name)
    if v is None or v == "":
        return default
    if not _GO_INT.fullmatch(v) or len(v) > 40:
        raise errors.bad_request(f'strconv.ParseInt: parsing {json.dumps(v)}: invalid syntax')
    n = int(v)
    if not _INT64[0] <= n <= _INT64[1]:
        raise errors.bad_request(f'strconv.ParseInt: parsing {json.dumps(v)}: value out of range')
    return n


def _watch_timeout(q: Mapping[str, str]) -> float:
    if q.get("timeoutSeconds"):
        return float(_int_param(q, "timeoutSeconds", 0))
    t = q.get("timeout")
    if t:
        try:
            return parse_go_duration(t)
        except DurationError as exc:
            raise errors.bad_request(str(exc)) from None
    return DEFAULT_WATCH_TIMEOUT


def _wants_table(req: Request) -> bool:
    accept = req.headers.get("Accept", "")
    for part in accept.split(","):
        params = {k.strip(): v.strip() for k, _, v in (p.partition("=") for p in part.split(";")[1:])}
        if params.get("as") == "Table":
            return True
        if part.strip().startswith("application/json") and not params:
            return False
    return False


def _decode(raw: bytes, content_type: str | None) -> Any:
    """A request body in one of ``BODY_MEDIA_TYPES`` (no Content-Type: JSON) as JSON values, safely."""
    ct = (content_type or "application/json").split(";")[0].strip().lower()
    if ct not in BODY_MEDIA_TYPES:
        raise errors.unsupported_media_type("the body of the request was in an unknown format - accepted media types "
                                            "include: " + ", ".join(BODY_MEDIA_TYPES))
    if ct == protobuf.MEDIA_TYPE:
        try:
            doc = protobuf.decode(raw)
        except protobuf.ProtobufError as e:
            raise errors.bad_request(f"couldn't decode the protobuf request body: {e}") from None
        except RecursionError:
            raise errors.bad_request("couldn't decode the protobuf request body: exceeded max depth") from None
        bodies.check_document(doc)
        return doc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise errors.bad_request("the request body is not valid UTF-8") from None
    what = "YAML" if ct == "application/yaml" else "JSON"
    try:
        return bodies.load_yaml(text) if what == "YAML" else bodies.load_json(text)
    except errors.ApiError as e:
        raise errors.bad_request(f"couldn't decode the request body as {what}: {e.message}") from None


_DELETE_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "gracePeriodSeconds": (int,), "propagationPolicy": (str,), "orphanDependents": (bool,), "preconditions": (dict,),
    "dryRun": (list,), "kind": (str,), "apiVersion": (str,), "ignoreStoreReadErrorWithClusterBreakingPotential": (bool,),
}


def _delete_options_body(body: Any) -> Obj:
    """A DeleteOptions body, type-checked like its Go struct (400 otherwise)."""
    if not isinstance(body, dict):
        raise errors.bad_request("json: cannot unmarshal into Go value of type v1.DeleteOptions: must be an object")
    for k, v in body.items():
        types = _DELETE_OPTION_TYPES.get(k)
        if v is not None and types is not None and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
            raise errors.bad_request(f"json: cannot unmarshal {type(v).__name__} into Go struct field DeleteOptions.{k}")
    pre = body.get("preconditions") or {}
    if not all(isinstance(v, str) or v is None for v in pre.values()):
        raise errors.bad_request("json: cannot unmarshal into Go struct field DeleteOptions.preconditions: must be strings")
    return body


def _validate_log_options(q: Mapping[str, str], name: str) -> None:
    """``PodLogOptions`` validation: positive windows and limits, one of sinceSeconds/sinceTime."""
    causes: list[tuple[str, str, str]] = []
    for key, minimum, words in (("sinceSeconds", 1, "must be greater than 0"), ("limitBytes", 1, "must be greater than 0"),
                                ("tailLines", 0, "must be greater than or equal to 0")):
        if q.get(key):
            value = _int_param(q, key, minimum)
            if value < minimum:
                causes.append(("FieldValueInvalid", key, f"Invalid value: {value}: {words}"))
    if q.get("sinceSeconds") and q.get("sinceTime"):
        causes.append(("FieldValueForbidden", "", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    if causes:
        raise errors.invalid("", "PodLogOptions", name, causes)


def _too_large() -> errors.ApiError:
    return errors.ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}")


def _body(req: Request) -> Any:
    raw = req.get_data(cache=True)
    if len(raw) > MAX_BODY:
        raise _too_large()
    if not raw.strip():
        raise errors.bad_request("the request body is empty")
    return _decode(raw, req.content_type)


def _dry_run(req: Request) -> bool:
    values = req.args.getlist("dryRun")
    for v in values:
        if v != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{v}": supported values: "All"')
    return bool(values)


def _encode_continue(rv: str, last: tuple[str, str]) -> str:
    """The continue token: the list's resourceVersion and the (namespace, name) served last."""
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": list(last)}).encode()).decode()


def _decode_continue(token: str) -> tuple[str, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        ns, name = data["start"]
        if not isinstance(ns, str) or not isinstance(name, str):
            raise TypeError("start must name an object")
        return str(data["rv"]), (ns, name)
    except (ValueError, KeyError, TypeError):
        raise errors.bad_request("continue key is not valid: the token is malformed") from None


def _replicas_path(rt: ResourceType, key: str, default: str) -> str:
    return dict(rt.scale_paths).get(key, default)


def _get_path(obj: Obj, path: str) -> Any:
    cur: Any = obj
    for p in path.strip(".").split("."):
        cur = cur.get(p) if isinstance(cur, dict) else None
    return cur


def _set_path(obj: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    cur = obj
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value


def _to_scale(obj: Obj, rt: ResourceType) -> Obj:
    meta = obj["metadata"]
    spec_replicas = _get_path(obj, _replicas_path(rt, "specReplicasPath", ".spec.replicas")) or 0
    status_replicas = _get_path(obj, _replicas_path(rt, "statusReplicasPath", ".status.replicas")) or 0
    if rt.custom:
        selector = _get_path(obj, _replicas_path(rt, "labelSelectorPath", ".status.selector")) or ""
    else:
        selector = tables._selector_string((obj.get("spec") or {}).get("selector"))
        selector = "" if selector == "<none>" else selector
    out_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in meta}
    return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": out_meta,
            "spec": {"replicas": spec_replicas}, "status": {"replicas": status_replicas, "selector": selector}}


def _usage(cpu_cores: float, memory_bytes: float) -> Obj:
    return {"cpu": f"{max(0, int(round(cpu_cores * 1e9)))}n", "memory": f"{max(0, int(round(memory_bytes / 1024)))}Ki"}


def _waiting_message(reason: str) -> str:
    return {
        "ContainerCreating": "ContainerCreating",
        "PodInitializing": "PodInitializing",
        "ImagePullBackOff": "trying and failing to pull image",
        "ErrImagePull": "trying and failing to pull image",
        "CrashLoopBackOff": "CrashLoopBackOff",
    }.get(reason, reason)
