"""Run gator-style ``suite.yaml`` files (as in the Gatekeeper library) and check every case's assertions.

A suite lists tests (a template, a constraint, cases); a case reviews one object, optionally with
inventory objects synced into ``data.inventory``, and asserts how many violations there are
(``yes``, ``no`` or a count), optionally only those whose message matches a regular expression (RE2,
as in Go). A test marked ``invalid`` expects its constraint to be rejected. Broken input (YAML,
Rego, a missing file) fails the cases it touches with the file named; nothing raises out of here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import re2
import yaml

from itbench_gym.policy.conformance import CaseFailure, ConformanceResult, SkippedCase, SuiteOutcome
from itbench_gym.policy.gatekeeper.errors import GatekeeperError, Unsupported
from itbench_gym.policy.gatekeeper.review import review_of
from itbench_gym.policy.gatekeeper.template import Constraint, ConstraintEvaluator, ConstraintTemplate, Violation
from itbench_gym.policy.rego import RegoBackend, RegoEngine, RegoError


class _Loader(yaml.SafeLoader):
    """YAML as Kubernetes reads it into JSON: timestamps stay strings."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _CaseError(Exception):
    """A case that cannot be checked (bad file, bad object); the message names the file."""


def _load_documents(path: Path) -> list[dict[str, Any]]:
    """The non-empty YAML documents of ``path``, each an object."""
    try:
        docs = [d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=_Loader) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _CaseError(f"{path}: {exc}") from None
    if not docs:
        raise _CaseError(f"{path}: no YAML documents")
    for doc in docs:
        if not isinstance(doc, dict):
            raise _CaseError(f"{path}: a document is not an object")
    return docs


def _load_one(path: Path) -> dict[str, Any]:
    docs = _load_documents(path)
    if len(docs) != 1:
        raise _CaseError(f"{path}: defines {len(docs)} objects, expected one")
    return docs[0]


def _expected(violations: Any) -> int | str:
    """An assertion's ``violations``: ``yes`` (the default), ``no`` or a count (YAML 1.1 reads yes/no as booleans)."""
    if violations is None or violations is True or violations == "yes":
        return "yes"
    if violations is False or violations == "no":
        return "no"
    if isinstance(violations, int) and violations >= 0:
        return violations
    raise _CaseError(f"assertion violations must be yes, no or a non-negative integer, got {violations!r}")


def _check_assertions(assertions: Sequence[Mapping[str, Any]], violations: Sequence[Violation]) -> tuple[str, str] | None:
    """The first unmet assertion as (expected, got); None when all hold."""
    if not assertions:
        raise _CaseError("case has no assertions")
    messages = [v.msg for v in violations]
    for assertion in assertions:
        want, pattern = _expected(assertion.get("violations")), assertion.get("message")
        if pattern is not None:
            try:
                regex = re2.compile(str(pattern))
            except re2.error as exc:
                raise _CaseError(f"assertion message {pattern!r} is not a valid regular expression: {exc}") from None
            matching = sum(1 for m in messages if regex.search(m))
        else:
            matching = len(messages)
        about = f" matching {pattern!r}" if pattern is not None else ""
        got = f"{matching} violations{about}, messages {messages}"
        if want == "yes" and matching == 0:
            return f"at least 1 violation{about}", got
        if want == "no" and matching:
            return f"no violations{about}", got
        if isinstance(want, int) and matching != want:
            return f"exactly {want} violations{about}", got
    return None


def _suite_name(suite: Path, root: Path) -> str:
    try:
        return str(suite.relative_to(root))
    except ValueError:
        return str(suite)


class _SuiteRun:
    """The cases of one suite file, as one outcome: policy is the constraint, rule the test, resource the case."""

    def __init__(self, suite: Path, root: Path, engine_factory: Callable[[], RegoBackend]) -> None:
        self.suite, self.engine_factory = suite, engine_factory
        self.outcome = SuiteOutcome(_suite_name(suite, root))

    def run(self) -> SuiteOutcome:
        try:
            doc = _load_one(self.suite)
        except _CaseError as exc:
            self.outcome.errors.append(str(exc))
            return self.outcome
        tests = doc.get("tests")
        if doc.get("kind") != "Suite" or not isinstance(tests, list):
            self.outcome.errors.append(f"{self.suite}: not a Suite with a list of tests")
            return self.outcome
        for i, test in enumerate(tests):
            if not isinstance(test, dict):
                self.outcome.errors.append(f"{self.suite}: test #{i} is not an object")
                continue
            try:
                self._run_test(test, skip=bool(doc.get("skip")))
            except Exception as exc:  # a field of the wrong shape deep in the suite: report it, run the other tests
                self.outcome.errors.append(f"{self.suite}: test {test.get('name', i)!r}: {type(exc).__name__}: {exc}")
        return self.outcome

    def _path(self, relative: Any, what: str) -> Path:
        if not isinstance(relative, str) or not relative:
            raise _CaseError(f"{self.suite}: missing {what}")
        return self.suite.parent / relative

    def _fail(self, policy: str, rule: str, resources: Sequence[str], expected: str, got: str, detail: str = "") -> None:
        self.outcome.failures.extend(CaseFailure(self.outcome.suite, policy, rule, r, expected, got, detail) for r in resources)

    def _skip(self, policy: str, rule: str, resources: Sequence[str], reason: str) -> None:
        self.outcome.skipped.extend(SkippedCase(self.outcome.suite, policy, rule, r, reason) for r in resources)

    def _run_test(self, test: dict[str, Any], *, skip: bool) -> None:
        rule, policy = str(test.get("name", "?")), str(test.get("constraint") or test.get("template") or "?")
        cases = [c if isinstance(c, dict) else {} for c in test.get("cases") or []]
        resources = [str(c.get("name") or c.get("object") or f"#{i}") for i, c in enumerate(cases)]
        if test.get("invalid"):
            resources = ["(constraint)"]
        if skip or test.get("skip"):
            self._skip(policy, rule, resources, "marked skip in the suite")
            return
        try:
            template_path = self._path(test.get("template"), "template")
            try:
                template = ConstraintTemplate.from_object(_load_one(template_path))
            except GatekeeperError as exc:
                raise _CaseError(f"{template_path}: {exc}") from None
            constraint_path = self._path(test.get("constraint"), "constraint")
            try:
                constraint = Constraint.from_object(_load_one(constraint_path), template)
            except GatekeeperError as exc:
                if test.get("invalid"):
                    self.outcome.passed += 1
                    return
                raise _CaseError(f"{constraint_path}: {exc}") from None
            policy = f"{constraint.kind}/{constraint.name}"
            if test.get("invalid"):
                self._fail(policy, rule, resources, "constraint rejected", "constraint accepted", str(constraint_path))
                return
            try:
                evaluator = ConstraintEvaluator(template, constraint, self.engine_factory)
            except RegoError as exc:
                raise _CaseError(f"{template_path}: {exc}") from None
        except Unsupported as exc:
            self._skip(policy, rule, resources, str(exc))
            return
        except _CaseError as exc:
            self._fail(policy, rule, resources, "evaluated", "error", str(exc))
            return
        for resource, case in zip(resources, cases, strict=True):
            if case.get("skip"):
                self._skip(policy, rule, [resource], "marked skip in the suite")
                continue
            try:
                problem = self._run_case(evaluator, case)
            except _CaseError as exc:
                self._fail(policy, rule, [resource], "evaluated", "error", str(exc))
                continue
            except Exception as exc:  # a case field of the wrong shape (an assertion that is not an object, ...)
                self._fail(policy, rule, [resource], "evaluated", "error", f"{self.suite}: {type(exc).__name__}: {exc}")
                continue
            if problem is None:
                self.outcome.passed += 1
            else:
                self._fail(policy, rule, [resource], *problem)

    def _run_case(self, evaluator: ConstraintEvaluator, case: Mapping[str, Any]) -> tuple[str, str] | None:
        object_path = self._path(case.get("object"), "case object")
        obj = _load_one(object_path)
        inventory = [doc for p in case.get("inventory") or [] for doc in _load_documents(self._path(p, "inventory file"))]
        try:
            violations = evaluator.review(review_of(obj), inventory)
        except (GatekeeperError, RegoError) as exc:
            raise _CaseError(f"{object_path}: {exc}") from None
        return _check_assertions(case.get("assertions") or [], violations)


def find_suites(paths: Sequence[Path]) -> list[tuple[Path, Path]]:
    """Every ``suite.yaml`` under ``paths`` (a path may also name a suite file), with the root it was found under."""
    found: list[tuple[Path, Path]] = []
    for root in paths:
        if root.is_file():
            found.append((root, root.parent))
        else:
            found.extend((suite, root) for suite in sorted(root.rglob("suite.yaml")))
    return found


def run_gatekeeper_suites(paths: Sequence[Path], *, engine_factory: Callable[[], RegoBackend] = RegoEngine) -> ConformanceResult:
    """Check every case of every suite under ``paths``; broken input becomes failures (or suite errors) naming the file."""
    return ConformanceResult([_SuiteRun(suite, root, engine_factory).run() for suite, root in find_suites(paths)])
