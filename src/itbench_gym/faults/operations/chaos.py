"""Chaos Mesh experiments (fault ``scheduled-chaos-mesh-experiment``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from itbench_gym.backends.sim.chaos.byteman import BytemanError, parse_rules, unsupported
from itbench_gym.backends.sim.chaos.jvmchaos import installed_script, webhook_problems
from itbench_gym.backends.sim.chaos.tproxy import webhook_problems as http_webhook_problems
from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext
from itbench_gym.faults.operations.common import target

#: What ITBench's scenarios leave out of ``scheduleSpec``: a run every minute, one at a time.
SCHEDULE_DEFAULTS = {"schedule": "@every 1m", "historyLimit": 1, "concurrencyPolicy": "Forbid"}
#: The field of a Schedule's spec that holds each experiment kind's spec (Chaos Mesh's ScheduleItem).
SCHEDULE_KEYS = {"PodChaos": "podChaos", "NetworkChaos": "networkChaos", "StressChaos": "stressChaos",
                 "HTTPChaos": "httpChaos", "JVMChaos": "jvmChaos", "IOChaos": "ioChaos"}


def create_chaos_schedule(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Create the Chaos Mesh ``Schedule`` (a custom object) that ITBench's fault describes."""
    ref = target(args)
    spec = {**SCHEDULE_DEFAULTS, **args["scheduleSpec"]}
    kind = spec["type"]
    if not isinstance(spec.get(SCHEDULE_KEYS[kind]), dict):
        raise FaultError(f"args.scheduleSpec.{SCHEDULE_KEYS[kind]}: required for type {kind}")
    if kind == "JVMChaos":
        _check_jvm(spec["jvmChaos"])
    if kind == "HTTPChaos" and (refused := http_webhook_problems(spec["httpChaos"])):
        raise FaultError(f"args.scheduleSpec.httpChaos: Chaos Mesh's admission webhook refuses it: {'; '.join(refused)}")
    ctx.create({"apiVersion": ref.api_version, "kind": ref.kind,
                "metadata": {"name": ref.name, "namespace": ref.namespace}, "spec": spec})
    return f"{ref}: {kind} {spec['schedule']}"


def _check_jvm(spec: Mapping[str, Any]) -> None:
    """A spec Chaos Mesh's webhook refuses, a Byteman script the agent would refuse (``ruleData``, or the
    rule Chaos Mesh writes for the action), or one using what the twin does not model, is no scenario."""
    where = "args.scheduleSpec.jvmChaos"
    refused = webhook_problems(spec)
    if refused:
        raise FaultError(f"{where}: Chaos Mesh's admission webhook refuses it: {'; '.join(refused)}")
    script = installed_script(spec, 0.0)
    if script is None:
        return
    field = ".ruleData" if spec.get("action") == "ruleData" else f" (the rule Chaos Mesh writes for action {spec['action']})"
    try:
        rules = parse_rules(script)
    except BytemanError as e:
        raise FaultError(f"{where}{field}: Byteman refuses the script: {e}") from None
    for rule in rules:
        problem = unsupported(rule)
        if problem is not None:
            raise FaultError(f"{where}{field}: {problem}")


OPERATIONS = {"create_chaos_schedule": create_chaos_schedule}
