"""The proof that one scenario behaves, per seed: five checks on the twin, each failure with its reason.

1. **Alerts**: ``reset`` brings the triggering alerts within the scenario's wait (else it raises).
2. **Symptoms**: when they fire, the root cause and every propagation target show a symptom (:func:`symptoms`).
3. **Oracle**: the oracle agent (the fault's removal with the agent's kubectl; see
   :mod:`itbench_gym.agents.oracle`) passes the whole evaluation.
4. **No-op**: submitting the right diagnosis and doing nothing fails the mitigation check.
5. **Wrong fix**: restarting the alerting service (:func:`wrong_fix_target`) and submitting fails it too.

A symptom, for an entity of the ground truth (a class of aliased groups shows one when any member does):

- a workload's entity (its Pods, Deployment, Service, the telemetry service of that name): pods not
  running, not Ready, waiting or restarted since the injection; fewer available replicas than desired; against the
  baseline, its request error ratio, p95 latency or request rate changed (for a service without
  telemetry of its own, a broker: those of a caller or callee); its callers' own record of their calls
  to it (``golden_signals.client_calls``) shows them failing more or slower (a fault on the path into
  it leaves its own series as they were); fewer connections opened to it (the
  app's ``golden_signals.connections``: a mesh's L4 proxies), or its containers' CPU or memory use
  rose against what they used at the injection (:data:`THRESHOLDS`); or its pods read a ConfigMap or
  Secret the injection changed;
- any other object (ConfigMap, Schedule, NetworkPolicy, ...): the injection created or changed it;
- any entity: an alert the ground truth ties to its group (``alerts[].group_id``) is firing;
- ITBench's non-object kinds (``ServiceOperation``, ``Port``) cannot be observed this way: noted, not failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from itbench_gym.validate.triggering import INDEX_NOTE

if TYPE_CHECKING:
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.spec import ScenarioSpec
    from itbench_gym.spec.appfacts import CallCounterFact, GoldenSignalsFact
    from itbench_gym.tasks.sre import ClusterProbe

#: Seconds the wrong fix lets pass before submitting (as long as the oracle's settling).
WRONG_FIX_SETTLE_SECONDS = 120.0
#: Relative and absolute changes against the baseline that count as a symptom.
THRESHOLDS = {"error_ratio_abs": 0.01, "latency_factor": 1.5, "latency_abs_ms": 20.0, "rate_drop": 0.5, "rate_rise": 2.0,
              "cpu_factor": 1.5, "cpu_abs_cores": 0.01, "memory_factor": 1.3, "memory_abs_bytes": 10 * 2**20}
#: Per-container resource use (cAdvisor), compared at the injection and now.
_RESOURCES = {
    "cpu": "sum by (container) (rate(container_cpu_usage_seconds_total{{namespace={ns!r}}}[5m]))",
    "memory": "sum by (container) (container_memory_working_set_bytes{{namespace={ns!r}}})",
}
_WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")


@dataclass(frozen=True)
class SeedResult:
    seed: int
    problems: tuple[str, ...]
    notes: tuple[str, ...] = ()
    #: Simulated seconds from the injection to the triggering alerts (None when they never fired).
    alerts_after: float | None = None
    wall_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class ScenarioResult:
    """Every seed's outcome for one scenario, or why it was not run."""

    id: str
    #: "passed", "failed", "unsupported" (cannot run in this installation), "invalid" (a bad spec) or
    #: "error" (the twin itself raised: ``validate.run``).
    status: str
    reason: str = ""
    seeds: tuple[SeedResult, ...] = ()
    info: Mapping[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The one line ``itbench-gym validate`` prints for it."""
        took = sum(s.wall_seconds for s in self.seeds)
        head = f"{self.status.upper():11} {self.id}"
        notes = sorted({n for s in self.seeds for n in s.notes})
        discrepancies = [str(d) for d in self.info.get("discrepancies") or ()]
        notes += [d for d in discrepancies if d.startswith(INDEX_NOTE)]  # the index's alerts replaced: said in the line
        count = sum(1 for d in discrepancies if not d.startswith(INDEX_NOTE))
        if count:
            notes.append(f"{count} discrepanc{'ies' if count != 1 else 'y'} in the library's ground truth (--results lists them)")
        extra = f" — note: {'; '.join(notes)}" if notes else ""
        if self.status == "passed":
            return f"{head} ({len(self.seeds)} seed(s), {took:.0f} s){extra}"
        return f"{head}: {self.reason}{extra}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "reason": self.reason, **self.info,
                "seeds": [{"seed": s.seed, "passed": s.passed, "problems": list(s.problems), "notes": list(s.notes),
                           "alerts_after_seconds": s.alerts_after} for s in self.seeds]}


def validate_scenario(target: str, seeds: Sequence[int]) -> ScenarioResult:
    """Run every check on every seed of a scenario (an id, or a spec file's path); never raises for
    the scenario's own faults."""
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.registry import UnsupportedScenarioError, get_spec, library_entry
    from itbench_gym.spec import SpecError, load_spec

    try:
        spec = load_spec(target) if target.endswith((".yaml", ".yml")) else get_spec(target)
    except UnsupportedScenarioError as exc:
        return ScenarioResult(target, "unsupported", exc.message)
    except SpecError as exc:
        return ScenarioResult(target, "invalid", "; ".join(str(p) for p in exc.problems))
    if spec.compliance is not None:
        from itbench_gym.validate.compliance import validate_compliance

        return validate_compliance(spec, seeds)
    if spec.task == "finops":
        from itbench_gym.validate.finops import validate_finops

        return validate_finops(spec, seeds)
    scenario_id = spec.id
    entry = library_entry(scenario_id)
    info: dict[str, Any] = {
        "triggering": [str(m) for m in spec.triggering_alerts],
        "root_cause": root_causes(spec.ground_truth),
    }
    if entry is not None:
        info |= {"alerts_from": entry.imported.alerts_from, "ground_truth_from": entry.imported.ground_truth_from,
                 "discrepancies": list(entry.discrepancies)}
    env = ITBenchEnv(scenario=spec)
    try:
        results = tuple(_validate_seed(env, seed) for seed in seeds)
    finally:
        env.close()
    failed = [f"seed {s.seed}: {'; '.join(s.problems)}" for s in results if not s.passed]
    return ScenarioResult(scenario_id, "failed" if failed else "passed", " | ".join(failed), results, info)


def _validate_seed(env: ITBenchEnv, seed: int) -> SeedResult:
    from itbench_gym.agents.base import run_episode
    from itbench_gym.agents.oracle import OracleAgent, ground_truth_report
    from itbench_gym.backends.base import BackendError

    started = time.perf_counter()
    spec = env.scenario
    try:
        env.reset(seed=seed)
    except BackendError as exc:
        return SeedResult(seed, (f"alerts: {exc}",), wall_seconds=time.perf_counter() - started)
    incident = env.incident
    problems = [f"symptom: {p}" for p in symptoms(env)]
    notes: list[str] = []
    agent = OracleAgent(env)
    evaluation = run_episode(env, agent, seed=seed)["evaluation"]
    if not evaluation["diagnosis"]["fl_pass"]:
        problems.append("oracle: its ground-truth report does not localise the fault (fl_pass false)")
    report = ground_truth_report(spec)
    if not spec.grades_mitigation:
        # Diagnosis only: what must fail is a report that does not name the root cause.
        notes.append(f"diagnosis only: {spec.desired_outcome['mitigation_not_graded']}")
        env.reset(seed=seed)
        *_, info = env.step({"tool": "submit", "args": {"entities": [], "propagations": []}})
        if info["evaluation"]["diagnosis"]["fl_pass"]:
            problems.append("no-op: an empty report localises the fault")
        alerts_after = incident.started_at - incident.injected_at if incident is not None else None
        return SeedResult(seed, tuple(problems), tuple(notes), alerts_after, time.perf_counter() - started)
    mitigation = evaluation["mitigation"] or {}
    if not mitigation.get("passed"):
        problems.append(f"oracle: mitigation failed: {'; '.join(mitigation.get('reasons') or ['no reason given'])}")
    if agent.unreachable:
        notes.append(f"the agent's kubectl could not revert: {', '.join(agent.unreachable)}")
    env.reset(seed=seed)
    noop = _submit(env, report)
    if noop.get("passed"):
        problems.append("no-op: submitting without acting passes the mitigation check")
    target = wrong_fix_target(spec)
    if target is not None:
        env.reset(seed=seed)
        env.step(f"kubectl rollout restart deployment/{target} -n {spec.namespace}")
        env.step(f"wait {WRONG_FIX_SETTLE_SECONDS:g}")
        wrong = _submit(env, report)
        if wrong.get("passed"):
            problems.append(f"wrong fix: restarting only deployment/{target} passes the mitigation check")
    else:
        notes.append("no wrong fix to try (no workload but the root cause)")
    alerts_after = incident.started_at - incident.injected_at if incident is not None else None
    return SeedResult(seed, tuple(problems), tuple(notes), alerts_after, time.perf_counter() - started)


def _submit(env: ITBenchEnv, report: Mapping[str, Any]) -> Mapping[str, Any]:
    """The mitigation verdict of submitting ``report`` now."""
    *_, info = env.step({"tool": "submit", "args": dict(report)})
    verdict: Mapping[str, Any] = info["evaluation"]["mitigation"] or {}
    return verdict


def wrong_fix_target(spec: ScenarioSpec) -> str | None:
    """A plausible wrong fix: the Deployment of the service the first triggering alert names, else of a
    ground-truth entity that is not a root cause, else the app's user-facing service; never a root cause."""
    from itbench_gym.evaluation.groundtruth import parse_ground_truth
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.appfacts import load_app_facts

    facts = load_app_facts(envs_dir() / spec.app)
    deployments = {o.name for o in facts.of_kind("Deployment", spec.namespace)}
    gt = parse_ground_truth(spec.ground_truth, strict=False)
    roots = {g.name or "" for g in gt.groups if g.root_cause}
    candidates: list[str | None] = [m.labels.get("service_name") or m.labels.get("deployment") for m in spec.triggering_alerts]
    for group in gt.groups:
        if not group.root_cause:
            candidates += [group.name] if group.name else [_literal(f) for f in group.filters]
    candidates.append(facts.edge.service if facts.edge else None)
    for name in candidates:
        if name and name in deployments and name not in roots:
            return str(name)
    return None


def _literal(pattern: str) -> str:
    """The workload a filter such as ``checkout\\b`` or ``checkout-.*`` names ("" when it is not plain)."""
    import re

    text = re.sub(r"(\\b|-\.\*|\.\*)$", "", pattern)
    return text if re.fullmatch(r"[a-z0-9-]+", text) else ""


def _client_calls(probe: ClusterProbe, signals: GoldenSignalsFact, namespace: str, window: float, at: float
                  ) -> dict[tuple[str, str], tuple[float, float]]:
    """Each (caller, call name) of the callers' client calls over ``window`` s up to ``at``: p95 ms and failed share."""
    keys = (signals.service_label, signals.client_name_label)
    by, w = ", ".join(keys), f"{max(1, int(round(window)))}s"
    p95 = probe.vector_by(f"histogram_quantile(0.95, sum by ({by}, le) (rate({signals.selector(signals.duration_bucket, namespace, client=True)}[{w}])))",
                          keys, at)
    calls = probe.vector_by(f"sum by ({by}) (rate({signals.selector(signals.calls, namespace, client=True)}[{w}]))", keys, at)
    failed = probe.vector_by(f"sum by ({by}) (rate({signals.selector(signals.calls, namespace, client=True, errors=True)}[{w}]))", keys, at)
    scale = signals.duration_unit_seconds * 1000.0
    return {(k[0], k[1]): (p95.get(k, math.nan) * scale, failed.get(k, 0.0) / n) for k, n in calls.items() if n > 0}


def _own_calls(probe: ClusterProbe, counters: Sequence[CallCounterFact], namespace: str, window: float, at: float
               ) -> dict[tuple[str, str], float]:
    """Each (service, destination) of the services' own call counters over ``window`` s up to ``at``: the
    share of calls that got no 2xx."""
    w = f"{max(1, int(round(window)))}s"
    out: dict[tuple[str, str], float] = {}
    for counter in counters:
        keys = ("container", counter.destination_label)
        calls = probe.vector_by(counter.rate(namespace, w), keys, at)
        failed = probe.vector_by(counter.rate(namespace, w, failed=True), keys, at)
        out |= {(counter.service, k[1]): failed.get(k, 0.0) / n for k, n in calls.items() if n > 0}
    return out


def root_causes(ground_truth: Mapping[str, Any]) -> list[str]:
    out = []
    for g in ground_truth.get("groups") or []:
        if g.get("root_cause"):
            name = g.get("name") or " | ".join(g.get("filter") or [])
            out.append(f"{g['kind']} {g['namespace']}/{name}" if g.get("namespace") else f"{g['kind']} {name}")
    return out


def symptoms(env: ITBenchEnv) -> list[str]:
    """Ground-truth entities (root causes, propagation targets) that show no symptom now; [] when all do."""
    if env.incident is None or env.incident.baseline is None:
        return ["no incident to observe"]
    return [f"{cls} ({', '.join(groups)}) shows none" for cls, groups in unshown_classes(env)]


def unshown_classes(env: ITBenchEnv) -> list[tuple[str, tuple[str, ...]]]:
    """The ground truth's root-cause and propagation-target classes (each with its group ids) that show
    no symptom now, in ground-truth order; every class when there is no incident to observe."""
    from itbench_gym.backends.sim.app.mesh import GATEWAY_NAME
    from itbench_gym.evaluation.entities import EntityRef
    from itbench_gym.evaluation.groundtruth import parse_ground_truth
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.appfacts import load_app_facts
    from itbench_gym.spec.references import NON_OBJECT_KINDS
    from itbench_gym.tasks.sre import ClusterProbe, template_refs

    spec, incident = env.scenario, env.incident
    facts = load_app_facts(envs_dir() / spec.app)
    gt = parse_ground_truth(spec.ground_truth, strict=False)
    targets = list(dict.fromkeys([*gt.root_cause_classes, *(t for _, t in gt.class_edges)]))
    if incident is None or incident.baseline is None or facts.edge is None:
        return [(cls, tuple(gt.classes[cls])) for cls in targets]
    probe = ClusterProbe(spec, env.backend, facts.edge, facts.golden_signals, facts.flags)
    try:
        window = min(max(probe.now() - incident.injected_at, 60.0), 300.0)
        signals = probe.service_signals(window)
        pods = probe.pods().pods
        workloads = probe.workloads()
        templates = {obj.name: template_refs((obj.body.get("spec") or {}).get("template") or {})
                     for obj in facts.objects if obj.kind in _WORKLOAD_KINDS}
        containers = {obj.name: obj.containers() for obj in facts.objects if obj.kind in _WORKLOAD_KINDS}
        use = {kind: (probe.vector_at(expr.format(ns=spec.namespace), "container", incident.injected_at),
                      probe.vector_at(expr.format(ns=spec.namespace), "container", probe.now()))
               for kind, expr in _RESOURCES.items()}
        firing_alerts = probe.firing_alerts()
        firing = {str(a.get("alertname", "")) for a in firing_alerts}
        client = ((_client_calls(probe, facts.golden_signals, spec.namespace, window, incident.injected_at),
                   _client_calls(probe, facts.golden_signals, spec.namespace, window, probe.now()))
                  if facts.golden_signals is not None and facts.golden_signals.client_labels else ({}, {}))
        own = (_own_calls(probe, facts.call_counters, spec.namespace, window, incident.injected_at),
               _own_calls(probe, facts.call_counters, spec.namespace, window, probe.now()))
        conn = facts.golden_signals.connections if facts.golden_signals else None
        opened: tuple[dict[str, float], dict[str, float]] = ({}, {}) if conn is None else (
            probe.vector_at(conn.rate(spec.namespace), conn.service_label, incident.injected_at),
            probe.vector_at(conn.rate(spec.namespace), conn.service_label, probe.now()))
    finally:
        probe.close()
    changed = [change.ref for change in incident.journal]
    changed_configs = {(r.kind, r.name) for r in changed if r.kind in ("ConfigMap", "Secret")}
    baseline = incident.baseline
    known = [frozenset(a.items()) for a in baseline.alerts]
    new_alerts = [a for a in firing_alerts if frozenset(a.items()) not in known]

    def signal_symptom(name: str) -> str | None:
        """A change of the service's golden signals against the baseline."""
        now, before = signals.get(name), baseline.services.get(name)
        if before is not None and before.rate > 0:
            if now is None or now.rate < before.rate * THRESHOLDS["rate_drop"]:
                return "request rate dropped"
            if now.rate > before.rate * THRESHOLDS["rate_rise"]:
                return "request rate surged"
            base_err = 0.0 if math.isnan(before.error_ratio) else before.error_ratio
            if not math.isnan(now.error_ratio) and now.error_ratio > base_err + THRESHOLDS["error_ratio_abs"]:
                return "error ratio up"
            if not math.isnan(now.p95_ms) and not math.isnan(before.p95_ms) and \
                    now.p95_ms > before.p95_ms * THRESHOLDS["latency_factor"] + THRESHOLDS["latency_abs_ms"]:
                return "p95 latency up"
        elif now is not None and before is None and now.rate > 0:
            return "requests where there were none"
        return None

    # a caller's span name that stands for calls to one callee only (an HTTP client's "GET" may not)
    callees: dict[tuple[str, str], set[str]] = {}
    for caller, callee, span in facts.client_spans:
        callees.setdefault((caller, span), set()).add(callee)
    calls_to: dict[str, list[tuple[str, str]]] = {}
    for (caller, span), named in sorted(callees.items()):
        if len(named) == 1:
            calls_to.setdefault(next(iter(named)), []).append((caller, span))

    def counted_symptom(name: str) -> str | None:
        """The services' own call counters: its own calls failing more (a fault in how it dials), or its
        callers' calls to it (a fault on the path into it)."""
        for (caller, destination), now in sorted(own[1].items()):
            then = own[0].get((caller, destination))
            if then is None or now <= then + THRESHOLDS["error_ratio_abs"]:
                continue
            if caller in (name, facts.service_of(name)):
                return f"its calls to {destination} fail more"
            if destination == name:
                return f"{caller}'s calls to it fail more"
        return None

    def calls_symptom(name: str) -> str | None:
        """Its callers' own record of their calls to it: a fault on the path into it (an HTTPChaos on its
        port, a NetworkChaos on its side) leaves its own series as they were."""
        found = counted_symptom(name)
        if found:
            return found
        for caller, span in calls_to.get(name, ()):
            then, now = client[0].get((caller, span)), client[1].get((caller, span))
            if then is None or now is None:
                continue
            if now[1] > then[1] + THRESHOLDS["error_ratio_abs"]:
                return f"{caller}'s calls {span} to it fail more"
            if not math.isnan(now[0]) and not math.isnan(then[0]) and \
                    now[0] > then[0] * THRESHOLDS["latency_factor"] + THRESHOLDS["latency_abs_ms"]:
                return f"{caller}'s calls {span} to it are slower (p95)"
        return None

    def workload_symptom(name: str) -> str | None:
        mine = [p for p in pods if p.workload.partition("/")[2] == name]
        for pod in mine:
            if pod.phase != "Running" or any(c.waiting or c.terminated for c in pod.containers):
                return f"pod {pod.name} not running"
            if not pod.ready and not pod.terminating:
                return f"pod {pod.name} not ready"
            if any(c.last is not None and c.last.finished_at >= incident.injected_at for c in pod.containers):
                return f"pod {pod.name} restarted"
        for key, state in workloads.items():
            if key.endswith(f"/{name}") and key.startswith(f"{spec.namespace}/") and state.available < state.desired:
                return f"{key}: {state.available}/{state.desired} available"
        found = signal_symptom(name) or calls_symptom(name)
        if found:
            return found
        about = next((a for a in new_alerts if name in a.values()), None)
        if about is not None:
            return f"alert {about.get('alertname', '')} fires about it"
        if name not in signals and name not in baseline.services:
            # No telemetry of its own (a broker): the traffic through it shows at its neighbours.
            for neighbour in sorted({b for a, b in facts.calls if a == name} | {a for a, b in facts.calls if b == name}):
                seen = signal_symptom(neighbour)
                if seen:
                    return f"traffic through it changed ({neighbour}: {seen})"
        if opened[1].get(name, 0.0) < opened[0].get(name, 0.0) * THRESHOLDS["rate_drop"]:
            return "fewer connections opened to it"
        for container in containers.get(name, ()):
            (cpu_then, cpu_now), (mem_then, mem_now) = ((u[0].get(container, 0.0), u[1].get(container, 0.0))
                                                        for u in (use["cpu"], use["memory"]))
            if cpu_now > cpu_then * THRESHOLDS["cpu_factor"] + THRESHOLDS["cpu_abs_cores"]:
                return f"container {container} uses more CPU"
            if mem_now > mem_then * THRESHOLDS["memory_factor"] + THRESHOLDS["memory_abs_bytes"]:
                return f"container {container} uses more memory"
        if templates.get(name, set()) & changed_configs:
            return "reads an object the injection changed"
        return None

    names = sorted({*signals, *baseline.services, *(o.name for o in facts.objects if o.kind in ("Service", *_WORKLOAD_KINDS)),
                    *(o.name for o in facts.app_services)})
    gateway_workloads = [(labels[GATEWAY_NAME], obj.name) for obj in facts.objects if obj.kind in _WORKLOAD_KINDS
                         for labels in [(((obj.body.get("spec") or {}).get("template") or {}).get("metadata") or {})
                                        .get("labels") or {}] if GATEWAY_NAME in labels]
    unshown: list[tuple[str, tuple[str, ...]]] = []
    for cls in targets:
        shown, unobservable = False, False
        for gid in gt.classes[cls]:
            group = next(g for g in gt.groups if g.id == gid)
            if group.kind in NON_OBJECT_KINDS:
                unobservable = True
                continue
            if any(group.specificity(EntityRef(r.name, r.kind, r.namespace)) is not None for r in changed) or \
                    any(a.group_id == gid and a.id in firing for a in gt.alerts):
                shown = True
                break
            if group.kind == "Gateway":
                # A Gateway shows its symptoms at the Envoy deployment that implements it.
                served = [(gateway, workload) for gateway, workload in gateway_workloads
                          if group.specificity(EntityRef(gateway, "Gateway", group.namespace)) is not None]
                if any(workload_symptom(workload) for _, workload in served):
                    shown = True
                    break
            if group.kind in ("Pod", "Service", *_WORKLOAD_KINDS):
                candidates = [p.name for p in pods] if group.kind == "Pod" else names
                for candidate in candidates:
                    if group.specificity(EntityRef(candidate, group.kind, group.namespace)) is None:
                        continue
                    workload = next((p.workload.partition("/")[2] for p in pods if p.name == candidate), candidate)
                    if workload_symptom(workload):
                        shown = True
                        break
            if shown:
                break
        if not shown and not unobservable:
            unshown.append((cls, tuple(gt.classes[cls])))
    return unshown

