"""Which labels a log stream carries in the twin's Loki, and its per-line structured metadata.

ITBench ships the OTel demo's logs to Loki over OTLP; Loki indexes a fixed set of resource
attributes as stream labels (dots become underscores). Clusters that scrape container stdout with
Grafana Alloy or Promtail add the Kubernetes discovery labels instead. The twin serves both sets,
so queries written for either stack select the same streams (docs/logql.md lists them).
"""

from __future__ import annotations

from itbench_gym.backends.sim.app.logs import StreamInfo

from .matching import detect_level

#: Per-line structured metadata Loki attaches at ingestion (not a stream label).
DETECTED_LEVEL = "detected_level"


def stream_labels(info: StreamInfo) -> dict[str, str]:
    """Index labels of one container's log stream."""
    return {
        # Loki's default OTLP index labels for the resource attributes the demo's collector sets.
        "service_name": info.service,
        "k8s_namespace_name": info.namespace,
        "k8s_pod_name": info.pod,
        "k8s_container_name": info.container,
        "k8s_deployment_name": info.workload,
        # Kubernetes service discovery labels (Alloy / Promtail conventions).
        "namespace": info.namespace,
        "pod": info.pod,
        "container": info.container,
        "job": f"{info.namespace}/{info.container}",
        "app": info.service,
    }


def line_level(line: str) -> str:
    """The ``detected_level`` structured metadata Loki's distributor attaches to a line."""
    return detect_level(line)
