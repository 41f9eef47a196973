"""The proof that a FinOps scenario grades what it claims, per seed, on the twin:

1. **Oracle**: the oracle agent (the spec's mitigation with the agent's tools, then its report) passes,
   with a proximity of at least :data:`PROXIMITY_FLOOR` to the reference run on all four measures.
2. **No-op**: submitting the right report and changing nothing fails (a scenario with faults).
3. **Starving**: scaling the app's user-facing workload to zero — the cheapest "fix" of any cost — fails
   the mitigation with a service-level reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from itbench_gym.validate.checks import ScenarioResult, SeedResult

if TYPE_CHECKING:
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.spec import ScenarioSpec

#: The oracle must come this close to the optimum on each measure (issue: proximity ≥ 0.95).
PROXIMITY_FLOOR = 0.95
#: Seconds the starving "fix" lets pass before submitting.
STARVE_SETTLE_SECONDS = 120.0
#: Words of the watch's reasons that say the service suffered (traffic, a service's rate, errors or latency).
SERVICE_REASONS = ("user-facing traffic", "user-facing success", "service ", "scaled to 0")


def validate_finops(spec: ScenarioSpec, seeds: Sequence[int]) -> ScenarioResult:
    from itbench_gym.env import ITBenchEnv

    env = ITBenchEnv(scenario=spec)
    try:
        results = tuple(_seed(env, spec, seed) for seed in seeds)
    finally:
        env.close()
    failed = [f"seed {s.seed}: {'; '.join(s.problems)}" for s in results if not s.passed]
    info = {"triggering": [str(m) for m in spec.triggering_alerts], "budgets": dict(spec.budgets)}
    return ScenarioResult(spec.id, "failed" if failed else "passed", " | ".join(failed), results, info)


def _seed(env: ITBenchEnv, spec: ScenarioSpec, seed: int) -> SeedResult:
    from itbench_gym.agents.base import run_episode
    from itbench_gym.agents.oracle import OracleAgent, cost_report
    from itbench_gym.backends.base import BackendError
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.appfacts import load_app_facts

    began = time.perf_counter()
    problems: list[str] = []
    notes: list[str] = []
    try:
        oracle = run_episode(env, OracleAgent(env), seed=seed)["evaluation"]
        if not oracle["passed"]:
            problems.append(f"oracle fails: {_why(oracle)}")
        far = {k: v for k, v in oracle["proximity"].items() if v is None or v < PROXIMITY_FLOOR}
        if far:
            problems.append("oracle's proximity below " + f"{PROXIMITY_FLOOR:g}: "
                            + ", ".join(f"{k} {'unknown' if v is None else f'{v:.3f}'}" for k, v in sorted(far.items())))
        notes.append("oracle proximity " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(oracle["proximity"].items()) if v is not None))
        if spec.faults:
            env.reset(seed=seed)
            *_, info = env.step({"tool": "submit", "args": cost_report(spec)})
            if info["evaluation"]["mitigation"]["passed"]:
                problems.append("changing nothing passes the mitigation")
        edge = load_app_facts(envs_dir() / spec.app).edge
        if edge is not None:
            env.reset(seed=seed)
            env.step(f"kubectl -n {spec.namespace} scale deployment {edge.service} --replicas=0")
            env.step(f"wait {STARVE_SETTLE_SECONDS:g}")
            *_, info = env.step({"tool": "submit", "args": cost_report(spec)})
            verdict = info["evaluation"]["mitigation"]
            if verdict["passed"]:
                problems.append(f"scaling {edge.service} to zero passes the mitigation")
            elif not any(word in reason for reason in verdict["reasons"] for word in SERVICE_REASONS):
                problems.append(f"scaling {edge.service} to zero fails, but for no service-level reason: {'; '.join(verdict['reasons'])}")
    except BackendError as exc:
        problems.append(f"set-up failed: {exc}")
    return SeedResult(seed, tuple(problems), tuple(notes), wall_seconds=time.perf_counter() - began)


def _why(evaluation: Mapping[str, Any]) -> str:
    reasons = list(evaluation["mitigation"]["reasons"])
    diagnosis = evaluation["diagnosis"]
    if not diagnosis["passed"]:
        reasons.append(f"diagnosis missed {diagnosis['missed']}, named outside the ground truth {diagnosis['extra']}")
    return "; ".join(reasons) or "no reason given"
