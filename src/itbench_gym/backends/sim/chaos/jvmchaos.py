"""What Chaos Mesh makes of a JVMChaos spec: the admission webhook's checks, and the Byteman script
chaos-daemon installs in the target JVM.

Chaos Mesh writes the script itself for ``latency``, ``exception`` and ``return``: one rule at the
entry of ``class``.``method``, unconditional, doing ``Thread.sleep(<latency>L)``, ``throw new
<exception>`` or ``return <returnValue>``; ``ruleData`` is installed as written. ``stress`` and
``gc`` call Chaos Mesh's own helper classes from its trigger thread, which the app model applies
itself (``app/model.py``). So every action that acts through a method goes through the same Byteman
path (``byteman.py``, ``app/jvm.py``) as a hand-written rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..kube.controllers.util import parse_time

#: The actions Chaos Mesh's webhook accepts (``mysql`` is not modelled: the catalogue refuses it).
ACTIONS = ("latency", "exception", "return", "stress", "gc", "ruleData", "mysql")
#: The action -> the field holding the rule's action value, for the actions written as a rule.
_VALUE_FIELD = {"latency": "latency", "exception": "exception", "return": "returnValue"}


def webhook_problems(spec: Mapping[str, Any]) -> list[str]:
    """What Chaos Mesh's admission webhook refuses in a JVMChaos spec (its words), [] when it accepts it."""
    action = str(spec.get("action") or "")
    if not action:
        return ["action not provided"]
    if action not in ACTIONS:
        return [f"action {action} not supported, action can be 'latency', 'exception', 'return', 'stress', 'gc' or 'ruleData'"]
    out = []
    if action == "stress":
        cpu, mem = int(spec.get("cpuCount") or 0), str(spec.get("memType") or "")
        if not cpu and not mem:
            out.append("must set one of cpu-count and mem-type when action is 'stress'")
        if cpu and mem:
            out.append("inject stress on both CPU and memory is not support now")
        if mem and mem not in ("stack", "heap"):
            out.append("value should be 'stack' or 'heap'")
    elif action in _VALUE_FIELD:
        if not spec.get("class"):
            out.append("class not provided")
        if not spec.get("method"):
            out.append("method not provided")
        if not spec.get(_VALUE_FIELD[action]):
            out.append(f"{'value' if action == 'return' else action} not provided")
    elif action == "ruleData" and not spec.get("ruleData"):
        out.append("rule data not provide")
    return out


def installed_script(spec: Mapping[str, Any], created: float) -> str | None:
    """The Byteman script chaos-daemon submits for the spec (None: the action runs a Chaos Mesh helper,
    or the webhook would have refused it). ``created`` is the experiment's creation time in seconds:
    the webhook names an unnamed rule ``<class>-<method>-<action>-<unix time>``."""
    action = str(spec.get("action") or "")
    if action == "ruleData":
        return str(spec.get("ruleData") or "") or None
    if action not in _VALUE_FIELD or webhook_problems(spec):
        return None
    cls, method, value = spec["class"], spec["method"], spec[_VALUE_FIELD[action]]
    name = spec.get("name") or f"{cls}-{method}-{action}-{int(created)}"
    do = {"latency": f"Thread.sleep({_latency_ms(value)}L)", "exception": f"throw new {value}", "return": f"return {value}"}[action]
    return f"\nRULE {name}\nCLASS {cls}\nMETHOD {method}\nAT ENTRY\nIF true\nDO\n\t{do};\nENDRULE\n"


def experiment_script(obj: Mapping[str, Any]) -> str | None:
    """:func:`installed_script` of a JVMChaos object, named after its creation time as the webhook does."""
    return installed_script(obj.get("spec") or {}, parse_time(obj["metadata"].get("creationTimestamp")) or 0.0)


def _latency_ms(value: Any) -> int:
    """``latency`` is an int of milliseconds in Chaos Mesh's API (Go's ``%d``)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
