"""Valkey faults: a password its clients do not send, and a process that fills its memory.

Both edit the Valkey Deployment's container the way ITBench's tasks do (same Secret, ConfigMap,
command, args, env, volume and mount), so the rollout's new pod runs the changed process.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.operations.common import target, template_container

PASSWORD_SECRET = "valkey-credentials"
PASSWORD_KEY = "valkey-password"
PASSWORD = "invalid_password"
SCRIPT_CONFIG_MAP = "valkey-storage-script"
SCRIPT_DIR = "/data/scripts"
SCRIPT_FILE = "fill_storage.sh"
#: The storage filler ITBench mounts, in our own words: start valkey-server; after 20 s store 1 MiB
#: of random bytes under one of 10000 keys every second, until the memory limit ends it.
FILL_SCRIPT = """#!/bin/sh
set -eu

KEYS=10000

write_forever() {
    sleep 20  # let valkey-server come up first
    while true; do
        key=$((RANDOM % KEYS + 1))
        head -c 1m /dev/urandom | valkey-cli -x SET "largekey$key"
        sleep 1
    done
}

write_forever &
valkey-server
"""


def _put(ctx: FaultContext, obj: dict[str, Any]) -> None:
    """``state: present``: create the object, or bring an existing one to these fields."""
    ref = ObjectRef.of(obj)
    if ctx.get(ref) is None:
        ctx.create(obj)
    else:
        ctx.patch(ref, {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}, "merge")


def change_valkey_password(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Secret valkey-credentials, and the container run as ``valkey-server --requirepass $(VALKEY_PASSWORD)``."""
    ref = target(args)
    name = args["container"]["name"]
    template_container(ctx.require(ref), name, ref)
    _put(ctx, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": PASSWORD_SECRET, "namespace": ref.namespace},
               "stringData": {PASSWORD_KEY: PASSWORD}})
    container = {
        "name": name, "command": ["valkey-server"], "args": ["--requirepass", "$(VALKEY_PASSWORD)"],
        "env": [{"name": "VALKEY_PASSWORD", "valueFrom": {"secretKeyRef": {"name": PASSWORD_SECRET, "key": PASSWORD_KEY}}}],
    }
    ctx.patch(ref, {"spec": {"template": {"spec": {"containers": [container]}}}})
    return f"{ref}: valkey-server --requirepass from Secret {ref.namespace}/{PASSWORD_SECRET}"


def fill_valkey_memory(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """ConfigMap valkey-storage-script, mounted executable at /data/scripts, run as the container's command."""
    ref = target(args)
    name = args["container"]["name"]
    template_container(ctx.require(ref), name, ref)
    _put(ctx, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SCRIPT_CONFIG_MAP, "namespace": ref.namespace},
               "data": {"script": FILL_SCRIPT}})
    container = {
        "name": name, "command": ["/bin/sh", "-c", f"'{SCRIPT_DIR}/{SCRIPT_FILE}'"],
        "volumeMounts": [{"name": "scripts", "mountPath": SCRIPT_DIR}],
    }
    volume = {"name": "scripts", "configMap": {"name": SCRIPT_CONFIG_MAP, "defaultMode": 0o755,
                                               "items": [{"key": "script", "path": SCRIPT_FILE}]}}
    body = {"spec": {"template": {"spec": {"containers": [container], "securityContext": {"fsGroup": 1000}, "volumes": [volume]}}}}
    ctx.patch(ref, body)
    return f"{ref}: container {name} runs {SCRIPT_DIR}/{SCRIPT_FILE} from ConfigMap {ref.namespace}/{SCRIPT_CONFIG_MAP}"


OPERATIONS = {
    "change_valkey_password": change_valkey_password,
    "fill_valkey_memory": fill_valkey_memory,
}
