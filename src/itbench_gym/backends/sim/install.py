"""Deploying an environment's objects the way its installers leave a cluster.

The manifests are what the charts render and what the cluster's own components write; a few things
on a real cluster are made at install time from those objects, and this module makes them the same
way instead of storing their result:

- ``helm install`` adds the release annotations to every object of a release and records the
  release in a Secret ``sh.helm.release.v1.<name>.v1`` (type ``helm.sh/release.v1``): the release
  as JSON, gzipped, base64-encoded (Helm's ``storage/driver/util.go`` ``encodeRelease``), whose
  ``manifest`` is the release's objects as deployed, in Helm's install order;
- charts fill Secrets with certificates they generate (Sprig ``genCA``/``genSelfSignedCert``), a
  hook Job or a component at its start writes them; here they are Ed25519 keys and certificates
  derived from the seed, so a seed always yields the same bytes (Ed25519 signatures are
  deterministic); a chart that renders the CA into webhook configurations or a CRD's conversion
  webhook (``caBundle``) and cert-manager's cainjector (annotation
  ``cert-manager.io/inject-ca-from-secret``) put it there;
- Helm hooks (annotation ``helm.sh/hook``) are not part of the release's manifest;
- the kubelet mirrors static pods into the API with ``kubernetes.io/config.*`` annotations and an
  owner reference to its Node; an owner reference given by name gets the owner's uid;
- prometheus-operator writes a Prometheus' generated configuration (scrape jobs, remote writes with
  the credentials of the Secrets they name), rule files and web config next to the StatefulSet it runs
  (``prometheus-<name>``, ``-rulefiles-0``, ``-web-config``).

What belongs to which release is data (``cluster/releases.yaml``), not code.
"""

from __future__ import annotations

import base64
import copy
import datetime
import gzip
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.x509.oid import NameOID

from itbench_gym.backends.sim.kube.admission import MIRROR_POD_ANNOTATION
from itbench_gym.backends.sim.kube.errors import ApiError
from itbench_gym.lang import yamltext
from itbench_gym.lang.selectors import selector_from_dict
from itbench_gym.lang.timestamps import rfc3339, rfc3339_nano

Obj = dict[str, Any]

RELEASES_FILE = Path("cluster") / "releases.yaml"
RELEASE_ANNOTATION = "meta.helm.sh/release-name"
NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"
MIRROR_SOURCE = "kubernetes.io/config.source"
HELM_HOOK = "helm.sh/hook"
#: cert-manager's cainjector copies the CA of the Secret this annotation names into the object's caBundle.
INJECT_FROM_SECRET = "cert-manager.io/inject-ca-from-secret"
#: Kinds whose namespaced objects a chart may put outside its release namespace (exporters' Services in
#: kube-system, leader-election Roles and RoleBindings in kube-system).
_CROSS_NAMESPACE_KINDS = ("Service", "Role", "RoleBinding")
#: Helm's ``releaseutil.InstallOrder``: the order a release's manifest lists (and creates) its kinds.
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass", "PersistentVolume",
    "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
    "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList", "Service", "DaemonSet", "Pod",
    "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
    "IngressClass", "Ingress", "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
)
#: What the API server fills in and Helm never rendered: left out of a release's manifest.
_SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink")


class Cluster(Protocol):
    """What the deployment needs of ``KubeCluster``."""

    @property
    def store(self) -> Any: ...

    def apply(self, objs: list[Obj]) -> None: ...


@dataclass(frozen=True)
class Certificate:
    """A Secret a chart fills with a generated certificate (and its key, and maybe its CA)."""

    secret: str
    namespace: str
    keys: Mapping[str, str]
    common_name: str
    dns_names: tuple[str, ...]
    days: int
    signed_by_ca: bool
    #: the CA's common name (default ``<common_name>-ca``)
    ca_common_name: str = ""
    #: objects ("Kind/name") whose caBundle the chart renders from this certificate's CA
    ca_bundle_in: tuple[str, ...] = ()
    #: ConfigMaps (namespace, name, key) a controller copies the certificate into (istiod writes its
    #: root certificate into ``istio-ca-root-cert``); filled where the manifests hold them
    config_maps: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Release:
    """One Helm release: its chart, which deployed objects it rendered, and the values it was given."""

    name: str
    namespace: str
    chart: Mapping[str, Any]
    selector: Mapping[str, Any]
    templates: Mapping[str, str]
    values: Mapping[str, Any]
    certificates: tuple[Certificate, ...]
    #: "Kind/name" of objects the chart renders without any label a selector could match
    objects: frozenset[str] = frozenset()
    #: the scenario install option the release comes with (``spec/finops.py``); "" for every cluster
    option: str = ""

    def owns(self, obj: Obj) -> bool:
        """Whether the chart rendered ``obj``: it matches the selector or is listed by kind and name, sits
        in the release namespace (or is cluster-scoped), and no controller owns it."""
        meta = obj.get("metadata") or {}
        if meta.get("ownerReferences") or obj.get("kind") == "Namespace" or HELM_HOOK in (meta.get("annotations") or {}):
            return False
        if meta.get("namespace") not in (None, self.namespace) and obj.get("kind") not in _CROSS_NAMESPACE_KINDS:
            return False
        if f"{obj.get('kind')}/{meta.get('name')}" in self.objects:
            return True
        return bool(self.selector) and selector_from_dict(self.selector).matches(meta.get("labels") or {})

    def template_of(self, obj: Obj) -> str | None:
        kind, name = obj.get("kind", ""), (obj.get("metadata") or {}).get("name", "")
        return self.templates.get(f"{kind}/{name}") or self.templates.get(kind)


def load_releases(app_dir: Path, options: frozenset[str] = frozenset()) -> tuple[Release, ...]:
    """The releases of ``app_dir``'s ``cluster/releases.yaml`` (none when the app has no such file):
    those of every cluster and those of the install ``options`` the scenario turns on."""
    path = app_dir / RELEASES_FILE
    if not path.exists():
        return ()
    doc = yamltext.load(path.read_text()) or {}
    out = []
    for r in doc.get("releases") or []:
        certs = tuple(Certificate(c["secret"], c["namespace"], dict(c["keys"]), c["common_name"], tuple(c["dns_names"]),
                                  int(c["days"]), bool(c["signed_by_ca"]), str(c.get("ca_common_name") or ""),
                                  tuple(c.get("ca_bundle_in") or ()),
                                  tuple((m["namespace"], m["name"], m["key"]) for m in c.get("config_maps") or []))
                      for c in r.get("certificates") or [])
        option = str(r.get("option") or "")
        if option and option not in options:
            continue
        out.append(Release(r["name"], r["namespace"], r["chart"], r.get("selector") or {}, r.get("templates") or {},
                           r.get("values") or {}, certs, frozenset(r.get("objects") or ()), option))
    return tuple(out)


def deploy(cluster: Cluster, objects: list[Obj], releases: Iterable[Release], *, seed: int) -> None:
    """Create ``objects`` on ``cluster`` as the installers would, then record the releases."""
    releases = tuple(releases)
    store = cluster.store
    now = float(store.clock.now())
    objects = [copy.deepcopy(o) for o in objects]
    by_release: dict[str, list[Obj]] = {r.name: [] for r in releases}
    for obj in objects:
        for r in releases:
            if r.owns(obj):
                meta = obj.setdefault("metadata", {})
                meta.setdefault("annotations", {}).update({RELEASE_ANNOTATION: r.name, NAMESPACE_ANNOTATION: r.namespace})
                by_release[r.name].append(obj)
                break
        if (obj.get("metadata") or {}).get("annotations", {}).get(MIRROR_SOURCE) == "file":
            _mirror(obj, now)
    for r in releases:
        for cert in r.certificates:
            _fill_certificate(objects, r, cert, seed, now)
    _inject_ca(objects)
    first = [o for o in objects if not _unresolved_owners(o)]
    later = [o for o in objects if _unresolved_owners(o)]
    cluster.apply(first)
    for obj in later:
        _resolve_owners(store, obj)
    _operator_outputs(store, later)
    cluster.apply(later)
    cluster.apply([release_secret(r, by_release[r.name], now) for r in releases])


# -- Helm's release record ----------------------------------------------------------------------------


def release_secret(release: Release, objects: list[Obj], now: float) -> Obj:
    """The Secret Helm 3 stores a first, successful install of ``release`` in."""
    stamp = rfc3339_nano(now)  # a Go time.Time as encoding/json writes it
    record = {
        "name": release.name,
        "info": {"first_deployed": stamp, "last_deployed": stamp, "deleted": "", "description": "Install complete",
                 "status": "deployed"},
        "chart": {"metadata": dict(release.chart), "lock": None, "templates": [], "values": None, "schema": None,
                  "files": []},
        "config": copy.deepcopy(dict(release.values)),
        "manifest": manifest(release, objects),
        "version": 1,
        "namespace": release.namespace,
    }
    blob = base64.b64encode(gzip.compress(json.dumps(record, separators=(",", ":")).encode(), mtime=0))
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
        "metadata": {"name": f"sh.helm.release.v1.{release.name}.v1", "namespace": release.namespace,
                     "labels": {"name": release.name, "owner": "helm", "status": "deployed", "version": "1",
                                "modifiedAt": str(int(now))}},
        "data": {"release": base64.b64encode(blob).decode()},
    }


def decode_release(secret: Mapping[str, Any]) -> Obj:
    """The release record in a ``helm.sh/release.v1`` Secret (what ``helm get`` reads)."""
    blob = base64.b64decode(secret["data"]["release"])
    record: Obj = json.loads(gzip.decompress(base64.b64decode(blob)))
    return record


def manifest(release: Release, objects: list[Obj]) -> str:
    """The release's objects as Helm rendered them, in install order, each with its template."""
    order = {k: i for i, k in enumerate(INSTALL_ORDER)}
    ordered = sorted(objects, key=lambda o: (order.get(o.get("kind", ""), len(order)), o.get("kind", ""),
                                             (o.get("metadata") or {}).get("name", "")))
    parts = []
    for obj in ordered:
        rendered = copy.deepcopy(obj)
        meta = rendered.get("metadata") or {}
        for key in _SERVER_FIELDS:
            meta.pop(key, None)
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if k not in (RELEASE_ANNOTATION, NAMESPACE_ANNOTATION)}
        if annotations:
            meta["annotations"] = annotations
        else:
            meta.pop("annotations", None)
        rendered.pop("status", None)
        source = release.template_of(obj)
        head = f"---\n# Source: {source}\n" if source else "---\n"
        parts.append(head + yamltext.dump(rendered))
    return "".join(parts)




# -- certificates -------------------------------------------------------------------------------------


def _key(seed: int, label: str) -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.from_private_bytes(hashlib.sha256(f"{seed}:{label}".encode()).digest())


def _cert(subject: str, key: ed25519.Ed25519PrivateKey, issuer: tuple[str, ed25519.Ed25519PrivateKey] | None,
          dns: tuple[str, ...], days: int, now: float, seed: int) -> x509.Certificate:
    start = datetime.datetime.fromtimestamp(now, datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]) if issuer else name
    serial = int.from_bytes(hashlib.sha256(f"{seed}:{subject}:serial".encode()).digest()[:16], "big") >> 1
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name).public_key(key.public_key())
               .serial_number(serial).not_valid_before(start).not_valid_after(start + datetime.timedelta(days=days)))
    if issuer is None and not dns:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    if dns:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
    return builder.sign(issuer[1] if issuer else key, None)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _fill_certificate(objects: list[Obj], release: Release, spec: Certificate, seed: int, now: float) -> None:
    """Put a generated certificate into the Secret ``spec`` names (created if the manifests lack it)."""
    label = f"{release.name}/{spec.namespace}/{spec.secret}"
    key = _key(seed, label)
    data: dict[str, bytes] = {}
    if spec.signed_by_ca:
        ca_key = _key(seed, f"{label}/ca")
        ca_name = spec.ca_common_name or f"{spec.common_name}-ca"
        ca = _cert(ca_name, ca_key, None, (), spec.days, now, seed)
        cert = _cert(spec.common_name, key, (ca_name, ca_key), spec.dns_names, spec.days, now, seed)
    else:  # self-signed: a CA itself when it names no host (cert-manager's webhook CA)
        ca = cert = _cert(spec.common_name, key, None, spec.dns_names, spec.days, now, seed)
    if "ca" in spec.keys:
        data[spec.keys["ca"]] = _pem(ca)
    data[spec.keys["certificate"]] = _pem(cert)
    data[spec.keys["key"]] = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption())
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    bundle = base64.b64encode(_pem(ca)).decode()
    copies = {(ns, name): key for ns, name, key in spec.config_maps}
    found = False
    for obj in objects:
        meta = obj.get("metadata") or {}
        if f"{obj.get('kind')}/{meta.get('name')}" in spec.ca_bundle_in:
            _set_ca_bundle(obj, bundle)
        where = (meta.get("namespace"), meta.get("name"))
        if obj.get("kind") == "Secret" and where == (spec.namespace, spec.secret):
            obj["data"] = {**(obj.get("data") or {}), **encoded}
            found = True
        elif obj.get("kind") == "ConfigMap" and where in copies:
            obj.setdefault("data", {})[copies[where]] = _pem(cert).decode()
    if not found:
        objects.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                        "metadata": {"name": spec.secret, "namespace": spec.namespace}, "data": encoded})


def _set_ca_bundle(obj: Obj, bundle: str) -> None:
    """Put ``bundle`` (base64 PEM) into every webhook client config of a webhook configuration or CRD."""
    for hook in obj.get("webhooks") or []:
        hook.setdefault("clientConfig", {})["caBundle"] = bundle
    conversion = ((obj.get("spec") or {}).get("conversion") or {}).get("webhook")
    if conversion is not None:
        conversion.setdefault("clientConfig", {})["caBundle"] = bundle


def _inject_ca(objects: list[Obj]) -> None:
    """What cert-manager's cainjector writes: the ``ca.crt`` of the Secret an object's annotation names."""
    secrets = {(o["metadata"].get("namespace"), o["metadata"].get("name")): o for o in objects
               if o.get("kind") == "Secret" and isinstance(o.get("metadata"), dict)}
    for obj in objects:
        namespace, _, name = str(((obj.get("metadata") or {}).get("annotations") or {}).get(INJECT_FROM_SECRET, "")).partition("/")
        secret = secrets.get((namespace, name)) if name else None
        ca = ((secret or {}).get("data") or {}).get("ca.crt")
        if ca:
            _set_ca_bundle(obj, ca)


# -- static pods and owner references -----------------------------------------------------------------


def _mirror(pod: Obj, now: float) -> None:
    """What the kubelet writes on the mirror pod of a static pod it read from its manifest directory."""
    digest = hashlib.md5(json.dumps(pod, sort_keys=True).encode(), usedforsecurity=False).hexdigest()
    ann = pod["metadata"].setdefault("annotations", {})
    ann.update({"kubernetes.io/config.hash": digest, MIRROR_POD_ANNOTATION: digest,
                "kubernetes.io/config.seen": rfc3339(now, 9)})


def _unresolved_owners(obj: Obj) -> bool:
    return any(not ref.get("uid") for ref in (obj.get("metadata") or {}).get("ownerReferences") or [])


def _resolve_owners(store: Any, obj: Obj) -> None:
    """Give each owner reference named without a uid the uid of the owner the store holds."""
    meta = obj["metadata"]
    for ref in meta.get("ownerReferences") or []:
        if ref.get("uid"):
            continue
        owner = store.get(ref["kind"], meta.get("namespace"), ref["name"], ref.get("apiVersion"))
        ref["uid"] = owner["metadata"]["uid"]


# -- prometheus-operator --------------------------------------------------------------------------------


def _operator_outputs(store: Any, objects: list[Obj]) -> None:
    """Fill what prometheus-operator generates for each Prometheus it runs a StatefulSet for (none on a
    cluster without the operator's CRDs)."""
    try:
        proms = store.list("Prometheus", api_version="monitoring.coreos.com/v1")
    except ApiError as e:
        if e.code != 404:
            raise
        return
    for prom in proms:
        meta = prom["metadata"]
        base, ns = f"prometheus-{meta['name']}", meta["namespace"]
        spec = prom.get("spec") or {}
        for obj in objects:
            m = obj.get("metadata") or {}
            if m.get("namespace") != ns:
                continue
            name, kind = m.get("name"), obj.get("kind")
            if kind == "Secret" and name == base:
                config = yamltext.dump(_prometheus_config(store, prom)).encode()
                obj["data"] = {"prometheus.yaml.gz": base64.b64encode(gzip.compress(config, mtime=0)).decode()}
            elif kind == "Secret" and name == f"{base}-web-config":
                web = b"tls_server_config: {}\nhttp_server_config: {}\n"
                obj["data"] = {"web-config.yaml": base64.b64encode(web).decode()}
            elif kind == "ConfigMap" and name == f"{base}-rulefiles-0":
                obj["data"] = _rule_files(store, spec)
            elif kind == "StatefulSet" and name == base:
                digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]
                m.setdefault("annotations", {})["prometheus-operator-input-hash"] = str(int(digest, 16))


def _selected(store: Any, kind: str, spec: Mapping[str, Any], which: str) -> list[Obj]:
    """The objects of ``kind`` a Prometheus selects with its ``<which>Selector`` and namespace selector."""
    ns_sel = spec.get(f"{which}NamespaceSelector")
    names = {n["metadata"]["name"] for n in store.list("Namespace")
             if ns_sel is not None and selector_from_dict(ns_sel).matches(n["metadata"].get("labels") or {})}
    sel = spec.get(f"{which}Selector")
    if sel is None:
        return []
    return [o for o in store.list(kind, api_version="monitoring.coreos.com/v1")
            if o["metadata"]["namespace"] in names and selector_from_dict(sel).matches(o["metadata"].get("labels") or {})]


def _rule_files(store: Any, spec: Mapping[str, Any]) -> dict[str, str]:
    """One file per selected PrometheusRule, ``<namespace>-<name>-<uid>.yaml`` as the operator names them."""
    out = {}
    for rule in _selected(store, "PrometheusRule", spec, "rule"):
        m = rule["metadata"]
        out[f"{m['namespace']}-{m['name']}-{m['uid']}.yaml"] = yamltext.dump(
            {"groups": (rule.get("spec") or {}).get("groups") or []})
    return out


def _prometheus_config(store: Any, prom: Obj) -> Obj:
    """The scrape configuration the operator generates: one job per ServiceMonitor endpoint."""
    spec = prom.get("spec") or {}
    meta = prom["metadata"]
    interval = spec.get("scrapeInterval") or "30s"
    jobs = []
    for sm in _selected(store, "ServiceMonitor", spec, "serviceMonitor"):
        m, s = sm["metadata"], sm.get("spec") or {}
        nss = (s.get("namespaceSelector") or {}).get("matchNames") or [m["namespace"]]
        keep = [{"source_labels": [f"__meta_kubernetes_service_label_{_label_name(k)}",
                                   f"__meta_kubernetes_service_labelpresent_{_label_name(k)}"],
                 "regex": f"({v});true", "action": "keep"}
                for k, v in sorted(((s.get("selector") or {}).get("matchLabels") or {}).items())]
        for i, ep in enumerate(s.get("endpoints") or []):
            job: Obj = {"job_name": f"serviceMonitor/{m['namespace']}/{m['name']}/{i}",
                        "honor_labels": bool(ep.get("honorLabels", False))}
            if "honorTimestamps" in ep:
                job["honor_timestamps"] = bool(ep["honorTimestamps"])
            if ep.get("trackTimestampsStaleness"):
                job["track_timestamps_staleness"] = True
            job["kubernetes_sd_configs"] = [{"role": "endpoints", "namespaces": {"names": list(nss)}}]
            job["scrape_interval"] = ep.get("interval") or interval
            job["metrics_path"] = ep.get("path") or "/metrics"
            job["scheme"] = ep.get("scheme") or "http"
            if ep.get("tlsConfig"):
                tls = ep["tlsConfig"]
                job["tls_config"] = {k: v for k, v in (("ca_file", tls.get("caFile")),
                                                       ("server_name", tls.get("serverName")),
                                                       ("insecure_skip_verify", tls.get("insecureSkipVerify")))
                                     if v is not None}
            if ep.get("bearerTokenFile"):
                job["authorization"] = {"type": "Bearer", "credentials_file": ep["bearerTokenFile"]}
            relabel = list(keep)
            if ep.get("port"):
                relabel.append({"source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": ep["port"],
                                "action": "keep"})
            relabel += [
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                {"target_label": "job", "replacement": "${1}", "source_labels": ["__meta_kubernetes_service_name"]},
            ]
            if s.get("jobLabel"):
                relabel.append({"source_labels": [f"__meta_kubernetes_service_label_{_label_name(s['jobLabel'])}"],
                                "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
            relabel.append({"target_label": "endpoint", "replacement": str(ep.get("port", ""))})
            relabel += [_snake(r) for r in ep.get("relabelings") or []]
            job["relabel_configs"] = relabel
            if ep.get("metricRelabelings"):
                job["metric_relabel_configs"] = [_snake(r) for r in ep["metricRelabelings"]]
            jobs.append(job)
    rules_dir = f"/etc/prometheus/rules/prometheus-{meta['name']}-rulefiles-0/*.yaml"
    config: Obj = {"global": {"evaluation_interval": spec.get("evaluationInterval") or "30s", "scrape_interval": interval,
                              "external_labels": {"prometheus": f"{meta['namespace']}/{meta['name']}",
                                                  "prometheus_replica": "$(POD_NAME)"}},
                   "rule_files": [rules_dir], "scrape_configs": jobs}
    remote = [_remote_write(store, meta["namespace"], rw) for rw in spec.get("remoteWrite") or []]
    if remote:
        config["remote_write"] = remote
    return config


#: RemoteWriteSpec queueConfig fields as Prometheus' queue_config names them.
_QUEUE_FIELDS = {"capacity": "capacity", "minShards": "min_shards", "maxShards": "max_shards",
                 "maxSamplesPerSend": "max_samples_per_send", "batchSendDeadline": "batch_send_deadline",
                 "minBackoff": "min_backoff", "maxBackoff": "max_backoff", "maxRetries": "max_retries"}


def _remote_write(store: Any, namespace: str, spec: Mapping[str, Any]) -> Obj:
    """One ``remote_write`` entry as the operator writes it: the URL, the basic-auth credentials read
    from the Secrets the spec names (in the Prometheus' namespace) and the queue settings."""
    out: Obj = {"url": spec["url"], "remote_timeout": spec.get("remoteTimeout") or "30s"}
    auth = spec.get("basicAuth") or {}
    if auth:
        out["basic_auth"] = {field: _secret_value(store, namespace, auth.get(field) or {}) for field in ("username", "password")}
    queue = {_QUEUE_FIELDS[k]: v for k, v in (spec.get("queueConfig") or {}).items() if k in _QUEUE_FIELDS}
    if queue:
        out["queue_config"] = queue
    return out


def _secret_value(store: Any, namespace: str, ref: Mapping[str, Any]) -> str:
    """The decoded value of a SecretKeySelector (empty when the Secret or key is missing)."""
    try:
        secret = store.get("Secret", namespace, ref.get("name", ""))
    except ApiError:
        return ""
    value = (secret.get("data") or {}).get(ref.get("key", ""), "")
    return base64.b64decode(value).decode() if value else ""


def _label_name(label: str) -> str:
    """A label key as a Kubernetes service-discovery meta label (non-alphanumerics become ``_``)."""
    return "".join(c if c.isalnum() else "_" for c in label)


def _snake(relabel: Mapping[str, Any]) -> Obj:
    """A ServiceMonitor RelabelConfig (camelCase) as Prometheus' relabel_config (snake_case)."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {names.get(k, k): v for k, v in relabel.items()}
