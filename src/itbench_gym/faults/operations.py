"""The Kubernetes API operations behind each catalogue entry (official ``kubernetes`` client)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from itbench_gym.faults.catalogue import FaultError

FLAGD_KEY = "demo.flagd.json"


def _target(args: Mapping[str, Any]) -> tuple[str, str]:
    meta = args["kubernetesObject"]["metadata"]
    return meta["namespace"], meta["name"]


def set_feature_flag(api: client.ApiClient, args: Mapping[str, Any], now: float) -> str:
    """Set ``flags.<name>.defaultVariant`` in the flagd ConfigMap (ITBench's injection)."""
    namespace, name = _target(args)
    flag, state = args["flag"]["name"], args["flag"]["state"]
    core = client.CoreV1Api(api)
    try:
        cm = core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        raise FaultError(f"cannot read ConfigMap {namespace}/{name}: {exc.reason}") from None
    raw = (cm.data or {}).get(FLAGD_KEY)
    if raw is None:
        raise FaultError(f"ConfigMap {namespace}/{name} has no key {FLAGD_KEY!r}")
    config = json.loads(raw)
    flags = config.get("flags", {})
    if flag not in flags:
        raise FaultError(f"flag {flag!r} is not defined in {namespace}/{name}; defined: {', '.join(sorted(flags))}")
    variants = flags[flag].get("variants", {})
    if state not in variants:
        raise FaultError(f"flag {flag!r} has no variant {state!r}; variants: {', '.join(sorted(variants))}")
    flags[flag]["defaultVariant"] = state
    body = {"data": {FLAGD_KEY: json.dumps(config, indent=2)}}
    core.patch_namespaced_config_map(name, namespace, body)
    return f"ConfigMap {namespace}/{name}: flags.{flag}.defaultVariant={state}"


def restart_workload(api: client.ApiClient, args: Mapping[str, Any], now: float) -> str:
    """Same patch as ``kubectl rollout restart``: a new ``restartedAt`` template annotation."""
    namespace, name = _target(args)
    kind = args["kubernetesObject"]["kind"]
    apps = client.AppsV1Api(api)
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}}
    patch: dict[str, Callable[..., Any]] = {
        "Deployment": apps.patch_namespaced_deployment,
        "StatefulSet": apps.patch_namespaced_stateful_set,
        "DaemonSet": apps.patch_namespaced_daemon_set,
    }
    try:
        patch[kind](name, namespace, body)
    except ApiException as exc:
        raise FaultError(f"cannot restart {kind} {namespace}/{name}: {exc.reason}") from None
    return f"{kind} {namespace}/{name} restarted at {stamp}"


#: What ITBench's scenarios leave out of ``scheduleSpec``: a run every minute, one at a time.
SCHEDULE_DEFAULTS = {"schedule": "@every 1m", "historyLimit": 1, "concurrencyPolicy": "Forbid"}
_SCHEDULE_KEYS = {"PodChaos": "podChaos", "NetworkChaos": "networkChaos", "StressChaos": "stressChaos",
                  "HTTPChaos": "httpChaos", "JVMChaos": "jvmChaos", "IOChaos": "ioChaos"}


def create_chaos_schedule(api: client.ApiClient, args: Mapping[str, Any], now: float) -> str:
    """Create the Chaos Mesh ``Schedule`` (a custom object) that ITBench's fault describes."""
    namespace, name = _target(args)
    spec = {**SCHEDULE_DEFAULTS, **args["scheduleSpec"]}
    kind = spec["type"]
    if not isinstance(spec.get(_SCHEDULE_KEYS[kind]), dict):
        raise FaultError(f"args.scheduleSpec.{_SCHEDULE_KEYS[kind]}: required for type {kind}")
    body = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "chaos-mesh.org", "v1alpha1", namespace, "schedules", body)
    except ApiException as exc:
        raise FaultError(f"cannot create Schedule {namespace}/{name}: {exc.reason}: {exc.body}") from None
    return f"Schedule {namespace}/{name}: {kind} {spec['schedule']}"


OPERATIONS: dict[str, Callable[[client.ApiClient, Mapping[str, Any], float], str]] = {
    "set_feature_flag": set_feature_flag,
    "restart_workload": restart_workload,
    "create_chaos_schedule": create_chaos_schedule,
}
