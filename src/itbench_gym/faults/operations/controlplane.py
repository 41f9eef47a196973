"""Control-plane faults: load on the Kubernetes API server (fault ``kubernetes-api-server-request-surge``).

The objects are ITBench's (``inject_kubernetes_api_server_request_surge.yaml``): a ServiceAccount
with a read-only ClusterRole, a ConfigMap holding the load script and its requirements, and a
Deployment of five generator pods. The script is the project's own, with the behaviour of ITBench's
``generate_load.py``: list every pod of the cluster, ``RPS`` times a second, for ``DURATION`` seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.operations.common import Obj

NAME = "workload-scanner"
IMAGE = "registry.access.redhat.com/ubi10/python-314-minimal:10.2-1784704196"
REPLICAS = 5
#: ITBench's ``DURATION``: one hour of load.
DURATION_SECONDS = 3600
#: ``k8s`` with ``wait: true`` (the module's default ``wait_timeout``).
CREATE_WAIT_SECONDS = 120.0
REQUIREMENTS = "kubernetes==36.0.3"
SCRIPT = '''"""List every pod of the cluster RPS times a second for DURATION seconds, from inside the cluster."""
import os
import sys
import time

from kubernetes import client, config

try:
    rps, duration = int(os.environ["RPS"]), int(os.environ["DURATION"])
except (KeyError, ValueError):
    sys.exit("error: RPS and DURATION must be set to integers")
if rps <= 0 or duration <= 0:
    sys.exit("error: RPS and DURATION must be positive")
config.load_incluster_config()
api = client.CoreV1Api()
print(f"listing pods of all namespaces {rps} times a second for {duration} s", flush=True)
sent, end = 0, time.monotonic() + duration
while time.monotonic() < end:
    try:
        api.list_pod_for_all_namespaces(watch=False)
    except Exception as exc:
        print(f"request failed: {exc}", flush=True)
    sent += 1
    if sent % (rps * 10) == 0:
        print(f"sent {sent} requests", flush=True)
    time.sleep(1.0 / rps)
print(f"done: {sent} requests", flush=True)
'''
ITBENCH_LABELS = {"app.kubernetes.io/component": "workload", "app.kubernetes.io/managed-by": "ITBench"}
_READ = ["get", "list", "watch"]


def _deployment(namespace: str, rps: int) -> Obj:
    labels = {"app.kubernetes.io/name": NAME}
    container = {
        "name": "load-generator", "image": IMAGE,
        "env": [{"name": "RPS", "value": str(rps)}, {"name": "DURATION", "value": str(DURATION_SECONDS)}],
        "command": ["/bin/sh"],
        "args": ["-c", "python3.14 -m pip install -r ~/deps/requirements.txt && python3.14 ~/scripts/generate_load.py"],
        "volumeMounts": [{"name": "dependencies", "mountPath": "/opt/app-root/src/deps", "readOnly": True},
                         {"name": "scripts", "mountPath": "/opt/app-root/src/scripts", "readOnly": True}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
    }
    volumes = [{"name": "scripts", "configMap": {"name": "generator-script", "items": [{"key": "script", "path": "generate_load.py"}]}},
               {"name": "dependencies", "configMap": {"name": "generator-script", "items": [{"key": "deps", "path": "requirements.txt"}]}}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME, "namespace": namespace},
            "spec": {"replicas": REPLICAS, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container], "serviceAccountName": NAME, "volumes": volumes}}}}


def _available(ctx: FaultContext, ref: ObjectRef) -> bool:
    status = (ctx.get(ref) or {}).get("status") or {}
    return status.get("availableReplicas") == REPLICAS


def surge_api_server_requests(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    namespace = args["kubernetesObject"]["metadata"]["name"]
    rps = int(args["loadGenerator"]["options"]["requestsPerSecond"])
    ctx.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": namespace}})
    ctx.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": NAME, "labels": dict(ITBENCH_LABELS)},
                "rules": [{"apiGroups": [""], "resources": ["pods", "services", "nodes", "namespaces"], "verbs": _READ},
                          {"apiGroups": ["apps"], "resources": ["deployments", "replicasets", "statefulsets"], "verbs": _READ},
                          {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": _READ}]})
    ctx.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": NAME, "labels": dict(ITBENCH_LABELS)},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
                "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]})
    ctx.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "generator-script", "namespace": namespace},
                "data": {"deps": REQUIREMENTS, "script": SCRIPT}})
    ctx.create(_deployment(namespace, rps))
    ref = ObjectRef("apps/v1", "Deployment", NAME, namespace)
    if not ctx.wait_for(lambda: _available(ctx, ref), CREATE_WAIT_SECONDS):
        raise FaultError(f"{ref} did not become available within {CREATE_WAIT_SECONDS:.0f} s")
    return f"{ref}: {REPLICAS} pods listing all pods at {rps} requests/s each"


OPERATIONS = {"surge_api_server_requests": surge_api_server_requests}
