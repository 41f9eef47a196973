"""ITBench scenarios as Gymnasium environments.

>>> import itbench_gym
>>> env = itbench_gym.make("SRE-CacheFailure-v0")
>>> obs, info = env.reset(seed=0)
"""

from itbench_gym.env import ITBenchEnv
from itbench_gym.registry import get_spec, list_scenarios, make, make_vec, register_all, scenario_ids

__version__ = "0.1.0"

register_all()

__all__ = ["ITBenchEnv", "__version__", "get_spec", "list_scenarios", "make", "make_vec", "scenario_ids"]
