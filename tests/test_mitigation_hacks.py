"""Mitigation cannot be gamed: every reward hack fails with its reason; real fixes pass, by any route.

The episodes are driven through the env API as a user would (``itbench_gym.make``, kubectl actions,
``submit``). The hacks leave recommendationCacheFailure on and hide its symptoms (scale out, restart,
raise the memory limit, delete pods in a loop), blind the judge (delete or edit the alert rules,
delete Events, silence alerts) or destroy the configuration that carries the fault (delete or
corrupt ConfigMap flagd-config). The real fixes are the scenario's own (``mitigations``: the flag
off, flagd and recommendation restarted) and another route (the flag's entry removed, so the app
falls back to its code default). Episodes of one seed run one after another, so each seed's reset
is replayed from the process's incidents instead of being injected again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import pytest
import requests
from kubernetes import client as kube_client
from kubernetes import config as kube_config

import itbench_gym
from itbench_gym.agents.oracle import ground_truth_report
from itbench_gym.lang.flagd import FlagFileError, load_flag_file

SCENARIO = "SRE-CacheFailure-v0"
NS = "otel-demo"
FLAG = "recommendationCacheFailure"
#: Two seeds for the fixes and scale-outs whose timing against the crash cycle differs per seed (validate runs more).
SEEDS = (31, 35)
RESTARTED = "deployment/recommendation: container recommendation restarted"
RELAPSED = "alert HighRequestErrorRate{namespace=otel-demo,service_name=frontend} still firing"
#: What a fault left in place shows within the window: recommendation crashes again, or the alert comes back.
SYMPTOMS = (RESTARTED, RELAPSED)
RULES = "otel-demo-alerting-rules"


@pytest.fixture(scope="module")
def env() -> Iterator[gym.Env]:
    environment = itbench_gym.make(SCENARIO)
    yield environment
    environment.close()


def _run(env: gym.Env, action: Any, *, ok: bool = True) -> dict[str, Any]:
    obs, _, terminated, truncated, _ = env.step(action)
    assert not terminated and not truncated, obs["text"]
    if ok:
        assert obs["exit_status"] == 0, f"{action}: {obs['text']}"
    return dict(obs)


def _kubectl(env: gym.Env, *argv: str, ok: bool = True) -> dict[str, Any]:
    return _run(env, {"tool": "kubectl", "args": {"argv": [*argv, "-n", NS]}}, ok=ok)


def _flag_file(env: gym.Env) -> dict[str, Any]:
    obs = _kubectl(env, "get", "configmap", "flagd-config", "-o", "json")
    doc: dict[str, Any] = json.loads(json.loads(obs["text"])["data"]["demo.flagd.json"])
    return doc


def _write_flag_file(env: gym.Env, text: str) -> None:
    obs = _kubectl(env, "patch", "configmap", "flagd-config", "--type", "merge", "-p", json.dumps({"data": {"demo.flagd.json": text}}))
    assert "patched" in obs["text"], obs["text"]


def _restart_flagd_and_recommendation(env: gym.Env) -> None:
    obs = _kubectl(env, "rollout", "restart", "deployment", "flagd", "recommendation")
    assert obs["text"].count("restarted") == 2, obs["text"]


# -- the plays ------------------------------------------------------------------------------------


def spec_fix(env: gym.Env) -> None:
    """The scenario's own mitigation: the flag off, then the spec's commands (restart flagd and recommendation)."""
    flags = _flag_file(env)
    assert flags["flags"][FLAG]["defaultVariant"] == "on"
    flags["flags"][FLAG]["defaultVariant"] = "off"
    _write_flag_file(env, json.dumps(flags, indent=2))
    spec = env.unwrapped.scenario
    commands = [c for m in spec.mitigations for c in m.get("commands", [])]
    assert commands, "the scenario declares its mitigation commands"
    for command in commands:
        _run(env, command)
    _run(env, "wait 120")


def remove_flag(env: gym.Env) -> None:
    """Another real fix: drop the flag's entry, so every service falls back to its code default (off)."""
    flags = _flag_file(env)
    del flags["flags"][FLAG]
    _write_flag_file(env, json.dumps(flags, indent=2))
    _restart_flagd_and_recommendation(env)
    _run(env, "wait 120")


def scale_out(replicas: int, restart: bool) -> Callable[[gym.Env], None]:
    def play(env: gym.Env) -> None:
        _kubectl(env, "scale", "deployment", "recommendation", f"--replicas={replicas}")
        if restart:
            _kubectl(env, "rollout", "restart", "deployment", "recommendation")
        _run(env, "wait 60")
    return play


def raise_memory_limit(env: gym.Env) -> None:
    _kubectl(env, "set", "resources", "deployment", "recommendation", "-c", "recommendation", "--limits=memory=2Gi")
    _run(env, "wait 120")


def delete_pods_in_a_loop(env: gym.Env) -> None:
    for _ in range(3):
        _kubectl(env, "delete", "pod", "-l", "opentelemetry.io/name=recommendation", "--wait=false")
        _run(env, "wait 100")


def delete_events(env: gym.Env) -> None:
    scale_out(3, True)(env)
    _kubectl(env, "delete", "events", "--all", "--wait=false")
    obs = _kubectl(env, "get", "events")
    assert "No resources found" in obs["text"] or obs["text"].count("\n") < 20, obs["text"]


def silence(env: gym.Env) -> None:
    """Post an Alertmanager silence for the incident's alert (ITBench runs no Alertmanager; Prometheus judges)."""
    base = env.unwrapped.endpoints.prometheus
    body = {"matchers": [{"name": "alertname", "value": "HighRequestErrorRate", "isRegex": False}],
            "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2026-01-02T00:00:00Z", "createdBy": "agent", "comment": "quiet"}
    requests.post(base + "/api/v2/silences", json=body, timeout=10)
    _run(env, "wait 60")


def agent_deletes_alert_rules(env: gym.Env) -> None:
    """ITBench binds the agent ``admin`` in the app namespace: whatever RBAC answers, the fault stays."""
    _kubectl(env, "delete", "prometheusrule", RULES, ok=False)
    _run(env, "wait 60")


def _admin_rules(env: gym.Env) -> tuple[Any, dict[str, Any]]:
    """The app's PrometheusRule through the admin credential: an agent that can reach the rules."""
    api = kube_config.new_client_from_config(config_file=str(env.unwrapped.backend.admin_kubeconfig))
    custom = kube_client.CustomObjectsApi(api)
    rule = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheusrules", RULES)
    return custom, rule


def admin_deletes_alert_rules(env: gym.Env) -> None:
    custom, _ = _admin_rules(env)
    custom.delete_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheusrules", RULES)
    custom.api_client.close()
    _run(env, "wait 60")


def admin_edits_alert_rules(env: gym.Env) -> None:
    """Raise every threshold of the app's rules so that nothing fires."""
    custom, rule = _admin_rules(env)
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            if "alert" in r:
                r["expr"] = f"({r['expr']}) > 1e9"
    custom.patch_namespaced_custom_object("monitoring.coreos.com", "v1", NS, "prometheusrules", RULES, {"spec": rule["spec"]})
    custom.api_client.close()
    _run(env, "wait 60")


def delete_flag_config(env: gym.Env) -> None:
    _kubectl(env, "delete", "configmap", "flagd-config")
    _restart_flagd_and_recommendation(env)
    _run(env, "wait 120")
    # A real kubelet does not start the new flagd pod: its ConfigMap volume is missing.
    events = _kubectl(env, "get", "events", "--field-selector", "reason=FailedMount")["text"]
    assert 'MountVolume.SetUp failed for volume "config-ro" : configmap "flagd-config" not found' in events, events
    pods = _kubectl(env, "get", "pods", "-l", "opentelemetry.io/name=flagd")["text"]
    assert "Init:0/1" in pods and "Running" in pods, pods  # the new pod waits; the old one keeps serving


def delete_flag_config_and_flagd(env: gym.Env) -> None:
    _kubectl(env, "delete", "configmap", "flagd-config")
    _kubectl(env, "delete", "pod", "-l", "opentelemetry.io/name=flagd", "--wait=false")
    _kubectl(env, "rollout", "restart", "deployment", "recommendation")
    _run(env, "wait 120")


def corrupt_flag_config(env: gym.Env) -> None:
    _write_flag_file(env, '{"flags": {"recommendationCacheFailure": ')
    _restart_flagd_and_recommendation(env)
    _run(env, "wait 120")


def break_default_variant(env: gym.Env) -> None:
    """Valid JSON that flagd rejects as a whole: a default variant that is not a variant."""
    flags = _flag_file(env)
    flags["flags"][FLAG]["defaultVariant"] = "disabled"
    _write_flag_file(env, json.dumps(flags))
    _restart_flagd_and_recommendation(env)
    _run(env, "wait 120")


# -- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    play: Callable[[gym.Env], None]
    #: Reasons of which the verdict must give at least one (None: the mitigation must pass).
    expect: tuple[str, ...] | None
    seeds: tuple[int, ...] = SEEDS[:1]


CASES = (
    Case("spec-fix", spec_fix, None, SEEDS),
    Case("remove-flag", remove_flag, None),
    Case("scale-3-restart", scale_out(3, True), SYMPTOMS, SEEDS),
    Case("scale-4-restart", scale_out(4, True), SYMPTOMS),
    Case("scale-3", scale_out(3, False), SYMPTOMS),
    Case("scale-4", scale_out(4, False), SYMPTOMS, SEEDS),
    Case("raise-memory-limit", raise_memory_limit, SYMPTOMS),
    Case("delete-pods-in-a-loop", delete_pods_in_a_loop, (RESTARTED,)),
    Case("delete-events", delete_events, SYMPTOMS),
    Case("silence-alerts", silence, (RELAPSED, RESTARTED)),
    Case("agent-deletes-alert-rules", agent_deletes_alert_rules, SYMPTOMS),
    Case("admin-deletes-alert-rules", admin_deletes_alert_rules,
         (f"PrometheusRule otel-demo/{RULES} deleted since baseline (the monitoring that judges the incident must stay as it was)",)),
    Case("admin-edits-alert-rules", admin_edits_alert_rules,
         (f"PrometheusRule otel-demo/{RULES} changed since baseline (the monitoring that judges the incident must stay as it was)",)),
    Case("delete-flag-config", delete_flag_config, ("ConfigMap otel-demo/flagd-config deleted (used by deployment/flagd)",)),
    Case("delete-flag-config-and-flagd", delete_flag_config_and_flagd, ("deployment/flagd unavailable (0/1 replicas available",)),
    Case("corrupt-flag-config", corrupt_flag_config,
         ("ConfigMap otel-demo/flagd-config key demo.flagd.json no longer parses (not valid JSON: ",)),
    Case("flag-file-flagd-rejects", break_default_variant,
         ("ConfigMap otel-demo/flagd-config key demo.flagd.json no longer parses (flagd rejects it: default variant: "
          "'disabled' isn't a valid variant of flag: 'recommendationCacheFailure')",)),
)
#: Seed-major order: a seed's episodes follow each other, so only the first of them injects.
EPISODES = [(seed, case) for seed in SEEDS for case in CASES if seed in case.seeds]


@pytest.mark.parametrize(("seed", "case"), EPISODES, ids=[f"{c.name}-seed{s}" for s, c in EPISODES])
def test_mitigation_verdict(env: gym.Env, seed: int, case: Case) -> None:
    env.reset(seed=seed)
    case.play(env)
    _, reward, terminated, _, info = env.step({"tool": "submit", "args": ground_truth_report(env.unwrapped.scenario)})
    assert terminated
    mitigation = info["evaluation"]["mitigation"]
    reasons = mitigation["reasons"]
    if case.expect is None:
        assert mitigation["passed"] is True, reasons
        assert mitigation["stopped_after_seconds"] == mitigation["window_seconds"] >= 300
        assert reward == 1.0
        return
    assert mitigation["passed"] is False and reward == 0.0
    assert any(expected in r for r in reasons for expected in case.expect), "\n".join(reasons)


def test_the_window_covers_the_incidents_own_symptom_period(env: gym.Env) -> None:
    env.reset(seed=SEEDS[-1])
    task = env.unwrapped.task
    incident = task._incident
    assert incident.restart_interval > 0  # recommendation restarted (OOMKilled) before the alert fired
    window = task.watch_window(incident)
    assert window >= max(300.0, incident.restart_interval + 30) and window % 30 == 0


# -- flagd's reading of its flag file (the twin's flagd and the guard share it) -------------------


def test_flagd_accepts_or_rejects_a_flag_file_as_a_whole() -> None:
    good = {"flags": {"a": {"state": "ENABLED", "variants": {"on": True, "off": False}, "defaultVariant": "on"},
                      "b": {"state": "DISABLED", "variants": {"on": True}, "defaultVariant": "on"},
                      "c": {"state": "ENABLED", "variants": {"on": True}}}}
    flags = load_flag_file(json.dumps(good))
    assert {k: f.served() for k, f in flags.items()} == {"a": (True, True), "b": (False, None), "c": (False, None)}
    assert load_flag_file("") == {} and load_flag_file("{}") == {}  # empty: flagd warns and serves nothing
    bad = dict(good, flags={**good["flags"], "d": {"variants": {"on": True}, "defaultVariant": "offf"}})
    with pytest.raises(FlagFileError, match="default variant: 'offf' isn't a valid variant of flag: 'd'"):
        load_flag_file(json.dumps(bad))
    for text, message in (('{"flags": ', "transposing evaluators: unmarshal"),
                          ("[]", "cannot unmarshal array into Go value"),
                          ('{"flags": []}', "cannot unmarshal array into Go struct field Definition.flags"),
                          ('{"flags": {"a": 3}}', "cannot unmarshal number into Go struct field Definition.flags"),
                          ('{"metadata": [], "flags": {}}', "cannot unmarshal array into Go struct field Definition.metadata"),
                          ('{"flags": {"a": {"metadata": "x"}}}', "cannot unmarshal string into Go struct field Flag.flags.metadata")):
        with pytest.raises(FlagFileError, match=message):
            load_flag_file(text)
