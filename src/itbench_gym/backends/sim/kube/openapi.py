"""OpenAPI v3 documents for ``kubectl explain`` and ``kubectl apply`` (field validation).

Schemas are generated at run time from the model classes of the official ``kubernetes`` PyPI
client (field names, types, descriptions and required fields come from the real OpenAPI spec it
was generated from); custom resources use their CRD's ``openAPIV3Schema``. Each group-version
document lists the PATCH operations with the ``fieldValidation`` parameter, which tells kubectl to
let the server validate (``?fieldValidation=Strict``); ``unknown_fields`` implements that check.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client import models as k8s_models

from itbench_gym.lang.gojson import base64_error

from . import errors
from .auth import Visibility
from .resources import ResourceRegistry, ResourceType

Obj = dict[str, Any]

_META_TYPES = {"ObjectMeta", "ListMeta", "LabelSelector", "LabelSelectorRequirement", "OwnerReference",
               "ManagedFieldsEntry", "Condition", "Status", "StatusDetails", "StatusCause", "DeleteOptions",
               "Preconditions"}
_PREFIX = re.compile(r"^(?:[A-Z][a-z]+)?V\d+(?:(?:alpha|beta)\d+)?(?=[A-Z])")
_PRIMITIVES: dict[str, Obj] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "bytearray": {"type": "string", "format": "byte"},
    "object": {},
}
#: Fields upstream types ``[]byte`` (``format: byte``: standard base64 in JSON) that the client models
#: type ``str``: (schema, property, whether it is a map of them).
_BYTE_FIELDS = (("io.k8s.api.core.v1.Secret", "data", True), ("io.k8s.api.core.v1.ConfigMap", "binaryData", True),
                ("io.k8s.api.certificates.v1.CertificateSigningRequestSpec", "request", False),
                ("io.k8s.api.certificates.v1.CertificateSigningRequestStatus", "certificate", False))
_KIND_MODEL_OVERRIDES = {("", "Event"): "CoreV1Event", ("events.k8s.io", "Event"): "EventsV1Event"}


def _model_class(rt: ResourceType) -> Any | None:
    name = _KIND_MODEL_OVERRIDES.get((rt.group, rt.kind)) or rt.version[0].upper() + rt.version[1:] + rt.kind
    return getattr(k8s_models, name, None)


def _package(rt: ResourceType) -> str:
    group = rt.group.split(".")[0] if rt.group.endswith(".k8s.io") else rt.group
    return f"io.k8s.api.{group or 'core'}.{rt.version}"


class _SchemaGen:
    """Turns client model classes into OpenAPI component schemas named like upstream's."""

    def __init__(self) -> None:
        self.schemas: dict[str, Obj] = {}
        self.names: dict[str, str] = {}  # model class name -> schema name

    def name_for(self, cls_name: str, package: str) -> str:
        if cls_name not in self.names:
            short = _PREFIX.sub("", cls_name)
            pkg = "io.k8s.apimachinery.pkg.apis.meta.v1" if short in _META_TYPES else package
            self.names[cls_name] = f"{pkg}.{short}"
        return self.names[cls_name]

    def model(self, cls_name: str, package: str) -> str:
        name = self.name_for(cls_name, package)
        if name in self.schemas:
            return name
        cls = getattr(k8s_models, cls_name)
        self.schemas[name] = {}  # recursion guard
        doc = (cls.__doc__ or "").split("\n\n    Attributes:")[0].split("Attributes:")[0].strip()
        props: Obj = {}
        required: list[str] = []
        for attr, type_str in cls.openapi_types.items():
            json_name = cls.attribute_map[attr]
            info = cls.model_fields.get(attr)
            prop = self.type_schema(type_str, package)
            if "$ref" in prop:
                prop = {"allOf": [prop]}
            if info is not None and info.description:
                prop["description"] = info.description
            props[json_name] = prop
            if info is not None and info.is_required():
                required.append(json_name)
        schema: Obj = {"description": " ".join(doc.split()), "type": "object", "properties": props}
        if required:
            schema["required"] = required
        self.schemas[name] = schema
        return name

    def type_schema(self, t: str, package: str) -> Obj:
        t = t.strip()
        if t in _PRIMITIVES:
            return dict(_PRIMITIVES[t])
        m = re.match(r"^List\[(.*)\]$", t)
        if m:
            return {"type": "array", "items": self.type_schema(m.group(1), package)}
        m = re.match(r"^Dict\[str,\s*(.*)\]$", t)
        if m:
            return {"type": "object", "additionalProperties": self.type_schema(m.group(1), package)}
        if hasattr(k8s_models, t):
            return {"$ref": f"#/components/schemas/{self.model(t, package)}"}
        return {}


@functools.cache
def _builtin_schemas(registry_types: tuple[ResourceType, ...]) -> tuple[dict[str, Obj], dict[tuple[str, str, str], str]]:
    """Component schemas for all built-in kinds, and (group, version, kind) -> schema name."""
    gen = _SchemaGen()
    roots: dict[tuple[str, str, str], str] = {}
    # Core first, so shared types (PodSpec, Container, ...) get the core package name like upstream.
    for rt in sorted(registry_types, key=lambda t: t.group != ""):
        cls = _model_class(rt)
        if cls is None:
            continue
        name = gen.model(cls.__name__, _package(rt))
        schema = gen.schemas[name]
        schema["x-kubernetes-group-version-kind"] = [{"group": rt.group, "version": rt.version, "kind": rt.kind}]
        roots[(rt.group, rt.version, rt.kind)] = name
    for schema_name, prop, is_map in _BYTE_FIELDS:
        field = gen.schemas.get(schema_name, {}).get("properties", {}).get(prop)
        if field is not None:
            (field["additionalProperties"] if is_map else field)["format"] = "byte"
    return gen.schemas, roots


def _refs(schema: Any, out: set[str]) -> None:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            out.add(ref.rsplit("/", 1)[-1])
        for v in schema.values():
            _refs(v, out)
    elif isinstance(schema, list):
        for v in schema:
            _refs(v, out)


def _closure(schemas: dict[str, Obj], roots: list[str]) -> dict[str, Obj]:
    todo, seen = list(roots), set()
    while todo:
        n = todo.pop()
        if n in seen or n not in schemas:
            continue
        seen.add(n)
        refs: set[str] = set()
        _refs(schemas[n], refs)
        todo.extend(refs - seen)
    return {n: schemas[n] for n in sorted(seen)}


class OpenAPIBuilder:
    """Serves ``/openapi/v3`` (index) and ``/openapi/v3/<api|apis/g>/<v>`` documents."""

    def __init__(self, registry: ResourceRegistry, crd_lookup: Callable[[str], Obj | None]) -> None:
        self.registry = registry
        self.crd_lookup = crd_lookup

    def _builtin(self) -> tuple[dict[str, Obj], dict[tuple[str, str, str], str]]:
        return _builtin_schemas(tuple(t for t in self.registry.all() if not t.custom))

    def document(self, path: str, visibility: Visibility) -> Obj:
        if path == "/openapi/v3":
            return self.index(visibility)
        m = re.match(r"^/openapi/v3/(api/(?P<cv>[^/]+)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))$", path)
        if m is None:
            raise errors.not_found_path()
        group, version = (m.group("g") or ""), (m.group("v") or m.group("cv"))
        if not visibility.group_visible(group):
            raise errors.not_found_path()
        return self.group_version(group, version)

    def index(self, visibility: Visibility) -> Obj:
        paths: Obj = {}
        for group, versions in self.registry.groups():
            if not visibility.group_visible(group):
                continue
            for v in versions:
                key = f"apis/{group}/{v}" if group else f"api/{v}"
                digest = hashlib.sha256(json.dumps(self.group_version(group, v), sort_keys=True).encode()).hexdigest()
                paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest[:64].upper()}"}
        return {"paths": paths}

    def group_version(self, group: str, version: str) -> Obj:
        types = self.registry.resources_in(group, version)
        if not types:
            raise errors.not_found_path()
        builtin, roots = self._builtin()
        schemas: dict[str, Obj] = {}
        root_names: list[str] = []
        for t in types:
            if t.custom:
                name, schema = self._crd_schema(t)
                if schema is not None:
                    schemas[name] = schema
                    root_names.append(name)
            elif (t.group, t.version, t.kind) in roots:
                root_names.append(roots[(t.group, t.version, t.kind)])
        components = _closure({**builtin, **schemas}, root_names)
        paths: Obj = {}
        for t in types:
            gvk = {"group": t.group, "version": t.version, "kind": t.kind}
            prefix = f"/apis/{t.group}/{t.version}" if t.group else f"/api/{t.version}"
            scope = f"{prefix}/namespaces/{{namespace}}/{t.plural}" if t.namespaced else f"{prefix}/{t.plural}"
            def op(action: str, verb: str, kind: str = t.kind, gvk: Obj = gvk) -> Obj:
                return {
                    "operationId": f"{verb}{kind}", "x-kubernetes-action": action,
                    "x-kubernetes-group-version-kind": gvk,
                    "parameters": [{"name": "fieldValidation", "in": "query",
                                    "schema": {"type": "string", "uniqueItems": True},
                                    "description": "fieldValidation instructs the server on how to handle objects in "
                                                   "the request containing unknown or duplicate fields."},
                                   {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                                   {"name": "fieldManager", "in": "query",
                                    "schema": {"type": "string", "uniqueItems": True}}],
                    "responses": {"200": {"description": "OK"}},
                }

            if not t.stored:  # a review: created and answered, never stored
                paths[scope] = {"post": op("post", "create")}
                continue
            paths[scope] = {"get": op("list", "list"), "post": op("post", "create")}
            paths[f"{scope}/{{name}}"] = {"get": op("get", "read"), "put": op("put", "replace"),
                                         "patch": op("patch", "patch"), "delete": op("delete", "delete")}
        return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.34.1"}, "paths": paths,
                "components": {"schemas": components}}

    def _crd_schema(self, rt: ResourceType) -> tuple[str, Obj | None]:
        name = f"{'.'.join(reversed(rt.group.split('.')))}.{rt.version}.{rt.kind}"
        crd = self._crd_version(rt)
        if crd is None:
            return name, None
        schema = json.loads(json.dumps(((crd.get("schema") or {}).get("openAPIV3Schema")) or {"type": "object"}))
        schema.setdefault("type", "object")
        props = schema.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."})
        props.setdefault("kind", {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."})
        props["metadata"] = {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
                             "description": "Standard object's metadata."}
        schema["x-kubernetes-group-version-kind"] = [{"group": rt.group, "version": rt.version, "kind": rt.kind}]
        return name, schema

    def _crd_version(self, rt: ResourceType) -> Obj | None:
        crd = self.crd_lookup(f"{rt.plural}.{rt.group}")
        versions: list[Obj] = ((crd or {}).get("spec") or {}).get("versions") or []
        for v in versions:
            if v.get("name") == rt.version:
                return v
        return None

    def unknown_fields(self, rt: ResourceType, obj: Obj) -> list[str]:
        """Paths of fields the schema does not declare (for ``fieldValidation=Strict|Warn``)."""
        return [path for _, _, path in self._unknown(rt, obj)]

    def prune(self, rt: ResourceType, obj: Obj) -> None:
        """Drop the fields the schema does not declare, as the API server does with every object it
        stores: decoding into a built-in kind's Go struct loses them, and a custom resource is pruned
        to its CRD's structural schema (but where it preserves unknown fields)."""
        for holder, key, _ in list(self._unknown(rt, obj)):
            del holder[key]

    def _unknown(self, rt: ResourceType, obj: Obj) -> Iterator[tuple[dict[str, Any], str, str]]:
        if rt.custom:
            name, schema = self._crd_schema(rt)
            schemas = {**self._builtin()[0], name: schema} if schema else {}
        else:
            schemas, roots = self._builtin()
            name = roots.get((rt.group, rt.version, rt.kind), "")
        if name in schemas and schemas[name] is not None:
            yield from _unknown(obj, schemas[name], schemas, "")


    def type_error(self, rt: ResourceType, obj: Obj) -> str | None:
        """Why ``obj`` could not be decoded into the kind's Go type (a value of the wrong JSON type), or None.

        kube-apiserver decodes bodies into typed structs, so ``"spec": "x"`` or ``"replicas": "two"``
        fail at decode time with a 400; the twin's defaulting and controllers rely on the same.
        Custom resources only have their ``metadata`` checked (their schemas are the CRD's business).
        """
        schemas, roots = self._builtin()
        if rt.custom:
            schema: Obj = {"type": "object", "properties": {"metadata": {
                "$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}}}
        else:
            name = roots.get((rt.group, rt.version, rt.kind), "")
            if name not in schemas:
                return None
            schema = schemas[name]
        found = _first_type_error(obj, schema, schemas, rt.kind)
        return f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {found}' if found is not None else None


#: Fields of type ``resource.Quantity``, which decodes from a JSON number as well as a string (the
#: client models type them ``str``): resource maps and the HPA metric values.
_QUANTITY_MAPS = {"limits", "requests", "capacity", "allocatable", "hard", "used", "overhead", "default",
                  "defaultRequest", "max", "min", "maxLimitRequestRatio"}
_QUANTITY_FIELDS = {"sizeLimit", "averageValue", "storage"}
_GO_TYPES = {"string": "string", "integer": "int64", "number": "float64", "boolean": "bool",
             "array": "[]interface {}", "object": "map[string]interface {}"}


def _go_type(schema: Obj, schemas: dict[str, Obj], depth: int = 0) -> str:
    """How Go would name the field's type: ``v1.DeploymentSpec``, ``[]v1.Container``, ``map[string]string``."""
    for _ in range(4):
        if "$ref" in schema:
            return ".".join(str(schema["$ref"]).rsplit("/", 1)[-1].split(".")[-2:])
        if "allOf" in schema and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        else:
            break
    want = schema.get("type")
    if depth < 4 and want == "array" and isinstance(schema.get("items"), dict):
        return "[]" + _go_type(schema["items"], schemas, depth + 1)
    if depth < 4 and want == "object" and isinstance(schema.get("additionalProperties"), dict):
        return "map[string]" + _go_type(schema["additionalProperties"], schemas, depth + 1)
    return _GO_TYPES.get(str(want), "interface {}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_ok(value: Any, want: str, quantity: bool) -> bool:
    if want == "string":
        return isinstance(value, str) or (quantity and isinstance(value, (int, float)) and not isinstance(value, bool))
    if want == "integer":
        return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    if want == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want == "boolean":
        return isinstance(value, bool)
    if want == "array":
        return isinstance(value, list)
    if want == "object":
        return isinstance(value, dict)
    return True


def _first_type_error(obj: Any, schema: Obj, schemas: dict[str, Obj], kind: str) -> str | None:
    """Why Go's decoder stops at the first mistyped value (iterative walk): a JSON type the Go type
    cannot take, or a ``[]byte`` (``format: byte``) that is not standard base64."""
    stack: list[tuple[Any, Obj, str, bool]] = [(obj, schema, "", False)]
    while stack:
        value, sch, path, quantity = stack.pop()
        if value is None:
            continue  # null decodes into any field as its zero value
        declared, sch = sch, _resolve(sch, schemas)
        want = sch.get("type")
        if isinstance(want, str) and not _type_ok(value, want, quantity):
            return f"json: cannot unmarshal {_json_type(value)} into Go struct field {kind}.{path or '(root)'} of type {_go_type(declared, schemas)}"
        if isinstance(value, str) and sch.get("format") == "byte" and (at := base64_error(value)) is not None:
            return f"illegal base64 data at input byte {at}"
        if isinstance(value, dict):
            props, extra = sch.get("properties"), sch.get("additionalProperties")
            for k, v in value.items():
                sub = f"{path}.{k}" if path else str(k)
                if isinstance(props, dict) and k in props:
                    stack.append((v, props[k], sub, k in _QUANTITY_FIELDS))
                elif isinstance(extra, dict):
                    stack.append((v, extra, sub, path.rpartition(".")[2] in _QUANTITY_MAPS))
        elif isinstance(value, list) and isinstance(sch.get("items"), dict):
            stack.extend((v, sch["items"], f"{path}[{i}]", quantity) for i, v in enumerate(value))
    return None


def _resolve(schema: Obj, schemas: dict[str, Obj]) -> Obj:
    for _ in range(8):
        if "$ref" in schema:
            schema = schemas.get(schema["$ref"].rsplit("/", 1)[-1], {})
        elif "allOf" in schema and len(schema["allOf"]) == 1:
            schema = schema["allOf"][0]
        else:
            break
    return schema


def _unknown(value: Any, schema: Obj, schemas: dict[str, Obj], path: str) -> Iterator[tuple[dict[str, Any], str, str]]:
    """Each field of ``value`` that ``schema`` does not declare: (the object holding it, its key, its path)."""
    schema = _resolve(schema, schemas)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for k, v in value.items():
            sub = f"{path}.{k}" if path else k
            if props is not None and k in props:
                yield from _unknown(v, props[k], schemas, sub)
            elif isinstance(extra, dict):
                yield from _unknown(v, extra, schemas, sub)
            elif props is not None and not k.startswith("$"):
                yield value, k, sub
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            yield from _unknown(v, schema["items"], schemas, f"{path}[{i}]")
