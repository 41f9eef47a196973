"""What Byteman rules (JVMChaos ``ruleData``) do to a JVM service's requests.

A JVM service's ``jvm`` block in app.yaml is its code as data: per operation, the methods a request
runs (with the share of requests that reach each), what the code does with a null each returns, the
exceptions its handler catches and how the server answers one it does not. A rule that triggers in
one of those methods acts there: ``Thread.sleep`` delays the request, ``return`` replaces the
method's result (a null the code dereferences throws its NullPointerException), ``throw`` raises the
exception; the exception then meets the handler's catches or the server's answer to an uncaught
one. Rules Byteman's type check rejects (a null for a primitive, a value from a void method, an
unknown or undeclared checked exception) are disabled by the agent and do nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from itbench_gym.backends.sim.chaos.byteman import BytemanError, Call, Literal, Return, Rule, Throw, condition_holds, parse_rules, sleep_ms
from itbench_gym.lang import yamltext


@dataclass(frozen=True)
class Failure:
    """How a request that ended in an exception is answered, and which log template records it."""

    grpc_code: str
    details: str
    log: str


@dataclass(frozen=True)
class Method:
    cls: str
    name: str
    params: tuple[str, ...]
    returns: str
    #: Share of the operation's requests that run the method.
    share: float
    invokes: tuple[str, ...]
    lines: tuple[int, int] | None
    declares: tuple[str, ...]
    #: (exception class, message) the caller's dereference of a null result throws; None: a null is harmless.
    on_null: tuple[str, str] | None


@dataclass(frozen=True)
class Catch:
    exception: str
    failure: Failure


@dataclass(frozen=True)
class JvmOperation:
    methods: tuple[Method, ...]
    catches: tuple[Catch, ...]


@dataclass(frozen=True)
class JvmCode:
    supertypes: dict[str, tuple[str, ...]]
    operations: dict[str, JvmOperation]
    uncaught: Failure
    #: Bytes live in the heap after a full GC at steady state.
    heap_live_bytes: float = 0.0


@dataclass(frozen=True)
class RuleOutcome:
    """One operation's share of failed requests (with how they fail) and delays, under the rules."""

    error_ratio: float
    failure: Failure | None
    #: "<class>: <message>" of the exception behind the failures.
    exception: str
    #: (share of requests, added seconds)
    delays: tuple[tuple[float, float], ...]


@functools.lru_cache(maxsize=1)
def _jdk() -> tuple[dict[str, str], frozenset[str]]:
    raw = yamltext.load(resources.files(__package__).joinpath("jvm.yaml").read_text())
    return dict(raw["throwables"]), frozenset(raw["primitives"])


@functools.lru_cache(maxsize=64)
def script_rules(text: str) -> tuple[Rule, ...]:
    """The rules of a ``ruleData`` script (none when Byteman would refuse it: the injection failed)."""
    try:
        return tuple(parse_rules(text))
    except BytemanError:
        return ()


def _failure(raw: dict[str, Any]) -> Failure:
    return Failure(str(raw["grpc_code"]), str(raw.get("details", "")), str(raw["log"]))


def _method(raw: dict[str, Any]) -> Method:
    ref = str(raw["method"])
    head, _, rest = ref.partition("(")
    cls, _, name = head.rpartition(".")
    params = tuple(p.strip() for p in rest.rstrip(")").split(",") if p.strip())
    null = raw.get("on_null")
    lines = raw.get("lines")
    return Method(cls, name, params, str(raw.get("returns", "void")), float(raw.get("share", 1.0)),
                  tuple(raw.get("invokes", ())), (int(lines[0]), int(lines[1])) if lines else None,
                  tuple(raw.get("throws", ())), (str(null["throw"]), str(null.get("message", ""))) if null else None)


def load_jvm(raw: dict[str, Any]) -> JvmCode:
    """A service's app.yaml ``jvm`` block (validated by app.schema.json)."""
    ops = {op: JvmOperation(tuple(_method(m) for m in o["methods"]),
                            tuple(Catch(c["exception"], _failure(c)) for c in o.get("catches", ())))
           for op, o in raw["operations"].items()}
    supers = {c: tuple(v) for c, v in (raw.get("classes") or {}).items()}
    return JvmCode(supers, ops, _failure(raw["uncaught"]), float(raw.get("heap_live_mi", 0.0)) * MIB)


MIB = float(1 << 20)
#: HotSpot's defaults (share/gc/shared/gc_globals.hpp): MaxRAMPercentage, MinRAMPercentage, and the
#: MaxHeapSize a heap sized from a "small" memory falls back to.
MAX_RAM_PERCENTAGE = 25.0
MIN_RAM_PERCENTAGE = 50.0
DEFAULT_MAX_HEAP_BYTES = 96 * MIB
#: SerialGC's NewRatio=2: the old generation is 2/3 of the heap. HotSpot picks SerialGC when the JVM
#: sees fewer than 2 CPUs (a CPU limit under 1.5 cores rounds to one), as for ITBench's ad at 150m.
OLD_GENERATION_SHARE = 2.0 / 3.0
#: java.util.ArrayList grows its array to 1.5x, copying into a new one while the old is still live.
ARRAYLIST_GROWTH = 1.5
_SIZE = {"": 1.0, "k": 1024.0, "m": MIB, "g": 1024.0 * MIB}


def max_heap_bytes(env: Mapping[str, str], memory_limit: float, machine_memory: float) -> float:
    """The JVM's maximum heap: ``-Xmx`` or ``-XX:MaxRAMPercentage`` from JAVA_TOOL_OPTIONS or
    JDK_JAVA_OPTIONS (the variables the JVM and its launcher read), else HotSpot's ergonomics over
    the container's memory limit (the machine's memory without one)."""
    options = f"{env.get('JAVA_TOOL_OPTIONS', '')} {env.get('JDK_JAVA_OPTIONS', '')}"
    xmx = re.findall(r"-Xmx(\d+)([kKmMgG]?)\b", options)
    if xmx:
        number, unit = xmx[-1]
        return float(number) * _SIZE[unit.lower()]
    memory = memory_limit or machine_memory
    pct = re.findall(r"-XX:MaxRAMPercentage=([\d.]+)", options)
    if pct:
        return memory * float(pct[-1]) / 100.0
    if memory * MIN_RAM_PERCENTAGE / 100.0 < DEFAULT_MAX_HEAP_BYTES:
        return memory * MIN_RAM_PERCENTAGE / 100.0
    return max(memory * MAX_RAM_PERCENTAGE / 100.0, DEFAULT_MAX_HEAP_BYTES)


def heap_stress_bytes(max_heap: float, live: float) -> float:
    """What Chaos Mesh's JVM heap stress keeps: its StressHelper thread appends to one ArrayList until
    an allocation throws OutOfMemoryError, then holds the list and sleeps. The allocation that fails is
    the list's next array (1.5x, beside the current one), so the list keeps the largest array that
    fitted with its successor in the old generation's free space; the heap's other objects still have
    the rest, and the requests go on (only the working set grows)."""
    free = max(max_heap * OLD_GENERATION_SHARE - live, 0.0)
    return free / (1.0 + ARRAYLIST_GROWTH)


def _simple(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _names(cls: str, wanted: str) -> bool:
    """Byteman's class match: the fully qualified name, or the name without its package."""
    return cls == wanted or _simple(cls) == wanted


def _ancestors(code: JvmCode, cls: str) -> list[str]:
    jdk, _ = _jdk()
    out, todo = [], [cls]
    while todo:
        c = todo.pop()
        for s in code.supertypes.get(c, ()) or ((jdk[c],) if c in jdk else ()):
            if s not in out:
                out.append(s)
                todo.append(s)
    return out


def _triggers(code: JvmCode, rule: Rule, m: Method) -> bool:
    if condition_holds(rule) is not True:
        return False
    if rule.interface or rule.overriding:
        candidates = ([m.cls] if not rule.interface else []) + _ancestors(code, m.cls)
        if not any(_names(c, rule.target) for c in candidates):
            return False
    elif not _names(m.cls, rule.target):
        return False
    if rule.method != m.name:
        return False
    if rule.signature is not None and tuple(_simple(p) for p in rule.signature) != tuple(_simple(p) for p in m.params):
        return False
    if rule.location == "LINE":
        return m.lines is not None and m.lines[0] <= int(rule.location_arg or 0) <= m.lines[1]
    if rule.location == "INVOKE":
        return rule.location_arg in m.invokes
    return rule.location in ("ENTRY", "EXIT")


def _resolve(code: JvmCode, name: str) -> str | None:
    jdk, _ = _jdk()
    known = set(jdk) | set(code.supertypes)
    if name in known:
        return name
    return next((k for k in sorted(known) if _simple(k) == name and k.startswith("java.lang.")), None) or \
        next((k for k in sorted(known) if _simple(k) == name), None)


def _is_a(code: JvmCode, cls: str, ancestor: str) -> bool:
    return cls == ancestor or ancestor in _ancestors(code, cls)


def _thrown(code: JvmCode, rule: Rule, m: Method) -> tuple[str, str] | None:
    """The exception the rule's actions end the method with (None: none, or the type check fails)."""
    _, primitives = _jdk()
    for action in rule.actions:
        if isinstance(action, Return):
            value = action.value
            if value is None:
                return None
            if m.returns == "void" or not isinstance(value, Literal):
                return None
            if value.value is None:
                return None if m.returns in primitives else m.on_null
            return None
        if isinstance(action, Throw):
            cls = _resolve(code, action.exception)
            if cls is None:
                return None
            unchecked = _is_a(code, cls, "java.lang.RuntimeException") or _is_a(code, cls, "java.lang.Error")
            if not unchecked and not any(_is_a(code, cls, _resolve(code, d) or d) for d in m.declares):
                return None
            msg = next((a.value for a in action.args if isinstance(a, Literal) and isinstance(a.value, str)), "")
            return cls, msg
    return None


def _delay_s(rule: Rule) -> float:
    return sum(ms for a in rule.actions if isinstance(a, Call) and (ms := sleep_ms(a)) is not None) / 1000.0


def outcome(code: JvmCode, operation: str, rules: tuple[Rule, ...]) -> RuleOutcome | None:
    """What ``rules`` do to ``operation``'s requests (None: nothing)."""
    op = code.operations.get(operation)
    if op is None:
        return None
    ok, failure, exception, delays = 1.0, None, "", []
    for m in op.methods:
        for rule in rules:
            if not _triggers(code, rule, m):
                continue
            delay = _delay_s(rule)
            if delay > 0:
                delays.append((m.share, delay))
            thrown = _thrown(code, rule, m)
            if thrown is None:
                continue
            cls, msg = thrown
            if failure is None:
                caught = next((c for c in op.catches if _is_a(code, cls, _resolve(code, c.exception) or c.exception)), None)
                failure = caught.failure if caught is not None else code.uncaught
                exception = f"{cls}: {msg}" if msg else cls
            ok *= 1.0 - m.share
    if failure is None and not delays:
        return None
    return RuleOutcome(1.0 - ok, failure, exception, tuple(delays))
