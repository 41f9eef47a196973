"""The real-cluster path is the in-process path: faults injected with the ``kubernetes`` client from
outside, against a twin that ``itbench-gym serve --healthy`` runs in another process, leave the same
objects as the harness's own injection into an in-process twin; removing them restores both alike."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from conftest import served_twin
from itbench_gym.faults import FaultContext, inject_faults, remove_faults
from itbench_gym.faults.context import ObjectRef
from itbench_gym.paths import envs_dir
from itbench_gym.spec import FaultRef
from itbench_gym.spec.appfacts import load_app_facts

#: A feature flag and a Chaos Mesh schedule: a change of an app object and a created harness object.
FAULTS = (
    FaultRef("opentelemetry-demo-feature-flag", {
        "flag": {"name": "adFailure", "state": "on"},
        "kubernetesObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flagd-config", "namespace": "otel-demo"}},
    }),
    FaultRef("scheduled-chaos-mesh-experiment", {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule",
                             "metadata": {"name": "checkout-pod-failure", "namespace": "chaos-mesh"}},
        "scheduleSpec": {"type": "PodChaos", "podChaos": {"action": "pod-failure", "mode": "all", "selector": {
            "labelSelectors": {"app.kubernetes.io/component": "checkout"}, "namespaces": ["otel-demo"]}}},
    }),
)
_VOLATILE = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"}
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with served_twin(tmp_path_factory.mktemp("serve-healthy"), "SRE-CacheFailure-v0") as line:
        yield line


def _outside_context(admin_kubeconfig: str) -> FaultContext:
    """What a real cluster gets: the kubernetes client on a kubeconfig, the wall clock."""
    api = config.new_client_from_config(config_file=admin_kubeconfig)
    return FaultContext(api=api, app=load_app_facts(envs_dir() / "astronomy-shop"), now=time.time, advance=time.sleep)


def _normal(value: Any) -> Any:
    """An object without what differs between two clusters by nature: uids, versions, timestamps."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        return "<time>"
    return value


def _state(ctx: FaultContext, refs: list[ObjectRef]) -> dict[str, Any]:
    return {str(ref): _normal(ctx.get(ref)) for ref in refs}


def test_outside_injection_matches_in_process(served: dict[str, Any], shop_twin: Any) -> None:
    shop_twin.reset()
    inside = shop_twin.context()
    outside = _outside_context(served["admin_kubeconfig"])
    try:
        inject_faults(FAULTS, outside)
        inject_faults(FAULTS, inside)
        refs = [change.ref for change in inside.journal]
        assert [c.ref for c in outside.journal] == refs
        assert [_normal(c.before) for c in outside.journal] == [_normal(c.before) for c in inside.journal]
        injected = _state(inside, refs)
        assert _state(outside, refs) == injected
        assert injected["Schedule chaos-mesh/checkout-pod-failure"] is not None
        remove_faults(outside)
        remove_faults(inside)
        assert _state(outside, refs) == _state(inside, refs)
        assert _state(inside, refs)["Schedule chaos-mesh/checkout-pod-failure"] is None
    finally:
        outside.close()
        inside.close()


def test_healthy_serve_has_no_faults(served: dict[str, Any]) -> None:
    ctx = _outside_context(served["admin_kubeconfig"])
    try:
        flags = ctx.require(ObjectRef("v1", "ConfigMap", "flagd-config", "otel-demo"))["data"]["demo.flagd.json"]
        assert json.loads(flags)["flags"]["recommendationCacheFailure"]["defaultVariant"] == "off"
    finally:
        ctx.close()
    assert Path(served["kubeconfig"]).is_file()
