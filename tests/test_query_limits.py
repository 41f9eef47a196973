"""No agent query or tool argument can take the process down: every query is bounded and answered.

The reproductions that used to segfault the interpreter, freeze it (Python ``re`` backtracking with
the GIL held) or grow its memory without bound run in a child process (``isolated``), so a
regression fails these tests instead of killing or hanging pytest. Everything else runs in
process: the Prometheus, Loki and Jaeger APIs answer bad input with their own 4xx errors, and the
``promql``, ``logql`` and ``traces`` tools turn any argument value into a ``ToolInputError`` or a
``ToolResult``. No test asserts a duration; the child's peak memory is checked against a bound
far above what a bounded query needs and far below what the old failures took.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from conftest import ContextFactory
from itbench_gym.backends.base import Endpoints
from itbench_gym.backends.sim.app.logs import StreamInfo
from itbench_gym.backends.sim.backend import SimBackend
from itbench_gym.backends.sim.loki import Engine as LokiEngine
from itbench_gym.backends.sim.loki import LogQLError, ParseError, make_loki_app
from itbench_gym.backends.sim.loki.limits import MAX_TEMPLATE_OUTPUT, TIMEOUT_MESSAGE
from itbench_gym.backends.sim.loki.template import Template, TemplateError
from itbench_gym.backends.sim.prometheus_api import PrometheusAPI
from itbench_gym.backends.sim.promql import Engine, PromQLError
from itbench_gym.backends.sim.promql.limits import (
    API_LIMITS,
    MAX_NESTING_DEPTH,
    MAX_QUERY_CHARS,
    MAX_TERMS,
    QueryLimits,
    QueryShapeError,
    check_shape,
)
from itbench_gym.backends.sim.traces import make_jaeger_app
from itbench_gym.backends.sim.tsdb import TSDB, Matcher
from itbench_gym.clock import SimClock
from itbench_gym.lang import regex
from itbench_gym.registry import get_spec
from itbench_gym.tools.base import ToolInputError, ToolResult
from itbench_gym.tools.durations import parse_duration, require_text
from itbench_gym.tools.logql import LogQLTool
from itbench_gym.tools.opencost import OpenCostTool
from itbench_gym.tools.promql import PromQLTool
from itbench_gym.tools.traces import TracesTool

T0 = 1_767_225_600.0
LONG = "a" * 5000


# ----------------------------------------------------------------------------------- fixtures

def _tsdb() -> TSDB:
    """A few jobs plus series whose label values are long runs of 'a' (the backtracking bait)."""
    db = TSDB()
    for k in range(21):
        t = T0 + 15 * k
        db.append(t, [({"__name__": "up", "job": f"job{j}", "instance": f"i{j}"}, 1.0) for j in range(20)]
                  + [({"__name__": "long", "job": "bait", "value": LONG[: 1000 * (i + 1)]}, float(i)) for i in range(5)])
    return db


class LineSource:
    """A LogSource with one stream of short lines and one of long runs of 'a'."""

    def __init__(self, count: int = 60) -> None:
        self.data = {
            StreamInfo("otel-demo", "frontend-1", "frontend", "frontend", "frontend"):
                [(T0 + i, f'level=info msg="GET /api/products/{i} 200" duration={i}ms') for i in range(count)],
            StreamInfo("otel-demo", "bait-1", "bait", "bait", "bait"): [(T0 + i + 0.5, LONG) for i in range(5)],
        }

    def log_streams(self, start: float, end: float) -> list[StreamInfo]:
        return [info for info, lines in self.data.items() if any(start <= t <= end for t, _ in lines)]

    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        for info, lines in self.data.items():
            if (info.namespace, info.pod, info.container) == (namespace, pod, container):
                return [(t, line) for t, line in lines if start <= t <= end]
        return []


def _prom_app(limits: QueryLimits = API_LIMITS) -> PrometheusAPI:
    clock = SimClock()
    clock.set(T0 + 300)
    engine = Engine(_tsdb())
    return PrometheusAPI(engine, engine.storage, None, clock, limits=limits)


@pytest.fixture(scope="module")
def prom() -> Client:
    return Client(_prom_app())


@pytest.fixture()
def loki() -> Client:
    clock = SimClock()
    clock.set(T0 + 100)
    return Client(make_loki_app(LineSource(), clock, threading.RLock(), "otel-demo"))


def _prom_get(client: Client, path: str, query_string: Any = None) -> tuple[int, dict[str, Any]]:
    resp = client.get(path, query_string=query_string)
    return resp.status_code, json.loads(resp.data)


def _loki_get(client: Client, path: str, query_string: Any = None) -> tuple[int, str]:
    resp = client.get(path, query_string=query_string)
    return resp.status_code, resp.get_data(as_text=True)


# ------------------------------------------------- the reproductions, in a child process

def _isolated_cases() -> dict[str, Any]:
    """Run every former crash, hang and memory blow-up; the parent checks the outcomes."""
    engine = Engine(_tsdb())
    logs = LokiEngine(LineSource())
    out: dict[str, Any] = {}

    def promql(name: str, query: str) -> None:
        try:
            res = engine.instant(query, T0 + 300, limits=API_LIMITS)
            out[name] = {"kind": "ok", "series": len(res.series)}
        except PromQLError as exc:
            out[name] = {"kind": exc.error_type, "message": exc.message}

    def logql(name: str, query: str, limit: int = 100) -> None:
        try:
            res = logs.logs(query, T0, T0 + 100, limit, "forward")
            labels = [lb for lb, _ in res.streams]
            out[name] = {"kind": "ok", "entries": sum(len(v) for _, v in res.streams),
                         "errors": sorted({lb.get("__error__", "") for lb in labels}),
                         "details": sorted({lb.get("__error_details__", "") for lb in labels})}
        except LogQLError as exc:
            out[name] = {"kind": type(exc).__name__, "message": exc.message}

    promql("plus_5000", "+".join(["1"] * 5000))
    promql("plus_500", "+".join(["1"] * 500))
    promql("parens_10000", "(" * 10_000 + "1" + ")" * 10_000)
    promql("parens_5000", "(" * 5000 + "1" + ")" * 5000)
    promql("abs_3000", "abs(" * 3000 + "up" + ")" * 3000)
    promql("sum_1000", "sum(" * 1000 + "up" + ")" * 1000)
    promql("or_2000", " or ".join(["up"] * 2000))
    promql("regex_star_star", '{__name__=~"(.*.*)*X"}')
    promql("regex_a_aa", '{__name__=~".+", value=~"(a|aa)*b"}')
    promql("regex_a_aa_matches", '{value=~"(a|aa)+"}')
    promql("label_replace_bait", 'label_replace(long, "x", "$1", "value", "((a|aa)*)*b")')
    logql("filter_star_star", '{service_name=~".+"} |~ "(.*.*)*X"')
    logql("filter_a_aa", '{service_name="bait"} |~ "(a|aa)*c" or "(x+x+)+y"')
    logql("regexp_parser_bait", '{service_name="bait"} | regexp "(?P<v>(a|aa)*b)"')
    logql("repeat_200M", '{service_name="frontend"} | line_format "{{ repeat 200000000 \\"x\\" }}"')
    logql("repeat_doubling", '{service_name="frontend"} | line_format `{{ __line__' + " | repeat 2" * 60 + " }}`")
    logql("printf_width", '{service_name="frontend"} | line_format `{{ printf "%0999999999d" 1 }}`')
    logql("printf_nested", '{service_name="frontend"} | line_format `{{ ' + "printf \"%s%s%s%s\" " * 1
          + " ".join(["(printf \"%s%s%s%s\" __line__ __line__ __line__ __line__)"] * 4) + " }}`")
    logql("replace_growth", '{service_name="frontend"} | label_format x=`{{ __line__' + ' | replace "" "xx"' * 30 + " }}`")
    logql("logql_plus_5000", "+".join(["1"] * 5000))
    logql("logql_parens_5000", "(" * 5000 + "1" + ")" * 5000)
    out["maxrss_mb"] = _own_peak_rss_mb()
    return out


def _own_peak_rss_mb() -> float:
    """This process' own peak resident memory: ``VmHWM`` of its address space. ``ru_maxrss`` would do
    only for a process started afresh: across ``execve`` it keeps the peak of the image it replaced,
    which for a child spawned by vfork is its parent's (a test worker holding twins)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _isolated_main() -> None:
    print(json.dumps(_isolated_cases()))


@pytest.fixture(scope="module")
def isolated() -> dict[str, Any]:
    """The child's outcomes; a segfault, hang (past a generous bound) or exception fails here."""
    here = Path(__file__).resolve().parent
    code = f"import sys; sys.path.insert(0, {str(here)!r}); from test_query_limits import _isolated_main; _isolated_main()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=here)
    assert proc.returncode == 0, f"child exited with {proc.returncode}: {proc.stderr[-2000:]}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("case, fragment", [
    ("plus_5000", "the expression has too many terms: more than 128 operators"),
    ("plus_500", "the expression has too many terms"),
    ("parens_10000", "the query is 20,001 characters long; the limit is 16,384 characters"),
    ("parens_5000", "the expression nests too deeply: more than 64 levels of brackets"),
    ("abs_3000", "the expression nests too deeply"),
    ("sum_1000", "the expression nests too deeply"),
    ("or_2000", "the expression has too many terms"),
])
def test_oversized_promql_is_refused_before_the_native_parser(isolated: dict[str, Any], case: str, fragment: str) -> None:
    outcome = isolated[case]
    assert outcome["kind"] == "bad_data"
    assert "parse error: " + fragment in outcome["message"]


def test_catastrophic_promql_regexes_run_in_linear_time(isolated: dict[str, Any]) -> None:
    assert isolated["regex_star_star"] == {"kind": "ok", "series": 0}
    assert isolated["regex_a_aa"] == {"kind": "ok", "series": 0}
    assert isolated["regex_a_aa_matches"] == {"kind": "ok", "series": 5}  # 1000..5000 'a's all match
    assert isolated["label_replace_bait"] == {"kind": "ok", "series": 5}


def test_catastrophic_logql_regexes_run_in_linear_time(isolated: dict[str, Any]) -> None:
    assert isolated["filter_star_star"]["kind"] == "ok" and isolated["filter_star_star"]["entries"] == 0
    assert isolated["filter_a_aa"]["kind"] == "ok" and isolated["filter_a_aa"]["entries"] == 0
    assert isolated["regexp_parser_bait"]["kind"] == "ok" and isolated["regexp_parser_bait"]["entries"] == 5


@pytest.mark.parametrize("case, function", [
    ("repeat_200M", "repeat output"),
    ("repeat_doubling", "repeat output"),
    ("printf_width", "printf output"),
    ("replace_growth", "replace output"),
])
def test_template_blow_ups_fail_the_entry_not_the_process(isolated: dict[str, Any], case: str, function: str) -> None:
    outcome = isolated[case]
    assert outcome["kind"] == "ok" and outcome["entries"] == 60
    assert outcome["errors"] == ["TemplateFormatErr"]
    (details,) = outcome["details"]
    assert details == (f"template: line:1: {function} would exceed {MAX_TEMPLATE_OUTPUT} characters "
                       "(the twin's limit on one rendered value)")


def test_nested_printf_is_bounded_by_its_inputs(isolated: dict[str, Any]) -> None:
    outcome = isolated["printf_nested"]
    assert outcome["kind"] == "ok" and outcome["entries"] == 60 and outcome["errors"] == [""]


def test_oversized_logql_is_a_parse_error(isolated: dict[str, Any]) -> None:
    assert isolated["logql_plus_5000"]["kind"] == "ParseError"
    assert "the expression has too many terms" in isolated["logql_plus_5000"]["message"]
    assert isolated["logql_parens_5000"]["kind"] == "ParseError"
    assert "nests too deeply" in isolated["logql_parens_5000"]["message"]


def test_the_reproductions_stay_within_bounded_memory(isolated: dict[str, Any]) -> None:
    # Unbounded, repeat 200000000 alone takes 200 MB per line and abs() 3,000 deep took +900 MB.
    assert isolated["maxrss_mb"] < 1024


# ------------------------------------------------------------------------ the shape scan

def test_shape_scan_skips_strings_comments_and_selector_contents() -> None:
    text = '{a=~"((((((((", b!="+-*/"} # ((((((( + + +\n + sum by (x) (rate(y[5m:1m]))'
    shape = check_shape(text, language="promql")
    assert shape.depth == 3 and shape.terms == 1
    (lit,) = shape.regexes
    assert (text[lit.label_pos], lit.value) == ("a", "((((((((")


def test_shape_limits_are_exact_at_the_boundary() -> None:
    check_shape("(" * MAX_NESTING_DEPTH + "1" + ")" * MAX_NESTING_DEPTH, language="promql")
    with pytest.raises(QueryShapeError, match="nests too deeply") as err:
        check_shape("(" * (MAX_NESTING_DEPTH + 1) + "1" + ")" * (MAX_NESTING_DEPTH + 1), language="promql")
    assert err.value.pos == MAX_NESTING_DEPTH
    check_shape("+".join(["1"] * (MAX_TERMS + 1)), language="promql")
    with pytest.raises(QueryShapeError, match="too many terms"):
        check_shape("+".join(["1"] * (MAX_TERMS + 2)), language="promql")
    check_shape("x" * MAX_QUERY_CHARS, language="logql")
    with pytest.raises(QueryShapeError, match="characters long"):
        check_shape("x" * (MAX_QUERY_CHARS + 1), language="logql")


def test_queries_at_the_limits_evaluate_without_hitting_python_recursion() -> None:
    chain = "+".join(["up"] * 120)
    query = "max_over_time(" * 60 + "(" + chain + ")" + "[5m:1m])" * 60
    res = Engine(_tsdb()).instant(query, T0 + 300)
    assert res.type == "vector" and len(res.series) == 20


# -------------------------------------------------------------------------- the regexes

@pytest.mark.parametrize("pattern, message", [
    ("(?=x)", "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
    ("a(?!x)", "error parsing regexp: invalid or unsupported Perl syntax: `(?!`"),
    ("(?<=x)y", "error parsing regexp: invalid named capture: `(?<=x)y`"),
    ("(a)\\1", "error parsing regexp: invalid escape sequence: `\\1`"),
    ("\\C", "error parsing regexp: invalid escape sequence: `\\C`"),
    ("(a", "error parsing regexp: missing closing ): `(a`"),
    ("a**", "error parsing regexp: invalid nested repetition operator: `**`"),
    ("x{1001}", "error parsing regexp: invalid repeat count: `{1001}`"),
    ("*", "error parsing regexp: missing argument to repetition operator: `*`"),
    ("a\\", "error parsing regexp: trailing backslash at end of expression: ``"),
])
def test_regex_errors_are_gos(pattern: str, message: str) -> None:
    with pytest.raises(regex.RegexError) as err:
        regex.compile(pattern)
    assert str(err.value) == message


def test_regex_accepts_go_syntax() -> None:
    assert regex.compile(r"(?P<a>x)(?<b>y)").groupindex == {"a": 1, "b": 2}
    assert regex.compile(r"\Qa.b\E+", anchored=True).matches("a.bbb")
    assert not regex.compile(r"\Qa.b\E", anchored=True).matches("axb")
    assert regex.compile(r"ab\z").matches("xab") and not regex.compile(r"ab\z").matches("abx")
    assert regex.compile("A(?i)b").matches("Ab") and not regex.compile("A(?i)b").matches("ab")
    assert regex.compile("a.b", anchored=True).matches("a\nb")  # label matchers: ^(?s:...)$
    assert not regex.compile("a.b").matches("a\nb") and regex.compile("(?s)a.b").matches("a\nb")
    assert not regex.compile("b", anchored=True).matches("abc")  # anchored at both ends
    assert regex.compile("b").matches("a\ud800b")  # a lone surrogate reads as U+FFFD, as Go reads bad bytes


def test_regex_expand_and_replace_follow_go() -> None:
    rx = regex.compile(r"(?P<user>\w+)@(\w+)")
    m = rx.search("mail bob@host")
    assert m is not None
    assert rx.expand(m, "$2:${user}|$1x|$$|$9|${") == "host:bob||$||${"
    assert regex.compile("a*").replace_all("baaac", "X") == "XbXcX"  # no empty match right after "aaa"
    with pytest.raises(regex.OutputTooLarge):
        regex.compile("").replace_all("x" * 100, "yyyy", max_len=200)


def test_tsdb_matchers_are_anchored_re2() -> None:
    db = _tsdb()
    assert len(db.select([Matcher("job", "=~", "job1")])) == 1  # not job10..job19
    assert len(db.select([Matcher("job", "=~", "job1.*")])) == 11
    with pytest.raises(regex.RegexError, match=r"invalid or unsupported Perl syntax: `\(\?=`"):
        Matcher("job", "=~", "(?=job)")


# ----------------------------------------------------------------- the Prometheus HTTP API

@pytest.mark.parametrize("path, params, fragment", [
    ("/api/v1/query_range", {"query": "up", "start": "0", "end": "1e308", "step": "15"},
     'invalid parameter "end": cannot parse "1e308" to a valid timestamp'),
    ("/api/v1/query_range", {"query": "up", "start": "nan", "end": "10", "step": "15"},
     'invalid parameter "start": cannot parse "nan" to a valid timestamp'),
    ("/api/v1/query_range", {"query": "up", "start": "0", "end": "10", "step": "inf"},
     'invalid parameter "step": cannot parse "inf" to a valid duration'),
    ("/api/v1/query_range", {"query": "up", "start": "0", "end": "10", "step": "1e308"},
     'invalid parameter "step": cannot parse "1e308" to a valid duration. It overflows int64'),
    ("/api/v1/query", {"query": "up", "time": "-1e300"}, 'invalid parameter "time": cannot parse "-1e300"'),
    ("/api/v1/query", {"query": "up", "timeout": "nan"}, 'invalid parameter "timeout"'),
    ("/api/v1/query", {"query": "up @ 1e20"}, "timestamp out of bounds for @ modifier: 100000000000000000000.000000"),
    ("/api/v1/query", {"query": "up @ inf"}, "timestamp out of bounds for @ modifier: +Inf"),
    ("/api/v1/query", {"query": 'up{job=~"(?=a)"}'},
     "1:4: parse error: error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
    ("/api/v1/query", {"query": 'up{job=~"(a)\\\\1"}'}, "1:4: parse error: error parsing regexp: invalid escape sequence: `\\1`"),
    ("/api/v1/query", {"query": 'up{job=~"(?<=a)b"}'}, "1:4: parse error: error parsing regexp: invalid named capture"),
    ("/api/v1/series", {"match[]": '{job=~"(?!x)"}'}, "1:2: parse error: error parsing regexp: invalid or unsupported Perl"),
    ("/api/v1/query", {"query": "up\x00"}, "parse error: unexpected character"),
])
def test_bad_input_is_bad_data_not_a_500(prom: Client, path: str, params: dict[str, str], fragment: str) -> None:
    status, body = _prom_get(prom, path, params)
    assert (status, body["status"], body["errorType"]) == (400, "error", "bad_data")
    assert fragment in body["error"]


@pytest.mark.parametrize("path, raw, fragment", [
    ("/api/v1/query", "query=up%ff", 'invalid parameter "query": not valid UTF-8'),
    ("/api/v1/query", "query=up&time=%ed%a0%80", 'invalid parameter "time": not valid UTF-8'),  # a surrogate's bytes
    ("/api/v1/label/%ff/values", "", "invalid request path: not valid UTF-8"),
])
def test_invalid_utf8_is_bad_data(prom: Client, path: str, raw: str, fragment: str) -> None:
    status, body = _prom_get(prom, path, raw)
    assert (status, body["errorType"], body["error"]) == (400, "bad_data", fragment)


def test_invalid_utf8_in_a_form_body_is_bad_data(prom: Client) -> None:
    resp = prom.post("/api/v1/query", data=b"query=up%ff", content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 400 and json.loads(resp.data)["error"] == 'invalid parameter "query": not valid UTF-8'
    resp = prom.post("/api/v1/query", data=b"query=" + b"u" * (2 << 20), content_type="application/x-www-form-urlencoded")
    assert resp.status_code == 413 and json.loads(resp.data)["errorType"] == "bad_data"


def test_go_regex_syntax_works_in_selectors_and_label_replace(prom: Client) -> None:
    def count(query: str) -> int:
        status, body = _prom_get(prom, "/api/v1/query", {"query": query})
        assert status == 200, body
        return len(body["data"]["result"])

    assert count('up{job=~"\\\\Qjob1\\\\E"}') == 1
    assert count('up{job=~"(?<n>job)1\\\\z"}') == 1
    assert count('up{job=~"JOB(?i)1|(?i)job2"}') == 1
    status, body = _prom_get(prom, "/api/v1/query", {"query": 'label_replace(up{job="job3"}, "n", "${num}-$1", "job", "(j)ob(?P<num>\\\\d)")'})
    assert body["data"]["result"][0]["metric"]["n"] == "3-j"
    status, body = _prom_get(prom, "/api/v1/query", {"query": 'label_replace(up, "n", "$1", "job", "(?=a)")'})
    assert (status, body["errorType"], body["error"]) == (422, "execution", "invalid regular expression in label_replace(): (?=a)")


def test_sample_budget_is_prometheus_max_samples() -> None:
    client = Client(_prom_app(QueryLimits(max_samples=1000, timeout=10.0)))
    status, body = _prom_get(client, "/api/v1/query_range", {"query": "up", "start": str(T0), "end": str(T0 + 300), "step": "15"})
    assert status == 200 and len(body["data"]["result"]) == 20  # 20 series x 21 steps = 420 samples
    status, body = _prom_get(client, "/api/v1/query_range",
                             {"query": "up + up + up", "start": str(T0), "end": str(T0 + 300), "step": "15"})
    assert (status, body["errorType"]) == (422, "execution")
    assert body["error"] == "query processing would load too many samples into memory in query execution"


def test_subqueries_cannot_allocate_unbounded_grids(prom: Client) -> None:
    status, body = _prom_get(prom, "/api/v1/query", {"query": "max_over_time(up[1y:1ms])"})
    assert (status, body["errorType"]) == (422, "execution")
    assert "too many samples" in body["error"]


def test_deadline_is_prometheus_query_timeout(prom: Client) -> None:
    status, body = _prom_get(prom, "/api/v1/query", {"query": "up", "timeout": "0s"})
    assert (status, body["errorType"], body["error"]) == (503, "timeout", "query timed out in expression evaluation")
    status, body = _prom_get(prom, "/api/v1/query", {"query": "up", "timeout": "30s"})  # capped at 10 s, not exceeded
    assert status == 200


def test_response_size_is_bounded(prom: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import itbench_gym.backends.sim.prometheus_api as api

    monkeypatch.setattr(api, "MAX_RESPONSE_BYTES", 2000)
    status, body = _prom_get(prom, "/api/v1/query_range", {"query": "up", "start": str(T0), "end": str(T0 + 300), "step": "15"})
    assert (status, body["errorType"]) == (422, "execution")
    assert body["error"] == ("the query result exceeds the 2,000 bytes response limit; select fewer series "
                             "(add label matchers or aggregate) or use a larger step")
    status, body = _prom_get(prom, "/api/v1/query", {"query": "count(up)"})
    assert status == 200


def test_series_endpoints_take_prometheus_limit(prom: Client) -> None:
    status, body = _prom_get(prom, "/api/v1/series", {"match[]": "up", "limit": "3"})
    assert status == 200 and len(body["data"]) == 3 and body["warnings"] == ["results truncated due to limit"]
    status, body = _prom_get(prom, "/api/v1/label/job/values", {"limit": "-1"})
    assert (status, body["errorType"]) == (400, "bad_data")


def test_a_handler_bug_is_still_an_api_error(prom: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    app = _prom_app()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(app.engine, "instant", broken)
    status, body = _prom_get(Client(app), "/api/v1/query", {"query": "up"})
    assert (status, body["status"], body["errorType"]) == (500, "error", "internal")


# ----------------------------------------------------------------------- the Loki HTTP API

@pytest.mark.parametrize("params, fragment", [
    ({"start": "nan"}, 'invalid parameter "start": cannot parse "nan" as a timestamp'),
    ({"end": "1.0e400"}, 'invalid parameter "end": cannot parse "1.0e400" as a timestamp'),
    ({"end": "99999999999999999999999"}, 'invalid parameter "end": cannot parse "99999999999999999999999"'),
    ({"since": "1e308"}, 'invalid parameter "since": cannot parse "1e308" to a valid duration. It overflows int64'),
    ({"limit": "5001"}, "max entries limit per query exceeded, limit > max_entries_limit_per_query (5001 > 5000)"),
    ({"query": '{service_name="frontend"} |~ "(?=x)"'},
     "parse error at line 1, col 30: error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
    ({"query": "{" + ",".join(f'a{i}=~".*"' for i in range(1001)) + ',service_name="frontend"}'},
     "max streams matchers per query exceeded, matchers-count > limit (1002 > 1000)"),
    ({"query": 'sum(count_over_time({service_name="frontend"}[1m]))', "step": "nan"},
     'invalid parameter "step": cannot parse "nan" to a valid duration'),
])
def test_loki_bad_input_is_a_400(loki: Client, params: dict[str, str], fragment: str) -> None:
    query = {"query": '{service_name="frontend"}', "start": str(int(T0)), "end": str(int(T0 + 100)), **params}
    status, text = _loki_get(loki, "/loki/api/v1/query_range", query)
    assert status == 400
    assert fragment in text


def test_loki_invalid_utf8_is_a_400(loki: Client) -> None:
    assert _loki_get(loki, "/loki/api/v1/query_range", "query=%ff") == (400, 'invalid parameter "query": not valid UTF-8')


def test_loki_series_limit_and_query_length() -> None:
    clock = SimClock()
    clock.set(T0 + 700)
    client = Client(make_loki_app(LineSource(count=600), clock, threading.RLock(), "otel-demo"))
    status, text = _loki_get(client, "/loki/api/v1/query",
                             {"query": 'sum by (x) (count_over_time({service_name="frontend"} | label_format x="{{__line__}}" [20m]))'})
    assert status == 400 and text.startswith("maximum number of series (500) reached for a single query")
    status, text = _loki_get(client, "/loki/api/v1/query", {"query": 'count_over_time({service_name="frontend"}[800h])'})
    assert (status, text) == (400, "[interval] value exceeds limit")
    status, text = _loki_get(client, "/loki/api/v1/query_range", {"query": '{service_name="frontend"}', "since": "800h"})
    assert (status, text) == (400, "the query time range exceeds the limit (query length: 800h0m0s, limit: 721h0m0s)")


def test_loki_timeout_is_504(loki: Client) -> None:
    loki.application.engine.timeout = 0.0  # type: ignore[attr-defined]
    status, text = _loki_get(loki, "/loki/api/v1/query_range",
                             {"query": '{service_name="frontend"}', "start": str(int(T0)), "end": str(int(T0 + 100))})
    assert (status, text) == (504, TIMEOUT_MESSAGE)


def test_loki_template_output_per_query_and_response_size_are_bounded() -> None:
    clock = SimClock()
    clock.set(T0 + 700)
    client = Client(make_loki_app(LineSource(count=600), clock, threading.RLock(), "otel-demo"))
    window = {"start": str(int(T0)), "end": str(int(T0 + 700)), "limit": "5000"}
    # 600 lines of ~250 KB each: every one is within the per-value limit, together past 64 MiB.
    status, text = _loki_get(client, "/loki/api/v1/query_range",
                             {"query": '{service_name="frontend"} | line_format "{{ repeat 4000 __line__ }}"', **window})
    assert status == 400 and text.startswith("the query's line_format/label_format templates rendered more than 64MB")
    status, text = _loki_get(client, "/loki/api/v1/query_range",
                             {"query": '{service_name="frontend"} | line_format "{{ repeat 400 __line__ }}"', **window})
    assert status == 413 and text.startswith("response larger than the max message size (")


def test_template_limits_apply_to_parsing_and_rendering() -> None:
    with pytest.raises(TemplateError, match="max expression depth exceeded"):
        Template("{{ " + "(" * 60 + "__line__" + ")" * 60 + " }}")
    with pytest.raises(TemplateError, match="max expression depth exceeded"):
        Template("{{ if 1 }}" * 60 + "x" + "{{ end }}" * 60)
    with pytest.raises(TemplateError, match="unclosed action"):
        Template("{{ x " + "{{" * 4000)
    tpl = Template('{{ mul 9223372036854775807 2 }} {{ add 9223372036854775807 1 }} {{ mod -7 3 }} {{ div -7 2 }}')
    assert tpl.render({}, "", T0) == "-2 -9223372036854775808 -1 -3"  # Go's int64 arithmetic
    assert Template('{{ regexReplaceAll "(a|aa)*c" __line__ "x" }}').render({}, LONG, T0) == LONG
    assert Template('{{ count "a" __line__ }}').render({}, LONG, T0) == "5000"
    with pytest.raises(TemplateError, match="regexReplaceAll: error parsing regexp: invalid or unsupported Perl syntax"):
        Template('{{ regexReplaceAll "(?=a)" __line__ "x" }}').render({}, "a", T0)


def test_loki_parse_rejects_non_strings() -> None:
    from itbench_gym.backends.sim.loki import parse

    with pytest.raises(ParseError, match="query must be a string"):
        parse(123)  # type: ignore[arg-type]


# --------------------------------------------------------------------- the Jaeger HTTP API

@pytest.fixture(scope="module")
def twin() -> Iterator[tuple[SimBackend, Endpoints]]:
    backend = SimBackend()
    endpoints = backend.start(get_spec("SRE-CacheFailure-v0"), 1)
    backend.advance(600)
    try:
        yield backend, endpoints
    finally:
        backend.close()


@pytest.mark.parametrize("query, fragment", [
    ("service=%ff", 'invalid parameter "service": not valid UTF-8'),
    ("service=frontend&lookback=" + "9" * 400 + "d", "unable to parse param 'lookback': time: invalid duration"),
    ("service=frontend&minDuration=" + "9" * 30 + "h", "unable to parse param 'minDuration': time: invalid duration"),
    ("service=frontend&tags=" + "[" * 100_000, "malformed 'tags' parameter, cannot unmarshal JSON: exceeded max depth"),
])
def test_jaeger_bad_input_is_a_400(twin: tuple[SimBackend, Endpoints], query: str, fragment: str) -> None:
    backend, _ = twin
    client = Client(make_jaeger_app(backend.twin.apps.instances, backend.clock, backend.twin.lock))
    resp = client.get("/api/traces?" + query)
    body = json.loads(resp.data)
    assert resp.status_code == 400 and body["data"] is None
    assert fragment in body["errors"][0]["msg"]


# ------------------------------------------------------------------------------ the tools

_HUGE = 10**5000
_BAD_VALUES: list[Any] = ["\ud800", "x\x00y", "nan", "inf", "-inf", "1e400", "-5m", "", " ", float("nan"), float("inf"),
                          -1, 0, 1e308, _HUGE, -_HUGE, True, None, [1], {"a": 1}, "9" * 5000, "1h" * 3000]


def _outcome(tool: Any, args: dict[str, Any], ctx: Any) -> ToolResult | ToolInputError:
    try:
        return tool.run(args, ctx)  # type: ignore[no-any-return]
    except ToolInputError as exc:
        return exc


@pytest.mark.parametrize("tool, base, names", [
    (PromQLTool(), {"query": "up"}, ["query", "range", "step"]),
    (LogQLTool(), {"query": '{service_name="frontend"}'}, ["query", "range", "step", "limit"]),
    (OpenCostTool(), {"window": "10m"}, ["window", "aggregate", "step", "accumulate"]),
    (TracesTool(), {"service": "frontend", "lookback": "30s"}, ["service", "operation", "tags", "lookback", "limit", "sort", "trace_id",
                                             "min_duration", "max_duration", "error", "http.status_code", "text"]),
])
def test_tools_never_raise_for_any_argument_value(twin: tuple[SimBackend, Endpoints], tool_context: ContextFactory,
                                                  tool: Any, base: dict[str, Any], names: list[str]) -> None:
    backend, endpoints = twin
    ctx = tool_context(backend, endpoints)
    for name in names:
        for value in _BAD_VALUES:
            outcome = _outcome(tool, {**base, name: value}, ctx)
            assert isinstance(outcome, (ToolResult, ToolInputError)), (name, type(value))
            text = outcome.text if isinstance(outcome, ToolResult) else str(outcome)
            assert text.strip() and len(text) < 20_000


def test_tool_errors_say_what_was_wrong(twin: tuple[SimBackend, Endpoints], tool_context: ContextFactory) -> None:
    backend, endpoints = twin
    ctx = tool_context(backend, endpoints)
    cases: list[tuple[Any, dict[str, Any], str]] = [
        (PromQLTool(), {"query": "up\ud800"}, "argument 'query' is not valid text: it contains a lone surrogate ('\\ud800') at position 2"),
        (PromQLTool(), {"query": "up", "range": "nan"}, "bad range 'nan'; use e.g. 30s, 15m, 1h30m or 2d"),
        (PromQLTool(), {"query": "up", "range": float("inf")}, "range must be a finite duration, got inf"),
        (PromQLTool(), {"query": "up", "range": "30d", "step": "1s"}, "range / step gives 2,592,000 points; Prometheus allows at most 11,000"),
        (LogQLTool(), {"query": "{a=\"b\"}", "range": "inf"}, "bad range 'inf'"),
        (LogQLTool(), {"query": "{a=\"b\"}", "range": "800h"}, "range '800h' is too long; the most accepted is 721h"),
        (LogQLTool(), {"query": "{a=\"b\"}", "limit": _HUGE}, "limit must be an integer between 1 and 5000, got a int too large to print"),
        (TracesTool(), {"service": "frontend", "limit": float("inf")}, "limit must be a whole number between 1 and 1500, got inf"),
        (TracesTool(), {"service": "frontend", "lookback": "9" * 400 + "d"}, "lookback must be a finite duration"),
        (TracesTool(), {"service": "\ud800"}, "argument 'service' is not valid text"),
        (TracesTool(), {"service": "frontend", "tags": "{" * 100_000}, "tags is not valid JSON"),
    ]
    for tool, args, message in cases:
        outcome = _outcome(tool, args, ctx)
        assert isinstance(outcome, ToolInputError), (args, outcome)
        assert str(outcome).startswith(message), (args, str(outcome))


def test_tools_report_the_apis_limit_errors(twin: tuple[SimBackend, Endpoints], tool_context: ContextFactory) -> None:
    backend, endpoints = twin
    ctx = tool_context(backend, endpoints)
    res = PromQLTool().run({"query": "+".join(["1"] * 5000)}, ctx)
    assert res.exit_status == 1 and "Error executing query: bad_data: 1:258: parse error: the expression has too many terms" in res.text
    res = PromQLTool().run({"query": '{__name__=~"(.*.*)*X"}'}, ctx)
    assert res.exit_status == 0 and res.text == "empty result (no series matched)"
    res = LogQLTool().run({"query": '{service_name="frontend"} | line_format "{{ repeat 200000000 \\"x\\" }}"', "range": "5m"}, ctx)
    assert res.exit_status == 0
    assert "__error__=TemplateFormatErr (template: line:1: repeat output would exceed 262144 characters" in res.text
    res = LogQLTool().run({"query": '{service_name="frontend"} |~ "(?=x)"'}, ctx)
    assert res.exit_status == 1 and "error parsing regexp: invalid or unsupported Perl syntax: `(?=`" in res.text


def test_one_duration_parser_for_the_tools() -> None:
    assert parse_duration("90", "d") == 90.0 and parse_duration(1.5, "d") == 1.5
    assert parse_duration("1h30m", "d") == 5400.0 and parse_duration("1.5h", "d") == 5400.0
    assert parse_duration("500ms", "d") == 0.5 and parse_duration("2d", "d") == 172_800.0
    assert parse_duration("1w", "d") == 604_800.0 and parse_duration(" 15m ", "d") == 900.0
    assert parse_duration("0", "d", positive=False) == 0.0
    for bad, message in [("0", "must be positive"), ("-5m", "bad d"), ("5 m", "bad d"), ("1e400", "finite"),
                         (math.nan, "finite"), (_HUGE, "too long"), (-_HUGE, "must be positive"), (True, "duration string"),
                         ("11y", "too long")]:
        with pytest.raises(ToolInputError, match=message):
            parse_duration(bad, "d")
    assert require_text("ok", "q") == "ok"
    with pytest.raises(ToolInputError, match="must be a string, got int"):
        require_text(5, "q")
