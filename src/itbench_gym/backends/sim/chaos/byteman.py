"""Byteman rule scripts, as Chaos Mesh's JVMChaos ``ruleData`` hands them to the Byteman agent.

chaos-daemon installs Byteman in the target JVM and submits the script; a script Byteman cannot
parse is refused, so the injection fails with Byteman's complaint (:class:`BytemanError`). A parsed
:class:`Rule` says where it triggers (class, method, location) and what it does there; the app
model (``app/jvm.py``) decides what that does to the requests that run the method.

The twin evaluates the conditions ``true`` and ``false`` and the actions ``return``, ``throw new``
and ``Thread.sleep``; :func:`unsupported` names what else a valid rule uses, so a scenario author
gets a clear error rather than a rule that silently never fires.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, cast

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from lark.tree import Meta

#: A literal a rule returns or passes: None is Java's null.
Value = bool | float | str | None


class BytemanError(ValueError):
    """A script Byteman refuses to load (the text is what its agent reports)."""


@dataclass(frozen=True)
class Literal:
    value: Value


@dataclass(frozen=True)
class Expression:
    """An expression the twin does not evaluate (parameter tests, arithmetic, calls), kept as text."""

    text: str


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Literal | Expression | Call, ...]


Expr = Literal | Expression | Call


@dataclass(frozen=True)
class Return:
    #: None: a bare ``return`` (void methods).
    value: Expr | None


@dataclass(frozen=True)
class Throw:
    exception: str
    args: tuple[Expr, ...]


Action = Return | Throw | Call


@dataclass(frozen=True)
class Rule:
    name: str
    #: The class (or interface) as written, without ``^``.
    target: str
    interface: bool
    #: ``^``: the rule also applies to subclasses (implementations for an interface).
    overriding: bool
    method: str
    #: Parameter types as written, or None when METHOD gives no signature.
    signature: tuple[str, ...] | None
    #: ENTRY, EXIT, LINE, INVOKE, AFTER INVOKE or THROW.
    location: str
    #: The line number (LINE) or invoked method name (INVOKE).
    location_arg: str | None
    condition: Expr
    actions: tuple[Action, ...]
    helper: str | None = None


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    grammar = resources.files(__package__).joinpath("byteman.lark").read_text()
    return Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=True, propagate_positions=True, cache=False)


def _method_ref(text: str) -> tuple[str, tuple[str, ...] | None]:
    name, _, rest = text.partition("(")
    if not rest:
        return name.strip(), None
    params = rest.rstrip(")").strip()
    return name.strip(), tuple(p.strip() for p in params.split(",")) if params else ()


class _Build(Transformer[Token, object]):
    """Parse tree → :class:`Rule` objects."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self._text = text

    @v_args(meta=True)
    def _source(self, meta: Meta, _: list[object]) -> Expression:
        """Compound expressions the twin does not evaluate keep their source text."""
        return Expression(self._text[meta.start_pos:meta.end_pos])

    or_ = and_ = not_ = compare = arith = _source

    def start(self, rules: list[Rule]) -> list[Rule]:
        return rules

    def rule(self, items: list[Any]) -> Rule:
        name: Token = items[0]
        interface, ref = cast(tuple[bool, str], items[1])
        method, signature = cast(tuple[str, "tuple[str, ...] | None"], items[2])
        rest = items[3:]
        helper = cast(str, rest.pop(0)) if isinstance(rest[0], str) else None
        location, arg = cast(tuple[str, "str | None"], rest[0])
        condition, actions = cast(Expr, rest[1]), cast(tuple[Action, ...], rest[2])
        return Rule(str(name).strip(), ref.lstrip("^"), interface, ref.startswith("^"),
                    method, signature, location, arg, condition, actions, helper)

    def class_target(self, items: list[Token]) -> tuple[bool, str]:
        return False, str(items[0])

    def interface_target(self, items: list[Token]) -> tuple[bool, str]:
        return True, str(items[0])

    def method(self, items: list[Token]) -> tuple[str, tuple[str, ...] | None]:
        return _method_ref(str(items[0]))

    def helper(self, items: list[Token]) -> str:
        return str(items[0])

    def at_entry(self, _: list[Token]) -> tuple[str, None]:
        return "ENTRY", None

    def at_exit(self, _: list[Token]) -> tuple[str, None]:
        return "EXIT", None

    def at_throw(self, _: list[Token]) -> tuple[str, None]:
        return "THROW", None

    def at_line(self, items: list[Token]) -> tuple[str, str]:
        return "LINE", str(items[0])

    def at_invoke(self, items: list[Token]) -> tuple[str, str]:
        return "INVOKE", _method_ref(str(items[0]))[0].rsplit(".", 1)[-1]

    def after_invoke(self, items: list[Token]) -> tuple[str, str]:
        return "AFTER INVOKE", _method_ref(str(items[0]))[0].rsplit(".", 1)[-1]

    def condition(self, items: list[Expr]) -> Expr:
        return items[0]

    def actions(self, items: list[Action]) -> tuple[Action, ...]:
        return tuple(items)

    def return_action(self, items: list[Any]) -> Return:
        return Return(items[1] if len(items) > 1 else None)

    def throw_action(self, items: list[Any]) -> Throw:
        return Throw(str(items[2]), tuple(items[3] or ()))

    def call(self, items: list[Any]) -> Call:
        return Call(str(items[0]), tuple(items[1] or ()) if len(items) > 1 else ())

    def arguments(self, items: list[Expr]) -> list[Expr]:
        return items

    def true(self, _: list[Token]) -> Literal:
        return Literal(True)

    def false(self, _: list[Token]) -> Literal:
        return Literal(False)

    def null(self, _: list[Token]) -> Literal:
        return Literal(None)

    def number(self, items: list[Token]) -> Literal:
        return Literal(float(str(items[0]).rstrip("LDF")))

    def string(self, items: list[Token]) -> Literal:
        return Literal(re.sub(r"\\(.)", r"\1", str(items[0])[1:-1]))

    def param(self, items: list[Token]) -> Expression:
        return Expression(str(items[0]))

    def name(self, items: list[Token]) -> Expression:
        return Expression(str(items[0]))


def _rule_at(text: str, line: int) -> str:
    """The name of the rule whose text holds ``line`` (1-based), as Byteman names it in errors."""
    name = "<unknown>"
    for i, raw in enumerate(text.splitlines(), start=1):
        if i > line:
            break
        m = re.match(r"\s*RULE\s+(.*\S)", raw)
        if m:
            name = m.group(1)
    return name


def _complaint(text: str, e: UnexpectedInput) -> str:
    line = int(getattr(e, "line", 0) or 0)
    if isinstance(e, UnexpectedEOF) or line <= 0:
        line = max(len(text.splitlines()), 1)
        near = "end of script"
    elif isinstance(e, UnexpectedToken):
        near = "EOF" if e.token.type == "$END" else repr(str(e.token))
    elif isinstance(e, UnexpectedCharacters):
        near = repr(e.char)
    else:
        near = "?"
    return f"org.jboss.byteman.rule.exception.ParseException: rule {_rule_at(text, line)} : line {line} : syntax error near {near}"


def parse_rules(text: str) -> list[Rule]:
    """Every rule of a script, in order; :class:`BytemanError` with Byteman's complaint otherwise."""
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as e:
        raise BytemanError(_complaint(text, e)) from None
    try:
        rules = _Build(text).transform(tree)
    except VisitError as e:
        raise BytemanError(f"org.jboss.byteman.rule.exception.ParseException: {e.orig_exc}") from None
    assert isinstance(rules, list)
    names = [r.name for r in rules]
    for n in names:
        if names.count(n) > 1:
            raise BytemanError(f"org.jboss.byteman.agent.Retransformer : duplicate rule name {n}")
    return rules


def condition_holds(rule: Rule) -> bool | None:
    """True/False for a literal condition; None for one the twin does not evaluate."""
    cond = rule.condition
    return bool(cond.value) if isinstance(cond, Literal) and isinstance(cond.value, bool) else None


def sleep_ms(action: Action) -> float | None:
    """The milliseconds of a ``Thread.sleep(n)`` action (None for any other action)."""
    if isinstance(action, Call) and action.name in ("Thread.sleep", "java.lang.Thread.sleep") and len(action.args) == 1:
        arg = action.args[0]
        if isinstance(arg, Literal) and isinstance(arg.value, float):
            return arg.value
    return None


def unsupported(rule: Rule) -> str | None:
    """What of a valid rule the twin does not model, worded for the scenario author (None: nothing)."""
    if condition_holds(rule) is None:
        cond = rule.condition
        text = cond.text if isinstance(cond, Expression) else repr(cond)
        return f"rule {rule.name}: IF {text}: the twin evaluates only IF true and IF false"
    if rule.helper is not None:
        return f"rule {rule.name}: HELPER {rule.helper}: custom helper classes are not modelled"
    if rule.location in ("AFTER INVOKE", "THROW"):
        return f"rule {rule.name}: AT {rule.location}: not modelled (ENTRY, EXIT, LINE and INVOKE are)"
    for a in rule.actions:
        if isinstance(a, Call) and sleep_ms(a) is None:
            return f"rule {rule.name}: DO {a.name}(...): the twin models return, throw new and Thread.sleep(<ms>)"
        if isinstance(a, Return) and isinstance(a.value, (Expression, Call)):
            return f"rule {rule.name}: DO return <expression>: the twin returns literals (null, numbers, strings, booleans)"
    return None
