"""Ids, make(), list_scenarios() and the did-you-mean error."""

from __future__ import annotations

import gymnasium as gym
import pytest

import itbench_gym


def test_ids_registered_with_gymnasium() -> None:
    assert "SRE-CacheFailure-v0" in gym.registry
    assert "SRE-CacheFailure-NoTraces-v0" in gym.registry
    assert itbench_gym.get_spec("SRE-CacheFailure-NoTraces-v0").observability.traces is False


def test_unknown_id_suggests_close_ones() -> None:
    with pytest.raises(gym.error.Error, match="Did you mean: SRE-CacheFailure-v0"):
        itbench_gym.make("SRE-CacheFailur-v0")


def test_list_scenarios_filters() -> None:
    ids = [s["id"] for s in itbench_gym.list_scenarios(domain="sre")]
    assert "SRE-CacheFailure-v0" in ids and all("-NoTraces-" not in i for i in ids)
    assert itbench_gym.list_scenarios(domain="sre", cls="CacheFailure")[0]["complexity"] == "medium"
    assert itbench_gym.list_scenarios(domain="finops") == []
