"""Scenario variants: catalogue faults applied to other targets, several at once, with optional
background noise, each proven on the twin before it is emitted.

>>> import itbench_gym
>>> result = itbench_gym.generate(count=5, seed=0, faults=2, noise=True, out=Path("generated"))

Fault templates (which fault, which arguments vary, over which targets) are data:
``generator/templates.yaml``. Ground truth comes from the app's topology
(:mod:`itbench_gym.generator.groundtruth`); triggering alerts from a twin run; a variant is kept only
when its spec validates and an oracle episode passes (:mod:`itbench_gym.generator.variants`).
Variants are distinct and their ids (``SRE-Gen-<hash>-v0``) depend only on what they inject, so the
same seed gives the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from itbench_gym.generator.variants import Generation, Outcome


def generate(count: int, seed: int = 0, faults: int = 1, noise: bool = False, *, app: str = "astronomy-shop",
             out: Path | str | None = None, workers: int = 1, progress: Any = None) -> Generation:
    """Up to ``count`` validated variants for ``seed`` with ``faults`` faults each (fewer when the
    templates' space holds fewer distinct valid ones); written to ``out`` as spec files when given.
    ``progress`` is called with each judged :class:`Outcome`."""
    from itbench_gym.generator.variants import run

    return run(count, seed, faults=faults, noise=noise, app=app, out=Path(out) if out is not None else None,
               workers=workers, progress=progress)


__all__ = ["Generation", "Outcome", "generate"]
