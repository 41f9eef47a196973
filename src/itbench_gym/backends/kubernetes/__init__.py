"""The real-cluster backend (``backend="kubernetes"``): the same scenarios on a Kubernetes cluster."""

from itbench_gym.backends.kubernetes.backend import KubernetesBackend, scenario_namespaces
from itbench_gym.backends.kubernetes.config import ClusterConfig, ClusterConfigError

__all__ = ["ClusterConfig", "ClusterConfigError", "KubernetesBackend", "scenario_namespaces"]
