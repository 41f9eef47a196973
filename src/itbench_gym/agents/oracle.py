"""An agent that knows the scenario's ground truth and repairs its faults through the agent's tools.

It shows what a perfect run looks like and checks that every scenario is solvable with real
commands: it reads the objects with kubectl, undoes each catalogue fault with kubectl, waits for
the system to recover and submits the ground-truth report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import gymnasium as gym

from itbench_gym.env import ITBenchEnv
from itbench_gym.faults.catalogue import WAITER, catalogue
from itbench_gym.faults.context import restorable
from itbench_gym.spec import FaultRef, ScenarioSpec


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
    entities: dict[str, bool] = {}
    for group in gt["groups"]:
        if group["id"] in ids:
            # aliases name one entity by several groups: it is the root cause if any of them is
            entity = ids[group["id"]]
            entities[entity] = entities.get(entity, False) or bool(group.get("root_cause"))
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
    """Fixes the incident with one accepted mitigation, through the agent's own tools.

    ``mitigation`` names an entry of the spec's ``mitigations``; by default the first one. A
    mitigation runs its ``commands`` with the agent's kubectl, after reverting the faults' changes
    when it says ``revert_faults``. With ``mitigation="removal"`` (or a spec without mitigations)
    the oracle reverts the faults and restarts what the scenario's post-injection waiters restarted.
    Reverting replays the injection journal as an SRE would with kubectl: delete what the faults
    created, ``replace`` what they changed with its earlier state, ``create`` what they deleted; a
    change the agent's credentials may not undo fails as the command would, and so does the fix.
    """

    def __init__(self, env: gym.Env, *, settle_seconds: float = 120.0, mitigation: str | None = None) -> None:
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, ITBenchEnv):
            raise TypeError(f"OracleAgent plays ITBench envs, not {type(unwrapped).__name__}")
        self._env = unwrapped
        self._spec: ScenarioSpec = unwrapped.scenario
        self._settle = settle_seconds
        self._mitigation = self._choose(mitigation)
        self._plan: Generator[Any, dict[str, Any], None] = self._script()
        self._primed = False

    def _choose(self, name: str | None) -> Mapping[str, Any] | None:
        """The mitigation entry to apply; None for the faults' removal."""
        entries = self._spec.mitigations
        if name == REMOVAL or (name is None and not entries):
            return None
        if name is None:
            return entries[0]
        for entry in entries:
            if entry["id"] == name:
                return entry
        known = ", ".join([REMOVAL, *(e["id"] for e in entries)])
        raise ValueError(f"{self._spec.id}: no mitigation {name!r}; known: {known}")

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
        yield f"kubectl get pods -n {spec.namespace}"
        entry = self._mitigation
        if entry is None or entry.get("revert_faults"):
            yield from self._revert()
        if entry is None:
            for fault in _post_injection_restarts(spec.faults):
                obj = fault.args["kubernetesObject"]
                yield f"kubectl rollout restart {obj['kind'].lower()}/{obj['metadata']['name']} -n {obj['metadata']['namespace']}"
        else:
            for command in entry.get("commands", []):
                # Not ``yield from``: that would hand each command's observation to the list's iterator.
                _observation = yield command
        yield f"wait {self._settle:g}"
        yield {"tool": "submit", "args": ground_truth_report(spec)}

    def _revert(self) -> Generator[Any, dict[str, Any], None]:
        incident = self._env.incident
        for change in reversed(incident.journal if incident is not None else ()):
            ref = change.ref
            resource = _resource(ref.api_version, ref.kind)
            where = ["-n", ref.namespace] if ref.namespace else []
            if change.before is None:
                yield {"tool": "kubectl", "args": {"argv": ["delete", resource, ref.name, *where, "--ignore-not-found"]}}
                continue
            body = restorable(change.before)
            observation = yield {"tool": "kubectl", "args": {"argv": ["get", resource, ref.name, *where, "-o", "json"]}}
            if observation.get("exit_status") == 0:
                current = json.loads(observation["text"])
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                yield {"tool": "kubectl", "args": {"argv": ["replace", "-f", "-"], "stdin": json.dumps(body)}}
            else:
                yield {"tool": "kubectl", "args": {"argv": ["create", "-f", "-"], "stdin": json.dumps(body)}}


#: ``OracleAgent(mitigation=REMOVAL)``: revert the faults instead of applying a listed mitigation.
REMOVAL = "removal"


def _resource(api_version: str, kind: str) -> str:
    """kubectl's name for a kind, qualified by its group (``authorizationpolicy.security.istio.io``)."""
    group = api_version.rpartition("/")[0]
    return f"{kind.lower()}.{group}" if group else kind.lower()


def _post_injection_restarts(faults: Sequence[FaultRef]) -> list[FaultRef]:
    """The restart waiters that follow a fault: what made the fault take effect, and what a fix restarts again."""
    waiter = {fid for fid, d in catalogue().items() if d.category == WAITER}
    seen_fault = False
    out = []
    for fault in faults:
        if fault.id not in waiter:
            seen_fault = True
        elif seen_fault and fault.id == "restart-kubernetes-workload":
            out.append(fault)
    return out
