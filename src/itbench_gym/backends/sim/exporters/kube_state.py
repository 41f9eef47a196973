"""kube-state-metrics: object state as metrics, with the exporter's real names and labels.

Only what the alert rules and agents use is produced; names and label sets follow
``kubernetes/kube-state-metrics:docs/metrics/``.
"""

from __future__ import annotations

from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike, parse_quantity
from itbench_gym.backends.sim.kube.errors import ApiError

Sample = tuple[dict[str, str], float]
JOB = {"job": "kube-state-metrics", "instance": "10.244.0.12:8080", "service": "kube-state-metrics"}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
WAITING = ("ContainerCreating", "CrashLoopBackOff", "CreateContainerConfigError", "ErrImagePull",
           "ImagePullBackOff", "CreateContainerError", "InvalidImageName")
TERMINATED = ("OOMKilled", "Completed", "Error", "ContainerCannotRun", "DeadlineExceeded", "Evicted")


def _m(name: str, value: float, **labels: str) -> Sample:
    return ({"__name__": name, **JOB, **labels}, float(value))


def _list(store: StoreLike, kind: str, ns: str | None) -> list[dict[str, Any]]:
    """Stored objects, not copies: the exporter only reads them, every tick."""
    try:
        return store.list_stored(store.registry.by_kind(kind), ns)
    except (ApiError, KeyError, LookupError):
        return []


def _pod(p: dict[str, Any]) -> list[Sample]:
    meta, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
    ns, name, uid = meta.get("namespace", ""), meta["name"], meta.get("uid", "")
    out: list[Sample] = []
    phase = status.get("phase", "Pending")
    for ph in PHASES:
        out.append(_m("kube_pod_status_phase", 1.0 if ph == phase else 0.0, namespace=ns, pod=name, uid=uid, phase=ph))
    cond = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    for cond_type, metric in (("Ready", "kube_pod_status_ready"), ("PodScheduled", "kube_pod_status_scheduled")):
        for v in ("true", "false", "unknown"):
            have = (cond.get(cond_type) or "Unknown").lower()
            out.append(_m(metric, 1.0 if have == v else 0.0, namespace=ns, pod=name, uid=uid, condition=v))
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    out.append(_m("kube_pod_owner", 1.0, namespace=ns, pod=name, uid=uid,
                  owner_kind=owner["kind"] if owner else "<none>", owner_name=owner["name"] if owner else "<none>",
                  owner_is_controller="true" if owner else "<none>"))
    out.append(_m("kube_pod_info", 1.0, namespace=ns, pod=name, uid=uid, node=spec.get("nodeName", ""),
                  pod_ip=status.get("podIP", ""), host_ip=status.get("hostIP", ""), created_by_kind=owner["kind"] if owner else "<none>",
                  created_by_name=owner["name"] if owner else "<none>", priority_class=spec.get("priorityClassName", "")))
    scheduled: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        out.append(_m("kube_pod_status_unschedulable", 1.0, namespace=ns, pod=name, uid=uid))
    statuses = {cs.get("name"): cs for cs in status.get("containerStatuses") or []}
    init_statuses = {cs.get("name"): cs for cs in status.get("initContainerStatuses") or []}
    for group, metric_prefix, sts in ((spec.get("containers") or [], "kube_pod_container", statuses),
                                       (spec.get("initContainers") or [], "kube_pod_init_container", init_statuses)):
        for c in group:
            cname = c.get("name", "")
            cs = sts.get(cname, {})
            lbl = {"namespace": ns, "pod": name, "uid": uid, "container": cname}
            out.append(_m(f"{metric_prefix}_info", 1.0, **lbl, image=c.get("image", ""), image_spec=c.get("image", ""),
                          image_id=cs.get("imageID", ""), container_id=cs.get("containerID", "")))
            state = cs.get("state") or {}
            out.append(_m(f"{metric_prefix}_status_restarts_total", float(cs.get("restartCount", 0)), **lbl))
            out.append(_m(f"{metric_prefix}_status_ready", 1.0 if cs.get("ready") else 0.0, **lbl))
            out.append(_m(f"{metric_prefix}_status_running", 1.0 if "running" in state else 0.0, **lbl))
            out.append(_m(f"{metric_prefix}_status_waiting", 1.0 if "waiting" in state else 0.0, **lbl))
            out.append(_m(f"{metric_prefix}_status_terminated", 1.0 if "terminated" in state else 0.0, **lbl))
            if "waiting" in state and (state["waiting"] or {}).get("reason"):
                out.append(_m(f"{metric_prefix}_status_waiting_reason", 1.0, **lbl, reason=state["waiting"]["reason"]))
            if "terminated" in state and (state["terminated"] or {}).get("reason"):
                out.append(_m(f"{metric_prefix}_status_terminated_reason", 1.0, **lbl, reason=state["terminated"]["reason"]))
            last = (cs.get("lastState") or {}).get("terminated") or {}
            if last.get("reason") and metric_prefix == "kube_pod_container":
                out.append(_m("kube_pod_container_status_last_terminated_reason", 1.0, **lbl, reason=last["reason"]))
                out.append(_m("kube_pod_container_status_last_terminated_exitcode", float(last.get("exitCode", 0)), **lbl))
            if metric_prefix != "kube_pod_container":
                continue
            res = c.get("resources") or {}
            for kind, metric in (("requests", "kube_pod_container_resource_requests"), ("limits", "kube_pod_container_resource_limits")):
                for rname, q in (res.get(kind) or {}).items():
                    unit = "core" if rname == "cpu" else ("byte" if rname in ("memory", "ephemeral-storage") else "integer")
                    out.append(_m(metric, parse_quantity(q), **lbl, node=spec.get("nodeName", ""), resource=rname, unit=unit))
    return out


def _deployment(d: dict[str, Any]) -> list[Sample]:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "deployment": meta["name"]}
    out = [
        _m("kube_deployment_spec_replicas", float(spec.get("replicas", 1)), **lbl),
        _m("kube_deployment_status_replicas", float(status.get("replicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_available", float(status.get("availableReplicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_unavailable", float(status.get("unavailableReplicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_updated", float(status.get("updatedReplicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_ready", float(status.get("readyReplicas", 0)), **lbl),
        _m("kube_deployment_metadata_generation", float(meta.get("generation", 1)), **lbl),
        _m("kube_deployment_status_observed_generation", float(status.get("observedGeneration", 0)), **lbl),
        _m("kube_deployment_spec_paused", 1.0 if spec.get("paused") else 0.0, **lbl),
    ]
    for c in status.get("conditions") or []:
        for v in ("true", "false", "unknown"):
            out.append(_m("kube_deployment_status_condition", 1.0 if (c.get("status") or "").lower() == v else 0.0,
                          **lbl, condition=c.get("type", ""), status=v))
    return out


def _hpa(h: dict[str, Any]) -> list[Sample]:
    meta, spec, status = h["metadata"], h.get("spec") or {}, h.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "horizontalpodautoscaler": meta["name"]}
    ref = spec.get("scaleTargetRef") or {}
    out = [
        _m("kube_horizontalpodautoscaler_info", 1.0, **lbl, scaletargetref_api_version=ref.get("apiVersion", ""),
           scaletargetref_kind=ref.get("kind", ""), scaletargetref_name=ref.get("name", "")),
        _m("kube_horizontalpodautoscaler_spec_max_replicas", float(spec.get("maxReplicas", 0)), **lbl),
        _m("kube_horizontalpodautoscaler_spec_min_replicas", float(spec.get("minReplicas", 1)), **lbl),
        _m("kube_horizontalpodautoscaler_status_current_replicas", float(status.get("currentReplicas", 0)), **lbl),
        _m("kube_horizontalpodautoscaler_status_desired_replicas", float(status.get("desiredReplicas", 0)), **lbl),
        _m("kube_horizontalpodautoscaler_metadata_generation", float(meta.get("generation", 1)), **lbl),
    ]
    for metric in spec.get("metrics") or []:
        res = metric.get("resource") or {}
        target = res.get("target") or {}
        if "averageUtilization" in target:
            out.append(_m("kube_horizontalpodautoscaler_spec_target_metric", float(target["averageUtilization"]), **lbl,
                          metric_name=res.get("name", ""), metric_target_type="utilization"))
    for c in status.get("conditions") or []:
        for v in ("true", "false", "unknown"):
            out.append(_m("kube_horizontalpodautoscaler_status_condition", 1.0 if (c.get("status") or "").lower() == v else 0.0,
                          **lbl, condition=c.get("type", ""), status=v))
    return out


def _node(n: dict[str, Any]) -> list[Sample]:
    meta, spec, status = n["metadata"], n.get("spec") or {}, n.get("status") or {}
    lbl = {"node": meta["name"]}
    info = status.get("nodeInfo") or {}
    out = [
        _m("kube_node_info", 1.0, **lbl, kernel_version=info.get("kernelVersion", ""), os_image=info.get("osImage", ""),
           container_runtime_version=info.get("containerRuntimeVersion", ""), kubelet_version=info.get("kubeletVersion", ""),
           internal_ip=next((a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), "")),
        _m("kube_node_spec_unschedulable", 1.0 if spec.get("unschedulable") else 0.0, **lbl),
    ]
    for kind, metric in (("capacity", "kube_node_status_capacity"), ("allocatable", "kube_node_status_allocatable")):
        for rname, q in (status.get(kind) or {}).items():
            unit = "core" if rname == "cpu" else ("byte" if rname in ("memory", "ephemeral-storage") or rname.startswith("hugepages") else "integer")
            out.append(_m(metric, parse_quantity(q), **lbl, resource=rname, unit=unit))
    for c in status.get("conditions") or []:
        for v in ("true", "false", "unknown"):
            out.append(_m("kube_node_status_condition", 1.0 if (c.get("status") or "").lower() == v else 0.0,
                          **lbl, condition=c.get("type", ""), status=v))
    return out


def kube_state_metrics(store: StoreLike, namespaces: list[str] | None = None) -> list[Sample]:
    """One scrape of kube-state-metrics over ``namespaces`` (all when None) plus cluster-scoped objects."""
    out: list[Sample] = []
    scopes: list[str] | list[None] = namespaces or [None]
    for ns in scopes:
        for p in _list(store, "Pod", ns):
            out += _pod(p)
        for d in _list(store, "Deployment", ns):
            out += _deployment(d)
        for h in _list(store, "HorizontalPodAutoscaler", ns):
            out += _hpa(h)
    for n in _list(store, "Node", None):
        out += _node(n)
    return out
