"""The agent's RBAC objects (``agent-rbac.yaml``), shared by both backends.

The twin applies them to its store and serves them through real RBAC evaluation; the real-cluster
backend applies the same objects through the API, so an agent has the same rights on either.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from itbench_gym.lang import yamltext

Obj = dict[str, Any]

#: The value of ``metadata.namespace`` that marks a per-namespace document in ``agent-rbac.yaml``.
NAMESPACE_PLACEHOLDER = "{{ namespace }}"
_MANIFEST = "agent-rbac.yaml"


@dataclass(frozen=True)
class ServiceAccountRef:
    """The agent's ServiceAccount and the user name and groups its token authenticates as."""

    namespace: str
    name: str

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    @property
    def groups(self) -> tuple[str, ...]:
        """What the ServiceAccount token authenticator adds (plus ``system:authenticated``)."""
        return ("system:serviceaccounts", f"system:serviceaccounts:{self.namespace}", "system:authenticated")


@functools.cache
def _documents() -> tuple[Obj, ...]:
    text = resources.files(__package__).joinpath(_MANIFEST).read_text(encoding="utf-8")
    docs = tuple(d for d in yamltext.load_all(text) if d)
    for d in docs:
        if not isinstance(d, dict) or not d.get("kind") or not isinstance(d.get("metadata"), dict):
            raise ValueError(f"{_MANIFEST}: every document must be a Kubernetes object, got {d!r}")
    return docs


def agent_service_account() -> ServiceAccountRef:
    """The one ServiceAccount ``agent-rbac.yaml`` creates: whose token the agent's kubeconfig holds."""
    accounts = [d for d in _documents() if d["kind"] == "ServiceAccount"]
    if len(accounts) != 1:
        raise ValueError(f"{_MANIFEST}: expected exactly one ServiceAccount, found {len(accounts)}")
    meta = accounts[0]["metadata"]
    return ServiceAccountRef(meta["namespace"], meta["name"])


def agent_rbac_objects(namespaces: Iterable[str]) -> list[Obj]:
    """The objects that give the agent its access to ``namespaces`` (cluster-scoped ones once)."""
    wanted = list(dict.fromkeys(namespaces))
    for ns in wanted:
        if not isinstance(ns, str) or not ns or ns == NAMESPACE_PLACEHOLDER:
            raise ValueError(f"agent_rbac_objects: invalid namespace {ns!r}")
    out: list[Obj] = []
    per_namespace = [d for d in _documents() if d["metadata"].get("namespace") == NAMESPACE_PLACEHOLDER]
    out.extend(copy.deepcopy(d) for d in _documents() if d not in per_namespace)
    for ns in wanted:
        for doc in per_namespace:
            obj = copy.deepcopy(doc)
            obj["metadata"]["namespace"] = ns
            out.append(obj)
    return out
