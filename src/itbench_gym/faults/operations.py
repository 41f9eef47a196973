"""The Kubernetes API operations behind each catalogue entry (official ``kubernetes`` client)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.lang.timestamps import rfc3339
from itbench_gym.spec.appfacts import AppFacts


def _target(args: Mapping[str, Any]) -> tuple[str, str]:
    meta = args["kubernetesObject"]["metadata"]
    return meta["namespace"], meta["name"]


def set_feature_flag(api: client.ApiClient, args: Mapping[str, Any], now: float, app: AppFacts) -> str:
    """Set ``flags.<name>.defaultVariant`` in the flagd ConfigMap (ITBench's injection), under the
    key app.yaml ``flags.key`` names."""
    if app.flags is None:
        raise FaultError(f"app {app.name!r} has no feature flags (envs/{app.directory.name}/app.yaml flags)")
    key = app.flags.key
    namespace, name = _target(args)
    flag, state = args["flag"]["name"], args["flag"]["state"]
    core = client.CoreV1Api(api)
    try:
        cm = core.read_namespaced_config_map(name, namespace)
    except ApiException as exc:
        raise FaultError(f"cannot read ConfigMap {namespace}/{name}: {exc.reason}") from None
    raw = (cm.data or {}).get(key)
    if raw is None:
        raise FaultError(f"ConfigMap {namespace}/{name} has no key {key!r}")
    config = json.loads(raw)
    flags = config.get("flags", {})
    if flag not in flags:
        raise FaultError(f"flag {flag!r} is not defined in {namespace}/{name}; defined: {', '.join(sorted(flags))}")
    variants = flags[flag].get("variants", {})
    if state not in variants:
        raise FaultError(f"flag {flag!r} has no variant {state!r}; variants: {', '.join(sorted(variants))}")
    flags[flag]["defaultVariant"] = state
    body = {"data": {key: json.dumps(config, indent=2)}}
    core.patch_namespaced_config_map(name, namespace, body)
    return f"ConfigMap {namespace}/{name}: flags.{flag}.defaultVariant={state}"


def restart_workload(api: client.ApiClient, args: Mapping[str, Any], now: float, app: AppFacts) -> str:
    """Same patch as ``kubectl rollout restart``: a new ``restartedAt`` template annotation."""
    namespace, name = _target(args)
    kind = args["kubernetesObject"]["kind"]
    apps = client.AppsV1Api(api)
    stamp = rfc3339(now)
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


def create_chaos_schedule(api: client.ApiClient, args: Mapping[str, Any], now: float, app: AppFacts) -> str:
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


#: Operation name -> fn(admin API client, fault arguments, now, the app's facts) -> injection log line.
OPERATIONS: dict[str, Callable[[client.ApiClient, Mapping[str, Any], float, AppFacts], str]] = {
    "set_feature_flag": set_feature_flag,
    "restart_workload": restart_workload,
    "create_chaos_schedule": create_chaos_schedule,
}
