"""Label and field selectors with Kubernetes' syntax and semantics.

Used by the store (``?labelSelector=`` / ``?fieldSelector=``) and by controllers (a Deployment's
``spec.selector`` is a ``LabelSelector`` dict). Parse errors are ``400 BadRequest`` with the same
wording as the real API server, so kubectl prints a useful message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from itbench_gym.lang.selectors import LabelSelector as LabelSelector
from itbench_gym.lang.selectors import Requirement as Requirement
from itbench_gym.lang.selectors import SelectorError
from itbench_gym.lang.selectors import selector_from_dict as _selector_from_dict

from . import errors

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _bad(selector: str, why: str) -> errors.ApiError:
    return errors.bad_request(f"unable to parse requirement: {why}" if why else f"invalid selector: {selector!r}")


def _check_key(key: str, selector: str) -> None:
    if not _KEY.match(key) or len(key.rpartition("/")[2]) > 63:
        raise _bad(selector, f"<nil>: Invalid value: {key!r}: name part must consist of alphanumeric characters, "
                             "'-', '_' or '.', and must start and end with an alphanumeric character")


def _check_value(value: str, selector: str) -> None:
    if len(value) > 63 or not _VALUE.match(value):
        raise _bad(selector, f"values[0]: Invalid value: {value!r}: a valid label must be an empty string or consist of "
                             "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")


_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|[^\s!=(),]+)")


def parse_label_selector(selector: str | None) -> LabelSelector:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h`` (the ``?labelSelector=`` syntax)."""
    if not selector or not selector.strip():
        return LabelSelector([])
    tokens: list[str] = []
    pos = 0
    while pos < len(selector):
        m = _TOKEN.match(selector, pos)
        if m is None or m.end() == pos:
            if selector[pos:].strip() == "":
                break
            raise _bad(selector, "")
        tokens.append(m.group(1))
        pos = m.end()
    reqs: list[Requirement] = []
    i = 0

    def need(expected: str | None = None) -> str:
        nonlocal i
        if i >= len(tokens):
            raise _bad(selector, f"found '', expected: {expected or 'identifier'}")
        tok = tokens[i]
        i += 1
        if expected is not None and tok != expected:
            raise _bad(selector, f"found '{tok}', expected: '{expected}'")
        return tok

    while i < len(tokens):
        tok = need()
        if tok == "!":
            key = need()
            _check_key(key, selector)
            reqs.append(Requirement(key, "!"))
        else:
            key = tok
            _check_key(key, selector)
            nxt = tokens[i] if i < len(tokens) else ","
            if nxt == ",":
                reqs.append(Requirement(key, "exists"))
            elif nxt in ("=", "==", "!="):
                i += 1
                value = tokens[i] if i < len(tokens) and tokens[i] != "," else ""
                if value:
                    i += 1
                _check_value(value, selector)
                reqs.append(Requirement(key, "!=" if nxt == "!=" else "=", (value,)))
            elif nxt in ("in", "notin"):
                i += 1
                need("(")
                values: list[str] = []
                while True:
                    v = need()
                    if v == ")":
                        break
                    if v == ",":
                        continue
                    _check_value(v, selector)
                    values.append(v)
                if not values and nxt == "in":
                    raise _bad(selector, "for 'in', 'notin' operators, values set can't be empty")
                reqs.append(Requirement(key, nxt, tuple(values)))
            elif nxt in ("gt", "lt"):
                i += 1
                v = need()
                if not v.lstrip("-").isdigit():
                    raise _bad(selector, f"for 'Gt', 'Lt' operators, the value must be an integer: {v!r}")
                reqs.append(Requirement(key, nxt, (v,)))
            else:
                raise _bad(selector, f"found '{nxt}', expected: in, notin, =, ==, !=, gt, lt")
        if i < len(tokens):
            need(",")
    return LabelSelector(reqs)


def selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """:func:`itbench_gym.lang.selectors.selector_from_dict`, a bad operator as ``400 BadRequest``."""
    try:
        return _selector_from_dict(selector)
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from None


def labels_match(match_labels: Mapping[str, str] | None, labels: Mapping[str, str] | None) -> bool:
    """Equality-only selector (Service ``spec.selector``, ReplicationController style)."""
    if not match_labels:
        return False
    labels = labels or {}
    return all(labels.get(k) == v for k, v in match_labels.items())


# -- field selectors ------------------------------------------------------------------------------

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
_EVENT_FIELDS = (
    "involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
    "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
    "reason", "reportingComponent", "source", "type",
)
#: Extra selectable fields per kind (upstream: each resource's GetAttrs / field label conversion).
FIELDS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
            "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs", "status.nominatedNodeName"),
    "Event": _EVENT_FIELDS + tuple(f.replace("involvedObject", "regarding") for f in _EVENT_FIELDS[:7]),
    "Node": ("spec.unschedulable",),
    "Namespace": ("status.phase",),
    "Secret": ("type",),
    "ReplicaSet": ("status.replicas",),
    "Job": ("status.successful",),
    "PersistentVolume": ("name",),
}


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    op: str  # "=" or "!="
    value: str


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    if path == "source":
        path = "source.component"
    if path.startswith("regarding.") and "involvedObject" in obj:
        path = "involvedObject." + path.partition(".")[2]
    if path == "status.podIPs":
        ips = [p.get("ip", "") for p in (obj.get("status") or {}).get("podIPs") or []]
        return ips[0] if ips else ""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return "false" if path in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _split_unescaped(s: str, sep: str) -> list[str]:
    out, cur, esc = [], [], False
    for ch in s:
        if esc:
            cur.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        elif ch == sep:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def parse_field_selector(selector: str | None, kind: str, custom: bool = False) -> list[FieldRequirement]:
    """Parse ``a=b,c!=d`` and check every field is selectable for ``kind``."""
    if not selector or not selector.strip():
        return []
    allowed = set(_COMMON_FIELDS) | (set() if custom else set(FIELDS.get(kind, ())))
    out = []
    for term in _split_unescaped(selector, ","):
        term = term.strip()
        if not term:
            continue
        m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", term)
        if m is None:
            raise errors.bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        path, op, value = m.group(1).strip(), m.group(2), m.group(3).strip()
        if path not in allowed:
            raise errors.bad_request(f'field label not supported: {path}')
        out.append(FieldRequirement(path, "!=" if op == "!=" else "=", value))
    return out


def fields_match(obj: Mapping[str, Any], reqs: list[FieldRequirement]) -> bool:
    for r in reqs:
        have = _field_value(obj, r.path)
        if (have == r.value) != (r.op == "="):
            return False
    return True
