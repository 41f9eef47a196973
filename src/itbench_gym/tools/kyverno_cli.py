"""``kyverno apply`` and ``kyverno test`` as the Kyverno CLI takes and prints them, over the project's engine.

``apply`` evaluates every validate rule of the given policies (files or folders) on the given resources
and prints what the CLI prints: ``Applying N policy rule(s) to M resource(s)...``, for each failing
(policy, resource) ``policy P -> resource ns/Kind/name failed:`` with numbered ``n - rule message`` lines,
and ``pass: N, fail: M, warn: W, error: E, skip: S``; with ``--policy-report`` a
``wgpolicyk8s.io/v1alpha2`` ClusterPolicyReport (``merged``) and one PolicyReport per namespaced Policy.
Like the CLI it exits 1 when any rule failed or errored, report or not. ``test`` runs the
``kyverno-test.yaml`` suites under a folder through the conformance runner and prints the CLI's summary
and table of failed cases.

Not supported: cluster access, values files and ``--set``, exceptions, mutate/generate/verifyImages rules
and the CEL policy kinds (the engine evaluates validate rules, ``validate.cel`` included), git sources.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from itbench_gym.policy.conformance import ConformanceResult
from itbench_gym.policy.kyverno import Admission, Policy, PolicyError, RuleResult, evaluate_policy, find_suites, load_policy, run_suite
from itbench_gym.policy.kyverno.conformance import UNSUPPORTED_POLICY_KINDS, load_yaml_docs, resource_docs, with_default_namespace
from itbench_gym.policy.kyverno.engine import SCORED_ANNOTATION
from itbench_gym.policy.kyverno.vpol import VALIDATING_POLICY_KINDS
from itbench_gym.tools.base import ToolContext, ToolInputError, ToolResult
from itbench_gym.tools.cli_args import CommandLineError, command_argv, command_parameters, parse_flags, run_cli, walk_files, workspace_path

_YAML_SUFFIXES = (".yaml", ".yml", ".json")
_APPLY_FLAGS = {"resource": "value", "resources": "value", "policy-report": "bool", "audit-warn": "bool", "help": "bool"}
_APPLY_SHORT = {"r": "resource", "p": "policy-report", "h": "help"}
_TEST_FLAGS = {"detailed-results": "bool", "help": "bool"}
_TEST_SHORT = {"h": "help"}
_UNSUPPORTED_FLAGS = {
    "cluster": "there is no cluster access from this tool; save the resources as files in your workspace and pass them with -r",
    "set": "variables are not supported",
    "values-file": "values files are not supported",
    "userinfo": "user info files are not supported",
    "exception": "policy exceptions are not supported",
    "exceptions": "policy exceptions are not supported",
    "output": "mutate and generate rules are not evaluated, so there is nothing to write",
    "table": "the table output is not supported; use --policy-report for every result",
    "git-branch": "git sources are not fetched",
    "registry": "registry access is not available",
    "file-name": "only suites named kyverno-test.yaml are found",
    "test-case-selector": "test case selection is not supported",
    "fail-only": "the table lists only failed cases already",
}
_SUMMARY_KEYS = ("pass", "fail", "warn", "error", "skip")
_DIVIDER = "-" * 70

USAGE = """Usage:
  kyverno apply POLICY... --resource RESOURCE... [flags]
  kyverno test DIR... [--detailed-results]

kyverno apply flags:
  -r, --resource, --resources PATH   resource file or folder; repeatable
  -p, --policy-report                print a ClusterPolicyReport / PolicyReport instead of the failure list
      --audit-warn                   count failures of Audit rules as warnings
Policies and resources are files or folders of YAML, relative to your workspace. Only validate rules of
ClusterPolicy/Policy are evaluated."""


class KyvernoCliTool:
    name = "kyverno"
    description = (
        "Kyverno CLI over a validate-rule engine: `kyverno apply policy.yaml --resource pod.yaml [--policy-report] "
        "[--audit-warn]` applies ClusterPolicy/Policy validate rules to resource files and exits 1 when a rule fails; "
        "`kyverno test DIR` runs the kyverno-test.yaml suites under DIR. Paths are relative to your workspace. No shell."
    )
    parameters: Mapping[str, Any] = command_parameters("kyverno", "kyverno apply policy.yaml -r pod.yaml")
    cost_seconds = 1.0

    def run(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolResult:
        argv = command_argv(args, "kyverno")
        for token in argv[1:]:
            name = token.removeprefix("--").partition("=")[0]
            if token.startswith("--") and name in _UNSUPPORTED_FLAGS:
                raise ToolInputError(f"flag --{name} is not available: {_UNSUPPORTED_FLAGS[name]}")
        return run_cli("kyverno", argv, USAGE, {"apply": partial(self._apply, ctx=ctx), "test": partial(self._test, ctx=ctx)})

    def _apply(self, argv: list[str], ctx: ToolContext) -> tuple[str, int]:
        flags = parse_flags(argv, _APPLY_FLAGS, _APPLY_SHORT)
        if flags.enabled("help"):
            return USAGE, 0
        if not flags.args:
            raise CommandLineError("require policy")
        resource_paths = flags.every("resource", "resources")
        if not resource_paths:
            raise CommandLineError("resource file(s) or cluster required")
        policies, invalid = _load_policies(ctx.workspace, flags.args)
        resources = _load_resources(ctx.workspace, resource_paths)
        audit_warn = flags.enabled("audit-warn")
        counts = dict.fromkeys(_SUMMARY_KEYS, 0)
        counts["error"] = len(invalid)
        namespace_labels = {
            str((r.get("metadata") or {}).get("name", "")): dict((r.get("metadata") or {}).get("labels") or {})
            for r in resources
            if r.get("kind") == "Namespace"
        }
        admission = Admission(namespace_labels=namespace_labels)
        evaluations: list[tuple[Policy, dict[str, Any], list[RuleResult]]] = []
        for resource in resources:
            for policy in policies:
                results = [r for r in evaluate_policy(policy, resource, admission, {}, {}) if r.matched]
                evaluations.append((policy, resource, results))
                for result in results:
                    counts[_reported_status(policy, result, audit_warn)] += 1
        lines: list[str] = []
        if invalid:
            lines += [_DIVIDER, "Invalid Policies:", *(f"{i}. {name}" for i, name in enumerate(invalid, start=1)), _DIVIDER]
        if flags.enabled("policy-report"):
            lines += [_DIVIDER, "POLICY REPORT:", _DIVIDER, _policy_reports(evaluations, audit_warn, ctx.now())]
        else:
            rules = sum(len(p.rules) for p in policies)
            lines = [f"\nApplying {rules} policy rule(s) to {len(resources)} resource(s)...\n", *lines]
            for policy, resource, results in evaluations:
                failed = [r for r in results if r.status == "fail"]
                if not failed:
                    continue
                warned = audit_warn and _audit(policy, None)
                lines.append(f"policy {policy.name} -> resource {_resource_path(resource)} failed{' as audit warning' if warned else ''}:")
                lines += [f"{i} - {r.rule} {r.message}" for i, r in enumerate(failed, start=1)]
                lines.append("")
            lines.append("\n" + ", ".join(f"{k}: {counts[k]}" for k in _SUMMARY_KEYS) + " ")
        status = 1 if counts["fail"] or counts["error"] else 0
        return "\n".join(lines), status

    def _test(self, argv: list[str], ctx: ToolContext) -> tuple[str, int]:
        flags = parse_flags(argv, _TEST_FLAGS, _TEST_SHORT)
        if flags.enabled("help"):
            return USAGE, 0
        if not flags.args:
            raise CommandLineError("a directory is required")
        folders = [workspace_path(ctx.workspace, value) for value in flags.args]
        for value, folder in zip(flags.args, folders, strict=True):
            if not folder.exists():
                return f"\nError loading tests:\n    stat {value}: no such file or directory", 1
        suites = find_suites(folders)
        for suite in suites:
            _check_suite_paths(ctx.workspace, suite)
        result = ConformanceResult([run_suite(s) for s in suites])
        return _test_report(result, ctx.workspace.resolve(), flags.enabled("detailed-results"))


def _check_suite_paths(workspace: Path, suite: Path) -> None:
    """Refuse a suite that is, or names a file, outside the workspace (``../``, absolute paths, symlinks)."""
    root = workspace.resolve()
    relative = suite.resolve().relative_to(root) if root in suite.resolve().parents else None
    if relative is None:
        raise ToolInputError(f"{suite.name}: this suite leads outside your workspace; only files in your workspace can be read")
    try:
        spec = yaml.safe_load(suite.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # the runner reports an unreadable suite
    if not isinstance(spec, dict):
        return
    named = [*(spec.get("policies") or []), *(spec.get("resources") or []), *(spec.get("exceptions") or [])]
    named += [spec[k] for k in ("variables", "userinfo") if isinstance(spec.get(k), str)]
    for value in named:
        workspace_path(workspace, str(relative.parent / str(value)))


def _load_policies(workspace: Path, values: list[str]) -> tuple[list[Policy], list[str]]:
    """ClusterPolicy/Policy documents in the given files and folders; names of those that do not load."""
    policies: list[Policy] = []
    invalid: list[str] = []
    for shown, path in _yaml_files(workspace, values, "policies"):
        for doc in _documents(path, shown, "policies"):
            if not isinstance(doc, dict) or doc.get("kind") not in ("ClusterPolicy", "Policy"):
                # the cluster runs Kyverno 1.13, before ValidatingPolicy: the CLI beside it refuses one too
                if isinstance(doc, dict) and doc.get("kind") in (*UNSUPPORTED_POLICY_KINDS, *VALIDATING_POLICY_KINDS):
                    raise ToolInputError(f"{shown}: policy kind {doc['kind']} is not supported (ClusterPolicy and Policy only)")
                continue
            try:
                policies.append(load_policy(doc))
            except PolicyError as exc:
                invalid.append(f"{(doc.get('metadata') or {}).get('name') or shown} ({exc})")
    return policies, invalid


def _load_resources(workspace: Path, values: list[str]) -> list[dict[str, Any]]:
    """Every resource (List items too) in the given files and folders; namespaced ones default to `default`."""
    return [with_default_namespace(r) for shown, path in _yaml_files(workspace, values, "resources") for r in resource_docs(_documents(path, shown, "resources"))]


def _yaml_files(workspace: Path, values: list[str], what: str) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for value in values:
        try:
            files += walk_files(workspace, value, _YAML_SUFFIXES)
        except FileNotFoundError:
            raise CommandLineError(f"failed to load {what} ({value}: no such file or directory)") from None
    return files


def _documents(path: Path, shown: str, what: str) -> list[Any]:
    try:
        return load_yaml_docs(path)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CommandLineError(f"failed to load {what} ({shown}: {' '.join(str(exc).split())})") from None


def _audit(policy: Policy, rule_name: str | None) -> bool:
    """Whether a rule (or, without a name, the policy) only audits: its failureAction, else the policy's, default Audit."""
    spec = policy.raw.get("spec") or {}
    action = spec.get("validationFailureAction") or "Audit"
    if rule_name is not None:
        rule = next((r for r in policy.rules if r["name"] == rule_name), {})
        action = (rule.get("validate") or {}).get("failureAction") or action
    return str(action).lower() == "audit"


def _reported_status(policy: Policy, result: RuleResult, audit_warn: bool) -> str:
    if result.status == "fail" and audit_warn and _audit(policy, result.rule):
        return "warn"
    return result.status


def _resource_path(resource: dict[str, Any]) -> str:
    meta = resource.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{resource.get('kind', '')}/{meta.get('name', '')}"


def _policy_reports(evaluations: list[tuple[Policy, dict[str, Any], list[RuleResult]]], audit_warn: bool, now: float) -> str:
    """One ClusterPolicyReport for ClusterPolicies' results and a PolicyReport per namespaced Policy, as YAML."""
    clustered: list[dict[str, Any]] = []
    namespaced: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for policy, resource, results in evaluations:
        for result in results:
            entry = _report_result(policy, resource, result, audit_warn, now)
            if policy.namespace:
                namespaced.setdefault((policy.namespace, policy.name), []).append(entry)
            else:
                clustered.append(entry)
    docs: list[str] = []
    if clustered:
        docs.append(_report_yaml("ClusterPolicyReport", {"name": "merged"}, clustered))
    for (namespace, name), entries in namespaced.items():
        docs.append("---\n" + _report_yaml("PolicyReport", {"name": name, "namespace": namespace}, entries))
    return "\n".join(docs)


def _report_result(policy: Policy, resource: dict[str, Any], result: RuleResult, audit_warn: bool, now: float) -> dict[str, Any]:
    meta = resource.get("metadata") or {}
    ref = {"apiVersion": resource.get("apiVersion", ""), "kind": resource.get("kind", ""), "name": meta.get("name", "")}
    ref.update({k: meta[k] for k in ("namespace", "uid") if meta.get(k)})
    annotations = (policy.raw.get("metadata") or {}).get("annotations") or {}
    entry: dict[str, Any] = {
        "message": f"validation rule '{result.rule}' passed." if result.status == "pass" else result.message,
        "policy": policy.name,
        "resources": [ref],
        "result": _reported_status(policy, result, audit_warn),
        "rule": result.rule,
        "scored": str(annotations.get(SCORED_ANNOTATION, "true")).lower() != "false",
        "source": "kyverno",
        "timestamp": {"nanos": 0, "seconds": int(now)},
    }
    for key in ("category", "severity"):
        if annotations.get(f"policies.kyverno.io/{key}"):
            entry[key] = annotations[f"policies.kyverno.io/{key}"]
    return entry


def _report_yaml(kind: str, metadata: dict[str, str], results: list[dict[str, Any]]) -> str:
    summary = dict.fromkeys(_SUMMARY_KEYS, 0)
    for entry in results:
        summary[entry["result"]] += 1
    report = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": kind,
        "metadata": {"creationTimestamp": None, **metadata},
        "results": results,
        "summary": summary,
    }
    return yaml.safe_dump(report, sort_keys=True, default_flow_style=False, width=1_000_000, allow_unicode=True)


def _test_report(result: ConformanceResult, workspace: Path, detailed: bool) -> tuple[str, int]:
    """The CLI's `kyverno test` output: suites loaded, errors, summary, then the failed cases as a table."""
    if not result.suites:
        return "\nNo test yamls available", 0
    lines = [f"Loading test  ( {_relative(s.suite, workspace)} ) ..." for s in result.suites]
    if result.errors:
        lines += ["", "Test errors:", *(f"    {_relative(e, workspace)} " for e in result.errors)]
    failures = result.failures
    lines.append(f"\nTest Summary: {result.passed} tests passed and {len(failures)} tests failed\n")
    if failures:
        header = ["ID", "POLICY", "RULE", "RESOURCE", "RESULT", "REASON", *(["MESSAGE"] if detailed else [])]
        rows = [
            [str(i), f.policy, f.rule, f.resource, "Fail", "Not found" if f.got == "not found" else f"Want {f.expected}, got {f.got}"]
            + ([f.detail] if detailed else [])
            for i, f in enumerate(failures, start=1)
        ]
        lines += ["Aggregated Failed Test Cases : ", _box_table(header, rows)]
    skipped = result.skipped
    if skipped:
        reasons = sorted({k.reason for k in skipped})
        lines.append(f"{len(skipped)} test case(s) not evaluated by this engine: " + "; ".join(reasons))
    return "\n".join(lines), 1 if failures else 0


def _relative(text: str, workspace: Path) -> str:
    """Suite paths as the agent knows them: relative to the workspace."""
    return text.replace(f"{workspace}/", "")


def _box_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(c) for c in column) for column in zip(header, *rows, strict=True)]
    rule = "│" + "│".join("─" * (w + 2) for w in widths) + "│"

    def line(cells: list[str]) -> str:
        return "│" + "│".join(f" {c.ljust(w)} " for c, w in zip(cells, widths, strict=True)) + "│"

    return "\n".join([rule, line(header), rule, *(line(r) for r in rows), rule])
