"""The paper's SRE set: Eq. 6 complexity as specs declare it, the Table 12 specs, where specs live."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from itbench_gym.paths import specs_dir
from itbench_gym.spec import SpecError, load_spec
from itbench_gym.spec.loader import domain_files
from itbench_gym.spec.model import complexity_level, complexity_score

#: Table 12 of the ITBench paper: (pattern, technologies, chain length, resolution steps).
TABLE_12_IN_SRE = {
    "SRE-CacheFailure-v0": (1, 3, 2),
    "SRE-HighCPU-v0": (2, 3, 2),
    "SRE-ServiceFailure-v0": (2, 4, 3),
    "SRE-ManualGarbageCollection-v0": (2, 3, 2),
    "SRE-MemoryLeak-v0": (3, 8, 6),
    "SRE-CorruptDeployment-KafkaAddress-v0": (3, 8, 6),
    "SRE-CorruptDeployment-UnsupportedArchitecture-v0": (3, 7, 5),
    "SRE-CorruptDeployment-InvalidCommand-v0": (2, 2, 1),
    "SRE-NetworkDelay-v0": (3, 4, 1),
    "SRE-PodFault-v0": (2, 2, 2),
    "SRE-NetworkPartition-v0": (4, 4, 1),
    "SRE-CorruptImage-v0": (2, 3, 1),
    "SRE-CorruptImage-Payment-v0": (1, 2, 1),
    "SRE-CPUStress-v0": (2, 2, 2),
    "SRE-HTTPRequestBodyTamperFault-v0": (2, 3, 1),
    "SRE-HTTPRequestAbortFault-v0": (5, 4, 1),
    "SRE-HTTPRequestBodyTamperFault-Frontend-v0": (3, 3, 2),
    "SRE-JVMCodeReturnFault-v0": (2, 3, 1),
    "SRE-PodFailure-v0": (2, 1, 1),
    "SRE-IncorrectAuthentication-v0": (3, 2, 1),
    "SRE-MemoryResourceLimit-v0": (2, 1, 2),
}


def test_eq6_is_the_geometric_mean_and_levels_follow_table_2() -> None:
    assert complexity_score(3, 8, 6) == pytest.approx(144 ** (1 / 3))
    # Table 2 of the paper: CacheFailure (1.82) medium, CorruptImage (1.26) easy, HTTPRequestAbortFault (2.71) medium.
    assert [complexity_level(complexity_score(*f)) for f in [(1, 3, 2), (1, 2, 1), (5, 4, 1), (3, 8, 6)]] == \
        ["medium", "easy", "medium", "hard"]


@pytest.mark.parametrize("scenario_id", sorted(TABLE_12_IN_SRE))
def test_table_12_specs_carry_the_papers_factors(scenario_id: str) -> None:
    from itbench_gym.registry import get_spec

    spec = get_spec(scenario_id)
    c = spec.complexity
    assert (c.technologies, c.propagation_length, c.resolution_steps) == TABLE_12_IN_SRE[scenario_id]
    assert c.level == complexity_level(c.score)
    assert get_spec(scenario_id.replace("-v0", "-NoTraces-v0")).observability.traces is False


def test_a_level_eq6_does_not_give_is_an_error(tmp_path: Path) -> None:
    doc = yaml.safe_load((specs_dir() / "sre" / "cache-failure.yaml").read_text())
    doc["metadata"]["complexity"]["level"] = "hard"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as err:
        load_spec(path)
    assert err.value.path == "metadata.complexity.level"
    assert "Eq. 6 gives 1.82" in err.value.message and "'medium'" in err.value.message
    del doc["metadata"]["complexity"]["level"]
    path.write_text(yaml.safe_dump(doc))
    assert load_spec(path).complexity.level == "medium"  # computed when left out


def test_only_the_domain_folders_hold_specs(tmp_path: Path) -> None:
    """Notes or drafts beside the domain folders are not scenarios."""
    doc = (specs_dir() / "sre" / "cache-failure.yaml").read_text()
    for folder in ("sre", "drafts"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a.yaml").write_text(doc)
    assert domain_files(tmp_path) == [tmp_path / "sre" / "a.yaml"]
