"""Compliance (CISO) scenario files: ``kind: ComplianceScenario`` (``compliance.schema.json``).

Checked like SRE scenario files — the schema first, then what a schema cannot say: every scenario
has a compliant and a non-compliant case, each class has what its grading reads (a target resource
for the Kyverno classes, Kubernetes objects for the cluster classes, host changes for rhel9-opa, the
graded policy for kyverno-update), and the environments it names exist. Problems name the field.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itbench_gym.spec.model import (
    Answer,
    Budget,
    Complexity,
    ComplianceCase,
    ComplianceSpec,
    LoadOptions,
    Observability,
    ScenarioSpec,
)

if TYPE_CHECKING:
    import jsonschema

KIND = "ComplianceScenario"
SCHEMA_PATH = Path(__file__).with_name("compliance.schema.json")
#: Classes assessed on a Kubernetes cluster (the others on a host).
CLUSTER_CLASSES = ("kyverno", "k8s-opa", "kyverno-update")
#: Classes graded by a PolicyReport scoped to the case's target.
REPORT_CLASSES = ("kyverno", "kyverno-update")
#: Seconds the cluster runs before a seed's case is set up: kind's and Kyverno's pods ready.
SETTLE_SECONDS = 120.0


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return loaded


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema

    return jsonschema.Draft202012Validator(schema())


def is_compliance_document(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == KIND


def schema_errors(doc: Any) -> list[jsonschema.ValidationError]:
    return list(_validator().iter_errors(doc))


def semantic_problems(doc: dict[str, Any], envs: Path) -> list[tuple[str, str]]:
    """(field path, message) of what the schema cannot check; [] for a usable scenario."""
    out: list[tuple[str, str]] = []
    cls = doc["metadata"]["class"]
    cases = doc["cases"]
    if not any(c["compliant"] for c in cases) or all(c["compliant"] for c in cases):
        out.append(("cases", "needs at least one compliant and one non-compliant case (a correct agent must also confirm compliance)"))
    ids = [c["id"] for c in cases]
    for i, case in enumerate(cases):
        where = f"cases[{i}]"
        if ids.index(case["id"]) != i:
            out.append((f"{where}.id", f"duplicate case id {case['id']!r}"))
        if cls in CLUSTER_CLASSES and not case.get("objects"):
            out.append((f"{where}.objects", f"a {cls} case deploys Kubernetes objects; none given"))
        if cls == "rhel9-opa" and "changes" not in case:
            out.append((f"{where}.changes", "a rhel9-opa case says how the host differs from its model (an empty list: not at all)"))
        if cls in REPORT_CLASSES and "target" not in case:
            out.append((f"{where}.target", f"a {cls} case names the resource whose PolicyReport is graded"))
        if "target" in case and not any(_is(obj, case["target"]) for obj in case.get("objects") or []):
            out.append((f"{where}.target", f"{case['target']['kind']}/{case['target']['name']} is not one of the case's objects"))
    env = doc["environment"]
    env_dir = envs / env["env"]
    if not (env_dir / "cluster.yaml").is_file():
        out.append(("environment.env", f"no cluster environment {env['env']!r} (envs/{env['env']}/cluster.yaml)"))
    else:
        from itbench_gym.backends.sim.clustertwin import ClusterEnv, ClusterEnvError

        try:
            ClusterEnv.load(env_dir)
        except ClusterEnvError as exc:
            out.append(("environment.env", str(exc)))
    if cls == "rhel9-opa":
        if "host" not in env:
            out.append(("environment.host", "the rhel9-opa class assesses a host; name its model"))
        elif not (envs / env["host"] / "host.yaml").is_file():
            out.append(("environment.host", f"no host model {env['host']!r} (envs/{env['host']}/host.yaml)"))
    if cls == "kyverno-update":
        grading = doc.get("grading") or {}
        if "policy" not in grading:
            out.append(("grading.policy", "kyverno-update grades one existing policy's report on the target; name it"))
        existing = {o["metadata"]["name"] for o in doc.get("existing") or [] if o.get("kind") in ("ClusterPolicy", "Policy")}
        for j, name in enumerate(grading.get("unchanged_policies") or []):
            if name not in existing:
                out.append((f"grading.unchanged_policies[{j}]", f"{name!r} is not one of the existing policies ({', '.join(sorted(existing)) or 'none'})"))
        if grading.get("policy") is not None and grading["policy"] not in existing:
            out.append(("grading.policy", f"{grading['policy']!r} is not one of the existing policies"))
    return out


def _is(obj: dict[str, Any], target: dict[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return (obj.get("apiVersion"), obj.get("kind"), meta.get("name")) == (target["apiVersion"], target["kind"], target["name"]) \
        and ("namespace" not in target or meta.get("namespace", target["namespace"]) == target["namespace"])


def cluster_namespace(envs: Path, env: str) -> str:
    """The namespace a cluster environment's scenarios work in (its ``cluster.yaml``)."""
    from itbench_gym.backends.sim.clustertwin import ClusterEnv

    return ClusterEnv.load(envs / env).namespace


def build(doc: dict[str, Any], source: Path, envs: Path) -> ScenarioSpec:
    """The spec of a checked compliance document."""
    meta, env = doc["metadata"], doc["environment"]
    namespace = cluster_namespace(envs, env["env"])
    grading = doc.get("grading") or {}
    compliance = ComplianceSpec(
        cls=meta["class"],
        benchmark=meta["control"]["benchmark"],
        control=meta["control"]["id"],
        title=meta["control"]["title"],
        goal=doc["goal"].strip(),
        cases=tuple(ComplianceCase(c["id"], bool(c["compliant"]), float(c.get("weight", 1.0)),
                                   tuple(c.get("objects") or ()), tuple(c.get("changes") or ()),
                                   {"namespace": namespace, **c["target"]} if "target" in c else None)
                    for c in doc["cases"]),
        oracle=_answer(doc["oracle"]),
        wrong=_answer(doc["wrong"]),
        existing=tuple(doc.get("existing") or ()),
        host=env.get("host"),
        policy=grading.get("policy"),
        unchanged_policies=tuple(grading.get("unchanged_policies") or ()),
        itbench_scenario=meta.get("itbench_scenario"),
    )
    return ScenarioSpec(
        id=meta["id"],
        name=meta["name"],
        description=meta["description"].strip(),
        domain="ciso",
        task="ciso",
        cls=meta["class"],
        complexity=Complexity(meta["complexity"]),
        app=env["env"],
        namespace=namespace,
        observability=Observability(metrics=False, logs=False, traces=False),
        load=LoadOptions(),
        baseline_seconds=SETTLE_SECONDS,
        faults=(),
        triggering_alerts=(),
        alert_wait_timeout=0.0,
        ground_truth={},
        mitigations=(),
        desired_outcome={"assessment": f"The compliance posture of '{compliance.title}' as the case sets it up."},
        budget=Budget(max_steps=doc["budget"]["max_steps"], max_sim_seconds=float(doc["budget"]["max_sim_seconds"])),
        source=source,
        tags=tuple(meta.get("tags", [])),
        compliance=compliance,
    )


def _answer(raw: dict[str, Any]) -> Answer:
    return Answer(dict(raw["files"]), tuple(raw["actions"]))
