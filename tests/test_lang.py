"""The shared sub-languages (itbench_gym.lang) against the upstream test tables they copy.

Facts are taken from: Go's src/time/time_test.go (parseDurationTests, parseDurationErrorTests,
durationTests), prometheus/common model/time_test.go (TestParseDuration, TestParseBadDuration),
Kubernetes apimachinery pkg/util/duration/duration_test.go, and Prometheus template/template_test.go
(humanizeDuration). Each row is (input, expected) as upstream states it.
"""

from __future__ import annotations

import pytest

from itbench_gym.lang import gostrings, selectors, timestamps
from itbench_gym.lang.durations import (
    DurationError,
    DurationOverflow,
    format_go_duration_ns,
    format_prometheus_duration,
    human_duration,
    humanize_duration,
    parse_go_duration_ns,
    parse_prometheus_duration,
    parse_prometheus_duration_ns,
    short_human_duration,
)

NS, US, MS, S, M, H = 1, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000
D, Y = 24 * H, 365 * 24 * H

# -- Go time.ParseDuration / Duration.String -----------------------------------------------------

GO_PARSE = [
    ("0", 0), ("5s", 5 * S), ("30s", 30 * S), ("1478s", 1478 * S),
    ("-5s", -5 * S), ("+5s", 5 * S), ("-0", 0), ("+0", 0),
    ("5.0s", 5 * S), ("5.6s", 5 * S + 600 * MS), ("5.s", 5 * S), (".5s", 500 * MS), ("1.0s", S), ("1.00s", S),
    ("1.004s", S + 4 * MS), ("1.0040s", S + 4 * MS), ("100.00100s", 100 * S + MS),
    ("10ns", 10 * NS), ("11us", 11 * US), ("12\u00b5s", 12 * US), ("12\u03bcs", 12 * US), ("13ms", 13 * MS),
    ("14s", 14 * S), ("15m", 15 * M), ("16h", 16 * H),
    ("3h30m", 3 * H + 30 * M), ("10.5s4m", 4 * M + 10 * S + 500 * MS), ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
    ("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS), ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
    ("52763797000ns", 52763797000), ("0.3333333333333333333h", 20 * M), ("9007199254740993ns", (1 << 53) + 1),
    ("9223372036854775807ns", (1 << 63) - 1), ("9223372036854775.807us", (1 << 63) - 1),
    ("9223372036s854ms775us807ns", (1 << 63) - 1), ("-9223372036854775808ns", -(1 << 63)),
    ("-9223372036854775.808us", -(1 << 63)), ("-9223372036s854ms775us808ns", -(1 << 63)),
    ("-2562047h47m16.854775808s", -(1 << 63)), ("0.100000000000000000000h", 6 * M),
    ("0.830103483285477580700h", 49 * M + 48 * S + 372539827 * NS),
]

GO_PARSE_ERRORS = [
    ("", '"\\"\\""'), ("3", '"3"'), ("-", '"-"'), ("s", '"s"'), (".", '"."'), ("-.", '"-."'), (".s", '".s"'),
    ("+.s", '"+.s"'), ("1d", '"1d"'), ("\x85\x85", '"\\xc2\\x85\\xc2\\x85"'),
    ("9223372036854775810ns", '"9223372036854775810ns"'), ("9223372036854775808ns", '"9223372036854775808ns"'),
    ("-9223372036854775809ns", '"-9223372036854775809ns"'), ("9223372036854776us", '"9223372036854776us"'),
    ("3000000h", '"3000000h"'), ("9223372036854775.808us", '"9223372036854775.808us"'),
    ("9223372036854ms775us808ns", '"9223372036854ms775us808ns"'),
]

GO_STRING = [
    ("0s", 0), ("1ns", 1), ("1.1\u00b5s", 1100), ("2.2ms", 2200 * US), ("3.3s", 3300 * MS), ("4m5s", 4 * M + 5 * S),
    ("4m5.001s", 4 * M + 5001 * MS), ("5h6m7.001s", 5 * H + 6 * M + 7001 * MS), ("8m0.000000001s", 8 * M + 1),
    ("2562047h47m16.854775807s", (1 << 63) - 1), ("-2562047h47m16.854775808s", -(1 << 63)),
]


@pytest.mark.parametrize("text,ns", GO_PARSE)
def test_go_parse_duration(text: str, ns: int) -> None:
    assert parse_go_duration_ns(text) == ns


@pytest.mark.parametrize("text,quoted", GO_PARSE_ERRORS)
def test_go_parse_duration_errors(text: str, quoted: str) -> None:
    with pytest.raises(DurationError) as err:
        parse_go_duration_ns(text)
    # Go's messages quote the input with the time package's own quoting (non-ASCII as \x bytes).
    assert str(err.value).startswith("time: ")
    if text not in ("", "3", "1d"):  # these three say "missing unit" / "unknown unit" / invalid ""
        assert quoted.strip('"').replace('\\"', '"') in str(err.value) or quoted in str(err.value)


def test_go_parse_duration_error_wording() -> None:
    for text, message in [("3", 'time: missing unit in duration "3"'), ("1d", 'time: unknown unit "d" in duration "1d"'),
                          ("", 'time: invalid duration ""'), ("\ufffd", 'time: invalid duration "\\xef\\xbf\\xbd"')]:
        with pytest.raises(DurationError, match="^" + message.replace("\\", "\\\\").replace(".", r"\.") + "$"):
            parse_go_duration_ns(text)
    with pytest.raises(DurationOverflow):
        parse_go_duration_ns("3000000h")


@pytest.mark.parametrize("text,ns", GO_STRING)
def test_go_duration_string(text: str, ns: int) -> None:
    assert format_go_duration_ns(ns) == text
    if ns > 0:
        assert format_go_duration_ns(-ns) == "-" + text


def test_go_duration_round_trip() -> None:
    for ns in ((1 << 63) - 1, -(1 << 63), *(k * 7_919 * MS for k in range(1, 200, 7))):
        assert parse_go_duration_ns(format_go_duration_ns(ns)) == ns


# -- Prometheus model.ParseDuration / Duration.String ---------------------------------------------

# Weeks and years are printed only when they divide exactly (current prometheus/common: "23d1h").
PROM = [("0", 0, "0s"), ("0w", 0, "0s"), ("0s", 0, None), ("324ms", 324 * MS, None), ("3s", 3 * S, None),
        ("5m", 5 * M, None), ("1h", H, None), ("4d", 4 * D, None), ("4d1h", 4 * D + H, None), ("14d", 14 * D, "2w"),
        ("3w", 21 * D, None), ("3w2d1h", 23 * D + H, "23d1h"), ("10y", 10 * Y, None)]


@pytest.mark.parametrize("text,ns,shown", PROM)
def test_prometheus_duration(text: str, ns: int, shown: str | None) -> None:
    assert parse_prometheus_duration_ns(text) == ns
    assert format_prometheus_duration(ns / S) == (shown or text)


@pytest.mark.parametrize("text", ["1", "1y1m1d", "-1w", "1.5d", "", "1h1h", "5 m"])
def test_prometheus_bad_durations(text: str) -> None:
    with pytest.raises(DurationError):
        parse_prometheus_duration(text)


def test_prometheus_duration_range() -> None:
    assert parse_prometheus_duration("292y") == 292 * 365 * 86400
    with pytest.raises(DurationOverflow, match="duration out of range"):
        parse_prometheus_duration("293y")


# -- Kubernetes HumanDuration / ShortHumanDuration -------------------------------------------------

HUMAN = [
    (1, "1s"), (70, "70s"), (190, "3m10s"), (70 * 60, "70m"), (47 * 3600, "47h"), (49 * 3600, "2d1h"),
    ((8 * 24 + 2) * 3600, "8d"), (367 * 86400, "367d"), ((365 * 2 * 24 + 25) * 3600, "2y1d"), ((365 * 8 * 24 + 2) * 3600, "8y"),
    (-2, "<invalid>"), (-2 + 1e-9, "0s"), (0, "0s"), (0.999, "0s"), (119.999, "119s"), (120, "2m"), (121, "2m1s"),
    (599.999, "9m59s"), (600, "10m"), (601, "10m"), (3 * 3600 - 0.001, "179m"), (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"),
    (8 * 3600 - 0.001, "7h59m"), (8 * 3600, "8h"), (8 * 3600 + 59 * 60, "8h"), (2 * 86400 - 0.001, "47h"),
    (2 * 86400, "2d"), (2 * 86400 + 3600, "2d1h"), (8 * 86400 - 0.001, "7d23h"), (8 * 86400, "8d"), (8 * 86400 + 23 * 3600, "8d"),
    (2 * 365 * 86400 - 0.001, "729d"), (2 * 365 * 86400, "2y"), (2 * 365 * 86400 + 23 * 3600, "2y"),
    (2 * 365 * 86400 + 86400, "2y1d"), (3 * 365 * 86400, "3y"), (8 * 365 * 86400 - 0.001, "7y364d"), (8 * 365 * 86400, "8y"),
    (8 * 365 * 86400 + 364 * 86400, "8y"), (9 * 365 * 86400, "9y"),
]
SHORT = [(-2, "<invalid>"), (-2 + 1e-9, "0s"), (0, "0s"), (0.999, "0s"), (1, "1s"), (1.999, "1s"), (59.999, "59s"),
         (60, "1m"), (119.999, "1m"), (3599.999, "59m"), (3600, "1h"), (7199.999, "1h"), (86399.999, "23h"),
         (86400, "1d"), (2 * 86400 - 0.001, "1d"), (365 * 86400 - 0.001, "364d"), (365 * 86400, "1y"),
         (2 * 365 * 86400 - 0.001, "1y"), (2 * 365 * 86400, "2y")]


@pytest.mark.parametrize("seconds,text", HUMAN)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


@pytest.mark.parametrize("seconds,text", SHORT)
def test_short_human_duration(seconds: float, text: str) -> None:
    assert short_human_duration(seconds) == text


# -- Prometheus humanizeDuration -------------------------------------------------------------------

HUMANIZE = [(0, "0s"), (1, "1s"), (60, "1m 0s"), (3600, "1h 0m 0s"), (86400, "1d 0h 0m 0s"), (90000, "1d 1h 0m 0s"),
            (-(86400 * 2 + 3600 * 3 + 60 * 4 + 5), "-2d 3h 4m 5s"), (899.99, "14m 59s"), (0.1, "100ms"),
            (0.0001, "100us"), (0.12345, "123.5ms"), (60.1, "1m 0s"), (60.5, "1m 0s"), (1.2345, "1.234s"),
            (12.345, "12.35s"), (-1, "-1s"), (1234567, "14d 6h 56m 7s"), (float("inf"), "+Inf"),
            (float("-inf"), "-Inf"), (float("nan"), "NaN")]


@pytest.mark.parametrize("value,text", HUMANIZE)
def test_humanize_duration(value: float, text: str) -> None:
    assert humanize_duration(value) == text


# -- RFC 3339 --------------------------------------------------------------------------------------

T = 1767225810.12  # 2026-01-01T00:03:30.12Z


def test_rfc3339_precisions() -> None:
    assert timestamps.rfc3339(T) == "2026-01-01T00:03:30Z"
    assert timestamps.rfc3339(T, 3) == "2026-01-01T00:03:30.120Z"
    assert timestamps.rfc3339(T, 9) == "2026-01-01T00:03:30.120000000Z"
    assert timestamps.rfc3339_nano(T) == "2026-01-01T00:03:30.12Z"
    assert timestamps.rfc3339_nano(1767225810.0) == "2026-01-01T00:03:30Z"
    assert timestamps.rfc3339(1.3, 3) == "1970-01-01T00:00:01.300Z"  # nearest ns first, then Go's truncation
    assert timestamps.rfc3339(5.9999999999, 9) == "1970-01-01T00:00:06.000000000Z"  # never ten fraction digits
    assert timestamps.rfc3339(1.0019, 3) == "1970-01-01T00:00:01.001Z"
    assert timestamps.rfc3339_ns(1767225810_123456789, 3) == "2026-01-01T00:03:30.123Z"
    assert timestamps.rfc3339(-1) == "1969-12-31T23:59:59Z"


@pytest.mark.parametrize("text,seconds", [
    ("2026-01-01T00:03:30Z", 1767225810.0), ("2026-01-01T00:03:30.12Z", T),
    ("2026-01-01T01:03:30.12+01:00", T), ("2025-12-31T23:03:30.12-01:00", T),
    ("2026-01-01T00:03:30.120000000999Z", T), ("1970-01-01T00:00:00z", 0.0),
])
def test_parse_rfc3339(text: str, seconds: float) -> None:
    assert timestamps.parse_rfc3339(text) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize("text", ["2026-01-01", "2026-01-01T00:03:30", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
                                  "2026-01-01T24:00:00Z", "2000-01-01T00:00:00+24:00", "2000-01-01T00:00:00+00:60",
                                  "2000-01-01T00:00:00,000Z", "x"])
def test_parse_rfc3339_refuses(text: str) -> None:
    with pytest.raises(timestamps.TimestampError):
        timestamps.parse_rfc3339(text)


def test_rfc3339_round_trip() -> None:
    for t in (0.0, 1.5, 1767225810.25, 1767225810.999, 4102444800.0):
        assert timestamps.parse_rfc3339(timestamps.rfc3339_nano(t)) == pytest.approx(t, abs=1e-6)
        assert timestamps.parse_rfc3339(timestamps.rfc3339(t, 9)) == pytest.approx(t, abs=1e-6)


def test_unix_times() -> None:
    assert timestamps.parse_prometheus_time("1767225810.12") == T
    assert timestamps.parse_prometheus_time("2026-01-01T00:03:30.12Z") == pytest.approx(T)
    # Loki: a point means seconds; an integer of up to 10 characters is seconds, a longer one nanoseconds.
    assert timestamps.parse_loki_time("1767225810.12") == T
    assert timestamps.parse_loki_time("1767225810") == 1767225810.0
    assert timestamps.parse_loki_time("1767225810120000000") == pytest.approx(T)
    assert timestamps.parse_loki_time("2026-01-01T00:03:30.12Z") == pytest.approx(T)
    with pytest.raises(timestamps.TimestampError):
        timestamps.parse_loki_time("99999999999999999999")


# -- Go string literals ----------------------------------------------------------------------------

@pytest.mark.parametrize("literal,value", [
    ('"abc"', "abc"), ("`a\\nb`", "a\\nb"), ("'a\"b'", 'a"b'), ('"a\\tb\\n"', "a\tb\n"), ('"\\x41\\101"', "AA"),
    ('"\\u00e9\\U0001F600"', "\u00e9\U0001f600"), ('"\\xc3\\xa9"', "\u00e9"), ('"\\""', '"'), ("'\\''", "'"),
    ('"\\\\d+"', "\\d+"), ('"\\a\\b\\f\\v\\r"', "\a\b\f\v\r"), ('"\\xff"', "\ufffd"), ("`a\rb`", "ab"),
])
def test_unquote(literal: str, value: str) -> None:
    assert gostrings.unquote(literal) == value


@pytest.mark.parametrize("literal", ['"\\q"', '"\\x4"', '"\\400"', '"\\ud800"', "\"\\'\"", "'\\\"'", '"a"b"', '"a\nb"',
                                     '"abc', "abc", '"\\U00110000"', "`a`b`"])
def test_unquote_refuses(literal: str) -> None:
    with pytest.raises(gostrings.UnquoteError, match="invalid syntax"):
        gostrings.unquote(literal)


# -- label selectors -------------------------------------------------------------------------------

def test_missing_label_matches_only_negative_requirements() -> None:
    """apimachinery labels.Requirement: NotIn, != and DoesNotExist match an object without the label."""
    unlabeled: dict[str, str] = {}
    for op, expected in [("In", False), ("NotIn", True), ("Exists", False), ("DoesNotExist", True)]:
        sel = {"matchExpressions": [{"key": "tier", "operator": op, "values": ["web"] if op.endswith("In") else []}]}
        assert selectors.selector_matches(sel, unlabeled) is expected, op
    assert not selectors.selector_matches({"matchLabels": {"tier": "web"}}, unlabeled)
    assert selectors.Requirement("tier", "!=", ("web",)).matches(unlabeled)


def test_selector_forms() -> None:
    labels = {"app": "cart", "tier": "web"}
    assert selectors.selector_matches({}, labels) and not selectors.selector_matches(None, labels)
    assert selectors.selector_matches({"matchLabels": {"app": "cart"},
                                       "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}, labels)
    assert not selectors.selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["web"]}]}, labels)
    with pytest.raises(selectors.SelectorError, match="not a valid label selector operator"):
        selectors.selector_from_dict({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]})
    assert selectors.chaos_label_selector({"labelSelectors": {"app": "cart"}}).matches(labels)
    node = {"metadata": {"name": "n1", "labels": {"cpu": "8"}}}
    assert selectors.node_selector_term_matches({"matchExpressions": [{"key": "cpu", "operator": "Gt", "values": ["4"]}]}, node)
    assert selectors.node_selector_term_matches({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, node)
    assert not selectors.node_selector_term_matches({}, node)


_LABELED = [("cart-1", {"app": "cart", "tier": "web"}), ("ad-1", {"app": "ad", "tier": "web"}), ("bare", None),
            ("cart-2", {"app": "cart", "tier": "api"}), ("ad-2", {"app": "ad"})]


@pytest.mark.parametrize("match", [{}, {"app": "cart"}, {"tier": "web"}, {"app": "cart", "tier": "web"}, {"app": "cart", "zone": "a"},
                                   {"app": "nope"}, {"app": 1}])
def test_label_index_answers_as_a_scan_in_item_order(match: dict[str, object]) -> None:
    """The index gives what matching every item's labels gives (``matchLabels`` semantics), in the items' order."""
    expected = [name for name, labels in _LABELED if selectors.selector_matches({"matchLabels": match}, labels)
                and all(isinstance(v, str) for v in match.values())]
    index = selectors.LabelIndex((name, name, labels) for name, labels in _LABELED)
    assert index.matching(match) == expected
    assert index.scan(lambda labels: labels.get("app") == "ad") == ["ad-1", "ad-2"]


def test_label_index_keeps_a_dicts_order_through_updates() -> None:
    """Replacing a key's item keeps its place (also when its labels change); a removed key that comes back goes last."""
    index = selectors.LabelIndex((name, name, labels) for name, labels in _LABELED)
    index.put("ad-2", "ad-2 relabelled", {"app": "cart", "tier": "web"})
    index.put("cart-1", "cart-1 again", {"app": "cart", "tier": "web"})
    assert index.matching({"app": "cart"}) == ["cart-1 again", "cart-2", "ad-2 relabelled"]
    index.remove("cart-1")
    index.remove("gone")
    index.put("cart-1", "cart-1 back", {"app": "cart"})
    assert index.matching({"app": "cart"}) == ["cart-2", "ad-2 relabelled", "cart-1 back"]
    assert index.matching({"tier": "web"}) == ["ad-1", "ad-2 relabelled"]
    assert index.matching({"app": "ad"}) == ["ad-1"]


def test_selector_index_finds_the_selectors_a_label_set_satisfies() -> None:
    """Services by selector: which select a pod (before or after a change), in the Services' order; an empty selector selects nothing."""
    index = selectors.SelectorIndex([("web", {"tier": "web"}), ("none", {}), ("cart", {"app": "cart"}), ("missing", None),
                                     ("cart-web", {"app": "cart", "tier": "web"}), ("cart-api", {"app": "cart", "tier": "api"})])
    assert index.selecting({"app": "cart", "tier": "web"}) == ["web", "cart", "cart-web"]
    assert index.selecting({"app": "cart", "tier": "api"}, {"app": "ad", "tier": "web"}) == ["web", "cart", "cart-api"]
    assert index.selecting({"app": "ad"}, None) == []
