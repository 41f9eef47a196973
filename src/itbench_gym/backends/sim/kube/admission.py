"""Defaulting and validation applied on every write, as the real API server's registry strategies do.

Clients and controllers rely on the defaults being present (a Deployment's rolling-update
percentages, a container's ``imagePullPolicy``, a Service's ``clusterIP``), and agents rely on bad
objects being refused with ``422 Invalid`` and the upstream wording rather than being stored.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from itbench_gym.lang import cron

from . import errors, rbac
from .crschema import apply_defaults, schema_causes
from .resources import ResourceType
from .selectors import selector_from_dict

Obj = dict[str, Any]
Causes = list[tuple[str, str, str]]

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
              "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
              "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
                "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
                "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")

_GENERATION_KINDS = {
    "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "HorizontalPodAutoscaler",
    "PodDisruptionBudget", "NetworkPolicy", "Ingress", "CustomResourceDefinition", "Pod",
}
_WORKLOADS = {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"}
#: The Service CIDR of the cluster ITBench documents: kind's default ``networking.serviceSubnet``
#: (kubernetes-sigs/kind pkg/apis/config/v1alpha4/default.go), the kube-apiserver's
#: ``--service-cluster-ip-range`` in envs/*/cluster/kube-system.yaml.
SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/16")
#: The ServiceAccount admission plugin's token volume: name prefix, mount path, the token's lifetime
#: (``WarnOnlyBoundTokenExpirationSeconds``) and the ConfigMap of the CA bundle it projects.
API_ACCESS_VOLUME_PREFIX = "kube-api-access-"
API_TOKEN_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_EXPIRATION_SECONDS = 3607
ROOT_CA_CONFIG_MAP = "kube-root-ca.crt"
#: What the kubelet writes on the mirror pod of a static pod (``install.py``): no ServiceAccount.
MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"
#: StorageObjectInUseProtection's finalizers, by (group, kind).
PVC_PROTECTION_FINALIZER = "kubernetes.io/pvc-protection"
PV_PROTECTION_FINALIZER = "kubernetes.io/pv-protection"
STORAGE_PROTECTION_FINALIZERS = {("", "PersistentVolumeClaim"): PVC_PROTECTION_FINALIZER,
                                 ("", "PersistentVolume"): PV_PROTECTION_FINALIZER}
#: ``--service-node-port-range`` (kube-apiserver's default).
NODE_PORT_RANGE = (30000, 32767)


def _static_band(size: int, *, lo: int, hi: int, step: int) -> int:
    """How many addresses (ports) at the bottom of a range are kept for explicit requests.

    KEP-3070 (Service IPs) and KEP-3668 (node ports): ``min(max(lo, size / step), hi)``, and no
    band at all for a range smaller than ``lo``. Dynamic allocation draws from above the band first,
    so a Service that asks for a well-known address (10.96.0.10 for kube-dns) finds it free.
    """
    if size < lo:
        return 0
    return min(max(lo, size // step), hi)


@dataclass
class Allocations:
    """The API server's Service IP and node-port allocators (part of the store's state).

    As kube-apiserver allocates them: a dynamic address is drawn at random (here from the store's
    seed, so a seed always gives the same addresses) from above the range's static band, scanning
    upwards from the draw to the next free one and falling back to the band when the rest is full;
    an explicitly requested ``spec.clusterIP`` must be in the range and free. The network and
    broadcast addresses are never handed out, and deleting a Service frees its address.
    """

    seed: int = 0
    draws: int = 0
    next_node_port: int = 0
    used_ips: set[str] = field(default_factory=set)
    #: Which Service (``namespace/name``) holds each address, so an update keeps its own.
    owners: dict[str, str] = field(default_factory=dict)
    used_ports: set[int] = field(default_factory=set)

    def copy(self) -> Allocations:
        return Allocations(self.seed, self.draws, self.next_node_port, set(self.used_ips), dict(self.owners),
                           set(self.used_ports))

    def _draw(self, n: int) -> int:
        """The next deterministic draw in ``[0, n)`` for this store's seed."""
        digest = hashlib.blake2b(f"{self.seed}:{self.draws}".encode(), digest_size=8).digest()
        self.draws += 1
        return int.from_bytes(digest, "big") % n

    def _scan(self, size: int, band: int, taken: Callable[[int], bool]) -> int | None:
        """Offset of a free slot: a random start above the band, scanning up and wrapping, then the band."""
        for lo, hi in ((band, size), (0, band)):
            if hi <= lo:
                continue
            start = self._draw(hi - lo)
            for i in range(hi - lo):
                offset = lo + (start + i) % (hi - lo)
                if not taken(offset):
                    return offset
        return None

    def cluster_ip(self, owner: str = "") -> str:
        """A free address of :data:`SERVICE_CIDR` for a Service without ``spec.clusterIP``."""
        first = int(SERVICE_CIDR.network_address) + 1
        size = SERVICE_CIDR.num_addresses - 2
        band = _static_band(size, lo=16, hi=256, step=16)
        offset = self._scan(size, band, lambda o: str(ipaddress.ip_address(first + o)) in self.used_ips)
        if offset is None:
            raise errors.ApiError(500, "InternalError", "Internal error occurred: failed to allocate a serviceIP: "
                                  "range is full")
        ip = str(ipaddress.ip_address(first + offset))
        self.used_ips.add(ip)
        self.owners[ip] = owner
        return ip

    def claim_ip(self, ip: str, owner: str) -> str | None:
        """Take an explicitly requested address; the reason it cannot be had, or None."""
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return f"failed to allocate IP {ip}: not a valid IP address"
        if addr not in SERVICE_CIDR or addr in (SERVICE_CIDR.network_address, SERVICE_CIDR.broadcast_address):
            return (f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. "
                    f"The range of valid IPs is {SERVICE_CIDR}")
        if ip in self.used_ips and self.owners.get(ip, owner) != owner:
            return f"failed to allocate IP {ip}: provided IP is already allocated"
        self.used_ips.add(ip)
        self.owners[ip] = owner
        return None

    def node_port(self) -> int:
        lo, hi = NODE_PORT_RANGE
        size = hi - lo + 1
        band = _static_band(size, lo=16, hi=128, step=32)
        offset = self._scan(size, band, lambda o: lo + o in self.used_ports)
        if offset is None:
            raise errors.ApiError(500, "InternalError", "Internal error occurred: failed to allocate a nodePort: "
                                  "range is full")
        self.next_node_port += 1
        self.used_ports.add(lo + offset)
        return lo + offset

    def release(self, obj: Obj) -> None:
        """Give back the cluster IPs and node ports of a Service that was deleted or whose creation failed."""
        spec = obj.get("spec") if obj.get("kind") == "Service" else None
        if isinstance(spec, dict):
            for ip in [spec.get("clusterIP"), *(spec.get("clusterIPs") or [])]:
                if isinstance(ip, str):
                    self.used_ips.discard(ip)
                    self.owners.pop(ip, None)
            for p in spec.get("ports") or []:
                if isinstance(p, dict) and isinstance(p.get("nodePort"), int):
                    self.used_ports.discard(p["nodePort"])


def has_generation(rt: ResourceType, obj: Obj) -> bool:
    return rt.custom or rt.kind in _GENERATION_KINDS


def spec_changed(old: Obj, new: Obj) -> bool:
    """Anything but metadata and status differs: what bumps ``metadata.generation``."""
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


# -- defaulting ----------------------------------------------------------------------------------


def default(rt: ResourceType, obj: Obj, alloc: Allocations) -> None:
    """Fill the defaults the real API server would (in place): a custom resource's are its CRD's."""
    if rt.custom:
        if rt.schema is not None:
            apply_defaults(rt.schema, obj)
        return
    fn = _DEFAULTERS.get((rt.group, rt.kind))
    if fn is not None:
        fn(obj, alloc)


def _default_container(c: Obj) -> None:
    image = str(c.get("image") or "")
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = "Always" if ("@" not in tag and (":" not in tag or tag.endswith(":latest"))) else "IfNotPresent"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        pr = c.get(probe)
        if isinstance(pr, dict):
            pr.setdefault("timeoutSeconds", 1)
            pr.setdefault("periodSeconds", 10)
            pr.setdefault("successThreshold", 1)
            pr.setdefault("failureThreshold", 3)
            if isinstance(pr.get("httpGet"), dict):
                pr["httpGet"].setdefault("scheme", "HTTP")
                pr["httpGet"].setdefault("path", "/")


def _default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                _default_container(c)
    for _, _, ref in _field_refs(spec, "spec"):
        if not ref.get("apiVersion"):
            ref["apiVersion"] = "v1"  # SetDefaults_ObjectFieldSelector


def _field_refs(spec: Obj, path: str) -> Iterator[tuple[str, tuple[str, ...], Obj]]:
    """Every ObjectFieldSelector of a pod spec, with its path and the fields it may select: its
    containers' env (``_ENV_FIELD_PATHS``) and its downward-API volumes' (``_VOLUME_FIELD_PATHS``)."""
    for key in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(key) or []):
            for j, e in enumerate((c.get("env") if isinstance(c, dict) else None) or []):
                source = e.get("valueFrom") if isinstance(e, dict) else None
                ref = source.get("fieldRef") if isinstance(source, dict) else None
                if isinstance(ref, dict):
                    yield f"{path}.{key}[{i}].env[{j}].valueFrom.fieldRef", _ENV_FIELD_PATHS, ref
    for i, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, dict):
            continue
        projected = volume.get("projected")
        sources = projected.get("sources") if isinstance(projected, dict) else None
        lists = [(f"{path}.volumes[{i}].downwardAPI", volume.get("downwardAPI"))]
        lists += [(f"{path}.volumes[{i}].projected.sources[{j}].downwardAPI", s.get("downwardAPI"))
                  for j, s in enumerate(sources if isinstance(sources, list) else []) if isinstance(s, dict)]
        for at, downward in lists:
            items = downward.get("items") if isinstance(downward, dict) else None
            for k, item in enumerate(items if isinstance(items, list) else []):
                ref = item.get("fieldRef") if isinstance(item, dict) else None
                if isinstance(ref, dict):
                    yield f"{at}.items[{k}].fieldRef", _VOLUME_FIELD_PATHS, ref


def _qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or str(req.get(r, lim[r])) != str(lim[r]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_pod(obj: Obj, alloc: Allocations) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _default_pod_spec(spec)
    # Requests default to limits on Pods only (upstream SetDefaults_Pod), never on pod templates.
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") if isinstance(c, dict) else None
        if isinstance(res, dict) and isinstance(res.get("limits"), dict):
            requests = res.setdefault("requests", {})
            for k, v in res["limits"].items():
                requests.setdefault(k, v)
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):  # the deprecated field's v1 conversion
        spec["serviceAccountName"] = spec["serviceAccount"]
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if "priorityClassName" not in spec:
        spec.setdefault("priority", 0)
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(isinstance(t, dict) and t.get("key") == key for t in tolerations):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", _qos_class(spec))


def service_account_admission(pod: Obj, account: Obj | None, volume_suffix: str) -> None:
    """The ServiceAccount admission plugin on a new pod (plugin/pkg/admission/serviceaccount admission.go).

    A mirror pod is left alone. Any other pod runs as ``default`` unless it names an account; the
    account must exist (the caller passes None for ``default`` while the service-account controller
    has yet to make it: upstream looks it up again for a while). Unless the pod or the account opts
    out (``automountServiceAccountToken: false``, the pod's word first), every container and init
    container without a mount at the token path gets the ``kube-api-access-<suffix>`` projected volume
    there: a bound token, the cluster CA (``kube-root-ca.crt``) and the namespace. A pod without image
    pull secrets takes the account's.
    """
    spec = pod.get("spec")
    if not isinstance(spec, dict) or MIRROR_POD_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {}):
        return
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    account = account or {}
    if not spec.get("imagePullSecrets") and account.get("imagePullSecrets"):
        spec["imagePullSecrets"] = [{"name": s.get("name", "")} for s in account["imagePullSecrets"] if isinstance(s, dict)]
    automount = spec.get("automountServiceAccountToken", account.get("automountServiceAccountToken"))
    if automount is False:
        return
    volumes = [v for v in spec.get("volumes") or [] if isinstance(v, dict)]
    existing = next((str(v.get("name")) for v in volumes if str(v.get("name", "")).startswith(API_ACCESS_VOLUME_PREFIX)), None)
    volume_name = existing or API_ACCESS_VOLUME_PREFIX + volume_suffix
    needed = False
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            mounts = c.get("volumeMounts") or []
            if any(isinstance(m, dict) and m.get("mountPath") == API_TOKEN_MOUNT_PATH for m in mounts):
                continue
            c["volumeMounts"] = [*mounts, {"name": volume_name, "readOnly": True, "mountPath": API_TOKEN_MOUNT_PATH}]
            needed = True
    if needed and existing is None:
        spec["volumes"] = [*(spec.get("volumes") or []), {"name": volume_name, "projected": {
            "defaultMode": 0o644,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}]


def _default_template(obj: Obj) -> None:
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        template.setdefault("metadata", {})
        _default_pod_spec(template["spec"])


def _default_deployment(obj: Obj, alloc: Allocations) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _default_template(obj)


def _default_replicaset(obj: Obj, alloc: Allocations) -> None:
    obj.setdefault("spec", {}).setdefault("replicas", 1)
    _default_template(obj)


def _default_statefulset(obj: Obj, alloc: Allocations) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    us = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if us.get("type") == "RollingUpdate":
        us.setdefault("rollingUpdate", {"partition": 0})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    _default_template(obj)


def _default_daemonset(obj: Obj, alloc: Allocations) -> None:
    spec = obj.setdefault("spec", {})
    us = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if us.get("type") == "RollingUpdate":
        us.setdefault("rollingUpdate", {"maxUnavailable": 1, "maxSurge": 0})
    spec.setdefault("revisionHistoryLimit", 10)
    _default_template(obj)


def _default_job(obj: Obj, alloc: Allocations) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    _default_template(obj)


def _generate_job_selector(job: Obj) -> None:
    """The Job strategy's ``generateSelector``: the template labelled with the Job's name and uid
    (where it has no such label), and the selector matching the uid."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    for key in ("job-name", "batch.kubernetes.io/job-name"):
        labels.setdefault(key, meta["name"])
    for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
        labels.setdefault(key, meta["uid"])
    given = spec.get("selector")
    selector: Obj = given if isinstance(given, dict) else {}
    labelled = selector.get("matchLabels")
    match: Obj = labelled if isinstance(labelled, dict) else {}
    match.setdefault("batch.kubernetes.io/controller-uid", meta["uid"])
    spec["selector"] = {**selector, "matchLabels": match}


def _default_cronjob(obj: Obj, alloc: Allocations) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    jt = spec.get("jobTemplate")
    if isinstance(jt, dict):
        _default_job(jt, alloc)


def _default_service(obj: Obj, alloc: Allocations) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    meta = obj.get("metadata") or {}
    owner = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    if spec["type"] != "ExternalName":
        if not spec.get("clusterIP"):
            spec["clusterIP"] = alloc.cluster_ip(owner)
        elif spec["clusterIP"] != "None":
            problem = alloc.claim_ip(str(spec["clusterIP"]), owner)
            if problem is not None:
                raise errors.invalid("", "Service", str(meta.get("name", "")), [
                    ("FieldValueInvalid", "spec.clusterIPs", f'Invalid value: []string{{"{spec["clusterIP"]}"}}: {problem}')])
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if "port" in p:
                p.setdefault("targetPort", p["port"])
            if spec["type"] in ("NodePort", "LoadBalancer"):
                if not p.get("nodePort"):
                    p["nodePort"] = alloc.node_port()
                elif isinstance(p["nodePort"], int):
                    alloc.used_ports.add(p["nodePort"])
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    obj.setdefault("status", {}).setdefault("loadBalancer", {})


def _default_namespace(obj: Obj, alloc: Allocations) -> None:
    meta = obj["metadata"]
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")


def _default_secret(obj: Obj, alloc: Allocations) -> None:
    import base64

    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def _default_pvc(obj: Obj, alloc: Allocations) -> None:
    obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
    obj.setdefault("status", {}).setdefault("phase", "Pending")


def _default_hpa(obj: Obj, alloc: Allocations) -> None:
    obj.setdefault("spec", {}).setdefault("minReplicas", 1)


def _default_priorityclass(obj: Obj, alloc: Allocations) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


_DEFAULTERS: dict[tuple[str, str], Callable[[Obj, Allocations], None]] = {
    ("", "Pod"): _default_pod,
    ("", "Service"): _default_service,
    ("", "Namespace"): _default_namespace,
    ("", "Secret"): _default_secret,
    ("", "PersistentVolumeClaim"): _default_pvc,
    ("apps", "Deployment"): _default_deployment,
    ("apps", "ReplicaSet"): _default_replicaset,
    ("apps", "StatefulSet"): _default_statefulset,
    ("apps", "DaemonSet"): _default_daemonset,
    ("batch", "Job"): _default_job,
    ("batch", "CronJob"): _default_cronjob,
    ("autoscaling", "HorizontalPodAutoscaler"): _default_hpa,
    ("scheduling.k8s.io", "PriorityClass"): _default_priorityclass,
    (rbac.GROUP, "RoleBinding"): lambda obj, alloc: rbac.default_binding(obj),
    (rbac.GROUP, "ClusterRoleBinding"): lambda obj, alloc: rbac.default_binding(obj),
}


def admit_create(rt: ResourceType, obj: Obj) -> None:
    """The mutating admission plugins that act on creation only. StorageObjectInUseProtection: a new
    claim gets ``kubernetes.io/pvc-protection``, a new volume ``kubernetes.io/pv-protection``, so
    neither goes while in use (``controllers/pvcprotection.py``, ``controllers/pvprotection.py``)."""
    finalizer = STORAGE_PROTECTION_FINALIZERS.get((rt.group, rt.kind))
    if finalizer is not None:
        finalizers = obj["metadata"].setdefault("finalizers", [])
        if finalizer not in finalizers:
            finalizers.append(finalizer)


def after_create(rt: ResourceType, obj: Obj) -> None:
    """What a real cluster fills once the object has its uid: a CRD's status (Established at once), a
    Job's generated selector."""
    if rt.kind == "Job" and rt.group == "batch" and not (obj.get("spec") or {}).get("manualSelector"):
        _generate_job_selector(obj)
    if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
        spec = obj.get("spec") or {}
        names = dict(spec.get("names") or {})
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        ts = obj["metadata"]["creationTimestamp"]
        obj["status"] = {
            "acceptedNames": names,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": ts},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": ts},
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or [] if v.get("storage")],
        }


# -- validation ----------------------------------------------------------------------------------


def validate(rt: ResourceType, new: Obj, old: Obj | None) -> None:
    """Raise ``422 Invalid`` listing every problem, as the API server does."""
    causes: Causes = []
    meta = new.get("metadata") or {}
    name = str(meta.get("name", ""))
    _validate_meta(rt, meta, causes)
    if not rt.custom:
        fn = _VALIDATORS.get(rt.kind)
        if fn is not None:
            fn(new, old, causes)
    elif rt.schema is not None:
        causes += schema_causes(rt.schema, new)
    if causes:
        raise errors.invalid(rt.group, rt.kind, name, causes)


def _validate_meta(rt: ResourceType, meta: Obj, causes: Causes) -> None:
    name = str(meta.get("name", ""))
    if rt.kind in ("Namespace",):
        if not _LABEL.match(name) or len(name) > 63:
            causes.append(("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {_LABEL_MSG}'))
    elif rt.kind == "Service" and rt.group == "":
        if not _DNS1035.match(name) or len(name) > 63:
            causes.append(("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {_DNS1035_MSG}'))
    elif rt.group.startswith("rbac."):
        if not name or "/" in name or "%" in name or name in (".", ".."):
            causes.append(("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": may not contain "/" or "%"'))
    elif not _SUBDOMAIN.match(name) or len(name) > 253:
        causes.append(("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": {_SUBDOMAIN_MSG}'))
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        causes.append(("FieldValueInvalid", "metadata.labels", "Invalid value: must be a map of strings"))
    for k, v in (labels or {}).items():
        _check_qualified_name(str(k), "metadata.labels", causes)
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            causes.append(("FieldValueInvalid", "metadata.labels", f'Invalid value: "{v}": a valid label must be an '
                           "empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and "
                           "end with an alphanumeric character"))
    ann = meta.get("annotations")
    if ann is not None and (not isinstance(ann, dict) or not all(isinstance(v, str) for v in ann.values())):
        causes.append(("FieldValueInvalid", "metadata.annotations", "Invalid value: annotation values must be strings"))


def _check_qualified_name(name: str, path: str, causes: Causes) -> None:
    """A label key (or a downward-API subscript) as ValidateQualifiedName checks it."""
    if not _QUALIFIED.match(name) or len(name.rpartition("/")[2]) > 63:
        causes.append(("FieldValueInvalid", path, f'Invalid value: "{name}": name part must consist of '
                       "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"))


def _check_quantity(value: Any, path: str, causes: Causes) -> Any:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        causes.append(("FieldValueInvalid", path, f'Invalid value: "{value}": must match the regex '
                       "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"))
        return None


#: The resources a container may request without a domain (validateContainerResourceName;
#: ``hugepages-<size>`` as well).
_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})


def _check_nonnegative(value: Any, path: str, causes: Causes) -> Any:
    """A quantity of a resource, which the API server refuses below zero (ValidateNonnegativeQuantity)."""
    parsed = _check_quantity(value, path, causes)
    if parsed is not None and parsed < 0:
        causes.append(("FieldValueInvalid", path, f'Invalid value: "{value}": must be greater than or equal to 0'))
        return None
    return parsed


#: A percentage as ``IsValidPercent`` accepts it, and its words.
_PERCENT = re.compile(r"[0-9]+%")
_PERCENT_MSG = ("a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
                "regex used for validation is '[0-9]+%')")
#: A probe's counts and durations, which may not be negative (validateProbe).
_PROBE_FIELDS = ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold")


def _validate_containers(containers: Any, path: str, causes: Causes, required: bool) -> None:
    if not isinstance(containers, list) or (required and not containers):
        if required or containers is not None:
            causes.append(("FieldValueRequired", path, "Required value"))
        return
    seen: set[str] = set()
    for i, c in enumerate(containers):
        cp = f"{path}[{i}]"
        if not isinstance(c, dict):
            causes.append(("FieldValueInvalid", cp, "Invalid value: must be an object"))
            continue
        cname = c.get("name")
        if not cname:
            causes.append(("FieldValueRequired", f"{cp}.name", "Required value"))
        elif not _LABEL.match(str(cname)):
            causes.append(("FieldValueInvalid", f"{cp}.name", f'Invalid value: "{cname}": {_LABEL_MSG}'))
        elif cname in seen:
            causes.append(("FieldValueDuplicate", f"{cp}.name", f'Duplicate value: "{cname}"'))
        seen.add(str(cname))
        if not c.get("image"):
            causes.append(("FieldValueRequired", f"{cp}.image", "Required value"))
        res = c.get("resources") or {}
        parsed: dict[str, dict[str, Any]] = {}
        for kind in ("requests", "limits"):
            for r, q in (res.get(kind) or {}).items():
                at = f"{cp}.resources.{kind}[{r}]"
                if "/" not in str(r) and str(r) not in _CONTAINER_RESOURCES and not str(r).startswith("hugepages-"):
                    causes.append(("FieldValueInvalid", at, f'Invalid value: "{r}": must be a standard resource for containers'))
                parsed.setdefault(kind, {})[r] = _check_nonnegative(q, at, causes)
        for r, lim in (parsed.get("limits") or {}).items():
            req = (parsed.get("requests") or {}).get(r)
            if req is not None and lim is not None and req > lim:
                causes.append(("FieldValueInvalid", f"{cp}.resources.requests",
                               f'Invalid value: "{res["requests"][r]}": must be less than or equal to {r} limit of {res["limits"][r]}'))
        _validate_env(c.get("env"), f"{cp}.env", causes)
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            fields = c.get(probe)
            if not isinstance(fields, dict):
                continue
            for name in _PROBE_FIELDS:
                value = fields.get(name)
                if isinstance(value, int) and value < 0:
                    causes.append(("FieldValueInvalid", f"{cp}.{probe}.{name}", f"Invalid value: {value}: must be greater than or equal to 0"))
        for j, p in enumerate(c.get("ports") or []):
            port = p.get("containerPort") if isinstance(p, dict) else None
            if not isinstance(port, int) or not 0 < port < 65536:
                causes.append(("FieldValueInvalid", f"{cp}.ports[{j}].containerPort",
                               f"Invalid value: {port}: must be between 1 and 65535, inclusive"))


#: An env var's sources (``valueFrom``), of which exactly one is set, and never beside a ``value``.
_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef")


def _validate_env(env: Any, path: str, causes: Causes) -> None:
    """A container's ``env`` as Kubernetes' validateEnv and validateEnvVarValueFrom check it: a name,
    and a ``valueFrom`` with one source, given only when ``value`` is empty."""
    for ep, e in errors.named_entries(env, path, causes):
        source = e.get("valueFrom")
        if source is None:
            continue
        count = sum(1 for key in _ENV_SOURCES if isinstance(source, dict) and source.get(key) is not None)
        if count == 0:
            message = "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
        elif e.get("value"):
            message = "may not be specified when `value` is not empty"
        elif count > 1:
            message = "may not have more than one field specified at a time"
        else:
            continue
        causes.append(("FieldValueInvalid", f"{ep}.valueFrom", f'Invalid value: "": {message}'))


#: What ConvertDownwardAPIFieldLabel takes from a v1 client: these paths (``spec.host`` is the old
#: name of ``spec.nodeName``) and ``metadata.labels['KEY']`` / ``metadata.annotations['KEY']``.
_DOWNWARD_FIELD_LABELS = frozenset({
    "metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
    "spec.restartPolicy", "spec.serviceAccountName", "spec.schedulerName", "status.phase", "status.hostIP",
    "status.hostIPs", "status.podIP", "status.podIPs", "spec.terminationGracePeriodSeconds", "spec.host"})
#: The paths an env var's fieldRef may then name (validEnvDownwardAPIFieldPathExpressions), and a
#: downwardAPI volume item's (validVolumeDownwardAPIFieldPathExpressions).
_ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
                    "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs")
_VOLUME_FIELD_PATHS = ("metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid")


def _split_subscript(field_path: str) -> tuple[str, str] | None:
    """fieldpath.SplitMaybeSubscriptedPath: ``metadata.labels['app']`` -> (``metadata.labels``, ``app``)."""
    if not field_path.endswith("']"):
        return None
    base, found, key = field_path[:-2].partition("['")
    return (base, key) if found and base else None


def _validate_field_ref(ref: Obj, path: str, allowed: tuple[str, ...], causes: Causes) -> None:
    """validateObjectFieldSelector: the path converts from v1 and is one ``allowed``, or a label's or
    an annotation's subscript that is a qualified name."""
    field_path = str(ref.get("fieldPath") or "")
    if not field_path:
        causes.append(("FieldValueRequired", f"{path}.fieldPath", "Required value"))
        return
    version = str(ref.get("apiVersion") or "v1")
    subscripted = _split_subscript(field_path)
    if version != "v1":
        problem = f"unsupported pod version: {version}"
    elif subscripted is not None and subscripted[0] not in ("metadata.annotations", "metadata.labels"):
        problem = f"field label does not support subscript: {field_path}"
    elif subscripted is None and field_path not in _DOWNWARD_FIELD_LABELS:
        problem = f"field label not supported: {field_path}"
    else:
        problem = ""
    if problem:
        causes.append(("FieldValueInvalid", f"{path}.fieldPath", f'Invalid value: "{field_path}": error converting fieldPath: {problem}'))
        return
    if subscripted is not None:
        base, key = subscripted
        _check_qualified_name(key.lower() if base == "metadata.annotations" else key, path, causes)
        return
    internal = "spec.nodeName" if field_path == "spec.host" else field_path
    if internal not in allowed:
        supported = ", ".join(f'"{p}"' for p in sorted(allowed))
        causes.append(("FieldValueNotSupported", f"{path}.fieldPath", f'Unsupported value: "{internal}": supported values: {supported}'))


def _validate_pod_spec(spec: Any, path: str, causes: Causes) -> None:
    if not isinstance(spec, dict):
        causes.append(("FieldValueRequired", path, "Required value"))
        return
    _validate_containers(spec.get("containers"), f"{path}.containers", causes, True)
    _validate_containers(spec.get("initContainers"), f"{path}.initContainers", causes, False)
    for at, allowed, ref in _field_refs(spec, path):
        _validate_field_ref(ref, at, allowed, causes)
    rp = spec.get("restartPolicy")
    if rp not in (None, "Always", "OnFailure", "Never"):
        causes.append(("FieldValueNotSupported", f"{path}.restartPolicy",
                       f'Unsupported value: "{rp}": supported values: "Always", "OnFailure", "Never"'))


_POD_MUTABLE_MSG = ("Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions "
                    "to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                    "previously negative)")


def _pod_spec_sans_mutable(spec: Obj) -> Obj:
    out = dict(spec)
    for k in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        out.pop(k, None)
    for key in ("containers", "initContainers"):
        out[key] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get(key) or [] if isinstance(c, dict)]
    if not spec.get("nodeName"):
        out.pop("nodeName", None)
    return out


def _validate_pod(new: Obj, old: Obj | None, causes: Causes) -> None:
    _validate_pod_spec(new.get("spec"), "spec", causes)
    if old is not None and isinstance(new.get("spec"), dict):
        before, after = _pod_spec_sans_mutable(old.get("spec") or {}), _pod_spec_sans_mutable(new["spec"])
        if "nodeName" not in before:
            after.pop("nodeName", None)  # binding a pod to a node is allowed once
        if before != after:
            causes.append(("FieldValueForbidden", "spec", _POD_MUTABLE_MSG))


def _validate_workload(new: Obj, old: Obj | None, causes: Causes) -> None:
    spec = new.get("spec")
    if not isinstance(spec, dict):
        causes.append(("FieldValueRequired", "spec", "Required value"))
        return
    kind = new.get("kind")
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or replicas < 0):
        causes.append(("FieldValueInvalid", "spec.replicas",
                       f"Invalid value: {replicas}: must be greater than or equal to 0"))
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(("FieldValueRequired", "spec.template", "Required value"))
        return
    selector = spec.get("selector")
    if kind != "Job":
        if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            causes.append(("FieldValueRequired", "spec.selector", "Required value"))
        elif _validate_label_selector(selector, "spec.selector", causes):
            labels = (template.get("metadata") or {}).get("labels") or {}
            if not selector_from_dict(selector).matches(labels):
                causes.append(("FieldValueInvalid", "spec.template.metadata.labels",
                               f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`"))
        if old is not None and (old.get("spec") or {}).get("selector") != selector:
            causes.append(("FieldValueInvalid", "spec.selector",
                           f"Invalid value: {_go_selector(selector)}: field is immutable"))
    _validate_pod_spec(template.get("spec"), "spec.template.spec", causes)
    rp = (template.get("spec") or {}).get("restartPolicy") if isinstance(template.get("spec"), dict) else None
    if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet") and rp not in (None, "Always"):
        causes.append(("FieldValueNotSupported", "spec.template.spec.restartPolicy",
                       f'Unsupported value: "{rp}": supported values: "Always"'))
    if kind == "Job" and rp not in ("OnFailure", "Never"):
        causes.append(("FieldValueRequired" if rp is None else "FieldValueNotSupported",
                       "spec.template.spec.restartPolicy",
                       'Unsupported value: "{}": supported values: "OnFailure", "Never"'.format(rp or "Always")))
    if kind == "Job" and old is not None and (old.get("spec") or {}).get("template") != template:
        causes.append(("FieldValueInvalid", "spec.template", "Invalid value: field is immutable"))
    strategy = spec.get("strategy" if kind == "Deployment" else "updateStrategy")
    rolling = strategy.get("rollingUpdate") if isinstance(strategy, dict) and kind in ("Deployment", "DaemonSet") else None
    if kind == "Deployment" and isinstance(strategy, dict) and strategy.get("type") == "Recreate" and rolling is not None:
        causes.append(("FieldValueForbidden", "spec.strategy.rollingUpdate", "Forbidden: may not be specified when strategy `type` is 'Recreate'"))
    elif isinstance(rolling, dict):
        path = f"spec.{'strategy' if kind == 'Deployment' else 'updateStrategy'}.rollingUpdate"
        _validate_rolling_update(rolling, path, causes, daemonset=kind == "DaemonSet")


def _spec(obj: Obj) -> Obj:
    """The object's ``spec`` (empty when it is missing or not an object, which decoding reports)."""
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _validate_label_selector(selector: Any, path: str, causes: Causes) -> bool:
    """metav1validation.ValidateLabelSelector: each expression's operator known, its values given for
    ``In``/``NotIn`` and absent for ``Exists``/``DoesNotExist``. Whether the selector is usable."""
    if selector is None:
        return True
    if not isinstance(selector, dict):
        causes.append(("FieldValueInvalid", path, "Invalid value: must be a label selector"))
        return False
    before = len(causes)
    for i, expr in enumerate(selector.get("matchExpressions") or []):
        at = f"{path}.matchExpressions[{i}]"
        if not isinstance(expr, dict):
            causes.append(("FieldValueInvalid", at, "Invalid value: must be an object"))
            continue
        op, values = expr.get("operator"), expr.get("values") or []
        if op in ("In", "NotIn") and not values:
            causes.append(("FieldValueRequired", f"{at}.values", "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist") and values:
            causes.append(("FieldValueForbidden", f"{at}.values", "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        elif op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            causes.append(("FieldValueInvalid", f"{at}.operator", f'Invalid value: "{op}": not a valid selector operator'))
    return len(causes) == before


def _validate_network_policy(new: Obj, old: Obj | None, causes: Causes) -> None:
    """Its pod and namespace selectors, as ValidateNetworkPolicySpec checks them."""
    spec = _spec(new)
    _validate_label_selector(spec.get("podSelector"), "spec.podSelector", causes)
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            for j, peer in enumerate((rule.get(peers) or []) if isinstance(rule, dict) else []):
                for key in ("podSelector", "namespaceSelector"):
                    if isinstance(peer, dict):
                        _validate_label_selector(peer.get(key), f"spec.{direction}[{i}].{peers}[{j}].{key}", causes)


def _validate_pod_disruption_budget(new: Obj, old: Obj | None, causes: Causes) -> None:
    """ValidatePodDisruptionBudgetSpec: one of ``minAvailable``/``maxUnavailable``, each a non-negative
    int or a percentage of at most 100%, and its selector."""
    spec = _spec(new)
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(("FieldValueInvalid", "spec", "Invalid value: minAvailable and maxUnavailable cannot be both set"))
    for name in ("minAvailable", "maxUnavailable"):
        if spec.get(name) is not None:
            _check_int_or_percent(spec[name], f"spec.{name}", causes, at_most_100=True)
    _validate_label_selector(spec.get("selector"), "spec.selector", causes)


def _validate_pvc(new: Obj, old: Obj | None, causes: Causes) -> None:
    """ValidatePersistentVolumeClaimSpec: an access mode, and a storage request above zero."""
    spec = _spec(new)
    if not spec.get("accessModes"):
        causes.append(("FieldValueRequired", "spec.accessModes", "Required value: at least 1 access mode is required"))
    resources = spec.get("resources")
    requests = (resources.get("requests") or {}) if isinstance(resources, dict) else {}
    if "storage" not in requests:
        causes.append(("FieldValueRequired", "spec.resources[storage]", "Required value"))
        return
    value = _check_quantity(requests["storage"], "spec.resources[storage]", causes)
    if value is not None and value <= 0:
        causes.append(("FieldValueInvalid", "spec.resources[storage]", f'Invalid value: "{requests["storage"]}": must be greater than zero'))


def _go_int_or_string(value: Any) -> str:
    """An ``intstr.IntOrString`` as the API server's field errors print it (Go's ``%#v``)."""
    if isinstance(value, str):
        return f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:"{value}"}}'
    return f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}'


def _int_or_percent_value(value: Any) -> int | None:
    """``getIntOrPercentValue``: the number of an int or a valid percentage (None: neither)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    return int(value[:-1]) if isinstance(value, str) and _PERCENT.fullmatch(value) else None


def _check_int_or_percent(raw: Any, path: str, causes: Causes, *, at_most_100: bool) -> int | None:
    """ValidatePositiveIntOrPercent (and IsNotMoreThan100Percent): a non-negative int or a ``[0-9]+%``
    percentage; its number (None when it is neither)."""
    number = _int_or_percent_value(raw)
    if isinstance(raw, str) and number is None:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_go_int_or_string(raw)}: {_PERCENT_MSG}"))
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw < 0:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {raw}: must be greater than or equal to 0"))
    elif isinstance(raw, str) and number is not None and number > 100 and at_most_100:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {_go_int_or_string(raw)}: must not be greater than 100%"))
    return number


def _validate_rolling_update(rolling: Obj, path: str, causes: Causes, *, daemonset: bool) -> None:
    """ValidateRollingUpdateDeployment / ValidateRollingUpdateDaemonSet: each of ``maxUnavailable`` and
    ``maxSurge`` a non-negative int or a percentage, not both zero (for a DaemonSet, exactly one set),
    ``maxUnavailable`` (and a DaemonSet's ``maxSurge``) at most 100%."""
    values: dict[str, int] = {}
    for name in ("maxUnavailable", "maxSurge"):
        if name not in rolling or rolling[name] is None:
            values[name] = 0 if daemonset and name == "maxSurge" else 1 if daemonset else 25
            continue
        values[name] = _check_int_or_percent(rolling[name], f"{path}.{name}", causes,
                                             at_most_100=name == "maxUnavailable" or daemonset) or 0
    unavailable, surge = values["maxUnavailable"] != 0, values["maxSurge"] != 0
    if daemonset and unavailable and surge:
        causes.append(("FieldValueInvalid", f"{path}.maxSurge",
                       f"Invalid value: {_go_int_or_string(rolling.get('maxSurge'))}: may not be set when maxUnavailable is non-zero"))
    elif daemonset and not unavailable and not surge:
        causes.append(("FieldValueRequired", f"{path}.maxUnavailable", "Required value: cannot be 0 when maxSurge is 0"))
    elif not daemonset and not unavailable and not surge:
        causes.append(("FieldValueInvalid", f"{path}.maxUnavailable",
                       f"Invalid value: {_go_int_or_string(rolling.get('maxUnavailable', 0))}: may not be 0 when `maxSurge` is 0"))


def _go_map(m: dict[str, Any]) -> str:
    return "map[string]string{" + ", ".join(f'"{k}":"{v}"' for k, v in sorted(m.items())) + "}"


def _go_selector(sel: Any) -> str:
    if not isinstance(sel, dict):
        return "null"
    return "v1.LabelSelector{MatchLabels:" + _go_map(sel.get("matchLabels") or {}) + ", MatchExpressions:[]}"


def _validate_service(new: Obj, old: Obj | None, causes: Causes) -> None:
    spec = new.get("spec") or {}
    stype = spec.get("type", "ClusterIP")
    if stype not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        causes.append(("FieldValueNotSupported", "spec.type",
                       f'Unsupported value: "{stype}": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'))
    ports = spec.get("ports")
    if stype != "ExternalName" and spec.get("clusterIP") != "None" and not ports:
        causes.append(("FieldValueRequired", "spec.ports", "Required value"))
    for i, p in enumerate(ports or []):
        port = p.get("port") if isinstance(p, dict) else None
        if not isinstance(port, int) or not 0 < port < 65536:
            causes.append(("FieldValueInvalid", f"spec.ports[{i}].port",
                           f"Invalid value: {port}: must be between 1 and 65535, inclusive"))
        if len(ports or []) > 1 and isinstance(p, dict) and not p.get("name"):
            causes.append(("FieldValueRequired", f"spec.ports[{i}].name", "Required value"))
    if old is not None:
        before = (old.get("spec") or {}).get("clusterIP")
        if before and spec.get("clusterIP") != before and stype != "ExternalName":
            causes.append(("FieldValueInvalid", "spec.clusterIPs[0]", "Invalid value: []string(nil): primary clusterIP can not be unset"
                           if not spec.get("clusterIP") else f'Invalid value: "{spec.get("clusterIP")}": field is immutable'))


def _validate_config_keys(new: Obj, old: Obj | None, causes: Causes) -> None:
    for section in ("data", "binaryData"):
        data = new.get(section)
        if data is None:
            continue
        if not isinstance(data, dict):
            causes.append(("FieldValueInvalid", section, "Invalid value: must be a map"))
            continue
        for k, v in data.items():
            if not _CONFIG_KEY.match(str(k)):
                causes.append(("FieldValueInvalid", f"{section}[{k}]", f'Invalid value: "{k}": a valid config key must '
                               "consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  "
                               "or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
            if not isinstance(v, str):
                causes.append(("FieldValueInvalid", f"{section}[{k}]", "Invalid value: must be a string"))


def _validate_hpa(new: Obj, old: Obj | None, causes: Causes) -> None:
    spec = new.get("spec") or {}
    if not isinstance(spec.get("scaleTargetRef"), dict) or not spec["scaleTargetRef"].get("name"):
        causes.append(("FieldValueRequired", "spec.scaleTargetRef.name", "Required value"))
    lo, hi = spec.get("minReplicas", 1), spec.get("maxReplicas")
    if not isinstance(hi, int) or hi < 1:
        causes.append(("FieldValueInvalid", "spec.maxReplicas", f"Invalid value: {hi}: must be greater than or equal to 1"))
    elif isinstance(lo, int) and lo > hi:
        causes.append(("FieldValueInvalid", "spec.maxReplicas", f"Invalid value: {hi}: must be greater than or equal to `minReplicas`"))


def _validate_cronjob(new: Obj, old: Obj | None, causes: Causes) -> None:
    """``spec.schedule``: required, robfig/cron's standard format, its time zone in ``timeZone`` only."""
    spec = _spec(new)
    schedule = spec.get("schedule")
    if not schedule or not isinstance(schedule, str):
        causes.append(("FieldValueRequired", "spec.schedule", "Required value"))
    elif "TZ" in schedule:
        causes.append(("FieldValueInvalid", "spec.schedule", f'Invalid value: "{schedule}": cannot use '
                       + ("both timeZone field and TZ or CRON_TZ in schedule" if spec.get("timeZone") is not None
                          else "TZ or CRON_TZ in schedule, use timeZone field instead")))
    else:
        try:
            cron.parse(schedule)
        except ValueError as bad:
            causes.append(("FieldValueInvalid", "spec.schedule", f'Invalid value: "{schedule}": {bad}'))
    zone = spec.get("timeZone")
    if zone is not None:
        _validate_time_zone(str(zone), causes)


#: A component of an IANA zone name (letters, digits, ``. - _ +``, at most 14).
_ZONE_PART = re.compile(r"[A-Za-z.\-_0-9+]{1,14}")


def _validate_time_zone(zone: str, causes: Causes) -> None:
    """A CronJob's ``spec.timeZone`` as validateTimeZone checks it: an explicit zone Go can load."""
    at = "spec.timeZone"
    if not zone:
        causes.append(("FieldValueInvalid", at, 'Invalid value: "": timeZone must be nil or non-empty string'))
        return
    if any(p in (".", "..") or p.startswith("-") or not _ZONE_PART.fullmatch(p) for p in zone.split("/")):
        causes.append(("FieldValueInvalid", at, f'Invalid value: "{zone}": unknown time zone {zone}'))
        return
    if zone.lower() == "local":
        causes.append(("FieldValueInvalid", at, f'Invalid value: "{zone}": timeZone must be an explicit time zone as '
                       "defined in https://www.iana.org/time-zones"))
    problem = cron.zone_error(zone)
    if problem is not None:
        causes.append(("FieldValueInvalid", at, f'Invalid value: "{zone}": {problem}'))


def _validate_resource_quota(new: Obj, old: Obj | None, causes: Causes) -> None:
    """``spec.hard``: a quantity at or above zero for each resource (ValidateResourceQuota)."""
    hard = _spec(new).get("hard")
    for r, q in hard.items() if isinstance(hard, dict) else ():
        _check_nonnegative(q, f"spec.hard[{r}]", causes)


_VALIDATORS = {
    "Pod": _validate_pod,
    "Deployment": _validate_workload,
    "ReplicaSet": _validate_workload,
    "StatefulSet": _validate_workload,
    "DaemonSet": _validate_workload,
    "Job": _validate_workload,
    "Service": _validate_service,
    "ConfigMap": _validate_config_keys,
    "HorizontalPodAutoscaler": _validate_hpa,
    "ResourceQuota": _validate_resource_quota,
    "CronJob": _validate_cronjob,
    "NetworkPolicy": _validate_network_policy,
    "PodDisruptionBudget": _validate_pod_disruption_budget,
    "PersistentVolumeClaim": _validate_pvc,
    "Role": rbac.validate_role,
    "ClusterRole": rbac.validate_cluster_role,
    "RoleBinding": rbac.validate_role_binding,
    "ClusterRoleBinding": rbac.validate_cluster_role_binding,
}
