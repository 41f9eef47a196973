"""kube-state-metrics v2: object state as metrics, with the exporter's real names and labels.

Names and label sets follow ``kubernetes/kube-state-metrics:docs/metrics/``. Which resources are
exposed is the exporter's ``--resources`` flag (kube-prometheus-stack 88.5.0's chart lists
endpointslices, not endpoints); ``kube_*_labels`` carry no ``label_*`` labels, as with the chart's
empty ``metricLabelsAllowlist``. Series are exposed without ``job``/``instance``: the scrape adds its
target's labels. An object's series are computed again only when its resourceVersion changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from itbench_gym.backends.sim.app.cluster_view import StoreLike, parse_quantity

from .object_series import ObjectSeries

Sample = tuple[dict[str, str], float]
Obj = dict[str, Any]
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
#: ``kube_pod_status_reason``'s reasons (pod/status.go ``podStatusReasons``).
POD_REASONS = ("Evicted", "NodeAffinity", "NodeLost", "Shutdown", "UnexpectedAdmissionError")
#: ``kube_node_status_condition`` / ``*_status_condition`` values.
CONDITION_VALUES = ("true", "false", "unknown")


def _m(metric: str, value: float, /, **labels: str) -> Sample:
    return ({"__name__": metric, **labels}, float(value))


def _ts(text: Any) -> float | None:
    """An RFC 3339 timestamp as Unix seconds."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _owner(meta: Obj) -> dict[str, str]:
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    if owner is None:
        return {"owner_kind": "<none>", "owner_name": "<none>", "owner_is_controller": "<none>"}
    return {"owner_kind": str(owner.get("kind", "")), "owner_name": str(owner.get("name", "")), "owner_is_controller": "true"}


def _conditions(metric: str, status: Obj, lbl: dict[str, str]) -> list[Sample]:
    out: list[Sample] = []
    for c in status.get("conditions") or []:
        have = str(c.get("status") or "Unknown").lower()
        for v in CONDITION_VALUES:
            out.append(_m(metric, 1.0 if have == v else 0.0, **lbl, condition=str(c.get("type", "")), status=v))
    return out


def _unit(resource: str) -> str:
    if resource == "cpu":
        return "core"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages"):
        return "byte"
    return "integer"


def _created(metric: str, meta: Obj, lbl: dict[str, str]) -> list[Sample]:
    t = _ts(meta.get("creationTimestamp"))
    return [_m(metric, t, **lbl)] if t is not None else []


def pod_samples(p: Obj) -> list[Sample]:
    meta, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
    ns, name, uid = meta.get("namespace", ""), meta["name"], meta.get("uid", "")
    node = spec.get("nodeName", "")
    pl = {"namespace": ns, "pod": name, "uid": uid}
    out: list[Sample] = []
    phase = status.get("phase", "Pending")
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        phase = "Unknown"
    for ph in PHASES:
        out.append(_m("kube_pod_status_phase", 1.0 if ph == phase else 0.0, **pl, phase=ph))
    cond = {c.get("type"): c for c in status.get("conditions") or []}
    for cond_type, metric in (("Ready", "kube_pod_status_ready"), ("PodScheduled", "kube_pod_status_scheduled")):
        if cond_type not in cond:
            continue
        have = str(cond[cond_type].get("status") or "Unknown").lower()
        for v in CONDITION_VALUES:
            out.append(_m(metric, 1.0 if have == v else 0.0, **pl, condition=v))
    owner = _owner(meta)
    out.append(_m("kube_pod_owner", 1.0, **pl, **owner))
    out.append(_m("kube_pod_info", 1.0, **pl, node=node, pod_ip=status.get("podIP", ""), host_ip=status.get("hostIP", ""),
                  created_by_kind=owner["owner_kind"], created_by_name=owner["owner_name"],
                  priority_class=spec.get("priorityClassName", ""), host_network=str(bool(spec.get("hostNetwork"))).lower()))
    out.append(_m("kube_pod_labels", 1.0, **pl))
    for ip in status.get("podIPs") or ([{"ip": status["podIP"]}] if status.get("podIP") else []):
        addr = str(ip.get("ip", ""))
        out.append(_m("kube_pod_ips", 1.0, **pl, ip=addr, ip_family="6" if ":" in addr else "4"))
    out += _created("kube_pod_created", meta, pl)
    started = _ts(status.get("startTime"))
    if started is not None:
        out.append(_m("kube_pod_start_time", started, **pl))
    deleted = _ts(meta.get("deletionTimestamp"))
    if deleted is not None:
        out.append(_m("kube_pod_deletion_timestamp", deleted, **pl))
    out.append(_m("kube_pod_restart_policy", 1.0, **pl, type=spec.get("restartPolicy", "Always")))
    out.append(_m("kube_pod_service_account", 1.0, **pl, service_account=spec.get("serviceAccountName", "default")))
    out.append(_m("kube_pod_scheduler", 1.0, **pl, name=spec.get("schedulerName", "default-scheduler")))
    if status.get("qosClass"):
        for q in ("BestEffort", "Burstable", "Guaranteed"):
            out.append(_m("kube_pod_status_qos_class", 1.0 if q == status["qosClass"] else 0.0, **pl, qos_class=q))
    reason = status.get("reason")
    if reason:
        out.append(_m("kube_pod_status_reason", 1.0, **pl, reason=reason if reason in POD_REASONS else "Other"))
    for t in spec.get("tolerations") or []:
        out.append(_m("kube_pod_tolerations", 1.0, **pl, key=str(t.get("key", "")), operator=str(t.get("operator", "")),
                      value=str(t.get("value", "")), effect=str(t.get("effect", "")),
                      toleration_seconds=str(t.get("tolerationSeconds", ""))))
    scheduled = cond.get("PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        out.append(_m("kube_pod_status_unschedulable", 1.0, **pl))
    elif scheduled.get("status") == "True" and _ts(scheduled.get("lastTransitionTime")) is not None:
        out.append(_m("kube_pod_status_scheduled_time", _ts(scheduled.get("lastTransitionTime")) or 0.0, **pl))
    ready = cond.get("Ready") or {}
    if ready.get("status") == "True" and _ts(ready.get("lastTransitionTime")) is not None:
        out.append(_m("kube_pod_status_ready_time", _ts(ready.get("lastTransitionTime")) or 0.0, **pl))
    for group, prefix, key in ((spec.get("containers") or [], "kube_pod_container", "containerStatuses"),
                               (spec.get("initContainers") or [], "kube_pod_init_container", "initContainerStatuses")):
        statuses = {cs.get("name"): cs for cs in status.get(key) or []}
        for c in group:
            out += _container(prefix, c, statuses.get(c.get("name", "")) or {}, pl, node)
    return out


def _container(prefix: str, c: Obj, cs: Obj, pl: dict[str, str], node: str) -> list[Sample]:
    lbl = {**pl, "container": c.get("name", "")}
    out = [_m(f"{prefix}_info", 1.0, **lbl, image=str(cs.get("image") or c.get("image", "")), image_spec=c.get("image", ""),
              image_id=cs.get("imageID", ""), container_id=cs.get("containerID", ""))]
    res = c.get("resources") or {}
    for kind in ("requests", "limits"):
        for rname, q in (res.get(kind) or {}).items():
            out.append(_m(f"{prefix}_resource_{kind}", parse_quantity(q), **lbl, node=node, resource=rname, unit=_unit(rname)))
    if not cs:
        return out
    state = cs.get("state") or {}
    out.append(_m(f"{prefix}_status_restarts_total", float(cs.get("restartCount", 0)), **lbl))
    out.append(_m(f"{prefix}_status_ready", 1.0 if cs.get("ready") else 0.0, **lbl))
    for s in ("running", "waiting", "terminated"):
        out.append(_m(f"{prefix}_status_{s}", 1.0 if s in state else 0.0, **lbl))
    started = _ts((state.get("running") or {}).get("startedAt"))
    if started is not None:
        out.append(_m(f"{prefix}_state_started", started, **lbl))
    reason = (state.get("waiting") or {}).get("reason")
    if reason:
        out.append(_m(f"{prefix}_status_waiting_reason", 1.0, **lbl, reason=reason))
    reason = (state.get("terminated") or {}).get("reason")
    if reason:
        out.append(_m(f"{prefix}_status_terminated_reason", 1.0, **lbl, reason=reason))
    last = (cs.get("lastState") or {}).get("terminated") or {}
    if last.get("reason"):
        out.append(_m(f"{prefix}_status_last_terminated_reason", 1.0, **lbl, reason=last["reason"]))
        out.append(_m(f"{prefix}_status_last_terminated_exitcode", float(last.get("exitCode", 0)), **lbl))
        finished = _ts(last.get("finishedAt"))
        if finished is not None:
            out.append(_m(f"{prefix}_status_last_terminated_timestamp", finished, **lbl))
    return out


def deployment_samples(d: Obj) -> list[Sample]:
    meta, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "deployment": meta["name"]}
    out = [
        _m("kube_deployment_spec_replicas", float(spec.get("replicas", 1)), **lbl),
        _m("kube_deployment_status_replicas", float(status.get("replicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_available", float(status.get("availableReplicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_unavailable", float(status.get("unavailableReplicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_updated", float(status.get("updatedReplicas", 0)), **lbl),
        _m("kube_deployment_status_replicas_ready", float(status.get("readyReplicas", 0)), **lbl),
        _m("kube_deployment_status_observed_generation", float(status.get("observedGeneration", 0)), **lbl),
        _m("kube_deployment_metadata_generation", float(meta.get("generation", 1)), **lbl),
        _m("kube_deployment_spec_paused", 1.0 if spec.get("paused") else 0.0, **lbl),
        _m("kube_deployment_labels", 1.0, **lbl),
    ]
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    replicas = int(spec.get("replicas", 1))
    for key, metric, round_up in (("maxUnavailable", "max_unavailable", False), ("maxSurge", "max_surge", True)):
        if key in rolling:
            out.append(_m(f"kube_deployment_spec_strategy_rollingupdate_{metric}",
                          _int_or_percent(rolling[key], replicas, round_up), **lbl))
    out += _created("kube_deployment_created", meta, lbl)
    return out + _conditions("kube_deployment_status_condition", status, lbl)


def _int_or_percent(value: Any, total: int, round_up: bool) -> float:
    """``intstr.GetScaledValueFromIntOrPercent``."""
    text = str(value)
    if text.endswith("%"):
        scaled = float(text[:-1]) * total / 100.0
        return float(-(-scaled // 1)) if round_up else float(scaled // 1)
    return float(text)


def replicaset_samples(r: Obj) -> list[Sample]:
    meta, spec, status = r["metadata"], r.get("spec") or {}, r.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "replicaset": meta["name"]}
    return [
        _m("kube_replicaset_spec_replicas", float(spec.get("replicas", 1)), **lbl),
        _m("kube_replicaset_status_replicas", float(status.get("replicas", 0)), **lbl),
        _m("kube_replicaset_status_fully_labeled_replicas", float(status.get("fullyLabeledReplicas", 0)), **lbl),
        _m("kube_replicaset_status_ready_replicas", float(status.get("readyReplicas", 0)), **lbl),
        _m("kube_replicaset_status_observed_generation", float(status.get("observedGeneration", 0)), **lbl),
        _m("kube_replicaset_metadata_generation", float(meta.get("generation", 1)), **lbl),
        _m("kube_replicaset_owner", 1.0, **lbl, **_owner(meta)),
        _m("kube_replicaset_labels", 1.0, **lbl),
        *_created("kube_replicaset_created", meta, lbl),
    ]


def statefulset_samples(s: Obj) -> list[Sample]:
    meta, spec, status = s["metadata"], s.get("spec") or {}, s.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "statefulset": meta["name"]}
    out = [
        _m("kube_statefulset_replicas", float(spec.get("replicas", 1)), **lbl),
        _m("kube_statefulset_status_replicas", float(status.get("replicas", 0)), **lbl),
        _m("kube_statefulset_status_replicas_current", float(status.get("currentReplicas", 0)), **lbl),
        _m("kube_statefulset_status_replicas_ready", float(status.get("readyReplicas", 0)), **lbl),
        _m("kube_statefulset_status_replicas_available", float(status.get("availableReplicas", 0)), **lbl),
        _m("kube_statefulset_status_replicas_updated", float(status.get("updatedReplicas", 0)), **lbl),
        _m("kube_statefulset_status_observed_generation", float(status.get("observedGeneration", 0)), **lbl),
        _m("kube_statefulset_metadata_generation", float(meta.get("generation", 1)), **lbl),
        _m("kube_statefulset_ordinals_start", float((spec.get("ordinals") or {}).get("start", 0)), **lbl),
        _m("kube_statefulset_labels", 1.0, **lbl),
        *_created("kube_statefulset_created", meta, lbl),
    ]
    for key, metric in (("currentRevision", "kube_statefulset_status_current_revision"),
                        ("updateRevision", "kube_statefulset_status_update_revision")):
        if status.get(key):
            out.append(_m(metric, 1.0, **lbl, revision=status[key]))
    return out


def daemonset_samples(d: Obj) -> list[Sample]:
    meta, status = d["metadata"], d.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "daemonset": meta["name"]}
    fields = (("currentNumberScheduled", "current_number_scheduled"), ("desiredNumberScheduled", "desired_number_scheduled"),
              ("numberAvailable", "number_available"), ("numberMisscheduled", "number_misscheduled"),
              ("numberReady", "number_ready"), ("numberUnavailable", "number_unavailable"),
              ("observedGeneration", "observed_generation"), ("updatedNumberScheduled", "updated_number_scheduled"))
    out = [_m(f"kube_daemonset_status_{metric}", float(status.get(key, 0)), **lbl) for key, metric in fields]
    out.append(_m("kube_daemonset_metadata_generation", float(meta.get("generation", 1)), **lbl))
    out.append(_m("kube_daemonset_labels", 1.0, **lbl))
    return out + _created("kube_daemonset_created", meta, lbl)


def job_samples(j: Obj) -> list[Sample]:
    meta, spec, status = j["metadata"], j.get("spec") or {}, j.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "job_name": meta["name"]}
    out = [
        _m("kube_job_info", 1.0, **lbl),
        _m("kube_job_labels", 1.0, **lbl),
        _m("kube_job_owner", 1.0, **lbl, **_owner(meta)),
        _m("kube_job_spec_parallelism", float(spec.get("parallelism", 1)), **lbl),
        _m("kube_job_status_active", float(status.get("active", 0)), **lbl),
        _m("kube_job_status_succeeded", float(status.get("succeeded", 0)), **lbl),
        _m("kube_job_status_failed", float(status.get("failed", 0)), **lbl),
        *_created("kube_job_created", meta, lbl),
    ]
    if "completions" in spec:
        out.append(_m("kube_job_spec_completions", float(spec["completions"]), **lbl))
    if "activeDeadlineSeconds" in spec:
        out.append(_m("kube_job_spec_active_deadline_seconds", float(spec["activeDeadlineSeconds"]), **lbl))
    for key, metric in (("startTime", "kube_job_status_start_time"), ("completionTime", "kube_job_status_completion_time")):
        t = _ts(status.get(key))
        if t is not None:
            out.append(_m(metric, t, **lbl))
    for c in status.get("conditions") or []:
        if c.get("type") in ("Complete", "Failed"):
            have = str(c.get("status") or "Unknown").lower()
            for v in CONDITION_VALUES:
                out.append(_m(f"kube_job_{str(c['type']).lower()}", 1.0 if have == v else 0.0, **lbl, condition=v))
    return out


def service_samples(s: Obj) -> list[Sample]:
    meta, spec = s["metadata"], s.get("spec") or {}
    lbl = {"namespace": meta.get("namespace", ""), "service": meta["name"], "uid": meta.get("uid", "")}
    out = [
        _m("kube_service_info", 1.0, **lbl, cluster_ip=str(spec.get("clusterIP", "")), external_name=str(spec.get("externalName", "")),
           external_traffic_policy=str(spec.get("externalTrafficPolicy", "")), load_balancer_ip=str(spec.get("loadBalancerIP", ""))),
        _m("kube_service_spec_type", 1.0, **lbl, type=str(spec.get("type", "ClusterIP"))),
        _m("kube_service_labels", 1.0, **lbl),
        *_created("kube_service_created", meta, lbl),
    ]
    for ip in spec.get("externalIPs") or []:
        out.append(_m("kube_service_spec_external_ip", 1.0, **lbl, external_ip=str(ip)))
    return out


def endpoints_samples(e: Obj) -> list[Sample]:
    meta = e["metadata"]
    lbl = {"namespace": meta.get("namespace", ""), "endpoint": meta["name"]}
    out = [_m("kube_endpoint_info", 1.0, **lbl), _m("kube_endpoint_labels", 1.0, **lbl), *_created("kube_endpoint_created", meta, lbl)]
    for subset in e.get("subsets") or []:
        for port in subset.get("ports") or []:
            pl = {"port_name": str(port.get("name", "")), "port_protocol": str(port.get("protocol", "TCP")), "port_number": str(port.get("port", ""))}
            out.append(_m("kube_endpoint_ports", 1.0, **lbl, **pl))
            for ready, key in (("true", "addresses"), ("false", "notReadyAddresses")):
                for a in subset.get(key) or []:
                    out.append(_m("kube_endpoint_address", 1.0, **lbl, ip=str(a.get("ip", "")), **pl, ready=ready))
    return out


def endpointslice_samples(e: Obj) -> list[Sample]:
    meta = e["metadata"]
    lbl = {"namespace": meta.get("namespace", ""), "endpointslice": meta["name"]}
    out = [_m("kube_endpointslice_info", 1.0, **lbl, addresstype=str(e.get("addressType", ""))),
           _m("kube_endpointslice_labels", 1.0, **lbl), *_created("kube_endpointslice_created", meta, lbl)]
    for port in e.get("ports") or []:
        out.append(_m("kube_endpointslice_ports", 1.0, **lbl, port_name=str(port.get("name", "")),
                      port_protocol=str(port.get("protocol", "TCP")), port_number=str(port.get("port", ""))))
    for ep in e.get("endpoints") or []:
        cond, ref = ep.get("conditions") or {}, ep.get("targetRef") or {}
        for addr in ep.get("addresses") or []:
            out.append(_m("kube_endpointslice_endpoints", 1.0, **lbl, address=str(addr),
                          ready=str(bool(cond.get("ready"))).lower(), serving=str(bool(cond.get("serving", cond.get("ready")))).lower(),
                          terminating=str(bool(cond.get("terminating"))).lower(), hostname=str(ep.get("hostname", "")),
                          targetref_kind=str(ref.get("kind", "")), targetref_name=str(ref.get("name", "")),
                          targetref_namespace=str(ref.get("namespace", "")), endpoint_nodename=str(ep.get("nodeName", "")),
                          endpoint_zone=str(ep.get("zone", ""))))
    return out


def namespace_samples(n: Obj) -> list[Sample]:
    meta, status = n["metadata"], n.get("status") or {}
    lbl = {"namespace": meta["name"]}
    phase = status.get("phase") or ("Terminating" if meta.get("deletionTimestamp") else "Active")
    out = [_m("kube_namespace_status_phase", 1.0 if phase == p else 0.0, **lbl, phase=p) for p in ("Active", "Terminating")]
    out.append(_m("kube_namespace_labels", 1.0, **lbl))
    out += _created("kube_namespace_created", meta, lbl)
    for c in status.get("conditions") or []:
        have = str(c.get("status") or "Unknown").lower()
        for v in CONDITION_VALUES:
            out.append(_m("kube_namespace_status_condition", 1.0 if have == v else 0.0, **lbl, condition=str(c.get("type", "")), status=v))
    return out


def configmap_samples(c: Obj) -> list[Sample]:
    meta = c["metadata"]
    lbl = {"namespace": meta.get("namespace", ""), "configmap": meta["name"]}
    return [_m("kube_configmap_info", 1.0, **lbl), _m("kube_configmap_labels", 1.0, **lbl),
            _m("kube_configmap_metadata_resource_version", float(meta.get("resourceVersion") or 0), **lbl),
            *_created("kube_configmap_created", meta, lbl)]


def secret_samples(s: Obj) -> list[Sample]:
    meta = s["metadata"]
    lbl = {"namespace": meta.get("namespace", ""), "secret": meta["name"]}
    return [_m("kube_secret_info", 1.0, **lbl), _m("kube_secret_type", 1.0, **lbl, type=str(s.get("type", "Opaque"))),
            _m("kube_secret_labels", 1.0, **lbl), _m("kube_secret_owner", 1.0, **lbl, **_owner(meta)),
            _m("kube_secret_metadata_resource_version", float(meta.get("resourceVersion") or 0), **lbl),
            *_created("kube_secret_created", meta, lbl)]


def hpa_samples(h: Obj) -> list[Sample]:
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
        _m("kube_horizontalpodautoscaler_labels", 1.0, **lbl),
    ]
    for metric in spec.get("metrics") or []:
        res = metric.get("resource") or {}
        target = res.get("target") or {}
        if "averageUtilization" in target:
            out.append(_m("kube_horizontalpodautoscaler_spec_target_metric", float(target["averageUtilization"]), **lbl,
                          metric_name=res.get("name", ""), metric_target_type="utilization"))
        elif "averageValue" in target:
            out.append(_m("kube_horizontalpodautoscaler_spec_target_metric", parse_quantity(target["averageValue"]), **lbl,
                          metric_name=res.get("name", ""), metric_target_type="average"))
    return out + _conditions("kube_horizontalpodautoscaler_status_condition", status, lbl)


def node_samples(n: Obj) -> list[Sample]:
    meta, spec, status = n["metadata"], n.get("spec") or {}, n.get("status") or {}
    lbl = {"node": meta["name"]}
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []
    out = [
        _m("kube_node_info", 1.0, **lbl, kernel_version=info.get("kernelVersion", ""), os_image=info.get("osImage", ""),
           container_runtime_version=info.get("containerRuntimeVersion", ""), kubelet_version=info.get("kubeletVersion", ""),
           kubeproxy_version=info.get("kubeProxyVersion", ""), provider_id=spec.get("providerID", ""),
           pod_cidr=spec.get("podCIDR", ""), system_uuid=info.get("systemUUID", ""),
           internal_ip=next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "")),
        _m("kube_node_spec_unschedulable", 1.0 if spec.get("unschedulable") else 0.0, **lbl),
        _m("kube_node_labels", 1.0, **lbl),
        *_created("kube_node_created", meta, lbl),
    ]
    for key in meta.get("labels") or {}:
        if key.startswith("node-role.kubernetes.io/"):
            out.append(_m("kube_node_role", 1.0, **lbl, role=key.split("/", 1)[1]))
    for cidr in spec.get("podCIDRs") or []:
        out.append(_m("kube_node_spec_pod_cidrs", 1.0, **lbl, pod_cidr=str(cidr)))
    for t in spec.get("taints") or []:
        out.append(_m("kube_node_spec_taint", 1.0, **lbl, key=str(t.get("key", "")), value=str(t.get("value", "")),
                      effect=str(t.get("effect", ""))))
    for a in addresses:
        out.append(_m("kube_node_status_addresses", 1.0, **lbl, type=str(a.get("type", "")), address=str(a.get("address", ""))))
    for kind, metric in (("capacity", "kube_node_status_capacity"), ("allocatable", "kube_node_status_allocatable")):
        for rname, q in (status.get(kind) or {}).items():
            out.append(_m(metric, parse_quantity(q), **lbl, resource=rname, unit=_unit(rname)))
    return out + _conditions("kube_node_status_condition", status, lbl)


def resourcequota_samples(q: Obj) -> list[Sample]:
    meta, status = q["metadata"], q.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "resourcequota": meta["name"]}
    out = _created("kube_resourcequota_created", meta, lbl)
    for kind in ("hard", "used"):
        for rname, value in sorted((status.get(kind) or {}).items()):
            out.append(_m("kube_resourcequota", parse_quantity(value), **lbl, resource=rname, type=kind))
    return out


def persistentvolumeclaim_samples(c: Obj) -> list[Sample]:
    meta, spec, status = c["metadata"], c.get("spec") or {}, c.get("status") or {}
    lbl = {"namespace": meta.get("namespace", ""), "persistentvolumeclaim": meta["name"]}
    phase = status.get("phase") or "Pending"
    out = [
        _m("kube_persistentvolumeclaim_info", 1.0, **lbl, storageclass=str(spec.get("storageClassName") or ""),
           volumename=str(spec.get("volumeName") or ""), volumemode=str(spec.get("volumeMode") or "")),
        _m("kube_persistentvolumeclaim_labels", 1.0, **lbl),
        *[_m("kube_persistentvolumeclaim_status_phase", 1.0 if phase == p else 0.0, **lbl, phase=p)
          for p in ("Lost", "Bound", "Pending")],
        *[_m("kube_persistentvolumeclaim_access_mode", 1.0, **lbl, access_mode=str(m)) for m in spec.get("accessModes") or []],
        *_created("kube_persistentvolumeclaim_created", meta, lbl),
    ]
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is not None:
        out.append(_m("kube_persistentvolumeclaim_resource_requests_storage_bytes", parse_quantity(storage), **lbl))
    return out


def persistentvolume_samples(v: Obj) -> list[Sample]:
    meta, spec, status = v["metadata"], v.get("spec") or {}, v.get("status") or {}
    lbl = {"persistentvolume": meta["name"]}
    phase = status.get("phase") or "Pending"
    claim = spec.get("claimRef") or {}
    out = [
        _m("kube_persistentvolume_info", 1.0, **lbl, storageclass=str(spec.get("storageClassName") or ""),
           host_path=str((spec.get("hostPath") or {}).get("path", ""))),
        _m("kube_persistentvolume_labels", 1.0, **lbl),
        *[_m("kube_persistentvolume_status_phase", 1.0 if phase == p else 0.0, **lbl, phase=p)
          for p in ("Pending", "Available", "Bound", "Released", "Failed")],
        *_created("kube_persistentvolume_created", meta, lbl),
    ]
    if claim:
        out.append(_m("kube_persistentvolume_claim_ref", 1.0, **lbl, name=str(claim.get("name", "")),
                      claim_namespace=str(claim.get("namespace", ""))))
    capacity = (spec.get("capacity") or {}).get("storage")
    if capacity is not None:
        out.append(_m("kube_persistentvolume_capacity_bytes", parse_quantity(capacity), **lbl))
    return out


#: ``--resources`` name -> (kind, its families).
RESOURCES: dict[str, tuple[str, Callable[[Obj], list[Sample]]]] = {
    "pods": ("Pod", pod_samples),
    "deployments": ("Deployment", deployment_samples),
    "replicasets": ("ReplicaSet", replicaset_samples),
    "statefulsets": ("StatefulSet", statefulset_samples),
    "daemonsets": ("DaemonSet", daemonset_samples),
    "jobs": ("Job", job_samples),
    "services": ("Service", service_samples),
    "endpoints": ("Endpoints", endpoints_samples),
    "endpointslices": ("EndpointSlice", endpointslice_samples),
    "namespaces": ("Namespace", namespace_samples),
    "configmaps": ("ConfigMap", configmap_samples),
    "secrets": ("Secret", secret_samples),
    "horizontalpodautoscalers": ("HorizontalPodAutoscaler", hpa_samples),
    "nodes": ("Node", node_samples),
    "resourcequotas": ("ResourceQuota", resourcequota_samples),
    "persistentvolumeclaims": ("PersistentVolumeClaim", persistentvolumeclaim_samples),
    "persistentvolumes": ("PersistentVolume", persistentvolume_samples),
}
#: kube-state-metrics' default ``--resources`` (``pkg/options/resource.go``), as far as the twin has the kinds.
DEFAULT_RESOURCES = ("configmaps", "daemonsets", "deployments", "endpoints", "horizontalpodautoscalers", "jobs",
                     "namespaces", "nodes", "persistentvolumeclaims", "persistentvolumes", "pods", "replicasets",
                     "resourcequotas", "secrets", "services", "statefulsets")


def resources_flag(args: Iterable[str]) -> tuple[str, ...]:
    """The resources a kube-state-metrics container's ``--resources=a,b`` argument enables."""
    for arg in args:
        if str(arg).startswith("--resources="):
            return tuple(r for r in str(arg).split("=", 1)[1].split(",") if r)
    return DEFAULT_RESOURCES


class KubeStateMetrics:
    """The exporter: each object's series, recomputed only when the object changed (``ObjectSeries``)."""

    def __init__(self) -> None:
        self._series = ObjectSeries()

    def collect(self, store: StoreLike, resources: Iterable[str] = DEFAULT_RESOURCES) -> list[Sample]:
        return [s for run in self.runs(store, resources) for s in run]

    def runs(self, store: StoreLike, resources: Iterable[str] = DEFAULT_RESOURCES) -> list[list[Sample]]:
        """Each object's series as one run; an unchanged object's run is the same list as last time (never modified)."""
        return self._series.runs(store, (RESOURCES[res] for res in resources if res in RESOURCES))


def kube_state_metrics(store: StoreLike, resources: Iterable[str] = DEFAULT_RESOURCES) -> list[Sample]:
    """One uncached collection (tests, one-off reads); series carry no target labels."""
    return KubeStateMetrics().collect(store, resources)
