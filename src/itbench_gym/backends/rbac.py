"""The agent's RBAC objects (``agent-rbac.yaml``), shared by both backends.

The twin applies them to its store and serves them through real RBAC evaluation; the real-cluster
backend applies the same objects through the API, so an agent has the same rights on either.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from itbench_gym.lang import yamltext

if TYPE_CHECKING:
    from itbench_gym.spec import ScenarioSpec

Obj = dict[str, Any]

#: The injection machinery's namespaces: hidden from the agent, never granted to it.
HARNESS_NAMESPACES = ("chaos-mesh", "itbench-harness")

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


def agent_namespaces(spec: ScenarioSpec) -> list[str]:
    """The namespaces ITBench grants its agent for a scenario (``manage_agent_access.yaml``): the app's,
    the namespace of every injection's ``kubernetesObject`` and the name of each Namespace one targets;
    never the injection machinery's (a Chaos Mesh Schedule's ``chaos-mesh``: hidden by design)."""
    from itbench_gym.faults.catalogue import catalogue

    known = catalogue()
    found = [spec.namespace]
    for fault in spec.faults:
        if fault.id in known and known[fault.id].category == "Waiter":
            continue  # ITBench collects the injections', not the waiters'
        obj = fault.args.get("kubernetesObject")
        if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
            continue
        named = obj["metadata"].get("name" if obj.get("kind") == "Namespace" else "namespace")
        if isinstance(named, str) and named:
            found.append(named)
    return [ns for ns in dict.fromkeys(found) if ns not in HARNESS_NAMESPACES]


def agent_rbac_objects(namespaces: Iterable[str], account: ServiceAccountRef | None = None) -> list[Obj]:
    """The objects that give the agent its access to ``namespaces`` (cluster-scoped ones once).

    With ``account``, an episode's own agent in a namespace set beside other episodes: that
    ServiceAccount instead of ITBench's, and only the per-namespace grants. The cluster-wide verbs
    (patching Nodes, PriorityClasses) serve faults that change what every episode shares, which a
    namespace set does not run, and an agent holding them could change its neighbours' cluster.
    """
    wanted = list(dict.fromkeys(namespaces))
    for ns in wanted:
        if not isinstance(ns, str) or not ns or ns == NAMESPACE_PLACEHOLDER:
            raise ValueError(f"agent_rbac_objects: invalid namespace {ns!r}")
    default = agent_service_account()
    out: list[Obj] = []
    per_namespace = [d for d in _documents() if d["metadata"].get("namespace") == NAMESPACE_PLACEHOLDER]
    once = [d for d in _documents() if d not in per_namespace]
    if account is not None:
        once = [d for d in once if d["kind"] == "ServiceAccount"]
    for doc in once:
        out.append(copy.deepcopy(doc))
    for ns in wanted:
        for doc in per_namespace:
            obj = copy.deepcopy(doc)
            obj["metadata"]["namespace"] = ns
            out.append(obj)
    if account is not None and account != default:
        for obj in out:
            if obj["kind"] == "ServiceAccount":
                obj["metadata"].update(namespace=account.namespace, name=account.name)
            for subject in obj.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and (subject.get("namespace"), subject.get("name")) == (default.namespace, default.name):
                    subject.update(namespace=account.namespace, name=account.name)
    return out
