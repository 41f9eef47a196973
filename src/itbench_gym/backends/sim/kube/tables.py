"""Server-side ``Table`` printing, column for column as the real API server does it.

``kubectl get`` asks for ``as=Table`` and prints whatever columns the server sends, so the columns
and cell formats here (pod STATUS reasons, ``RESTARTS 3 (45s ago)``, ``AGE`` on the simulated clock)
are what an agent sees. Upstream: kubernetes ``pkg/printers/internalversion/printers.go``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from itbench_gym.lang.durations import human_duration
from itbench_gym.lang.timestamps import parse_rfc3339

from .resources import ResourceType

Obj = dict[str, Any]
Column = tuple[str, str, int, str]  # name, type, priority (1 = wide only), description
Printer = Callable[[Obj, float], list[Any]]

_NONE = "<none>"


def since(ts: str | None, now: float) -> str:
    """``translateTimestampSince``: ``<unknown>`` for a missing time."""
    if not ts:
        return "<unknown>"
    try:
        return human_duration(now - parse_rfc3339(ts))
    except ValueError:
        return "<unknown>"


def _meta(o: Obj) -> Obj:
    return o.get("metadata") or {}


def _age(o: Obj, now: float) -> str:
    return since(_meta(o).get("creationTimestamp"), now)


def _selector_string(sel: Any) -> str:
    """``metav1.FormatLabelSelector``."""
    if not isinstance(sel, dict):
        return _NONE
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op, key, values = e.get("operator"), e.get("key"), e.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(str(key))
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) if parts else _NONE


def _map_selector(sel: Any) -> str:
    if not sel:
        return _NONE
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items()))


def _containers_images(template_spec: Obj) -> list[str]:
    cs = template_spec.get("containers") or []
    return [",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)]


def _template_spec(o: Obj) -> Obj:
    return ((o.get("spec") or {}).get("template") or {}).get("spec") or {}


# -- pods -----------------------------------------------------------------------------------------


def pod_status_reason(pod: Obj) -> tuple[str, int, int, int, str | None]:
    """(STATUS, ready, total, restarts, last restart time) exactly as ``printPod`` computes them."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    restarts = 0
    sidecar_restarts = 0
    total = len(spec.get("containers") or [])
    ready = 0
    last_restart: str | None = None
    reason = status.get("phase") or ""
    if status.get("reason"):
        reason = status["reason"]

    def note_restart(cs: Obj) -> None:
        nonlocal last_restart
        finished = (((cs.get("lastState") or {}).get("terminated")) or {}).get("finishedAt")
        if finished and (last_restart is None or parse_rfc3339(finished) > parse_rfc3339(last_restart)):
            last_restart = finished

    sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    init_count = len(spec.get("initContainers") or [])
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        restarts += int(cs.get("restartCount") or 0)
        note_restart(cs)
        state = cs.get("state") or {}
        if cs.get("name") in sidecars:
            sidecar_restarts += int(cs.get("restartCount") or 0)
            total += 1
            if cs.get("ready"):
                ready += 1
        term, waiting = state.get("terminated"), state.get("waiting")
        if term is not None and term.get("exitCode") == 0:
            continue
        if cs.get("name") in sidecars and cs.get("started"):
            continue
        if term is not None:
            if not term.get("reason"):
                reason = f"Init:Signal:{term['signal']}" if term.get("signal") else f"Init:ExitCode:{term.get('exitCode', 0)}"
            else:
                reason = "Init:" + term["reason"]
        elif waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{init_count}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in status.get("conditions") or [])
    if not initializing or initialized:
        restarts = sidecar_restarts
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            note_restart(cs)
            state = cs.get("state") or {}
            waiting, term = state.get("waiting"), state.get("terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            reason = "Running" if pod_ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif status.get("phase") not in ("Succeeded", "Failed"):
            reason = "Terminating"
    return reason, ready, total, restarts, last_restart


def _pod(o: Obj, now: float) -> list[Any]:
    reason, ready, total, restarts, last = pod_status_reason(o)
    restarts_s = str(restarts)
    if restarts and last:
        restarts_s = f"{restarts} ({since(last, now)} ago)"
    spec, status = o.get("spec") or {}, o.get("status") or {}
    gates = spec.get("readinessGates") or []
    gates_s = _NONE
    if gates:
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        gates_s = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}"
    return [_meta(o).get("name"), f"{ready}/{total}", reason, restarts_s, _age(o, now),
            status.get("podIP") or _NONE, spec.get("nodeName") or _NONE,
            status.get("nominatedNodeName") or _NONE, gates_s]


_POD_COLS: list[Column] = [
    ("Name", "string", 0, "name"), ("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic."),
    ("Status", "string", 0, "The aggregate status of the containers in this pod."),
    ("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."),
    ("Age", "string", 0, "creationTimestamp"), ("IP", "string", 1, "IP address allocated to the pod."),
    ("Node", "string", 1, "Name of the node this pod is running on."),
    ("Nominated Node", "string", 1, "Name of the node where the pod is nominated to run on."),
    ("Readiness Gates", "string", 1, "If specified, all readiness gates will be evaluated for pod readiness."),
]


# -- workloads ------------------------------------------------------------------------------------


def _deployment(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [_meta(o).get("name"), f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), _age(o, now),
            *_containers_images(_template_spec(o)), _selector_string(spec.get("selector"))]


def _replicaset(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [_meta(o).get("name"), spec.get("replicas", 0), st.get("replicas", 0), st.get("readyReplicas", 0),
            _age(o, now), *_containers_images(_template_spec(o)), _selector_string(spec.get("selector"))]


def _statefulset(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [_meta(o).get("name"), f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 0)}", _age(o, now),
            *_containers_images(_template_spec(o))]


def _daemonset(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [_meta(o).get("name"), st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
            _map_selector(_template_spec(o).get("nodeSelector")), _age(o, now),
            *_containers_images(_template_spec(o)), _selector_string(spec.get("selector"))]


def _job(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    completions = spec.get("completions")
    comp = f"{st.get('succeeded', 0)}/{completions}" if completions is not None else f"{st.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}"
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    if conds.get("Complete") == "True":
        state = "Complete"
    elif conds.get("Failed") == "True":
        state = "Failed"
    elif _meta(o).get("deletionTimestamp"):
        state = "Terminating"
    elif conds.get("FailureTarget") == "True":
        state = "FailureTarget"
    elif conds.get("Suspended") == "True":
        state = "Suspended"
    else:
        state = "Running"
    duration = ""
    if st.get("startTime"):
        end = parse_rfc3339(st["completionTime"]) if st.get("completionTime") else now
        duration = human_duration(end - parse_rfc3339(st["startTime"]))
    return [_meta(o).get("name"), state, comp, duration, _age(o, now), *_containers_images(_template_spec(o)),
            _selector_string(spec.get("selector"))]


def _cronjob(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    jt_spec = ((spec.get("jobTemplate") or {}).get("spec") or {})
    tspec = (jt_spec.get("template") or {}).get("spec") or {}
    last = st.get("lastScheduleTime")
    return [_meta(o).get("name"), spec.get("schedule", ""), spec.get("timeZone") or _NONE,
            "True" if spec.get("suspend") else "False", len(st.get("active") or []),
            since(last, now) if last else _NONE, _age(o, now), *_containers_images(tspec),
            _selector_string(jt_spec.get("selector"))]


def _hpa(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    current = st.get("currentMetrics") or []
    targets = []
    for m in spec.get("metrics") or []:
        if m.get("type") != "Resource":
            targets.append("<unknown>/<unknown>")
            continue
        res = m.get("resource") or {}
        tgt = res.get("target") or {}
        cur = next((c.get("resource", {}).get("current", {}) for c in current
                    if c.get("type") == "Resource" and (c.get("resource") or {}).get("name") == res.get("name")), None)
        if "averageUtilization" in tgt:
            have = f"{cur['averageUtilization']}%" if cur and "averageUtilization" in cur else "<unknown>"
            targets.append(f"{res.get('name')}: {have}/{tgt['averageUtilization']}%")
        else:
            want = tgt.get("averageValue") or tgt.get("value") or "<unknown>"
            have = (cur or {}).get("averageValue") or "<unknown>"
            targets.append(f"{res.get('name')}: {have}/{want}")
    if not targets:
        targets_s = _NONE
    elif len(targets) > 2:
        targets_s = ", ".join(targets[:2]) + f" + {len(targets) - 2} more..."
    else:
        targets_s = ", ".join(targets)
    return [_meta(o).get("name"), f"{ref.get('kind', '')}/{ref.get('name', '')}", targets_s,
            spec.get("minReplicas", 1), spec.get("maxReplicas", 0), st.get("currentReplicas", 0), _age(o, now)]


# -- networking and config -------------------------------------------------------------------------


def _service(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    stype = spec.get("type", "ClusterIP")
    external = _NONE
    if stype == "ExternalName":
        external = spec.get("externalName") or _NONE
    elif stype == "LoadBalancer":
        ing = [i.get("ip") or i.get("hostname") for i in (st.get("loadBalancer") or {}).get("ingress") or []]
        ips = [x for x in ing if x] + list(spec.get("externalIPs") or [])
        external = ",".join(ips) if ips else "<pending>"
    elif spec.get("externalIPs"):
        external = ",".join(spec["externalIPs"])
    ports = []
    for p in spec.get("ports") or []:
        s = f"{p.get('port')}/{p.get('protocol', 'TCP')}"
        if p.get("nodePort"):
            s = f"{p.get('port')}:{p['nodePort']}/{p.get('protocol', 'TCP')}"
        ports.append(s)
    cluster_ip = spec.get("clusterIP") or _NONE
    return [_meta(o).get("name"), stype, cluster_ip, external, ",".join(ports) or _NONE, _age(o, now),
            _map_selector(spec.get("selector"))]


def _endpoints(o: Obj, now: float) -> list[Any]:
    pairs: list[str] = []
    for subset in o.get("subsets") or []:
        ports = subset.get("ports") or []
        for addr in subset.get("addresses") or []:
            if ports:
                pairs.extend(f"{addr.get('ip')}:{p.get('port')}" for p in ports)
            else:
                pairs.append(str(addr.get("ip")))
    s = ",".join(pairs[:3]) + (f" + {len(pairs) - 3} more..." if len(pairs) > 3 else "") if pairs else _NONE
    return [_meta(o).get("name"), s, _age(o, now)]


def _endpointslice(o: Obj, now: float) -> list[Any]:
    ports = [str(p["port"]) if p.get("port") is not None else "<unset>" for p in o.get("ports") or []]
    addrs = [a for e in o.get("endpoints") or [] for a in e.get("addresses") or []]
    return [_meta(o).get("name"), o.get("addressType", ""), _first_three(ports), _first_three(addrs), _age(o, now)]


def _first_three(items: list[str]) -> str:
    """``formatDiscoveryPorts`` / ``formatDiscoveryEndpoints``: three items, then a count."""
    if not items:
        return "<unset>"
    return ",".join(items[:3]) + (f" + {len(items) - 3} more..." if len(items) > 3 else "")


def _lease(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), (o.get("spec") or {}).get("holderIdentity") or "<unknown>", _age(o, now)]


def _ingress(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    hosts = [r.get("host") for r in spec.get("rules") or [] if r.get("host")]
    addrs = [i.get("ip") or i.get("hostname") for i in (st.get("loadBalancer") or {}).get("ingress") or []]
    ports = "80, 443" if spec.get("tls") else "80"
    return [_meta(o).get("name"), spec.get("ingressClassName") or _NONE, ",".join(hosts) or "*",
            ",".join(a for a in addrs if a), ports, _age(o, now)]


def _netpol(o: Obj, now: float) -> list[Any]:
    sel = (o.get("spec") or {}).get("podSelector") or {}
    s = _selector_string(sel)
    return [_meta(o).get("name"), "<none>" if s == _NONE else s, _age(o, now)]


def _configmap(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o, now)]


def _secret(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), o.get("type", "Opaque"), len(o.get("data") or {}), _age(o, now)]


def _namespace(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), (o.get("status") or {}).get("phase", "Active"), _age(o, now)]


def _node(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    ready = next((c.get("status") for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    status = {"True": "Ready", "False": "NotReady"}.get(ready or "", "Unknown")
    if spec.get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = _meta(o).get("labels") or {}
    roles = sorted({k.partition("/")[2] for k in labels if k.startswith("node-role.kubernetes.io/") and k.partition("/")[2]}
                   | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()))
    addrs = {a.get("type"): a.get("address") for a in st.get("addresses") or []}
    info = st.get("nodeInfo") or {}
    return [_meta(o).get("name"), status, ",".join(roles) or _NONE, _age(o, now), info.get("kubeletVersion", ""),
            addrs.get("InternalIP") or _NONE, addrs.get("ExternalIP") or _NONE, info.get("osImage") or "<unknown>",
            info.get("kernelVersion") or "<unknown>", info.get("containerRuntimeVersion") or "<unknown>"]


def _event(o: Obj, now: float) -> list[Any]:
    io = o.get("involvedObject") or o.get("regarding") or {}
    count = o.get("count") or o.get("deprecatedCount") or ((o.get("series") or {}).get("count")) or 1
    first = o.get("firstTimestamp") or o.get("deprecatedFirstTimestamp") or o.get("eventTime") or _meta(o).get("creationTimestamp")
    last = o.get("lastTimestamp") or o.get("deprecatedLastTimestamp") or ((o.get("series") or {}).get("lastObservedTime")) or first
    last_seen = since(last, now)
    if count > 1:
        last_seen = f"{last_seen} (x{count} over {since(first, now)})"
    src = o.get("source") or o.get("deprecatedSource") or {}
    source = src.get("component") or o.get("reportingComponent") or o.get("reportingController") or ""
    if src.get("host"):
        source = f"{source}, {src['host']}"
    return [last_seen, o.get("type", ""), o.get("reason", ""), f"{str(io.get('kind', '')).lower()}/{io.get('name', '')}",
            io.get("fieldPath", ""), source, (o.get("message") or o.get("note") or "").strip(), since(first, now),
            count, _meta(o).get("name")]


def _serviceaccount(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), len(o.get("secrets") or []), _age(o, now)]


def _access_modes(modes: list[str]) -> str:
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return ",".join(short.get(m, m) for m in modes)


def _pvc(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    phase = "Terminating" if _meta(o).get("deletionTimestamp") else st.get("phase", "")
    cap = (st.get("capacity") or {}).get("storage", "") if spec.get("volumeName") else ""
    modes = _access_modes(st.get("accessModes") or []) if spec.get("volumeName") else ""
    return [_meta(o).get("name"), phase, spec.get("volumeName", ""), cap, modes, spec.get("storageClassName", ""),
            spec.get("volumeAttributesClassName") or _NONE, _age(o, now), spec.get("volumeMode", "Filesystem")]


def _pv(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    ref = spec.get("claimRef") or {}
    claim = f"{ref.get('namespace')}/{ref.get('name')}" if ref else ""
    phase = "Terminating" if _meta(o).get("deletionTimestamp") else st.get("phase", "")
    return [_meta(o).get("name"), (spec.get("capacity") or {}).get("storage", ""),
            _access_modes(spec.get("accessModes") or []), spec.get("persistentVolumeReclaimPolicy", ""), phase, claim,
            spec.get("storageClassName", ""), spec.get("volumeAttributesClassName") or _NONE, st.get("reason", ""),
            _age(o, now), spec.get("volumeMode", "Filesystem")]


def _quota(o: Obj, now: float) -> list[Any]:
    hard = (o.get("status") or {}).get("hard") or (o.get("spec") or {}).get("hard") or {}
    used = (o.get("status") or {}).get("used") or {}
    req: list[str] = []
    lim: list[str] = []
    for k in sorted(hard):
        cell = f"{k}: {used.get(k, '0')}/{hard[k]}"
        (lim if k.startswith("limits.") else req).append(cell)
    return [_meta(o).get("name"), _age(o, now), ", ".join(req), ", ".join(lim)]


def _created_at(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), _meta(o).get("creationTimestamp", "")]


def _controllerrevision(o: Obj, now: float) -> list[Any]:
    owner = next((r for r in _meta(o).get("ownerReferences") or [] if r.get("controller")), None)
    ctrl = f"{owner.get('kind', '').lower()}.{owner.get('apiVersion', '').partition('/')[0]}/{owner.get('name')}" if owner else _NONE
    return [_meta(o).get("name"), ctrl, o.get("revision", 0), _age(o, now)]


def _pdb(o: Obj, now: float) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [_meta(o).get("name"), spec.get("minAvailable", "N/A"), spec.get("maxUnavailable", "N/A"),
            st.get("disruptionsAllowed", 0), _age(o, now)]


def _priorityclass(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), o.get("value", 0), bool(o.get("globalDefault", False)), _age(o, now),
            o.get("preemptionPolicy", "PreemptLowerPriority")]


def _binding(o: Obj, now: float) -> list[Any]:
    ref = o.get("roleRef") or {}
    subjects = o.get("subjects") or []

    def by(kind: str) -> str:
        return ",".join((f"{s.get('namespace', '')}/{s.get('name')}" if kind == "ServiceAccount" else str(s.get("name")))
                        for s in subjects if s.get("kind") == kind)

    return [_meta(o).get("name"), f"{ref.get('kind')}/{ref.get('name')}", _age(o, now), by("User"), by("Group"),
            by("ServiceAccount")]


def _storageclass(o: Obj, now: float) -> list[Any]:
    name = _meta(o).get("name")
    if (_meta(o).get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true":
        name = f"{name} (default)"
    return [name, o.get("provisioner", ""), o.get("reclaimPolicy", "Delete"), o.get("volumeBindingMode", "Immediate"),
            bool(o.get("allowVolumeExpansion", False)), _age(o, now)]


def _ingressclass(o: Obj, now: float) -> list[Any]:
    params = (o.get("spec") or {}).get("parameters")
    p = f"{params.get('kind')}/{params.get('name')}" if params else _NONE
    return [_meta(o).get("name"), (o.get("spec") or {}).get("controller", ""), p, _age(o, now)]


def _webhooks(o: Obj, now: float) -> list[Any]:
    return [_meta(o).get("name"), len(o.get("webhooks") or []), _age(o, now)]


def _cols(*spec: tuple[str, int]) -> list[Column]:
    return [(n, "integer" if n in _INT_COLS else "string", prio, "name" if n == "Name" else n) for n, prio in spec]


_INT_COLS = {"Up-to-date", "Available", "Desired", "Current", "Data", "Secrets", "Revision", "Value", "Active",
             "MinPods", "MaxPods", "Replicas", "Count", "Allowed Disruptions", "Webhooks"}

PRINTERS: dict[tuple[str, str], tuple[list[Column], Printer]] = {
    ("", "Pod"): (_POD_COLS, _pod),
    ("apps", "Deployment"): (_cols(("Name", 0), ("Ready", 0), ("Up-to-date", 0), ("Available", 0), ("Age", 0),
                                   ("Containers", 1), ("Images", 1), ("Selector", 1)), _deployment),
    ("apps", "ReplicaSet"): (_cols(("Name", 0), ("Desired", 0), ("Current", 0), ("Ready", 0), ("Age", 0),
                                   ("Containers", 1), ("Images", 1), ("Selector", 1)), _replicaset),
    ("apps", "StatefulSet"): (_cols(("Name", 0), ("Ready", 0), ("Age", 0), ("Containers", 1), ("Images", 1)),
                              _statefulset),
    ("apps", "DaemonSet"): (_cols(("Name", 0), ("Desired", 0), ("Current", 0), ("Ready", 0), ("Up-to-date", 0),
                                  ("Available", 0), ("Node Selector", 0), ("Age", 0), ("Containers", 1), ("Images", 1),
                                  ("Selector", 1)), _daemonset),
    ("apps", "ControllerRevision"): (_cols(("Name", 0), ("Controller", 0), ("Revision", 0), ("Age", 0)),
                                     _controllerrevision),
    ("batch", "Job"): (_cols(("Name", 0), ("Status", 0), ("Completions", 0), ("Duration", 0), ("Age", 0),
                             ("Containers", 1), ("Images", 1), ("Selector", 1)), _job),
    ("batch", "CronJob"): (_cols(("Name", 0), ("Schedule", 0), ("Timezone", 0), ("Suspend", 0), ("Active", 0),
                                 ("Last Schedule", 0), ("Age", 0), ("Containers", 1), ("Images", 1), ("Selector", 1)),
                           _cronjob),
    ("autoscaling", "HorizontalPodAutoscaler"): (_cols(("Name", 0), ("Reference", 0), ("Targets", 0), ("MinPods", 0),
                                                       ("MaxPods", 0), ("Replicas", 0), ("Age", 0)), _hpa),
    ("", "Service"): (_cols(("Name", 0), ("Type", 0), ("Cluster-IP", 0), ("External-IP", 0), ("Port(s)", 0),
                            ("Age", 0), ("Selector", 1)), _service),
    ("", "Endpoints"): (_cols(("Name", 0), ("Endpoints", 0), ("Age", 0)), _endpoints),
    ("discovery.k8s.io", "EndpointSlice"): (_cols(("Name", 0), ("AddressType", 0), ("Ports", 0), ("Endpoints", 0),
                                                  ("Age", 0)), _endpointslice),
    ("coordination.k8s.io", "Lease"): (_cols(("Name", 0), ("Holder", 0), ("Age", 0)), _lease),
    ("networking.k8s.io", "Ingress"): (_cols(("Name", 0), ("Class", 0), ("Hosts", 0), ("Address", 0), ("Ports", 0),
                                             ("Age", 0)), _ingress),
    ("networking.k8s.io", "IngressClass"): (_cols(("Name", 0), ("Controller", 0), ("Parameters", 0), ("Age", 0)),
                                            _ingressclass),
    ("networking.k8s.io", "NetworkPolicy"): (_cols(("Name", 0), ("Pod-Selector", 0), ("Age", 0)), _netpol),
    ("", "ConfigMap"): (_cols(("Name", 0), ("Data", 0), ("Age", 0)), _configmap),
    ("", "Secret"): (_cols(("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)), _secret),
    ("", "Namespace"): (_cols(("Name", 0), ("Status", 0), ("Age", 0)), _namespace),
    ("", "Node"): (_cols(("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0), ("Internal-IP", 1),
                         ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1), ("Container-Runtime", 1)), _node),
    ("", "Event"): (_cols(("Last Seen", 0), ("Type", 0), ("Reason", 0), ("Object", 0), ("Subobject", 1),
                          ("Source", 1), ("Message", 0), ("First Seen", 1), ("Count", 1), ("Name", 1)), _event),
    ("", "ServiceAccount"): (_cols(("Name", 0), ("Secrets", 0), ("Age", 0)), _serviceaccount),
    ("", "PersistentVolumeClaim"): (_cols(("Name", 0), ("Status", 0), ("Volume", 0), ("Capacity", 0),
                                          ("Access Modes", 0), ("StorageClass", 0), ("VolumeAttributesClass", 0),
                                          ("Age", 0), ("VolumeMode", 1)), _pvc),
    ("", "PersistentVolume"): (_cols(("Name", 0), ("Capacity", 0), ("Access Modes", 0), ("Reclaim Policy", 0),
                                     ("Status", 0), ("Claim", 0), ("StorageClass", 0), ("VolumeAttributesClass", 0),
                                     ("Reason", 0), ("Age", 0), ("VolumeMode", 1)), _pv),
    ("", "ResourceQuota"): (_cols(("Name", 0), ("Age", 0), ("Request", 0), ("Limit", 0)), _quota),
    ("", "LimitRange"): (_cols(("Name", 0), ("Created At", 0)), _created_at),
    ("policy", "PodDisruptionBudget"): (_cols(("Name", 0), ("Min Available", 0), ("Max Unavailable", 0),
                                              ("Allowed Disruptions", 0), ("Age", 0)), _pdb),
    ("scheduling.k8s.io", "PriorityClass"): (_cols(("Name", 0), ("Value", 0), ("Global-Default", 0), ("Age", 0),
                                                   ("PreemptionPolicy", 0)), _priorityclass),
    ("rbac.authorization.k8s.io", "Role"): (_cols(("Name", 0), ("Created At", 0)), _created_at),
    ("rbac.authorization.k8s.io", "ClusterRole"): (_cols(("Name", 0), ("Created At", 0)), _created_at),
    ("rbac.authorization.k8s.io", "RoleBinding"): (_cols(("Name", 0), ("Role", 0), ("Age", 0), ("Users", 1),
                                                         ("Groups", 1), ("ServiceAccounts", 1)), _binding),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): (_cols(("Name", 0), ("Role", 0), ("Age", 0), ("Users", 1),
                                                                ("Groups", 1), ("ServiceAccounts", 1)), _binding),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): (_cols(("Name", 0), ("Webhooks", 0), ("Age", 0)),
                                                                        _webhooks),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): (_cols(("Name", 0), ("Webhooks", 0), ("Age", 0)),
                                                                          _webhooks),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (_cols(("Name", 0), ("Created At", 0)), _created_at),
    ("storage.k8s.io", "StorageClass"): (_cols(("Name", 0), ("Provisioner", 0), ("ReclaimPolicy", 0),
                                               ("VolumeBindingMode", 0), ("AllowVolumeExpansion", 0), ("Age", 0)),
                                         _storageclass),
}
PRINTERS[("events.k8s.io", "Event")] = PRINTERS[("", "Event")]


_FILTER = re.compile(r"""\[\?\(@\.([\w.-]+)\s*==\s*["']([^"']*)["']\)\]""")


def _jsonpath_simple(obj: Any, path: str) -> Any:
    """The JSONPath subset CRDs use in ``additionalPrinterColumns``: fields, ``[n]``, ``[*]`` and
    ``[?(@.field=="value")]``. The API server's table converter prints the first result
    (apiextensions-apiserver ``tableconvertor``), None when there is none."""
    text = _FILTER.sub(lambda m: "[?" + m.group(1) + "=" + m.group(2) + "]", path.strip())
    current: list[Any] = [obj]
    for part in text.lstrip(".").replace("[", ".[").split("."):
        if not part:
            continue
        found: list[Any] = []
        for cur in current:
            if part == "[*]":
                found += cur if isinstance(cur, list) else list(cur.values()) if isinstance(cur, dict) else []
            elif part.startswith("[?") and part.endswith("]"):
                key, _, want = part[2:-1].partition("=")
                found += [item for item in cur if isinstance(item, dict) and str(item.get(key)) == want] \
                    if isinstance(cur, list) else []
            elif part.startswith("[") and part.endswith("]"):
                try:
                    found.append(cur[int(part[1:-1])] if isinstance(cur, list) else None)
                except (ValueError, IndexError):
                    pass
            elif isinstance(cur, dict) and part in cur:
                found.append(cur[part])
        current = [c for c in found if c is not None]
    return current[0] if current else None


def _custom_printer(columns: list[dict[str, Any]]) -> tuple[list[Column], Printer]:
    cols: list[Column] = [("Name", "string", 0, "name")]
    for c in columns:
        cols.append((str(c.get("name", "")), str(c.get("type", "string")), int(c.get("priority", 0)),
                     str(c.get("description", ""))))
    if not any(c.get("jsonPath") == ".metadata.creationTimestamp" for c in columns):
        cols.append(("Age", "date", 0, "creationTimestamp"))

    def printer(o: Obj, now: float) -> list[Any]:
        row: list[Any] = [_meta(o).get("name")]
        for c in columns:
            v = _jsonpath_simple(o, str(c.get("jsonPath", "")))
            if c.get("jsonPath") == ".metadata.creationTimestamp" or (c.get("type") == "date" and isinstance(v, str)):
                row.append(since(v, now) if v else _NONE)
            elif v is None:
                row.append(_NONE)
            elif isinstance(v, (dict, list)):
                row.append(json.dumps(v, separators=(",", ":")))
            else:
                row.append(v)
        if len(cols) > len(row):
            row.append(_age(o, now))
        return row

    return cols, printer


_DEFAULT: tuple[list[Column], Printer] = (
    [("Name", "string", 0, "name"), ("Age", "date", 0, "creationTimestamp")],
    lambda o, now: [_meta(o).get("name"), _age(o, now)],
)


def printer_for(rt: ResourceType, printer_columns: list[dict[str, Any]] | None = None) -> tuple[list[Column], Printer]:
    if rt.custom and printer_columns:
        return _custom_printer(printer_columns)
    return PRINTERS.get((rt.group, rt.kind), _DEFAULT)


def partial_metadata(o: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": _meta(o)}


def to_table(
    objs: list[Obj],
    rt: ResourceType,
    now: float,
    *,
    include_object: str = "Metadata",
    resource_version: str = "",
    continue_token: str | None = None,
    printer_columns: list[dict[str, Any]] | None = None,
    with_columns: bool = True,
) -> Obj:
    """A ``meta.k8s.io/v1`` Table of ``objs`` (already in ``rt``'s version)."""
    cols, printer = printer_for(rt, printer_columns)
    rows = []
    for o in objs:
        row: Obj = {"cells": printer(o, now)[: len(cols)]}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = partial_metadata(o)
        phase = (o.get("status") or {}).get("phase") if rt.kind == "Pod" else None
        if phase in ("Succeeded", "Failed"):
            row["conditions"] = [{"type": "Completed", "status": "True", "reason": phase, "message": "The pod has completed successfully." if phase == "Succeeded" else "The pod failed."}]
        rows.append(row)
    meta: Obj = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    table: Obj = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "rows": rows}
    if with_columns:
        table["columnDefinitions"] = [
            {"name": n, "type": t, "format": "name" if n == "Name" and d == "name" else "", "description": d,
             "priority": p} for n, t, p, d in cols]
    else:
        table["columnDefinitions"] = []
    return table
