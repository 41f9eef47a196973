"""The CISO scenario library (``scenario_specs/ciso``), checked offline with the project's own engines.

Every file is a valid compliance scenario, and its answers grade as they claim: the oracle's Kyverno
policy fails each non-compliant case's target and passes the compliant one, its kubectl script and Rego
policy print ``false`` and ``true`` on what the script would collect, and the wrong answer misses at
least one violation (or, for kyverno-update, edits a policy that must stay as it was).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from itbench_gym.evaluation.ciso import Verdict, grade_policy_result, grade_reports, grade_unchanged
from itbench_gym.paths import envs_dir, specs_dir
from itbench_gym.policy.kyverno import Admission, evaluate_policy, load_policy
from itbench_gym.spec import compliance
from itbench_gym.tools.opa import eval_command

Obj = dict[str, Any]

LIBRARY = specs_dir() / "ciso"
NAMESPACE = "paa"
#: ``kubectl get`` resource names a fetcher script may list, and the kinds they print.
LISTED_KINDS = {"pods": "Pod", "deployments": "Deployment", "replicasets": "ReplicaSet", "statefulsets": "StatefulSet",
                "daemonsets": "DaemonSet", "jobs": "Job", "cronjobs": "CronJob"}
FETCH = re.compile(rf"^kubectl get ([a-z,]+) -n {NAMESPACE} -o json > collected_data\.json$")
OPA_ACTIONS = ("bash script.sh", "opa eval -d policy.rego -i collected_data.json 'data.check.result' --format raw")
REGO_ARGV = ["--data", "policy.rego", "--input", "collected_data.json", "data.check.result", "--format", "raw"]
ANNOTATIONS = ("policies.kyverno.io/title", "policies.kyverno.io/category", "policies.kyverno.io/severity")
TOKEN_VOLUME = "kube-api-access"
#: Each Kubernetes class's id and file-name prefixes, and its complexity.
PREFIXES = {"kyverno": ("CISO-Kyverno-", "kyverno-", "easy"), "k8s-opa": ("CISO-K8sOPA-", "k8s-opa-", "medium"),
            "kyverno-update": ("CISO-KyvernoUpdate-", "kyverno-update-", "hard")}


def _library() -> dict[str, list[Path]]:
    """The library's files of the Kubernetes classes, by class."""
    by_class: dict[str, list[Path]] = {cls: [] for cls in PREFIXES}
    for path in sorted(LIBRARY.glob("*.yaml")):
        cls = yaml.safe_load(path.read_text())["metadata"]["class"]
        if cls in by_class:
            by_class[cls].append(path)
    return by_class


FILES = _library()


def _params(cls: str) -> list[Any]:
    return [pytest.param(path, id=path.name) for path in FILES[cls]]


def _doc(path: Path) -> Obj:
    loaded: Obj = yaml.safe_load(path.read_text())
    return loaded


def _policies(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


# -- what the cluster holds ----------------------------------------------------------------------

def _created_pod_spec(spec: Obj) -> Obj:
    """A pod spec as the API server stores it: default service account and, unless the pod opts out, its token volume."""
    out = copy.deepcopy(spec)
    out.setdefault("serviceAccountName", "default")
    out.setdefault("securityContext", {})
    if out.get("automountServiceAccountToken") is not False:
        out["volumes"] = [*out.get("volumes", []), {"name": TOKEN_VOLUME, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]
        mount = {"name": TOKEN_VOLUME, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}
        for container in [*out.get("initContainers", []), *out["containers"]]:
            container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    return out


def _created(obj: Obj) -> Obj:
    """The object as set-up creates it in the scenario's namespace."""
    out = copy.deepcopy(obj)
    out["metadata"] = {**out["metadata"], "namespace": NAMESPACE}
    if out["kind"] == "Pod":
        out["spec"] = _created_pod_spec(out["spec"])
    return out


def _owned(owner: Obj, kind: str, api_version: str, name: str, template: Obj) -> Obj:
    meta = {"name": name, "namespace": NAMESPACE, "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"]}]}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _created_pod_spec(template["spec"])}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {"replicas": 1, "template": copy.deepcopy(template)}}


def _children(obj: Obj) -> list[Obj]:
    """What the controllers make of ``obj`` within the case's settle time (a CronJob's daily schedule: nothing yet)."""
    name, kind = obj["metadata"]["name"], obj["kind"]
    if kind == "Deployment":
        replica_set = _owned(obj, "ReplicaSet", "apps/v1", f"{name}-5d9c7b8f6", obj["spec"]["template"])
        return [replica_set, _owned(replica_set, "Pod", "v1", f"{name}-5d9c7b8f6-x2x7k", obj["spec"]["template"])]
    if kind in ("StatefulSet", "DaemonSet", "Job"):
        suffix = {"StatefulSet": "0", "DaemonSet": "k8v4q", "Job": "m4z9t"}[kind]
        return [_owned(obj, "Pod", "v1", f"{name}-{suffix}", obj["spec"]["template"])]
    return []


def _collected(objects: Iterable[Obj], resources: list[str]) -> Obj:
    """What ``kubectl get <resources> -n paa -o json`` prints once the case is set up."""
    kinds = [LISTED_KINDS[r] for r in resources]
    everything = [o for obj in objects for o in (_created(obj), *_children(obj))]
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": [o for kind in kinds for o in everything if o["kind"] == kind]}


def _target(case: Obj) -> Obj:
    target = case["target"]
    obj = next(o for o in case["objects"]
               if (o["apiVersion"], o["kind"], o["metadata"]["name"]) == (target["apiVersion"], target["kind"], target["name"]))
    return _created(obj)


def _statuses(policy: Obj, resource: Obj) -> set[str]:
    """The results a background scan of ``policy`` records for ``resource``."""
    return {r.status for r in evaluate_policy(load_policy(policy), resource, Admission(), {}, {}) if r.matched}


def _scope(case: Obj) -> dict[str, str]:
    return {**case["target"], "namespace": NAMESPACE}


def _reports(policies: Iterable[Obj], resource: Obj) -> list[Obj]:
    """The PolicyReport Kyverno's background scan writes for ``resource`` with ``policies`` deployed."""
    meta = resource["metadata"]
    results = [{"policy": p["metadata"]["name"], "rule": r.rule, "result": r.status}
               for p in policies for r in evaluate_policy(load_policy(p), resource, Admission(), {}, {}) if r.matched]
    summary = {status: sum(r["result"] == status for r in results) for status in ("pass", "fail", "warn", "error", "skip")}
    scope = {"apiVersion": resource["apiVersion"], "kind": resource["kind"], "namespace": meta["namespace"], "name": meta["name"]}
    return [{"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport", "scope": scope, "summary": summary, "results": results}]


def _update_verdict(doc: Obj, deployed: list[Obj], case: Obj) -> Verdict:
    """kyverno-update's grade of ``case`` with ``deployed`` as the cluster's policies."""
    result = grade_policy_result(_reports(deployed, _target(case)), _scope(case), doc["grading"]["policy"], case["compliant"])
    kept = grade_unchanged(doc["existing"], deployed, doc["grading"]["unchanged_policies"])
    return Verdict(result.passed and kept.passed, result.reasons + kept.reasons)


def _applied(existing: list[Obj], text: str) -> list[Obj]:
    """The cluster's policies after ``kubectl apply -f`` of ``text``."""
    applied = {p["metadata"]["name"]: p for p in _policies(text)}
    return [applied.pop(p["metadata"]["name"], p) for p in existing] + list(applied.values())


# -- every file --------------------------------------------------------------------------------

def test_each_class_has_its_library() -> None:
    assert len(FILES["kyverno"]) >= 11 and len(FILES["k8s-opa"]) >= 10 and len(FILES["kyverno-update"]) >= 10


@pytest.mark.parametrize("path", [p for paths in FILES.values() for p in paths], ids=lambda p: p.name)
def test_the_file_is_a_usable_compliance_scenario(path: Path) -> None:
    doc = _doc(path)
    assert compliance.schema_errors(doc) == []
    problems = [p for p in compliance.semantic_problems(doc, envs_dir())
                if not (p[0] == "environment.env" and "cluster/kyverno.yaml" in p[1])]
    assert problems == []
    cls, meta = doc["metadata"]["class"], doc["metadata"]
    prefix, file_prefix, complexity = PREFIXES[cls]
    assert meta["id"].startswith(prefix) and path.name.startswith(file_prefix) and meta["complexity"] == complexity
    if cls != "kyverno-update":
        assert meta["id"] == f"{prefix}{meta['control']['id']}-v0"
        assert path.name.startswith(f"{cls}-{meta['control']['id']}-")


def test_scenario_ids_are_unique() -> None:
    ids = [_doc(p)["metadata"]["id"] for paths in FILES.values() for p in paths]
    assert len(ids) == len(set(ids))


# -- kyverno --------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", _params("kyverno"))
def test_kyverno_oracle_detects_every_violation_and_confirms_compliance(path: Path) -> None:
    doc = _doc(path)
    [policy] = _policies(doc["oracle"]["files"]["policy.yaml"])
    spec = policy["spec"]
    assert policy["kind"] == "ClusterPolicy" and spec["validationFailureAction"] == "Audit" and spec["background"] is True
    assert all(key in policy["metadata"]["annotations"] for key in ANNOTATIONS)
    assert all(rule["match"] == {"any": [{"resources": {"kinds": ["Pod"]}}]} for rule in spec["rules"])
    assert doc["oracle"]["actions"][0] == "kubectl apply -f policy.yaml"
    for case in doc["cases"]:
        verdict = grade_reports(_reports([policy], _target(case)), _scope(case), case["compliant"])
        assert verdict.passed, f"case {case['id']}: {verdict.reasons}"


@pytest.mark.parametrize("path", _params("kyverno"))
def test_kyverno_wrong_answer_misses_a_violation(path: Path) -> None:
    doc = _doc(path)
    [policy] = _policies(doc["wrong"]["files"]["policy.yaml"])
    missed = [c["id"] for c in doc["cases"] if not c["compliant"] and not grade_reports(_reports([policy], _target(c)), _scope(c), False).passed]
    assert missed, "the wrong policy detects every violation"


# -- k8s-opa -----------------------------------------------------------------------------------------

def _rego_result(workspace: Path, answer: Obj, case: Obj) -> str:
    """Run the answer's fetcher (as the cluster would answer it) and its policy, as the grader does."""
    script = answer["files"]["script.sh"]
    assert "--kubeconfig" not in script
    commands = [line for line in script.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 1, commands
    fetch = FETCH.match(commands[0])
    assert fetch, commands[0]
    (workspace / "collected_data.json").write_text(json.dumps(_collected(case["objects"], fetch.group(1).split(","))))
    (workspace / "policy.rego").write_text(answer["files"]["policy.rego"])
    output, status = eval_command(workspace, REGO_ARGV)
    if status != 0 and "rego_parse_error" in output:
        output, status = eval_command(workspace, [*REGO_ARGV, "--v0-compatible"])
    assert status == 0, output
    return output.strip()


@pytest.mark.parametrize("path", _params("k8s-opa"))
def test_opa_oracle_is_false_for_violations_and_true_for_compliance(path: Path, tmp_path: Path) -> None:
    doc = _doc(path)
    actions = doc["oracle"]["actions"]
    assert (actions[0], actions[1].removesuffix(" --v0-compatible")) == OPA_ACTIONS  # the flag for a Rego v0 policy
    rego = doc["oracle"]["files"]["policy.rego"]
    assert rego.startswith("package check\n")
    for case in doc["cases"]:
        got = _rego_result(tmp_path, doc["oracle"], case)
        assert got == ("true" if case["compliant"] else "false"), f"case {case['id']}: data.check.result is {got}"


@pytest.mark.parametrize("path", _params("k8s-opa"))
def test_opa_wrong_answer_calls_a_violation_compliant(path: Path, tmp_path: Path) -> None:
    doc = _doc(path)
    fooled = [c["id"] for c in doc["cases"] if not c["compliant"] and _rego_result(tmp_path, doc["wrong"], c) == "true"]
    assert fooled, "the wrong answer finds every violation"


def test_opa_oracles_use_both_rego_syntaxes() -> None:
    heads = {"v1" if "default result := false" in _doc(p)["oracle"]["files"]["policy.rego"] else "v0" for p in FILES["k8s-opa"]}
    assert heads == {"v0", "v1"}


# -- kyverno-update -----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", _params("kyverno-update"))
def test_update_cases_violate_only_the_new_requirements(path: Path) -> None:
    doc = _doc(path)
    for policy in doc["existing"]:
        assert policy["spec"].get("validationFailureAction", "Audit") == "Audit" and policy["spec"].get("background", True) is True
    for case in doc["cases"]:
        target = _target(case)
        for policy in doc["existing"]:
            assert _statuses(policy, target) == {"pass"}, f"case {case['id']}: existing {policy['metadata']['name']} gives {_statuses(policy, target)}"
        if not case["compliant"]:
            assert not _update_verdict(doc, doc["existing"], case).passed, f"case {case['id']}: passes with no edit"


@pytest.mark.parametrize("path", _params("kyverno-update"))
def test_update_oracle_edits_the_graded_policy_in_place(path: Path) -> None:
    doc = _doc(path)
    [policy] = _policies(doc["oracle"]["files"]["policy.yaml"])
    assert policy["kind"] == "ClusterPolicy" and policy["metadata"]["name"] == doc["grading"]["policy"]
    assert doc["oracle"]["actions"][0] == "kubectl apply -f policy.yaml"
    deployed = _applied(doc["existing"], doc["oracle"]["files"]["policy.yaml"])
    for case in doc["cases"]:
        verdict = _update_verdict(doc, deployed, case)
        assert verdict.passed, f"case {case['id']}: {verdict.reasons}"


@pytest.mark.parametrize("path", _params("kyverno-update"))
def test_update_wrong_answer_grades_wrong(path: Path) -> None:
    doc = _doc(path)
    deployed = _applied(doc["existing"], doc["wrong"]["files"]["policy.yaml"])
    assert [c["id"] for c in doc["cases"] if not c["compliant"] and not _update_verdict(doc, deployed, c).passed]
