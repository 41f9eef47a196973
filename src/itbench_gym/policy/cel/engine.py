"""Compile and evaluate CEL as Kubernetes' admission policies do, over cel-python.

cel-python implements the CEL standard; Kubernetes' environment adds optional syntax (``x.?f``,
``m[?k]``), enabled here by two alternatives of cel-python's own ``member`` rule (its grammar file,
read at import, also gets cel-go's trailing commas in list and map literals), the three-argument
``map(x, predicate, transform)`` and the libraries of :mod:`.library`. An embedding program adds its own libraries as
:class:`HostObject` variables. Errors carry the expression's line and column.
"""

from __future__ import annotations

import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import lru_cache
from importlib.resources import files
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError, CELParser
from celpy.evaluation import CELEvalError, Evaluator, NameContainer

from . import library, network, optional
from .optional import OPTIONAL, Optional

_MEMBER = "member_dot | member_dot_arg | member_index | member_object | primary"


class CelError(ValueError):
    """An expression that does not compile, or whose evaluation fails, with where and why."""


class HostObject(ABC):
    """A variable whose methods the embedding program answers (Kyverno's ``resource.Get(...)``)."""

    @abstractmethod
    def call(self, method: str, args: list[Any]) -> Any:
        """The method's value (plain JSON-like data); KeyError, ValueError or TypeError is a CEL error."""


#: cel-go accepts a trailing comma in list and map literals (``[a, b,]``); cel-python's rules do not.
_TRAILING_COMMA = {'list_lit       : "[" [exprlist] "]"': 'list_lit       : "[" [list_elements] "]"',
                   'map_lit        : "{" [mapinits] "}"': 'map_lit        : "{" [map_entries] "}"'}
_EXTRA_RULES = """
member_dot_opt   : member "." "?" IDENT
member_index_opt : member "[" "?" expr "]"
list_elements    : expr ("," expr)* [","] -> exprlist
map_entries      : expr ":" expr ("," expr ":" expr)* [","] -> mapinits
"""


def _grammar() -> str:
    text = (files("celpy") / "cel.lark").read_text()
    for old in (_MEMBER, *_TRAILING_COMMA):
        if old not in text:
            raise RuntimeError(f"cel-python's grammar has no rule `{old}` of the form this package extends")
    for old, new in _TRAILING_COMMA.items():
        text = text.replace(old, new, 1)
    return text.replace(_MEMBER, _MEMBER.replace("| primary", "| member_dot_opt | member_index_opt | primary"), 1) + _EXTRA_RULES


@lru_cache(maxsize=1)
def _parser() -> lark.Lark:
    # cel-python's own options for its grammar: its interpreter expects no None children for absent
    # optional parts (lark's maybe_placeholders off) and its terminals' priorities inverted
    options: dict[str, Any] = {"maybe_placeholders": False, "priority": "invert"}
    return lark.Lark(_grammar(), parser="lalr", start="expr", g_regex_flags=re.M,
                     lexer_callbacks={"IDENT": CELParser.ambiguous_literals}, propagate_positions=True, **options)


class _Evaluator(Evaluator):
    """cel-python's interpreter with optional selection and its chaining."""

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _Evaluator(ast, activation=self.activation)

    def member_dot_opt(self, tree: lark.Tree[Any]) -> Any:
        member_tree, name = tree.children
        return self._optional(tree, self.visit(member_tree), celtypes.StringType(str(name)))

    def member_index_opt(self, tree: lark.Tree[Any]) -> Any:
        member, index = self.visit_children(tree)
        return self._optional(tree, member, index)

    def member_dot(self, tree: lark.Tree[Any]) -> Any:
        member_tree, name = tree.children
        member = self.visit(member_tree)
        key = str(name)
        if isinstance(member, CELEvalError):
            return member
        if isinstance(member, Optional):
            return self._optional(tree, member, celtypes.StringType(key))
        if isinstance(member, NameContainer):
            if key in member:
                return member[key].value
            return CELEvalError(f"undeclared reference to {key!r}", KeyError, None, tree=tree)
        if isinstance(member, celtypes.MapType):
            if key in member:
                return member[key]
            return CELEvalError(f"no such key: {key!r}", KeyError, None, tree=tree)
        return CELEvalError(f"type {_type_name(member)} does not support field selection", TypeError, None, tree=tree)

    def member_index(self, tree: lark.Tree[Any]) -> Any:
        member, index = self.visit_children(tree)
        if isinstance(member, Optional):
            return self._optional(tree, member, index)
        for value in (member, index):
            if isinstance(value, CELEvalError):
                return value
        try:
            return self.activation.resolve_function("_[_]")(member, index)
        except KeyError:
            return CELEvalError(f"no such key: {index!r}", KeyError, None, tree=tree)
        except IndexError:
            return CELEvalError(f"index {index!r} out of range", IndexError, None, tree=tree)
        except TypeError:
            return CELEvalError(f"no such overload: {_type_name(member)}[{_type_name(index)}]", TypeError, None, tree=tree)

    def method_eval(self, object: Any, method_ident: Any, exprlist: Any = None) -> Any:
        if not isinstance(object, HostObject):
            return super().method_eval(object, method_ident, exprlist)
        args = list(exprlist or [])
        error = next((a for a in args if isinstance(a, CELEvalError)), None)
        if error is not None:
            return error
        try:
            return json_to_cel(object.call(str(method_ident), [to_python(a) for a in args]))
        except (KeyError, ValueError, TypeError) as exc:
            return CELEvalError(str(exc.args[0]) if exc.args else repr(exc), type(exc), None, token=method_ident)

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        # cel-python's macros iterate their receiver in Python: a null or a map of the wrong shape is
        # an evaluation error (which ``||`` and ``&&`` may absorb), not a crash
        args = tree.children[2] if len(tree.children) == 3 else None
        if str(tree.children[1]) == "map" and isinstance(args, lark.Tree) and len(args.children) == 3:
            return self._filtered_map(tree, args.children)
        try:
            return super().member_dot_arg(tree)
        except TypeError as exc:
            return CELEvalError(f"no such overload: {exc}", TypeError, None, tree=tree)

    def _filtered_map(self, tree: lark.Tree[Any], args: list[Any]) -> Any:
        """``list.map(x, predicate, transform)``: the transform of each element the predicate keeps."""
        var, predicate, transform = args
        name = _bound_name(var)
        items = self.visit(tree.children[0])
        if isinstance(items, CELEvalError):
            return items
        if name is None or not isinstance(items, list):
            return CELEvalError("no such overload: map(x, predicate, transform) of a list", TypeError, None, tree=tree)
        keep, make = self.sub_evaluator(predicate), self.sub_evaluator(transform)
        out = []
        try:
            for item in items:
                kept = keep.evaluate({name: item})
                if not isinstance(kept, celtypes.BoolType):
                    return CELEvalError("no such overload: map's predicate must be a bool", TypeError, None, tree=tree)
                if kept:
                    out.append(make.evaluate({name: item}))
        except CELEvalError as exc:
            return exc
        return celtypes.ListType(out)

    @staticmethod
    def _optional(tree: lark.Tree[Any], member: Any, key: Any) -> Any:
        if isinstance(member, CELEvalError):
            return member
        if isinstance(key, CELEvalError):
            return key
        try:
            return optional.select(member, key)
        except TypeError as exc:
            return CELEvalError(str(exc), TypeError, None, tree=tree)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


def equal(a: Any, b: Any) -> bool:
    """CEL's heterogeneous equality: values of different types are unequal (not an error), numbers
    compare by value whatever their type, lists and maps element by element."""
    if a is None or b is None:
        return a is None and b is None
    a_bool, b_bool = isinstance(a, bool | celtypes.BoolType), isinstance(b, bool | celtypes.BoolType)
    if a_bool or b_bool:
        return a_bool and b_bool and bool(a) == bool(b)
    if isinstance(a, int | float) and isinstance(b, int | float):  # plain numbers: celpy's refuse mixed types
        return int(a) == int(b) if isinstance(a, int) and isinstance(b, int) else float(a) == float(b)
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and str(a) == str(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return len(a) == len(b) and all(any(equal(k, j) and equal(v, b[j]) for j in b) for k, v in a.items())
    try:
        return type(a) is type(b) and bool(a == b)
    except TypeError:
        return False


@lru_cache(maxsize=1)
def _environment() -> tuple[celpy.Environment, dict[str, Any]]:
    def equality(negate: bool) -> Any:
        def run(a: Any, b: Any) -> Any:
            error = next((v for v in (a, b) if isinstance(v, CELEvalError)), None)
            return error if error is not None else celtypes.BoolType(equal(a, b) != negate)
        return run

    operators = {"_==_": equality(False), "_!=_": equality(True)}
    from celpy.evaluation import base_functions

    strings = {"string": network.with_string_of_addresses(base_functions["string"])}
    limit = sys.getrecursionlimit()
    env = celpy.Environment(runner_class=_Runner)
    sys.setrecursionlimit(max(limit, sys.getrecursionlimit()))  # cel-python sets 2500: never lower the process's own
    return env, {**library.functions(), **network.functions(), **optional.functions(), **operators, **strings}


class Bindings(dict[str, Any]):
    """Variables as CEL values, converted once for every expression of a rule (the request's objects
    are most of the work of a conversion); ``bind`` adds a value already computed by an expression."""

    @classmethod
    def of(cls, variables: Mapping[str, Any]) -> Bindings:
        out = cls({name: value if isinstance(value, HostObject) else json_to_cel(value) for name, value in variables.items()})
        out["optional"] = OPTIONAL
        return out


class Program:
    """One compiled expression; :meth:`evaluate` binds the variables (plain JSON-like values)."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            ast = _parser().parse(text)
        except (lark.exceptions.UnexpectedInput, lark.exceptions.LexError) as exc:
            line, column = getattr(exc, "line", "?"), getattr(exc, "column", "?")
            raise CelError(f"syntax error at line {line}, column {column} of {text!r}") from None
        except CELParseError as exc:
            raise CelError(f"syntax error in {text!r}: {exc}") from None
        env, functions = _environment()
        self._ast = ast
        self._runner = env.program(ast, functions=functions)

    def evaluate(self, variables: Mapping[str, Any], *, raw: bool = False) -> Any:
        """The expression's value as plain Python (an optional stays an :class:`Optional`), or as the CEL
        value when ``raw`` (to bind it as a variable of later expressions); ``variables`` plain values
        or :class:`Bindings` (converted once for several expressions)."""
        context = variables if isinstance(variables, Bindings) else Bindings.of(variables)
        try:
            value = self._runner.evaluate(context)
            return value if raw else to_python(value)
        except CELEvalError as exc:
            raise CelError(f"{_reason(exc)} evaluating {self.text!r}") from None
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, RecursionError) as exc:
            raise CelError(f"{exc} evaluating {self.text!r}") from None


def _reason(exc: CELEvalError) -> str:
    # cel-python reports any ValueError of a function as an overflow: the function's own words are better
    if isinstance(exc.__cause__, ValueError) and str(exc.__cause__):
        return str(exc.__cause__)
    return str(exc.args[0]) if exc.args else "evaluation error"


def _type_name(value: Any) -> str:
    return type(value).__name__.removesuffix("Type").lower() if value is not None else "null"


def to_python(value: Any) -> Any:
    """A CEL value as plain JSON-like Python (bools as bool, maps as dict)."""
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, dict):  # a MapType, or a dict an operator built from one
        return {to_python(k): to_python(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_python(v) for v in value]
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    return value


@lru_cache(maxsize=512)
def compile_cel(text: str) -> Program:
    """The compiled program of ``text`` (compiled once per process)."""
    return Program(text)


#: Macros whose first argument names a variable bound in the others.
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
#: Functions of Kubernetes' CEL environment this engine does not evaluate: refused by name.
UNSUPPORTED_FUNCTIONS = frozenset({
    "isCanonical", "quote", "greatest", "least", "semver", "isSemver", "validate", "named",
    "serviceAccount", "group", "resource", "subresource", "namespace", "name", "check", "allowed", "reason", "errored", "error",
    # Kyverno's libraries that need a cluster, a clock or a network
    "now", "truncate", "toCron", "Post", "Apply", "parseServiceAccount", "decode", "unmarshal", "parse", "GetImageData",
})


def check_references(text: str, variables: frozenset[str], methods: frozenset[str] = frozenset()) -> None:
    """Refuse, as Kubernetes' type checker does when it compiles an expression, a name that is not one of
    ``variables`` or bound by a macro (``undeclared reference to 'x'``), and a function this environment
    does not have besides ``methods`` (those of its :class:`HostObject` variables); raises :class:`CelError`."""
    tree = compile_cel(text)._ast
    functions = set(_environment()[1]) | set(_base_functions()) | set(methods)
    _check(tree, variables | {"optional"}, functions, text)


def check_entries(entries: Any, where: str, keys: tuple[str, ...], variables: frozenset[str],
                  methods: frozenset[str] = frozenset()) -> None:
    """Check a policy's list of expression entries (``validations``, ``variables``, ...) as its engine
    does when it admits the policy: each is a mapping whose ``keys`` hold expressions that compile and
    name only ``variables`` (the first key is required); raises :class:`CelError` naming the field."""
    if entries is None:
        return
    if not isinstance(entries, list):
        raise CelError(f"{where} must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise CelError(f"{where}[{i}] must be a mapping")
        for key in keys:
            text = entry.get(key)
            if text is None and key != keys[0]:
                continue
            if not isinstance(text, str) or not text.strip():
                raise CelError(f"{where}[{i}].{key} must be a non-empty string")
            try:
                check_references(text, variables, methods)
            except CelError as exc:
                raise CelError(f"{where}[{i}].{key}: {exc}") from None


def _base_functions() -> frozenset[str]:
    from celpy.evaluation import base_functions

    return frozenset(base_functions)


def _bound_name(tree: Any) -> str | None:
    """The identifier ``tree`` is (a macro's variable), if it is just one."""
    while isinstance(tree, lark.Tree):
        if tree.data == "ident":
            return str(tree.children[0])
        trees = [c for c in tree.children if isinstance(c, lark.Tree)]
        if len(trees) != 1 or len(tree.children) != 1:
            return None
        tree = trees[0]
    return None


def _check(tree: Any, scope: frozenset[str] | set[str], functions: set[str], text: str) -> None:
    if not isinstance(tree, lark.Tree):
        return
    kind = tree.data
    where = f"at line {tree.meta.line}, column {tree.meta.column} of {text!r}" if not tree.meta.empty else f"in {text!r}"
    if kind in ("ident", "dot_ident"):
        name = str(tree.children[0])
        if name not in scope:
            raise CelError(f"undeclared reference to '{name}' {where}")
        return
    if kind in ("ident_arg", "dot_ident_arg", "member_dot_arg"):
        name = str(next(c for c in tree.children if isinstance(c, lark.Token)))
        args = [c for c in tree.children if isinstance(c, lark.Tree) and c.data == "exprlist"]
        exprs = [c for c in args[0].children if isinstance(c, lark.Tree)] if args else []
        member = [c for c in tree.children if isinstance(c, lark.Tree) and c.data != "exprlist"]
        for m in member:
            _check(m, scope, functions, text)
        if kind == "member_dot_arg" and name in _MACROS and (len(exprs) == 2 or (name == "map" and len(exprs) == 3)):
            bound = _bound_name(exprs[0])
            if bound is None:
                raise CelError(f"{name}() needs a variable name as its first argument {where}")
            for e in exprs[1:]:
                _check(e, set(scope) | {bound}, functions, text)
            return
        if name in UNSUPPORTED_FUNCTIONS and name not in functions:
            raise CelError(f"the CEL function {name}() is not supported by this engine {where}")
        if name not in functions and name not in ("has", "dyn", "min", "reduce"):
            raise CelError(f"undeclared reference to '{name}' {where}")
        for e in exprs:
            _check(e, scope, functions, text)
        return
    for child in tree.children:
        _check(child, scope, functions, text)
