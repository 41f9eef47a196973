"""Run a LogQL log pipeline over one entry: line filters, parsers, label filters and formatting.

An entry is (timestamp, line, labels). Labels start as the stream's labels plus its structured
metadata; parsers add labels (a name clash with a stream label gets the ``_extracted`` suffix, as
in Loki) and report failures in ``__error__`` / ``__error_details__`` instead of dropping lines.
A template that fails to render (or renders more than ``MAX_TEMPLATE_OUTPUT``) keeps the entry
with ``TemplateFormatErr``, as Loki does; what all templates of a query render is charged to the
query's :class:`~.limits.QueryBudget`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from itbench_gym.lang.regex import Regex

from . import ast as A
from .limits import QueryBudget
from .matching import IPNetwork, IPRange, convert_duration, ip_in, ip_range, logfmt_pairs, parse_bytes, sanitize_label
from .template import Template, TemplateError

ERROR = "__error__"
ERROR_DETAILS = "__error_details__"
TEMPLATE_ERROR = "TemplateFormatErr"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_IP_RUN = re.compile(r"[0-9A-Fa-f:.]+")
_PATH_PART = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[\s*"((?:[^"\\]|\\.)*)"\s*\]|\[\s*(\d+)\s*\]')

Labels = dict[str, str]
Step = Callable[[float, str, Labels], "tuple[str, Labels] | None"]


def _set_error(labels: Labels, kind: str, details: str) -> None:
    if ERROR not in labels:
        labels[ERROR] = kind
        labels[ERROR_DETAILS] = details


def _put(labels: Labels, stream: frozenset[str], key: str, value: str) -> None:
    if key in stream:
        key += "_extracted"
    labels[key] = value


# -- line filters ----------------------------------------------------------------------------

def _line_filter(f: A.LineFilter) -> Callable[[str], bool]:
    negative = f.op in (A.NEQ, A.NRE, A.NOT_PATTERN)
    if f.ip:
        ranges = [ip_range(v) for v in f.values]

        def has_ip(line: str) -> bool:
            return any(ip_in(tok, r) for tok in _ip_tokens(line) for r in ranges)

        return (lambda line: not has_ip(line)) if negative else has_ip
    if f.op in (A.PIPE_EXACT, A.NEQ):
        values = f.values
        if negative:
            return lambda line: not any(v in line for v in values)
        return lambda line: any(v in line for v in values)
    if f.op in (A.PIPE_MATCH, A.NRE):
        regexes = [r for r in f.compiled if isinstance(r, Regex)]
        if negative:
            return lambda line: not any(r.matches(line) for r in regexes)
        return lambda line: any(r.matches(line) for r in regexes)
    patterns = f.compiled
    if negative:
        return lambda line: not any(p.match(line, whole=True) is not None for p in patterns)  # type: ignore[attr-defined]
    return lambda line: any(p.match(line, whole=True) is not None for p in patterns)  # type: ignore[attr-defined]


def _ip_tokens(line: str) -> list[str]:
    """Runs of address characters holding a ':' or '.' before their last character (a linear scan)."""
    out = []
    for m in _IP_RUN.finditer(line):
        run = m.group()
        if any(c in ":." for c in run[:-1]):
            out.append(run)
    return out


# -- parsers ---------------------------------------------------------------------------------

def _json_value(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v, separators=(",", ":"))


def _flatten(obj: dict[str, Any], prefix: str, out: list[tuple[str, str]]) -> None:
    for k, v in obj.items():
        key = sanitize_label(prefix + k)
        if isinstance(v, dict):
            _flatten(v, key + "_", out)
        elif isinstance(v, list):
            continue
        else:
            out.append((key, _json_value(v)))


def _json_path(obj: Any, path: str) -> tuple[bool, Any]:
    pos = 0
    cur = obj
    while pos < len(path):
        m = _PATH_PART.match(path, pos)
        if not m or m.end() == pos:
            return False, None
        pos = m.end()
        if m.group(3) is not None:
            idx = int(m.group(3))
            if not isinstance(cur, list) or idx >= len(cur):
                return False, None
            cur = cur[idx]
        else:
            key = m.group(1) if m.group(1) is not None else json.loads(f'"{m.group(2)}"')
            if not isinstance(cur, dict) or key not in cur:
                return False, None
            cur = cur[key]
    return True, cur


def _loads(line: str) -> Any:
    return json.loads(line, parse_int=str, parse_float=str)


def _json_parser(stage: A.ParserStage, stream: frozenset[str]) -> Step:
    extractions = stage.extractions

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        try:
            obj = _loads(line)
            if not isinstance(obj, dict):
                raise ValueError("Value looks like object, but can't find closing '}' symbol")
        except (ValueError, RecursionError) as exc:
            _set_error(labels, "JSONParserErr", str(exc))
            return line, labels
        if extractions:
            for ex in extractions:
                found, value = _json_path(obj, ex.path)
                if found:
                    _put(labels, stream, ex.label, value if isinstance(value, str) else _json_value(value))
            return line, labels
        pairs: list[tuple[str, str]] = []
        _flatten(obj, "", pairs)
        for k, v in pairs:
            _put(labels, stream, k, v)
        return line, labels

    return run


def _logfmt_parser(stage: A.ParserStage, stream: frozenset[str]) -> Step:
    strict = "--strict" in stage.flags
    keep_empty = "--keep-empty" in stage.flags
    wanted = {ex.path: ex.label for ex in stage.extractions}

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        try:
            pairs = logfmt_pairs(line, strict=strict)
        except ValueError as exc:
            _set_error(labels, "LogfmtParserErr", str(exc))
            return line, labels
        for k, v in pairs:
            if v is None or v == "":
                if not keep_empty:
                    continue
                v = ""
            if wanted:
                if k in wanted:
                    _put(labels, stream, wanted[k], v)
                continue
            _put(labels, stream, sanitize_label(k), v)
        return line, labels

    return run


def _regexp_parser(stage: A.ParserStage, stream: frozenset[str]) -> Step:
    rx = stage.compiled
    assert isinstance(rx, Regex)

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        m = rx.search(line)
        if m:
            for name, value in m.groupdict().items():
                if value is not None:
                    _put(labels, stream, name, value)
        return line, labels

    return run


def _pattern_parser(stage: A.ParserStage, stream: frozenset[str]) -> Step:
    pattern = stage.compiled

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        found = pattern.match(line, whole=False)  # type: ignore[attr-defined]
        for name, value in (found or {}).items():
            _put(labels, stream, name, value)
        return line, labels

    return run


def _unpack_parser(stage: A.ParserStage, stream: frozenset[str]) -> Step:
    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        try:
            obj = json.loads(line)
            if not isinstance(obj, dict):
                raise ValueError("expecting json object")
        except (ValueError, RecursionError) as exc:
            _set_error(labels, "JSONParserErr", str(exc))
            return line, labels
        entry = line
        for k, v in obj.items():
            if not isinstance(v, str):
                continue
            if k == "_entry":
                entry = v
            else:
                _put(labels, stream, sanitize_label(k), v)
        return entry, labels

    return run


_PARSERS: dict[str, Callable[[A.ParserStage, frozenset[str]], Step]] = {
    "json": _json_parser, "logfmt": _logfmt_parser, "regexp": _regexp_parser, "pattern": _pattern_parser,
    "unpack": _unpack_parser,
}


# -- label filters ---------------------------------------------------------------------------

def _compare(op: str, a: float, b: float) -> bool:
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    if op == "<":
        return a < b
    return a <= b


_CONVERTERS: dict[str, Callable[[str], float]] = {"number": float, "duration": convert_duration, "bytes": parse_bytes}


def label_filter(f: A.LabelFilter) -> Callable[[Labels], bool]:
    """A predicate over labels; conversion failures keep the entry and set ``LabelFilterErr``."""
    if isinstance(f, A.LabelAnd):
        left, right = label_filter(f.left), label_filter(f.right)
        return lambda labels: left(labels) and right(labels)
    if isinstance(f, A.LabelOr):
        left, right = label_filter(f.left), label_filter(f.right)
        return lambda labels: left(labels) or right(labels)
    name, op = f.name, f.op
    if f.kind == "string":
        matcher = A.Matcher(name, op, str(f.value), f.regex)
        return lambda labels: matcher.matches(labels.get(name, ""))
    if f.kind == "ip":
        allowed: IPNetwork | IPRange = ip_range(str(f.value))
        want = op == "=="
        return lambda labels: (name in labels and ip_in(labels[name], allowed)) == want
    convert = _CONVERTERS[f.kind]
    target = float(f.value)  # type: ignore[arg-type]

    def check(labels: Labels) -> bool:
        raw = labels.get(name)
        if raw is None:
            return False
        try:
            value = convert(raw)
        except ValueError as exc:
            _set_error(labels, "LabelFilterErr", str(exc))
            return True
        return _compare(op, value, target)

    return check


# -- the pipeline ----------------------------------------------------------------------------

class Pipeline:
    """Compiled stages of one log query, applied entry by entry; templates charge ``budget``."""

    def __init__(self, stages: tuple[A.Stage, ...], stream_labels: frozenset[str], budget: QueryBudget | None = None) -> None:
        self._budget = budget
        self._steps: list[Step] = [self._compile(s, stream_labels) for s in stages]
        #: True when no stage reads or writes labels: the caller's label dict is passed through.
        self.line_only = all(isinstance(s, A.LineFilter) for s in stages)

    def process(self, ts: float, line: str, labels: Labels) -> tuple[str, Labels] | None:
        """The entry after every stage, or None when a filter dropped it. ``labels`` is not modified."""
        if not self.line_only:
            labels = dict(labels)
        for step in self._steps:
            out = step(ts, line, labels)
            if out is None:
                return None
            line, labels = out
        return line, labels

    def _compile(self, stage: A.Stage, stream: frozenset[str]) -> Step:
        if isinstance(stage, A.LineFilter):
            keep = _line_filter(stage)
            return lambda ts, line, labels: (line, labels) if keep(line) else None
        if isinstance(stage, A.ParserStage):
            return _PARSERS[stage.kind](stage, stream)
        if isinstance(stage, A.LabelFilterStage):
            check = label_filter(stage.filter)
            return lambda ts, line, labels: (line, labels) if check(labels) else None
        if isinstance(stage, A.LineFormat):
            return _line_format(stage, self._budget)
        if isinstance(stage, A.LabelFormat):
            return _label_format(stage, self._budget)
        if isinstance(stage, A.DropKeep):
            return _drop_keep(stage)
        return lambda ts, line, labels: (_ANSI.sub("", line), labels)


def _render(template: object, data: Labels, line: str, ts: float, budget: QueryBudget | None) -> tuple[str | None, str]:
    """The template's output (charged to ``budget``) and "", or None and why it failed."""
    assert isinstance(template, Template)
    try:
        out = template.render(data, line, ts)
    except TemplateError as exc:
        return None, str(exc)
    if budget is not None:
        budget.charge_rendered(len(out))
    return out, ""


def _line_format(stage: A.LineFormat, budget: QueryBudget | None) -> Step:
    template = stage.compiled

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        out, problem = _render(template, labels, line, ts, budget)
        if out is None:
            _set_error(labels, TEMPLATE_ERROR, problem)
            return line, labels
        return out, labels

    return run


def _label_format(stage: A.LabelFormat, budget: QueryBudget | None) -> Step:
    items = stage.items

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        before = dict(labels)
        for item in items:
            if item.is_template:
                out, problem = _render(item.compiled, before, line, ts, budget)
                if out is None:
                    _set_error(labels, TEMPLATE_ERROR, problem)
                    continue
                labels[item.target] = out
            else:
                value = before.get(item.source, "")
                labels.pop(item.source, None)
                labels[item.target] = value
        return line, labels

    return run


def _drop_keep(stage: A.DropKeep) -> Step:
    names = stage.names

    def selected(key: str, value: str) -> bool:
        for n in names:
            if n.name == key and (n.matcher is None or n.matcher.matches(value)):
                return True
        return False

    def run(ts: float, line: str, labels: Labels) -> tuple[str, Labels]:
        for key in list(labels):
            if selected(key, labels[key]) != stage.keep:
                del labels[key]
        return line, labels

    return run
