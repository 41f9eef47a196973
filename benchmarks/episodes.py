"""Figure 3: episode throughput of a baseline agent, one env in this process.

The agent is a parameter (``--agent``); by default the heuristic agent when the package has one,
else the oracle. New seeds are what a batch over fresh (scenario, seed) pairs pays; a repeated seed
restores the incident checkpoint, as repeated runs (pass@k) over a fixed seed set do.
"""

from __future__ import annotations

import time

import itbench_gym
from benchmarks.options import Options, default_agent, reference_scenario
from benchmarks.report import Row, Section

KEY, TITLE = "episodes", "3. Episode throughput"
FIRST_SEED = 2000


def run(opts: Options) -> Section:
    from itbench_gym.agents import AGENTS, run_episode
    from itbench_gym.env import ITBenchEnv

    agent_name = opts.agent or default_agent()
    if agent_name not in AGENTS:
        raise KeyError(f"no agent {agent_name!r}; the package has {sorted(AGENTS)}")
    scenario = reference_scenario(opts)
    episodes = 1 if opts.quick else 3
    section = Section(KEY, f"{TITLE} ({agent_name} agent, {scenario})", facts={"agent": agent_name, "scenario": scenario})
    env = itbench_gym.make(scenario)
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, ITBenchEnv)
    try:
        env.reset(seed=FIRST_SEED - 1)  # builds the process' shared baseline (figure 1 reports that first reset)
        for label, seeds in (("new seeds", [FIRST_SEED + i for i in range(episodes)]), ("repeated seed", [FIRST_SEED] * max(2, episodes))):
            durations, steps = [], 0
            for seed in seeds:
                agent = AGENTS[agent_name](unwrapped)
                start = time.perf_counter()
                run_episode(env, agent, seed=seed)
                durations.append(time.perf_counter() - start)
                assert unwrapped.episode is not None
                steps += len(unwrapped.episode.steps)
            total = sum(durations)
            section.rows += [
                Row(f"episode wall time, {label}", "s", durations),
                Row(f"episodes/hour, {label}", "1/h", [3600.0 * len(durations) / total]),
                Row(f"steps/s, {label} (reset included)", "1/s", [steps / total]),
            ]
    finally:
        env.close()
    section.notes.append(f"Agent: `{agent_name}` (one episode = reset + the agent's steps + submit and evaluation, "
                         "which watches the mitigation for the scenario's symptom period in simulated time), one env in one "
                         "process after a warm-up reset; the machine's other core is free for a second process.")
    return section
