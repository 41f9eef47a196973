"""Metrics the cluster's own exporters publish, derived from cluster state (not from the app)."""

from .cadvisor import Cadvisor
from .kube_state import kube_state_metrics

__all__ = ["Cadvisor", "kube_state_metrics"]
