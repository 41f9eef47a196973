"""Chaos Mesh facts the controller and the app model share: kinds, annotations, durations, and
which experiments are running now.

The model must see an experiment exactly while chaos-controller-manager would keep it injected:
from creation until ``duration`` elapses, it is paused, or it is deleted — never a Schedule itself.
"""

from __future__ import annotations

from typing import Any

from itbench_gym.lang.durations import parse_go_duration

from ..kube.controllers.util import parse_time

Obj = dict[str, Any]

API_GROUP = "chaos-mesh.org"
API_VERSION = "chaos-mesh.org/v1alpha1"
#: Experiment kind -> the field of a Schedule's spec that embeds it.
SPEC_KEYS = {
    "PodChaos": "podChaos", "NetworkChaos": "networkChaos", "StressChaos": "stressChaos",
    "HTTPChaos": "httpChaos", "JVMChaos": "jvmChaos", "IOChaos": "ioChaos",
}
EXPERIMENT_KINDS = tuple(SPEC_KEYS)
PAUSE_ANNOTATION = "experiment.chaos-mesh.org/pause"
#: chaos-controller-manager's default ``--pod-failure-pause-image``.
PAUSE_IMAGE = "gcr.io/google-containers/pause:latest"
FINALIZER = "chaos-mesh/records"
#: A record's ``selectorKey``: a pod the experiment's ``selector`` chose, or its ``target``'s (NetworkChaos).
SOURCE_KEY, TARGET_KEY = ".", ".Target"
COMPONENT = "chaos-controller-manager"

def parse_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` in seconds (what Chaos Mesh uses for ``duration``): "55s", "1m30s", "1.5h"."""
    return parse_go_duration(str(text))


def is_paused(obj: Obj) -> bool:
    return (obj["metadata"].get("annotations") or {}).get(PAUSE_ANNOTATION) == "true"


def ends_at(obj: Obj) -> float | None:
    """When the experiment's ``duration`` runs out (None: it runs until paused or deleted)."""
    text = (obj.get("spec") or {}).get("duration")
    start = parse_time(obj["metadata"].get("creationTimestamp"))
    if not text or start is None:
        return None
    try:
        return start + parse_duration(text)
    except ValueError:
        return None


def is_running(obj: Obj, now: float) -> bool:
    """Whether the experiment is injected at ``now`` (Schedules never are: they only spawn)."""
    if obj.get("kind") not in SPEC_KEYS or is_paused(obj) or obj["metadata"].get("deletionTimestamp"):
        return False
    if ((obj.get("status") or {}).get("experiment") or {}).get("desiredPhase") == "Stop":
        return False
    end = ends_at(obj)
    return end is None or now < end


def active(objs: list[Obj], now: float) -> list[Obj]:
    """The experiments among ``objs`` that are running at ``now``."""
    return [o for o in objs if is_running(o, now)]


def record_id(pod: Obj) -> str:
    """``namespace/name``: how an experiment's records name a pod."""
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def injected_pods(obj: Obj, key: str = SOURCE_KEY) -> frozenset[str]:
    """:func:`record_id` of the pods of the records under ``key`` that chaos-daemon injected: the pods the
    experiment acts on (chosen once when it started; a pod created since is not among them)."""
    records = ((obj.get("status") or {}).get("experiment") or {}).get("containerRecords") or []
    return frozenset("/".join(str(r.get("id", "")).split("/")[:2]) for r in records
                     if r.get("phase") == "Injected" and r.get("selectorKey", SOURCE_KEY) == key)
