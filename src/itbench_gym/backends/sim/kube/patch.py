"""Patch semantics: JSON merge (RFC 7386), JSON patch (RFC 6902), strategic merge and server-side apply.

kubectl relies on each of them: ``scale`` sends a merge patch, ``set image``/``rollout restart``/
``label``/client-side ``apply`` send strategic merge patches (with ``$setElementOrder``,
``$retainKeys`` and ``$patch`` directives), ``rollout undo`` a JSON patch and ``apply
--server-side`` an apply patch. Strategic merge needs each field's patch strategy, which upstream
keeps in Go struct tags; ``SCHEMAS`` reproduces those tags for the built-in kinds.

Server-side apply is simplified: ownership is tracked per manager (``managedFields`` with
``fieldsV1``) so fields a manager stops applying are removed, but conflicts between managers are
not reported (every apply behaves as ``--force-conflicts``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from . import bodies, errors
from .resources import ResourceType

MERGE = "application/merge-patch+json"
JSON = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
_ALIASES = {
    "merge": MERGE, MERGE: MERGE,
    "json": JSON, JSON: JSON,
    "strategic": STRATEGIC, STRATEGIC: STRATEGIC,
    "apply": APPLY, APPLY: APPLY, "application/apply-patch+cbor": APPLY,
}


def normalize_patch_type(patch_type: str) -> str:
    ptype = _ALIASES.get((patch_type or "").split(";")[0].strip().lower())
    if ptype is None:
        raise errors.unsupported_media_type(
            f"the body of the request was in an unknown format - accepted media types include: {JSON}, {MERGE}, "
            f"{APPLY}, {STRATEGIC}")
    return ptype


def decode_patch(patch: Any, ptype: str) -> Any:
    """Bytes/str bodies are decoded (YAML allowed for apply); decoded values pass through."""
    if isinstance(patch, (bytes, bytearray)):
        try:
            patch = patch.decode("utf-8")
        except UnicodeDecodeError:
            raise errors.bad_request("the patch is not valid UTF-8") from None
    if isinstance(patch, str):
        try:
            patch = bodies.load_yaml(patch) if ptype == APPLY else bodies.load_json(patch)
        except errors.ApiError as e:
            what = "YAML" if ptype == APPLY else "JSON"
            raise errors.bad_request(f"error decoding patch: invalid {what}: {e.message}") from None
    if ptype == JSON:
        if not isinstance(patch, list):
            raise errors.bad_request("json patch must be a list of operations, e.g. [{\"op\": \"replace\", ...}]")
    elif not isinstance(patch, dict):
        raise errors.bad_request(f"the patch must be a JSON object, got {type(patch).__name__}")
    return patch


# -- patch strategies of the built-in kinds (upstream: patchStrategy / patchMergeKey tags) --------


@dataclass(frozen=True)
class MergeList:
    """A list merged by ``key`` (None: a primitive list merged as a set); ``item`` is its items' schema."""

    key: str | None
    item: dict[str, Any] = field(default_factory=dict)
    retain_keys: bool = False


@dataclass(frozen=True)
class Retain:
    """A struct with ``patchStrategy: retainKeys`` (e.g. Deployment ``spec.strategy``)."""

    fields: dict[str, Any] = field(default_factory=dict)


_META = {"ownerReferences": MergeList("uid"), "finalizers": MergeList(None)}
_CONTAINER = {
    "ports": MergeList("containerPort"),
    "env": MergeList("name"),
    "volumeMounts": MergeList("mountPath"),
    "volumeDevices": MergeList("devicePath"),
}
_POD_SPEC = {
    "containers": MergeList("name", _CONTAINER),
    "initContainers": MergeList("name", _CONTAINER),
    "ephemeralContainers": MergeList("name", _CONTAINER),
    "volumes": MergeList("name", retain_keys=True),
    "imagePullSecrets": MergeList("name"),
    "hostAliases": MergeList("ip"),
    "topologySpreadConstraints": MergeList("topologyKey"),
    "resourceClaims": MergeList("name"),
    "schedulingGates": MergeList("name"),
}
_CONDITIONS = {"conditions": MergeList("type")}
_TEMPLATE = {"metadata": _META, "spec": _POD_SPEC}

SCHEMAS: dict[str, dict[str, Any]] = {
    "Pod": {"spec": _POD_SPEC, "status": {"conditions": MergeList("type"), "podIPs": MergeList("ip"),
                                          "hostIPs": MergeList("ip")}},
    "Deployment": {"spec": {"template": _TEMPLATE, "strategy": Retain()}, "status": _CONDITIONS},
    "ReplicaSet": {"spec": {"template": _TEMPLATE}, "status": _CONDITIONS},
    "StatefulSet": {"spec": {"template": _TEMPLATE}, "status": _CONDITIONS},
    "DaemonSet": {"spec": {"template": _TEMPLATE}, "status": _CONDITIONS},
    "Job": {"spec": {"template": _TEMPLATE}, "status": _CONDITIONS},
    "CronJob": {"spec": {"jobTemplate": {"metadata": _META, "spec": {"template": _TEMPLATE}}}},
    "Service": {"spec": {"ports": MergeList("port")}},
    "Node": {"status": {"conditions": MergeList("type"), "addresses": MergeList("type")}},
    "HorizontalPodAutoscaler": {"status": _CONDITIONS},
    "PodDisruptionBudget": {"status": _CONDITIONS},
    "Namespace": {"status": _CONDITIONS},
    "PersistentVolumeClaim": {"status": _CONDITIONS},
}


def schema_for(rt: ResourceType) -> dict[str, Any]:
    return {"metadata": _META, **SCHEMAS.get(rt.kind, {})} if not rt.custom else {"metadata": _META}


# -- applying -------------------------------------------------------------------------------------


def apply_patch(current: dict[str, Any], doc: Any, ptype: str, rt: ResourceType) -> Any:
    if ptype == MERGE:
        return merge_patch(current, doc)
    if ptype == JSON:
        try:
            return jsonpatch.apply_patch(current, doc, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise errors.ApiError(422, "Invalid", f"the JSON patch could not be applied: {e}") from None
        except (TypeError, KeyError, AttributeError) as e:
            raise errors.bad_request(f"invalid JSON patch: {e}") from None
    if ptype == STRATEGIC:
        if rt.custom:
            raise errors.unsupported_media_type(
                f"the body of the request was in an unknown format - accepted media types include: {JSON}, {MERGE}, "
                f"{APPLY}")
        return strategic_merge(current, doc, schema_for(rt))
    raise errors.unsupported_media_type(f"unsupported patch type {ptype}")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _strip_directives(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip_directives(x) for k, x in v.items()
                if not k.startswith("$") and x is not None}
    if isinstance(v, list):
        return [_strip_directives(x) for x in v if not (isinstance(x, dict) and x.get("$patch") == "delete")]
    return v


def strategic_merge(original: Any, patch: Any, schema: Any) -> Any:
    """Kubernetes strategic merge patch of ``patch`` onto ``original`` (returns a new value)."""
    if not isinstance(patch, dict):
        return patch
    if patch.get("$patch") == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    if patch.get("$patch") == "delete":
        return None
    fields = schema.fields if isinstance(schema, Retain) else (schema if isinstance(schema, dict) else {})
    out = dict(original) if isinstance(original, dict) else {}
    orders: dict[str, list[Any]] = {}
    deletes: dict[str, list[Any]] = {}
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            orders[k.partition("/")[2]] = v if isinstance(v, list) else []
        elif k.startswith("$deleteFromPrimitiveList/"):
            deletes[k.partition("/")[2]] = v if isinstance(v, list) else []
        elif k in ("$retainKeys", "$patch"):
            continue
        elif v is None:
            out.pop(k, None)
        else:
            sub = fields.get(k)
            if isinstance(sub, MergeList) and isinstance(v, list):
                current = out.get(k)
                out[k] = _merge_list(current if isinstance(current, list) else [], v, sub)
            elif isinstance(v, dict) and isinstance(out.get(k), dict):
                merged = strategic_merge(out[k], v, sub or {})
                if merged is None:
                    out.pop(k, None)
                else:
                    out[k] = merged
            elif isinstance(v, dict) and v.get("$patch") == "delete":
                out.pop(k, None)
            else:
                out[k] = _strip_directives(v)
    for k, values in deletes.items():
        if isinstance(out.get(k), list):
            out[k] = [x for x in out[k] if x not in values]
    for k, order in orders.items():
        sub = fields.get(k)
        if isinstance(out.get(k), list) and isinstance(sub, MergeList):
            out[k] = _reorder(out[k], order, sub.key)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _key_of(item: Any, key: str | None) -> Any:
    if key is None:
        return json.dumps(item, sort_keys=True)
    return item.get(key) if isinstance(item, dict) else None


def _merge_list(original: list[Any], patch: list[Any], spec: MergeList) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [_strip_directives(p) for p in patch if not (isinstance(p, dict) and "$patch" in p)]
    if spec.key is None:
        out = list(original)
        for p in patch:
            if p not in out:
                out.append(p)
        return out
    out = list(original)
    for p in patch:
        if not isinstance(p, dict):
            raise errors.bad_request(f"strategic merge patch: list items must be objects with key {spec.key!r}")
        if spec.key not in p:
            raise errors.bad_request(f"map: {p} does not contain declared merge key: {spec.key}")
        k = p[spec.key]
        idx = next((i for i, o in enumerate(out) if _key_of(o, spec.key) == k), None)
        if p.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        item_schema: Any = Retain(spec.item) if spec.retain_keys else spec.item
        if idx is None:
            out.append(_strip_directives(p))
        else:
            out[idx] = strategic_merge(out[idx], p, item_schema)
    return out


def _reorder(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    wanted = [_key_of(o, key) if key else json.dumps(o, sort_keys=True) for o in order]
    rank = {k: i for i, k in enumerate(wanted)}
    keyed = [(rank.get(_key_of(it, key), len(rank) + i), i, it) for i, it in enumerate(items)]
    return [it for _, _, it in sorted(keyed, key=lambda t: (t[0], t[1]))]


# -- server-side apply (simplified) -----------------------------------------------------------------


def fields_v1(doc: Any, schema: Any) -> dict[str, Any]:
    """The ``FieldsV1`` set of a (partial) object: which fields an apply configuration sets."""
    if not isinstance(doc, dict):
        return {}
    fields = schema.fields if isinstance(schema, Retain) else (schema if isinstance(schema, dict) else {})
    out: dict[str, Any] = {}
    for k, v in doc.items():
        sub = fields.get(k)
        if isinstance(v, dict):
            out[f"f:{k}"] = fields_v1(v, sub or {})
        elif isinstance(v, list) and isinstance(sub, MergeList):
            entry: dict[str, Any] = {}
            for item in v:
                if sub.key is None:
                    entry[f"v:{json.dumps(item)}"] = {}
                elif isinstance(item, dict) and sub.key in item:
                    inner = fields_v1(item, sub.item)
                    inner["."] = {}
                    entry["k:" + json.dumps({sub.key: item[sub.key]}, separators=(",", ":"))] = inner
            out[f"f:{k}"] = entry
        else:
            out[f"f:{k}"] = {}
    return out


def _prune(obj: Any, removed: dict[str, Any], schema: Any) -> Any:
    """Remove from ``obj`` the leaf fields listed in ``removed`` (a FieldsV1 set)."""
    if not isinstance(obj, dict):
        return obj
    fields = schema.fields if isinstance(schema, Retain) else (schema if isinstance(schema, dict) else {})
    out = dict(obj)
    for fk, sub_removed in removed.items():
        if not fk.startswith("f:"):
            continue
        k = fk[2:]
        if k not in out:
            continue
        sub = fields.get(k)
        if not sub_removed:
            del out[k]
        elif isinstance(out[k], dict):
            out[k] = _prune(out[k], sub_removed, sub or {})
        elif isinstance(out[k], list) and isinstance(sub, MergeList):
            keep = []
            for item in out[k]:
                ident = ("v:" + json.dumps(item)) if sub.key is None else (
                    "k:" + json.dumps({sub.key: item.get(sub.key)}, separators=(",", ":")) if isinstance(item, dict) else "")
                inner = sub_removed.get(ident)
                if inner is None:
                    keep.append(item)
                elif inner == {} or "." in inner:
                    continue
                else:
                    keep.append(_prune(item, inner, sub.item))
            out[k] = keep
    return out


def _fieldset_minus(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Fields in ``a`` not in ``b``: an entry is removed whole if ``b`` lacks it."""
    out: dict[str, Any] = {}
    for k, v in a.items():
        if k not in b:
            out[k] = {"." : {}} if (k.startswith("k:") or k.startswith("v:")) else {}
        elif v and b[k]:
            inner = _fieldset_minus(v, b[k])
            if inner:
                out[k] = inner
    return out


def _entry(manager: str, operation: str, api_version: str, now: str, fields: dict[str, Any],
           subresource: str | None) -> dict[str, Any]:
    e = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": now,
         "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        e["subresource"] = subresource
    return e


def _applied_fields(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    meta = dict(body.get("metadata") or {})
    for k in ("name", "namespace", "resourceVersion", "uid", "managedFields", "creationTimestamp"):
        meta.pop(k, None)
    if meta:
        body["metadata"] = meta
    else:
        body.pop("metadata", None)
    return fields_v1(body, schema)


def server_side_apply(current: dict[str, Any], doc: dict[str, Any], rt: ResourceType, *, manager: str,
                      force: bool, now: str, subresource: str | None) -> dict[str, Any]:
    """Merge an apply configuration into ``current`` and drop fields the manager no longer applies."""
    if doc.get("kind") != rt.kind or doc.get("apiVersion") != rt.api_version:
        raise errors.bad_request(
            f"the apply configuration must have kind {rt.kind!r} and apiVersion {rt.api_version!r}, "
            f"got {doc.get('kind')!r} {doc.get('apiVersion')!r}")
    schema = schema_for(rt)
    new_fields = _applied_fields(doc, schema)
    managed = list((current.get("metadata") or {}).get("managedFields") or [])
    previous = next((m for m in managed if m.get("manager") == manager and m.get("operation") == "Apply"), None)
    base = current
    if previous is not None:
        removed = _fieldset_minus(previous.get("fieldsV1") or {}, new_fields)
        if removed:
            base = _prune(current, removed, schema)
    merged: dict[str, Any] = strategic_merge(base, _as_apply_patch(doc), schema)
    managed = [m for m in managed if not (m.get("manager") == manager and m.get("operation") == "Apply")]
    managed.append(_entry(manager, "Apply", rt.api_version, now, new_fields, subresource))
    merged.setdefault("metadata", {})["managedFields"] = managed
    return merged


def _as_apply_patch(doc: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in doc.items()}
    meta = dict(out.get("metadata") or {})
    for k in ("resourceVersion", "managedFields", "uid", "creationTimestamp"):
        meta.pop(k, None)
    out["metadata"] = meta
    return out


def record_apply_manager(obj: dict[str, Any], doc: dict[str, Any], manager: str, now: str) -> None:
    """managedFields for an object created by an apply."""
    schema = {"metadata": _META, **SCHEMAS.get(str(obj.get("kind")), {})}
    obj.setdefault("metadata", {})["managedFields"] = [
        _entry(manager, "Apply", str(obj.get("apiVersion")), now, _applied_fields(doc, schema), None)]


def record_update_manager(obj: dict[str, Any], manager: str, now: str, subresource: str | None) -> None:
    """Note that ``manager`` updated the object (kubectl shows it in ``--show-managed-fields``)."""
    meta = obj.setdefault("metadata", {})
    managed = [m for m in meta.get("managedFields") or []
               if not (m.get("manager") == manager and m.get("operation") == "Update"
                       and m.get("subresource") == subresource)]
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    managed.append(_entry(manager, "Update", str(obj.get("apiVersion")), now,
                          fields_v1(body, SCHEMAS.get(str(obj.get("kind")), {})), subresource))
    meta["managedFields"] = managed
