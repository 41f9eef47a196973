"""ConstraintTemplates and constraints as Gatekeeper reads them, and one constraint's evaluation.

A template defines a constraint kind (``spec.crd.spec.names.kind``, whose lower case must be the
template's name) and, for the ``admission.k8s.gatekeeper.sh`` target, Rego with optional libraries,
either in ``rego``/``libs`` (Rego v0) or as a ``code`` entry of engine ``Rego`` (``source.version: v1``
selects v1), and/or CEL as a ``code`` entry of engine ``K8sNativeValidation``, which Gatekeeper prefers
(``cel.py``). Rego's violations are the set ``data.<package>.violation`` of ``{"msg": ..., "details": ...}``
evaluated with ``input = {"review": ..., "parameters": spec.parameters}`` and ``data.inventory``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from itbench_gym.policy.gatekeeper.cel import check_source
from itbench_gym.policy.gatekeeper.cel import violations as cel_violations
from itbench_gym.policy.gatekeeper.errors import GatekeeperError, Unsupported
from itbench_gym.policy.gatekeeper.match import SCOPES, review_matches
from itbench_gym.policy.gatekeeper.review import inventory_document
from itbench_gym.policy.rego import RegoBackend, RegoEngine, RegoError, RegoVersion

TARGET = "admission.k8s.gatekeeper.sh"
CEL_ENGINE = "K8sNativeValidation"
_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][\w.]*)", re.MULTILINE)
_EXTERNAL_DATA = re.compile(r"\bexternal_data\s*\(")
_VIOLATION_RULE = re.compile(r"^\s*violation\b", re.MULTILINE)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


@dataclass(frozen=True)
class Violation:
    msg: str
    details: Any = None


@dataclass(frozen=True)
class ConstraintTemplate:
    """The parts of a template that evaluation needs; ``from_object`` checks what Gatekeeper checks."""

    name: str
    kind: str
    rego: str
    libs: tuple[str, ...] = ()
    version: RegoVersion = "v0"
    parameters_schema: Mapping[str, Any] | None = None
    #: The K8sNativeValidation source: when a template has one, Gatekeeper evaluates it (``cel.py``).
    cel: Mapping[str, Any] | None = None
    package: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.rego and self.cel is not None:
            object.__setattr__(self, "package", "")
            return
        found = _PACKAGE.search(self.rego)
        if not found:
            raise GatekeeperError(f"template {self.name}: Rego has no package declaration")
        if not _VIOLATION_RULE.search(self.rego):
            raise GatekeeperError(f"template {self.name}: Rego misses the required rule violation")
        for lib in self.libs:
            lib_package = _PACKAGE.search(lib)
            if not lib_package or not (lib_package[1] == "lib" or lib_package[1].startswith("lib.")):
                raise GatekeeperError(f"template {self.name}: a library's package must be lib or under lib.")
        object.__setattr__(self, "package", found[1])

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ConstraintTemplate:
        """Read a template as Gatekeeper would admit it; CEL-only or external-data templates are Unsupported."""
        if obj.get("kind") != "ConstraintTemplate":
            raise GatekeeperError(f"expected a ConstraintTemplate, got kind {obj.get('kind')!r}")
        name, kind = _get(obj, "metadata", "name"), _get(obj, "spec", "crd", "spec", "names", "kind")
        if not isinstance(name, str) or not isinstance(kind, str) or not kind:
            raise GatekeeperError("ConstraintTemplate needs metadata.name and spec.crd.spec.names.kind")
        if kind.lower() != name:
            raise GatekeeperError(f"template name {name!r} must be the lower case of its kind {kind!r}")
        targets = _get(obj, "spec", "targets") or []
        if len(targets) != 1 or _get(targets[0], "target") != TARGET:
            raise GatekeeperError(f"template {name}: needs exactly one target, {TARGET}")
        target = targets[0]
        rego, libs = target.get("rego"), target.get("libs") or []
        version: RegoVersion = "v0"
        cel: dict[str, Any] | None = None
        for code in target.get("code") or []:
            if _get(code, "engine") == "Rego":
                rego, libs = _get(code, "source", "rego"), _get(code, "source", "libs") or []
                version = "v1" if _get(code, "source", "version") == "v1" else "v0"
            elif _get(code, "engine") == CEL_ENGINE:
                cel = check_source(_get(code, "source"), name)
        if not rego and cel is None:
            raise GatekeeperError(f"template {name}: no Rego or {CEL_ENGINE} code for target {TARGET}")
        if cel is None and any(_EXTERNAL_DATA.search(src) for src in (rego, *libs)):
            raise Unsupported(f"template {name}: uses Gatekeeper's external_data (external data providers)")
        schema = _get(obj, "spec", "crd", "spec", "validation", "openAPIV3Schema")
        return cls(name=name, kind=kind, rego=str(rego or ""), libs=tuple(str(lib) for lib in libs), version=version,
                   parameters_schema=schema if isinstance(schema, Mapping) else None, cel=cel)


@dataclass(frozen=True)
class Constraint:
    kind: str
    name: str
    match: Mapping[str, Any] = field(default_factory=dict)
    parameters: Any = None

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], template: ConstraintTemplate) -> Constraint:
        """Check the constraint against its template: same kind, a valid match, parameters that fit the schema."""
        kind, name = obj.get("kind"), _get(obj, "metadata", "name")
        if kind != template.kind:
            raise GatekeeperError(f"constraint kind {kind!r} is not the template's kind {template.kind!r}")
        if not isinstance(name, str) or not name:
            raise GatekeeperError(f"{kind} constraint needs metadata.name")
        match = _get(obj, "spec", "match") or {}
        if not isinstance(match, Mapping):
            raise GatekeeperError(f"{kind}/{name}: spec.match is not an object")
        if (scope := match.get("scope")) is not None and scope not in SCOPES:
            raise GatekeeperError(f"{kind}/{name}: spec.match.scope {scope!r} is not one of {', '.join(SCOPES)}")
        parameters = _get(obj, "spec", "parameters")
        if template.parameters_schema is not None and parameters is not None:
            try:
                jsonschema.Draft7Validator(dict(template.parameters_schema)).validate(parameters)
            except jsonschema.ValidationError as exc:
                where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
                raise GatekeeperError(f"{kind}/{name}: spec.parameters{where}: {exc.message}") from None
            except jsonschema.SchemaError as exc:
                raise GatekeeperError(f"template {template.name}: openAPIV3Schema: {exc.message}") from None
        return cls(kind=str(kind), name=name, match=match, parameters=parameters)


class ConstraintEvaluator:
    """One template compiled once; then any number of reviews against one of its constraints."""

    def __init__(self, template: ConstraintTemplate, constraint: Constraint, engine_factory: Callable[[], RegoBackend] = RegoEngine) -> None:
        self.template, self.constraint = template, constraint
        self.engine: RegoBackend | None = None
        if template.cel is not None:  # Gatekeeper's CEL driver comes first when a template has both
            return
        self.engine = engine_factory()
        self.engine.add_module(f"{template.name}.rego", template.rego, template.version)
        for i, lib in enumerate(template.libs):
            self.engine.add_module(f"{template.name}.lib{i}.rego", lib, template.version)

    def _constraint_object(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"match": dict(self.constraint.match)}
        if self.constraint.parameters is not None:
            spec["parameters"] = self.constraint.parameters
        return {"apiVersion": "constraints.gatekeeper.sh/v1beta1", "kind": self.constraint.kind,
                "metadata": {"name": self.constraint.name}, "spec": spec}

    def review(self, review: Mapping[str, Any], inventory: Sequence[Mapping[str, Any]] = ()) -> list[Violation]:
        """The constraint's violations for one review (none when its match excludes the object).

        As in Gatekeeper, a query that fails is one violation whose message is the error (fail closed).
        """
        namespaces = {str(_get(o, "metadata", "name")): o for o in inventory if o.get("kind") == "Namespace" and o.get("apiVersion") == "v1"}
        if not review_matches(self.constraint.match, review, namespaces):
            return []
        if self.template.cel is not None or self.engine is None:
            assert self.template.cel is not None
            namespace = namespaces.get(str(review.get("namespace") or ""))
            return [Violation(m) for m in cel_violations(self.template.cel, review, self._constraint_object(), namespace)]
        self.engine.set_data({"inventory": inventory_document(inventory)})
        self.engine.set_input({"review": review, "parameters": self.constraint.parameters if self.constraint.parameters is not None else {}})
        try:
            results = self.engine.evaluate(f"data.{self.template.package}.violation")
        except RegoError as exc:
            return [Violation(str(exc))]
        if not results:
            return []
        found = results[0]
        if not isinstance(found, list):
            raise GatekeeperError(f"template {self.template.name}: violation is not a set but {type(found).__name__}")
        violations = []
        for item in found:
            if not isinstance(item, Mapping) or not isinstance(item.get("msg"), str):
                raise GatekeeperError(f"template {self.template.name}: violation {item!r} has no string msg")
            violations.append(Violation(item["msg"], item.get("details")))
        return violations

