"""Runner for Prometheus' promqltest files (``load`` / ``clear`` / ``eval`` scripts).

Semantics follow upstream ``promql/promqltest``: the engine runs with a 5 minute lookback and
delayed ``__name__`` removal, instant evaluations are re-checked in range mode (middle step of a
±1 minute range query), and values compare with a relative tolerance of 1e-6.

Cases are *skipped* (and counted separately) when they need something the twin does not model:
native histograms (``{{...}}`` values, native-histogram functions, selectors touching series loaded
with histogram samples or converted by ``load_with_nhcb``) and experimental syntax the parser
does not accept (``anchored``/``smoothed`` range selectors, duration expressions).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from itbench_gym.lang.durations import DurationError, parse_prometheus_duration_ns

from ..tsdb import STALE_NAN, TSDB, Labels, Matcher, make_labels
from .ast import MatrixSel, Node, VectorSel, walk
from .engine import Engine, Result
from .errors import PromQLError

_EPS = 1e-6
_MIN_NORMAL = 2.2250738585072014e-308
_NATIVE_FUNCS = re.compile(
    r"\bhistogram_(count|sum|avg|fraction|stddev|stdvar|quantiles)\s*\(|\bhistogram_quantile\s*\(\s*[^,]*,\s*[^)]*\{\{"
)
# Experimental syntax/features behind Prometheus feature flags: extended range selectors, duration
# expressions, fill() binary-operator modifiers and info().
_EXPERIMENTAL = re.compile(
    r"\b(anchored|smoothed)\b"
    r"|\[[^\]]*(\b(step|range)\(\)|[+*/^%])[^\]]*\]"
    r"|\boffset\s*[-+]?\s*(\(|[A-Za-z_]+\s*\()|\boffset\s+[-+]?[0-9a-z.]+\s*[-+*/^%]"
    r"|\bfill(_left|_right)?\s*\(|\binfo\s*\(",
    re.IGNORECASE,
)


@dataclass
class CaseResult:
    line: int
    expr: str
    status: str  # "pass" | "fail" | "skip"
    message: str = ""


@dataclass
class FileResult:
    path: Path
    cases: list[CaseResult] = field(default_factory=list)
    error: str = ""

    def count(self, status: str) -> int:
        return sum(1 for c in self.cases if c.status == status)


class ScriptError(ValueError):
    """A malformed test script (reported with its line number)."""


# ------------------------------------------------------------------ parsing
def parse_duration(text: str) -> int:
    """Prometheus duration (``1h30m``, ``10s53ms``, ``0``) to milliseconds."""
    try:
        return parse_prometheus_duration_ns(text.strip()) // 1_000_000
    except DurationError:
        raise ScriptError(f"invalid duration {text.strip()!r}") from None


_UNSIGNED = r"(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[iI][nN][fF]|[nN][aA][nN])"
_ITEM = re.compile(rf"^(?P<base>[+-]?{_UNSIGNED}|stale)(?:(?P<sign>[+-])(?P<step>{_UNSIGNED}))?(?:x(?P<n>\d+))?$")


def _num(text: str) -> float:
    t = text.lower().lstrip("+")
    neg = t.startswith("-")
    body = t[1:] if neg else t
    if body.startswith("0x"):
        v = float(int(body, 16))
    else:
        v = float(body)
    return -v if neg else v


def _split_items(text: str) -> list[str]:
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch.isspace() and depth == 0:
            if cur:
                items.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if cur:
        items.append("".join(cur))
    return items


def parse_values(text: str) -> tuple[list[float | None], bool]:
    """Expand a series value list; returns values (None = omitted) and whether histograms appear."""
    out: list[float | None] = []
    hist = False
    for item in _split_items(text):
        if item.startswith("{{"):
            hist = True
            m = re.search(r"\}\}x(\d+)$", item)
            out.extend([math.nan] * ((int(m.group(1)) + 1) if m else 1))
            continue
        if item == "_":
            out.append(None)
            continue
        if item.startswith("_x"):
            out.extend([None] * int(item[2:]))
            continue
        m = _ITEM.match(item)
        if not m:
            raise ScriptError(f"invalid series value {item!r}")
        base = STALE_NAN if m.group("base") == "stale" else _num(m.group("base"))
        if m.group("n") is None:
            if m.group("step") is not None:
                raise ScriptError(f"invalid series value {item!r}: a step needs a repeat count")
            out.append(base)
            continue
        step = 0.0
        if m.group("step") is not None:
            step = _num(m.group("step")) * (-1 if m.group("sign") == "-" else 1)
        v = base
        for _ in range(int(m.group("n")) + 1):
            out.append(v)
            v += step
    return out, hist


def parse_series(line: str) -> tuple[Labels, list[float | None], bool]:
    """``metric{a="b"} 1+1x3`` -> labels, values, has_histograms."""
    depth, quote, end = 0, "", len(line)
    for i, ch in enumerate(line):
        if quote:
            if ch == "\\":
                continue
            if ch == quote and line[i - 1] != "\\":
                quote = ""
            continue
        if ch in "\"'`":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch.isspace() and depth == 0:
            end = i
            break
    metric, rest = line[:end], line[end:]
    return parse_metric(metric), *parse_values(rest)


def parse_metric(text: str) -> Labels:
    import promql_parser

    text = text.strip()
    if text == "{}":
        return ()
    try:
        node = promql_parser.parse(text)
    except ValueError as exc:
        raise ScriptError(f"invalid metric {text!r}: {exc}") from None
    if not isinstance(node, promql_parser.VectorSelector):
        raise ScriptError(f"invalid metric {text!r}")
    labels = {m.name: m.value for m in node.matchers.matchers}
    if node.name:
        labels["__name__"] = node.name
    return make_labels(labels)


@dataclass
class _Expect:
    kind: str  # fail | warn | info | no_warn | no_info | ordered
    message: str | None = None
    regex: re.Pattern[str] | None = None

    def matches(self, text: str) -> bool:
        if self.regex is not None:
            return self.regex.search(text) is not None
        if self.message is not None:
            return self.message == text
        return True


@dataclass
class _Eval:
    line: int
    expr: str
    instant: bool
    start: int
    end: int
    step: int
    expects: list[_Expect] = field(default_factory=list)
    fail: bool = False
    warn: bool = False
    info: bool = False
    ordered: bool = False
    expected: dict[Labels, tuple[int, list[float | None]]] = field(default_factory=dict)
    scalar: float | None = None
    string: str | None = None
    range_vector: tuple[int, int, int] | None = None
    histogram_expected: bool = False

    def of(self, kind: str) -> list[_Expect]:
        return [e for e in self.expects if e.kind == kind]


_EVAL_INSTANT = re.compile(r"^eval(?:_(fail|warn|ordered|info))?\s+instant\s+(?:at\s+(.+?))?\s+(.+)$")
_EVAL_RANGE = re.compile(r"^eval(?:_(fail|warn|info))?\s+range\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+?)\s+(.+)$")
_EXPECT = re.compile(r"^expect\s+(ordered|fail|warn|no_warn|info|no_info)(?:\s+(regex|msg):(.+))?$")
_EXPECT_RANGE = re.compile(r"^expect range vector\s+from\s+(.+)\s+to\s+(.+)\s+step\s+(.+)$")
_LOAD = re.compile(r"^load(?:_(with_nhcb))?\s+(.+?)$")


def _parse_eval(lines: list[str], i: int) -> tuple[int, _Eval]:
    head = lines[i]
    mi, mr = _EVAL_INSTANT.match(head), _EVAL_RANGE.match(head)
    if mi:
        at = parse_duration(mi.group(2) or "0")
        ev = _Eval(i + 1, mi.group(3), True, at, at, 0)
        mod = mi.group(1)
    elif mr:
        s, e, st = parse_duration(mr.group(2)), parse_duration(mr.group(3)), parse_duration(mr.group(4))
        ev = _Eval(i + 1, mr.group(5), False, s, e, st)
        mod = mr.group(1)
    else:
        raise ScriptError(f"line {i + 1}: invalid eval command {head!r}")
    if mod:
        setattr(ev, mod, True)
    j = 1
    while i + 1 < len(lines) and lines[i + 1] != "":
        i += 1
        line = lines[i]
        if ev.fail and line.startswith("expected_fail_message"):
            ev.expects.append(_Expect("fail", message=line[len("expected_fail_message") :].strip()))
            continue
        if ev.fail and line.startswith("expected_fail_regexp"):
            ev.expects.append(_Expect("fail", regex=re.compile(line[len("expected_fail_regexp") :].strip())))
            continue
        if line.startswith("expect range vector"):
            m = _EXPECT_RANGE.match(line)
            if not m:
                raise ScriptError(f"line {i + 1}: invalid range vector expectation")
            ev.range_vector = (parse_duration(m.group(1)), parse_duration(m.group(2)), parse_duration(m.group(3)))
            continue
        if line.startswith("expect string"):
            import ast as pyast

            ev.string = pyast.literal_eval(line[len("expect string") :].strip().replace("`", '"'))
            continue
        if line.split(" ")[0] == "expect":
            m = _EXPECT.match(line.strip())
            if not m:
                raise ScriptError(f"line {i + 1}: invalid expect statement {line!r}")
            kind, how, text = m.group(1), m.group(2), m.group(3)
            if how == "msg":
                ev.expects.append(_Expect(kind, message=text.strip()))
            elif how == "regex":
                ev.expects.append(_Expect(kind, regex=re.compile(text.strip())))
            else:
                ev.expects.append(_Expect(kind))
            continue
        try:
            ev.scalar = _num(line.strip())
            continue
        except ValueError:
            pass
        labels, values, hist = parse_series(line)
        ev.histogram_expected |= hist
        ev.expected[labels] = (j, values)
        j += 1
    return i, ev


# ------------------------------------------------------------------ running
def _almost_equal(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    if a == b:
        return True
    abs_sum = abs(a) + abs(b)
    diff = abs(a - b)
    if a == 0 or b == 0 or abs_sum < _MIN_NORMAL:
        return diff < _EPS * _MIN_NORMAL
    return diff / min(abs_sum, sys.float_info.max) < _EPS


def _fmt(lb: Labels) -> str:
    from ..tsdb import format_labels

    return format_labels(lb)


class _Runner:
    def __init__(self) -> None:
        self.db = TSDB()
        self.engine = Engine(self.db, lookback_delta=300.0, delayed_name_removal=True, subquery_step=60.0)
        self.histogram_series: list[Labels] = []

    def clear(self) -> None:
        self.db.clear()
        self.histogram_series = []

    def load(self, lines: list[str], i: int) -> int:
        m = _LOAD.match(lines[i])
        if not m:
            raise ScriptError(f"line {i + 1}: invalid load command")
        gap = parse_duration(m.group(2))
        nhcb = m.group(1) is not None
        while i + 1 < len(lines) and lines[i + 1] != "":
            i += 1
            labels, values, hist = parse_series(lines[i])
            if hist:
                self.histogram_series.append(labels)
                continue
            for k, v in enumerate(values):
                if v is not None:
                    self.db.append_ms(labels, k * gap, v)
            if nhcb:
                self._nhcb(labels)
        return i

    def _nhcb(self, labels: Labels) -> None:
        d = dict(labels)
        name = d.get("__name__", "")
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix):
                d["__name__"] = name[: -len(suffix)]
                d.pop("le", None)
                self.histogram_series.append(make_labels(d))
                return

    def touches_histograms(self, node: Node) -> bool:
        if not self.histogram_series:
            return False
        for n in walk(node):
            vs = n.vs if isinstance(n, MatrixSel) else n if isinstance(n, VectorSel) else None
            if vs is None:
                continue
            for matchers in vs.matcher_sets():
                for lb in self.histogram_series:
                    d = dict(lb)
                    if all(_match(m, d.get(m.name, "")) for m in matchers):
                        return True
        return False

    def run_eval(self, ev: _Eval) -> CaseResult:
        if ev.histogram_expected or _NATIVE_FUNCS.search(ev.expr):
            return CaseResult(ev.line, ev.expr, "skip", "native histograms")
        if _EXPERIMENTAL.search(ev.expr):
            return CaseResult(ev.line, ev.expr, "skip", "experimental feature")
        try:
            node = self.engine.parse(ev.expr)
        except PromQLError as exc:
            if ev.fail or ev.of("fail"):
                return self._check_fail(ev, exc)
            return CaseResult(ev.line, ev.expr, "fail", f"parse error: {exc}")
        if self.touches_histograms(node):
            return CaseResult(ev.line, ev.expr, "skip", "native histograms")
        try:
            if ev.instant:
                res = self.engine.instant(ev.expr, ev.start / 1000.0)
            else:
                res = self.engine.range(ev.expr, ev.start / 1000.0, ev.end / 1000.0, ev.step / 1000.0)
        except PromQLError as exc:
            if ev.fail or ev.of("fail"):
                return self._check_fail(ev, exc)
            return CaseResult(ev.line, ev.expr, "fail", f"unexpected error: {exc}")
        if ev.fail or ev.of("fail"):
            return CaseResult(ev.line, ev.expr, "fail", "expected an error but the query succeeded")
        problem = self._check_annotations(ev, res) or self._compare(ev, res)
        if problem is None and ev.instant and ev.range_vector is None and ev.string is None:
            problem = self._range_mode(ev, node, res)
        if problem:
            return CaseResult(ev.line, ev.expr, "fail", problem)
        return CaseResult(ev.line, ev.expr, "pass")

    def _check_fail(self, ev: _Eval, exc: PromQLError) -> CaseResult:
        for e in ev.of("fail"):
            if not e.matches(exc.message):
                return CaseResult(ev.line, ev.expr, "fail", f"expected error matching {e.message or e.regex}, got: {exc.message}")
        return CaseResult(ev.line, ev.expr, "pass")

    def _check_annotations(self, ev: _Eval, res: Result) -> str | None:
        if ev.warn and not res.warnings:
            return "expected warnings but got none"
        if ev.info and not res.infos:
            return "expected info annotations but got none"
        for kind, actual in (("warn", res.warnings), ("info", res.infos)):
            expected = ev.of(kind)
            if not expected:
                continue
            if not actual:
                return f"expected {kind} annotations but none were found"
            for e in expected:
                if not any(e.matches(a) for a in actual):
                    return f"expected {kind} annotation matching {e.message or e.regex.pattern}, found {actual}"  # type: ignore[union-attr]
            for a in actual:
                if not any(e.matches(a) for e in expected):
                    return f"unexpected {kind} annotation {a!r}"
        if ev.of("no_warn") and res.warnings:
            return f"unexpected warnings: {res.warnings}"
        if ev.of("no_info") and res.infos:
            return f"unexpected info annotations: {res.infos}"
        return None

    def _compare(self, ev: _Eval, res: Result) -> str | None:
        ordered = ev.ordered or bool(ev.of("ordered"))
        if res.type == "string":
            assert res.string is not None
            if ev.string != res.string[1]:
                return f'expected string "{ev.string}" but got "{res.string[1]}"'
            return None
        if res.type == "scalar":
            assert res.scalar is not None
            if ev.scalar is None:
                return f"expected vector or matrix result, but got scalar {res.scalar[1]}"
            if not _almost_equal(ev.scalar, res.scalar[1]):
                return f"expected scalar {ev.scalar} but got {res.scalar[1]}"
            return None
        if ev.scalar is not None:
            return f"expected scalar result, but got {res.type}"
        if res.type == "vector":
            seen = set()
            for pos, (lb, _, vs) in enumerate(res.series):
                if lb not in ev.expected:
                    return f"unexpected metric {_fmt(lb)} in result, has value {vs[0]}"
                exp_pos, vals = ev.expected[lb]
                if ordered and exp_pos != pos + 1:
                    return f"expected metric {_fmt(lb)} at position {exp_pos} but was at {pos + 1}"
                if vals[0] is None or not _almost_equal(vals[0], float(vs[0])):
                    return f"expected {vals[0]} for {_fmt(lb)} but got {vs[0]}"
                seen.add(lb)
            for lb in ev.expected:
                if lb not in seen:
                    return f"expected metric {_fmt(lb)} not found"
            return None
        if ordered:
            return "expected ordered result, but query returned a matrix"
        start, end, step = (ev.range_vector if ev.range_vector else (ev.start, ev.end, ev.step))
        seen = set()
        for lb, ts, vs in res.series:
            if lb not in ev.expected:
                return f"unexpected metric {_fmt(lb)} in result"
            _, vals = ev.expected[lb]
            exp_pts = []
            for k, v in enumerate(vals):
                t = start + k * step
                if t > end:
                    return f"expected {len(vals)} points for {_fmt(lb)}, but query time range cannot return this many points"
                if v is not None:
                    exp_pts.append((t, v))
            if len(exp_pts) != len(ts):
                return f"expected {len(exp_pts)} points for {_fmt(lb)}, got {list(zip(ts.tolist(), vs.tolist(), strict=True))}"
            for (et, evv), at, av in zip(exp_pts, ts.tolist(), vs.tolist(), strict=False):
                if et != at:
                    return f"expected timestamp {et} for {_fmt(lb)}, got {at}"
                if not _almost_equal(evv, av):
                    return f"expected {evv} at t={et} for {_fmt(lb)}, got {av}"
            seen.add(lb)
        for lb in ev.expected:
            if lb not in seen:
                return f"expected metric {_fmt(lb)} not found"
        return None

    def _range_mode(self, ev: _Eval, node: Node, res: Result) -> str | None:
        """Upstream re-runs instant queries as a ±1m range query and checks the middle step."""
        if re.search(r"\b(start|end|range|step)\(\)", ev.expr) or node.type not in ("vector", "scalar"):
            return None
        if ev.ordered or ev.of("ordered"):
            return None
        t = ev.start
        try:
            rr = self.engine.range(ev.expr, (t - 60_000) / 1000.0, (t + 60_000) / 1000.0, 60.0)
        except PromQLError as exc:
            return f"range mode: error {exc}"
        if res.type == "scalar":
            vals = [vs[ts == t] for _, ts, vs in rr.series]
            got = float(vals[0][0]) if vals and len(vals[0]) else math.nan
            return None if ev.scalar is not None and _almost_equal(ev.scalar, got) else f"range mode: scalar {got}"
        series = []
        for lb, ts, vs in rr.series:
            hit = np.nonzero(ts == t)[0]
            if len(hit):
                series.append((lb, ts[hit[:1]], vs[hit[:1]]))
        problem = self._compare(ev, Result("vector", series))
        return f"range mode: {problem}" if problem else None


def _match(m: Matcher, value: str) -> bool:
    return m.matches(value)


def _lines(text: str) -> list[str]:
    out = []
    for raw in text.split("\n"):
        line = raw.strip()
        out.append("" if line.startswith("#") else line)
    return out


def run_file(path: Path) -> FileResult:
    result = FileResult(Path(path))
    try:
        lines = _lines(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        result.error = f"cannot read {path}: {exc}"
        return result
    runner = _Runner()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line:
            i += 1
            continue
        cmd = line.split()[0].lower()
        try:
            if cmd == "clear":
                runner.clear()
            elif cmd.startswith("load"):
                i = runner.load(lines, i)
            elif cmd.startswith("eval"):
                i, ev = _parse_eval(lines, i)
                try:
                    result.cases.append(runner.run_eval(ev))
                except Exception as exc:  # an engine bug must fail this case, not the whole file
                    result.cases.append(CaseResult(ev.line, ev.expr, "fail", f"internal error: {exc!r}"))
            else:
                raise ScriptError(f"line {i + 1}: invalid command {line!r}")
        except ScriptError as exc:
            result.error = f"{path}: {exc}"
            return result
        i += 1
    return result


def run_files(paths: Sequence[Path]) -> list[FileResult]:
    return [run_file(Path(p)) for p in paths]


def main(argv: list[str]) -> int:
    """``itbench-gym promqltest FILE...``: per-file summary, failures, and a final totals line."""
    verbose = "-v" in argv
    paths = [Path(a) for a in argv if a != "-v"]
    if not paths:
        print("usage: promqltest [-v] FILE.test...", file=sys.stderr)
        return 2
    results = run_files(paths)
    passed = failed = skipped = 0
    for fr in results:
        p, f, s = fr.count("pass"), fr.count("fail"), fr.count("skip")
        passed, failed, skipped = passed + p, failed + f + (1 if fr.error else 0), skipped + s
        print(f"{fr.path}: {p} passed, {f} failed, {s} skipped" + (f" — ERROR {fr.error}" if fr.error else ""))
        for c in fr.cases:
            if c.status == "fail" or (verbose and c.status == "skip"):
                print(f"  line {c.line}: {c.status.upper()} {c.expr}\n    {c.message}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
