"""Spaces for text environments.

Gymnasium's ``Text`` defaults to an alphanumeric charset without spaces, so it rejects real commands
and tool output. ``FreeText`` accepts any printable Unicode up to a length and samples real commands.
It stores Unicode code points in shared memory, so ``AsyncVectorEnv`` works with its default settings.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence as SequenceABC
from types import ModuleType
from typing import Any, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils.shared_memory import create_shared_memory, read_from_shared_memory, write_to_shared_memory

_SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "


class FreeText(spaces.Text):
    """Any string of printable characters (plus newline and tab) up to ``max_length``."""

    def __init__(self, max_length: int, *, samples: Sequence[str] = (), seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=_SAMPLE_CHARSET, seed=seed)
        self._samples = tuple(samples)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length and all(c.isprintable() or c in "\n\t\r" for c in x)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if self._samples and mask is None and probability is None:
            return self._samples[int(self.np_random.integers(len(self._samples)))]
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"FreeText({self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length


@create_shared_memory.register(FreeText)
def _create_free_text_shared_memory(space: FreeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.int32).char, n * space.max_length)


class SharedTexts(SequenceABC[str]):
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
