"""ITBench's ``autoscaling.kubernetes.hpa`` install option: a HorizontalPodAutoscaler per Deployment.

The template is the app's data (``envs/<app>/autoscaling.yaml``: ``exclude`` and the HPA ``spec``
without its target), so the same option works for any app that ships the file.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext

AUTOSCALING_FILE = "autoscaling.yaml"

Obj = dict[str, Any]


def hpa_objects(app_dir: Path, manifests: Iterable[Obj], namespace: str) -> list[Obj]:
    """The HPAs ITBench creates for the app's Deployments in ``namespace``."""
    path, shown = app_dir / AUTOSCALING_FILE, f"envs/{app_dir.name}/{AUTOSCALING_FILE}"
    if not path.is_file():
        raise ValueError(f"{shown}: missing; environment.autoscaling.kubernetes.hpa needs the app's HPA template")
    data = yamltext.load(path.read_text()) or {}
    if not isinstance(data.get("spec"), dict):
        raise ValueError(f"{shown}: spec: the HorizontalPodAutoscaler spec (without scaleTargetRef) is required")
    excluded = set(data.get("exclude") or [])
    out = []
    for obj in manifests:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "Deployment" or meta.get("namespace") != namespace or meta["name"] in excluded:
            continue
        spec = copy.deepcopy(data["spec"])
        spec["scaleTargetRef"] = {"apiVersion": obj["apiVersion"], "kind": "Deployment", "name": meta["name"]}
        out.append({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                    "metadata": {"name": meta["name"], "namespace": namespace}, "spec": spec})
    return out
