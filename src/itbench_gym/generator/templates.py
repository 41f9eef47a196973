"""The generator's fault and noise templates (``templates.yaml``), filled over an app's targets.

A template names a catalogue fault, the arguments with ``$placeholders``, and what it ranges over;
:func:`fault_candidates` fills it for every target the app has (read from the app's manifests and
behaviour model, the same data the spec reference checker reads), and :func:`noise_candidates` does
the same for background noise. Which targets are *valid* is decided later, as for a hand-written
scenario: each variant is checked against the fault's schema and references, then run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any

from itbench_gym.backends.sim.app.spec import AppSpec
from itbench_gym.lang import yamltext
from itbench_gym.lang.flagd import load_flag_file
from itbench_gym.spec.appfacts import AppFacts

_TEMPLATES = Path(__file__).with_name("templates.yaml")
#: A string that holds one placeholder and nothing else: a dollar sign and a name, braced or not.
_ALONE = re.compile(r"\$\{?([_a-zA-Z][_a-zA-Z0-9]*)\}?")
#: An address setting as a URL or ``host:port`` (scheme, host, port, path): what a wrong-address fault rewrites.
_ADDRESS = re.compile(r"([a-z][a-z0-9+.-]*://)?([A-Za-z0-9.-]+):(\d+)(/\S*)?")
#: The port a wrong-address fault points a caller at: nothing of the app listens there (ITBench 24's).
CLOSED_PORT = 9999


class TemplateError(ValueError):
    """A template file that cannot be used; names the file and the template."""


@dataclass(frozen=True)
class Candidate:
    """One filled fault template: what it injects and what its ground truth starts from."""

    #: Stable identity (``feature-flag:adFailure=on``); variants are told apart by their keys.
    key: str
    template: str
    #: Fault entries (``{id, args}``) in injection order, then the waiters they need.
    faults: tuple[Mapping[str, Any], ...]
    waiters: tuple[Mapping[str, Any], ...]
    #: The object the fault changes: ``{kind, name}`` in the scenario's namespace.
    root_cause: Mapping[str, str]
    #: Services the fault acts on first; propagation runs from them (``reaches``).
    services: tuple[str, ...]
    category: str
    mechanism: str
    condition: str
    #: Candidates sharing this cannot be combined in one variant (e.g. two variants of one flag).
    exclusive: str
    #: The service the root cause acts through (flagd), and what it then does ("flagd serves ...").
    via: str | None = None
    served: str = ""
    #: What the fault does to each of ``services`` (the behaviour model's effects, as text).
    effect: Mapping[str, str] = field(default_factory=dict)
    #: Which ways its effects travel on the call graph, each with the wording of one hop (templates.yaml
    #: ``hops``): to the ``callers`` (failures), to the ``callees`` (missing or extra calls).
    reaches: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: The accepted fix as kubectl commands (empty: the oracle reverts the fault itself).
    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class Noise:
    """One filled noise template: an unrelated restart, or a load surge (``users``)."""

    key: str
    faults: tuple[Mapping[str, Any], ...] = ()
    users: int | None = None
    #: The Deployment a restart touches (it must not be on the variant's propagation chain).
    workload: str | None = None


@dataclass(frozen=True)
class Templates:
    faults: tuple[Mapping[str, Any], ...]
    noise: tuple[Mapping[str, Any], ...]
    #: Effect type -> ``{text, reaches, hop}``: what it does to a service, as the ground truth words it,
    #: whether it travels to the ``callers`` (default) or the ``callees``, and how a hop is worded.
    effects: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Hop kind -> ``{condition, effect}`` with ``{near}`` and ``{far}`` (templates.yaml ``hops``).
    hops: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    source: Path = field(default=_TEMPLATES)

    def hop(self, kind: str) -> Mapping[str, str]:
        if kind not in self.hops:
            raise TemplateError(f"{self.source}: hops has no {kind!r} wording")
        return self.hops[kind]

    def reaches(self, template: Mapping[str, Any]) -> dict[str, Mapping[str, str]]:
        """A workload or Service template's directions (default both) with their hop wordings."""
        ways = template.get("reaches", ["callers", "callees"])
        if not isinstance(ways, list) or not ways or any(w not in ("callers", "callees") for w in ways):
            raise TemplateError(f"{self.source}: template {template.get('id')}: reaches must list callers and/or callees")
        return {w: self.hop(w) for w in ways}


@lru_cache(maxsize=4)
def load_templates(path: Path = _TEMPLATES) -> Templates:
    doc = yamltext.load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, Mapping) or not isinstance(doc.get("faults"), list):
        raise TemplateError(f"{path}: expected a mapping with a 'faults' list")
    return Templates(tuple(doc["faults"]), tuple(doc.get("noise") or ()), dict(doc.get("effects") or {}),
                     dict(doc.get("hops") or {}), path)


def fill(value: Any, values: Mapping[str, str | int]) -> Any:
    """``value`` with the placeholders of its strings substituted (nested lists and mappings); a
    string that holds one placeholder and nothing else takes its value as it is (an int stays an int)."""
    if isinstance(value, str):
        alone = _ALONE.fullmatch(value)
        if alone and alone.group(1) in values:
            return values[alone.group(1)]
        return Template(value).substitute({k: str(v) for k, v in values.items()})
    if isinstance(value, list):
        return [fill(v, values) for v in value]
    if isinstance(value, Mapping):
        return {k: fill(v, values) for k, v in value.items()}
    return value


def fault_candidates(templates: Templates, facts: AppFacts, model: AppSpec, namespace: str,
                     known_faults: set[str]) -> tuple[list[Candidate], list[str]]:
    """Every candidate of every template whose fault is in the catalogue, sorted by key, and a note
    per template that was skipped (why)."""
    out: list[Candidate] = []
    skipped: list[str] = []
    for i, template in enumerate(templates.faults):
        where = f"{templates.source}: faults[{i}] ({template.get('id')})"
        if template.get("fault") not in known_faults:
            skipped.append(f"{where}: fault {template.get('fault')!r} is not in the catalogue")
            continue
        over = template.get("over")
        if over == "flag-variant":
            out += _flag_candidates(template, templates, facts, model, namespace, where)
        elif over in ("deployment", "deployment-container"):
            out += _workload_candidates(template, facts, model, namespace, templates.reaches(template),
                                        per_container=over == "deployment-container")
        elif over == "service":
            out += _service_candidates(template, facts, model, namespace, templates.reaches(template))
        elif over == "deployment-address":
            out += _address_candidates(template, facts, model, namespace, templates.reaches(template))
        else:
            raise TemplateError(f"{where}: unknown 'over' {over!r} "
                                "(known: flag-variant, deployment, deployment-container, deployment-address, service)")
    return sorted(out, key=lambda c: c.key), skipped


def _flag_candidates(template: Mapping[str, Any], templates: Templates, facts: AppFacts, model: AppSpec,
                     namespace: str, where: str) -> list[Candidate]:
    """One candidate per (flag, variant) of the flagd ConfigMap whose flag the behaviour model gives
    an effect on a service, the variant ``off`` excepted."""
    config_map = facts.find("ConfigMap", namespace, model.flag_config_map)
    if config_map is None or facts.flags is None:
        return []
    raw = (config_map.body.get("data") or {}).get(model.flag_key)
    if not isinstance(raw, str):
        raise TemplateError(f"{where}: {config_map} has no key {model.flag_key!r}")
    restart_on = set(template.get("restart_affected_on") or ())
    out = []
    for flag, definition in sorted(load_flag_file(raw).items()):
        effects = [e for e in model.effects if e.flag == flag]
        services = tuple(dict.fromkeys(
            s for e in effects for s in (e.get("service"), e.get("group")) if isinstance(s, str) and s in model.services))
        if not services:
            continue
        effect = {s: ", ".join(dict.fromkeys(str(templates.effects.get(e.type, {}).get("text", e.type)) for e in effects
                                             if s in (e.get("service"), e.get("group")))) for s in services}
        downstream = [templates.effects.get(e.type, {}) for e in effects if templates.effects.get(e.type, {}).get("reaches") == "callees"]
        reaches = ({"callees": templates.hop(str(downstream[0].get("hop", "callees")))} if downstream
                   else {"callers": templates.hop("callers")})
        restarted = tuple(dict.fromkeys(
            s for e in effects if e.type in restart_on for s in (e.get("service"),) if isinstance(s, str) and s in model.services))
        for variant in sorted(definition.variants):
            if variant == "off":
                continue
            values = {"flag": flag, "variant": variant, "config_map": model.flag_config_map,
                      "flag_service": model.flag_service, "namespace": namespace}
            waiters = [fill(w, values) for w in template.get("waiters") or ()]
            waiters += [_restart(model.services[s].workload, namespace) for s in restarted]
            out.append(Candidate(
                key=f"{template['id']}:{flag}={variant}",
                template=str(template["id"]),
                faults=({"id": template["fault"], "args": fill(template["args"], values)},),
                waiters=tuple(waiters),
                root_cause=fill(template["root_cause"], values),
                services=services,
                category=str(template.get("fault_category", "")),
                mechanism=str(template.get("fault_mechanism", "")),
                condition=fill(str(template.get("condition", "")), values),
                exclusive=f"flag:{flag}",
                via=fill(template["via"], values) if template.get("via") else None,
                served=fill(str(template.get("served", "")), values),
                effect=effect,
                reaches=reaches,
            ))
    return out


def _workload_candidates(template: Mapping[str, Any], facts: AppFacts, model: AppSpec, namespace: str,
                         reaches: Mapping[str, Mapping[str, str]], *, per_container: bool) -> list[Candidate]:
    """One candidate per Deployment that runs a service of the behaviour model (and per container of
    its pod template when ``per_container``)."""
    service_of = {s.workload: name for name, s in model.services.items()}
    init = "initContainers"
    out = []
    for obj in facts.of_kind("Deployment", namespace):
        service = service_of.get(obj.name)
        if service is None:
            continue
        spec = (obj.body.get("spec") or {}).get("template", {}).get("spec") or {}
        skip = {c.get("name") for c in spec.get(init) or ()}
        containers = [c for c in obj.containers() if c not in skip] if per_container else [""]
        for container in containers:
            values = {"name": obj.name, "namespace": namespace, "service": service, "container": container}
            target = obj.name + (f"/{container}" if per_container else "")
            out.append(_one_target(template, target, values, service, obj.name, reaches))
    return out


def _one_target(template: Mapping[str, Any], target: str, values: Mapping[str, str | int], service: str,
                workload: str, reaches: Mapping[str, Mapping[str, str]]) -> Candidate:
    """The candidate of a template filled for one target that acts on one service of ``workload``."""
    return Candidate(
        key=f"{template['id']}:{target}",
        template=str(template["id"]),
        faults=({"id": template["fault"], "args": fill(template["args"], values)},),
        waiters=tuple(fill(w, values) for w in template.get("waiters") or ()),
        root_cause=fill(template["root_cause"], values),
        services=(service,),
        category=str(template.get("fault_category", "")),
        mechanism=str(template.get("fault_mechanism", "")),
        condition=fill(str(template.get("condition", "")), values),
        exclusive=f"workload:{workload}",
        effect={service: fill(str(template.get("effect", "misbehaves")), values)},
        commands=tuple(fill(list(template.get("mitigation") or ()), values)),
        reaches=reaches,
    )


def _address_candidates(template: Mapping[str, Any], facts: AppFacts, model: AppSpec, namespace: str,
                        reaches: Mapping[str, Mapping[str, str]]) -> list[Candidate]:
    """One candidate per env var of a Deployment's container that holds, as a URL or ``host:port``, the
    address of a service its calls go to (app.yaml ``address.env``): ITBench's environment-variable
    faults (its 16 and 24) on every such variable."""
    service_of = {s.workload: name for name, s in model.services.items()}
    out = []
    for obj in facts.of_kind("Deployment", namespace):
        service = service_of.get(obj.name)
        if service is None:
            continue
        callees = {c.address.env: c.service for op in model.services[service].operations.values() for c in op.calls
                   if c.address.env is not None}
        for container in obj.containers():
            entries = obj.env(container)
            names = [str(e.get("name")) for e in entries]
            for entry in entries:
                env, value = str(entry.get("name")), entry.get("value")
                address = _ADDRESS.fullmatch(value) if isinstance(value, str) and env in callees and names.count(env) == 1 else None
                if address is None:
                    continue
                scheme, host, _, rest = address.groups()
                values: dict[str, str | int] = {
                    "name": obj.name, "namespace": namespace, "service": service, "container": container, "env": env,
                    "host": host, "callee": callees[env], "address": address.group(0),
                    "closed_address": f"{scheme or ''}{host}:{CLOSED_PORT}{rest or ''}"}
                out.append(_one_target(template, f"{obj.name}/{container}/{env}", values, service, obj.name, reaches))
    return out


def _service_candidates(template: Mapping[str, Any], facts: AppFacts, model: AppSpec, namespace: str,
                        reaches: Mapping[str, Mapping[str, str]]) -> list[Candidate]:
    """One candidate per Service whose selector picks the pods of a Deployment that runs a service of
    the behaviour model, with its first port's numbers and its selector (for the fix that restores it)."""
    service_of = {s.workload: name for name, s in model.services.items()}
    pod_labels = {obj.name: dict((((obj.body.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {})
                  for obj in facts.of_kind("Deployment", namespace) if obj.name in service_of}
    out = []
    for obj in facts.of_kind("Service", namespace):
        spec = obj.body.get("spec") or {}
        selector = dict(spec.get("selector") or {})
        ports = spec.get("ports") or []
        workload = next((w for w, labels in sorted(pod_labels.items())
                         if selector and all(labels.get(k) == v for k, v in selector.items())), None)
        if workload is None or not ports:
            continue
        port = ports[0]
        target = port.get("targetPort", port.get("port"))
        if not isinstance(target, int):
            continue
        service = service_of[workload]
        values: dict[str, str | int] = {"name": obj.name, "namespace": namespace, "service": service,
                                        "port": int(port.get("port", target)), "target_port": target,
                                        "selector_json": json.dumps(selector, sort_keys=True)}
        out.append(_one_target(template, obj.name, values, service, workload, reaches))
    return out


def _restart(workload: str, namespace: str) -> dict[str, Any]:
    return {"id": "restart-kubernetes-workload",
            "args": {"kubernetesObject": {"apiVersion": "apps/v1", "kind": "Deployment",
                                          "metadata": {"name": workload, "namespace": namespace}}}}


def noise_candidates(templates: Templates, facts: AppFacts, namespace: str, known_faults: set[str]) -> list[Noise]:
    """Every filled noise template, sorted by key."""
    out: list[Noise] = []
    for i, template in enumerate(templates.noise):
        if "users" in template:
            out += [Noise(key=f"{template['id']}:{users}", users=int(users)) for users in template["users"]]
        elif template.get("over") == "deployment":
            if template.get("fault") not in known_faults:
                continue
            for obj in facts.of_kind("Deployment", namespace):
                values = {"name": obj.name, "namespace": namespace}
                out.append(Noise(key=f"{template['id']}:{obj.name}", workload=obj.name,
                                 faults=({"id": template["fault"], "args": fill(template["args"], values)},)))
        else:
            raise TemplateError(f"{templates.source}: noise[{i}] ({template.get('id')}): needs 'users' or 'over: deployment'")
    return sorted(out, key=lambda n: n.key)


def canonical(value: Any) -> str:
    """A stable text of a JSON value (the identity of a variant's faults)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
