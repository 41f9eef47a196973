"""Faults that edit a workload's containers and init containers (ITBench's container and kubelet
faults): the same strategic-merge patches, images and created objects as ITBench's tasks.

Each patch names containers by ``name`` (their merge key), so it changes only what the fault sets
and leaves the rest of the pod template as it was; removal replays the journal.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext, ObjectRef
from itbench_gym.faults.operations.common import Obj, edited_containers, target
from itbench_gym.lang import yamltext

#: ITBench's name for the init container it adds.
INIT_CONTAINER = "worker"
#: The failing readiness probe ITBench sets: a port nothing listens on.
FAILING_READINESS_PROBE = {"failureThreshold": 3, "httpGet": {"path": "/ready", "port": 40, "scheme": "HTTP"},
                           "periodSeconds": 5, "successThreshold": 1, "timeoutSeconds": 3}
#: The requests and limits ITBench sets for insufficient resources.
INSUFFICIENT_RESOURCES = {"cpu": "5m", "memory": "5Mi"}
#: ``defaultMode: 0755`` of ITBench's configMap volumes.
SCRIPT_MODE = 0o755


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    data: dict[str, Any] = yamltext.load(Path(__file__).with_name("containers.yaml").read_text())
    return data


def _patch_containers(ctx: FaultContext, args: Mapping[str, Any], fields: Mapping[str, Any],
                      spec: Mapping[str, Any] | None = None) -> str:
    """One strategic-merge patch: ``fields`` on each edited container, ``spec`` on the pod template."""
    ref, names = edited_containers(ctx, args)
    template = {**(spec or {}), "containers": [{"name": name, **fields} for name in names]}
    ctx.patch(ref, {"spec": {"template": {"spec": template}}})
    return f"{ref}: {', '.join(names)}: {', '.join(sorted(fields))}{' and ' + ', '.join(spec) if spec else ''}"


def set_invalid_command(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    return _patch_containers(ctx, args, {"command": ["invalid-command"]})


def set_nonexistent_image(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    return _patch_containers(ctx, args, {"image": _data()["images"]["nonexistent"]})


def set_unsupported_architecture_image(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Pin to a worker node drawn with the seed (ITBench draws at random) and set the image built
    for the other architecture."""
    nodes = ctx.resource("v1", "Node").get(label_selector="!node-role.kubernetes.io/control-plane").to_dict()
    workers = sorted(nodes.get("items") or [], key=lambda n: n["metadata"]["name"])
    if not workers:
        raise FaultError("no worker node (a Node without the node-role.kubernetes.io/control-plane label)")
    node = random.Random(ctx.seed).choice(workers)
    arch = ((node.get("status") or {}).get("nodeInfo") or {}).get("architecture")
    images: dict[str, str] = _data()["images"]["unsupported"]
    if arch not in images:
        raise FaultError(f"node {node['metadata']['name']} is {arch!r}; the fault has images for {', '.join(images)} nodes")
    hostname = node["metadata"]["name"]
    return _patch_containers(ctx, args, {"image": images[arch]}, {"nodeSelector": {"kubernetes.io/hostname": hostname}})


def set_failing_readiness_probe(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    return _patch_containers(ctx, args, {"readinessProbe": FAILING_READINESS_PROBE})


def set_insufficient_resources(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    return _patch_containers(ctx, args, {"resources": {"limits": INSUFFICIENT_RESOURCES, "requests": INSUFFICIENT_RESOURCES}})


def remove_resource_limits(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """``limits: null`` in a strategic merge patch deletes the limits and keeps the requests."""
    return _patch_containers(ctx, args, {"resources": {"limits": None}})


def _add_init_container(ctx: FaultContext, args: Mapping[str, Any], init: Obj, volumes: list[Obj]) -> str:
    ref = target(args)
    ctx.require(ref)
    spec: Obj = {"initContainers": [{"name": INIT_CONTAINER, **init}]}
    if volumes:
        spec["volumes"] = volumes
    ctx.patch(ref, {"spec": {"template": {"spec": spec}}})
    return f"{ref}: init container {INIT_CONTAINER} ({init['image']})"


def add_crashing_init_container(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """ConfigMap ``<workload>-config`` (script + malformed config) and an init container running the
    script from it; an existing ConfigMap of that name gets the two keys (ITBench's ``state: present``)."""
    ref = target(args)
    data = _data()
    name = f"{ref.name}-config"
    config_map = ObjectRef("v1", "ConfigMap", name, ref.namespace)
    keys = {"config": data["invalid_config"], "script": data["load_config_script"]}
    if ctx.get(config_map) is None:
        ctx.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ref.namespace},
                    "data": keys})
    else:
        ctx.patch(config_map, {"data": keys}, "merge")
    home = data["python_home"]
    init = {"image": data["images"]["python"], "command": ["/bin/sh"], "args": ["-c", "python3.14 ~/scripts/load_config.py"],
            "volumeMounts": [{"name": "config", "mountPath": f"{home}/config", "readOnly": True},
                             {"name": "scripts", "mountPath": f"{home}/scripts", "readOnly": True}]}
    volumes = [{"name": "config", "configMap": {"name": name, "defaultMode": SCRIPT_MODE,
                                                "items": [{"key": "config", "path": "config.json"}]}},
               {"name": "scripts", "configMap": {"name": name, "defaultMode": SCRIPT_MODE,
                                                 "items": [{"key": "script", "path": "load_config.py"}]}}]
    return f"ConfigMap {ref.namespace}/{name}; " + _add_init_container(ctx, args, init, volumes)


def add_hanging_init_container(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    init = {"image": _data()["images"]["minimal"], "command": ["/bin/sh"], "args": ["-c", "sleep infinity"]}
    return _add_init_container(ctx, args, init, [])


OPERATIONS = {
    "set_invalid_command": set_invalid_command,
    "set_nonexistent_image": set_nonexistent_image,
    "set_unsupported_architecture_image": set_unsupported_architecture_image,
    "set_failing_readiness_probe": set_failing_readiness_probe,
    "set_insufficient_resources": set_insufficient_resources,
    "remove_resource_limits": remove_resource_limits,
    "add_crashing_init_container": add_crashing_init_container,
    "add_hanging_init_container": add_hanging_init_container,
}
