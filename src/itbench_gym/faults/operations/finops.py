"""FinOps faults: changes that make the cluster cost more (or hide that it does) while every service
keeps working, so only OpenCost's figures and the budget alerts give them away.

Each works through the Kubernetes API alone, on any workload or namespace its schema allows: a budget
alert's threshold in its PrometheusRule, container requests, an autoscaler's floor, a copy of a
Deployment that no Service sends traffic to, a claim bound to a volume no pod mounts. Removal replays
the journal. The one object the fault does not create itself, the volume the provisioner makes for the
orphaned claim, goes with the claim by its reclaim policy (``Delete``, the class default: deleting the
claim releases the volume and its provisioner deletes it); only a volume that would outlive its claim
(``Retain``) is journalled as the fault's, so removal deletes it too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes.utils import parse_quantity

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import Change, FaultContext, ObjectRef
from itbench_gym.faults.operations.common import Obj, autoscaler_of, edited_containers, pod_template, target
from itbench_gym.faults.operations.scheduling import HELPER_IMAGE
from itbench_gym.spec.budget import budget_threshold, format_number, with_threshold

#: How long the idle copy may take to have all its replicas available (ITBench's rollout wait).
COPY_WAIT_SECONDS = 300.0
#: How long a claim may take to bind (scheduling its consumer, provisioning, binding), and its consumer to go.
BIND_WAIT_SECONDS = 300.0
CONSUMER_GONE_SECONDS = 120.0
#: Why the copy is there, as ``kubectl ... --record`` would have written it: a leftover, not a fault.
COPY_CHANGE_CAUSE = "kubectl create deployment {name} --replicas={replicas} (load test copy of deployment/{source})"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
#: Where the consumer pod mounts the claim.
CONSUMER_MOUNT = "/data"
#: The workload kinds whose selectors a copy's pods must not match (they would count or adopt them).
_SELECTING_WORKLOADS = (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "DaemonSet"), ("apps/v1", "ReplicaSet"))


# -- budget alert ------------------------------------------------------------------------------------


def misconfigure_budget_alert(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Set the threshold of every rule named ``args.alert`` in the PrometheusRule to ``args.threshold``;
    the whole ``spec.groups`` is sent (a merge patch replaces lists), so the journal restores it as it was."""
    ref = target(args)
    rule = ctx.require(ref)
    name, threshold = str(args["alert"]), float(args["threshold"])
    groups = copy.deepcopy((rule.get("spec") or {}).get("groups") or [])
    changed: list[str] = []
    for group in groups:
        for item in group.get("rules") or []:
            if item.get("alert") != name:
                continue
            expr = str(item.get("expr", ""))
            parsed = budget_threshold(expr)
            if parsed is None:
                raise FaultError(f"{ref}: alert {name!r} in group {group.get('name')!r} is not a budget alert: "
                                 f"its expr does not end in '> <number>': {expr.strip()!r}")
            item["expr"] = with_threshold(expr, threshold)
            changed.append(f"{format_number(parsed[1])} -> {format_number(threshold)}")
    if not changed:
        alerts = sorted({str(i["alert"]) for g in groups for i in g.get("rules") or [] if i.get("alert")})
        raise FaultError(f"{ref} has no alert {name!r}; its alerts: {', '.join(alerts) or 'none'}")
    ctx.patch(ref, {"spec": {"groups": groups}}, "merge")
    return f"{ref}: alert {name} threshold {', '.join(changed)}"


# -- requests --------------------------------------------------------------------------------------


def _quantities(values: Mapping[str, Any], what: str) -> dict[str, str]:
    """The quantity strings of ``values``, each checked as Kubernetes parses it."""
    out = {}
    for resource, value in values.items():
        try:
            parse_quantity(value)
        except ValueError:
            raise FaultError(f"{what}.{resource}: {value!r} is not a Kubernetes quantity") from None
        out[str(resource)] = str(value)
    return out


def over_provision_requests(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Set the containers' requests; a limit below its new request is raised to it, as the API refuses
    requests above limits (the pod would never be created)."""
    ref, names = edited_containers(ctx, args)
    requests = _quantities(args["requests"], "requests")
    if not requests:
        raise FaultError("requests: give cpu, memory or both")
    by_name = {c["name"]: c for c in pod_template(ctx.require(ref)).get("containers") or []}
    patches, raised = [], []
    for name in names:
        limits = (by_name[name].get("resources") or {}).get("limits") or {}
        lift = {r: q for r, q in requests.items() if r in limits and parse_quantity(limits[r]) < parse_quantity(q)}
        resources: Obj = {"requests": dict(requests)}
        if lift:
            resources["limits"] = lift
            raised += [f"{name} {r} limit {limits[r]} -> {q}" for r, q in sorted(lift.items())]
        patches.append({"name": name, "resources": resources})
    ctx.patch(ref, {"spec": {"template": {"spec": {"containers": patches}}}})
    asked = ", ".join(f"{r} {q}" for r, q in sorted(requests.items()))
    return f"{ref}: {', '.join(names)}: requests {asked}" + (f"; {'; '.join(raised)}" if raised else "")


# -- autoscaler floor ---------------------------------------------------------------------------------


def raise_autoscaler_min_replicas(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Raise the floor of the autoscaler that targets the workload (to its maxReplicas unless given):
    the workload keeps that many replicas however little load it has."""
    ref = target(args)
    hpa = autoscaler_of(ctx, ref)
    spec = ctx.require(hpa).get("spec") or {}
    ceiling, floor = int(spec["maxReplicas"]), int(spec.get("minReplicas") or 1)
    wanted = int(args.get("minReplicas", ceiling))
    if wanted > ceiling:
        raise FaultError(f"minReplicas {wanted} is above the maxReplicas {ceiling} of {hpa} (the API would refuse it)")
    if wanted <= floor:
        raise FaultError(f"minReplicas {wanted} does not raise the minReplicas {floor} of {hpa}")
    ctx.patch(hpa, {"spec": {"minReplicas": wanted}}, "merge")
    return f"{hpa}: minReplicas {floor} -> {wanted} (maxReplicas {ceiling})"


# -- idle copy -----------------------------------------------------------------------------------------


def _matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (``matchLabels``/``matchExpressions``) against labels; an empty or absent one matches nothing
    here (a selector-less Service selects no pods, and workloads must have one)."""
    match_labels, expressions = (selector or {}).get("matchLabels") or {}, (selector or {}).get("matchExpressions") or []
    if not match_labels and not expressions:
        return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expr in expressions:
        value, values, op = labels.get(str(expr.get("key"))), set(expr.get("values") or []), expr.get("operator")
        holds = {"In": value in values, "NotIn": value not in values, "Exists": value is not None, "DoesNotExist": value is None}
        if not holds.get(str(op), False):
            return False
    return True


def _selector_keys(selector: Mapping[str, Any]) -> Iterable[str]:
    yield from selector.get("matchLabels") or {}
    yield from (str(e.get("key")) for e in selector.get("matchExpressions") or [])


def _items(ctx: FaultContext, api_version: str, kind: str, namespace: str) -> list[Obj]:
    items: list[Obj] = ctx.resource(api_version, kind).get(namespace=namespace).to_dict()["items"]
    return items


def _unselected_labels(ctx: FaultContext, namespace: str, labels: Mapping[str, str], name: str) -> dict[str, str]:
    """``labels`` without every key a Service or workload of the namespace selects on, named after the copy;
    FaultError if a selector still picks them (then the copy would get traffic or be counted as another's)."""
    services = [(f"Service {namespace}/{s['metadata']['name']}", {"matchLabels": (s.get("spec") or {}).get("selector") or {}})
                for s in _items(ctx, "v1", "Service", namespace)]
    workloads = [(f"{kind} {namespace}/{w['metadata']['name']}", (w.get("spec") or {}).get("selector") or {})
                 for api_version, kind in _SELECTING_WORKLOADS for w in _items(ctx, api_version, kind, namespace)]
    selected = {key for _, selector in [*services, *workloads] for key in _selector_keys(selector)}
    out = {k: v for k, v in labels.items() if k not in selected}
    out["app.kubernetes.io/name"] = name
    for owner, selector in [*services, *workloads]:
        if _matches(selector, out):
            raise FaultError(f"{owner} would select the pods of the copy {name!r} (labels {out}); choose another name")
    return out


def _pods_matching(ctx: FaultContext, namespace: str, labels: Mapping[str, str]) -> list[str]:
    return [p["metadata"]["name"] for p in _items(ctx, "v1", "Pod", namespace)
            if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())]


def _copy_available(ctx: FaultContext, ref: ObjectRef, replicas: int) -> bool:
    status = (ctx.get(ref) or {}).get("status") or {}
    return status.get("availableReplicas") == replicas and status.get("updatedReplicas") == replicas


def copy_idle_workload(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """A Deployment ``args.name`` beside the original with its pod template but labels no Service
    (nor workload) selects: it runs ``args.replicas`` pods that receive no traffic and cost what they request."""
    source = target(args)
    original = ctx.require(source)
    name, replicas, namespace = str(args["name"]), int(args["replicas"]), str(source.namespace)
    ref = ObjectRef("apps/v1", "Deployment", name, namespace)
    if ctx.get(ref) is not None:
        raise FaultError(f"{ref} already exists")
    template = copy.deepcopy(original["spec"]["template"])
    meta = template.setdefault("metadata", {})
    labels = _unselected_labels(ctx, namespace, meta.get("labels") or {}, name)
    selector = {"app.kubernetes.io/name": name}
    taken = _pods_matching(ctx, namespace, selector)
    if taken:
        raise FaultError(f"pods {', '.join(sorted(taken))} already carry app.kubernetes.io/name={name}; choose another name")
    meta["labels"] = labels
    spec: Obj = {k: copy.deepcopy(v) for k, v in original["spec"].items()
                 if k in ("strategy", "minReadySeconds", "revisionHistoryLimit", "progressDeadlineSeconds")}
    spec.update(replicas=replicas, selector={"matchLabels": selector}, template=template)
    cause = COPY_CHANGE_CAUSE.format(name=name, replicas=replicas, source=source.name)
    ctx.create({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                             "annotations": {"kubernetes.io/change-cause": cause}},
                "spec": spec})
    if not ctx.wait_for(lambda: _copy_available(ctx, ref, replicas), COPY_WAIT_SECONDS):
        raise FaultError(f"{ref} did not have {replicas} available replica(s) within {COPY_WAIT_SECONDS:.0f} s")
    return f"{ref}: copy of {source} with {replicas} replica(s), labels {labels}"


# -- orphaned claim ------------------------------------------------------------------------------------


def _storage_class(ctx: FaultContext, name: str | None) -> Obj:
    """The claim's StorageClass: the one named, else the cluster's default (the newest, as Kubernetes picks)."""
    resource = ctx.resource("storage.k8s.io/v1", "StorageClass")
    if name is not None:
        found = ctx.get(ObjectRef("storage.k8s.io/v1", "StorageClass", name))
        if found is None:
            known = sorted(sc["metadata"]["name"] for sc in resource.get().to_dict()["items"])
            raise FaultError(f"no StorageClass {name!r}; classes: {', '.join(known) or 'none'}")
        return found
    defaults = [sc for sc in resource.get().to_dict()["items"]
                if ((sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)) == "true"]
    if not defaults:
        raise FaultError("the cluster has no default StorageClass; give storageClassName")
    chosen: Obj = max(defaults, key=lambda sc: (str(sc["metadata"].get("creationTimestamp") or ""), sc["metadata"]["name"]))
    return chosen


def _bound_volume(ctx: FaultContext, claim: ObjectRef) -> str | None:
    found = ctx.get(claim) or {}
    if (found.get("status") or {}).get("phase") != "Bound":
        return None
    return str((found.get("spec") or {}).get("volumeName") or "") or None


def _adopt_if_retained(ctx: FaultContext, ref: ObjectRef) -> None:
    """Journal the claim's volume as made by the fault when its reclaim policy would keep it (Released)
    after removal deletes the claim; a ``Delete`` volume is left to the provisioner, as on a cluster."""
    policy = ((ctx.get(ref) or {}).get("spec") or {}).get("persistentVolumeReclaimPolicy")
    if policy != "Delete" and not any(change.ref == ref for change in ctx.journal):
        ctx.journal.append(Change(ref, None))


def orphan_volume_claim(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Create the claim and get it bound: a class that binds on first consumer gets a short-lived pod
    mounting it, deleted once the claim is Bound. The claim keeps its volume, which no pod uses; removal
    deleting the claim releases the volume to its reclaim policy."""
    namespace, name = str(args["namespace"]), str(args["name"])
    if ctx.get(ObjectRef("v1", "Namespace", namespace)) is None:
        raise FaultError(f"namespace {namespace!r} does not exist")
    storage = _quantities({"storage": args["storage"]}, "args")["storage"]
    class_name = args.get("storageClassName")
    sc = _storage_class(ctx, None if class_name is None else str(class_name))
    claim = ObjectRef("v1", "PersistentVolumeClaim", name, namespace)
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if class_name is not None:
        spec["storageClassName"] = str(class_name)
    ctx.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    consumer = None
    started = ctx.now()
    if sc.get("volumeBindingMode") == "WaitForFirstConsumer":
        consumer = ObjectRef("v1", "Pod", f"{name}-init", namespace)
        few = {"cpu": "10m", "memory": "16Mi"}
        ctx.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": consumer.name, "namespace": namespace},
                    "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "init", "image": HELPER_IMAGE, "command": ["/bin/sh"], "args": ["-c", "sleep infinity"],
                                             "resources": {"requests": few, "limits": few},
                                             "volumeMounts": [{"name": "data", "mountPath": CONSUMER_MOUNT}]}],
                             "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]}})
    if not ctx.wait_for(lambda: _bound_volume(ctx, claim) is not None, BIND_WAIT_SECONDS):
        raise FaultError(f"{claim} (StorageClass {sc['metadata']['name']}) was not Bound within {BIND_WAIT_SECONDS:.0f} s")
    volume = str(_bound_volume(ctx, claim))
    bound_after = ctx.now() - started
    _adopt_if_retained(ctx, ObjectRef("v1", "PersistentVolume", volume))
    if consumer is not None:
        pod = consumer
        ctx.delete(pod)
        if not ctx.wait_for(lambda: ctx.get(pod) is None, CONSUMER_GONE_SECONDS, interval=1.0):
            raise FaultError(f"{pod} (the claim's first consumer) was not gone within {CONSUMER_GONE_SECONDS:.0f} s")
    how = f"; consumer {consumer.name} deleted" if consumer is not None else ""
    return f"{claim} ({storage}, StorageClass {sc['metadata']['name']}) Bound to PersistentVolume {volume} after {bound_after:.0f} s{how}"


OPERATIONS = {
    "misconfigure_budget_alert": misconfigure_budget_alert,
    "over_provision_requests": over_provision_requests,
    "raise_autoscaler_min_replicas": raise_autoscaler_min_replicas,
    "copy_idle_workload": copy_idle_workload,
    "orphan_volume_claim": orphan_volume_claim,
}
