"""Cyclic garbage collection held off while the twin runs ticks.

A tick allocates tens of thousands of short-lived containers (samples, label tuples, the app
model's records) and keeps some: CPython's generational collector then runs hundreds of young
collections per simulated half hour and, as survivors pile up, full collections over every object
of the process (the twin's objects, its shared baseline and its incident checkpoints: several
hundred thousand), each a few tenths of a second. The twin makes few reference cycles (a couple of
thousand unreachable objects per incident), so holding collection off for a burst of ticks frees
the same memory later, in one pass, at a fraction of the cost. Reference counting frees everything
else as usual meanwhile.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
#: Whether automatic collection was on when the outermost pause began (it is put back as it was).
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Automatic collection off inside the block (nested and concurrent blocks share one pause)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
