"""Job and CronJob controllers (the basics: parallel pods to completion, back-off limit, schedules).

Jobs run pods until ``completions`` succeed (``Complete``) or more than ``backoffLimit`` fail
(``Failed``/``BackoffLimitExceeded``), replacing failed pods after an exponential delay (10 s,
20 s, ... 6 min) like ``pkg/controller/job``. One sync creates or deletes at most
``MaxPodCreateDeletePerSync`` (500) pods, creations in slow-start batches, and the rest waits for
the controller's client (see ``ratelimit``), so ``parallelism: 100000`` ramps up instead of
arriving at once. CronJobs create ``<cronjob>-<minutes since epoch>`` Jobs at each scheduled
minute and prune their history.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang import cron
from itbench_gym.lang.timestamps import rfc3339

from ..errors import ApiError
from ..store import clone
from .base import Cache, Context, Controller, Key
from .podcontrol import PodControl
from .replicaset import deletion_order
from .util import condition, controller_ref, is_terminating, parse_time, pod_phase

Obj = dict[str, Any]

_JOB = "job-controller"
_CRON = "cronjob-controller"
_POD_FAILURE_BACKOFF, _POD_FAILURE_BACKOFF_MAX = 10.0, 360.0
#: ``job.MaxPodCreateDeletePerSync``.
MAX_POD_CREATE_DELETE_PER_SYNC = 500


class JobController(Controller):
    name = "job"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.pods = PodControl(ctx, _JOB)

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "Job":
            return [Cache.key_of(obj)]
        if kind == "Pod":
            key = self.owner_key(obj, "Job")
            return [key] if key else ()
        return ()

    def snapshot_state(self) -> Any:
        return self.pods.snapshot()

    def restore_state(self, state: Any) -> None:
        self.pods.restore(state)

    def _delete_pods(self, job: Obj, key: Key, pods: list[Obj]) -> None:
        """Delete up to ``MaxPodCreateDeletePerSync`` of ``pods``; the rest on a later sync."""
        if not pods:
            return
        if not self.pods.can_send():
            self.requeue_at(key, self.pods.ready_at())
            return
        for p in pods[:MAX_POD_CREATE_DELETE_PER_SYNC]:
            self.pods.delete(job, p)
        if len(pods) > MAX_POD_CREATE_DELETE_PER_SYNC:
            self.requeue_at(key, self.pods.ready_at())

    def sync(self, key: Key) -> None:
        job = self.ctx.cache.get("Job", *key)
        if job is None or is_terminating(job):
            return
        now = self.ctx.now()
        spec = job.get("spec") or {}
        status = clone(job.get("status") or {})
        pods = self.ctx.cache.owned("Pod", job)
        active = [p for p in pods if pod_phase(p) not in ("Succeeded", "Failed") and not is_terminating(p)]
        if condition(job, "Complete") or condition(job, "Failed"):
            self._delete_pods(job, key, active)  # a finished Job's leftovers go, a burst at a time
            return
        succeeded = sum(1 for p in pods if pod_phase(p) == "Succeeded")
        failed = sum(1 for p in pods if pod_phase(p) == "Failed")
        restarts = sum(c.get("restartCount", 0) for p in pods
                       for c in (p.get("status") or {}).get("containerStatuses") or [])
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        status.setdefault("startTime", rfc3339(now))
        conditions = list(status.get("conditions") or [])
        started = parse_time(status["startTime"]) or now
        deadline = spec.get("activeDeadlineSeconds")
        finished: tuple[str, str, str] | None = None
        if failed + restarts > int(spec.get("backoffLimit", 6)):
            finished = ("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline is not None and now >= started + float(deadline):
            finished = ("Failed", "DeadlineExceeded", "Job was active longer than specified deadline")
        elif (completions is not None and succeeded >= int(completions)) or (
                completions is None and succeeded > 0 and not active):
            finished = ("Complete", "", "")
        if finished is not None:
            self._delete_pods(job, key, active)
            ctype, reason, message = finished
            stamp = rfc3339(now)
            if ctype == "Complete":
                conditions.append({"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                                   "message": "Reached expected number of succeeded pods", "lastProbeTime": stamp,
                                   "lastTransitionTime": stamp})
                conditions.append({"type": "Complete", "status": "True", "reason": "CompletionsReached",
                                   "message": "Reached expected number of succeeded pods", "lastProbeTime": stamp,
                                   "lastTransitionTime": stamp})
                status["completionTime"] = stamp
                self.ctx.recorder.record(job, "Normal", "Completed", "Job completed", component=_JOB)
            else:
                conditions.append({"type": "FailureTarget", "status": "True", "reason": reason, "message": message,
                                   "lastProbeTime": stamp, "lastTransitionTime": stamp})
                conditions.append({"type": "Failed", "status": "True", "reason": reason, "message": message,
                                   "lastProbeTime": stamp, "lastTransitionTime": stamp})
                self.ctx.recorder.record(job, "Warning", reason, message, component=_JOB)
            active = []
        elif not spec.get("suspend"):
            remaining = (int(completions) - succeeded) if completions is not None else parallelism
            want_active = max(0, min(parallelism, remaining))
            want = max(0, want_active - len(active))
            delay = 0.0 if failed == 0 else min(_POD_FAILURE_BACKOFF * 2 ** (failed - 1), _POD_FAILURE_BACKOFF_MAX)
            last_failure = max((parse_time(_finished_at(p)) or 0.0 for p in pods if pod_phase(p) == "Failed"), default=0.0)
            if want and now < last_failure + delay:
                self.requeue_at(key, last_failure + delay)
                want = 0
            if want and not self.pods.can_send():
                self.requeue_at(key, self.pods.ready_at())
                want = 0
            if want:
                batch = min(want, MAX_POD_CREATE_DELETE_PER_SYNC)
                _, err = self.pods.slow_start(batch, lambda: self._create(job))
                if err is not None or batch < want:
                    self.requeue_at(key, self.pods.ready_at())
            elif len(active) > want_active:  # parallelism lowered: the least valuable pods go first
                self._delete_pods(job, key, deletion_order(active)[: len(active) - want_active])
            active = [p for p in self.ctx.cache.owned("Pod", job)
                      if pod_phase(p) not in ("Succeeded", "Failed") and not is_terminating(p)]
            if deadline is not None:
                self.requeue_at(key, started + float(deadline))
        status.update({"active": len(active), "succeeded": succeeded, "failed": failed,
                       "ready": sum(1 for p in active if (condition(p, "Ready") or {}).get("status") == "True"),
                       "terminating": 0, "uncountedTerminatedPods": {}})
        if conditions:
            status["conditions"] = conditions
        self.write_status(job, {k: v for k, v in status.items() if v or k in ("ready", "terminating", "uncountedTerminatedPods")})

    def _create(self, job: Obj) -> ApiError | None:
        template = clone((job.get("spec") or {}).get("template") or {})
        labels = template.setdefault("metadata", {}).setdefault("labels", {})
        uid = job["metadata"].get("uid", "")
        labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": job["metadata"]["name"],
                       "controller-uid": uid, "job-name": job["metadata"]["name"]})
        ns = job["metadata"].get("namespace") or ""
        name = self.pods.generated_name(ns, job["metadata"]["name"] + "-")
        pod = self.pods.pod_from_template(job, template, name)
        pod["metadata"]["generateName"] = job["metadata"]["name"] + "-"
        return self.pods.create(job, pod)


def _finished_at(pod: Obj) -> str | None:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (c.get("state") or {}).get("terminated")
        if term:
            finished: str | None = term.get("finishedAt")
            return finished
    return None


# -- cron ----------------------------------------------------------------------------------------

def _with_time_zone(spec: Obj) -> str:
    """The controller's formatSchedule: the schedule, read on ``timeZone``'s clock when it names one
    Go loads (``TZ=ZONE`` before it; a schedule that names its own zone is left as it is)."""
    schedule, zone = str(spec.get("schedule", "")), spec.get("timeZone")
    if "TZ" in schedule or zone is None or cron.zone_error(str(zone)) is not None:
        return schedule
    return f"TZ={zone} {schedule}"


class CronJobController(Controller):
    name = "cronjob"

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        if kind == "CronJob":
            return [Cache.key_of(obj)]
        if kind == "Job":
            key = self.owner_key(obj, "CronJob")
            return [key] if key else ()
        return ()

    def sync(self, key: Key) -> None:
        cj = self.ctx.cache.get("CronJob", *key)
        if cj is None or is_terminating(cj):
            return
        now = self.ctx.now()
        spec = cj.get("spec") or {}
        status = clone(cj.get("status") or {})
        try:
            schedule = cron.parse(_with_time_zone(spec))
        except ValueError as e:
            self.ctx.recorder.record(cj, "Warning", "UnparseableSchedule",
                                     f'unparseable schedule: "{spec.get("schedule", "")}" : {e}', component=_CRON)
            return
        jobs = sorted(self.ctx.cache.owned("Job", cj), key=lambda j: j["metadata"]["name"])
        active = [j for j in jobs if not (condition(j, "Complete") or condition(j, "Failed"))]
        last = parse_time(status.get("lastScheduleTime")) or parse_time(cj["metadata"].get("creationTimestamp")) or now
        due = schedule.next_after(last)
        if due is not None and due <= now and not spec.get("suspend"):
            policy = spec.get("concurrencyPolicy", "Allow")
            if policy == "Replace":
                for j in active:
                    self.ctx.store.delete("Job", j["metadata"].get("namespace"), j["metadata"]["name"])
            if policy != "Forbid" or not active:
                self._create_job(cj, due)
                status["lastScheduleTime"] = rfc3339(due)
                last = due
            due = schedule.next_after(max(last, now))
        for j in jobs:
            if condition(j, "Complete") and j["status"].get("completionTime"):
                if (parse_time(status.get("lastSuccessfulTime")) or 0.0) < (parse_time(j["status"]["completionTime"]) or 0.0):
                    status["lastSuccessfulTime"] = j["status"]["completionTime"]
        self._prune(cj, jobs)
        active = [j for j in self.ctx.cache.owned("Job", cj) if not (condition(j, "Complete") or condition(j, "Failed"))]
        if active:
            status["active"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": j["metadata"]["name"],
                                 "namespace": j["metadata"].get("namespace"), "uid": j["metadata"].get("uid")}
                                for j in active]
        else:
            status.pop("active", None)
        self.write_status(cj, status)
        if due is not None:
            self.requeue_at(key, due)

    def _create_job(self, cj: Obj, scheduled: float) -> None:
        template = clone((cj.get("spec") or {}).get("jobTemplate") or {})
        name = f"{cj['metadata']['name']}-{int(scheduled) // 60}"
        job: Obj = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": cj["metadata"].get("namespace"),
                         "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                         "annotations": {**((template.get("metadata") or {}).get("annotations") or {}),
                                         "batch.kubernetes.io/cronjob-scheduled-timestamp": rfc3339(scheduled)},
                         "ownerReferences": [controller_ref(cj)]},
            "spec": template.get("spec") or {},
        }
        try:
            self.ctx.store.create(job)
        except ApiError as e:
            if e.code == 409:
                return
            self.ctx.recorder.record(cj, "Warning", "FailedCreate", f"Error creating job: {e.message}", component=_CRON)
            return
        self.ctx.recorder.record(cj, "Normal", "SuccessfulCreate", f"Created job {name}", component=_CRON)

    def _prune(self, cj: Obj, jobs: list[Obj]) -> None:
        spec = cj.get("spec") or {}
        for ctype, limit in (("Complete", spec.get("successfulJobsHistoryLimit", 3)),
                             ("Failed", spec.get("failedJobsHistoryLimit", 1))):
            done = [j for j in jobs if condition(j, ctype)]
            for j in done[: max(0, len(done) - int(limit))]:
                try:
                    self.ctx.store.delete("Job", j["metadata"].get("namespace"), j["metadata"]["name"])
                except ApiError as e:
                    if e.code != 404:
                        raise
                self.ctx.recorder.record(cj, "Normal", "SuccessfulDelete", f"Deleted job {j['metadata']['name']}",
                                         component=_CRON)
