"""Typed topology graph of a cluster, with the relations ITBench's kubernetes-topology-monitor uses.

Edges carry ``type`` (OWNS, SELECTS, MOUNTS, CALLS) and ``verbose_type`` exactly as the monitor
names them (``DEPLOYMENT_OWNS_REPLICASET``, ``NODE_RUNS_POD``, ``SERVICE_HAS_ENDPOINTS``, ...), plus
``CALLS`` between Services from the application's call graph. Node ids are ``namespace/Kind/name``
(cluster-scoped objects: ``Kind/name``) so they read like the entities agents report. The same
graph backs the agent's ``topology`` tool and the evaluation's distances.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import networkx as nx

#: Kinds without a namespace (the monitor's list, trimmed to what can appear in a workload cluster).
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Node", "Namespace", "PersistentVolume", "ClusterRole", "ClusterRoleBinding", "StorageClass",
        "CSIDriver", "CSINode", "PriorityClass", "RuntimeClass", "VolumeAttachment",
        "CustomResourceDefinition", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
        "APIService",
    }
)
#: Objects that describe history rather than structure.
_SKIPPED_KINDS = frozenset({"Event"})
CLUSTER_NODE = "K8Cluster/cluster"


class TopologyError(ValueError):
    """A bad request to the topology (unknown or ambiguous focus, bad depth)."""


def node_id(kind: str, name: str, namespace: str | None = None) -> str:
    return f"{namespace}/{kind}/{name}" if namespace and kind not in CLUSTER_SCOPED_KINDS else f"{kind}/{name}"


def build_topology(
    objects: Iterable[Mapping[str, Any]],
    call_graph: Iterable[tuple[str, str]] = (),
    namespace: str | None = None,
) -> nx.MultiDiGraph:
    """Build the typed topology from Kubernetes objects as the API returns them (plain dicts).

    ``call_graph`` holds (caller, callee) Service names — plain names resolve in the caller's
    namespace (``namespace`` if given), ``namespace/Service/name`` ids are taken as is; calls to a
    Service that does not exist are skipped (the Service may have been deleted by a fault).
    With ``namespace``, objects of other namespaces are left out, and cluster-scoped objects stay
    only if they touch the namespace (the Nodes running its pods, the PVs bound to its claims).
    """
    graph = nx.MultiDiGraph()
    graph.add_node(CLUSTER_NODE, kind="K8Cluster", name="cluster", namespace="")
    resources: dict[str, Mapping[str, Any]] = {}
    for obj in objects:
        if not isinstance(obj, Mapping):
            raise TopologyError(f"topology objects must be mappings, got {type(obj).__name__}")
        kind = obj.get("kind")
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not kind or not name:
            raise TopologyError(f"object without kind or metadata.name: {json.dumps(obj, default=str)[:200]}")
        if kind in _SKIPPED_KINDS:
            continue
        ns = None if kind in CLUSTER_SCOPED_KINDS else meta.get("namespace")
        nid = node_id(kind, name, ns)
        resources[nid] = obj
        graph.add_node(nid, kind=kind, name=name, namespace=ns or "", labels=dict(meta.get("labels") or {}),
                       api_version=obj.get("apiVersion", ""))
    for ns in {d["namespace"] for _, d in graph.nodes(data=True) if d["namespace"]}:
        if node_id("Namespace", ns) not in graph:
            graph.add_node(node_id("Namespace", ns), kind="Namespace", name=ns, namespace="", labels={}, api_version="v1")
    _ownership_edges(graph, resources)
    _runtime_and_mount_edges(graph, resources)
    _service_edges(graph, resources)
    _endpoint_edges(graph, resources)
    _call_edges(graph, call_graph, namespace)
    if namespace is not None:
        _restrict(graph, namespace)
    return graph


def _edge(graph: nx.MultiDiGraph, u: str, v: str, type_: str, verbose: str) -> None:
    if u in graph and v in graph and not graph.has_edge(u, v, key=verbose):
        graph.add_edge(u, v, key=verbose, type=type_, verbose_type=verbose)


def _ownership_edges(graph: nx.MultiDiGraph, resources: Mapping[str, Mapping[str, Any]]) -> None:
    for nid, obj in resources.items():
        kind = obj["kind"]
        meta = obj.get("metadata") or {}
        owned = False
        for ref in meta.get("ownerReferences") or []:
            owner_kind = ref.get("kind", "")
            owner = node_id(owner_kind, ref.get("name", ""), meta.get("namespace"))
            if owner in graph:
                _edge(graph, owner, nid, "OWNS", f"{owner_kind.upper()}_OWNS_{kind.upper()}")
                owned = True
        if owned:
            continue
        ns = graph.nodes[nid]["namespace"]
        if not ns:
            verbose = "CLUSTER_OWN_NAMESPACE" if kind == "Namespace" else "CLUSTER_OWN_RESOURCE"
            _edge(graph, CLUSTER_NODE, nid, "OWNS", verbose)
        elif kind not in ("Endpoints", "EndpointSlice"):
            _edge(graph, node_id("Namespace", ns), nid, "OWNS", f"NAMESPACE_OWNS_{kind.upper()}")
    for nid, data in list(graph.nodes(data=True)):
        if data["kind"] == "Namespace" and nid not in resources:
            _edge(graph, CLUSTER_NODE, nid, "OWNS", "CLUSTER_OWN_NAMESPACE")


def _runtime_and_mount_edges(graph: nx.MultiDiGraph, resources: Mapping[str, Mapping[str, Any]]) -> None:
    for nid, obj in resources.items():
        kind = obj["kind"]
        spec = obj.get("spec") or {}
        ns = graph.nodes[nid]["namespace"]
        if kind == "Pod":
            if spec.get("nodeName"):
                _edge(graph, node_id("Node", spec["nodeName"]), nid, "OWNS", "NODE_RUNS_POD")
            for volume in spec.get("volumes") or []:
                if (volume.get("configMap") or {}).get("name"):
                    _edge(graph, nid, node_id("ConfigMap", volume["configMap"]["name"], ns), "MOUNTS", "POD_MOUNTS_CONFIGMAP")
                if (volume.get("secret") or {}).get("secretName"):
                    _edge(graph, nid, node_id("Secret", volume["secret"]["secretName"], ns), "MOUNTS", "POD_MOUNTS_SECRET")
                if (volume.get("persistentVolumeClaim") or {}).get("claimName"):
                    claim = volume["persistentVolumeClaim"]["claimName"]
                    _edge(graph, nid, node_id("PersistentVolumeClaim", claim, ns), "MOUNTS", "POD_MOUNTS_PVC")
        elif kind == "PersistentVolume" and spec.get("claimRef"):
            claim = spec["claimRef"]
            pvc = node_id("PersistentVolumeClaim", claim.get("name", ""), claim.get("namespace"))
            _edge(graph, nid, pvc, "OWNS", "PV_BOUND_TO_PVC")


def _port_node(graph: nx.MultiDiGraph, namespace: str, name: str, port: Mapping[str, Any]) -> str:
    nid = node_id("Port", name, namespace)
    if nid not in graph:
        graph.add_node(nid, kind="Port", name=name, namespace=namespace, labels={}, api_version="v1",
                       port=str(port.get("port")), protocol=port.get("protocol", "TCP"))
    return nid


def _service_edges(graph: nx.MultiDiGraph, resources: Mapping[str, Mapping[str, Any]]) -> None:
    pods = [(nid, graph.nodes[nid]) for nid, obj in resources.items() if obj["kind"] == "Pod"]
    for nid, obj in resources.items():
        if obj["kind"] != "Service":
            continue
        ns = graph.nodes[nid]["namespace"]
        selector = (obj.get("spec") or {}).get("selector") or {}
        if selector:
            for pod, data in pods:
                if data["namespace"] == ns and all(data["labels"].get(k) == v for k, v in selector.items()):
                    _edge(graph, nid, pod, "SELECTS", "SERVICE_SELECTS_POD")
        for port in (obj.get("spec") or {}).get("ports") or []:
            name = f"{obj['metadata']['name']}-{port.get('port')}-{port.get('protocol', 'TCP')}"
            _edge(graph, nid, _port_node(graph, ns, name, port), "OWNS", "SERVICE_OWNS_PORT")


def _endpoint_edges(graph: nx.MultiDiGraph, resources: Mapping[str, Mapping[str, Any]]) -> None:
    for nid, obj in resources.items():
        if obj["kind"] != "Endpoints":
            continue
        ns = graph.nodes[nid]["namespace"]
        name = obj["metadata"]["name"]
        service = node_id("Service", name, ns)
        _edge(graph, service, nid, "OWNS", "SERVICE_HAS_ENDPOINTS")
        for subset in obj.get("subsets") or []:
            for address in subset.get("addresses") or []:
                target = address.get("targetRef") or {}
                if target.get("kind") != "Pod":
                    continue
                pod = node_id("Pod", target.get("name", ""), ns)
                if pod not in graph:
                    continue
                _edge(graph, nid, pod, "OWNS", "ENDPOINTS_TARGET_POD")
                for port in subset.get("ports") or []:
                    suffix = f"{port.get('port')}-{port.get('protocol', 'TCP')}"
                    pod_port = _port_node(graph, ns, f"{target['name']}-{suffix}", port)
                    _edge(graph, pod, pod_port, "OWNS", "POD_OWNS_PORT")
                    if service in graph:
                        service_port = _port_node(graph, ns, f"{name}-{suffix}", port)
                        _edge(graph, service, service_port, "OWNS", "SERVICE_OWNS_PORT")
                        _edge(graph, service_port, pod_port, "OWNS", "SERVICE_TARGETS_PORT")


def _call_edges(graph: nx.MultiDiGraph, call_graph: Iterable[tuple[str, str]], namespace: str | None) -> None:
    services: dict[str, list[str]] = {}
    for nid, data in graph.nodes(data=True):
        if data["kind"] == "Service":
            services.setdefault(data["name"], []).append(nid)
    for caller, callee in call_graph:
        if "/" in caller or "/" in callee:
            _edge(graph, caller, callee, "CALLS", "CALLS")
            continue
        for src in services.get(caller, []):
            ns = graph.nodes[src]["namespace"]
            if namespace is not None and ns != namespace:
                continue
            _edge(graph, src, node_id("Service", callee, ns), "CALLS", "CALLS")


def _restrict(graph: nx.MultiDiGraph, namespace: str) -> None:
    foreign = [
        n for n, d in graph.nodes(data=True)
        if (d["namespace"] and d["namespace"] != namespace) or (d["kind"] == "Namespace" and d["name"] != namespace)
    ]
    graph.remove_nodes_from(foreign)
    detached = [
        n for n, d in graph.nodes(data=True)
        if not d["namespace"] and d["kind"] not in ("Namespace", "K8Cluster")
        and not any(graph.nodes[m]["namespace"] == namespace for m in nx.all_neighbors(graph, n))
    ]
    graph.remove_nodes_from(detached)


def resolve_node(graph: nx.MultiDiGraph, ref: str) -> str:
    """``namespace/Kind/name``, ``Kind/name`` or a plain name -> the one node it denotes."""
    if ref in graph:
        return ref
    parts = ref.split("/")
    wanted_name = parts[-1].lower()
    wanted_kind = parts[-2].lower() if len(parts) >= 2 else None
    wanted_ns = parts[-3] if len(parts) >= 3 else None
    found = [
        n for n, d in graph.nodes(data=True)
        if d["name"].lower() == wanted_name
        and (wanted_kind is None or d["kind"].lower() == wanted_kind)
        and (wanted_ns is None or d["namespace"] == wanted_ns)
    ]
    if len(found) == 1:
        return str(found[0])
    if found:
        raise TopologyError(f"{ref!r} is ambiguous; use one of: {', '.join(sorted(found))}")
    close = difflib.get_close_matches(ref, [str(n) for n in graph.nodes], n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise TopologyError(f"no object {ref!r} in the topology.{hint}")


def topology_to_text(graph: nx.MultiDiGraph, focus: str | None = None, depth: int = 2) -> str:
    """JSON of the graph (or of the objects within ``depth`` relations of ``focus``), sorted."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise TopologyError(f"depth must be a non-negative integer, got {depth!r}")
    view: nx.MultiDiGraph = graph
    payload: dict[str, Any] = {}
    if focus is not None:
        center = resolve_node(graph, focus)
        keep = nx.single_source_shortest_path_length(graph.to_undirected(as_view=True), center, cutoff=depth)
        view = graph.subgraph(keep)
        payload.update(focus=center, depth=depth)
    payload["nodes"] = [
        {"id": n, "kind": d["kind"], "name": d["name"], "namespace": d["namespace"]}
        for n, d in sorted(view.nodes(data=True))
    ]
    payload["edges"] = sorted(
        ({"source": u, "target": v, "type": d["verbose_type"]} for u, v, d in view.edges(data=True)),
        key=lambda e: (e["source"], e["target"], e["type"]),
    )
    # one object per line, without padding: the graph of a real namespace stays inside the tool's output bound
    lines = [json.dumps({k: v for k, v in payload.items() if k not in ("nodes", "edges")}, sort_keys=True)[:-1]]
    for key in ("nodes", "edges"):
        items = ",\n".join(json.dumps(item, sort_keys=True, separators=(",", ":")) for item in payload[key])
        lines.append(f'"{key}":[\n{items}\n]')
    head = lines[0] + ("," if lines[0] != "{" else "")
    return head + "\n" + ",\n".join(lines[1:]) + "}"
