"""Spaces for text environments.

Gymnasium's ``Text`` defaults to an alphanumeric charset without spaces, so it rejects real commands
and tool output. ``FreeText`` accepts any printable Unicode up to a length and samples real commands.
It stores Unicode code points in shared memory, so ``AsyncVectorEnv`` works with its default settings.
``ActionSpace`` is the env's action space: a command string or a tool-call dict, exactly the actions
``step`` runs.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils.shared_memory import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from itbench_gym.actions import MAX_ACTION_CHARS, ActionError, parse_action

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "
#: An action: ``"<tool> <arguments>"`` or ``{"tool": name, "args": {...}}``.
Action = str | dict[str, Any]


def is_free_text(x: Any, max_length: int) -> bool:
    """A string of printable characters (plus newline, tab, carriage return) no longer than ``max_length``."""
    return isinstance(x, str) and len(x) <= max_length and all(c.isprintable() or c in "\n\t\r" for c in x)


class FreeText(spaces.Text):
    """Any string of printable characters (plus newline and tab) up to ``max_length``."""

    def __init__(self, max_length: int, *, samples: Sequence[str] = (), seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)
        self._samples = tuple(samples)

    def contains(self, x: Any) -> bool:
        return is_free_text(x, self.max_length)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if self._samples and mask is None and probability is None:
            return self._samples[int(self.np_random.integers(len(self._samples)))]
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"FreeText({self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length


class ActionSpace(spaces.Space[Action]):
    """What ``step`` runs: a command string or a tool call ``{"tool": name, "args": {...}}``.

    ``contains`` is ``parse_action``'s verdict (plus ``FreeText``'s charset for strings), so the space
    and the env never disagree on what an action is. ``sample`` draws one of the ``samples`` these
    tools can run (random text is not an action), or a bare tool name when none of them can.
    """

    def __init__(self, tool_names: Sequence[str], samples: Sequence[str], *, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(seed=seed)
        self.tool_names = tuple(tool_names)
        if not self.tool_names:
            raise ValueError("ActionSpace needs at least one tool")
        self.samples = tuple(a for a in samples if self.contains(a)) or self.tool_names

    def contains(self, x: Any) -> bool:
        if isinstance(x, str) and not is_free_text(x, MAX_ACTION_CHARS):
            return False
        try:
            parse_action(x, self.tool_names)
        except ActionError:
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is not None or probability is not None:
            raise ValueError("ActionSpace.sample takes no mask or probability")
        return self.samples[int(self.np_random.integers(len(self.samples)))]

    def __repr__(self) -> str:
        return f"ActionSpace(tools={list(self.tool_names)})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ActionSpace) and (other.tool_names, other.samples) == (self.tool_names, self.samples)


@create_shared_memory.register(FreeText)
def _create_free_text_shared_memory(space: FreeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * space.max_length)


class SharedTexts(Sequence[str]):
    """The batch of strings in shared memory, decoded when read.

    ``AsyncVectorEnv`` reads its shared buffers once and relies on them updating in place (numpy
    views); a plain tuple of strings would freeze the first observation. Copies (the vector env's
    default ``copy=True``) are ordinary tuples.
    """

    def __init__(self, shared_memory: Any, n: int, max_length: int) -> None:
        self._codes = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, max_length))

    def __len__(self) -> int:
        return self._codes.shape[0]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._codes[index]
        return "".join(map(chr, row[row != 0]))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, SharedTexts)) else other)

    def __repr__(self) -> str:
        return repr(tuple(self))


@read_from_shared_memory.register(FreeText)
def _read_free_text(space: FreeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(shared_memory, n, space.max_length)


@write_to_shared_memory.register(FreeText)
def _write_free_text(space: FreeText, index: int, value: str, shared_memory: Any) -> None:
    size = space.max_length
    destination = np.frombuffer(shared_memory.get_obj(), dtype=np.int32)
    row = np.zeros(size, dtype=np.int32)
    row[: len(value)] = [ord(c) for c in value]
    destination[index * size : (index + 1) * size] = row
