"""The Schedule controller: spawns the embedded experiment on its cron, like Chaos Mesh's.

At each due time (standard cron fields, the @hourly-style macros, or ``@every <duration>``) it
creates ``<schedule>-<5 chars>`` of ``spec.type`` from the embedded spec, owned by the Schedule and
labelled ``managed-by``. ``concurrencyPolicy: Forbid`` (the default) skips a run while an earlier
experiment is unfinished, and runs the missed time once it is; ``historyLimit`` (default 1) prunes
finished experiments; pausing the Schedule pauses its running experiments too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from itbench_gym.lang import cron
from itbench_gym.lang.timestamps import rfc3339

from ..kube.controllers.base import Context, Controller, Key
from ..kube.controllers.util import controller_of, controller_ref, name_suffix, parse_time
from ..kube.errors import ApiError
from ..kube.store import clone
from .experiment import is_finished
from .kinds import API_GROUP, API_VERSION, COMPONENT, PAUSE_ANNOTATION, SPEC_KEYS, is_paused

Obj = dict[str, Any]
#: Most missed runs looked at when catching up (a robfig/cron schedule does the same).
_MAX_MISSED = 100


class Cron:
    """A Schedule's ``schedule`` field as Chaos Mesh's robfig/cron parser reads it (``lang/cron.py``:
    standard fields with optional seconds, descriptors); ValueError with its words when it does not parse."""

    def __init__(self, text: str) -> None:
        self.schedule = cron.parse(text, seconds=True)
        self.every = self.schedule.every

    def next_after(self, t: float) -> float | None:
        return self.schedule.next_after(t)

    def last_due(self, after: float, now: float) -> float | None:
        """The latest scheduled time in (after, now], or None."""
        due, last = self.next_after(after), None
        for _ in range(_MAX_MISSED):
            if due is None or due > now:
                break
            last, due = due, self.next_after(due)
        else:
            if due is not None and due <= now and self.every is not None:
                last = now - (now - after) % self.every
        return last


class ScheduleController(Controller):
    name = "chaos-schedule"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        ctx.store.subscribe(self._on_event)

    def _on_event(self, event: str, obj: Obj) -> None:
        if not str(obj.get("apiVersion", "")).startswith(API_GROUP + "/"):
            return
        ns = obj["metadata"].get("namespace") or ""
        if obj.get("kind") == "Schedule":
            self.enqueue((ns, obj["metadata"]["name"]))
            return
        ref = controller_of(obj)
        if ref is not None and ref.get("kind") == "Schedule":
            self.enqueue((ns, ref.get("name", "")))

    def keys_for(self, event: str, kind: str, obj: Obj, old: Obj | None) -> Iterable[Key]:
        return ()

    def sync(self, key: Key) -> None:
        try:
            sch = self.ctx.store.get("Schedule", key[0], key[1])
        except (ApiError, LookupError):
            return
        if sch["metadata"].get("deletionTimestamp"):
            return
        spec = sch.get("spec") or {}
        kind = str(spec.get("type", ""))
        if kind not in SPEC_KEYS or not isinstance(spec.get(SPEC_KEYS[kind]), dict):
            self._event(sch, "Warning", "Failed", f"spec.type: {kind!r} needs a matching spec.{SPEC_KEYS.get(kind, '<type>')}")
            return
        try:
            cron = Cron(str(spec.get("schedule", "")))
        except ValueError as e:
            self._event(sch, "Warning", "Failed", f"spec.schedule: {e}")
            return
        now = self.ctx.now()
        status = clone(sch.get("status") or {})
        children = self._children(sch, kind)
        paused = is_paused(sch)
        for child in children:
            self._propagate_pause(child, paused)
        running = [c for c in children if not is_finished(c)]
        last = parse_time(status.get("time")) or parse_time(sch["metadata"].get("creationTimestamp")) or now
        due = cron.last_due(last, now)
        deadline = spec.get("startingDeadlineSeconds")
        if due is not None and not paused:
            if deadline is not None and now - due > float(deadline):
                status["time"] = rfc3339(due)
            elif spec.get("concurrencyPolicy", "Forbid") == "Forbid" and running:
                self._event(sch, "Warning", "Forbid",
                            f"Forbid spawning new job because: {running[0]['metadata']['name']} is still running")
            else:
                created = self._spawn(sch, kind, due)
                if created is not None:
                    running.append(created)
                    children.append(created)
                status["time"] = rfc3339(due)
        self._prune(children, int(spec.get("historyLimit", 1) or 1))
        status["active"] = [{"apiVersion": API_VERSION, "kind": kind, "name": c["metadata"]["name"],
                             "namespace": c["metadata"].get("namespace"), "uid": c["metadata"].get("uid")}
                            for c in running if not c["metadata"].get("deletionTimestamp")]
        self.write_status(sch, status)
        nxt = cron.next_after(max(parse_time(status.get("time")) or last, now))
        if nxt is not None:
            self.requeue_at(key, nxt)

    def _children(self, sch: Obj, kind: str) -> list[Obj]:
        uid = sch["metadata"].get("uid")
        out = [o for o in self.ctx.store.list(kind, sch["metadata"].get("namespace"), api_version=API_VERSION)
               if (controller_of(o) or {}).get("uid") == uid]
        return sorted(out, key=lambda o: (o["metadata"].get("creationTimestamp", ""), int(o["metadata"].get("resourceVersion", 0))))

    def _spawn(self, sch: Obj, kind: str, due: float) -> Obj | None:
        meta = sch["metadata"]
        name = f"{meta['name']}-{name_suffix(self.ctx.seed, meta.get('uid'), due).lower()}"
        obj: Obj = {
            "apiVersion": API_VERSION, "kind": kind,
            "metadata": {"name": name, "namespace": meta.get("namespace"), "labels": {"managed-by": meta["name"]},
                         "ownerReferences": [controller_ref(sch)]},
            "spec": clone((sch.get("spec") or {})[SPEC_KEYS[kind]]),
        }
        try:
            created = self.ctx.store.create(obj)
        except ApiError as e:
            self._event(sch, "Warning", "Failed", f"Failed to create {kind} {name}: {e.message}")
            return None
        self._event(sch, "Normal", "Spawned", f"Create new object: {name}")
        return created

    def _propagate_pause(self, child: Obj, paused: bool) -> None:
        annotations = child["metadata"].get("annotations") or {}
        if (annotations.get(PAUSE_ANNOTATION) == "true") == paused or child["metadata"].get("deletionTimestamp"):
            return
        new = clone(child)
        new["metadata"].setdefault("annotations", {})[PAUSE_ANNOTATION] = "true" if paused else "false"
        try:
            self.ctx.store.update(new)
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    def _prune(self, children: list[Obj], limit: int) -> None:
        finished = [c for c in children if is_finished(c) and not c["metadata"].get("deletionTimestamp")]
        excess = len(children) - limit
        for c in finished[:max(0, excess)]:
            try:
                self.ctx.store.delete(c["kind"], c["metadata"].get("namespace"), c["metadata"]["name"], api_version=API_VERSION)
            except ApiError as e:
                if e.code != 404:
                    raise

    def _event(self, sch: Obj, type_: str, reason: str, message: str) -> None:
        self.ctx.recorder.record(sch, type_, reason, message, component=COMPONENT)
