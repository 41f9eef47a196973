"""Typed view of ``envs/<app>/traces.yaml``: what the app's own code adds to its spans.

Validated against ``itbench_gym/spec/traces.schema.json`` and cross-checked against the app spec
(every service, operation, internal span, call id and flag it names must exist), so a typo fails
at load with the file and field path instead of silently producing spans without attributes. An
app without the file gets an empty catalogue: its spans carry what instrumentation records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from itbench_gym.evaluation.validation import schema_problems
from itbench_gym.lang import yamltext

if TYPE_CHECKING:  # the app package imports this module (its logs draw request fields from it)
    from itbench_gym.backends.sim.app.spec import AppSpec

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "spec" / "traces.schema.json"
_SOURCES = ("value", "field", "arg", "flag", "called", "not_called", "calls", "catalog", "cache", "recommended")
_FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Attribute:
    """One attribute: ``key``, where its value comes from (``source``, ``param``) and when it is set."""

    key: str
    source: str
    param: Any
    when: str | None = None
    unless: str | None = None
    mapping: dict[str, Any] = field(default_factory=dict)
    format: str | None = None


@dataclass(frozen=True)
class Evaluation:
    """A flag the code evaluates while the span is current (``only_for``: only for that product)."""

    flag: str
    type: str
    default: Any
    only_for: str | None = None


@dataclass(frozen=True)
class SpanDef:
    attributes: tuple[Attribute, ...] = ()
    flags: tuple[Evaluation, ...] = ()
    events: tuple[tuple[str, bool], ...] = ()
    wraps: tuple[str, ...] = ()


@dataclass(frozen=True)
class OperationDef:
    span: SpanDef = SpanDef()
    internal: dict[str, SpanDef] = field(default_factory=dict)
    fails_for: str | None = None
    #: call id -> where the product the call passes comes from (default: the trace's productId)
    args: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Provider:
    name: str
    hook: str
    cache: bool


@dataclass(frozen=True)
class Hook:
    event: str
    keys: dict[str, str]


@dataclass(frozen=True)
class Flagd:
    service: str
    rpc_service: str
    methods: dict[str, tuple[str, str]]
    attributes: dict[str, str]
    median_ms: float
    sigma: float


@dataclass(frozen=True)
class TraceCatalog:
    fields: dict[str, tuple[str, Any]] = field(default_factory=dict)
    requests: dict[str, str] = field(default_factory=dict)
    providers: dict[str, Provider] = field(default_factory=dict)
    hooks: dict[str, Hook] = field(default_factory=dict)
    flagd: Flagd | None = None
    operations: dict[tuple[str, str], OperationDef] = field(default_factory=dict)

    def query(self, route: str) -> str | None:
        """The query-string template the load generator sends with a request to ``route``."""
        return self.requests.get(route)

    def target(self, route: str, method: str, fill: Callable[[str], Any]) -> str:
        """The request path (with the load generator's query string) for a route template.

        ``fill`` gives a field's value; a ``{name}`` that is not a field keeps its text, and a
        query parameter whose field is null is left out, as ``requests`` leaves out None.
        """
        path = _FIELD.sub(lambda m: str(fill(m.group(1))) if m.group(1) in self.fields else m.group(0), route)
        query = self.requests.get(f"{method} {route}")
        if not query:
            return path
        params = []
        for part in query.split("&"):
            values = {n: fill(n) for n in _FIELD.findall(part)}
            if any(v is None for v in values.values()):
                continue
            for name, value in values.items():
                part = part.replace("{" + name + "}", quote(str(value), safe=""))
            params.append(part)
        return path + ("?" + "&".join(params) if params else "")


def _attribute(raw: dict[str, Any]) -> Attribute:
    source = next(s for s in _SOURCES if s in raw)
    return Attribute(raw["key"], source, raw[source], raw.get("when"), raw.get("unless"), dict(raw.get("map", {})), raw.get("format"))


def _span(raw: dict[str, Any]) -> SpanDef:
    return SpanDef(
        attributes=tuple(_attribute(a) for a in raw.get("attributes", [])),
        flags=tuple(Evaluation(f["flag"], f["type"], f["default"], f.get("for")) for f in raw.get("flags", [])),
        events=tuple((e["name"], bool(e.get("on_error", False))) for e in raw.get("events", [])),
        wraps=tuple(raw.get("wraps", [])),
    )


def _check(spec: AppSpec, cat: TraceCatalog, file: Path) -> None:
    """Every name the catalogue uses must exist in the app spec (or the catalogue's own fields)."""
    def fail(where: str, message: str) -> None:
        raise _error(f"{file}: {where}: {message}")

    flags = set(spec.flag_aliases.values())
    for svc in cat.providers:
        if svc not in spec.services:
            fail(f"providers.{svc}", f"unknown service {svc!r}")
    for svc, p in cat.providers.items():
        if p.hook != "none" and p.hook not in cat.hooks:
            fail(f"providers.{svc}.hook", f"no hook {p.hook!r} in hooks")
    if cat.flagd is not None and cat.flagd.service not in spec.services:
        fail("flagd.service", f"unknown service {cat.flagd.service!r}")
    for route, template in cat.requests.items():
        for name in _FIELD.findall(template):
            if name not in cat.fields:
                fail(f"requests.{route}", f"uses {{{name}}}, which is not in fields")
    for (svc, op_id), op in cat.operations.items():
        where = f"spans.{svc}.{op_id}"
        if svc not in spec.services or op_id not in spec.services[svc].operations:
            fail(where, f"service {svc!r} has no operation {op_id!r}")
        sop = spec.op(svc, op_id)
        calls = {c.id for c in sop.calls}
        for call in op.args:
            if call not in calls:
                fail(f"{where}.args", f"no call {call!r} (have {sorted(calls)})")
        for name in op.internal:
            if name not in sop.internal_spans:
                fail(f"{where}.internal.{name}", f"not an internal span of the operation (have {list(sop.internal_spans)})")
        for name, s in [("", op.span)] + [(f".internal.{n}", d) for n, d in op.internal.items()]:
            for call in s.wraps:
                if call not in calls:
                    fail(f"{where}{name}.wraps", f"no call {call!r} (have {sorted(calls)})")
            if s.flags and svc not in cat.providers:
                fail(f"{where}{name}.flags", f"service {svc!r} evaluates flags but has no entry in providers")
            for ev in s.flags:
                if ev.flag not in flags:
                    fail(f"{where}{name}.flags", f"unknown flag {ev.flag!r}")
            for a in s.attributes:
                for ref in (a.when, a.unless) + ((a.param,) if a.source == "flag" else ()):
                    if ref is not None and ref not in flags:
                        fail(f"{where}{name}.attributes.{a.key}", f"unknown flag {ref!r}")
                if a.source in ("called", "not_called", "calls") and a.param not in calls:
                    fail(f"{where}{name}.attributes.{a.key}", f"no call {a.param!r} (have {sorted(calls)})")
                if a.source == "field" and a.param not in cat.fields:
                    fail(f"{where}{name}.attributes.{a.key}", f"unknown field {a.param!r}")


def _error(message: str) -> ValueError:
    """An ``AppSpecError`` (imported here: the app package imports this module while it loads)."""
    from itbench_gym.backends.sim.app.spec import AppSpecError
    return AppSpecError(message)


@cache
def _load(path: str, mtime: float) -> dict[str, Any] | None:
    file = Path(path)
    try:
        raw = yamltext.load(file.read_text())
    except FileNotFoundError:
        return None
    except yamltext.YAMLError as exc:
        raise _error(f"{file}: not valid YAML: {exc}") from None
    problems = schema_problems(raw, json.loads(SCHEMA_PATH.read_text()), "")
    if problems:
        where, message = problems[0]
        raise _error(f"{file}: {where or '<root>'}: {message}")
    doc: dict[str, Any] = raw or {}
    return doc


def flag_variants(spec: AppSpec, manifests: Iterable[Mapping[str, Any]]) -> dict[str, tuple[tuple[str, Any], ...]]:
    """flag -> its (variant name, value) pairs in the flag ConfigMap the app deploys, so a value flagd
    serves can be reported by its variant name (what the OpenFeature hooks record)."""
    for obj in manifests:
        meta = obj.get("metadata") or {}
        if obj.get("kind") != "ConfigMap" or meta.get("name") != spec.flag_config_map:
            continue
        try:
            doc = json.loads((obj.get("data") or {}).get(spec.flag_key, "{}"))
        except json.JSONDecodeError:
            return {}
        flags = doc.get("flags") if isinstance(doc, dict) else None
        out: dict[str, tuple[tuple[str, Any], ...]] = {}
        for name, f in (flags or {}).items():
            canonical = spec.flag_aliases.get(name)
            variants = f.get("variants") if isinstance(f, dict) else None
            if canonical and isinstance(variants, dict):
                out[canonical] = tuple(variants.items())
        return out
    return {}


def load_catalog(spec: AppSpec) -> TraceCatalog:
    """The app's ``traces.yaml`` (empty when it has none), validated and checked against ``spec``."""
    file = spec.directory / "traces.yaml"
    raw = _load(str(file), file.stat().st_mtime if file.exists() else 0.0)
    if raw is None:
        return TraceCatalog()
    fd = raw.get("flagd")
    cat = TraceCatalog(
        fields={name: next(iter(v.items())) for name, v in raw.get("fields", {}).items()},
        requests=dict(raw.get("requests", {})),
        providers={s: Provider(p["name"], p["hook"], bool(p["cache"])) for s, p in raw.get("providers", {}).items()},
        hooks={n: Hook(h["event"], {k: v for k, v in h.items() if k != "event"}) for n, h in raw.get("hooks", {}).items()},
        flagd=Flagd(fd["service"], fd["rpc_service"], {k: (v[0], v[1]) for k, v in fd["methods"].items()}, dict(fd["attributes"]),
                    float(fd["latency_ms"]["median"]), float(fd["latency_ms"].get("sigma", 0.4))) if fd else None,
        operations={(svc, op_id): OperationDef(_span(o), {n: _span(d) for n, d in o.get("internal", {}).items()}, o.get("fails_for"),
                                               dict(o.get("args", {})))
                    for svc, ops in raw.get("spans", {}).items() for op_id, o in ops.items()},
    )
    _check(spec, cat, file)
    return cat
