"""Metrics the cluster's own exporters publish, derived from cluster state (not from the app)."""

from .cadvisor import Cadvisor
from .kube_state import KubeStateMetrics, kube_state_metrics
from .node_exporter import NodeExporter

__all__ = ["Cadvisor", "KubeStateMetrics", "NodeExporter", "kube_state_metrics"]
