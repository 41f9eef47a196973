"""``CISOTask``: an ITBench CISO compliance assessment — set up a case, grade the agent's artefacts.

A seed draws one of the scenario's cases (by weight): the misconfigured resources or host settings the
requirement is about, or a compliant setup a correct agent must confirm. Set-up applies the existing
objects and the case's objects through the Kubernetes API with the backend's admin credential (the
rhel9-opa class changes the host model instead); grading reads what ITBench's evaluators read
(``evaluation/ciso.py``): PolicyReports, the policies as they are now, or the output of the agent's
fetcher and Rego policy run again from a clean copy of its workspace.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

from itbench_gym.backends.base import Backend, BackendError
from itbench_gym.evaluation.ciso import (
    CISOEvaluation,
    Verdict,
    grade_policy_result,
    grade_probes,
    grade_rego_output,
    grade_reports,
    grade_unchanged,
)
from itbench_gym.spec import ScenarioSpec
from itbench_gym.spec.model import ComplianceCase, ComplianceSpec
from itbench_gym.tasks.base import Task
from itbench_gym.tasks.types import Incident, Submission
from itbench_gym.tools.base import Tool
from itbench_gym.tools.cli_args import CommandLineError
from itbench_gym.tools.opa import eval_command
from itbench_gym.tools.sandbox import SandboxUnavailable
from itbench_gym.tools.script import ScriptError

#: Seconds the cluster runs after the case is applied before the agent takes over: the case's pods
#: are created and the policy engines have seen them (ITBench's deploy waits for the same).
CASE_SETTLE_SECONDS = 30.0
#: The Rego query ITBench's evaluator runs, and the files it reads.
REGO_QUERY = "data.check.result"
POLICY_FILE = "policy.rego"
COLLECTED_FILE = "collected_data.json"
FETCHERS = {"k8s-opa": "script.sh", "rhel9-opa": "playbook.yml"}
REPORTS = ("policyreports", "clusterpolicyreports")
POLICIES = ("clusterpolicies", "policies")

Obj = dict[str, Any]


def draw_case(spec: ScenarioSpec, seed: int) -> ComplianceCase:
    """The case ``seed`` sets up: a weighted draw from the scenario's own stream (same seed, same case)."""
    compliance = _compliance(spec)
    rng = random.Random(f"{spec.id}/{seed}")
    return rng.choices(compliance.cases, weights=[c.weight for c in compliance.cases])[0]


def _compliance(spec: ScenarioSpec) -> ComplianceSpec:
    if spec.compliance is None:
        raise ValueError(f"scenario {spec.id}: not a compliance scenario ({spec.source})")
    return spec.compliance


def prompt_goal(compliance: ComplianceSpec, namespace: str) -> str:
    """The task statement in ITBench's words for the class (``ciso/*/playbooks/goal.yml`` templates)."""
    goal = compliance.goal
    if compliance.cls == "kyverno":
        return ("I would like to check if the following condition is satisfied, given a Kubernetes cluster with `kubeconfig.yaml`\n"
                f"    {goal}\n\n"
                "To check the condition, do the following steps.\n"
                "- deploy a Kyverno policy to the cluster\n"
                "- check if the policy is correctly deployed.\n\n"
                "If deploying the policy failed and if you can fix the issue, you will do it and try deploying again.\n"
                "Once you get a final answer, you can quit the work.\n\n"
                "kubectl is configured with the cluster's kubeconfig. Your workspace is the working directory of your tools.")
    if compliance.cls == "k8s-opa":
        return ("I would like to check if the following condition is satisfied, given a Kubernetes cluster with `kubeconfig.yaml`\n"
                f"    {goal}\n\n"
                "To check the condition, do the following steps.\n"
                "- get related resource(s) on the cluster by kubectl command\n"
                "- check if the conditions are satisfied by OPA Rego policy\n\n"
                f"for those steps, you need to create an OPA Rego policy `{POLICY_FILE}`.\n"
                "Also, save the kubectl command as `script.sh` with the following design.\n"
                f"- The script should output the collected related resources to a file named `{COLLECTED_FILE}` in the current working directory.\n"
                "- Please remove any kubeconfig configuration (e.g. --kubeconfig args) from the script, as users will configure "
                "the kubeconfig using environment variables or other methods.\n\n"
                f"The workloads to assess run in namespace `{namespace}` (system namespaces such as kube-system are out of scope). "
                f"The policy's `{REGO_QUERY}` must be true when the condition is satisfied and false when it is not.\n"
                "If running the policy failed and if you can fix the issue, you will do it and try running again.\n\n"
                "Once you get a final answer, you can quit the work.\n\n"
                "kubectl is configured with the cluster's kubeconfig. Your workspace is the working directory of your tools.")
    if compliance.cls == "rhel9-opa":
        return ("I would like to check if the following condition is satisfied, given a host name `rhel9_servers`, on RHEL by "
                "using Ansible Playbook and OPA Rego policy\n"
                f"    {goal}\n\n"
                "To check the condition, do the following steps.\n"
                "- collect configuration from the RHEL host and save it locally. you can use ansible-playbook to do that.\n"
                "- check if the condition is met by using rego policy with the input given by the step above.\n\n"
                f"for those steps, you need to create ansible playbook `playbook.yml` and OPA rego policy `{POLICY_FILE}`.\n"
                f"The playbook must save the collected data as `{COLLECTED_FILE}` in the current working directory, and the "
                f"policy's `{REGO_QUERY}` must be true when the condition is satisfied and false when it is not.\n"
                "If you can fix the generated code, do it and run the fixed code again.\n"
                "Once you get a final answer, you can quit the work.\n\n"
                "The Ansible inventory file for the target RHEL server is `inventory.ansible.ini` in your workspace.")
    return (f"{goal}\n\nkubectl is configured with the cluster's kubeconfig; the resources in question are in namespace "
            f"{namespace!r}. Your workspace is the working directory of your tools.")


class CISOTask(Task):
    """A compliance scenario (``kind: ComplianceScenario``) on any backend; see the module doc."""

    def __init__(self, spec: ScenarioSpec) -> None:
        super().__init__(spec)
        self.compliance = _compliance(spec)
        self._backend: Backend | None = None
        self._api: Any = None
        self._case: ComplianceCase | None = None
        self._incident: Incident | None = None
        #: The policies as set-up deployed them (kyverno-update grades what changed).
        self._deployed: list[Obj] = []
        self._host: Any = None

    # -- set-up ----------------------------------------------------------------------------------
    def setup(self, backend: Backend, seed: int) -> Incident:
        self.close()
        case = draw_case(self.spec, seed)
        backend.start(self.spec, seed)
        self._backend = backend
        self._api = backend.admin_client()
        injected_at = backend.clock.now()
        log = [f"case {case.id} ({'compliant' if case.compliant else 'non-compliant'})"]
        objects = [*self.compliance.existing, *case.objects]
        log += [self._apply(dict(obj)) for obj in objects]
        self._deployed = [dict(o) for o in self.compliance.existing if o.get("kind") in ("ClusterPolicy", "Policy")]
        if self.compliance.host is not None:
            self._host = self._host_model(case)
            log.append(f"host {self.compliance.host}: {len(case.changes)} change(s)")
        backend.advance(CASE_SETTLE_SECONDS)
        self._case = case
        self._incident = Incident(injected_at=injected_at, started_at=backend.clock.now(), injection_log=tuple(log))
        return self._incident

    def _host_model(self, case: ComplianceCase) -> Any:
        from itbench_gym.hosts.model import HostModel
        from itbench_gym.paths import envs_dir

        assert self.compliance.host is not None
        return HostModel.load(envs_dir() / self.compliance.host / "host.yaml").apply(list(case.changes))

    def _apply(self, obj: Obj) -> str:
        """Create ``obj`` (in the scenario's namespace unless cluster-scoped) as the admin."""
        objects = dynamic.DynamicClient(self._api)
        try:
            resource = objects.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        except Exception as exc:  # discovery's ResourceNotFoundError and friends
            raise BackendError(f"scenario {self.spec.id}: the cluster serves no {obj['kind']} ({obj['apiVersion']}): {exc}") from None
        meta = dict(obj.get("metadata") or {})
        if resource.namespaced:
            meta.setdefault("namespace", self.spec.namespace)
        body = {**obj, "metadata": meta}
        try:
            resource.create(body=body, namespace=meta.get("namespace"))
        except ApiException as exc:
            raise BackendError(f"scenario {self.spec.id}: cannot create {obj['kind']} {meta.get('name')}: {exc.status} {exc.reason}: "
                               f"{(exc.body or '')[:300]}") from None
        where = f"{meta['namespace']}/" if resource.namespaced else ""
        return f"created {obj['kind']} {where}{meta.get('name')}"

    def prepare_workspace(self, workspace: Path) -> None:
        """rhel9-opa: the inventory of ``rhel9_servers`` the prompt names (ITBench's ``inventory.ansible.ini``)."""
        if self._host is not None:
            from itbench_gym.tools.ansible import write_inventory

            write_inventory(workspace, self._host)

    # -- the agent's side --------------------------------------------------------------------------
    def prompt(self, incident: Incident, tools: Sequence[Tool]) -> str:
        tool_lines = "\n".join(f"- {t.name}: {t.description}" for t in tools)
        return (prompt_goal(self.compliance, self.spec.namespace) + "\n\nWhen you are done, submit.\n\nTools:\n" + tool_lines)

    def example_actions(self) -> tuple[str, ...]:
        cls = self.compliance.cls
        if cls == "rhel9-opa":
            return ("list_files", "read_file inventory.ansible.ini", "opa eval -d policy.rego -i collected_data.json 'data.check.result'")
        return (f"kubectl get all -n {self.spec.namespace}", "kubectl get clusterpolicies", "kubectl get policyreports -A",
                "list_files")

    def default_tools(self) -> list[Tool]:
        from itbench_gym.tools import KubectlTool, KyvernoCliTool, OpaTool, WaitTool
        from itbench_gym.tools.submit import AssessmentSubmitTool
        from itbench_gym.tools.workspace_files import ListFilesTool, ReadFileTool, WriteFileTool

        files: list[Tool] = [WriteFileTool(), ReadFileTool(), ListFilesTool()]
        cls = self.compliance.cls
        if cls in ("kyverno", "kyverno-update"):
            return [KubectlTool(), *files, KyvernoCliTool(), WaitTool(), AssessmentSubmitTool()]
        if cls == "k8s-opa":
            from itbench_gym.tools.script import BashScriptTool

            return [KubectlTool(), *files, BashScriptTool(), OpaTool(), WaitTool(), AssessmentSubmitTool()]
        from itbench_gym.tools.ansible import AnsiblePlaybookTool

        return [*files, AnsiblePlaybookTool(lambda: self._host), OpaTool(), WaitTool(), AssessmentSubmitTool()]

    # -- grading -----------------------------------------------------------------------------------
    def evaluate(self, submission: Submission) -> CISOEvaluation:
        case, incident = self._case, self._incident
        if case is None or incident is None or self._api is None:
            raise RuntimeError("CISOTask.evaluate() needs a case: call setup() first")
        cls = self.compliance.cls
        workspace = submission.workspace
        tasks: dict[str, bool] = {"evidence_available": workspace is not None and workspace.is_dir() and any(workspace.iterdir())}
        if cls == "kyverno":
            assert case.target is not None
            verdict = grade_reports(self._list(REPORTS), case.target, case.compliant)
            tasks["generate_policy"] = _has_policy_file(workspace)
            tasks["generate_assessment_posture"] = verdict.passed
        elif cls == "kyverno-update":
            assert case.target is not None and self.compliance.policy is not None
            policies = self._list(POLICIES)
            result = grade_policy_result(self._list(REPORTS), case.target, self.compliance.policy, case.compliant)
            if case.compliant:
                graded = next((p for p in policies if (p.get("metadata") or {}).get("name") == self.compliance.policy), None)
                probed = grade_probes(graded, self.compliance.policy, self._probes())
                result = Verdict(result.passed and probed.passed, result.reasons + probed.reasons)
            kept = grade_unchanged(self._deployed, policies, self.compliance.unchanged_policies)
            verdict = Verdict(result.passed and kept.passed, result.reasons + kept.reasons)
            tasks["violation_detected" if not case.compliant else "compliance_confirmed"] = result.passed
            tasks["untouched_policies_unchanged"] = kept.passed
        else:
            verdict = self._grade_rego(workspace, case)
            tasks["fetcher_and_policy_present"] = workspace is not None and all(
                (workspace / f).is_file() for f in (FETCHERS[cls], POLICY_FILE))
        report = submission.report if isinstance(submission.report, Mapping) else {}
        claim = report.get("compliant")
        if isinstance(claim, bool):
            tasks["stated_posture_correct"] = claim == case.compliant
        ttp = submission.submitted_at - incident.started_at if submission.submitted_at is not None else None
        return CISOEvaluation(self.spec.id, cls, case.id, case.compliant, verdict.passed, verdict.reasons, tasks, ttp,
                              submission.submitted_at is not None, submission.report_error if submission.submitted_at is None else None)

    def _probes(self) -> list[Obj]:
        """The resources of the scenario's non-compliant cases, in its namespace (kyverno-update's probes)."""
        out = []
        for case in self.compliance.cases:
            if case.compliant or case.target is None:
                continue
            for obj in case.objects:
                meta = obj.get("metadata") or {}
                if (obj.get("kind"), meta.get("name")) == (case.target["kind"], case.target["name"]):
                    out.append({**obj, "metadata": {**meta, "namespace": meta.get("namespace", self.spec.namespace)}})
        return out

    def _list(self, plurals: Sequence[str]) -> list[Obj]:
        """Every object of the Kyverno / policy-report kinds named by plural, cluster-wide, as the admin."""
        objects = dynamic.DynamicClient(self._api)
        out: list[Obj] = []
        for plural in plurals:
            group = "wgpolicyk8s.io" if "report" in plural else "kyverno.io"
            try:
                resource = next(r for r in objects.resources.search(group=group, name=plural) if r.name == plural)
            except StopIteration:
                continue  # the cluster has no such kind (its engine is not installed): nothing reported
            out += [item.to_dict() for item in resource.get().items]
        return out

    def _grade_rego(self, workspace: Path | None, case: ComplianceCase) -> Verdict:
        """Run the agent's fetcher again from a clean copy of its artefacts, then its policy, as ITBench does."""
        fetcher = FETCHERS[self.compliance.cls]
        missing = [f for f in (fetcher, POLICY_FILE) if workspace is None or not (workspace / f).is_file()]
        if missing:
            return Verdict(False, (f"the workspace has no {' and no '.join(missing)}: nothing to evaluate",))
        assert workspace is not None
        with tempfile.TemporaryDirectory(prefix="itbench-ciso-grade-") as tmp:
            grading = Path(tmp)
            for name in (fetcher, POLICY_FILE):
                shutil.copyfile(workspace / name, grading / name)
            try:
                ran = self._run_fetcher(grading, fetcher)
            except (SandboxUnavailable, ScriptError) as exc:  # never run the agent's program without its sandbox
                return Verdict(False, (f"cannot run {fetcher}: {exc}",))
            if not (grading / COLLECTED_FILE).is_file():
                return Verdict(False, (f"the fetcher did not write {COLLECTED_FILE} ({ran})",))
            argv = ["--data", POLICY_FILE, "--input", COLLECTED_FILE, REGO_QUERY, "--format", "raw"]
            try:
                output, status = eval_command(grading, argv)
                if status != 0 and "rego_parse_error" in output:
                    # A Rego v0 policy (ITBench's examples are v0): OPA evaluates it with --v0-compatible.
                    output, status = eval_command(grading, [*argv, "--v0-compatible"])
            except (CommandLineError, ValueError) as exc:
                return Verdict(False, (f"opa eval could not run: {exc}",))
        return grade_rego_output(output, status, case.compliant, ran)

    def _run_fetcher(self, grading: Path, fetcher: str) -> str:
        """Run ``fetcher`` in ``grading`` in the agent's sandbox; a one-line account of how it ended."""
        assert self._backend is not None
        if fetcher == "script.sh":
            from itbench_gym.tools.script import run_script

            done = run_script(grading, fetcher, self._backend.endpoints)
        else:
            from itbench_gym.tools.ansible import run_playbook

            done = run_playbook(self._host, grading, fetcher)
        return f"{fetcher} exited with status {done.returncode}"

    def close(self) -> None:
        self._api = None  # the backend's client: the backend closes it


def _has_policy_file(workspace: Path | None) -> bool:
    """ITBench's ``generate_policy``: a Kyverno Policy or ClusterPolicy among the agent's YAML files."""
    if workspace is None or not workspace.is_dir():
        return False
    for path in [*workspace.glob("*.yaml"), *workspace.glob("*.yml")]:
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if any(isinstance(d, dict) and d.get("kind") in ("Policy", "ClusterPolicy") for d in docs):
            return True
    return False
