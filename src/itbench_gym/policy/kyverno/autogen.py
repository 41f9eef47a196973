"""Kyverno's rule auto-generation for Pod policies.

When every rule's match/exclude descriptions are unspecific (no names, selectors or annotations, and
Pod never listed alongside other kinds) and some rule targets pods, each rule matching `Pod` is copied
to pod controllers: `autogen-<rule>` checks `spec.template` of DaemonSets, Deployments, Jobs,
ReplicaSets, ReplicationControllers and StatefulSets, `autogen-cronjob-<rule>` checks
`spec.jobTemplate.spec.template` of CronJobs. The `pod-policies.kyverno.io/autogen-controllers`
annotation narrows the controllers (`none` turns it off). Expected results name those rules.
"""

from __future__ import annotations

import copy
import json
from typing import Any

ANNOTATION = "pod-policies.kyverno.io/autogen-controllers"
_CONTROLLERS = ("DaemonSet", "Deployment", "Job", "ReplicaSet", "ReplicationController", "StatefulSet")
_POD_KINDS = frozenset({*_CONTROLLERS, "CronJob", "Pod"})
_TEMPLATE = ["spec", "template"]
_CRONJOB_TEMPLATE = ["spec", "jobTemplate", "spec", "template"]


def _kind_name(kind: Any) -> str:
    return str(kind).split("/")[-1]


def _descriptions(block: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not block:
        return []
    filters = (block.get("any") or []) + (block.get("all") or [])
    return [f.get("resources") or {} for f in filters] + [block.get("resources") or {}]


def _kinds(block: dict[str, Any] | None) -> list[str]:
    return [_kind_name(k) for d in _descriptions(block) for k in d.get("kinds") or []]


def _can_autogen(rules: list[dict[str, Any]]) -> bool:
    """No generate or JSON-patch mutate rules, only unspecific descriptions, and some rule targets pods."""
    needed = False
    for rule in rules:
        mutate = rule.get("mutate") or {}
        if "generate" in rule or "patchesJson6902" in mutate or any("patchesJson6902" in f for f in mutate.get("foreach") or []):
            return False
        for desc in _descriptions(rule.get("match")) + _descriptions(rule.get("exclude")):
            kinds = [_kind_name(k) for k in desc.get("kinds") or []]
            if desc.get("name") or desc.get("names") or "selector" in desc or "annotations" in desc or (len(kinds) > 1 and "Pod" in kinds):
                return False
            needed = needed or bool(_POD_KINDS.intersection(kinds))
    return needed


def _controllers(policy: dict[str, Any]) -> list[str]:
    annotations = (policy.get("metadata") or {}).get("annotations") or {}
    wanted = annotations.get(ANNOTATION)
    if wanted is None:
        return [*_CONTROLLERS, "CronJob"]
    names = [c.strip() for c in str(wanted).split(",")]
    return [*_CONTROLLERS, "CronJob"] if "all" in names else names


def _retarget(block: dict[str, Any] | None, kinds: list[str], only_pod_filters: bool) -> dict[str, Any] | None:
    """Swap the kinds of the filters that name Pod (or of every filter, for the CronJob copy)."""
    if not block:
        return block
    out = copy.deepcopy(block)
    filters = (out.get("any") or []) + (out.get("all") or [])
    if filters:
        for flt in filters:
            res = flt.setdefault("resources", {})
            if not only_pod_filters or "Pod" in [_kind_name(k) for k in res.get("kinds") or []]:
                res["kinds"] = list(kinds)
    elif (out.get("resources") or {}).get("kinds"):
        out["resources"]["kinds"] = list(kinds)
    return out


def _rewrite_paths(rule: dict[str, Any], template: list[str]) -> dict[str, Any]:
    """Point `request.object`/`request.oldObject` spec and metadata references at the pod template, and a
    CEL rule's `object`/`oldObject` ones."""
    prefix = ".".join(template)
    text = json.dumps(rule)
    for obj in ("request.object", "request.oldObject"):
        text = text.replace(f"{obj}.spec", f"{obj}.{prefix}.spec").replace(f"{obj}.metadata", f"{obj}.{prefix}.metadata")
    rewritten: dict[str, Any] = json.loads(text)
    cel = (rule.get("validate") or {}).get("cel")
    if cel is not None:  # CEL names the resource `object` (and `oldObject`), not `request.object`
        text = json.dumps(cel)
        for obj in ("object", "oldObject"):
            text = text.replace(f"{obj}.spec", f"{obj}.{prefix}.spec").replace(f"{obj}.metadata", f"{obj}.{prefix}.metadata")
        rewritten["validate"]["cel"] = json.loads(text)
    return rewritten


def _wrap(rule: dict[str, Any], key: str) -> dict[str, Any]:
    """Nest the pattern(s) under `spec.<key>` (template or jobTemplate)."""
    validate = dict(rule.get("validate") or {})
    if "pattern" in validate:
        validate["pattern"] = {"spec": {key: validate["pattern"]}}
    if "anyPattern" in validate:
        validate["anyPattern"] = [{"spec": {key: p}} for p in validate["anyPattern"] or []]
    return {**rule, "validate": validate}


def _generate(rule: dict[str, Any], controllers: list[str]) -> list[dict[str, Any]]:
    match_kinds, exclude_kinds = _kinds(rule.get("match")), _kinds(rule.get("exclude"))
    if "validate" not in rule or "Pod" not in match_kinds or (exclude_kinds and "Pod" not in exclude_kinds):
        return []
    plain = sorted(c for c in controllers if c in _CONTROLLERS)
    out = []
    if plain:
        base = {**rule, "name": f"autogen-{rule['name']}"[:63]}
        base["match"] = _retarget(rule.get("match"), plain, only_pod_filters=True)
        if rule.get("exclude"):
            base["exclude"] = _retarget(rule.get("exclude"), plain, only_pod_filters=True)
        base = _wrap(base, "template")
        out.append(_rewrite_paths(base, _TEMPLATE))
        if "CronJob" in controllers:
            cron = {**base, "name": f"autogen-cronjob-{rule['name']}"[:63]}
            cron["match"] = _retarget(base.get("match"), ["CronJob"], only_pod_filters=False)
            if base.get("exclude"):
                cron["exclude"] = _retarget(base.get("exclude"), ["CronJob"], only_pod_filters=False)
            out.append(_rewrite_paths(_wrap(cron, "jobTemplate"), _CRONJOB_TEMPLATE))
    return out


def expand_rules(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The policy's rules followed by the autogen rules Kyverno would add for its validate Pod rules."""
    rules: list[dict[str, Any]] = list((policy.get("spec") or {}).get("rules") or [])
    if not _can_autogen(rules):
        return rules
    controllers = _controllers(policy)
    if "none" in controllers:
        return rules
    return rules + [generated for rule in rules for generated in _generate(rule, controllers)]
