"""The agent's credential on a real cluster: ITBench's ServiceAccount and bindings, and a token for it.

The objects are ``agent-rbac.yaml`` (the same ones the twin serves); the token comes from the
``serviceaccounts/token`` subresource (TokenRequest), so it expires and dies with the account, and
the agent's kubeconfig holds nothing of the admin's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import dynamic

from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.kubernetes.provision import provision
from itbench_gym.backends.rbac import ServiceAccountRef, agent_rbac_objects


def grant(objects: dynamic.DynamicClient, namespaces: list[str], account: ServiceAccountRef | None = None) -> list[str]:
    """Create the agent's RBAC objects that are missing; what was created (a harness log)."""
    return provision(objects, agent_rbac_objects(namespaces, account))


def agent_kubeconfig(objects: dynamic.DynamicClient, path: Path, namespace: str, seconds: int, account: ServiceAccountRef) -> Path:
    """A kubeconfig for the agent's ServiceAccount (a fresh TokenRequest token) on the admin's server."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}}
    answer = objects.request("post", f"/api/v1/namespaces/{account.namespace}/serviceaccounts/{account.name}/token", body=body)
    token = str(answer.status.token)
    configuration: Any = objects.client.configuration
    ca_pem = Path(configuration.ssl_ca_cert).read_bytes() if configuration.ssl_ca_cert else None
    return write_kubeconfig(path, configuration.host, token, ca_pem, namespace=namespace,
                            insecure=not configuration.verify_ssl)
