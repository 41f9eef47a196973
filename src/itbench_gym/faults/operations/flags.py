"""Feature flags of the OpenTelemetry demo (fault ``opentelemetry-demo-feature-flag``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.context import FaultContext
from itbench_gym.faults.operations.common import target


def set_feature_flag(ctx: FaultContext, args: Mapping[str, Any]) -> str:
    """Set ``flags.<name>.defaultVariant`` in the flagd ConfigMap (ITBench's injection), under the
    key app.yaml ``flags.key`` names."""
    app = ctx.app
    if app.flags is None:
        raise FaultError(f"app {app.name!r} has no feature flags (envs/{app.directory.name}/app.yaml flags)")
    key = app.flags.key
    ref = target(args)
    flag, state = args["flag"]["name"], args["flag"]["state"]
    raw = (ctx.require(ref).get("data") or {}).get(key)
    if raw is None:
        raise FaultError(f"{ref} has no key {key!r}")
    config = json.loads(raw)
    flags = config.get("flags", {})
    if flag not in flags:
        raise FaultError(f"flag {flag!r} is not defined in {ref}; defined: {', '.join(sorted(flags))}")
    variants = flags[flag].get("variants", {})
    if state not in variants:
        raise FaultError(f"flag {flag!r} has no variant {state!r}; variants: {', '.join(sorted(variants))}")
    flags[flag]["defaultVariant"] = state
    ctx.patch(ref, {"data": {key: json.dumps(config, indent=2)}}, "merge")
    return f"{ref}: flags.{flag}.defaultVariant={state}"


OPERATIONS = {"set_feature_flag": set_feature_flag}
