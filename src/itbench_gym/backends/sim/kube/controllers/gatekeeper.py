"""OPA Gatekeeper in the twin: the ConstraintTemplate controller and the validating webhook.

As upstream's ``deploy/gatekeeper.yaml`` installs it (``envs/ciso-kind/cluster/gatekeeper.yaml``),
facts from open-policy-agent/gatekeeper v3.17.2. While ``gatekeeper-controller-manager`` is available
each ConstraintTemplate is compiled and turned into the constraint CRD
``<kind lower case>.constraints.gatekeeper.sh`` (frameworks ``crds.CreateCRD``: cluster-scoped,
versions v1beta1 (storage) and v1alpha1, categories constraint/constraints, label
``gatekeeper.sh/constraint: "yes"``, printer columns enforcement-action and total-violations; the spec
schema of ``crds.CreateSchema``: ``match`` (``gatekeeper_match.yaml``), ``enforcementAction`` (default
``deny``), ``scopedEnforcementActions``, and the template's parameter schema under ``spec.parameters``,
made to preserve unknown fields when the template says ``legacySchema: true``); its status gets
``created`` and one ``byPod`` entry per running Gatekeeper pod (id, observedGeneration, operations from
the pod's ``--operation`` flags, templateUID, and ``ingest_error`` errors for a template that does not
compile). Deleting a template deletes its CRD and so its constraints.

The webhook ``validation.gatekeeper.sh`` (``gatekeeper-webhook-service``, path ``/v1/admit``) reviews
CREATE and UPDATE requests against every constraint (pkg/webhook/policy.go): violations of
``deny`` constraints (the default) refuse the request with 403 Forbidden and one ``[name] message``
line each, ``warn`` ones come back as warnings, ``dryrun`` ones only show in audit. Gatekeeper's own
templates and constraints are checked too (a template that does not compile, parameters that do not
fit the schema). Namespaces exempt by ``--exempt-namespace=gatekeeper-system`` or by the ``config``
Config's ``match`` (processes ``webhook``/``*``) are not reviewed. Rego and match evaluation are
``itbench_gym.policy.gatekeeper``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from itbench_gym.lang import yamltext
from itbench_gym.policy.gatekeeper import (
    Constraint,
    ConstraintEvaluator,
    ConstraintTemplate,
    GatekeeperError,
    Violation,
    review_of,
)
from itbench_gym.policy.rego import RegoError

from ..errors import ApiError
from ..store import ObjectStore, clone
from ..webhooks import AdmissionRequest, AdmissionResponse, WebhookDispatcher
from .base import Context, Controller, Key
from .kyverno import deployment_available

Obj = dict[str, Any]
_T = TypeVar("_T")

NAMESPACE = "gatekeeper-system"
CONTROLLER_MANAGER = "gatekeeper-controller-manager"
AUDIT = "gatekeeper-audit"
SERVICE = "gatekeeper-webhook-service"
ADMIT_PATH = "/v1/admit"
ADMIT_LABEL_PATH = "/v1/admitlabel"
TEMPLATE_GROUP = "templates.gatekeeper.sh"
CONSTRAINT_GROUP = "constraints.gatekeeper.sh"
CONSTRAINT_VERSION = "v1beta1"
CONFIG_GROUP = "config.gatekeeper.sh"
CONFIG_NAME = "config"
IGNORE_LABEL = "admission.gatekeeper.sh/ignore"
#: pkg/util/enforcement_action.go's supported list (``scoped`` is accepted but its per-point actions are not modelled)
ACTIONS = ("deny", "dryrun", "warn", "scoped")


def is_template(obj: Obj) -> bool:
    return obj.get("kind") == "ConstraintTemplate" and str(obj.get("apiVersion", "")).startswith(TEMPLATE_GROUP + "/")


def is_constraint(obj: Obj) -> bool:
    return str(obj.get("apiVersion", "")).startswith(CONSTRAINT_GROUP + "/")


def crd_name(kind: str) -> str:
    return f"{kind.lower()}.{CONSTRAINT_GROUP}"


def enforcement_action(constraint: Obj) -> str:
    return str((constraint.get("spec") or {}).get("enforcementAction") or "deny")


@dataclass(frozen=True)
class Compiled:
    """A template Gatekeeper accepted, or why it did not."""

    template: ConstraintTemplate | None
    error: str = ""


class GatekeeperEngine:
    """The OPA client Gatekeeper's pods share: compiled templates and per-constraint evaluators.

    The API server serves each request on a thread of its own: the caches are read and filled under
    one lock (callers name a constraint by its object).
    """

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        #: caches by name, valid while the stored object is the same one (stored objects are replaced,
        #: never changed; a restored store may reuse a resourceVersion for other content)
        self._templates: dict[str, tuple[Obj, Compiled]] = {}
        self._evaluators: dict[str, tuple[Obj, str, ConstraintEvaluator | None]] = {}
        self._lock = threading.RLock()

    def _locked(self, fn: Callable[..., _T], *args: Any) -> _T:
        with self._lock:
            return fn(*args)

    def compile(self, obj: Obj) -> Compiled:
        """The template as Gatekeeper ingests it (cached by resourceVersion)."""
        return self._locked(self._compile, obj)

    def _compile(self, obj: Obj) -> Compiled:
        key = str(obj["metadata"]["name"])
        cached = self._templates.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        try:
            template = ConstraintTemplate.from_object(obj)
            ConstraintEvaluator(template, Constraint(template.kind, "compile-check"))
            compiled = Compiled(template)
        except (GatekeeperError, RegoError) as exc:
            compiled = Compiled(None, str(exc))
        self._templates[key] = (obj, compiled)
        return compiled

    def templates(self) -> dict[str, ConstraintTemplate]:
        """Compiled templates by constraint kind."""
        out: dict[str, ConstraintTemplate] = {}
        for obj in _list(self.store, "ConstraintTemplate", f"{TEMPLATE_GROUP}/v1"):
            compiled = self.compile(obj)
            if compiled.template is not None:
                out[compiled.template.kind] = compiled.template
        return out

    def constraints(self) -> list[tuple[Obj, ConstraintTemplate]]:
        """Every constraint whose template compiles and which fits it, with that template."""
        out = []
        templates = self.templates()
        for rt in self.store.registry.all():
            if rt.group != CONSTRAINT_GROUP or rt.version != CONSTRAINT_VERSION or rt.kind not in templates:
                continue
            for obj in self.store.list_stored(rt):
                if self._locked(self._evaluator, obj, templates[rt.kind]) is not None:
                    out.append((obj, templates[rt.kind]))
        return out

    def violations(self, constraint: Obj, template: ConstraintTemplate, review_doc: Obj, inventory: list[Obj]) -> list[Violation]:
        """The constraint's violations for one review; a malformed result fails closed, as upstream."""
        return self._locked(self._violations, constraint, template, review_doc, inventory)

    def _violations(self, constraint: Obj, template: ConstraintTemplate, review_doc: Obj, inventory: list[Obj]) -> list[Violation]:
        evaluator = self._evaluator(constraint, template)
        if evaluator is None:
            return []
        try:
            return evaluator.review(review_doc, inventory)
        except GatekeeperError as exc:
            return [Violation(str(exc))]

    def _evaluator(self, obj: Obj, template: ConstraintTemplate) -> ConstraintEvaluator | None:
        key = f"{obj.get('kind')}/{obj['metadata']['name']}"
        cached = self._evaluators.get(key)
        if cached is not None and cached[0] is obj and cached[1] == template.rego:
            return cached[2]
        try:
            evaluator: ConstraintEvaluator | None = ConstraintEvaluator(template, Constraint.from_object(obj, template))
        except (GatekeeperError, RegoError):
            evaluator = None
        self._evaluators[key] = (obj, template.rego, evaluator)
        return evaluator

    def inventory(self) -> list[Obj]:
        """``data.inventory``: what the Config syncs, plus the Namespaces matching reads."""
        wanted = {("", "v1", "Namespace")}
        config = self.config()
        for entry in ((config.get("spec") or {}).get("sync") or {}).get("syncOnly") or []:
            wanted.add((str(entry.get("group", "")), str(entry.get("version", "")), str(entry.get("kind", ""))))
        out: list[Obj] = []
        for group, version, kind in sorted(wanted):
            out += _list(self.store, kind, f"{group}/{version}" if group else version)
        return out

    def config(self) -> Obj:
        try:
            return self.store.get_stored(self.store.registry.by_kind("Config", f"{CONFIG_GROUP}/v1alpha1"), NAMESPACE,
                                         CONFIG_NAME)
        except ApiError:
            return {}

    def exempt(self, namespace: str, process: str) -> bool:
        """Namespaces a process leaves out: the exempt namespace, and the Config's ``match`` entries."""
        if not namespace:
            return False
        if namespace == NAMESPACE:
            return True
        for entry in (self.config().get("spec") or {}).get("match") or []:
            processes = entry.get("processes") or []
            if "*" not in processes and process not in processes:
                continue
            for pattern in entry.get("excludedNamespaces") or []:
                pattern = str(pattern)
                if pattern == namespace or pattern.endswith("*") and namespace.startswith(pattern[:-1]):
                    return True
        return False


def _list(store: ObjectStore, kind: str, api_version: str) -> list[Obj]:
    try:
        return store.list_stored(store.registry.by_kind(kind, api_version))
    except ApiError:
        return []


class GatekeeperWebhook:
    """The controller manager's admission handler."""

    def __init__(self, engine: GatekeeperEngine) -> None:
        self.engine = engine

    def register(self, dispatcher: WebhookDispatcher) -> None:
        dispatcher.register(NAMESPACE, SERVICE, ADMIT_PATH, self.admit)
        dispatcher.register(NAMESPACE, SERVICE, ADMIT_LABEL_PATH, self.admit_label)

    def admit_label(self, req: AdmissionRequest) -> AdmissionResponse:
        """Only the exempt namespace may carry the ignore label."""
        labels = (req.subject.get("metadata") or {}).get("labels") or {}
        if IGNORE_LABEL in labels and req.name != NAMESPACE:
            return _denied(f"Only exempt namespace can have the {IGNORE_LABEL} label")
        return AdmissionResponse(True)

    def admit(self, req: AdmissionRequest) -> AdmissionResponse:
        if is_template(req.subject):
            compiled = self.engine.compile(req.subject) if req.obj is not None else Compiled(None)
            return _denied(compiled.error) if compiled.error else AdmissionResponse(True)
        if is_constraint(req.subject):
            return self._check_constraint(req)
        if self.engine.exempt(req.namespace, "webhook"):
            return AdmissionResponse(True)
        doc = review_of({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req.review()})
        inventory = self.engine.inventory()
        denials, warnings = [], []
        for constraint, template in self.engine.constraints():
            action = enforcement_action(constraint)
            for violation in self.engine.violations(constraint, template, doc, inventory):
                line = f"[{constraint['metadata']['name']}] {violation.msg}"
                if action == "deny":
                    denials.append(line)
                elif action == "warn":
                    warnings.append(line)
        if denials:
            return AdmissionResponse(False, {"code": 403, "reason": "Forbidden", "message": "\n".join(denials)},
                                     tuple(warnings))
        return AdmissionResponse(True, {}, tuple(warnings))

    def _check_constraint(self, req: AdmissionRequest) -> AdmissionResponse:
        if req.obj is None:
            return AdmissionResponse(True)
        template = self.engine.templates().get(req.kind)
        if template is None:
            return AdmissionResponse(True)
        try:
            Constraint.from_object(req.obj, template)
        except GatekeeperError as exc:
            return _denied(str(exc))
        action = enforcement_action(req.obj)
        if action not in ACTIONS:
            return _denied(f'unrecognized enforcementAction: "{action}" is not within the supported list [{" ".join(ACTIONS)}]')
        return AdmissionResponse(True)


#: ``spec.scopedEnforcementActions`` of a constraint (frameworks ``crds.CreateSchema``)
_SCOPED_ACTIONS: Obj = {"type": "array", "items": {"type": "object", "properties": {
    "action": {"type": "string"},
    "enforcementPoints": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}}


@lru_cache(maxsize=1)
def _match_data() -> Obj:
    data: Obj = yamltext.load(Path(__file__).with_name("gatekeeper_match.yaml").read_text(encoding="utf-8"))
    return data


def _match_schema() -> Obj:
    """A constraint's ``spec.match`` schema (a copy: the file's anchors share their nodes)."""
    return clone(_match_data())


def _preserving(schema: Mapping[str, Any]) -> Obj:
    """frameworks ``schema.AddPreserveUnknownFields``: every object (or untyped) node preserves unknown
    fields, an array without items gets preserving ones."""
    out: Obj = dict(schema)
    kind = out.get("type") or ""
    if kind in ("", "object"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "array" and not isinstance(out.get("items"), Mapping):
        out["items"] = {"x-kubernetes-preserve-unknown-fields": True}
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: _preserving(v) if isinstance(v, Mapping) else v for k, v in out["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), Mapping):
            out[key] = _preserving(out[key])
    return out


def _denied(message: str) -> AdmissionResponse:
    return AdmissionResponse(False, {"code": 403, "reason": "Forbidden", "message": message})


def gatekeeper_pods(store: ObjectStore) -> list[tuple[str, list[str]]]:
    """(pod name, operations) of every running Gatekeeper pod, by name."""
    out = []
    for pod in _list(store, "Pod", "v1"):
        meta = pod["metadata"]
        if meta.get("namespace") != NAMESPACE or (meta.get("labels") or {}).get("gatekeeper.sh/system") != "yes":
            continue
        if (pod.get("status") or {}).get("phase") != "Running" or meta.get("deletionTimestamp"):
            continue
        ops: set[str] = set()
        for c in (pod.get("spec") or {}).get("containers") or []:
            for arg in c.get("args") or []:
                if str(arg).startswith("--operation="):
                    ops.add(str(arg).split("=", 1)[1])
        out.append((str(meta["name"]), sorted(ops)))
    return sorted(out)


class GatekeeperTemplateController(Controller):
    """The ConstraintTemplate controller: constraint CRDs and template status."""

    name = "gatekeeper-templates"

    def __init__(self, ctx: Context, dispatcher: WebhookDispatcher, engine: GatekeeperEngine) -> None:
        super().__init__(ctx)
        self.engine = engine
        GatekeeperWebhook(engine).register(dispatcher)
        ctx.store.subscribe(self._on_event)

    def _on_event(self, event: str, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        if is_template(obj):
            self.enqueue(("", str(meta["name"])))
        elif obj.get("kind") == "Pod" and meta.get("namespace") == NAMESPACE or (
                obj.get("kind") == "Deployment" and meta.get("namespace") == NAMESPACE):
            for template in _list(self.ctx.store, "ConstraintTemplate", f"{TEMPLATE_GROUP}/v1"):
                self.enqueue(("", str(template["metadata"]["name"])))

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return ()

    def sync(self, key: Key) -> None:
        if not deployment_available(self.ctx.store, CONTROLLER_MANAGER, NAMESPACE):
            return
        store = self.ctx.store
        try:
            obj = store.get("ConstraintTemplate", None, key[1], f"{TEMPLATE_GROUP}/v1")
        except ApiError:
            return  # the CRD went with the template's deletion (below)
        if obj["metadata"].get("deletionTimestamp"):
            return
        compiled = self.engine.compile(obj)
        created = False
        if compiled.template is not None:
            self._ensure_crd(obj, compiled.template)
            created = True
        status = clone(obj.get("status") or {})
        status["created"] = created
        status["byPod"] = [self._by_pod(obj, pod, ops, compiled.error) for pod, ops in gatekeeper_pods(store)]
        self.write_status(obj, status)

    def _by_pod(self, obj: Obj, pod: str, ops: list[str], error: str) -> Obj:
        entry: Obj = {"id": pod, "observedGeneration": obj["metadata"].get("generation", 1), "operations": ops,
                      "templateUID": obj["metadata"]["uid"]}
        if error:
            entry["errors"] = [{"code": "ingest_error", "message": error}]
        return entry

    def _ensure_crd(self, obj: Obj, template: ConstraintTemplate) -> None:
        """The constraint CRD as frameworks ``crds.CreateSchema``/``CreateCRD`` make it (Gatekeeper v3.17.2)."""
        crd_spec = ((obj.get("spec") or {}).get("crd") or {}).get("spec") or {}
        names = crd_spec.get("names") or {}
        # the template as Gatekeeper reads it (v1beta1 conversion): a legacy schema preserves unknown fields
        # at every level, and stands for any parameters when the template has none; otherwise no schema, no
        # parameters field
        spec_props: Obj = {"match": _match_schema(), "enforcementAction": {"type": "string", "default": "deny"},
                           "scopedEnforcementActions": clone(_SCOPED_ACTIONS)}
        parameters = clone(dict(template.parameters_schema)) if template.parameters_schema is not None else None
        if (crd_spec.get("validation") or {}).get("legacySchema") is True:
            spec_props["parameters"] = _preserving(parameters or {})
        elif parameters is not None:
            spec_props["parameters"] = parameters
        schema = {"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63}}},
            "spec": {"type": "object", "properties": spec_props},
            "status": {"x-kubernetes-preserve-unknown-fields": True}}}
        columns = [
            {"name": "enforcement-action", "type": "string", "description": "Type of enforcement action",
             "jsonPath": ".spec.enforcementAction"},
            {"name": "total-violations", "type": "integer", "description": "Total number of violations",
             "jsonPath": ".status.totalViolations"},
        ]
        plural = template.kind.lower()
        crd_names: Obj = {"kind": template.kind, "listKind": template.kind + "List", "plural": plural, "singular": plural,
                          "categories": ["constraint", "constraints"]}
        if names.get("shortNames"):
            crd_names["shortNames"] = list(names["shortNames"])
        desired: Obj = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": crd_name(template.kind),
                         "labels": {**((obj["metadata"].get("labels")) or {}), "gatekeeper.sh/constraint": "yes"},
                         "ownerReferences": [{"apiVersion": f"{TEMPLATE_GROUP}/v1", "kind": "ConstraintTemplate",
                                              "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"group": CONSTRAINT_GROUP, "names": crd_names, "scope": "Cluster", "preserveUnknownFields": False,
                     "versions": [
                         {"name": version, "served": True, "storage": version == CONSTRAINT_VERSION,
                          "schema": {"openAPIV3Schema": schema}, "subresources": {"status": {}},
                          "additionalPrinterColumns": columns}
                         for version in (CONSTRAINT_VERSION, "v1alpha1")]},
        }
        store = self.ctx.store
        try:
            current = store.get("CustomResourceDefinition", None, desired["metadata"]["name"])
        except ApiError:
            store.create(desired)
            return
        if current.get("spec") == desired["spec"]:
            return
        updated = clone(current)
        updated["spec"] = desired["spec"]
        store.update(updated)

