"""Submitting a report: what LLMs write is read, what cannot be read is an error observation, never a crash."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any, cast

import gymnasium as gym
import pytest

import itbench_gym
from itbench_gym.evaluation.episode import grade
from itbench_gym.evaluation.groundtruth import parse_ground_truth
from itbench_gym.evaluation.report import MAX_REPORT_CHARS, MAX_REPORT_DEPTH, MAX_REPORT_VALUES, parse_report
from itbench_gym.tools.base import ToolContext, ToolResult
from itbench_gym.tools.submit import SubmitTool

ROOT = "otel-demo/ConfigMap/flagd-config"
GOOD = {"entities": [{"id": ROOT, "root_cause": True}, {"id": "otel-demo/Service/flagd", "root_cause": False}],
        "propagations": [{"source": ROOT, "target": "otel-demo/Service/flagd", "condition": "c", "effect": "e"}]}
GT = parse_ground_truth({
    "groups": [
        {"id": "cm", "kind": "ConfigMap", "name": "flagd-config", "namespace": "otel-demo", "root_cause": True},
        {"id": "flagd", "kind": "Service", "namespace": "otel-demo", "filter": ["flagd\\b"]},
    ],
    "propagations": [{"source": "cm", "target": "flagd"}],
})


def _submit(args: Any) -> ToolResult:
    """The tool alone: submit reads no endpoint and lets no time pass, so it needs no context."""
    return SubmitTool().run(args, cast(ToolContext, None))


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {"entities": []}
    node = root
    for _ in range(levels):
        node["x"] = {}
        node = node["x"]
    return root


# -- text as LLMs write it ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "source"),
    [
        (json.dumps(GOOD), "JSON text"),
        ("```json\n" + json.dumps(GOOD, indent=2) + "\n```", "fenced JSON block 1 of 1 at line 1"),
        ("```\n" + json.dumps(GOOD) + "\n```", "fenced JSON block 1 of 1"),
        ("I looked at the alerts.\n\nMy report:\n```json\n" + json.dumps(GOOD) + "\n```\nThe flag caused it.",
         "fenced JSON block 1 of 1 at line 4"),
        ("The root cause is the flag: " + json.dumps(GOOD) + " (see the flagd logs).",
         "the JSON object in the text from line 1 column 29"),
        (json.dumps(GOOD) + "\n\nLet me know if you need more.", "JSON text (text after the object ignored)"),
    ],
)
def test_plain_fenced_and_prose_wrapped_reports_are_read(text: str, source: str) -> None:
    result = parse_report(text)
    assert result.valid, result.errors
    assert result.document == GOOD
    assert result.source.startswith(source)


def test_of_several_fenced_blocks_the_last_report_is_read_and_named() -> None:
    draft = {"entities": [{"id": "otel-demo/Service/frontend", "root_cause": True}]}
    text = ("Draft:\n```json\n" + json.dumps(draft) + "\n```\nFinal:\n```json\n" + json.dumps(GOOD) + "\n```\n"
            "A propagation looks like:\n```json\n{\"source\": \"a\", \"target\": \"b\"}\n```\n"
            "```bash\nkubectl get pods {x}\n```")
    result = parse_report(text)
    assert result.valid and result.document == GOOD
    assert result.source == 'fenced JSON block 2 of 3 at line 6, the last one that mentions "entities"'


def test_a_broken_last_report_is_not_replaced_by_an_earlier_draft() -> None:
    text = "```json\n" + json.dumps(GOOD) + "\n```\nfixed:\n```json\n{\"entities\": [{\"id\": \"x\" \"root_cause\": true}]}\n```"
    result = parse_report(text)
    assert not result.valid
    assert result.errors[0].startswith("report (in the fenced block at line 5): not valid JSON: "
                                       "Expecting ',' delimiter at line 6 column 26"), result.errors
    assert result.source == 'fenced JSON block 2 of 2 at line 5, the last one that mentions "entities"'
    assert "Read from: " + result.source in _submit({"text": text}).text


def test_a_json_typo_gives_line_and_column_of_the_whole_text() -> None:
    text = 'Report:\n{"entities": [\n  {"id": "x", "root_cause": tru}\n]}'
    result = parse_report(text)
    assert not result.valid
    assert result.errors[0].startswith("report (the object starting at line 2 column 1): not valid JSON: "
                                       "Expecting value at line 3 column 29")
    assert any("missing comma" in h for h in result.hints)


# -- wrong shapes: the field path and what was expected ---------------------------------------------


@pytest.mark.parametrize(
    ("report", "error"),
    [
        ({"entities": {"id": "x"}}, "report.entities: expected array, got dict {'id': 'x'}"),
        ({"entities": ["frontend"]}, "report.entities[0]: expected object, got str 'frontend'"),
        ({"entities": [{"id": ROOT}, {"id": 7}]}, "report.entities[1].id: expected string, got int 7"),
        ({"entities": [{"id": "a"}, {"id": "b"}, {"id": "c", "root_cause": "true"}]},
         "report.entities[2].root_cause: expected boolean, got str 'true'"),
        ({"entities": [{"id": "a", "contributing_factor": 1}]}, "report.entities[0].contributing_factor: expected boolean, got int 1"),
        ({"entities": [{"kind": "Pod"}]}, "report.entities[0]: expected one of: 'id' is a required property; 'name' is a required property"),
        ({"entities": [], "propagations": [{"source": "a", "target": ""}]}, "report.propagations[0].target: '' should be non-empty"),
        ({"entities": [], "propagations": "a->b"}, "report.propagations: expected array, got str 'a->b'"),
        ({"propagations": []}, "report: 'entities' is a required property"),
        ("[" + json.dumps(GOOD) + "]", 'report: expected object {"entities": [...]}, got an array'),
        ('"just a string"', "report: no JSON object found in the text"),
        ("", "report: empty"),
    ],
)
def test_wrong_shapes_name_the_field_and_the_fix(report: Any, error: str) -> None:
    result = _submit({"text": report} if isinstance(report, str) else report)
    assert result.exit_status == 2 and not result.ends_episode
    assert any(e.startswith(error) for e in result.data["report_errors"]), result.data["report_errors"]
    assert error in result.text and "How to fix:" in result.text and '{"entities": [{"id"' in result.text


def test_every_error_of_a_report_is_listed() -> None:
    result = parse_report({"entities": [{"id": 1}, {"name": "b", "root_cause": "no"}], "propagations": [{"source": "a"}]})
    assert result.errors == (
        "report.entities[0].id: expected string, got int 1",
        "report.entities[1].root_cause: expected boolean, got str 'no'",
        "report.propagations[0]: 'target' is a required property",
    )
    assert "write booleans as true or false, without quotes" in result.hints


# -- hostile input: located errors, never an exception ------------------------------------------------


def test_deep_nesting_is_an_error_not_a_recursion_error() -> None:
    for report in (_deep(1_000), _deep(100_000), "[" * 1_000 + "]" * 1_000, '{"entities": [], "x": ' + "[" * 50_000):
        result = _submit({"text": report} if isinstance(report, str) else report)
        assert result.exit_status == 2 and not result.ends_episode
        assert f"nested deeper than {MAX_REPORT_DEPTH} levels" in result.text
    assert parse_report(_deep(MAX_REPORT_DEPTH - 2)).valid


def test_a_cyclic_object_is_an_error() -> None:
    report: dict[str, Any] = {"entities": []}
    report["self"] = report
    assert "nested deeper" in parse_report(report).errors[0]


@pytest.mark.parametrize(
    ("report", "error"),
    [
        ({"entities": [{"id": "flagd\ud800", "root_cause": True}]}, "report.entities[0].id: contains a lone UTF-16 surrogate (\\ud800) at position 5"),
        ('{"entities": [{"id": "\\udc00"}]}', "report.entities[0].id: contains a lone UTF-16 surrogate (\\udc00)"),
        ({"entities": [{"id": "a\x00b"}]}, "report.entities[0].id: contains a NUL character (\\u0000) at position 1"),
        ('{"entities": [{"id": "a\\u0000"}]}', "report.entities[0].id: contains a NUL character"),
        ({"entities": [], "\ud83d": 1}, "report.\\ud83d: key contains a lone UTF-16 surrogate"),
        ({"entities": [{"id": "a", "root_cause": 10**5000}]}, "report.entities[0].root_cause: integer with 16610 bits"),
        ('{"entities": [], "n": ' + "9" * 5000 + "}", "report: a number has too many digits"),
        ('{"entities": [], "n": 1e999}', "report.n: Infinity is not a JSON number"),
        ('{"entities": [], "n": NaN}', "report.n: NaN is not a JSON number"),
        ({"entities": [], 1: "x"}, "report: key 1 is a number; object keys must be strings"),
        ({"entities": [{("a", "b"): 1}]}, "report.entities[0]: key ('a', 'b') is an array; object keys must be strings"),
        ({"entities": [{"id": "a", "seen": {1, 2}}]}, "report.entities[0].seen: a Python set is not a JSON value"),
        ({"entities": [{"id": "a", "obj": object()}]}, "report.entities[0].obj: a Python object is not a JSON value"),
        ("x" * (MAX_REPORT_CHARS + 1), f"report: {MAX_REPORT_CHARS + 1:,} characters; the limit is {MAX_REPORT_CHARS:,}"),
        ({"entities": [{"id": str(i)} for i in range(MAX_REPORT_VALUES)]}, "report: more than 20,000 JSON values"),
        ({"entities": [{"id": "x" * 150_000}, {"id": "y" * 60_000}]}, "report: more than 200,000 characters of text"),
        (b"\xff\xfe{}", "report: not UTF-8 text"),
    ],
)
def test_hostile_values_are_rejected_with_their_place(report: Any, error: str) -> None:
    result = _submit({"text": report} if isinstance(report, str) else {"report": report})
    assert result.exit_status == 2 and not result.ends_episode
    assert any(e.startswith(error) for e in result.data["report_errors"]), result.data["report_errors"]
    result.text.encode("utf-8")  # the observation itself is valid, printable text


def test_fuzzed_reports_never_raise_and_grading_never_raises() -> None:
    rng = random.Random(7)
    atoms: list[Any] = [None, True, 0, -1, 2**70, 1.5, float("nan"), "", "x", "\ud800", "\x00", "otel-demo/Service/flagd",
                        "ConfigMap/flagd-config", "(", "[" * 40, "{", "```json", b"\xff", object()]

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth > 4 or roll < 0.4:
            return rng.choice(atoms)
        if roll < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        keys = ["entities", "propagations", "id", "name", "root_cause", "source", "target", "kind", 3, None]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 4))}

    texts = [json.dumps(GOOD)[: rng.randint(0, 150)] for _ in range(100)]
    for item in [value(0) for _ in range(400)] + texts:
        result = parse_report(item)
        assert result.valid or result.errors
        evaluation = grade(scenario="X", ground_truth=GT, report=item).to_dict()
        json.dumps(evaluation, allow_nan=False)
        tool = _submit(item if isinstance(item, dict) else {"text": item})
        assert tool.ends_episode == result.valid and (tool.exit_status == 2) == (not result.valid)


def test_a_report_naming_unknown_entities_is_valid_and_scores_zero() -> None:
    result = _submit({"entities": [{"id": "otel-demo/Service/nothing-like-it", "root_cause": True}]})
    assert result.ends_episode and result.exit_status == 0
    evaluation = grade(scenario="X", ground_truth=GT, report=result.data["report"])
    assert evaluation.report.valid and not evaluation.diagnosis.fl_pass
    assert evaluation.diagnosis.fl_reasons == ("otel-demo/Service/nothing-like-it matches no ground-truth entity",)


def test_the_grader_reads_exactly_what_submit_accepted() -> None:
    text = "Findings below.\n```json\n" + json.dumps(GOOD) + "\n```"
    accepted = _submit({"text": text})
    assert accepted.ends_episode and accepted.data["report"] == GOOD
    assert "fenced JSON block 1 of 1" in accepted.text
    from_text = grade(scenario="X", ground_truth=GT, report=text)
    from_tool = grade(scenario="X", ground_truth=GT, report=accepted.data["report"])
    assert from_text.diagnosis == from_tool.diagnosis and from_tool.diagnosis.fl_pass


# -- through the environment -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    environment = itbench_gym.make("SRE-CacheFailure-v0")
    environment.reset(seed=0)
    yield environment
    environment.close()


def test_bad_submits_are_observations_and_the_episode_goes_on_until_a_valid_one(env: gym.Env) -> None:
    obs, reward, terminated, truncated, info = env.step('submit {"entities": [{"id": "x" "root_cause": true}]}')
    assert obs["exit_status"] == 2 and not terminated and not truncated and reward == 0.0
    assert "not valid JSON: Expecting ',' delimiter at line 1 column 26" in obs["text"]
    assert "evaluation" not in info

    obs, _, terminated, _, _ = env.step("submit " + "[" * 1_000 + "]" * 1_000)
    assert obs["exit_status"] == 2 and not terminated and "nested deeper than" in obs["text"]

    obs, _, terminated, _, _ = env.step({"tool": "submit", "args": {"entities": [{"id": ROOT, "root_cause": "yes"}]}})
    assert obs["exit_status"] == 2 and not terminated
    assert "report.entities[0].root_cause: expected boolean, got str 'yes'" in obs["text"]

    obs, _, terminated, _, _ = env.step({"tool": "submit", "args": {"entities": [{"id": "flagd\ud800", "root_cause": True}]}})
    assert obs["exit_status"] == 2 and not terminated and "lone UTF-16 surrogate" in obs["text"]

    for args in (_deep(1_000), {"entities": [], 1: "x"}):  # the action parser or submit rejects them
        obs, _, terminated, truncated, _ = env.step({"tool": "submit", "args": args})
        assert obs["exit_status"] == 2 and not terminated and not truncated, obs["text"]

    obs, _, _, _, _ = env.step("alerts")  # the episode really goes on
    assert obs["exit_status"] == 0 and "HighRequestErrorRate" in obs["text"]

    report = "I checked flagd.\n```json\n" + json.dumps(GOOD, indent=2) + "\n```\nThat is my diagnosis."
    obs, _, terminated, truncated, info = env.step({"tool": "submit", "args": {"text": report}})
    assert obs["exit_status"] == 0 and terminated and not truncated
    assert "report accepted" in obs["text"]
    evaluation = info["evaluation"]
    assert evaluation["report"] == {"valid": True, "errors": []}
    assert evaluation["diagnosis"]["fl_pass"] is True
    assert len(env.unwrapped.episode.steps) == 8  # type: ignore[attr-defined]
