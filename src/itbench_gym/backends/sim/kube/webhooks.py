"""Dynamic admission: the API server calls the validating webhooks its configurations name.

A real kube-apiserver, after defaulting and schema validation and before storing a write, reads every
``ValidatingWebhookConfiguration``, picks the webhooks whose ``rules`` (operations, API groups,
versions, resources with ``/subresource``, scope), ``namespaceSelector`` and ``objectSelector`` match
the request, and POSTs an AdmissionReview to the Service each names. The twin does the same, except
that the "POST" is an in-process call to the handler a component registered for its
(namespace, Service, path): the component is only reachable while its Service has ready endpoints,
and a webhook that cannot be reached follows its ``failurePolicy`` (``Fail``, the default, refuses the
request with the API server's own error). Webhooks of components the twin does not model (no handler registered for
their Service) are not called: their servers are taken to admit everything. A denial becomes the Status the API server builds from the
webhook's answer (``admission webhook "<name>" denied the request: <message>``, code 400 unless the
webhook set one), and the webhook's warnings travel back in ``Warning`` headers
(k8s.io/apiserver pkg/admission/plugin/webhook/{validating/dispatcher.go,errors/statuserror.go}).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import errors
from .resources import ResourceType
from .selectors import selector_from_dict

if TYPE_CHECKING:
    from .store import ObjectStore

Obj = dict[str, Any]

#: Who writes when no client request is being served (the controllers, the kubelet, installs).
INTERNAL_USER = ("system:kube-controller-manager", ("system:authenticated",))
#: admissionregistration.k8s.io/v1 defaults (``timeoutSeconds``, ``failurePolicy``).
DEFAULT_TIMEOUT_SECONDS = 10
DEFAULT_FAILURE_POLICY = "Fail"


@dataclass(frozen=True)
class AdmissionRequest:
    """What an AdmissionReview's ``request`` carries, for a webhook handler to judge."""

    uid: str
    operation: str
    group: str
    version: str
    kind: str
    resource: str
    sub: str
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    username: str
    groups: tuple[str, ...]
    dry_run: bool

    def review(self) -> Obj:
        """The ``request`` of an admission.k8s.io/v1 AdmissionReview."""
        out: Obj = {
            "uid": self.uid,
            "kind": {"group": self.group, "version": self.version, "kind": self.kind},
            "resource": {"group": self.group, "version": self.version, "resource": self.resource},
            "name": self.name,
            "operation": self.operation,
            "userInfo": {"username": self.username, "groups": list(self.groups)},
            "object": self.obj,
            "oldObject": self.old,
            "dryRun": self.dry_run,
        }
        if self.sub:
            out["subResource"] = self.sub
        if self.namespace:
            out["namespace"] = self.namespace
        return out

    @property
    def subject(self) -> Obj:
        """The object under review: the new one, or the old one of a DELETE."""
        return self.obj if self.obj is not None else (self.old or {})


@dataclass(frozen=True)
class AdmissionResponse:
    """A webhook's answer; ``status`` is the ``metav1.Status`` of a denial (code, reason, message)."""

    allowed: bool
    status: Obj = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


Handler = Callable[[AdmissionRequest], AdmissionResponse]


def _rule_matches(rule: Obj, req: AdmissionRequest, namespaced: bool) -> bool:
    ops = rule.get("operations") or []
    if "*" not in ops and req.operation not in ops:
        return False
    if not _listed(rule.get("apiGroups"), req.group) or not _listed(rule.get("apiVersions"), req.version):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and not namespaced or scope == "Cluster" and namespaced:
        return False
    wanted = f"{req.resource}/{req.sub}" if req.sub else req.resource
    for res in rule.get("resources") or []:
        if res == "*/*" or res == wanted:
            return True
        head, _, tail = str(res).partition("/")
        if res == "*" and not req.sub:
            return True
        if tail and (head in ("*", req.resource)) and (tail in ("*", req.sub)) and req.sub:
            return True
    return False


def _listed(values: Any, value: str) -> bool:
    return bool(values) and ("*" in values or value in values)


class WebhookDispatcher:
    """The API server's validating-webhook admission plugin over the twin's store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._handlers: dict[tuple[str, str, str], Handler] = {}
        self._services: set[tuple[str, str]] = set()
        #: the identity of the request being served (``requested_by``), else the control plane's
        self.requester: tuple[str, tuple[str, ...]] = INTERNAL_USER
        #: warnings the webhooks returned for the request being served
        self.warnings: list[str] = []
        self._serial = 0

    def register(self, namespace: str, service: str, path: str, handler: Handler) -> None:
        """What a component's server answers at ``https://<service>.<namespace>.svc<path>``."""
        self._handlers[(namespace, service, path)] = handler
        self._services.add((namespace, service))

    def admit(self, operation: str, rt: ResourceType, obj: Obj | None, old: Obj | None, sub: str | None,
              dry_run: bool) -> None:
        """Call every matching webhook; raise the API server's error for a denial or an unreachable one."""
        configs = self.store.list_stored(self.store.registry.by_kind("ValidatingWebhookConfiguration"))
        hooks = [h for c in configs for h in c.get("webhooks") or [] if self._served(h)]
        if not hooks:
            return
        subject = obj if obj is not None else old or {}
        meta = subject.get("metadata") or {}
        self._serial += 1
        req = AdmissionRequest(
            uid=f"{meta.get('uid', '')}-{self._serial}", operation=operation, group=rt.group, version=rt.version,
            kind=rt.kind, resource=rt.plural, sub=sub or "", namespace=str(meta.get("namespace") or "") if rt.namespaced else "",
            name=str(meta.get("name") or ""), obj=obj, old=old, username=self.requester[0],
            groups=self.requester[1], dry_run=dry_run)
        for hook in hooks:
            if self._applies(hook, req, rt):
                self._call(hook, req)

    def _served(self, hook: Obj) -> bool:
        """Whether the twin models the component behind the webhook's Service."""
        svc = (hook.get("clientConfig") or {}).get("service") or {}
        return (str(svc.get("namespace", "")), str(svc.get("name", ""))) in self._services

    def _applies(self, hook: Obj, req: AdmissionRequest, rt: ResourceType) -> bool:
        if not any(_rule_matches(r, req, rt.namespaced) for r in hook.get("rules") or []):
            return False
        if not self._namespace_selected(hook.get("namespaceSelector"), req, rt):
            return False
        selector = hook.get("objectSelector")
        if selector:
            sel = selector_from_dict(selector)
            labels = [(o.get("metadata") or {}).get("labels") or {} for o in (req.obj, req.old) if o is not None]
            if not any(sel.matches(lbl) for lbl in labels):
                return False
        return True

    def _namespace_selected(self, selector: Obj | None, req: AdmissionRequest, rt: ResourceType) -> bool:
        """A namespaceSelector judges the request's namespace, or a Namespace object itself; other
        cluster-scoped objects always match it."""
        if not selector:
            return True
        if rt.group == "" and rt.kind == "Namespace":
            labels = (req.subject.get("metadata") or {}).get("labels") or {}
        elif not rt.namespaced:
            return True
        else:
            try:
                ns = self.store.get_stored(self.store.registry.by_kind("Namespace"), None, req.namespace)
            except errors.ApiError:
                return True
            labels = ns["metadata"].get("labels") or {}
        return selector_from_dict(selector).matches(labels)

    def _call(self, hook: Obj, req: AdmissionRequest) -> None:
        name = str(hook.get("name", ""))
        failure = hook.get("failurePolicy") or DEFAULT_FAILURE_POLICY
        client = hook.get("clientConfig") or {}
        svc = client.get("service") or {}
        path = str(svc.get("path") or "")
        ns, svc_name = str(svc.get("namespace", "")), str(svc.get("name", ""))
        timeout = int(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        url = f"https://{svc_name}.{ns}.svc:{int(svc.get('port') or 443)}{path}"
        handler = self._handlers.get((ns, svc_name, path))
        problem = ""
        if not self._service_ready(ns, svc_name):
            problem = f'Post "{url}?timeout={timeout}s": no endpoints available for service "{svc_name}"'
        elif handler is None:
            problem = f'Post "{url}?timeout={timeout}s": dial tcp: connect: connection refused'
        if problem:
            if failure == "Ignore":
                return
            raise errors.internal(f'failed calling webhook "{name}": failed to call webhook: {problem}')
        assert handler is not None
        response = handler(req)
        self.warnings.extend(response.warnings)
        if response.allowed:
            return
        status = dict(response.status)
        code = int(status.get("code") or 0)
        message = str(status.get("message") or "")
        reason = str(status.get("reason") or "")
        denied = f'admission webhook "{name}" denied the request'
        text = f"{denied}: {message}" if message else f"{denied}: {reason}" if reason else f"{denied} without explanation"
        raise errors.ApiError(max(code, 400), reason, text)

    def _service_ready(self, namespace: str, name: str) -> bool:
        try:
            eps = self.store.get_stored(self.store.registry.by_kind("Endpoints"), namespace, name)
        except errors.ApiError:
            return False
        return any(s.get("addresses") for s in eps.get("subsets") or [])


@contextlib.contextmanager
def requested_by(store: ObjectStore, username: str, groups: tuple[str, ...] | list[str]) -> Iterator[list[str]]:
    """Serve one client write as ``username``: webhooks see that user, and their warnings are collected."""
    dispatcher = store.webhooks
    if dispatcher is None:
        yield []
        return
    before, dispatcher.requester = dispatcher.requester, (username, tuple(groups))
    dispatcher.warnings = []
    collected = dispatcher.warnings
    try:
        yield collected
    finally:
        dispatcher.requester = before
        dispatcher.warnings = []
