"""The proof that a compliance (CISO) scenario grades what it claims, case by case.

For every case a seed can draw (the first seed from the ones asked for that draws it):

1. **Oracle**: the spec's oracle answer (its policy, script or playbook, run as an agent would) passes.
2. **No-op**: submitting without producing anything fails.
3. **Wrong answer**: the spec's plausible wrong answer fails — on at least one non-compliant case (it may
   be right by accident on a case it happens to cover), and that is reported per case.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from itbench_gym.validate.checks import ScenarioResult, SeedResult

if TYPE_CHECKING:
    from itbench_gym.spec import ScenarioSpec

#: How far past the asked seeds to look for a seed that draws a case.
SEED_SEARCH = 1000


def validate_compliance(spec: ScenarioSpec, seeds: Sequence[int]) -> ScenarioResult:
    from itbench_gym.agents.answer import AnswerAgent
    from itbench_gym.agents.base import run_episode
    from itbench_gym.backends.base import BackendError
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.tasks.ciso import draw_case

    assert spec.compliance is not None
    start = min(seeds, default=0)
    chosen: dict[str, int] = {}
    for seed in range(start, start + SEED_SEARCH):
        chosen.setdefault(draw_case(spec, seed).id, seed)
        if len(chosen) == len(spec.compliance.cases):
            break
    results: list[SeedResult] = []
    wrong_caught = False
    env = ITBenchEnv(scenario=spec)
    try:
        for case in spec.compliance.cases:
            began = time.perf_counter()
            drawn = chosen.get(case.id)
            if drawn is None:
                results.append(SeedResult(start, (f"case {case.id}: no seed in {start}..{start + SEED_SEARCH - 1} draws it",)))
                continue
            seed = drawn
            problems: list[str] = []
            notes: list[str] = []
            try:
                oracle = run_episode(env, AnswerAgent(spec.compliance.oracle), seed=seed)["evaluation"]
                if not oracle["passed"]:
                    problems.append(f"case {case.id}: oracle fails: {'; '.join(oracle['reasons'])}")
                env.reset(seed=seed)
                *_, info = env.step({"tool": "submit", "args": {}})
                if info["evaluation"]["passed"]:
                    problems.append(f"case {case.id}: submitting nothing passes")
                if not case.compliant:
                    wrong = run_episode(env, AnswerAgent(spec.compliance.wrong), seed=seed)["evaluation"]
                    if wrong["passed"]:
                        notes.append(f"the wrong answer passes case {case.id}")
                    else:
                        wrong_caught = True
            except BackendError as exc:
                problems.append(f"case {case.id}: set-up failed: {exc}")
            results.append(SeedResult(seed, tuple(problems), tuple(notes), wall_seconds=time.perf_counter() - began))
    finally:
        env.close()
    failed = [f"seed {s.seed}: {'; '.join(s.problems)}" for s in results if not s.passed]
    if not wrong_caught:
        failed.append("the wrong answer passes every non-compliant case")
    info = {"class": spec.compliance.cls, "control": spec.compliance.control,
            "cases": {case.id: chosen.get(case.id) for case in spec.compliance.cases}}
    return ScenarioResult(spec.id, "failed" if failed else "passed", " | ".join(failed), tuple(results), info)
