"""The fault catalogue: ``definitions/<fault id>.yaml``, one file per fault and waiter.

Each file has ``description``, ``category`` (``Waiter`` for ITBench's waiters), ``operation`` (the
name of its implementation in :mod:`itbench_gym.faults.operations`) and ``args``: the JSON Schema of
the arguments, shaped like ITBench's own fault and waiter schemas so library scenarios map 1:1.
Optionally ``creates``: the objects the operation makes whose names no argument gives (ITBench's
fixed names, such as ResourceQuota ``memory``), so a ground truth may name them —
``{kind, name, namespace?, spawns?}`` where ``name`` and ``namespace`` are a literal or
``{arg: <dotted path>}``, and ``spawns`` is the kind of the children its controller makes.
Optionally ``workarounds``: fixes within the agent's grant for a fault whose removal is not (ITBench's
agent may not relabel a Namespace), as ``{id, description, argv}`` with ``argv`` a kubectl command
line whose items are literals or ``{arg: <dotted path>}``; an imported scenario lists them first.
Optionally ``cluster_wide``: what the fault changes that every episode on a cluster shares (a Node,
a cluster-scoped object, the API server), in words: such a fault cannot run in an episode's own
namespace set beside other episodes (``KubernetesBackend`` with a ``namespace_suffix`` refuses it).

Besides each fault's JSON Schema, the catalogue declares which arguments *name* something in the
app (``x-ref``), so that loading a scenario checks it against ``envs/<app>/`` (manifests, app.yaml,
alert-rules.yaml) with the field path and a did-you-mean; :func:`argument_refs` lists them for an
actual set of arguments, so the scenario-spec validator checks references by type, driven by the
catalogue's data rather than per-fault code.

Reference types (``x-ref``). <arg> is a dotted path from the fault's `args` (kubernetesObject,
flag.name), or @<key> for a sibling of the annotated field (@selector). A container reference may
annotate a string or a list of strings.
  {type: object}                      a Kubernetes object {apiVersion, kind, metadata: {name, namespace}}
                                      that exists in the app's manifests (Deployment, ConfigMap, Service, ...)
  {type: object, creates: true,       an object the fault creates: its namespace must exist; ground-truth
   spawns: <arg>}                     groups may name it, and the children of the kind given by <arg> that
                                      its controller spawns (named <name>-<generated suffix>)
  {type: object, also_creates:        an existing object, beside which the fault creates a <kind> named
   {kind: <kind>, suffix: <text>}}    <name><suffix> in its namespace (ground-truth groups may name it)
  {type: object, autoscaled: true}    an existing workload that a HorizontalPodAutoscaler targets (the app's,
                                      with environment.autoscaling.kubernetes.hpa, or one of its manifests)
  {type: container, workload: <arg>}  a container of the pod template of the workload object <arg>
  {type: container, selector: <arg>,  a container of the pods that the Chaos Mesh selector <arg> picks
   namespace: <arg>}                  (<arg> namespace: the default when the selector names none)
  {type: flag, config_map: <arg>}     a feature flag defined in the flagd JSON (app.yaml flags.key) of ConfigMap <arg>
  {type: flag-variant, flag: <arg>,   a variant of that flag
   config_map: <arg>}
  {type: pod-selector, namespace: <arg>}
                                      a Chaos Mesh selector that picks at least one pod template of the app
                                      (selectors on Kubernetes' own namespaces, such as kube-system, are not
                                      checked: the app's manifests do not describe them)
  {type: env-var, container: <arg>,   an env var that container <arg> of the pod template of workload <arg>
   workload: <arg>}                   sets once in its ``env`` (what a fault that modifies a variable needs)
  {type: service-port, service: <arg>}
                                      a target port that exactly one port of the Service object <arg> forwards to
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from itbench_gym.lang import yamltext

_DEFINITIONS = Path(__file__).with_name("definitions")

#: Reference types and the parameters each needs (``x-ref``; see the module docstring).
REF_TYPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # type: (required parameters, optional parameters)
    "object": (frozenset(), frozenset({"creates", "spawns", "also_creates", "autoscaled"})),
    "container": (frozenset(), frozenset({"workload", "selector", "namespace"})),
    "flag": (frozenset({"config_map"}), frozenset()),
    "flag-variant": (frozenset({"flag", "config_map"}), frozenset()),
    "pod-selector": (frozenset(), frozenset({"namespace"})),
    "env-var": (frozenset({"container", "workload"}), frozenset()),
    "service-port": (frozenset({"service"}), frozenset()),
}


#: The category of ITBench's waiters: steps around an injection, not faults.
WAITER = "Waiter"


class FaultError(RuntimeError):
    """A fault could not be injected (the target object is missing, the flag is unknown, ...)."""


class CatalogueError(ValueError):
    """A definition file itself is inconsistent (a developer error, reported with the fault and path)."""


@dataclass(frozen=True)
class FaultDefinition:
    id: str
    description: str
    category: str
    operation: str
    args_schema: Mapping[str, Any]
    creates: tuple[Mapping[str, Any], ...] = ()
    workarounds: tuple[Mapping[str, Any], ...] = ()
    #: What the fault changes that every episode on the cluster shares (None: only its namespaces).
    cluster_wide: str | None = None


@dataclass(frozen=True)
class ArgRef:
    """One argument value that names something in the app.

    ``path`` is the field path within the fault entry (``args.kubernetesObject``); ``params`` are the
    ``x-ref`` parameters with every argument path already resolved to its value (``None`` when the
    scenario leaves that argument out).
    """

    path: str
    type: str
    value: Any
    params: Mapping[str, Any]


@lru_cache(maxsize=1)
def catalogue() -> dict[str, FaultDefinition]:
    out: dict[str, FaultDefinition] = {}
    fragments = {file.name: yamltext.load(file.read_text()) for file in _DEFINITIONS.glob("_*.yaml")}
    for file in sorted(_DEFINITIONS.glob("[!_]*.yaml")):
        d = yamltext.load(file.read_text())
        args = _inline(d["args"], fragments, file.name)
        out[file.stem] = FaultDefinition(file.stem, d["description"], d["category"], d["operation"], args,
                                         tuple(d.get("creates") or ()), tuple(d.get("workarounds") or ()), d.get("cluster_wide"))
    for definition in out.values():
        check_declarations(definition)
    return out


def _inline(schema: Any, fragments: Mapping[str, Any], where: str) -> Any:
    """Replace every ``$ref: "_file.yaml#/name"`` by that shared fragment, keeping sibling keys."""
    if isinstance(schema, list):
        return [_inline(item, fragments, where) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        file, _, name = ref.partition("#/")
        fragment = (fragments.get(file) or {}).get(name)
        if fragment is None:
            raise CatalogueError(f"{_DEFINITIONS / where}: $ref {ref!r} points nowhere")
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        merged = {**fragment, **rest}
        if "properties" in fragment and "properties" in rest:
            merged["properties"] = {**fragment["properties"], **rest["properties"]}
        return _inline(merged, fragments, where)
    return {k: _inline(v, fragments, where) for k, v in schema.items()}


def validate_fault_args(fault_id: str, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """``None`` when valid, else (field path within the fault entry, message) of the most specific error."""
    problems = fault_args_problems(fault_id, args)
    return problems[0] if problems else None


def fault_args_problems(fault_id: str, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every schema violation of ``args`` as (field path within the fault entry, message); [] if valid."""
    known = catalogue()
    if fault_id not in known:
        import difflib

        close = difflib.get_close_matches(fault_id, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return [("id", f"unknown fault {fault_id!r}; {hint}the catalogue has: {', '.join(sorted(known))}")]
    validator = jsonschema.Draft202012Validator(known[fault_id].args_schema)
    errors = sorted(validator.iter_errors(args), key=lambda e: -len(e.absolute_path))
    out: list[tuple[str, str]] = []
    for err in errors:
        why = err.schema.get("x-not-modelled") if isinstance(err.schema, Mapping) else None
        message = err.message if not why else f"{err.message}: {why}" if err.validator == "enum" else why
        problem = (_path("args", err.absolute_path), message)
        if problem not in out:
            out.append(problem)
    return out


def argument_refs(definition: FaultDefinition, args: Mapping[str, Any]) -> list[ArgRef]:
    """The references among ``args`` (which must already satisfy the fault's schema), in document order."""
    root = definition.args_schema
    out: list[ArgRef] = []
    for path, parent, value, ref in _walk(root, root, args, (), None):
        params = {k: v for k, v in ref.items() if k != "type"}
        for key in ("config_map", "flag", "workload", "selector", "namespace", "spawns", "container", "service"):
            if isinstance(params.get(key), str):
                params[key] = _resolve(args, parent, params[key])
        out.append(ArgRef(_path("args", path), ref["type"], value, params))
    return out


@dataclass(frozen=True)
class CreatedObject:
    """An object a fault creates under a name of its own (``creates`` of its definition)."""

    kind: str
    name: str
    namespace: str | None
    spawns: str | None


def created_objects(definition: FaultDefinition, args: Mapping[str, Any]) -> list[CreatedObject]:
    """The ``creates`` entries with their names resolved from ``args`` (already schema-valid)."""

    def value(field: Any) -> str | None:
        if isinstance(field, Mapping):
            found = _resolve(args, None, str(field["arg"]))
            return None if found is None else str(found)
        return None if field is None else str(field)

    out = []
    for entry in definition.creates:
        name = value(entry["name"])
        if name is not None:
            out.append(CreatedObject(str(entry["kind"]), name, value(entry.get("namespace")), entry.get("spawns")))
    return out


@dataclass(frozen=True)
class Workaround:
    """A fix within the agent's grant (``workarounds`` of its definition), its command resolved from ``args``."""

    id: str
    description: str
    argv: tuple[str, ...]


def workarounds(definition: FaultDefinition, args: Mapping[str, Any]) -> list[Workaround]:
    """The ``workarounds`` entries with their command lines resolved from ``args`` (already schema-valid)."""
    out = []
    for entry in definition.workarounds:
        argv = [_resolve(args, None, str(item["arg"])) if isinstance(item, Mapping) else item for item in entry["argv"]]
        if all(isinstance(item, str) for item in argv):
            out.append(Workaround(str(entry["id"]), str(entry["description"]), tuple(argv)))
    return out


def _walk(
    schema: Any, root: Mapping[str, Any], value: Any, path: tuple[Any, ...], parent: Any
) -> Iterator[tuple[tuple[Any, ...], Any, Any, Mapping[str, Any]]]:
    """Schema and instance in step: (path, parent object, value, x-ref) for every annotated value."""
    if not isinstance(schema, Mapping):
        return
    if isinstance(schema.get("$ref"), str):
        yield from _walk(_local_ref(root, schema["$ref"]), root, value, path, parent)
    if isinstance(schema.get("x-ref"), Mapping):
        yield path, parent, value, schema["x-ref"]
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            yield from _walk(sub, root, value, path, parent)
    if isinstance(value, Mapping):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name in value:
                yield from _walk(sub, root, value[name], (*path, name), value)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in value:
                if name not in props:
                    yield from _walk(extra, root, value[name], (*path, name), value)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            yield from _walk(schema["items"], root, item, (*path, i), value)


def _local_ref(root: Mapping[str, Any], ref: str) -> Any:
    if not ref.startswith("#/"):
        raise CatalogueError(f"only local $ref ('#/...') is supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, Mapping) else None
    if node is None:
        raise CatalogueError(f"$ref {ref!r} points nowhere")
    return node


def _resolve(args: Mapping[str, Any], parent: Any, dotted: str) -> Any:
    """The value at ``dotted`` (from the args root, or ``@key`` from the annotated field's parent)."""
    node: Any = parent if dotted.startswith("@") else args
    for part in dotted.lstrip("@").split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def _path(root: str, parts: Any) -> str:
    return root + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def check_declarations(definition: FaultDefinition) -> None:
    """Every ``x-ref`` names a known type with its required parameters; every ``$ref`` resolves."""

    def visit(node: Any, where: str) -> None:
        if isinstance(node, Mapping):
            ref = node.get("x-ref")
            if ref is not None:
                kind = ref.get("type") if isinstance(ref, Mapping) else None
                if kind not in REF_TYPES:
                    raise CatalogueError(f"{_DEFINITIONS / definition.id}.yaml: faults.{definition.id}.{where}.x-ref: unknown type {kind!r}; "
                                         f"known: {', '.join(sorted(REF_TYPES))}")
                required, optional = REF_TYPES[kind]
                missing = required - set(ref)
                unknown = set(ref) - required - optional - {"type"}
                if missing or unknown:
                    raise CatalogueError(f"{_DEFINITIONS / definition.id}.yaml: faults.{definition.id}.{where}.x-ref: "
                                         f"missing {sorted(missing)}, unknown {sorted(unknown)}")
            if isinstance(node.get("$ref"), str):
                _local_ref(definition.args_schema, node["$ref"])
            for key, sub in node.items():
                if key != "x-ref":
                    visit(sub, f"{where}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                visit(sub, f"{where}[{i}]")

    visit(definition.args_schema, "args")
