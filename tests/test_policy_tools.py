"""The `opa` and `kyverno` tools: command lines, output shapes and exit statuses as the real CLIs document
them, and paths confined to the agent's workspace."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from itbench_gym.backends.base import Endpoints
from itbench_gym.tools import ToolContext, ToolInputError, ToolResult
from itbench_gym.tools.kyverno_cli import KyvernoCliTool
from itbench_gym.tools.opa import OpaTool

NOW = 1_700_000_000.0

CHECK_REGO = """\
package check

default result := true

result := false if input.spec.privileged

msg := "privileged pods are not allowed" if input.spec.privileged

xs := {1, 2}
"""

PRIVILEGED = {"kind": "Pod", "spec": {"privileged": True}}

PRIVILEGE_POLICY = """\
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: disallow-privileged-containers
  annotations:
    policies.kyverno.io/category: Pod Security Standards (Baseline)
    policies.kyverno.io/severity: medium
spec:
  validationFailureAction: Audit
  rules:
  - name: privileged-containers
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: Privileged mode is disallowed.
      pattern:
        spec:
          containers:
          - =(securityContext):
              =(privileged): "false"
"""

PODS = """\
apiVersion: v1
kind: Pod
metadata:
  name: bad
spec:
  containers:
  - name: app
    image: nginx:1.27
    securityContext:
      privileged: true
---
apiVersion: v1
kind: Pod
metadata:
  name: good
spec:
  containers:
  - name: app
    image: nginx:1.27
"""


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "scratch").mkdir()
    endpoints = Endpoints(kubeconfig=tmp_path / "kubeconfig", kube_cache_dir=tmp_path / "cache", prometheus=None)
    return ToolContext(endpoints=endpoints, advance=lambda s: None, now=lambda: NOW, time_left=lambda: 3600.0,
                       workspace=tmp_path / "workspace", scratch=tmp_path / "scratch")


def write(ctx: ToolContext, name: str, text: str) -> Path:
    path = ctx.workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def opa(ctx: ToolContext, text: str) -> ToolResult:
    return OpaTool().run({"text": text}, ctx)


def kyverno(ctx: ToolContext, text: str) -> ToolResult:
    return KyvernoCliTool().run({"text": text}, ctx)


@pytest.fixture
def check(ctx: ToolContext) -> ToolContext:
    write(ctx, "policy.rego", CHECK_REGO)
    write(ctx, "input.json", json.dumps(PRIVILEGED))
    return ctx


# --- opa eval: output formats ------------------------------------------------------------------------------


def test_json_is_opas_result_set_with_text_and_location(check: ToolContext) -> None:
    out = opa(check, "opa eval -d policy.rego -i input.json data.check.result")
    assert out.exit_status == 0
    assert json.loads(out.text) == {
        "result": [{"expressions": [{"value": False, "text": "data.check.result", "location": {"row": 1, "col": 1}}]}]
    }
    assert out.text.startswith('{\n  "result": [\n    {\n      "expressions"')  # indented by two, as OPA's encoder


def test_undefined_is_an_empty_document_and_exit_zero_unless_fail(check: ToolContext) -> None:
    out = opa(check, "opa eval -d policy.rego -i input.json data.check.missing")
    assert (out.text, out.exit_status) == ("{}", 0)
    assert opa(check, "opa eval --fail -d policy.rego data.check.missing").exit_status == 1
    assert opa(check, "opa eval --fail -d policy.rego data.check.result").exit_status == 0


def test_fail_defined_exits_one_on_a_defined_result(check: ToolContext) -> None:
    out = opa(check, "opa eval --fail-defined -d policy.rego -i input.json -f raw data.check.msg")
    assert (out.text, out.exit_status) == ("privileged pods are not allowed", 1)
    assert opa(check, "opa eval --fail-defined -d policy.rego data.check.msg").exit_status == 0


def test_raw_prints_strings_bare_and_other_values_as_compact_json(check: ToolContext) -> None:
    assert opa(check, "opa eval -d policy.rego -i input.json -f raw data.check.result").text == "false"
    assert opa(check, "opa eval --data=policy.rego --input=input.json -fraw data.check.msg").text == "privileged pods are not allowed"
    assert opa(check, "opa eval -d policy.rego --format raw data.check.xs").text == "[1,2]"
    assert opa(check, "opa eval -d policy.rego -f raw data.check.missing").text == ""


def test_values_and_bindings_print_one_json_document_per_result(check: ToolContext) -> None:
    values = opa(check, "opa eval -d policy.rego -i input.json -f values data.check.result")
    assert values.text == "[\n  false\n]"
    bindings = opa(check, "opa eval -d policy.rego -f bindings 'x := data.check.xs[_]'")
    assert bindings.text == '{\n  "x": 1\n}\n{\n  "x": 2\n}'


def test_pretty_prints_a_lone_value_indented_undefined_and_a_table_for_bindings(check: ToolContext) -> None:
    assert opa(check, "opa eval -d policy.rego -i input.json -f pretty data.check.result").text == "false"
    assert opa(check, "opa eval -d policy.rego -f pretty data.check.missing").text == "undefined"
    obj = opa(check, "opa eval -d policy.rego -i input.json -f pretty '{\"a\": data.check.result}'")
    assert obj.text == '{\n  "a": false\n}'
    table = opa(check, "opa eval -d policy.rego -f pretty 'x := data.check.xs[_]'").text
    assert table.splitlines() == ["+---+", "| x |", "+---+", "| 1 |", "| 2 |", "+---+"]


def test_json_data_merges_at_the_root_and_folder_data_under_its_path(ctx: ToolContext) -> None:
    write(ctx, "policies/limits.rego", "package limits\n\ntoo_many if count(input.containers) > data.limits.max\n")
    write(ctx, "policies/limits/data.json", '{"max": 1}')
    write(ctx, "extra.yaml", "owners:\n  - platform\n")
    write(ctx, "pod.json", '{"containers": [1, 2]}')
    out = opa(ctx, "opa eval -d policies -d extra.yaml -i pod.json -f raw '[data.limits.too_many, data.owners[0], data.limits.max]'")
    assert (out.text, out.exit_status) == ('[true,"platform",1]', 0)


def test_rego_v1_is_the_default_and_v0_compatible_reads_pre_1_0_syntax(ctx: ToolContext) -> None:
    write(ctx, "old.rego", "package old\n\nallow {\n  input.ok\n}\n")
    write(ctx, "in.json", '{"ok": true}')
    v0 = opa(ctx, "opa eval --v0-compatible -d old.rego -i in.json -f raw data.old.allow")
    assert (v0.text, v0.exit_status) == ("true", 0)
    v1 = opa(ctx, "opa eval -d old.rego -i in.json -f pretty data.old.allow")
    assert v1.exit_status == 1
    assert v1.text.startswith("1 error occurred: old.rego:3: rego_parse_error: ")


def test_a_syntax_error_names_file_and_row_in_text_and_json(ctx: ToolContext) -> None:
    write(ctx, "policy.rego", "package check\n\nresult := false if {\n  input.x ==\n}\n")
    text = opa(ctx, "opa eval -d policy.rego -f pretty data.check.result")
    assert text.exit_status == 1
    first, source, caret = text.text.splitlines()
    assert first.startswith("1 error occurred: policy.rego:5: rego_parse_error: ")
    assert (source, caret) == ("\t}", "\t^")
    as_json = opa(ctx, "opa eval -d policy.rego data.check.result")
    error = json.loads(as_json.text)["errors"][0]
    assert as_json.exit_status == 1
    assert (error["code"], error["location"]) == ("rego_parse_error", {"file": "policy.rego", "row": 5, "col": 1})


def test_a_missing_file_is_reported_as_opa_does(ctx: ToolContext) -> None:
    out = opa(ctx, "opa eval -d missing.rego -f pretty data")
    assert (out.text, out.exit_status) == ("1 error occurred: stat missing.rego: no such file or directory", 1)


def test_opa_check_is_silent_on_good_files_and_names_the_bad_one(ctx: ToolContext) -> None:
    write(ctx, "rules/good.rego", CHECK_REGO)
    assert (opa(ctx, "opa check rules").text, opa(ctx, "opa check rules").exit_status) == ("", 0)
    write(ctx, "rules/bad.rego", "package bad\n\nallow { true }\n")
    out = opa(ctx, "opa check rules")
    assert out.exit_status == 1
    assert out.text.startswith("1 error occurred: rules/bad.rego:3: rego_parse_error: ")
    assert opa(ctx, "opa check --v0-compatible rules/bad.rego").exit_status == 0


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("opa eval --bogus data", "Error: unknown flag: --bogus"),
        ("opa eval -z data", "Error: unknown shorthand flag: 'z' in -z"),
        ("opa eval data -d", "Error: flag needs an argument: 'd' in -d"),
        ("opa eval --format", "Error: flag needs an argument: --format"),
        ("opa eval --fail=maybe data", 'Error: invalid argument "maybe" for "--fail" flag: strconv.ParseBool: parsing "maybe": invalid syntax'),
        ("opa eval", "Error: specify query argument or --stdin"),
        ("opa frobnicate", "Error: unknown command \"frobnicate\" for \"opa\"\nRun 'opa --help' for usage."),
    ],
)
def test_command_line_errors_use_the_clis_wording(ctx: ToolContext, line: str, error: str) -> None:
    out = opa(ctx, line)
    assert (out.text, out.exit_status) == (error, 1)


# --- workspace confinement ----------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "secret.rego"
    path.write_text("package secret\n\nvalue := 42\n")
    return path


@pytest.mark.parametrize("value", ["../secret.rego", "sub/../../secret.rego", "ABSOLUTE", "~/secret.rego", "https://example.com/p.rego"])
def test_paths_outside_the_workspace_are_refused(ctx: ToolContext, outside: Path, value: str) -> None:
    value = str(outside) if value == "ABSOLUTE" else value
    with pytest.raises(ToolInputError):
        opa(ctx, f"opa eval -d {value} data.secret.value")
    with pytest.raises(ToolInputError):
        kyverno(ctx, f"kyverno apply {value} -r pod.yaml")


def test_symlinks_out_of_the_workspace_are_refused_even_inside_a_folder(ctx: ToolContext, outside: Path) -> None:
    (ctx.workspace / "link.rego").symlink_to(outside)
    (ctx.workspace / "dir").mkdir()
    (ctx.workspace / "dir" / "inner.rego").symlink_to(outside)
    (ctx.workspace / "dir" / "inner.yaml").symlink_to(outside)
    with pytest.raises(ToolInputError, match="outside your workspace"):
        opa(ctx, "opa eval -d link.rego data.secret.value")
    with pytest.raises(ToolInputError, match="outside your workspace"):
        opa(ctx, "opa eval -d dir data.secret.value")
    with pytest.raises(ToolInputError, match="outside your workspace"):
        kyverno(ctx, "kyverno apply dir -r dir")


def test_a_kyverno_suite_naming_files_outside_the_workspace_is_refused(ctx: ToolContext, outside: Path) -> None:
    write(ctx, "suite/kyverno-test.yaml", "name: t\npolicies: [../../secret.rego]\nresources: [pods.yaml]\nresults: []\n")
    with pytest.raises(ToolInputError, match="outside your workspace"):
        kyverno(ctx, "kyverno test suite")


def test_shell_syntax_is_refused(ctx: ToolContext) -> None:
    with pytest.raises(ToolInputError, match="without a shell"):
        opa(ctx, "opa eval data | cat")


# --- kyverno apply ---------------------------------------------------------------------------------------------


@pytest.fixture
def cis(ctx: ToolContext) -> ToolContext:
    write(ctx, "policy.yaml", PRIVILEGE_POLICY)
    write(ctx, "pods.yaml", PODS)
    write(ctx, "plain/pod.yaml", PODS.split("---\n")[1])
    return ctx


def test_apply_lists_failing_rules_with_the_summary_and_exits_one(cis: ToolContext) -> None:
    out = kyverno(cis, "kyverno apply policy.yaml --resource pods.yaml")
    lines = out.text.splitlines()
    assert out.exit_status == 1
    assert "Applying 3 policy rule(s) to 2 resource(s)..." in lines  # autogen rules count, as the CLI counts them
    at = lines.index("policy disallow-privileged-containers -> resource default/Pod/bad failed:")
    assert lines[at + 1].startswith("1 - privileged-containers validation error: Privileged mode is disallowed.")
    assert not any("Pod/good" in line for line in lines)
    assert lines[-1] == "pass: 1, fail: 1, warn: 0, error: 0, skip: 0 "


def test_apply_to_a_compliant_pod_exits_zero(cis: ToolContext) -> None:
    out = kyverno(cis, "kyverno apply policy.yaml -r plain")
    assert out.exit_status == 0
    assert "failed" not in out.text
    assert out.text.splitlines()[-1] == "pass: 1, fail: 0, warn: 0, error: 0, skip: 0 "


def test_audit_warn_turns_audit_failures_into_warnings(cis: ToolContext) -> None:
    out = kyverno(cis, "kyverno apply policy.yaml --resources=pods.yaml --audit-warn")
    assert out.exit_status == 0
    assert "policy disallow-privileged-containers -> resource default/Pod/bad failed as audit warning:" in out.text
    assert out.text.splitlines()[-1] == "pass: 1, fail: 0, warn: 1, error: 0, skip: 0 "
    write(cis, "policy.yaml", PRIVILEGE_POLICY.replace("validationFailureAction: Audit", "validationFailureAction: Enforce"))
    assert kyverno(cis, "kyverno apply policy.yaml -r pods.yaml --audit-warn").exit_status == 1


def test_policy_report_is_a_cluster_policy_report_and_still_exits_one(cis: ToolContext) -> None:
    out = kyverno(cis, "kyverno apply policy.yaml -r pods.yaml -p")
    assert out.exit_status == 1
    assert out.text.splitlines()[1] == "POLICY REPORT:"
    report = yaml.safe_load(out.text.split("-" * 70 + "\n", 2)[2])
    assert (report["apiVersion"], report["kind"], report["metadata"]["name"]) == ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport", "merged")
    assert report["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    by_pod = {r["resources"][0]["name"]: r for r in report["results"]}
    assert by_pod["bad"]["result"] == "fail" and by_pod["good"]["result"] == "pass"
    assert by_pod["bad"]["resources"][0] == {"apiVersion": "v1", "kind": "Pod", "name": "bad", "namespace": "default"}
    assert by_pod["bad"] | {"message": ""} == {
        "category": "Pod Security Standards (Baseline)",
        "message": "",
        "policy": "disallow-privileged-containers",
        "resources": by_pod["bad"]["resources"],
        "result": "fail",
        "rule": "privileged-containers",
        "scored": True,
        "severity": "medium",
        "source": "kyverno",
        "timestamp": {"nanos": 0, "seconds": int(NOW)},
    }


def test_a_namespaced_policy_gets_its_own_policy_report(cis: ToolContext) -> None:
    namespaced = PRIVILEGE_POLICY.replace("kind: ClusterPolicy", "kind: Policy").replace("  name: disallow", "  namespace: default\n  name: disallow")
    write(cis, "policy.yaml", namespaced)
    report = yaml.safe_load(kyverno(cis, "kyverno apply policy.yaml -r pods.yaml --policy-report").text.split("\n---\n", 1)[1])
    assert (report["kind"], report["metadata"]["namespace"], report["summary"]["fail"]) == ("PolicyReport", "default", 1)


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("kyverno apply", "Error: require policy"),
        ("kyverno apply policy.yaml", "Error: resource file(s) or cluster required"),
        ("kyverno apply policy.yaml -r pods.yaml --bogus", "Error: unknown flag: --bogus"),
        ("kyverno apply policy.yaml -r", "Error: flag needs an argument: 'r' in -r"),
        ("kyverno apply policy.yaml -r nope.yaml", "Error: failed to load resources (nope.yaml: no such file or directory)"),
        ("kyverno test", "Error: a directory is required"),
        ("kyverno bogus", "Error: unknown command \"bogus\" for \"kyverno\"\nRun 'kyverno --help' for usage."),
    ],
)
def test_kyverno_command_line_errors_use_the_clis_wording(cis: ToolContext, line: str, error: str) -> None:
    out = kyverno(cis, line)
    assert (out.text, out.exit_status) == (error, 1)


def test_flags_the_tool_cannot_honour_are_refused_with_the_reason(cis: ToolContext) -> None:
    with pytest.raises(ToolInputError, match="--cluster is not available"):
        kyverno(cis, "kyverno apply policy.yaml --cluster")


# --- kyverno test ----------------------------------------------------------------------------------------------


def suite(results: str) -> str:
    return "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata:\n  name: privileged\npolicies: [policy.yaml]\n" \
        "resources: [pods.yaml]\nresults:\n" + textwrap.indent(results, "")


EXPECTED = """\
- policy: disallow-privileged-containers
  rule: privileged-containers
  resources: [bad]
  kind: Pod
  result: fail
- policy: disallow-privileged-containers
  rule: privileged-containers
  resources: [good]
  kind: Pod
  result: pass
"""


def test_kyverno_test_summarises_passing_suites_and_exits_zero(cis: ToolContext) -> None:
    write(cis, "tests/policy.yaml", PRIVILEGE_POLICY)
    write(cis, "tests/pods.yaml", PODS)
    write(cis, "tests/kyverno-test.yaml", suite(EXPECTED))
    out = kyverno(cis, "kyverno test tests")
    assert out.exit_status == 0
    assert "Loading test  ( tests/kyverno-test.yaml ) ..." in out.text
    assert "Test Summary: 2 tests passed and 0 tests failed" in out.text


def test_kyverno_test_lists_failed_cases_and_exits_one(cis: ToolContext) -> None:
    write(cis, "tests/policy.yaml", PRIVILEGE_POLICY)
    write(cis, "tests/pods.yaml", PODS)
    write(cis, "tests/kyverno-test.yaml", suite(EXPECTED.replace("result: fail", "result: pass")))
    out = kyverno(cis, "kyverno test tests --detailed-results")
    assert out.exit_status == 1
    assert "Test Summary: 1 tests passed and 1 tests failed" in out.text
    assert "Aggregated Failed Test Cases : " in out.text
    row = next(line for line in out.text.splitlines() if line.startswith("│ 1 "))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[:6] == ["1", "disallow-privileged-containers", "privileged-containers", "bad", "Fail", "Want pass, got fail"]
    assert "Privileged mode is disallowed." in cells[6]


def test_kyverno_test_without_suites_says_so(cis: ToolContext) -> None:
    (cis.workspace / "empty").mkdir()
    out = kyverno(cis, "kyverno test empty")
    assert (out.text.strip(), out.exit_status) == ("No test yamls available", 0)


@pytest.mark.parametrize(("rego", "line", "cycle"), [
    ("f(x) := f(x + 1)\nresult := f(0)\n", 3, "data.loop.f -> data.loop.f"),
    ("a(x) := b(x)\nb(x) := a(x)\nresult := a(1)\n", 3, "data.loop.a -> data.loop.b -> data.loop.a"),
    ("import data.loop as me\nf(x) := me.f(x)\nresult := f(1)\n", 4, "data.loop.f -> data.loop.f"),
])
def test_a_recursive_function_is_refused_as_opa_refuses_it(ctx: ToolContext, rego: str, line: int, cycle: str) -> None:
    """regorus would run the function until the process's stack overflowed (a segfault of the env's
    process); OPA's compiler refuses any recursion, and so does the twin, before evaluating."""
    write(ctx, "loop.rego", "package loop\nimport rego.v1\n" + rego)
    out = opa(ctx, "opa eval -d loop.rego -f pretty data.loop.result")
    assert out.exit_status == 1
    assert f"loop.rego:{line}: rego_recursion_error: rule {cycle.split(' ')[0]} is recursive: {cycle}" in out.text
    write(ctx, "ok.rego", "package ok\nimport rego.v1\nf(x) := x + 1\ng(x) := f(x) * 2\nresult := g(1)\n")
    assert opa(ctx, "opa eval -d ok.rego -f pretty data.ok.result").text == "4"


def test_a_policy_that_builds_a_huge_value_fails_its_query_not_the_episode(ctx: ToolContext) -> None:
    """Rego runs in a process of its own with bounded memory: a comprehension over a billion numbers
    fails with the twin's words, and the next query, of the same engine or another, is answered."""
    write(ctx, "bomb.rego", "package bomb\nimport rego.v1\nn := count([i | some i in numbers.range(1, 1e9)])\nsmall := 2\n")
    out = opa(ctx, "opa eval -d bomb.rego -f pretty data.bomb.n")
    assert out.exit_status == 1
    assert "rego_resource_error: itbench_gym: this evaluation held more than the 2 GiB of memory the twin gives Rego" in out.text
    assert opa(ctx, "opa eval -d bomb.rego -f pretty data.bomb.small").text == "2"
