"""Creating and deleting pods on behalf of a workload controller (upstream ``controller.PodControl``).

Every workload controller creates pods the same way: from its pod template, owned by it, named
``<owner>-<5 chars>``, admitted against ResourceQuota, with ``SuccessfulCreate`` / ``FailedCreate``
/ ``SuccessfulDelete`` events on the owner.
"""

from __future__ import annotations

from typing import Any

from ..errors import ApiError
from ..store import clone
from .base import Context
from .quota import check_pod
from .util import controller_ref, name_suffix

Obj = dict[str, Any]


class PodControl:
    """Pod creation/deletion with deterministic names and the real controllers' events."""

    def __init__(self, ctx: Context, component: str, seed: int) -> None:
        self.ctx = ctx
        self.component = component
        self.seed = seed

    def pod_from_template(self, owner: Obj, template: Obj, name: str) -> Obj:
        tmeta = template.get("metadata") or {}
        meta: Obj = {
            "name": name,
            "namespace": owner["metadata"].get("namespace"),
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [controller_ref(owner)],
        }
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        if tmeta.get("finalizers"):
            meta["finalizers"] = list(tmeta["finalizers"])
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": clone(template.get("spec") or {})}

    def generated_name(self, namespace: str, prefix: str) -> str:
        """``<prefix><5 chars>`` unused in the namespace, derived from the seed and a counter."""
        while True:
            self.ctx.name_counter += 1
            suffix = name_suffix(self.seed, namespace, prefix, self.ctx.name_counter)
            name = prefix[: 63 - len(suffix)] + suffix
            if self.ctx.cache.get("Pod", namespace, name) is None:
                return name

    def create(self, owner: Obj, pod: Obj) -> ApiError | None:
        """Admit and create ``pod``; on failure record ``FailedCreate`` and return the error."""
        try:
            check_pod(self.ctx.store, pod, self.ctx.now())
            created = self.ctx.store.create(pod)
        except ApiError as e:
            self.ctx.recorder.record(owner, "Warning", "FailedCreate", f"Error creating: {e.message}",
                                     component=self.component)
            return e
        self.ctx.recorder.record(owner, "Normal", "SuccessfulCreate", f"Created pod: {created['metadata']['name']}",
                                 component=self.component)
        return None

    def delete(self, owner: Obj, pod: Obj) -> None:
        meta = pod["metadata"]
        try:
            self.ctx.store.delete("Pod", meta.get("namespace"), meta["name"])
        except ApiError as e:
            if e.code != 404:
                self.ctx.recorder.record(owner, "Warning", "FailedDelete", f"Error deleting: {e.message}",
                                         component=self.component)
            return
        self.ctx.recorder.record(owner, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}",
                                 component=self.component)
