"""Rule `match` / `exclude` blocks: which resources (and admission requests) a rule applies to.

A block is either `any`/`all` lists of filters or a single legacy filter (`resources`, `subjects`, ...).
A filter holds when every attribute it names matches; kinds accept `Kind`, `Version/Kind`,
`Group/Version/Kind` and `Kind/subresource`, with wildcards in each part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .values import wildcard_match

# Built-in cluster-scoped kinds by API group; everything else (including unknown custom resources) is namespaced.
_CLUSTER_SCOPED = {
    "": {"Namespace", "Node", "PersistentVolume", "ComponentStatus"},
    "rbac.authorization.k8s.io": {"ClusterRole", "ClusterRoleBinding"},
    "storage.k8s.io": {"StorageClass", "CSIDriver", "CSINode", "VolumeAttachment"},
    "apiextensions.k8s.io": {"CustomResourceDefinition"},
    "scheduling.k8s.io": {"PriorityClass"},
    "admissionregistration.k8s.io": {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    },
    "apiregistration.k8s.io": {"APIService"},
    "networking.k8s.io": {"IngressClass"},
    "node.k8s.io": {"RuntimeClass"},
    "policy": {"PodSecurityPolicy"},
    "certificates.k8s.io": {"CertificateSigningRequest"},
    "flowcontrol.apiserver.k8s.io": {"FlowSchema", "PriorityLevelConfiguration"},
}


@dataclass(frozen=True)
class Admission:
    """What the CLI knows about the request: operation, labels of known namespaces, the requesting user."""

    operation: str = "CREATE"
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    #: Whole Namespace objects where known (CEL's ``namespaceObject`` shows their annotations too).
    namespace_objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    username: str = ""
    groups: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    cluster_roles: tuple[str, ...] = ()


def _subjects_match(subjects: list[dict[str, Any]], admission: Admission) -> bool:
    for subject in subjects:
        kind, name = subject.get("kind"), str(subject.get("name", ""))
        if kind == "ServiceAccount" and wildcard_match(f"system:serviceaccount:{subject.get('namespace', '')}:{name}", admission.username):
            return True
        if kind == "Group" and any(wildcard_match(name, g) for g in admission.groups):
            return True
        if kind == "User" and wildcard_match(name, admission.username):
            return True
    return False


def is_cluster_scoped(resource: dict[str, Any]) -> bool:
    group = str(resource.get("apiVersion") or "").rpartition("/")[0]
    return resource.get("kind") in _CLUSTER_SCOPED.get(group, set())


def resource_namespace(resource: dict[str, Any]) -> str:
    meta = resource.get("metadata") or {}
    return str(meta.get("namespace") or "")


def matches_kind(selector: str, resource: dict[str, Any]) -> bool:
    """Match one `kinds` entry against the resource's apiVersion and kind."""
    api_version = str(resource.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    kind = str(resource.get("kind") or "")
    parts = selector.split("/")
    sub = ""
    if len(parts) == 1:
        want = ("*", "*", parts[0])
    elif len(parts) == 2:
        if parts[0][:1].isupper() or parts[0] == "*" and parts[1][:1].islower():
            want, sub = ("*", "*", parts[0]), parts[1]
        else:
            want = ("*", parts[0], parts[1])
    elif len(parts) == 3:
        want = (parts[0], parts[1], parts[2])
    else:
        want, sub = (parts[0], parts[1], parts[2]), parts[3]
    if sub:
        return False
    return wildcard_match(want[0], group) and wildcard_match(want[1], version) and wildcard_match(want[2], kind)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, Any]) -> bool:
    """A Kubernetes label selector; Kyverno also allows wildcards in matchLabels keys and values."""
    if not selector:
        return True
    for key, want in (selector.get("matchLabels") or {}).items():
        if not any(wildcard_match(str(key), k) and wildcard_match(str(want), str(v)) for k, v in labels.items()):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        present = key in labels
        if op == "In" and not (present and str(labels[key]) in values):
            return False
        if op == "NotIn" and present and str(labels[key]) in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def _resource_filter(desc: dict[str, Any], resource: dict[str, Any], admission: Admission) -> bool:
    meta = resource.get("metadata") or {}
    name = str(meta.get("name") or "")
    kinds = desc.get("kinds") or []
    if kinds and not any(matches_kind(str(k), resource) for k in kinds):
        return False
    names = list(desc.get("names") or []) + ([desc["name"]] if desc.get("name") else [])
    if names and not any(wildcard_match(str(n), name) for n in names):
        return False
    namespace = name if resource.get("kind") == "Namespace" else resource_namespace(resource)
    namespaces = desc.get("namespaces") or []
    if namespaces and not any(wildcard_match(str(n), namespace) for n in namespaces):
        return False
    annotations = meta.get("annotations") or {}
    for key, want in (desc.get("annotations") or {}).items():
        if not any(wildcard_match(str(key), k) and wildcard_match(str(want), str(v)) for k, v in annotations.items()):
            return False
    if "selector" in desc and not selector_matches(desc.get("selector"), meta.get("labels") or {}):
        return False
    if "namespaceSelector" in desc:
        if resource.get("kind") == "Namespace":
            return False
        ns_labels = admission.namespace_labels.get(namespace, {})
        if not selector_matches(desc.get("namespaceSelector"), ns_labels):
            return False
    operations = desc.get("operations") or []
    return not operations or admission.operation in operations


def filter_matches(flt: dict[str, Any], resource: dict[str, Any], admission: Admission) -> bool:
    """One filter: the resource description plus, when given, roles, cluster roles and subjects of the user."""
    if flt.get("roles") and not set(map(str, flt["roles"])) & set(admission.roles):
        return False
    if flt.get("clusterRoles") and not set(map(str, flt["clusterRoles"])) & set(admission.cluster_roles):
        return False
    if flt.get("subjects") and not _subjects_match(flt["subjects"], admission):
        return False
    return _resource_filter(flt.get("resources") or {}, resource, admission)


def block_matches(block: dict[str, Any] | None, resource: dict[str, Any], admission: Admission) -> bool:
    """`any`: some filter holds; `all`: every filter holds; otherwise the legacy single filter."""
    if not block:
        return False
    if block.get("any"):
        return any(filter_matches(f, resource, admission) for f in block["any"])
    if block.get("all"):
        return all(filter_matches(f, resource, admission) for f in block["all"])
    return filter_matches(block, resource, admission)


def rule_applies(rule: dict[str, Any], resource: dict[str, Any], admission: Admission) -> bool:
    return block_matches(rule.get("match"), resource, admission) and not block_matches(rule.get("exclude"), resource, admission)
