"""An agent that knows the scenario's ground truth and repairs its faults through the agent's tools.

It shows what a perfect run looks like and checks that every scenario is solvable with real
commands. It applies one accepted mitigation of the spec (``mitigation`` names it; by default the
first): its ``commands`` with the agent's kubectl, after reverting the faults' changes when the entry
says ``revert_faults``. With ``mitigation="removal"``, for a spec without mitigations, or for an entry
that only says ``revert_faults`` (an imported ITBench scenario's ``remove-faults``), the fix is the faults' removal as an SRE would do it with the agent's kubectl: for
each object the injection changed (the incident's journal, newest first) it puts back the object as
it was (``kubectl replace``/``create -f -``) or deletes what the injection created; then it restarts
those of the workloads the scenario's restart waiters restarted whose pods read a reverted ConfigMap
or Secret (their processes copied it at start: flagd's flag file) — restarting others would only cost
a cold start (a JVM's JIT warm-up) —, waits, and restarts the Deployments that are still not
available (pods left in back-off by the incident). Either way it then waits until the system has
recovered (the triggering alerts quiet, every service's p95 latency near its baseline and its
request rate above the graded floor: :meth:`OracleAgent._recovered`) and submits the ground-truth report. Objects the agent's credential
cannot reach (the injection machinery: Chaos Mesh) stay as they are and are listed in
:attr:`OracleAgent.unreachable`: such a scenario's mitigation is not the agent's to make. A compliance
(CISO) scenario's oracle is its spec's own answer, played by :class:`~itbench_gym.agents.answer.AnswerAgent`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Mapping
from typing import Any

import gymnasium as gym

from itbench_gym.agents.answer import AnswerAgent
from itbench_gym.agents.base import Observation, ScriptedAgent
from itbench_gym.env import ITBenchEnv
from itbench_gym.faults.context import Change, restorable
from itbench_gym.paths import envs_dir
from itbench_gym.spec import ScenarioSpec
from itbench_gym.spec.appfacts import load_app_facts
from itbench_gym.tasks.sre import template_refs

#: The waiter whose targets the oracle restarts after the removal.
RESTART_WAITER = "restart-kubernetes-workload"
#: After the fix, the oracle waits (in polls) until the system has recovered, at most this long.
MAX_RECOVERY_SECONDS = 900.0
RECOVERY_POLL_SECONDS = 60.0
RECOVERY_WINDOW_SECONDS = 150.0
#: "Recovered": every service's p95 latency within this factor and margin of its baseline.
RECOVERED_LATENCY_FACTOR = 1.5
RECOVERED_LATENCY_MS = 25.0
#: A FinOps fix settles after recovery: an autoscaler scales down only after its 5-minute stabilisation
#: window, a few pods a minute, and OpenCost's cost rules average over 5 minutes.
FINOPS_SETTLE_SECONDS = 600.0


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


def cost_report(spec: ScenarioSpec) -> dict[str, Any]:
    """The ground truth's root causes in ITBench's FinOps report shape (``{"resource": [{"name", "type"}]}``)."""
    named = ground_truth_report(spec)["entities"]
    resources = []
    for entity in named:
        if entity["root_cause"]:
            _namespace, kind, name = str(entity["id"]).split("/", 2)
            resources.append({"name": name, "type": kind})
    return {"resource": resources}


def _resource(change: Change) -> str:
    """kubectl's fully qualified resource name of the changed object's kind (``deployment.apps``)."""
    group = change.ref.api_version.rpartition("/")[0]
    return f"{change.ref.kind.lower()}.{group}" if group else change.ref.kind.lower()


def _where(change: Change) -> list[str]:
    return ["-n", change.ref.namespace] if change.ref.namespace else []


class OracleAgent(ScriptedAgent):
    #: It reads the ground truth and the injection journal: not a baseline an honest agent is ranked against.
    privileged = True

    def __init__(self, env: gym.Env, *, settle_seconds: float = 120.0, mitigation: str | None = None) -> None:
        super().__init__()
        unwrapped = env.unwrapped
        if not isinstance(unwrapped, ITBenchEnv):
            raise TypeError(f"OracleAgent plays ITBench envs, not {type(unwrapped).__name__}")
        self._env = unwrapped
        self._spec: ScenarioSpec = unwrapped.scenario
        self._settle = settle_seconds
        self._mitigation = self._choose(mitigation)
        #: Changed objects the agent's credential could not revert (left as they are).
        self.unreachable: list[str] = []

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

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        super().reset(task_prompt, tool_specs)
        self.unreachable = []

    def script(self) -> Generator[Any, Observation, None]:
        spec = self._spec
        if spec.compliance is not None:  # a CISO scenario: its spec's oracle answer
            yield from AnswerAgent(spec.compliance.oracle).script()
            return
        yield f"kubectl get pods -n {spec.namespace}"
        entry = self._mitigation
        if entry is None or entry.get("revert_faults"):
            yield from self._revert_all()
            yield from self._forced_rollbacks()
        if entry is None or not entry.get("commands"):
            yield from self._restart_after_removal()
        else:
            for command in entry.get("commands", []):
                # Not ``yield from``: that would hand each command's observation to the list's iterator.
                _observation = yield command
            yield f"wait {self._settle:g}"
        waited = 0.0
        while waited < MAX_RECOVERY_SECONDS and not self._recovered():
            yield f"wait {RECOVERY_POLL_SECONDS:g}"
            waited += RECOVERY_POLL_SECONDS
        if spec.task == "finops":  # the autoscalers scale down, then the 5-minute cost averages follow
            yield f"wait {FINOPS_SETTLE_SECONDS:g}"
        yield {"tool": "submit", "args": cost_report(spec) if spec.task == "finops" else ground_truth_report(spec)}

    def _revert_all(self) -> Generator[Any, dict[str, Any], None]:
        incident = self._env.incident
        for change in reversed(incident.journal if incident is not None else ()):
            if not (yield from self._revert(change)):
                self.unreachable.append(str(change.ref))
            elif change.ref.kind == "HorizontalPodAutoscaler" and change.before is not None:
                yield from self._rescale(change.before)

    def _forced_rollbacks(self) -> Generator[Any, dict[str, Any], None]:
        """A StatefulSet whose template is reverted still waits for the pods of the bad one to become
        Ready, which they never do: Kubernetes' StatefulSet docs ("Forced rollback") say to delete them,
        and the set recreates them from the reverted template."""
        incident = self._env.incident
        for change in incident.journal if incident is not None else ():
            labels = (((change.before or {}).get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            if change.ref.kind != "StatefulSet" or not labels:
                continue
            listed = yield {"tool": "kubectl", "args": {"argv": [
                "get", "pods", *_where(change), "-l", ",".join(f"{k}={v}" for k, v in sorted(labels.items())), "-o",
                'jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}']}}
            rows = [line.split() for line in listed["text"].splitlines() if line.strip()] if listed["exit_status"] == 0 else []
            stuck = [row[0] for row in rows if row[1:] != ["True"]]
            if stuck:
                yield {"tool": "kubectl", "args": {"argv": ["delete", "pod", *stuck, *_where(change)]}}

    def _rescale(self, autoscaler: Mapping[str, Any]) -> Generator[Any, dict[str, Any], None]:
        """Put an autoscaler's workload back at the autoscaler's minimum once its settings are restored: an
        autoscaler never scales down while one of its metrics is invalid (a CPU target on containers without
        CPU requests), so the replicas a fault made would otherwise stay; from the minimum it scales out again
        as the load needs."""
        spec = autoscaler.get("spec") or {}
        target = spec.get("scaleTargetRef") or {}
        if target.get("kind") and target.get("name"):
            namespace = (autoscaler.get("metadata") or {}).get("namespace") or self._spec.namespace
            yield (f"kubectl scale {str(target['kind']).lower()}/{target['name']} --replicas={int(spec.get('minReplicas') or 1)} "
                   f"-n {namespace}")

    def _restart_after_removal(self) -> Generator[Any, dict[str, Any], None]:
        spec, incident = self._spec, self._env.incident
        reverted = {(c.ref.kind, c.ref.name) for c in incident.journal} if incident is not None else set()
        facts = load_app_facts(envs_dir() / spec.app)
        for fault in spec.faults:
            if fault.id != RESTART_WAITER:
                continue
            obj = fault.args["kubernetesObject"]
            meta = obj["metadata"]
            manifest = facts.find(obj["kind"], meta["namespace"], meta["name"])
            template = ((manifest.body.get("spec") or {}).get("template") or {}) if manifest is not None else {}
            if template_refs(template) & reverted:  # its processes read the reverted object at start
                yield f"kubectl rollout restart {obj['kind'].lower()}/{meta['name']} -n {meta['namespace']}"
        yield f"wait {self._settle:g}"
        listed = yield {"tool": "kubectl", "args": {"argv": [
            "get", "deployments", "-n", spec.namespace, "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.replicas} {.status.availableReplicas}{\"\\n\"}{end}"]}}
        # "<name> <replicas> <available>"; kubectl prints nothing for an unset availableReplicas: 0.
        rows = [f"{line} 0".split()[:3] for line in listed["text"].splitlines() if line.strip()] if listed["exit_status"] == 0 else []
        stuck = [name for name, wanted, available in rows if int(available) < int(wanted)]
        if stuck:  # pods still in back-off from the incident: start them afresh
            yield f"kubectl rollout restart {' '.join(f'deployment/{name}' for name in stuck)} -n {spec.namespace}"
            yield f"wait {self._settle:g}"

    def _recovered(self) -> bool:
        """Whether the triggering alerts are quiet and every service's p95 latency and request rate are
        back near its baseline (the dashboards an SRE watches after a fix; a cold JVM takes minutes to
        warm up, and a queue's consumers or a page's callees serve a trickle until users come back)."""
        from itbench_gym.evaluation.mitigation import Tolerances, service_dropped
        from itbench_gym.tasks.sre import ClusterProbe

        incident, facts = self._env.incident, load_app_facts(envs_dir() / self._spec.app)
        if incident is None or incident.baseline is None or facts.edge is None:
            return True
        probe = ClusterProbe(self._spec, self._env.backend, facts.edge, facts.golden_signals, facts.flags)
        try:
            firing = probe.firing_alerts()
            signals = probe.service_signals(RECOVERY_WINDOW_SECONDS)
        finally:
            probe.close()
        standing = {frozenset(a.items()) for a in incident.baseline.alerts}
        if any(m.matches(a) for m in self._spec.triggering_alerts for a in firing if frozenset(a.items()) not in standing):
            return False
        graded = Tolerances()
        for name, before in incident.baseline.services.items():
            now = signals.get(name)
            if now is not None and now.p95_ms > before.p95_ms * RECOVERED_LATENCY_FACTOR + RECOVERED_LATENCY_MS:
                return False
            if before.rate >= graded.min_rate and service_dropped(incident.baseline, name, now, RECOVERY_WINDOW_SECONDS, graded):
                return False
        return True

    def _revert(self, change: Change) -> Generator[Any, dict[str, Any], bool]:
        """Put one object back with the agent's kubectl; False when the agent cannot reach it."""
        name = [_resource(change), change.ref.name, *_where(change)]
        found = yield {"tool": "kubectl", "args": {"argv": ["get", *name, "-o", "name"]}}
        exists = found["exit_status"] == 0
        if not exists and not _not_found(found["text"]):
            return False
        if change.before is None:
            if not exists:
                return True
            done = yield {"tool": "kubectl", "args": {"argv": ["delete", *name]}}
        else:
            verb = "replace" if exists else "create"
            done = yield {"tool": "kubectl", "args": {"argv": [verb, "-f", "-"], "stdin": json.dumps(restorable(change.before))}}
        return bool(done["exit_status"] == 0)


#: ``OracleAgent(mitigation=REMOVAL)``: revert the faults instead of applying a listed mitigation.
REMOVAL = "removal"


def _not_found(text: str) -> bool:
    """kubectl's answer for an object that does not exist (not: a resource type it cannot see)."""
    return bool(re.search(r"\(NotFound\).* not found", text)) and "the server doesn't have a resource type" not in text
