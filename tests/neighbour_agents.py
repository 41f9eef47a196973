"""An agent for the parallel-episode tests: it looks into its own namespace and its neighbours'."""

from __future__ import annotations

from typing import Any

from itbench_gym.agents.baselines import EMPTY_REPORT

#: The parallel workers whose namespace sets the agent tries (``ClusterConfig.for_worker``).
WORKERS = 2


class LooksNextDoor:
    """Lists the pods of its own namespace, then of every other worker's and of the whole cluster,
    then submits an empty report: the stored observations say what its credential let it see."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self._commands: list[str] = []

    def reset(self, task_prompt: str, tool_specs: list[dict[str, Any]]) -> None:
        own = str(self._env.unwrapped.scenario.namespace)
        base = own.rsplit("-w", 1)[0]
        others = [f"{base}-w{i}" for i in range(WORKERS) if f"{base}-w{i}" != own]
        self._commands = [f"kubectl get pods -n {own}", *(f"kubectl get pods -n {ns}" for ns in others), "kubectl get pods -A"]

    def act(self, observation: Any) -> Any:
        return self._commands.pop(0) if self._commands else {"tool": "submit", "args": dict(EMPTY_REPORT)}
