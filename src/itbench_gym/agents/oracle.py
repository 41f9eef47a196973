"""An agent that knows the scenario's ground truth and repairs its faults through the agent's tools.

It shows what a perfect run looks like and checks that every scenario is solvable with real
commands: it reads the objects with kubectl, undoes each catalogue fault with kubectl, waits for
the system to recover and submits the ground-truth report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from typing import Any

import gymnasium as gym

from itbench_gym.env import ITBenchEnv
from itbench_gym.paths import envs_dir
from itbench_gym.spec import FaultRef, ScenarioSpec
from itbench_gym.spec.appfacts import load_app_facts


def _plain_name(group: dict[str, Any]) -> str | None:
    """A group's object name, or None when only a regex describes it."""
    if group.get("name"):
        return str(group["name"])
    pattern = re.sub(r"\\b$", "", group.get("filter", [""])[0])
    return pattern if pattern and re.fullmatch(r"[a-z0-9-]+", pattern) else None


def ground_truth_report(spec: ScenarioSpec) -> dict[str, Any]:
    """The ground truth in the report shape the submit tool takes.

    A group described only by a regex (e.g. the Pods ``recommendation-.*``) is named through an
    alias that has a plain name (the Service ``recommendation``), as an SRE would name it.
    """
    gt = spec.ground_truth
    ids: dict[str, str] = {}
    for group in gt["groups"]:
        name = _plain_name(group)
        if name is not None:
            ids[group["id"]] = f"{group.get('namespace', spec.namespace)}/{group['kind']}/{name}"
    for alias in gt.get("aliases", []):
        named = next((ids[g] for g in alias if g in ids), None)
        for group_id in alias:
            if named is not None:
                ids.setdefault(group_id, named)
    entities = {ids[g["id"]]: bool(g.get("root_cause")) for g in gt["groups"] if g["id"] in ids}
    propagations = []
    for p in gt["propagations"]:
        if p["source"] in ids and p["target"] in ids and ids[p["source"]] != ids[p["target"]]:
            propagations.append(
                {"source": ids[p["source"]], "target": ids[p["target"]], "condition": p.get("condition", ""), "effect": p.get("effect", "")}
            )
    return {
        "entities": [{"id": entity, "root_cause": root} for entity, root in entities.items()],
        "propagations": propagations,
    }


class OracleAgent:
    def __init__(self, env: gym.Env, *, settle_seconds: float = 120.0) -> None:
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, ITBenchEnv):
            raise TypeError(f"OracleAgent plays ITBench envs, not {type(unwrapped).__name__}")
        self._spec: ScenarioSpec = unwrapped.scenario
        self._settle = settle_seconds
        self._plan: Generator[Any, dict[str, Any], None] = self._script()
        self._primed = False

    def reset(self, observation: dict[str, Any], info: dict[str, Any]) -> None:
        self._plan = self._script()
        self._primed = False

    def act(self, observation: dict[str, Any]) -> Any:
        """The next action; ``observation`` answers the previous one."""
        if not self._primed:
            self._primed = True
            return next(self._plan)
        return self._plan.send(observation)

    def _script(self) -> Generator[Any, dict[str, Any], None]:
        spec = self._spec
        ns = spec.namespace
        yield f"kubectl get pods -n {ns}"
        restarts: list[FaultRef] = []
        app_flags = load_app_facts(envs_dir() / spec.app).flags
        for fault in spec.faults:
            if fault.id == "opentelemetry-demo-feature-flag":
                if app_flags is None:
                    raise ValueError(f"{spec.id}: a feature-flag fault, but app {spec.app!r} declares no flags (app.yaml flags)")
                meta = fault.args["kubernetesObject"]["metadata"]
                observation = yield f"kubectl get configmap {meta['name']} -n {meta['namespace']} -o json"
                configmap = json.loads(observation["text"])
                flags = json.loads(configmap["data"][app_flags.key])
                flags["flags"][fault.args["flag"]["name"]]["defaultVariant"] = "off"
                patch = {"data": {app_flags.key: json.dumps(flags, indent=2)}}
                yield {"tool": "kubectl", "args": {"argv": ["patch", "configmap", meta["name"], "-n", meta["namespace"], "--type", "merge", "-p", json.dumps(patch)]}}
            elif fault.id == "restart-kubernetes-workload":
                restarts.append(fault)
        for fault in restarts:
            obj = fault.args["kubernetesObject"]
            yield f"kubectl rollout restart {obj['kind'].lower()}/{obj['metadata']['name']} -n {obj['metadata']['namespace']}"
        yield f"wait {self._settle:g}"
        yield {"tool": "submit", "args": ground_truth_report(spec)}
