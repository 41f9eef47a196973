"""The structured RL view: Deployments as targets, verbs as discrete actions, what the agent sees as numbers."""

from __future__ import annotations

import pytest

import itbench_gym
from itbench_gym.wrappers import StructuredSRE
from itbench_gym.wrappers.structured import FEATURES, VERBS


def test_the_fault_shows_in_the_numbers_and_the_fix_earns_the_reward() -> None:
    env = StructuredSRE(itbench_gym.make("SRE-CorruptImage-v0"))
    try:
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs) and obs.shape == (len(env.targets), len(FEATURES))
        row = obs[env.targets.index("product-catalog")]
        assert row[FEATURES.index("failing_wait")] == 1.0 and row[FEATURES.index("changed")] == 1.0
        healthy = obs[env.targets.index("cart")]
        assert healthy[FEATURES.index("failing_wait")] == 0.0 and healthy[FEATURES.index("unavailable")] == 0.0

        def action(verb: str, target: str) -> int:
            return 1 + len(VERBS) * env.targets.index(target) + VERBS.index(verb)

        assert env.describe(action("undo", "product-catalog")) == "undo product-catalog"
        with pytest.raises(AssertionError, match="is not an action"):
            env.step(env.action_space.n)
        obs, reward, terminated, _, _ = env.step(action("undo", "product-catalog"))
        assert reward == 0.0 and not terminated
        for _ in range(5):
            obs, *_ = env.step(0)  # wait a minute
        assert obs[env.targets.index("product-catalog"), FEATURES.index("failing_wait")] == 0.0
        _, reward, terminated, _, info = env.step(action("submit", "product-catalog"))
        assert terminated and reward == 1.0 and info["evaluation"]["passed"]
    finally:
        env.close()
