"""``itbench-gym cluster check``: what a cluster lacks to run an app's scenarios, in plain language.

Every finding comes from the app's own data: the CRDs its stack defines (``envs/<app>/cluster``),
the series its alert rules and golden signals read, the alert rules themselves, its pods' requests.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from kubernetes import config as kube_config
from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from itbench_gym.backends.kubernetes.config import ClusterConfig
from itbench_gym.backends.kubernetes.provision import app_objects, stack_objects
from itbench_gym.backends.rbac import agent_service_account
from itbench_gym.backends.sim.app.cluster_view import parse_quantity
from itbench_gym.spec.appfacts import load_app_facts

#: (verb, API group, resource, namespace or None for the app's): what the backend itself does.
_PERMISSIONS = (
    ("create", "", "namespaces", ""), ("create", "apps", "deployments", None), ("delete", "apps", "deployments", None),
    ("patch", "", "configmaps", None), ("create", "rbac.authorization.k8s.io", "rolebindings", None),
    ("create", "", "serviceaccounts/token", "@agent"), ("patch", "", "nodes", ""),
    ("create", "scheduling.k8s.io", "priorityclasses", ""),
)


@dataclass(frozen=True)
class Finding:
    ok: bool
    area: str
    text: str

    def line(self) -> str:
        return f"{'ok     ' if self.ok else 'MISSING'} {self.area}: {self.text}"


def check_cluster(config: ClusterConfig, app_dir: Path) -> list[Finding]:
    """Connect with ``config`` and report each requirement of the app at ``app_dir``, met or not."""
    path = config.kubeconfig_path()
    try:
        api = kube_config.new_client_from_config(config_file=str(path), context=config.context)
    except Exception as exc:  # the kubernetes loader raises many kinds; the user needs the message
        return [Finding(False, "kubeconfig", f"{path}: {exc}")]
    cache = tempfile.TemporaryDirectory(prefix="itbench-gym-check-")  # discovery as the cluster is now, not as cached
    try:
        objects = dynamic.DynamicClient(api, cache_file=str(Path(cache.name) / "discovery.json"))
    except Exception as exc:
        api.close()
        cache.cleanup()
        return [Finding(False, "API server", f"{api.configuration.host} does not answer discovery: {exc}")]
    try:
        version = objects.request("get", "/version", serializer=lambda _client, data: data)
        findings = [Finding(True, "API server", f"{api.configuration.host}, Kubernetes {version.get('gitVersion')}")]
        findings += _crds(objects, app_dir)
        findings += _permissions(objects, load_app_facts(app_dir).namespace or "default")
        findings += _capacity(objects, app_dir)
        findings += _stack(config, app_dir)
        return findings
    finally:
        api.close()
        cache.cleanup()


def _crds(objects: dynamic.DynamicClient, app_dir: Path) -> Iterator[Finding]:
    for crd in (o for o in stack_objects(app_dir) if o["kind"] == "CustomResourceDefinition"):
        spec = crd["spec"]
        served = [v["name"] for v in spec.get("versions") or [] if v.get("served", True)]
        kind = spec["names"]["kind"]
        try:
            objects.resources.get(api_version=f"{spec['group']}/{served[0]}", kind=kind)
            yield Finding(True, "CRD", crd["metadata"]["name"])
        except (ResourceNotFoundError, IndexError):
            yield Finding(False, "CRD", f"{crd['metadata']['name']} ({kind}) is not served: install the component that "
                                        f"defines it (itbench-gym cluster manifests writes it)")


def _permissions(objects: dynamic.DynamicClient, namespace: str) -> Iterator[Finding]:
    for verb, group, resource, where in _PERMISSIONS:
        ns = namespace if where is None else agent_service_account().namespace if where == "@agent" else where
        name, _, sub = resource.partition("/")
        attrs = {"verb": verb, "group": group, "resource": name, **({"subresource": sub} if sub else {}),
                 **({"namespace": ns} if ns else {})}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": attrs}}
        try:
            allowed = bool(objects.request("post", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body).status.allowed)
        except ApiException as exc:
            allowed = False
            resource = f"{resource} (the review failed: {exc.reason})"
        scope = f" in namespace {ns}" if ns else " cluster-wide"
        yield Finding(allowed, "permission", f"{verb} {resource}{scope}" + ("" if allowed else ": the kubeconfig's user may not"))


def _requests(app_dir: Path) -> tuple[float, float]:
    """CPU cores and memory bytes the app's pods request, replicas counted."""
    cpu = memory = 0.0
    for obj in app_objects(app_dir):
        if obj["kind"] not in ("Deployment", "StatefulSet"):
            continue
        spec = obj.get("spec") or {}
        replicas = int(spec.get("replicas", 1))
        for container in ((spec.get("template") or {}).get("spec") or {}).get("containers") or []:
            wanted = (container.get("resources") or {}).get("requests") or {}
            cpu += replicas * parse_quantity(wanted.get("cpu"))
            memory += replicas * parse_quantity(wanted.get("memory"))
    return cpu, memory


def _capacity(objects: dynamic.DynamicClient, app_dir: Path) -> Iterator[Finding]:
    try:
        nodes = objects.resources.get(api_version="v1", kind="Node").get().to_dict()["items"]
    except ApiException as exc:
        yield Finding(False, "capacity", f"cannot list nodes: {exc.reason}")
        return
    schedulable = [n for n in nodes if not (n.get("spec") or {}).get("unschedulable")]
    cpu = sum(parse_quantity(((n.get("status") or {}).get("allocatable") or {}).get("cpu")) for n in schedulable)
    memory = sum(parse_quantity(((n.get("status") or {}).get("allocatable") or {}).get("memory")) for n in schedulable)
    need_cpu, need_memory = _requests(app_dir)
    enough = cpu >= need_cpu and memory >= need_memory
    yield Finding(enough, "capacity", f"{len(schedulable)} schedulable node(s) with {cpu:.1f} CPU and {memory / 2**30:.1f} GiB "
                                      f"allocatable; the app requests {need_cpu:.1f} CPU and {need_memory / 2**30:.1f} GiB")


def _stack(config: ClusterConfig, app_dir: Path) -> Iterator[Finding]:
    if config.prometheus is None:
        yield Finding(False, "Prometheus", "no URL configured (prometheus: in the cluster configuration): no alerts, "
                                           "no metrics, the wall clock instead of the cluster's")
        return
    facts = load_app_facts(app_dir)
    series = {"kube-state-metrics": "kube_pod_info", "cAdvisor": "container_memory_working_set_bytes"}
    if facts.golden_signals is not None:
        series["span metrics (otel-collector)"] = facts.golden_signals.calls
    for component, metric in series.items():
        try:
            found = _query(config.prometheus, f"count({{__name__={metric!r}}})")
        except requests.RequestException as exc:
            yield Finding(False, "Prometheus", f"{config.prometheus} does not answer: {exc}")
            return
        yield Finding(found > 0, component, f"{metric}: {found:.0f} series" if found else f"no {metric} series in Prometheus")
    loaded = _rule_names(config.prometheus)
    wanted = {r["alert"] for o in app_objects(app_dir) if o["kind"] == "PrometheusRule"
              for g in o["spec"].get("groups") or [] for r in g.get("rules") or [] if "alert" in r}
    missing = sorted(wanted - loaded)
    yield Finding(not missing, "alert rules", f"{len(wanted) - len(missing)} of the app's {len(wanted)} alerting rules loaded"
                  + (f"; missing: {', '.join(missing)}" if missing else ""))
    for name, url, path in (("Loki", config.loki, "/loki/api/v1/labels"), ("Jaeger", config.jaeger, "/api/services")):
        if url is None:
            yield Finding(False, name, "no URL configured: the agent gets no such tool")
            continue
        try:
            requests.get(url.rstrip("/") + path, timeout=10).raise_for_status()
            yield Finding(True, name, url)
        except requests.RequestException as exc:
            yield Finding(False, name, f"{url} does not answer: {exc}")


def _query(prometheus: str, expr: str) -> float:
    resp = requests.get(prometheus.rstrip("/") + "/api/v1/query", params={"query": expr}, timeout=30)
    resp.raise_for_status()
    result: list[Any] = resp.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _rule_names(prometheus: str) -> set[str]:
    resp = requests.get(prometheus.rstrip("/") + "/api/v1/rules", params={"type": "alert"}, timeout=30)
    resp.raise_for_status()
    return {r["name"] for g in resp.json()["data"]["groups"] for r in g["rules"]}
