"""Train a small policy on the twin with REINFORCE over the structured action space, and plot its learning curve.

    python examples/rl_structured.py --steps 2000 --out rl-curve.png

The policy is linear and shared across Deployments: each (verb, Deployment) action scores the
Deployment's six observed features with the verb's weights, so what it learns about "a changed
Deployment whose pods fail to pull" carries to every Deployment. Episodes cycle over a few scenarios
and a small pool of seeds, so after the first pass every reset is a restored incident (fast).
The reward is the env's ``reward_mode="score"`` (the documented weighted combination of diagnosis and
mitigation scores in [0, 1]), which gives credit for a right diagnosis before the policy also learns the
fix; with the sparse pass/fail reward a random start almost never sees a success among ~90 actions.
The curve is the moving mean of the episode reward; docs/agents.md shows one run's (diagnosis learnt
within ~200 episodes). Ctrl-C stops training and still draws the curve so far.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

import itbench_gym
from itbench_gym.wrappers.structured import FEATURES, VERBS, StructuredSRE

SCENARIOS = ("SRE-CorruptImage-v0", "SRE-WorkloadScaledToZero-v0", "SRE-InvalidContainerCommand-v0")
MAX_ACTIONS = 3


class LinearPolicy:
    """Softmax over actions; logit(verb v, target t) = w_v · [features_t, 1]; logit(wait) = b."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.w = rng.normal(0.0, 0.01, size=(len(VERBS), len(FEATURES) + 1))
        self.b = 0.0
        self.rng = rng

    @staticmethod
    def inputs(obs: np.ndarray) -> np.ndarray:
        """Features on one scale (the error rate is unbounded, the rest in [0, 1]) plus a bias."""
        return np.hstack([np.log1p(obs), np.ones((obs.shape[0], 1))])

    def probabilities(self, obs: np.ndarray) -> np.ndarray:
        x = self.inputs(obs)
        logits = np.concatenate([[self.b], (x @ self.w.T).ravel()])
        logits -= logits.max()
        p = np.exp(logits)
        return np.asarray(p / p.sum())

    def sample(self, obs: np.ndarray) -> int:
        return int(self.rng.choice(len(self.probabilities(obs)), p=self.probabilities(obs)))

    def update(self, episode: list[tuple[np.ndarray, int]], advantage: float, lr: float) -> None:
        """One REINFORCE step: ∇ log π(a|s) × advantage for every action of the episode."""
        for obs, action in episode:
            p = self.probabilities(obs)
            x = self.inputs(obs)
            grad_w = -np.einsum("tv,tf->vf", p[1:].reshape(obs.shape[0], len(VERBS)), x)
            grad_b = -p[0]
            if action == 0:
                grad_b += 1.0
            else:
                target, verb = divmod(action - 1, len(VERBS))
                grad_w[verb] += x[target]
            self.w += lr * advantage * grad_w
            self.b += lr * advantage * grad_b


def train(steps: int, seeds: int, lr: float, rewards: list[float]) -> None:
    """REINFORCE over the scenarios in turn until ``steps`` env steps; each episode's reward goes to ``rewards``."""
    envs = {s: StructuredSRE(itbench_gym.make(s, max_steps=MAX_ACTIONS, reward_mode="score")) for s in SCENARIOS}
    policy, baseline, taken = LinearPolicy(np.random.default_rng(0)), 0.0, 0
    try:
        for episode_index in itertools.count():
            if taken >= steps:
                break
            scenario = SCENARIOS[episode_index % len(SCENARIOS)]
            env = envs[scenario]
            obs, _ = env.reset(seed=(episode_index // len(SCENARIOS)) % seeds)
            trajectory, total, done = [], 0.0, False
            while not done:
                action = policy.sample(obs)
                trajectory.append((obs, action))
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                taken += 1
                done = terminated or truncated
            baseline = 0.9 * baseline + 0.1 * total
            policy.update(trajectory, total - baseline, lr)
            rewards.append(total)
            window = rewards[-30:]
            print(f"episode {episode_index + 1} ({scenario}, {len(trajectory)} actions): reward {total:.2f}, "
                  f"mean of last {len(window)} {np.mean(window):.2f}, steps {taken}", flush=True)
    finally:
        for env in envs.values():
            env.close()


def plot_curve(rewards: list[float], out: str) -> None:
    """The moving mean of 30 episode rewards."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = np.convolve(rewards, np.ones(30) / 30, mode="valid") if len(rewards) >= 30 else np.array(rewards)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(np.arange(len(curve)) + min(30, len(rewards)), curve)
    ax.set_xlabel("episode")
    ax.set_ylabel("reward (moving mean of 30)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("REINFORCE on the structured SRE view")
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="environment steps to train for")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per scenario (a small pool: restored resets)")
    parser.add_argument("--lr", type=float, default=3.0, help="REINFORCE step size")
    parser.add_argument("--out", default="rl-curve.png")
    args = parser.parse_args()
    rewards: list[float] = []
    try:
        train(args.steps, args.seeds, args.lr, rewards)
    except KeyboardInterrupt:  # Ctrl-C stops training; the curve so far is still drawn
        print(f"stopped after {len(rewards)} episodes")
    plot_curve(rewards, args.out)


if __name__ == "__main__":
    main()
