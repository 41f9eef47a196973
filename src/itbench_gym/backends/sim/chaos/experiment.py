"""The experiment controller: one per chaos kind, doing what chaos-controller-manager does.

On creation it selects the target pods once and records them in ``status.experiment.containerRecords``;
while ``desiredPhase`` is Run it injects every record (PodChaos acts on the pods; the other kinds are
read by the app model through ``kinds.active``); when ``duration`` elapses, the experiment is paused
or deleted it turns to Stop and recovers. A finalizer holds deletion until recovery is done.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang.timestamps import rfc3339

from ..kube.controllers.base import Context, Controller, Key
from ..kube.controllers.util import parse_time
from ..kube.errors import ApiError
from ..kube.store import clone
from .byteman import BytemanError, parse_rules
from .jvmchaos import experiment_script
from .kinds import API_GROUP, COMPONENT, FINALIZER, SOURCE_KEY, TARGET_KEY, ends_at, is_paused, parse_duration, record_id
from .podchaos import ONE_SHOT_ACTIONS, ActionError, Killer, PodChaosActions, record_ids
from .selection import SelectionError, choose, pod_matches

Obj = dict[str, Any]

#: Back-off before a failed injection is tried again.
RETRY_SECONDS = 10.0


def _condition(status: Obj, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in status.get("conditions") or [])


def is_finished(obj: Obj) -> bool:
    """What a Schedule's ``Forbid`` waits for: one-shot actions once injected, others once recovered."""
    status = obj.get("status") or {}
    if obj["metadata"].get("deletionTimestamp"):
        return True
    if obj.get("kind") == "PodChaos" and (obj.get("spec") or {}).get("action") in ONE_SHOT_ACTIONS:
        return _condition(status, "AllInjected")
    return (status.get("experiment") or {}).get("desiredPhase") == "Stop" and _condition(status, "AllRecovered")


def _submit_rules(text: str) -> None:
    """chaos-daemon submits the rules (``ruleData``, or those it writes for the action) to the Byteman
    agent, which refuses a script it cannot parse."""
    try:
        parse_rules(text)
    except BytemanError as e:
        raise ActionError(f"rpc error: code = Unknown desc = {e}") from None


class ExperimentController(Controller):
    """Reconciles one chaos kind (``PodChaos``, ``NetworkChaos``, ...) in the store."""

    def __init__(self, ctx: Context, kind: str, kill: Killer) -> None:
        super().__init__(ctx)
        self.kind = kind
        self.name = f"chaos-{kind.lower()}"
        self.pods = PodChaosActions(ctx.store, kill)
        ctx.store.subscribe(self._on_event)

    def _on_event(self, event: str, obj: Obj) -> None:
        if obj.get("kind") == self.kind and str(obj.get("apiVersion", "")).startswith(API_GROUP + "/"):
            meta = obj["metadata"]
            self.enqueue((meta.get("namespace") or "", meta["name"]))

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return ()

    def sync(self, key: Key) -> None:
        try:
            obj = self.ctx.store.get(self.kind, key[0], key[1])
        except (ApiError, LookupError):
            return
        meta = obj["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        if not deleting and FINALIZER not in (meta.get("finalizers") or []):
            updated = self._set_finalizer(obj, add=True)
            if updated is None:
                return
            obj = updated
        now = self.ctx.now()
        spec = obj.get("spec") or {}
        status = clone(obj.get("status") or {})
        exp = status.setdefault("experiment", {})
        end = ends_at(obj)
        if spec.get("duration") and end is None:
            self._event(obj, "Warning", "Failed", f"spec.duration: {self._duration_error(spec['duration'])}")
            return
        stop = deleting or is_paused(obj) or (end is not None and now >= end)
        records = exp.get("containerRecords")
        if records is None:
            records = self._select(obj)
            if records is None:
                return
            exp["containerRecords"] = records
            if records:
                self._event(obj, "Normal", "Started", "Experiment has started")
        if exp.get("desiredPhase") == "Run" and stop and end is not None and now >= end:
            self._event(obj, "Normal", "TimeUp", "Time up according to the duration")
        exp["desiredPhase"] = "Stop" if stop else "Run"
        for record in records:
            if stop and record["phase"] == "Injected":
                self._step(obj, spec, record, "Recover", now)
            elif not stop and record["phase"] != "Injected":
                retry = self._retry_at(record)
                if now >= retry:
                    self._step(obj, spec, record, "Apply", now)
                    retry = self._retry_at(record)
                if retry > now:
                    self.requeue_at(key, retry)
        status["conditions"] = [
            {"type": "Selected", "status": "True" if records else "False"},
            {"type": "AllInjected", "status": "True" if records and all(r["phase"] == "Injected" for r in records) else "False"},
            {"type": "AllRecovered", "status": "True" if all(r["phase"] != "Injected" for r in records) else "False"},
            {"type": "Paused", "status": "True" if is_paused(obj) else "False"},
        ]
        written = self.write_status(obj, status)
        if deleting and written is not None and all(r["phase"] != "Injected" for r in records):
            self._set_finalizer(written, add=False)
        elif not stop and end is not None:
            self.requeue_at(key, end)

    @staticmethod
    def _retry_at(record: Obj) -> float:
        """A failed injection is retried after a back-off, not on the status write it caused."""
        events = record.get("events") or []
        if events and events[-1].get("type") == "Failed" and events[-1].get("operation") == "Apply":
            return (parse_time(events[-1].get("timestamp")) or 0.0) + RETRY_SECONDS
        return 0.0

    @staticmethod
    def _duration_error(text: str) -> str:
        try:
            parse_duration(text)
        except ValueError as e:
            return str(e)
        return f'invalid duration "{text}"'

    def _select(self, obj: Obj) -> list[Obj] | None:
        """The records of the pods the experiment acts on, chosen once: its ``selector`` and ``mode``
        (key "."), and for a NetworkChaos its ``target``'s (key ".Target"). A pod created later is
        not among them."""
        spec = obj.get("spec") or {}
        ns = obj["metadata"].get("namespace", "")
        nodes = {n["metadata"]["name"]: n for n in self.ctx.cache.list("Node")}
        pods = [p for p in self.ctx.cache.list("Pod") if not p["metadata"].get("deletionTimestamp")]
        uid = obj["metadata"].get("uid", "")
        target = spec.get("target") if self.kind == "NetworkChaos" and isinstance(spec.get("target"), dict) else None
        keys = [(SOURCE_KEY, spec, uid)] + ([(TARGET_KEY, target, uid + TARGET_KEY)] if target is not None else [])
        records: list[Obj] = []
        for key, part, draw in keys:
            matching = [p for p in pods if pod_matches(part.get("selector"), p, ns, nodes)]
            try:
                picked = choose(matching, str(part.get("mode", "")), part.get("value"), self.ctx.seed, draw)
            except SelectionError as e:
                self._event(obj, "Warning", "Failed", f"Failed to select: {e}")
                return None
            ids = record_ids(spec, picked) if self.kind == "PodChaos" else [record_id(p) for p in picked]
            if not ids and key == SOURCE_KEY:
                self._event(obj, "Warning", "Failed", "Failed to select: no pod is selected")
            records += [{"id": i, "selectorKey": key, "phase": "Not Injected", "injectedCount": 0, "recoveredCount": 0}
                        for i in ids]
        return records

    def _step(self, obj: Obj, spec: Obj, record: Obj, operation: str, now: float) -> None:
        try:
            if self.kind == "PodChaos":
                (self.pods.apply if operation == "Apply" else self.pods.recover)(spec, record["id"])
            elif self.kind == "JVMChaos" and operation == "Apply":
                script = experiment_script(obj)
                if script is not None:
                    _submit_rules(script)
        except ActionError as e:
            record.setdefault("events", []).append(
                {"type": "Failed", "operation": operation, "timestamp": rfc3339(now), "message": str(e)})
            verb = "apply" if operation == "Apply" else "recover"
            self._event(obj, "Warning", "Failed", f"Failed to {verb} chaos: {e}")
            if operation == "Recover":
                record["phase"] = "Not Injected"
            return
        record.setdefault("events", []).append({"type": "Succeeded", "operation": operation, "timestamp": rfc3339(now)})
        if operation == "Apply":
            record["phase"], record["injectedCount"] = "Injected", record["injectedCount"] + 1
            self._event(obj, "Normal", "Applied", f"Successfully apply chaos for {record['id']}")
        else:
            record["phase"], record["recoveredCount"] = "Not Injected", record["recoveredCount"] + 1
            self._event(obj, "Normal", "Recovered", f"Successfully recover chaos for {record['id']}")

    def _set_finalizer(self, obj: Obj, *, add: bool) -> Obj | None:
        new = clone(obj)
        finalizers = [f for f in new["metadata"].get("finalizers") or [] if f != FINALIZER]
        new["metadata"]["finalizers"] = finalizers + [FINALIZER] if add else finalizers
        try:
            return self.ctx.store.update(new)
        except ApiError as e:
            if e.code in (404, 409):
                return None
            raise

    def _event(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        self.ctx.recorder.record(obj, type_, reason, message, component=COMPONENT)
