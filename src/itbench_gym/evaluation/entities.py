"""Entity references: how a report, a ground-truth group and a topology node name a thing.

Agents write entities as ``namespace/Kind/name``, ``Kind/name``, kubectl's ``kind/name``, a plain
name, or free text such as ``flagd-config ConfigMap``. Everything is parsed into one
:class:`EntityRef` so that matching has a single definition.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Lower-case spellings (plural, kubectl short names) -> canonical Kubernetes kind.
_KIND_SPELLINGS: dict[str, tuple[str, ...]] = {
    "Pod": ("pod", "pods", "po"),
    "Service": ("service", "services", "svc"),
    "Deployment": ("deployment", "deployments", "deploy"),
    "ReplicaSet": ("replicaset", "replicasets", "rs"),
    "StatefulSet": ("statefulset", "statefulsets", "sts"),
    "DaemonSet": ("daemonset", "daemonsets", "ds"),
    "Job": ("job", "jobs"),
    "CronJob": ("cronjob", "cronjobs", "cj"),
    "ConfigMap": ("configmap", "configmaps", "cm"),
    "Secret": ("secret", "secrets"),
    "Namespace": ("namespace", "namespaces", "ns"),
    "Node": ("node", "nodes", "no"),
    "PersistentVolumeClaim": ("persistentvolumeclaim", "persistentvolumeclaims", "pvc"),
    "PersistentVolume": ("persistentvolume", "persistentvolumes", "pv"),
    "HorizontalPodAutoscaler": ("horizontalpodautoscaler", "horizontalpodautoscalers", "hpa"),
    "NetworkPolicy": ("networkpolicy", "networkpolicies", "netpol"),
    "PodDisruptionBudget": ("poddisruptionbudget", "poddisruptionbudgets", "pdb"),
    "ResourceQuota": ("resourcequota", "resourcequotas", "quota"),
    "Endpoints": ("endpoints", "ep"),
    "EndpointSlice": ("endpointslice", "endpointslices"),
    "ServiceAccount": ("serviceaccount", "serviceaccounts", "sa"),
    "Ingress": ("ingress", "ingresses", "ing"),
    "PriorityClass": ("priorityclass", "priorityclasses", "pc"),
    "PrometheusRule": ("prometheusrule", "prometheusrules", "promrule"),
    "Port": ("port", "ports"),
    "ServiceOperation": ("serviceoperation", "serviceoperations"),
}
KIND_SYNONYMS: dict[str, str] = {
    spelling: kind for kind, spellings in _KIND_SPELLINGS.items() for spelling in spellings
}

#: Kinds whose deletion or scale-down removes a running application component.
WORKLOAD_KINDS: frozenset[str] = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


def canonical_kind(kind: str) -> str:
    """Known spellings map to the Kubernetes kind; unknown kinds (CRDs) are kept as written."""
    return KIND_SYNONYMS.get(kind.strip().lower(), kind.strip())


def is_known_kind(word: str) -> bool:
    return word.strip().lower() in KIND_SYNONYMS


@dataclass(frozen=True)
class EntityRef:
    """A possibly partial reference: kind and namespace are ``None`` when the writer omitted them."""

    name: str
    kind: str | None = None
    namespace: str | None = None

    def key(self) -> tuple[str, str, str]:
        """Identity for de-duplication; case-insensitive like Kubernetes names in practice."""
        return (
            (self.namespace or "").lower(),
            (self.kind or "").lower(),
            self.name.lower(),
        )

    def __str__(self) -> str:
        return "/".join(part for part in (self.namespace, self.kind, self.name) if part)


def parse_entity_ref(text: str, *, kind: str | None = None, namespace: str | None = None) -> EntityRef:
    """Parse one entity reference; explicit ``kind``/``namespace`` fields win over embedded ones."""
    text = text.strip()
    parsed_ns: str | None = None
    parsed_kind: str | None = None
    name = text
    parts = text.split("/")
    if len(parts) >= 3 and all(parts[:2]):
        parsed_ns, parsed_kind, name = parts[0], parts[1], "/".join(parts[2:])
    elif len(parts) == 2 and all(parts):
        if is_known_kind(parts[0]):
            parsed_kind, name = parts[0], parts[1]
        else:
            parsed_ns, name = parts[0], parts[1]
    elif " " in text:
        words = text.split()
        last = words[-1].strip("()[]")
        if len(words) > 1 and is_known_kind(last):
            parsed_kind, name = last, " ".join(words[:-1])
    final_kind = kind if kind else parsed_kind
    return EntityRef(
        name=name.strip(),
        kind=canonical_kind(final_kind) if final_kind else None,
        namespace=(namespace if namespace else parsed_ns) or None,
    )
