"""The CISO rhel9-opa scenario library (``scenario_specs/ciso/rhel9-opa-*.yaml``) keeps its promises.

Every file is a valid rhel9-opa scenario whose cases change the host model exactly as they say (each
change read back from the changed model). For a fixed sample of scenarios, every case is set up and
graded as the CISO task grades it: the oracle's playbook runs in the real ``ansible-playbook`` against
the changed host, then its policy in ``opa eval``; it must print ``false`` for each non-compliant case and
``true`` for the compliant ones, and the wrong answer must print ``true`` for a named non-compliant case.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from itbench_gym.hosts.model import HostModel, unit_name
from itbench_gym.paths import envs_dir, specs_dir
from itbench_gym.spec import compliance
from itbench_gym.tools.ansible import run_playbook, write_inventory
from itbench_gym.tools.opa import eval_command
from itbench_gym.tools.sandbox import SandboxUnavailable, require_isolation

Doc = dict[str, Any]

FILES = sorted((specs_dir() / "ciso").glob("rhel9-opa-*.yaml"))
HOST = envs_dir() / "rhel9-host" / "host.yaml"
ACTIONS = ("ansible-playbook playbook.yml -i inventory.ansible.ini",
           "opa eval -d policy.rego -i collected_data.json 'data.check.result' --format raw")
REGO_ARGV = ["--data", "policy.rego", "--input", "collected_data.json", "data.check.result", "--format", "raw"]
#: The sample run for real in CI, with a non-compliant case its wrong answer misses (ITBench's own X11
#: scenario); `itbench-gym validate 'CISO-RHEL9OPA*'` runs every scenario (about 20 minutes).
SAMPLE = {
    "rhel9-opa-5.2.12-ssh-x11-forwarding.yaml": "drop-in-yes",
}


def _doc(path: Path) -> Doc:
    loaded: Doc = yaml.safe_load(path.read_text())
    return loaded


BASELINE = HostModel.load(HOST)


def test_the_library_has_at_least_twenty_scenarios_and_the_sample_is_in_it() -> None:
    names = {p.name for p in FILES}
    assert len(names) >= 20
    assert set(SAMPLE) <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_scenario_is_valid(path: Path) -> None:
    doc = _doc(path)
    assert [e.message for e in compliance.schema_errors(doc)] == []
    assert compliance.semantic_problems(doc, envs_dir()) == []
    meta = doc["metadata"]
    control = meta["control"]["id"]
    assert (meta["class"], meta["complexity"]) == ("rhel9-opa", "medium")
    assert meta["id"] == f"CISO-RHEL9OPA-{control}-v0"
    assert path.name.startswith(f"rhel9-opa-{control}-")
    assert doc["environment"] == {"env": "ciso-kind", "host": "rhel9-host"}
    assert doc["goal"] == meta["control"]["title"]
    broken = [c for c in doc["cases"] if not c["compliant"]]
    assert 1 <= len(broken) <= 3
    for answer in (doc["oracle"], doc["wrong"]):
        assert set(answer["files"]) == {"playbook.yml", "policy.rego"}
        assert answer["actions"][0] == ACTIONS[0] and answer["actions"][1].startswith(ACTIONS[1])
        playbook = yaml.safe_load(answer["files"]["playbook.yml"])
        assert playbook[0]["hosts"] == "rhel9_servers"
        assert answer["files"]["policy.rego"].startswith("package check\n")


def _lines(model: HostModel, path: str) -> list[str]:
    """The lines of the regular file ``path`` of ``model`` ([] when it has none)."""
    entry = model.files.get(model.resolve(path))
    return (entry.content or "").splitlines() if entry is not None and entry.type == "file" else []


def _holds(model: HostModel, kind: str, spec: Mapping[str, Any]) -> bool:
    """Whether ``model`` shows what the change ``{kind: spec}`` says, read back through the model's API."""
    if kind == "lineinfile":
        lines = _lines(model, spec["path"])
        if spec.get("state", "present") == "absent":
            return not any(re.search(spec["regexp"], x) if "regexp" in spec else x == spec["line"] for x in lines)
        return spec["line"] in lines
    if kind == "file":
        entry = model.files.get(spec["path"])
        if spec.get("state") == "absent":
            return entry is None
        return entry is not None and all(
            [entry.type == spec.get("state", entry.type), entry.content == spec.get("content", entry.content),
             entry.owner == spec.get("owner", entry.owner), entry.group == spec.get("group", entry.group),
             entry.mode == int(spec.get("mode", f"{entry.mode:o}"), 8)])
    if kind == "service":
        unit = model.services.get(unit_name(spec["name"]))
        return unit is not None and (unit.enabled, unit.active) == (spec.get("enabled", unit.enabled), spec.get("active", unit.active))
    if kind == "package":
        package = model.packages.get(spec["name"])
        if spec["state"] == "absent":
            return package is None
        return package is not None and (package.version, package.release) == (spec["version"], spec["release"])
    assert kind == "sysctl", kind
    persisted = "file" not in spec or f"{spec['name']} = {spec['value']}" in _lines(model, spec["file"])
    return model.sysctl[spec["name"]] == str(spec["value"]) and persisted


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_cases_change_the_host_as_they_say(path: Path) -> None:
    for case in _doc(path)["cases"]:
        model = BASELINE.apply(case["changes"])
        for change in case["changes"]:
            ((kind, spec),) = change.items()
            assert _holds(model, kind, spec), f"{case['id']}: {kind} {spec} does not show on the changed host"
            assert not _holds(BASELINE, kind, spec), f"{case['id']}: {kind} {spec} is already the baseline"
        assert (model.to_dict() == BASELINE.to_dict()) == (not case["changes"])


@pytest.fixture(scope="module")
def sandbox() -> None:
    try:
        require_isolation()
    except SandboxUnavailable as exc:
        pytest.skip(f"ansible-playbook runs only in the bubblewrap sandbox: {exc}")


def _verdict(doc: Doc, case_id: str, answer: str, workspace: Path) -> str:
    """What ``opa eval`` prints after ``answer``'s playbook ran on the case's host, as the CISO grader runs them."""
    case = next(c for c in doc["cases"] if c["id"] == case_id)
    model = BASELINE.apply(case["changes"])
    workspace.mkdir()
    for name, text in doc[answer]["files"].items():
        (workspace / name).write_text(text)
    write_inventory(workspace, model)
    done = run_playbook(model, workspace, "playbook.yml")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-1000:]
    output, status = eval_command(workspace, REGO_ARGV)
    if status != 0 and "rego_parse_error" in output:
        output, status = eval_command(workspace, [*REGO_ARGV, "--v0-compatible"])
    assert status == 0, output
    return output.strip()


SAMPLE_CASES = [pytest.param(name, case["id"], case["compliant"], id=f"{name}-{case['id']}")
                for name in SAMPLE for case in _doc(specs_dir() / "ciso" / name)["cases"]]


@pytest.mark.usefixtures("sandbox")
@pytest.mark.parametrize(("name", "case_id", "compliant"), SAMPLE_CASES)
def test_the_oracle_grades_every_case_on_real_ansible(name: str, case_id: str, compliant: bool, tmp_path: Path) -> None:
    doc = _doc(specs_dir() / "ciso" / name)
    assert _verdict(doc, case_id, "oracle", tmp_path / "ws") == ("true" if compliant else "false")


@pytest.mark.usefixtures("sandbox")
@pytest.mark.parametrize(("name", "case_id"), SAMPLE.items())
def test_the_wrong_answer_misses_a_violation_on_real_ansible(name: str, case_id: str, tmp_path: Path) -> None:
    doc = _doc(specs_dir() / "ciso" / name)
    assert not next(c for c in doc["cases"] if c["id"] == case_id)["compliant"]
    assert _verdict(doc, case_id, "wrong", tmp_path / "ws") == "true"
