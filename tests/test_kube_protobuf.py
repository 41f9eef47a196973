"""Protobuf request bodies (what kubectl's typed clients send) decode to the JSON the object would be."""

from __future__ import annotations

import threading

import pytest
from werkzeug.test import Client

from itbench_gym.backends.sim.kube import protobuf
from itbench_gym.backends.sim.kube.apiserver import make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, Visibility
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.clock import SimClock


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def num(field: int, value: int) -> bytes:
    return varint(field << 3) + varint(value)


def msg(field: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return varint(field << 3 | 2) + varint(len(data)) + data


def envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    return protobuf.MAGIC + msg(1, msg(1, api_version) + msg(2, kind)) + msg(2, raw)


def meta(name: str) -> bytes:
    # ObjectMeta as Go marshals it: empty strings and a zero creationTimestamp are present on the wire.
    return msg(1, name) + msg(2, "") + msg(3, "") + num(7, 0) + msg(8, b"")


def test_configmap_with_map_and_empty_values() -> None:
    raw = msg(1, meta("flags")) + msg(2, msg(1, "a") + msg(2, "1")) + msg(2, msg(1, "empty") + msg(2, ""))
    assert protobuf.decode(envelope("v1", "ConfigMap", raw)) == {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "flags"}, "data": {"a": "1", "empty": ""}}


def test_pointer_zeroes_survive_and_value_zeroes_drop() -> None:
    strategy = msg(1, "RollingUpdate") + msg(2, msg(1, num(1, 1) + msg(3, "25%")) + msg(2, num(1, 0) + num(2, 0)))
    container = msg(1, "web") + msg(2, "nginx:1.27") + msg(3, "nginx") + msg(3, "-g") + num(16, 0)
    template = msg(1, msg(11, msg(1, "app") + msg(2, "web"))) + msg(2, msg(2, container))
    spec = num(1, 0) + msg(3, template) + msg(4, strategy) + num(5, 0) + num(7, 0) + num(999, 5)
    doc = protobuf.decode(envelope("apps/v1", "Deployment", msg(1, meta("web")) + msg(2, spec)))
    assert doc["spec"] == {
        "replicas": 0,  # *int32: zero is meaningful
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "command": ["nginx", "-g"]}]}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 0}},
    }


def test_negative_numbers_times_and_bytes() -> None:
    secret = msg(1, msg(1, "s") + msg(8, num(1, 1767225600))) + msg(2, msg(1, "k") + msg(2, b"\x00\xff")) + msg(3, "Opaque")
    doc = protobuf.decode(envelope("v1", "Secret", secret))
    assert doc["metadata"] == {"name": "s", "creationTimestamp": "2026-01-01T00:00:00Z"}
    assert doc["data"] == {"k": "AP8="} and doc["type"] == "Opaque"
    opts = protobuf.decode(envelope("v1", "DeleteOptions", num(1, -1) + msg(4, "Foreground")))
    assert opts == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": -1,
                    "propagationPolicy": "Foreground"}


@pytest.mark.parametrize(("body", "message"), [
    (b'{"kind":"ConfigMap"}', "magic number"),
    (envelope("v1", "ConfigMap", msg(2, msg(1, "a"))[:-1]), "runs past the end"),
    (envelope("v1", "ConfigMap", varint(2 << 3 | 3)), "core.v1.ConfigMap field 2: unsupported wire type 3"),
    (envelope("v1", "ConfigMap", msg(1, msg(1, b"\xff\xfe"))), "meta.v1.ObjectMeta.name: string is not valid UTF-8"),
    (envelope("v1", "Binding", b""), "no protobuf decoding for Binding"),
    (protobuf.MAGIC + msg(2, b""), "names no kind"),
])
def test_malformed_bodies_are_named(body: bytes, message: str) -> None:
    with pytest.raises(protobuf.ProtobufError, match=message):
        protobuf.decode(body)


def test_schema_is_complete() -> None:
    table = protobuf.schema()
    assert table.kinds["apps/v1/Deployment"] == "apps.v1.Deployment"
    assert table.messages["core.v1.PodSpec"][2].name == "containers"
    assert table.messages["core.v1.Probe"][1].inline


def test_api_server_accepts_protobuf_and_rejects_garbage_with_status() -> None:
    clock = SimClock()
    store = ObjectStore(clock)
    store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    auth = Auth(Visibility(frozenset(), frozenset()))
    app = make_kube_app(store, clock=clock, auth=auth, lock=threading.RLock(), advance=lambda s: True)
    client = Client(app)
    headers = {"Authorization": f"Bearer {auth.admin_token}", "Content-Type": protobuf.MEDIA_TYPE}
    body = envelope("v1", "ConfigMap", msg(1, meta("from-proto")) + msg(2, msg(1, "x") + msg(2, "y")))
    created = client.post("/api/v1/namespaces/shop/configmaps", data=body, headers=headers)
    assert created.status_code == 201 and created.json["data"] == {"x": "y"}  # type: ignore[index]
    assert store.get("ConfigMap", "shop", "from-proto")["metadata"]["namespace"] == "shop"
    bad = client.post("/api/v1/namespaces/shop/configmaps", data=body[:-3], headers=headers)
    assert bad.status_code == 400
    assert bad.json["kind"] == "Status" and bad.json["reason"] == "BadRequest"  # type: ignore[index]
    assert bad.json["message"].startswith("couldn't decode the protobuf request body: ")  # type: ignore[index]
