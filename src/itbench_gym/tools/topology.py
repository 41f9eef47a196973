"""The typed topology of the application (ITBench's topology monitor), built from the Kubernetes API."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import requests
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult, bound_output
from itbench_gym.topology import TopologyError, build_topology, topology_to_text

_NAMESPACED = (
    ("Pod", "CoreV1Api", "list_namespaced_pod"),
    ("Service", "CoreV1Api", "list_namespaced_service"),
    ("Endpoints", "CoreV1Api", "list_namespaced_endpoints"),
    ("ConfigMap", "CoreV1Api", "list_namespaced_config_map"),
    ("Secret", "CoreV1Api", "list_namespaced_secret"),
    ("PersistentVolumeClaim", "CoreV1Api", "list_namespaced_persistent_volume_claim"),
    ("Deployment", "AppsV1Api", "list_namespaced_deployment"),
    ("ReplicaSet", "AppsV1Api", "list_namespaced_replica_set"),
    ("StatefulSet", "AppsV1Api", "list_namespaced_stateful_set"),
    ("DaemonSet", "AppsV1Api", "list_namespaced_daemon_set"),
)


def list_topology_objects(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    """The objects a topology is built from, as plain API dicts; kinds the caller may not read are skipped."""
    out: list[dict[str, Any]] = []
    listers: list[tuple[str, Callable[..., Any], tuple[str, ...]]] = [
        (kind, getattr(getattr(client, cls)(api), fn), (namespace,)) for kind, cls, fn in _NAMESPACED
    ]
    listers.append(("Node", client.CoreV1Api(api).list_node, ()))
    for kind, lister, lister_args in listers:
        try:
            items = lister(*lister_args).items
        except ApiException as exc:
            if exc.status in (401, 403, 404):
                continue
            raise
        for item in items:
            obj = api.sanitize_for_serialization(item)
            obj.setdefault("kind", kind)
            out.append(obj)
    return out


def trace_call_graph(jaeger_url: str | None, end_ms: float) -> list[tuple[str, str]]:
    """Service call edges from Jaeger's dependency API (empty without traces)."""
    if jaeger_url is None:
        return []
    resp = requests.get(f"{jaeger_url}/api/dependencies", params={"endTs": int(end_ms), "lookback": 3_600_000}, timeout=30)
    resp.raise_for_status()
    return sorted({(d["parent"], d["child"]) for d in resp.json().get("data") or [] if d["parent"] != d["child"]})


class TopologyTool:
    name = "topology"
    description = (
        "Show how the application's objects relate (ownership, Service→Pod selection, endpoints, "
        "mounted ConfigMaps/Secrets, nodes, and service calls seen in traces) as JSON. "
        "`topology` for everything, or args {focus: 'Service/recommendation', depth: 2}."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "focus": {"type": "string", "description": "An object such as Deployment/frontend or <namespace>/Pod/<name>."},
            "depth": {"type": "integer", "minimum": 0, "maximum": 6, "description": "Relations to follow from focus (default 2)."},
            "namespace": {"type": "string"},
        },
    }
    cost_seconds = 5.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        text = str(args.get("text", "")).strip()
        focus = args.get("focus") or (text.split()[0] if text else None)
        depth = args.get("depth", 2)
        if isinstance(depth, str) and depth.isdigit():
            depth = int(depth)
        if not isinstance(depth, int) or isinstance(depth, bool) or not 0 <= depth <= 6:
            raise ToolInputError(f"depth must be an integer from 0 to 6, got {depth!r}")
        api = config.new_client_from_config(config_file=str(ctx.endpoints.kubeconfig))
        try:
            namespace = args.get("namespace") or config.list_kube_config_contexts(str(ctx.endpoints.kubeconfig))[1]["context"].get("namespace", "default")
            objects = list_topology_objects(api, namespace)
        except ApiException as exc:
            return ToolResult(text=f"cannot read the cluster: {exc.status} {exc.reason}", exit_status=1)
        finally:
            api.close()
        try:
            calls = trace_call_graph(ctx.endpoints.jaeger, ctx.now() * 1000)
        except (requests.RequestException, ValueError, KeyError):
            calls = []
        try:
            graph = build_topology(objects, calls, namespace)
            rendered = topology_to_text(graph, focus=focus, depth=depth)
        except TopologyError as exc:
            raise ToolInputError(str(exc)) from None
        return ToolResult(text=bound_output(rendered), data={"nodes": graph.number_of_nodes(), "edges": graph.number_of_edges()})
