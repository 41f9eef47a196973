"""LogQL parsing and evaluation against a small in-memory log source."""

from __future__ import annotations

import math

import pytest

from itbench_gym.backends.sim.app.logs import StreamInfo
from itbench_gym.backends.sim.loki import Engine, LogQLError, ParseError, parse
from itbench_gym.backends.sim.loki import ast as A
from itbench_gym.backends.sim.loki.errors import PipelineError
from itbench_gym.backends.sim.loki.matching import detect_level

T0 = 1_767_225_600.0

FRONTEND = [
    (T0 + 10, '{"level":"info","msg":"GET / 200 in 12ms","status":200,"route":"/","dur":"12ms","size":"1.5KB"}'),
    (T0 + 20, '{"level":"error","msg":"Error: UNAVAILABLE: recommendation down","status":500,"route":"/api/recommendations","dur":"1.2s","size":"200B"}'),
    (T0 + 30, '{"level":"error","msg":"Error: UNAVAILABLE: recommendation down","status":503,"route":"/api/recommendations","dur":"2s","size":"100B"}'),
    (T0 + 70, '{"level":"info","msg":"GET /api/cart 200 in 3ms","status":200,"route":"/api/cart","dur":"3ms","size":"2KB"}'),
]
CHECKOUT = [
    (T0 + 15, 'level=info msg="order placed" order_id=42 items=3'),
    (T0 + 45, 'level=warn msg="failed to send order confirmation" items=1'),
    (T0 + 50, "not logfmt at all ==="),
]
PROXY = [(T0 + 5 + i, f'[2026-01-01T00:00:{5 + i:02d}.000Z] "GET /api/products/{i} HTTP/1.1" 200 - 10.0.0.{i}') for i in range(5)]


class FakeSource:
    """log_streams/log_lines over fixed lines, in the AppModel's shape."""

    def __init__(self) -> None:
        self.data = {
            StreamInfo("otel-demo", "frontend-1", "frontend", "frontend", "frontend"): FRONTEND,
            StreamInfo("otel-demo", "checkout-1", "checkout", "checkout", "checkout"): CHECKOUT,
            StreamInfo("otel-demo", "frontend-proxy-1", "frontend-proxy", "frontend-proxy", "frontend-proxy"): PROXY,
            StreamInfo("other", "x-1", "x", "x", "x"): [(T0 + 1, "error from another namespace")],
        }

    def log_streams(self, start: float, end: float) -> list[StreamInfo]:
        return [info for info, lines in self.data.items() if any(start <= t <= end for t, _ in lines)]

    def log_lines(self, namespace: str, pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
        for info, lines in self.data.items():
            if (info.namespace, info.pod, info.container) == (namespace, pod, container):
                return [(t, line) for t, line in lines if start <= t <= end]
        return []


@pytest.fixture()
def engine() -> Engine:
    return Engine(FakeSource())


def lines(engine: Engine, query: str, limit: int = 100, direction: str = "forward") -> list[str]:
    result = engine.logs(query, T0, T0 + 100, limit, direction)
    entries = sorted(((t, line) for _, values in result.streams for t, line in values), reverse=direction == "backward")
    return [line for _, line in entries]


def instant(engine: Engine, query: str, t: float = T0 + 100) -> dict[tuple[tuple[str, str], ...], float]:
    result = engine.metrics(query, t, t, 0.0)
    return {k: float(v[0]) for k, v in result.series.items() if not math.isnan(v[0])}


# -- parsing ----------------------------------------------------------------------------------

def test_parse_builds_the_tree_an_agent_query_means() -> None:
    expr = parse('sum by (service_name) (count_over_time({namespace="otel-demo"} |= "error" [5m]))')
    assert isinstance(expr, A.VectorAggregation) and expr.op == "sum" and expr.grouping == A.Grouping(False, ("service_name",))
    inner = expr.expr
    assert isinstance(inner, A.RangeAggregation) and inner.op == "count_over_time" and inner.log_range.range_s == 300
    assert inner.log_range.selector.stages == (A.LineFilter("|=", ("error",)),)


@pytest.mark.parametrize("query, position, text", [
    ('{app="foo" |= "x"', (1, 12), "syntax error: unexpected |=, expecting , or }"),
    ('{app="foo"} |= "bar', (1, 16), "literal not terminated"),
    ('sum(rate({app="foo"}[5m]) by (x)', (1, 33), "unexpected $end, expecting )"),
    ('{app="foo"} |~ "(("', (1, 16), "error parsing regexp"),
    ('{app="foo"} | line_format "{{ nope .x }}"', (1, 27), 'function "nope" not defined'),
    ('{app="foo"} | json | status >= "x"', (1, 32), "unexpected STRING"),
])
def test_syntax_errors_name_the_position(query: str, position: tuple[int, int], text: str) -> None:
    with pytest.raises(ParseError) as err:
        parse(query)
    assert (err.value.line, err.value.col) == position
    assert str(err.value).startswith(f"parse error at line {position[0]}, col {position[1]}: ")
    assert text in str(err.value)


@pytest.mark.parametrize("query, text", [
    ('{app=~".*"}', "at least one regexp or equality matcher that does not have an empty-compatible value"),
    ('sum_over_time({app="a"}[5m])', "invalid aggregation sum_over_time without unwrap"),
    ('count_over_time({app="a"} | unwrap x [5m])', "invalid aggregation count_over_time with unwrap"),
    ('topk(sum(rate({app="a"}[1m])))', "parameter required for operation topk"),
    ('{app="a"} + 1', "unexpected type for left leg of binary operation (+)"),
    ('rate({app="a"} | unwrap x | json [5m])', "only label filters may follow unwrap"),
])
def test_semantic_errors_are_parse_errors(query: str, text: str) -> None:
    with pytest.raises(ParseError, match="parse error") as err:
        parse(query)
    assert text in str(err.value)


def test_keywords_can_still_be_label_names() -> None:
    expr = parse('sum by (json, rate) (count_over_time({json="x"} | logfmt | rate > 2 [1m]))')
    assert isinstance(expr, A.VectorAggregation) and expr.grouping == A.Grouping(False, ("json", "rate"))


# -- log queries -------------------------------------------------------------------------------

def test_stream_selector_matchers_and_namespace(engine: Engine) -> None:
    assert len(lines(engine, '{service_name="frontend"}')) == 4
    assert len(lines(engine, '{service_name=~"front.*"}')) == 9
    assert len(lines(engine, '{namespace="otel-demo", service_name!="frontend-proxy"}')) == 7
    assert len(lines(engine, '{namespace="otel-demo", service_name!~"front.*"}')) == 3
    # the store holds every namespace's streams (another copy of the app, in a namespace of its own)
    assert lines(engine, '{service_name="x"}') == ["error from another namespace"]
    assert lines(engine, '{namespace="otel-demo", service_name="x"}') == []


def test_line_filters_chain_and_or(engine: Engine) -> None:
    assert len(lines(engine, '{service_name="frontend"} |= "error"')) == 2
    assert len(lines(engine, '{service_name="frontend"} |= "error" != "503"')) == 1
    assert len(lines(engine, '{service_name="frontend"} |~ "status\\":50[03]"')) == 2
    assert len(lines(engine, '{service_name="frontend"} !~ "(?i)ERROR"')) == 2
    assert len(lines(engine, '{app="checkout"} |= "order placed" or "confirmation"')) == 2
    assert len(lines(engine, '{app="frontend-proxy"} |> "<_> \\"GET <_> HTTP/1.1\\" 200 <_>"')) == 5
    assert len(lines(engine, '{app="frontend-proxy"} |= ip("10.0.0.0/30")')) == 4


def test_limit_and_direction_pick_the_newest_or_oldest(engine: Engine) -> None:
    newest = lines(engine, '{namespace="otel-demo"}', limit=2, direction="backward")
    oldest = lines(engine, '{namespace="otel-demo"}', limit=2, direction="forward")
    assert newest[0] == FRONTEND[-1][1] and CHECKOUT[-1][1] in newest
    assert oldest == [PROXY[0][1], PROXY[1][1]]


def test_json_parser_and_label_filters(engine: Engine) -> None:
    result = engine.logs('{app="frontend"} | json | status >= 500 and route="/api/recommendations"', T0, T0 + 100, 100, "forward")
    (labels, values), *rest = result.streams
    assert len(values) == 1 and len(rest) == 1
    assert labels["level"] == "error" and labels["status"] in ("500", "503") and labels["service_name"] == "frontend"
    assert len(lines(engine, '{app="frontend"} | json | dur > 1s')) == 2
    assert len(lines(engine, '{app="frontend"} | json | size >= 1KB')) == 2
    assert len(lines(engine, '{app="frontend"} | json | status == 200 or status == 503')) == 3


def test_logfmt_regexp_and_pattern_parsers(engine: Engine) -> None:
    out = engine.logs('{app="checkout"} | logfmt | items > 2', T0, T0 + 100, 100, "forward").streams
    assert [labels["order_id"] for labels, _ in out] == ["42"]
    strict = engine.logs('{app="checkout"} | logfmt --strict', T0, T0 + 100, 100, "forward").streams
    assert any(labels.get("__error__") == "LogfmtParserErr" for labels, _ in strict)
    rx = engine.logs('{app="frontend-proxy"} | regexp "GET /api/products/(?P<product>\\\\d+)" | product = "3"', T0, T0 + 100, 100, "forward")
    assert [labels["product"] for labels, _ in rx.streams] == ["3"]
    pat = engine.logs('{app="frontend-proxy"} | pattern `[<ts>] "<method> <path> <_>" <code> <_>` | path = "/api/products/1"',
                      T0, T0 + 100, 100, "forward")
    (labels, values), = pat.streams
    assert labels["method"] == "GET" and labels["code"] == "200" and len(values) == 1


def test_formatting_stages(engine: Engine) -> None:
    assert lines(engine, '{app="frontend"} | json | status = 500 | line_format "{{.route}} -> {{ .status | ToUpper }} {{ if eq .level \\"error\\" }}BAD{{ end }}"') == \
        ["/api/recommendations -> 500 BAD"]
    out = engine.logs('{app="frontend"} | json | label_format code=status, svc="{{.service_name}}!" | keep code, svc | code="503"',
                      T0, T0 + 100, 100, "forward").streams
    assert [labels for labels, _ in out] == [{"code": "503", "svc": "frontend!"}]
    dropped = engine.logs('{app="checkout"} | logfmt | drop msg, level="warn"', T0, T0 + 100, 100, "forward").streams
    assert all("msg" not in labels for labels, _ in dropped)
    assert {labels.get("level") for labels, _ in dropped} == {"info", None}


def test_json_errors_mark_lines_instead_of_dropping_them(engine: Engine) -> None:
    out = engine.logs('{app="checkout"} | json', T0, T0 + 100, 100, "forward").streams
    assert sum(len(v) for _, v in out) == 3
    assert all(labels["__error__"] == "JSONParserErr" for labels, _ in out)
    assert lines(engine, '{app="checkout"} | json | __error__=""') == []


def test_detected_level_is_structured_metadata(engine: Engine) -> None:
    out = engine.logs('{app="checkout"} | detected_level="warn"', T0, T0 + 100, 100, "forward").streams
    assert [v[0][1] for _, v in out] == [CHECKOUT[1][1]]
    assert detect_level('{"level":"error","msg":"x"}') == "error"
    assert detect_level("level=WARN msg=x") == "warn"
    assert detect_level("2026-01-01 ERROR something broke") == "error"
    assert detect_level('{"level":30,"msg":"Transaction complete."}') == "unknown"


# -- metric queries ----------------------------------------------------------------------------

def test_count_and_rate_over_time_by_service(engine: Engine) -> None:
    counts = instant(engine, 'sum by (service_name) (count_over_time({namespace="otel-demo"} |= "error" [5m]))')
    assert counts == {(("service_name", "frontend"),): 2.0}
    rates = instant(engine, 'sum by (app) (rate({namespace="otel-demo"}[100s]))')
    assert rates[(("app", "frontend-proxy"),)] == pytest.approx(5 / 100)
    total = instant(engine, 'sum(count_over_time({namespace="otel-demo"}[100s]))')
    assert total == {(): 12.0}


def test_range_query_windows_are_left_open(engine: Engine) -> None:
    result = engine.metrics('sum(count_over_time({app="frontend"}[20s]))', T0 + 10, T0 + 70, 10)
    values = result.series[()]
    assert result.steps.tolist() == [T0 + 10 + 10 * i for i in range(7)]
    # windows (t-20, t]: t=10:{10} 20:{10,20} 30:{20,30} 40:{30} 50:{} 60:{} 70:{70}
    assert [None if math.isnan(v) else v for v in values.tolist()] == [1, 2, 2, 1, None, None, 1]


def test_unwrap_aggregations(engine: Engine) -> None:
    q = 'max_over_time({app="frontend"} | json | unwrap duration(dur) [5m]) by (level)'
    assert instant(engine, q) == {(("level", "error"),): 2.0, (("level", "info"),): 0.012}
    assert instant(engine, 'sum(sum_over_time({app="frontend"} | json | unwrap bytes(size) [5m]))') == {(): 1500 + 200 + 100 + 2000}
    q50 = instant(engine, 'quantile_over_time(0.5, {app="frontend"} | json | unwrap status | __error__="" [5m]) by (app)')
    assert q50 == {(("app", "frontend"),): 350.0}
    avg = instant(engine, 'avg_over_time({app="checkout"} | logfmt | unwrap items | __error__="" [5m]) by (app)')
    assert avg == {(("app", "checkout"),): 2.0}


def test_unwrap_errors_must_be_filtered(engine: Engine) -> None:
    with pytest.raises(PipelineError, match="pipeline error: 'SampleExtractionErr'"):
        instant(engine, 'sum_over_time({app="checkout"} | logfmt | unwrap items [5m])')


def test_vector_aggregations_topk_and_binary_ops(engine: Engine) -> None:
    per_app = 'sum by (app) (count_over_time({namespace="otel-demo"}[5m]))'
    assert instant(engine, f"topk(1, {per_app})") == {(("app", "frontend-proxy"),): 5.0}
    assert instant(engine, f"bottomk(1, {per_app})") == {(("app", "checkout"),): 3.0}
    assert instant(engine, f"count({per_app})") == {(): 3.0}
    assert instant(engine, f"max({per_app})") == {(): 5.0}
    assert instant(engine, f"{per_app} > 3") == {(("app", "frontend"),): 4.0, (("app", "frontend-proxy"),): 5.0}
    assert instant(engine, f"{per_app} > bool 3")[(("app", "checkout"),)] == 0.0
    ratio = instant(engine, f'sum by (app) (count_over_time({{namespace="otel-demo"}} |= "error" [5m])) / {per_app}')
    assert ratio == {(("app", "frontend"),): 0.5}
    assert instant(engine, f"{per_app} * 2 + 1")[(("app", "checkout"),)] == 7.0
    assert instant(engine, f'{per_app} and on (app) sum by (app) (count_over_time({{app="checkout"}}[5m]))') == {(("app", "checkout"),): 3.0}
    assert engine.metrics("1 + 2 * 3", T0, T0, 0).scalar.tolist() == [7.0]  # type: ignore[union-attr]
    assert instant(engine, "vector(4)") == {(): 4.0}


def test_label_replace_and_absent(engine: Engine) -> None:
    out = instant(engine, 'label_replace(sum by (app) (count_over_time({app="checkout"}[5m])), "team", "orders-$1", "app", "(.*)")')
    assert out == {(("app", "checkout"), ("team", "orders-checkout")): 3.0}
    assert instant(engine, 'absent_over_time({app="nothing-here"}[5m])') == {(("app", "nothing-here"),): 1.0}
    assert instant(engine, 'absent_over_time({app="checkout"}[5m])') == {}


def test_metric_query_limits(engine: Engine) -> None:
    with pytest.raises(LogQLError, match="exceeded maximum resolution of 11,000 points"):
        engine.metrics('count_over_time({app="checkout"}[5m])', T0, T0 + 20_000, 1)
    with pytest.raises(LogQLError, match="not supported as an instant query"):
        engine.metrics('{app="checkout"}', T0, T0, 0)
