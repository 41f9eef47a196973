"""Gymnasium wrappers over the ITBench envs (e.g. a numeric, discrete view for classic RL)."""

from itbench_gym.wrappers.structured import StructuredSRE

__all__ = ["StructuredSRE"]
