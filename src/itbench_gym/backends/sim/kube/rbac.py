"""Kubernetes RBAC in the twin: request attributes, the RBAC authorizer, escalation checks, aggregation.

Every request the API server serves is first turned into authorizer attributes the way upstream's
``RequestInfoFactory`` does (verb from the method, ``list``/``watch`` for collections, the name from
a ``metadata.name`` field selector, ``namespaces/<ns>`` requests scoped to ``<ns>``), then checked
against the Role/ClusterRole/RoleBinding/ClusterRoleBinding objects in the store with upstream's
matching rules (``*`` verbs, groups and resources, ``*/subresource``, resourceNames, nonResourceURL
prefixes). Members of ``system:masters`` are always allowed, like kube-apiserver's privileged-group
authorizer. Writes of RBAC objects go through upstream's escalation check: a user may only grant
what they already hold, unless they have ``bind`` (bindings) or ``escalate`` (roles).

Only facts are taken from upstream (plugin/pkg/auth/authorizer/rbac, pkg/registry/rbac); the
bootstrap policy itself is data in ``bootstrap_rbac.yaml``.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from typing import TYPE_CHECKING, Any

from itbench_gym.lang import yamltext

from . import errors
from .selectors import selector_from_dict

if TYPE_CHECKING:
    from .store import ObjectStore

Obj = dict[str, Any]
Rule = dict[str, Any]
Causes = list[tuple[str, str, str]]

GROUP = "rbac.authorization.k8s.io"
API_VERSION = f"{GROUP}/v1"
#: kube-apiserver allows this group everything before RBAC is consulted.
PRIVILEGED_GROUP = "system:masters"
_SPECIAL_VERBS = {"proxy", "watch"}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_FULL_AUTHORITY: tuple[Rule, ...] = (
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
)
_RULE_FIELDS = ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")


# -- request attributes --------------------------------------------------------------------------


@dataclass(frozen=True)
class Attributes:
    """What the authorizer decides on (upstream's ``authorizer.Attributes``)."""

    user: str
    groups: tuple[str, ...]
    verb: str
    resource_request: bool
    path: str = ""
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def query_bool(value: str | None) -> bool:
    """A boolean query parameter as the API server reads one: anything but absent, ``0`` or ``false``."""
    return value is not None and value != "0" and value.lower() != "false"


def _exact_name(field_selector: str | None) -> str:
    """The name a ``metadata.name=<n>`` (or ``==``) term pins, as ``RequiresExactMatch`` finds it."""
    for term in (field_selector or "").split(","):
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                value = value.strip()
                if value and value not in (".", "..") and "/" not in value and "%" not in value:
                    return value
                return ""
    return ""


def request_attributes(method: str, path: str, query: Mapping[str, str], user: str,
                       groups: tuple[str, ...]) -> Attributes:
    """Upstream's request info for ``method path?query``: a resource request or a non-resource path.

    ``/api/v1/watch`` style URLs with nothing after the special verb are a 500 upstream ("unable to
    determine kind and namespace"); the twin answers them 404 instead (bad input is never a 500).
    """
    trimmed = path.strip("/")
    parts = trimmed.split("/") if trimmed else []
    non_resource = Attributes(user, groups, method.lower(), False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    cur = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(cur) < 3:
            return non_resource
        group, cur = cur[0], cur[1:]
    version, cur = cur[0], cur[1:]
    if cur[0] in _SPECIAL_VERBS:
        if len(cur) < 2:
            raise errors.not_found_path()
        verb, cur = cur[0], cur[1:]
    else:
        verb = _METHOD_VERBS.get(method.upper(), "")
    namespace = ""
    if cur[0] == "namespaces" and len(cur) > 1:
        namespace = cur[1]
        if len(cur) > 2 and cur[2] not in _NAMESPACE_SUBRESOURCES:
            cur = cur[2:]
    resource = cur[0]
    name = cur[1] if len(cur) >= 2 else ""
    sub = cur[2] if len(cur) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if query_bool(query.get("watch")) else "list"
        name = _exact_name(query.get("fieldSelector"))
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(user, groups, verb, True, path=path, group=group, version=version, namespace=namespace,
                      resource=resource, subresource=sub, name=name)


def forbidden(attrs: Attributes, reason: str = "") -> errors.ApiError:
    """The ``403 Forbidden`` Status upstream writes for a denied request, word for word."""
    if not attrs.resource_request:
        msg = f"User {_q(attrs.user)} cannot {attrs.verb} path {_q(attrs.path)}"
    else:
        where = (f"in the namespace {_q(attrs.namespace)}" if attrs.namespace else "at the cluster scope")
        msg = (f"User {_q(attrs.user)} cannot {attrs.verb} resource {_q(attrs.combined_resource)} "
               f"in API group {_q(attrs.group)} {where}")
    if reason:
        msg = f"{msg}: {reason}"
    return forbidden_error(attrs.group if attrs.resource_request else "", attrs.resource, attrs.name, msg)


def forbidden_error(group: str, resource: str, name: str, err: str) -> errors.ApiError:
    """``apierrors.NewForbidden(groupResource, name, err)``."""
    if not resource:
        return errors.ApiError(403, "Forbidden", f"forbidden: {err}", {})
    qualified = errors.qualified(group, resource)
    message = f"{qualified} {_q(name)} is forbidden: {err}" if name else f"{qualified} is forbidden: {err}"
    details: Obj = {"kind": resource}
    if group:
        details["group"] = group
    if name:
        details["name"] = name
    return errors.ApiError(403, "Forbidden", message, details)


def _q(s: str) -> str:
    """Go's ``%q`` for the strings that appear in these messages."""
    return json.dumps(s, ensure_ascii=False)


def _q_list(values: list[str] | tuple[str, ...]) -> str:
    """Go's ``%q`` for a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(_q(v) for v in values) + "]"


# -- rule matching -------------------------------------------------------------------------------


def _strs(rule: Mapping[str, Any], key: str) -> list[str]:
    v = rule.get(key)
    return [str(x) for x in v] if isinstance(v, list) else []


def rule_allows(attrs: Attributes, rule: Mapping[str, Any]) -> bool:
    """Whether one PolicyRule allows the request (upstream's ``RuleAllows``)."""
    verbs = _strs(rule, "verbs")
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.resource_request:
        return any(u == "*" or u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1]))
                   for u in _strs(rule, "nonResourceURLs"))
    groups = _strs(rule, "apiGroups")
    if "*" not in groups and attrs.group not in groups:
        return False
    combined = attrs.combined_resource
    if not any(r == "*" or r == combined or (attrs.subresource and r == f"*/{attrs.subresource}")
               for r in _strs(rule, "resources")):
        return False
    names = _strs(rule, "resourceNames")
    return not names or attrs.name in names


def _subject_applies(subject: Mapping[str, Any], user: str, groups: tuple[str, ...], namespace: str) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user == f"system:serviceaccount:{sa_namespace}:{name}"
    return False


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f"ServiceAccount {_q(str(subject.get('name')) + '/' + str(subject.get('namespace') or binding_namespace))}"
    return f"{subject.get('kind')} {_q(str(subject.get('name')))}"


# -- the authorizer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class RBACAuthorizer:
    """Authorizes requests against the RBAC objects in ``store`` (read at every call)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _rt(self, kind: str) -> Any:
        return self.store.registry.by_kind(kind, API_VERSION)

    def _get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        try:
            return self.store.get_stored(self._rt(kind), namespace, name)
        except errors.ApiError:
            return None

    def role_ref_rules(self, ref: Mapping[str, Any], binding_namespace: str) -> tuple[list[Rule], str | None]:
        """The rules a binding's ``roleRef`` grants, or the lister's not-found message."""
        kind, name = ref.get("kind"), str(ref.get("name", ""))
        if kind == "ClusterRole":
            role = self._get("ClusterRole", None, name)
            if role is None:
                return [], f'clusterrole.{GROUP} {_q(name)} not found'
        elif kind == "Role" and binding_namespace:
            role = self._get("Role", binding_namespace, name)
            if role is None:
                return [], f'role.{GROUP} {_q(name)} not found'
        else:
            return [], f"unsupported role reference kind: {_q(str(kind))}"
        return [r for r in role.get("rules") or [] if isinstance(r, dict)], None

    def _visit(self, user: str, groups: tuple[str, ...], namespace: str) -> Iterator[tuple[str, list[Rule], str | None]]:
        """``(source, rules, error)`` for every binding that applies: cluster-wide first, then ``namespace``'s."""
        for crb in self.store.list_stored(self._rt("ClusterRoleBinding")):
            subject = next((s for s in crb.get("subjects") or [] if isinstance(s, dict)
                            and _subject_applies(s, user, groups, "")), None)
            if subject is None:
                continue
            ref = crb.get("roleRef") or {}
            rules, err = self.role_ref_rules(ref, "")
            yield (f"ClusterRoleBinding {_q(crb['metadata']['name'])} of {ref.get('kind')} {_q(str(ref.get('name')))} "
                   f"to {_describe_subject(subject, '')}"), rules, err
        if not namespace:
            return
        for rb in self.store.list_stored(self._rt("RoleBinding"), namespace):
            subject = next((s for s in rb.get("subjects") or [] if isinstance(s, dict)
                            and _subject_applies(s, user, groups, namespace)), None)
            if subject is None:
                continue
            ref = rb.get("roleRef") or {}
            rules, err = self.role_ref_rules(ref, namespace)
            yield (f"RoleBinding {_q(rb['metadata']['name'] + '/' + namespace)} of {ref.get('kind')} "
                   f"{_q(str(ref.get('name')))} to {_describe_subject(subject, namespace)}"), rules, err

    def authorize(self, attrs: Attributes) -> Decision:
        if PRIVILEGED_GROUP in attrs.groups:
            return Decision(True)
        problems: list[str] = []
        for source, rules, err in self._visit(attrs.user, attrs.groups, attrs.namespace):
            if err:
                problems.append(err)
            if any(rule_allows(attrs, r) for r in rules):
                return Decision(True, f"RBAC: allowed by {source}")
        if not problems:
            return Decision(False)
        return Decision(False, "RBAC: " + (problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"))

    def rules_for(self, user: str, groups: tuple[str, ...], namespace: str) -> tuple[list[Rule], list[str]]:
        """Every rule the user holds in ``namespace`` (cluster-wide ones included), and resolution errors."""
        rules: list[Rule] = []
        problems: list[str] = []
        for _, granted, err in self._visit(user, groups, namespace):
            rules.extend(granted)
            if err:
                problems.append(err)
        return rules, problems

    # -- escalation --------------------------------------------------------------------------

    def check_write(self, attrs: Attributes, kind: str, new: Obj, old: Obj | None) -> None:
        """Refuse (403) an RBAC object write that would grant more than the writer holds."""
        if PRIVILEGED_GROUP in attrs.groups or (old is not None and _only_gc_fields_changed(old, new)):
            return
        meta = new.get("metadata") or {}
        name = str(meta.get("name", ""))
        namespace = str(meta.get("namespace") or "") if kind in ("Role", "RoleBinding") else ""
        plural = kind.lower() + "s"
        if kind in ("Role", "ClusterRole"):
            escalate = replace(attrs, verb="escalate", version="*")
            if self.authorize(escalate).allowed:
                return
            missing = self._missing(attrs, namespace, [r for r in new.get("rules") or [] if isinstance(r, dict)])
            if missing:
                raise forbidden_error(GROUP, plural, name, missing)
            if kind == "ClusterRole" and new.get("aggregationRule") and self._missing(attrs, "", list(_FULL_AUTHORITY)):
                raise forbidden_error(GROUP, plural, name, "must have cluster-admin privileges to use the aggregationRule")
            return
        ref = new.get("roleRef") or {}
        ref_kind = ref.get("kind")
        bind = Attributes(attrs.user, attrs.groups, "bind", True, group=str(ref.get("apiGroup") or ""), namespace=namespace,
                          resource="clusterroles" if ref_kind == "ClusterRole" else "roles", name=str(ref.get("name", "")))
        if ref_kind in ("Role", "ClusterRole") and self.authorize(bind).allowed:
            return
        rules, err = self.role_ref_rules(ref, namespace)
        if err:
            raise errors.not_found(GROUP, "clusterroles" if ref_kind == "ClusterRole" else "roles", str(ref.get("name", "")))
        missing = self._missing(attrs, namespace, rules)
        if missing:
            raise forbidden_error(GROUP, plural, name, missing)

    def _missing(self, attrs: Attributes, namespace: str, rules: list[Rule]) -> str:
        """Upstream's ``ConfirmNoEscalation`` message, or ``""`` when the writer holds every rule."""
        owner, problems = self.rules_for(attrs.user, attrs.groups, namespace)
        ok, missing = covers(owner, rules)
        if ok:
            return ""
        lines = sorted({compact_string(r) for r in compact_rules(missing)})
        msg = (f"user {_q(attrs.user)} (groups={_q_list(attrs.groups)}) is attempting to grant RBAC permissions "
               f"not currently held:\n" + "\n".join(lines))
        if problems:
            msg += f"; resolution errors: [{', '.join(problems)}]"
        return msg


def _only_gc_fields_changed(old: Obj, new: Obj) -> bool:
    """Only ownerReferences/finalizers differ (upstream lets the garbage collector through)."""
    def strip(o: Obj) -> Obj:
        c = copy.deepcopy(o)
        meta = c.setdefault("metadata", {})
        for k in ("ownerReferences", "finalizers", "resourceVersion", "managedFields", "generation"):
            meta.pop(k, None)
        return c
    return strip(old) == strip(new)


# -- covering (escalation) -----------------------------------------------------------------------


def break_down(rule: Mapping[str, Any]) -> list[Rule]:
    """One rule per (group, resource, verb[, name]) and per (url, verb), as upstream decomposes."""
    out: list[Rule] = []
    verbs = _strs(rule, "verbs")
    names = _strs(rule, "resourceNames")
    for g in _strs(rule, "apiGroups"):
        for r in _strs(rule, "resources"):
            for v in verbs:
                if names:
                    out.extend({"apiGroups": [g], "resources": [r], "verbs": [v], "resourceNames": [n]} for n in names)
                else:
                    out.append({"apiGroups": [g], "resources": [r], "verbs": [v]})
    for u in _strs(rule, "nonResourceURLs"):
        out.extend({"nonResourceURLs": [u], "verbs": [v]} for v in verbs)
    return out


def _resource_covers_all(owned: list[str], wanted: list[str]) -> bool:
    if "*" in owned or all(w in owned for w in wanted):
        return True
    for w in wanted:
        if w in owned:
            continue
        if "/" not in w or "*/" + w.split("/", 1)[1] not in owned:
            return False
    return True


def _url_covers(owned: str, wanted: str) -> bool:
    return owned == wanted or (owned.endswith("*") and wanted.startswith(owned[:-1]))


def _rule_covers(owner: Mapping[str, Any], sub: Mapping[str, Any]) -> bool:
    o_verbs, o_groups, o_names = _strs(owner, "verbs"), _strs(owner, "apiGroups"), _strs(owner, "resourceNames")
    s_names = _strs(sub, "resourceNames")
    return (("*" in o_verbs or all(v in o_verbs for v in _strs(sub, "verbs")))
            and ("*" in o_groups or all(g in o_groups for g in _strs(sub, "apiGroups")))
            and _resource_covers_all(_strs(owner, "resources"), _strs(sub, "resources"))
            and all(any(_url_covers(o, w) for o in _strs(owner, "nonResourceURLs")) for w in _strs(sub, "nonResourceURLs"))
            and (not o_names or (bool(s_names) and all(n in o_names for n in s_names))))


def covers(owner: list[Rule], servant: list[Rule]) -> tuple[bool, list[Rule]]:
    """Whether ``owner`` rules include everything ``servant`` grants; the uncovered pieces otherwise."""
    missing = [sub for rule in servant for sub in break_down(rule) if not any(_rule_covers(o, sub) for o in owner)]
    return not missing, missing


def compact_rules(rules: list[Rule]) -> list[Rule]:
    """Merge single-group/single-resource rules that differ only in verbs (upstream's ``CompactRules``)."""
    out: list[Rule] = []
    simple: dict[tuple[str, str, str | None], Rule] = {}
    for rule in rules:
        groups, res, names = _strs(rule, "apiGroups"), _strs(rule, "resources"), _strs(rule, "resourceNames")
        if len(groups) == 1 and len(res) == 1 and len(names) <= 1 and not rule.get("nonResourceURLs"):
            key = (groups[0], res[0], names[0] if names else None)
            if key in simple:
                simple[key]["verbs"].extend(v for v in _strs(rule, "verbs") if v not in simple[key]["verbs"])
            else:
                simple[key] = copy.deepcopy(rule)
                simple[key]["verbs"] = _strs(rule, "verbs")
        else:
            out.append(rule)
    return out + list(simple.values())


def compact_string(rule: Mapping[str, Any]) -> str:
    """``{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}``."""
    parts = [f"{label}:{_q_list(_strs(rule, key))}" for label, key in (
        ("APIGroups", "apiGroups"), ("Resources", "resources"), ("NonResourceURLs", "nonResourceURLs"),
        ("ResourceNames", "resourceNames"), ("Verbs", "verbs")) if _strs(rule, key)]
    return "{" + ", ".join(parts) + "}"


# -- aggregation and bootstrap -------------------------------------------------------------------


def _normal(rule: Mapping[str, Any]) -> Rule:
    return {k: list(rule[k]) for k in _RULE_FIELDS if rule.get(k)}


def aggregate(store: ObjectStore) -> None:
    """Fill aggregated ClusterRoles' rules from the roles their selectors pick (the aggregation controller)."""
    rt = store.registry.by_kind("ClusterRole", API_VERSION)
    for _ in range(16):  # aggregated roles can select aggregated roles: iterate to a fixed point
        changed = False
        roles = store.list_stored(rt)
        for role in roles:
            selectors = ((role.get("aggregationRule") or {}).get("clusterRoleSelectors")) or []
            if not selectors:
                continue
            matchers = [selector_from_dict(s) for s in selectors if isinstance(s, dict)]
            rules: list[Rule] = []
            for other in roles:  # list_stored is sorted by name, like the controller's byName sort
                if other["metadata"]["name"] == role["metadata"]["name"]:
                    continue
                if any(m.matches(other["metadata"].get("labels")) for m in matchers):
                    for r in other.get("rules") or []:
                        n = _normal(r)
                        if n not in rules:
                            rules.append(n)
            if [_normal(r) for r in role.get("rules") or []] != rules:
                updated = copy.deepcopy(role)
                updated["rules"] = rules
                store.update(updated)
                changed = True
        if not changed:
            return


@functools.cache
def _bootstrap_documents() -> tuple[Obj, ...]:
    text = resources.files(__package__).joinpath("bootstrap_rbac.yaml").read_text(encoding="utf-8")
    return tuple(d for d in yamltext.load_all(text) if d)


def bootstrap(store: ObjectStore) -> None:
    """Create the bootstrap ClusterRoles and ClusterRoleBindings that are missing, then aggregate."""
    for doc in _bootstrap_documents():
        rt = store.registry.by_kind(doc["kind"], doc["apiVersion"])
        try:
            store.get_stored(rt, None, doc["metadata"]["name"])
        except errors.ApiError:
            store.create(copy.deepcopy(doc))
    aggregate(store)


# -- defaulting and validation (pkg/apis/rbac/v1 defaults, pkg/apis/rbac/validation) --------------


def default_binding(obj: Obj) -> None:
    """``roleRef.apiGroup`` and User/Group subjects' ``apiGroup`` default to the RBAC group."""
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = GROUP
    for s in obj.get("subjects") or []:
        if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
            s["apiGroup"] = GROUP


def _go_strings(values: Any) -> str:
    return "[]string{" + ", ".join(_q(str(v)) for v in (values or [])) + "}"


def _validate_rules(obj: Obj, namespaced: bool, causes: Causes) -> None:
    rules = obj.get("rules")
    if rules is not None and not isinstance(rules, list):
        causes.append(("FieldValueInvalid", "rules", "Invalid value: must be a list of rules"))
        return
    for i, rule in enumerate(rules or []):
        path = f"rules[{i}]"
        if not isinstance(rule, dict):
            causes.append(("FieldValueInvalid", path, "Invalid value: must be an object"))
            continue
        for k in _RULE_FIELDS:
            v = rule.get(k)
            if v is not None and (not isinstance(v, list) or not all(isinstance(x, str) for x in v)):
                causes.append(("FieldValueInvalid", f"{path}.{k}", "Invalid value: must be a list of strings"))
        if not rule.get("verbs"):
            causes.append(("FieldValueRequired", f"{path}.verbs", "Required value: verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs")
        if urls:
            if namespaced:
                causes.append(("FieldValueInvalid", f"{path}.nonResourceURLs",
                               f"Invalid value: {_go_strings(urls)}: namespaced rules cannot apply to non-resource URLs"))
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(("FieldValueInvalid", f"{path}.nonResourceURLs",
                               f"Invalid value: {_go_strings(urls)}: rules cannot apply to both regular resources "
                               "and non-resource URLs"))
            continue
        if not rule.get("apiGroups"):
            causes.append(("FieldValueRequired", f"{path}.apiGroups",
                           "Required value: resource rules must supply at least one api group"))
        if not rule.get("resources"):
            causes.append(("FieldValueRequired", f"{path}.resources",
                           "Required value: resource rules must supply at least one resource"))


def _unsupported(value: Any, supported: list[str]) -> str:
    return f"Unsupported value: {_q(str(value or ''))}: supported values: " + ", ".join(_q(s) for s in supported)


def _validate_binding(obj: Obj, old: Obj | None, namespaced: bool, causes: Causes) -> None:
    ref = obj.get("roleRef")
    if not isinstance(ref, dict):
        causes.append(("FieldValueRequired", "roleRef", "Required value"))
        ref = {}
    if ref.get("apiGroup") != GROUP:
        causes.append(("FieldValueNotSupported", "roleRef.apiGroup", _unsupported(ref.get("apiGroup"), [GROUP])))
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        causes.append(("FieldValueNotSupported", "roleRef.kind", _unsupported(ref.get("kind"), kinds)))
    if not ref.get("name"):
        causes.append(("FieldValueRequired", "roleRef.name", "Required value"))
    subjects = obj.get("subjects")
    if subjects is not None and not isinstance(subjects, list):
        causes.append(("FieldValueInvalid", "subjects", "Invalid value: must be a list of subjects"))
        subjects = []
    for path, s in errors.named_entries(subjects, "subjects", causes):
        kind = s.get("kind")
        if kind == "ServiceAccount":
            if s.get("apiGroup"):
                causes.append(("FieldValueNotSupported", f"{path}.apiGroup", _unsupported(s.get("apiGroup"), [""])))
            if not namespaced and not s.get("namespace"):
                causes.append(("FieldValueRequired", f"{path}.namespace", "Required value"))
        elif kind in ("User", "Group"):
            if s.get("apiGroup") != GROUP:
                causes.append(("FieldValueNotSupported", f"{path}.apiGroup", _unsupported(s.get("apiGroup"), [GROUP])))
        else:
            causes.append(("FieldValueNotSupported", f"{path}.kind", _unsupported(kind, ["ServiceAccount", "User", "Group"])))
    if old is not None and (old.get("roleRef") or {}) != ref:
        causes.append(("FieldValueInvalid", "roleRef", f"Invalid value: {_go_role_ref(ref)}: cannot change roleRef"))


def _go_role_ref(ref: Mapping[str, Any]) -> str:
    return (f'rbac.RoleRef{{APIGroup:{_q(str(ref.get("apiGroup") or ""))}, Kind:{_q(str(ref.get("kind") or ""))}, '
            f'Name:{_q(str(ref.get("name") or ""))}}}')


def validate_role(new: Obj, old: Obj | None, causes: Causes) -> None:
    _validate_rules(new, True, causes)


def validate_cluster_role(new: Obj, old: Obj | None, causes: Causes) -> None:
    _validate_rules(new, False, causes)
    agg = new.get("aggregationRule")
    if agg is not None and (not isinstance(agg, dict) or not agg.get("clusterRoleSelectors")):
        causes.append(("FieldValueRequired", "aggregationRule.clusterRoleSelectors",
                       "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"))


def validate_role_binding(new: Obj, old: Obj | None, causes: Causes) -> None:
    _validate_binding(new, old, True, causes)


def validate_cluster_role_binding(new: Obj, old: Obj | None, causes: Causes) -> None:
    _validate_binding(new, old, False, causes)
