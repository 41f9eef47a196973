"""Patch semantics the way kubectl exercises them (merge, JSON, strategic merge, server-side apply)."""

from __future__ import annotations

from typing import Any

import pytest

from itbench_gym.backends.sim.kube import patch as p
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.kube.resources import ResourceRegistry
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.clock import SimClock

POD_SPEC = p.SCHEMAS["Pod"]["spec"]


def spec() -> dict[str, Any]:
    return {"containers": [
        {"name": "app", "image": "a:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
         "ports": [{"containerPort": 80, "protocol": "TCP"}]},
        {"name": "sidecar", "image": "s:1"},
    ], "volumes": [{"name": "v", "emptyDir": {}}], "tolerations": [{"key": "x"}]}


def test_strategic_merge_lists_by_key() -> None:
    out = p.strategic_merge(spec(), {"containers": [{"name": "app", "image": "a:2",
                                                     "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]},
                            POD_SPEC)
    app = out["containers"][0]
    assert app["image"] == "a:2" and out["containers"][1]["name"] == "sidecar"
    assert app["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert app["ports"] == [{"containerPort": 80, "protocol": "TCP"}]


def test_strategic_merge_directives() -> None:
    out = p.strategic_merge(spec(), {"containers": [{"name": "sidecar", "$patch": "delete"}],
                                     "tolerations": [{"key": "y"}]}, POD_SPEC)
    assert [c["name"] for c in out["containers"]] == ["app"]
    assert out["tolerations"] == [{"key": "y"}]  # no patch strategy: replaced
    out = p.strategic_merge(spec(), {"containers": [{"name": "new", "image": "n"}, {"$patch": "replace"}]}, POD_SPEC)
    assert [c["name"] for c in out["containers"]] == ["new"]
    out = p.strategic_merge(spec(), {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
                                     "containers": [{"name": "app", "image": "a:3"}]}, POD_SPEC)
    assert [c["name"] for c in out["containers"]] == ["sidecar", "app"]
    out = p.strategic_merge({"metadata": {"finalizers": ["a", "b"]}},
                            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"]}},
                            p.schema_for(ResourceRegistry().by_kind("Pod")))
    assert out["metadata"]["finalizers"] == ["b", "c"]
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}
    out = p.strategic_merge({"strategy": strategy}, {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}},
                            p.SCHEMAS["Deployment"]["spec"])
    assert out["strategy"] == {"type": "Recreate"}
    out = p.strategic_merge({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}, {})
    assert out == {"a": {"c": 2}}


def test_merge_and_json_patch() -> None:
    rt = ResourceRegistry().by_kind("Deployment")
    cur = {"spec": {"replicas": 1, "template": {"spec": spec()}}}
    out = p.apply_patch(cur, {"spec": {"template": {"spec": {"containers": [{"name": "only"}]}}}}, p.MERGE, rt)
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "only"}]  # merge patch replaces lists
    out = p.apply_patch(cur, [{"op": "replace", "path": "/spec/replicas", "value": 4}], p.JSON, rt)
    assert out["spec"]["replicas"] == 4 and cur["spec"]["replicas"] == 1
    with pytest.raises(ApiError) as e:
        p.apply_patch(cur, [{"op": "test", "path": "/spec/replicas", "value": 9}], p.JSON, rt)
    assert e.value.code == 422


def test_decode_errors_are_bad_requests() -> None:
    with pytest.raises(ApiError) as e:
        p.decode_patch(b"{not json", p.MERGE)
    assert e.value.code == 400 and "invalid JSON" in e.value.message
    with pytest.raises(ApiError) as e:
        p.decode_patch(b'{"op": "add"}', p.JSON)
    assert e.value.code == 400
    with pytest.raises(ApiError) as e:
        p.normalize_patch_type("text/plain")
    assert e.value.code == 415


def test_store_patch_strategic_and_apply() -> None:
    store = ObjectStore(SimClock())
    dep = {"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
                        {"name": "app", "image": "a:1"}, {"name": "side", "image": "s:1"}]}}}}
    applied = store.patch("Deployment", "default", "web", dep, "apply", field_manager="me")
    assert applied["metadata"]["managedFields"][0]["manager"] == "me"
    out = store.patch("Deployment", "default", "web",
                      '{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"a:2"}]}}}}', "strategic")
    assert [c["image"] for c in out["spec"]["template"]["spec"]["containers"]] == ["a:2", "s:1"]
    assert out["metadata"]["generation"] == 2
    dep2 = {**dep, "metadata": {"name": "web", "namespace": "default", "labels": {"team": "x"}},
            "spec": {**dep["spec"], "replicas": 3}}
    dep2["spec"]["template"] = {"metadata": {"labels": {"app": "web"}},
                                "spec": {"containers": [{"name": "app", "image": "a:3"}]}}
    out = store.patch("Deployment", "default", "web", dep2, "apply", field_manager="me")
    assert out["spec"]["replicas"] == 3 and out["metadata"]["labels"] == {"team": "x"}
    # the manager stopped applying the sidecar: server-side apply removes it
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["app"]
    with pytest.raises(ApiError) as e:
        store.patch("Deployment", "default", "missing", {"spec": {}}, "merge")
    assert e.value.code == 404
