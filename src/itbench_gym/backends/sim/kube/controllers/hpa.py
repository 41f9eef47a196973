"""HorizontalPodAutoscaler (autoscaling/v2) with the upstream replica calculation.

FinOps scenarios hinge on it (lowered CPU/memory targets → too many pods), so the arithmetic is
upstream's: utilization = Σusage / Σrequests over pods with metrics, tolerance 0.1, missing and
unready pods assumed at 100 % / 0 % in the direction that dampens the change, the max over all
metrics, stabilisation windows (scale-down 300 s by default) and the scaling-rate policies, a
sync every 15 s, and the AbleToScale / ScalingActive / ScalingLimited conditions with upstream
reasons and messages.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from itbench_gym.lang.selectors import selector_from_dict
from itbench_gym.lang.timestamps import rfc3339

from ..errors import ApiError
from .base import Cache, Context, Controller, Key
from .util import (
    USAGE_WINDOW_SECONDS,
    condition,
    container_requests,
    format_quantity,
    is_terminating,
    parse_time,
    pod_phase,
    quantity,
    set_condition,
)

Obj = dict[str, Any]
Usage = Callable[[str, str], dict[str, tuple[float, float]] | None]

SYNC_PERIOD = 15.0
TOLERANCE = 0.1
_COMPONENT = "horizontal-pod-autoscaler"
_DEFAULT_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
               "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15},
                            {"type": "Pods", "value": 4, "periodSeconds": 15}]}
_DEFAULT_DOWN = {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
                 "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}
_KIND_PLURAL = {"Deployment": "deployments", "StatefulSet": "statefulsets", "ReplicaSet": "replicasets"}



#: Upstream's --horizontal-pod-autoscaler-cpu-initialization-period and --...-initial-readiness-delay.
CPU_INITIALIZATION_PERIOD = 300.0
INITIAL_READINESS_DELAY = 30.0


def _cpu_sample_ignored(pod: Obj, now: float) -> bool:
    """Whether the autoscaler sets a pod's CPU sample aside as unready, as upstream's replica calculator
    does: without a Ready condition or a start time; in its first 5 minutes, when not Ready or when the
    sample's window began before the pod became Ready (a start-up burst is not load); later, when it has
    never been Ready."""
    ready = condition(pod, "Ready")
    started = parse_time((pod.get("status") or {}).get("startTime"))
    if ready is None or started is None:
        return True
    transition = parse_time(ready.get("lastTransitionTime")) or started
    if started + CPU_INITIALIZATION_PERIOD > now:
        return ready.get("status") == "False" or now - USAGE_WINDOW_SECONDS < transition
    return ready.get("status") == "False" and started + INITIAL_READINESS_DELAY > transition


@dataclass
class HpaMemory:
    """What the controller remembers between syncs (upstream keeps it in memory too)."""

    recommendations: list[tuple[float, int]] = field(default_factory=list)
    scale_events: list[tuple[float, int]] = field(default_factory=list)  # (time, replica change)


class MetricError(Exception):
    """A metric could not be computed; the message is upstream's wording."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class HpaController(Controller):
    name = "hpa"

    def __init__(self, ctx: Context, usage: Usage) -> None:
        super().__init__(ctx)
        self.usage = usage
        self.memory: dict[Key, HpaMemory] = {}
        #: whether a pod matches a target's selector, by the pod object (a stored object never
        #: changes in place: a pod's status write makes a new one) and the selector's text
        self._matched: dict[tuple[int, str], tuple[Obj, bool]] = {}

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "HorizontalPodAutoscaler":
            if event == "DELETED":
                self.memory.pop(Cache.key_of(obj), None)
                return ()
            if event == "ADDED" or (old or {}).get("spec") != obj.get("spec"):
                return [Cache.key_of(obj)]
        return ()

    def snapshot_state(self) -> dict[Key, HpaMemory]:
        return copy.deepcopy(self.memory)

    def restore_state(self, state: dict[Key, HpaMemory]) -> None:
        self.memory = copy.deepcopy(state)

    # -- metrics --------------------------------------------------------------------------------

    def _pods(self, hpa: Obj, target: Obj) -> list[Obj]:
        """The namespace's pods the target's selector picks (each pod matched once while it is the same object)."""
        selector = (target.get("spec") or {}).get("selector")
        ns = hpa["metadata"].get("namespace") or ""
        pods = list(self.ctx.cache.list("Pod", ns))
        if not pods:
            return []
        text, matched = json.dumps(selector, sort_keys=True), self._matched
        if len(matched) > 16 * len(pods) + 1024:  # pods long replaced
            matched.clear()
        chosen = None
        out = []
        for p in pods:
            known = matched.get((id(p), text))
            if known is None or known[0] is not p:
                if chosen is None:
                    chosen = selector_from_dict(selector)  # parsed once for every pod
                known = matched[(id(p), text)] = (p, chosen.matches(p["metadata"].get("labels")))
            if known[1]:
                out.append(p)
        return out

    def _resource_replicas(self, metric: Obj, pods: list[Obj], current: int) -> tuple[int, Obj, str]:
        res = metric.get("resource") or {}
        name = res.get("name", "cpu")
        target = res.get("target") or {}
        index = 0 if name == "cpu" else 1
        usage: dict[str, float] = {}
        requests: dict[str, float] = {}
        unready: set[str] = set()
        missing: set[str] = set()
        counted = [p for p in pods if not is_terminating(p) and pod_phase(p) != "Failed"]
        for p in counted:
            pname = p["metadata"]["name"]
            total = Decimal(0)
            for c in (p.get("spec") or {}).get("containers") or []:
                req = container_requests(c).get(name)
                if req is None and target.get("type", "Utilization") == "Utilization":
                    raise MetricError(
                        "FailedGetResourceMetric",
                        f"failed to get {name} utilization: missing request for {name} in container {c.get('name')} of Pod {pname}",
                    )
                total += req or Decimal(0)
            requests[pname] = float(total)
            per_container = self.usage(p["metadata"].get("namespace") or "", pname)
            if not per_container:
                missing.add(pname)
                continue
            usage[pname] = sum(v[index] for v in per_container.values())
            if name == "cpu" and _cpu_sample_ignored(p, self.ctx.now()):
                unready.add(pname)
        for pname in unready:
            usage.pop(pname, None)
        if not usage:
            raise MetricError(
                "FailedGetResourceMetric",
                f"failed to get {name} utilization: did not receive metrics for targeted pods (pods might be unready)",
            )
        ready_count = len(usage)
        kind = target.get("type", "Utilization")

        def ratio(u: dict[str, float]) -> tuple[float, int, float]:
            total_usage = sum(u.values())
            if kind == "Utilization":
                total_req = sum(requests[p] for p in u)
                util = int(total_usage * 100 / total_req) if total_req > 0 else 0
                return util / float(target.get("averageUtilization", 80)), util, total_usage / len(u)
            want = float(quantity(target.get("averageValue", "0")))
            avg = total_usage / len(u)
            return (avg / want if want > 0 else 0.0), 0, avg

        usage_ratio, util, avg = ratio(usage)
        scale_up_unready = bool(unready) and usage_ratio > 1.0
        desired: int
        if not scale_up_unready and not missing:
            desired = current if abs(1.0 - usage_ratio) <= TOLERANCE else math.ceil(usage_ratio * ready_count)
        else:
            filled = dict(usage)
            for pname in missing:
                filled[pname] = requests[pname] if usage_ratio < 1.0 and kind == "Utilization" else (
                    avg if usage_ratio < 1.0 else 0.0)
            if scale_up_unready:
                for pname in unready:
                    filled[pname] = 0.0
            new_ratio, _, _ = ratio(filled)
            if abs(1.0 - new_ratio) <= TOLERANCE or (usage_ratio < 1.0 < new_ratio) or (usage_ratio > 1.0 > new_ratio):
                desired = current
            else:
                desired = math.ceil(new_ratio * len(filled))
                if (new_ratio < 1.0 and desired > current) or (new_ratio > 1.0 and desired < current):
                    desired = current
        current_metric: Obj = {"averageValue": format_quantity(Decimal(str(round(avg, 3))), name)}
        if kind == "Utilization":
            current_metric["averageUtilization"] = util
        label = f"{name} resource utilization (percentage of request)" if kind == "Utilization" else f"{name} resource"
        return desired, {"type": "Resource", "resource": {"name": name, "current": current_metric}}, label

    # -- behaviour --------------------------------------------------------------------------------

    def _stabilize(self, mem: HpaMemory, behavior: Obj, desired: int, current: int, now: float) -> tuple[int, str, str]:
        up = float((behavior.get("scaleUp") or {}).get("stabilizationWindowSeconds", _DEFAULT_UP["stabilizationWindowSeconds"]))
        down = float((behavior.get("scaleDown") or {}).get("stabilizationWindowSeconds", _DEFAULT_DOWN["stabilizationWindowSeconds"]))
        up_rec, down_rec = desired, desired
        for at, rec in mem.recommendations:
            if at > now - up:
                up_rec = min(up_rec, rec)
            if at > now - down:
                down_rec = max(down_rec, rec)
        horizon = max(up, down)
        mem.recommendations = [(at, rec) for at, rec in mem.recommendations if at > now - horizon] + [(now, desired)]
        out = max(current, up_rec)
        out = min(out, down_rec)
        if out == desired:
            return out, "ReadyForNewScale", "recommended size matches current size"
        if out > desired:
            return out, "ScaleDownStabilized", \
                "recent recommendations were higher than current one, applying the highest recent recommendation"
        return out, "ScaleUpStabilized", \
            "recent recommendations were lower than current one, applying the lowest recent recommendation"

    def _rate_limit(self, mem: HpaMemory, rules: Obj, desired: int, current: int, now: float, up: bool) -> int:
        policies = rules.get("policies") or []
        if rules.get("selectPolicy") == "Disabled":
            return current
        limits = []
        for pol in policies:
            period = float(pol.get("periodSeconds", 15))
            changed = sum(d for at, d in mem.scale_events if at > now - period and (d > 0) == up)
            start = current - changed
            value = int(pol.get("value", 0))
            if up:
                limits.append(math.ceil(start * (1 + value / 100)) if pol.get("type") == "Percent" else start + value)
            else:
                limits.append(math.ceil(start * (1 - value / 100)) if pol.get("type") == "Percent" else start - value)
        if not limits:
            return desired
        select_min = rules.get("selectPolicy") == "Min"
        if up:
            limit = min(limits) if select_min else max(limits)
            return min(desired, limit)
        limit = max(limits) if select_min else min(limits)
        return max(desired, limit)

    # -- sync -----------------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        hpa = self.ctx.cache.get("HorizontalPodAutoscaler", *key)
        if hpa is None:
            self.memory.pop(key, None)
            return
        now = self.ctx.now()
        self.requeue_at(key, now + SYNC_PERIOD)
        mem = self.memory.setdefault(key, HpaMemory())
        spec = hpa.get("spec") or {}
        status = dict(hpa.get("status") or {})
        conditions = list(status.get("conditions") or [])
        ref = spec.get("scaleTargetRef") or {}
        kind, tname = ref.get("kind", ""), ref.get("name", "")
        target = self.ctx.cache.get(kind, key[0], tname) if kind in _KIND_PLURAL else None
        if target is None:
            plural = _KIND_PLURAL.get(kind, (kind or "unknown").lower() + "s")
            msg = f'the HPA controller was unable to get the target\'s current scale: {plural}.apps "{tname}" not found'
            self.ctx.recorder.record(hpa, "Warning", "FailedGetScale", f'{plural}.apps "{tname}" not found',
                                     component=_COMPONENT)
            conditions = set_condition(conditions, {"type": "AbleToScale", "status": "False", "reason": "FailedGetScale",
                                                    "message": msg}, now)
            self._write(hpa, status, conditions)
            return
        current = int((target.get("spec") or {}).get("replicas", 1))
        lo, hi = int(spec.get("minReplicas", 1) or 1), int(spec.get("maxReplicas", 1))
        metrics_status: list[Obj] = []
        if current == 0 and lo != 0:
            desired = 0
            conditions = set_condition(conditions, {
                "type": "ScalingActive", "status": "False", "reason": "ScalingDisabled",
                "message": "scaling is disabled since the replica count of the target is zero"}, now)
            self._write(hpa, self._status(hpa, status, current, desired, metrics_status), conditions)
            return
        proposals: list[tuple[int, str]] = []
        errors: list[MetricError] = []
        pods = self._pods(hpa, target)
        metrics = spec.get("metrics") or [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
        for metric in metrics:
            if metric.get("type") != "Resource":
                errors.append(MetricError("FailedGetExternalMetric" if metric.get("type") == "External" else "FailedGetPodsMetric",
                                          f"unable to get metric {metric.get('type')}: no custom metrics API served by the twin"))
                continue
            try:
                desired_m, current_metric, label = self._resource_replicas(metric, pods, current)
            except MetricError as e:
                # kept without its traceback, which holds this frame and so the list: a cycle per sync
                errors.append(e.with_traceback(None))
                continue
            metrics_status.append(current_metric)
            proposals.append((desired_m, label))
        # Upstream computeReplicasForMetrics: all metrics invalid, or some invalid and the valid ones
        # would scale down, is an error (no scaling) reported with the first invalid metric.
        if not proposals or (errors and max(p[0] for p in proposals) < current):
            first = errors[0] if errors else MetricError("FailedGetResourceMetric", "no metrics")
            self.ctx.recorder.record(hpa, "Warning", first.reason, first.message, component=_COMPONENT)
            self.ctx.recorder.record(
                hpa, "Warning", "FailedComputeMetricsReplicas",
                f"invalid metrics ({len(errors)} invalid out of {len(metrics)}), first error is: failed to get "
                f"{((metrics[0].get('resource') or {}).get('name', 'cpu'))} resource metric value: {first.message}",
                component=_COMPONENT)
            conditions = set_condition(conditions, {"type": "ScalingActive", "status": "False", "reason": first.reason,
                                                    "message": f"the HPA was unable to compute the replica count: {first.message}"}, now)
            self._write(hpa, self._status(hpa, status, current, current, metrics_status), conditions)
            return
        desired, label = max(proposals, key=lambda p: p[0])
        reason_text = f"{label} above target" if desired > current else "All metrics below target"
        if current > hi:
            reason_text = "Current number of replicas above Spec.MaxReplicas"
        elif current < lo:
            reason_text = "Current number of replicas below Spec.MinReplicas"
        conditions = set_condition(conditions, {
            "type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
            "message": f"the HPA was able to successfully calculate a replica count from {label}"}, now)
        behavior = spec.get("behavior") or {}
        stabilized, able_reason, able_msg = self._stabilize(mem, behavior, desired, current, now)
        limited = stabilized
        limit_cond = ("False", "DesiredWithinRange", "the desired count is within the acceptable range")
        if stabilized > current:
            limited = self._rate_limit(mem, {**_DEFAULT_UP, **(behavior.get("scaleUp") or {})}, stabilized, current, now, True)
            if limited < stabilized:
                limit_cond = ("True", "ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate")
        elif stabilized < current:
            limited = self._rate_limit(mem, {**_DEFAULT_DOWN, **(behavior.get("scaleDown") or {})}, stabilized, current, now, False)
            if limited > stabilized:
                limit_cond = ("True", "ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate")
        if limited > hi:
            limited = hi
            limit_cond = ("True", "TooManyReplicas", "the desired replica count is more than the maximum replica count")
        elif limited < lo:
            limited = lo
            limit_cond = ("True", "TooFewReplicas", "the desired replica count is less than the minimum replica count")
        conditions = set_condition(conditions, {"type": "ScalingLimited", "status": limit_cond[0], "reason": limit_cond[1],
                                                "message": limit_cond[2]}, now)
        if limited != current:
            if self._scale(target, limited):
                mem.scale_events = [(at, d) for at, d in mem.scale_events if at > now - 600] + [(now, limited - current)]
                self.ctx.recorder.record(hpa, "Normal", "SuccessfulRescale",
                                         f"New size: {limited}; reason: {reason_text}",
                                         component=_COMPONENT)
                status["lastScaleTime"] = rfc3339(now)
                able_reason, able_msg = "SucceededRescale", f"the HPA controller was able to update the target scale to {limited}"
            else:
                able_reason, able_msg = "FailedUpdateScale", "the HPA controller was unable to update the target scale"
        conditions = set_condition(conditions, {"type": "AbleToScale", "status": "False" if able_reason == "FailedUpdateScale" else "True",
                                                "reason": able_reason, "message": able_msg}, now)
        self._write(hpa, self._status(hpa, status, current, limited, metrics_status), conditions)

    def _scale(self, target: Obj, replicas: int) -> bool:
        new = dict(target)
        new["spec"] = dict(target.get("spec") or {}, replicas=replicas)
        try:
            self.ctx.store.update(new)
        except ApiError:
            return False
        return True

    @staticmethod
    def _status(hpa: Obj, status: Obj, current: int, desired: int, metrics: list[Obj]) -> Obj:
        out = {k: v for k, v in status.items() if k in ("lastScaleTime",)}
        out["observedGeneration"] = hpa["metadata"].get("generation", 1)
        out["currentReplicas"] = current
        out["desiredReplicas"] = desired
        if metrics:
            out["currentMetrics"] = metrics
        return out

    def _write(self, hpa: Obj, status: Obj, conditions: list[Obj]) -> None:
        order = {"AbleToScale": 0, "ScalingActive": 1, "ScalingLimited": 2}
        status = dict(status)
        status["conditions"] = sorted(conditions, key=lambda c: order.get(c.get("type", ""), 3))
        self.write_status(hpa, status)
