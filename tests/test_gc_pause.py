"""The twin holds cyclic garbage collection off while it ticks, and gives the collector back as it found it."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from itbench_gym.backends.sim.gc_pause import gc_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_collection_is_off_inside_and_back_on_after(collector_on: None) -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_end_with_the_outermost(collector_on: None) -> None:
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_an_error_inside_still_gives_the_collector_back(collector_on: None) -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("tick failed")
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_when_both_have(collector_on: None) -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    assert inside.wait(10)
    with gc_paused():
        pass
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    thread.join(10)
    assert gc.isenabled()
