"""Playing a compliance scenario's answer (``oracle`` or ``wrong`` in its spec) as an agent would.

The answer's files are written with the ``write_file`` tool, its actions run as the agent's own commands,
then it submits: the proof that a scenario is solvable (the oracle) and that a plausible wrong answer
fails it (``itbench-gym validate``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from itbench_gym.agents.base import Observation, ScriptedAgent
from itbench_gym.spec.model import Answer


class AnswerAgent(ScriptedAgent):
    """Writes ``answer.files``, runs ``answer.actions`` and submits; ``outputs`` keeps each action's text."""

    def __init__(self, answer: Answer, *, privileged: bool = True) -> None:
        super().__init__()
        self.answer = answer
        #: It reads the scenario's answer: never a baseline an honest agent is ranked against.
        self.privileged = privileged
        self.outputs: list[tuple[str, int, str]] = []

    def script(self) -> Generator[Any, Observation, None]:
        for path, content in self.answer.files.items():
            yield {"tool": "write_file", "args": {"path": path, "content": content}}
        for action in self.answer.actions:
            observation = yield action
            self.outputs.append((action, int(observation.get("exit_status", 0)), str(observation.get("text", ""))))
        yield {"tool": "submit", "args": {}}
