"""Run `kyverno-test.yaml` suites (the Kyverno CLI test format) through this engine.

A suite names policy files, resource files, an optional values file (and user info) and expected results
per (policy, rule, resource). Skipped, with the reason: results of mutate/generate/verifyImages rules, CEL
policy kinds other than ValidatingPolicy, patched/generated-resource expectations, resources whose file is missing,
and results for rules that do not apply to the resource (`kyverno test` reports those as "excluded"
instead of comparing them). Unreadable suites, policies or resources become failures or error lines
naming the file, never exceptions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from itbench_gym.lang import yamltext

from ..conformance import CaseFailure, ConformanceResult, SkippedCase, SuiteOutcome
from .engine import Policy, PolicyError, RuleResult, evaluate_policy, load_policy
from .exceptions import apply_exceptions
from .match import Admission, is_cluster_scoped, resource_namespace
from .vpol import VALIDATING_POLICY_KINDS

SUITE_FILE = "kyverno-test.yaml"
# Kyverno's CEL-based policy types and Kubernetes admission policies, which `kyverno test` also accepts.
UNSUPPORTED_POLICY_KINDS = frozenset(
    {
        "ImageValidatingPolicy",
        "NamespacedImageValidatingPolicy",
        "MutatingPolicy",
        "NamespacedMutatingPolicy",
        "GeneratingPolicy",
        "NamespacedGeneratingPolicy",
        "DeletingPolicy",
        "NamespacedDeletingPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
_UNSUPPORTED_EXPECTATIONS = ("patchedResource", "patchedResources", "generatedResource", "cloneSourceResource")


@dataclass
class _Values:
    """A values file: global values, per-policy rule and resource values, namespace labels."""

    global_values: dict[str, Any] = field(default_factory=dict)
    rules: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    resources: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    foreach: dict[str, dict[str, dict[str, list[Any]]]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)
    namespace_objects: dict[str, dict[str, Any]] = field(default_factory=dict)


def find_suites(paths: Sequence[Path]) -> list[Path]:
    """Every kyverno-test.yaml at or under the given files and folders, sorted."""
    found: set[Path] = set()
    for path in paths:
        if path.is_file():
            found.add(path)
        elif path.is_dir():
            found.update(p for p in path.rglob(SUITE_FILE) if p.is_file())
    return sorted(found)


def run_kyverno_suites(paths: Sequence[Path]) -> ConformanceResult:
    """Run every suite found under `paths`."""
    return ConformanceResult([run_suite(p) for p in find_suites(paths)])


def load_yaml_docs(path: Path) -> list[Any]:
    """Every non-empty document of a YAML file (libyaml's loader when present: the corpus is large)."""
    return yamltext.load_all(path.read_text(encoding="utf-8"))


def resource_docs(docs: list[Any]) -> Iterator[dict[str, Any]]:
    """The Kubernetes objects among ``docs``, the items of ``*List`` documents included."""
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            yield from (i for i in doc["items"] if isinstance(i, dict))
        elif isinstance(doc, dict) and doc.get("kind"):
            yield doc


def with_default_namespace(resource: dict[str, Any]) -> dict[str, Any]:
    """The CLI puts namespaced resources that name no namespace into `default`."""
    meta = resource.get("metadata")
    if not isinstance(meta, dict) or meta.get("namespace") or is_cluster_scoped(resource):
        return resource
    return {**resource, "metadata": {**meta, "namespace": "default"}}


def _load_values(path: Path) -> _Values:
    return _parse_values(yamltext.load(path.read_text(encoding="utf-8")) or {})


def _parse_values(doc: Any) -> _Values:
    """A Values document (from the `variables` file or inline under `values`)."""
    if not isinstance(doc, dict):
        raise ValueError("values file is not a map")
    values = _Values(global_values=dict(doc.get("globalValues") or {}))
    for pol in doc.get("policies") or []:
        name = str(pol.get("name"))
        values.rules[name] = {str(r.get("name")): dict(r.get("values") or {}) for r in pol.get("rules") or []}
        values.foreach[name] = {str(r.get("name")): dict(r.get("foreachValues") or {}) for r in pol.get("rules") or []}
        values.resources[name] = {str(r.get("name")): dict(r.get("values") or {}) for r in pol.get("resources") or []}
    for ns in doc.get("namespaceSelector") or []:
        values.namespace_labels[str(ns.get("name"))] = {str(k): str(v) for k, v in (ns.get("labels") or {}).items()}
    for ns in doc.get("namespaces") or []:  # full Namespace objects take precedence over namespaceSelector entries
        meta = ns.get("metadata") or {}
        values.namespace_labels[str(meta.get("name"))] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        values.namespace_objects[str(meta.get("name"))] = dict(ns)
    return values


class _Suite:
    """One loaded suite: its policies, resources, values and a cache of evaluations."""

    def __init__(self, path: Path, outcome: SuiteOutcome) -> None:
        self.path = path
        self.outcome = outcome
        self.spec: dict[str, Any] = {}
        self.policies: dict[str, Policy] = {}
        self.broken_policies: dict[str, str] = {}
        self.unsupported_policies: dict[str, str] = {}
        self.resources: list[dict[str, Any]] = []
        self.missing_inputs: list[str] = []
        self.values = _Values()
        self.user = Admission()
        self.exceptions: list[dict[str, Any]] = []
        self.api_responses: dict[tuple[str, str], dict[str, Any]] = {}
        self.cel_libraries: dict[str, Any] = {}
        self._cache: dict[tuple[str, int, str], dict[str, RuleResult]] = {}

    def load(self) -> bool:
        try:
            spec = yamltext.load(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self._fail_suite(f"cannot read suite: {exc}")
            return False
        if not isinstance(spec, dict) or not isinstance(spec.get("results", []), list):
            self._fail_suite("suite is not a kyverno-test document (results must be a list)")
            return False
        self.spec = spec
        base = self.path.parent
        for rel in spec.get("policies") or []:
            self._load_policy_file(base / str(rel))
        for rel in spec.get("resources") or []:
            self._load_resource_file(base / str(rel))
        if spec.get("userinfo"):
            self._load_user(base / str(spec["userinfo"]))
        values_rel = spec.get("variables")
        try:
            if values_rel:
                self.values = _load_values(base / str(values_rel))
            elif isinstance(spec.get("values"), dict):
                self.values = _parse_values(spec["values"])
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, AttributeError) as exc:
            self.outcome.errors.append(f"{base / str(values_rel or 'inline values')}: cannot read values: {exc}")
        for rel in spec.get("exceptions") or []:
            self._load_exceptions(base / str(rel))
        if spec.get("context"):
            self._load_context(base / str(spec["context"]))
        self.api_responses = {
            (str(e.get("method") or "GET"), str(e.get("urlPath") or e.get("url") or "")): (e.get("response") or {})
            for e in spec.get("apiCallResponses") or []
            if isinstance(e, dict)
        }
        for res in self.resources:
            if res.get("kind") == "Namespace":
                name = str((res.get("metadata") or {}).get("name", ""))
                self.values.namespace_labels.setdefault(name, dict((res.get("metadata") or {}).get("labels") or {}))
                self.values.namespace_objects.setdefault(name, res)
        return True

    def _load_user(self, path: Path) -> None:
        """A RequestInfo file: the user, groups, roles and cluster roles the requests come from."""
        try:
            doc = yamltext.load(path.read_text(encoding="utf-8")) or {}
            user = doc.get("userInfo") or {}
            self.user = Admission(
                username=str(user.get("username", "")),
                groups=tuple(map(str, user.get("groups") or [])),
                roles=tuple(map(str, doc.get("roles") or [])),
                cluster_roles=tuple(map(str, doc.get("clusterRoles") or [])),
            )
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, TypeError) as exc:
            self.outcome.errors.append(f"{path}: cannot read user info: {exc}")

    def _load_context(self, path: Path) -> None:
        """A Context file: the cluster objects and image metadata Kyverno's CEL libraries answer from."""
        from .cel_libraries import Images, Resources

        try:
            doc = yamltext.load(path.read_text(encoding="utf-8")) or {}
            spec = doc.get("spec") or {}
            self.cel_libraries = {"resource": Resources(spec.get("resources") or []), "image": Images(spec.get("images") or [])}
        except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError) as exc:
            self.outcome.errors.append(f"{path}: cannot read context: {exc}")

    def _load_exceptions(self, path: Path) -> None:
        try:
            docs = load_yaml_docs(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self.outcome.errors.append(f"{path}: cannot read policy exceptions: {exc}")
            return
        self.exceptions.extend(d for d in docs if isinstance(d, dict) and d.get("kind") == "PolicyException")

    def _fail_suite(self, message: str) -> None:
        self.outcome.errors.append(message)
        self.outcome.failures.append(CaseFailure(str(self.path), "-", "-", "-", "suite runs", "error", message))

    def _load_policy_file(self, path: Path) -> None:
        try:
            docs = load_yaml_docs(path)
        except FileNotFoundError:
            self.outcome.errors.append(f"{path}: policy file not found")
            return
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self.outcome.errors.append(f"{path}: cannot read policy: {exc}")
            return
        for doc in docs:
            name = str(((doc.get("metadata") or {}) if isinstance(doc, dict) else {}).get("name", path.name))
            if isinstance(doc, dict) and doc.get("kind") in UNSUPPORTED_POLICY_KINDS:
                self.unsupported_policies[name] = f"policy kind {doc['kind']} is not supported (ClusterPolicy/Policy/ValidatingPolicy only)"
                continue
            try:
                if not isinstance(doc, dict):
                    raise PolicyError("policy document is not a map")
                policy = load_policy(doc)
            except PolicyError as exc:
                self.broken_policies[name] = f"{path}: {exc}"
                self.outcome.errors.append(f"{path}: {exc}")
                continue
            self.policies[policy.name] = policy

    def _load_resource_file(self, path: Path) -> None:
        try:
            self.resources.extend(with_default_namespace(r) for r in resource_docs(load_yaml_docs(path)))
        except FileNotFoundError:
            self.missing_inputs.append(str(path))
            self.outcome.errors.append(f"{path}: resource file not found")
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            self.outcome.errors.append(f"{path}: cannot read resources: {exc}")

    def find_resources(self, spec: str, kind: str) -> list[int]:
        """Indexes of resources named `name`, `namespace/name` or `kind/namespace/name` (of `kind` when any is)."""
        parts = spec.split("/")
        name, namespace = parts[-1], parts[-2] if len(parts) >= 2 else None
        want_kind = parts[-3] if len(parts) >= 3 else kind
        found = [
            i
            for i, res in enumerate(self.resources)
            if str((res.get("metadata") or {}).get("name")) == name
            and (namespace is None or (resource_namespace(res) or "default") == namespace)
        ]
        of_kind = [i for i in found if self.resources[i].get("kind") == want_kind]
        return of_kind or found

    def results_for(self, policy: Policy, index: int, operation: str = "") -> dict[str, RuleResult]:
        """Rule results for one resource; `operation` (from the result entry) overrides the values file."""
        key = (policy.name, index, operation)
        if key not in self._cache:
            resource = self.resources[index]
            res_name = str((resource.get("metadata") or {}).get("name", ""))
            res_values = self.values.resources.get(policy.name, {}).get(res_name, {})
            merged = {**self.values.global_values, **res_values}
            if operation:
                merged["request.operation"] = operation
            admission = dataclasses.replace(
                self.user, operation=str(merged.get("request.operation", "CREATE")), namespace_labels=self.values.namespace_labels,
                namespace_objects=self.values.namespace_objects,
            )
            rule_values = self.values.rules.get(policy.name, {})
            try:
                results = evaluate_policy(
                    policy, resource, admission, merged, rule_values, self.values.foreach.get(policy.name), self.api_responses,
                    self.cel_libraries,
                )
            except (TypeError, AttributeError, KeyError, ValueError, IndexError) as exc:  # malformed policy or resource
                results = [RuleResult(str(r["name"]), "error", f"cannot evaluate: {exc!r}") for r in policy.rules]
            self._cache[key] = {r.rule: self._apply_exceptions(policy, r, resource, admission) for r in results}
        return self._cache[key]

    def _apply_exceptions(self, policy: Policy, result: RuleResult, resource: dict[str, Any], admission: Admission) -> RuleResult:
        """A PolicyException naming this policy and rule, and matching the resource, turns the result into a skip."""
        return apply_exceptions(self.exceptions, policy, result, resource, admission)


def run_suite(path: Path) -> SuiteOutcome:
    """Run one kyverno-test.yaml and compare every expected result."""
    outcome = SuiteOutcome(str(path))
    suite = _Suite(path, outcome)
    if not suite.load():
        return outcome
    for expected in suite.spec.get("results") or []:
        if isinstance(expected, dict):
            _check_expected(suite, expected)
        else:
            outcome.failures.append(CaseFailure(str(path), "-", "-", "-", "a result map", "error", f"bad result entry {expected!r}"))
    return outcome


def _check_expected(suite: _Suite, expected: dict[str, Any]) -> None:
    suite_name = str(suite.path)
    policy_name = str(expected.get("policy", "")).split("/")[-1]
    rule = str(expected.get("rule", ""))
    kind = str(expected.get("kind", ""))
    want = str(expected.get("result", expected.get("status", "")))
    listed = expected.get("resources") or []
    names = [str(r) for r in (listed if isinstance(listed, list) else [listed])]
    names += [str(expected["resource"])] if expected.get("resource") else []
    for spec in expected.get("resourceSpecs") or []:
        if isinstance(spec, dict) and spec.get("name"):
            names.append("/".join(p for p in (str(spec.get("kind") or kind), str(spec.get("namespace") or "default"), str(spec["name"]))))
    operation = str(expected.get("operation") or "")
    outcome = suite.outcome

    def skip(resource: str, reason: str) -> None:
        outcome.skipped.append(SkippedCase(suite_name, policy_name, rule, resource, reason))

    def fail(resource: str, got: str, detail: str = "") -> None:
        outcome.failures.append(CaseFailure(suite_name, policy_name, rule, resource, want, got, detail))

    policy = suite.policies.get(policy_name)
    for name in names:
        if policy is None and policy_name in suite.unsupported_policies:
            skip(name, suite.unsupported_policies[policy_name])
            continue
        if policy is None:
            broken = suite.broken_policies.get(policy_name) or "; ".join(suite.broken_policies.values())
            fail(name, "error", broken or "policy not found in the suite's policy files")
            continue
        if rule in policy.unsupported:
            skip(name, policy.unsupported[rule])
            continue
        if any(k in expected for k in _UNSUPPORTED_EXPECTATIONS):
            skip(name, "expectations on patched or generated resources are not supported")
            continue
        indexes = suite.find_resources(name, kind)
        if not indexes:
            if suite.missing_inputs:
                skip(name, "input file not found (resource unavailable)")
            else:
                fail(name, "not found", "no such resource in the suite's resource files")
            continue
        results = suite.results_for(policy, indexes[0], operation)
        if policy.raw.get("kind") in VALIDATING_POLICY_KINDS:  # one result per policy: a rule named in the suite is moot
            rule = ""
        candidates = [results[n] for n in (rule, f"autogen-{rule}", f"autogen-cronjob-{rule}") if n in results]
        got_result = next((r for r in candidates if r.matched), candidates[0] if candidates else None)
        got = got_result.status if got_result else "not found"
        if got == want:
            outcome.passed += 1
        elif got_result is not None and not got_result.matched:
            skip(name, "rule does not apply to the resource (kyverno test reports it as excluded, not as a failure)")
        else:
            fail(name, got, got_result.message if got_result else "the policy has no such validate rule")
