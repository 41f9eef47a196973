"""The shared Go ``text/template`` engine, as Prometheus' alert templates and Loki's ``line_format`` use it.

Prometheus cases follow the behaviour its ``template/template_test.go`` pins down; Loki cases the
behaviour of ``line_format``/``label_format``.
"""

from __future__ import annotations

import math

import pytest

from itbench_gym.backends.sim.alerting import FUNCTIONS as PROM_FUNCTIONS
from itbench_gym.backends.sim.alerting import RuleManager, expand_template
from itbench_gym.backends.sim.loki.limits import MAX_TEMPLATE_DEPTH, MAX_TEMPLATE_OUTPUT
from itbench_gym.backends.sim.loki.template import FUNCTIONS as LOKI_FUNCTIONS
from itbench_gym.backends.sim.loki.template import LIMITS as LOKI_LIMITS
from itbench_gym.backends.sim.loki.template import Template as LokiTemplate
from itbench_gym.backends.sim.promql import Engine
from itbench_gym.backends.sim.tsdb import TSDB
from itbench_gym.lang import gotemplate
from itbench_gym.lang.gofloat import format_g
from itbench_gym.lang.gotemplate import Limits, Template, TemplateError, strings_title

T0 = 1_700_000_000.0


def prom(text: str, value: float = 0.0, labels: dict[str, str] | None = None) -> str:
    return expand_template(text, labels or {}, value, {"cluster": "c1"}, name="test")


# -- the engine ------------------------------------------------------------------------------

def test_variables_fields_and_scopes() -> None:
    funcs = gotemplate.builtins(1000)
    dot = {"Labels": {"a": "x", "b": "y"}, "Value": 2.5}
    assert Template("{{ $l := .Labels }}{{ $l.a }}-{{ .Labels.b }}-{{ $.Value }}", funcs).render(dot) == "x-y-2.5"
    assert Template("{{ $v := 1 }}{{ if true }}{{ $v = 2 }}{{ $w := 3 }}{{ $v }}{{ end }}{{ $v }}", funcs).render({}) == "22"
    with pytest.raises(TemplateError, match='template: t:1: undefined variable "\\$w"'):
        Template("{{ if true }}{{ $w := 3 }}{{ end }}{{ $w }}", funcs, name="t")
    with pytest.raises(TemplateError, match='template: t:2: function "nope" not defined'):
        Template("ok\n{{ nope }}", funcs, name="t")
    assert Template("{{ .missing }}|{{ .Labels.missing }}", funcs).render(dot) == "|"
    with pytest.raises(TemplateError, match="can't evaluate field x in type float"):
        Template("{{ .Value.x }}", funcs).render(dot)
    assert Template("{{- /* c */ -}}  {{ index .Labels \"a\" }} {{ len .Labels }} {{ print 1 \"a\" }}", funcs).render(dot) == "x 2 1 a"


def test_error_policy_and_per_render_functions() -> None:
    funcs: dict[str, gotemplate.Function] = {**gotemplate.builtins(1000), "f": lambda x: float(x), "line": lambda: ""}
    with pytest.raises(TemplateError, match="error calling f: could not convert"):
        Template('{{ f "x" }}', funcs).render({})
    assert Template('[{{ f "x" }}]', funcs, lenient_calls=True).render({}) == "[]"
    assert Template("{{ line }}", funcs).render({}, {"line": lambda: "now"}) == "now"


def test_limits_are_the_callers() -> None:
    small = Limits(max_output=10, max_depth=3)
    funcs = gotemplate.builtins(small.max_output)
    with pytest.raises(TemplateError, match="the template output would exceed 10 characters"):
        Template("{{ 12345 }}{{ 678901 }}", funcs, limits=small).render({})
    with pytest.raises(TemplateError, match="printf output would exceed 10"):
        Template('{{ printf "%20s" "a" }}', funcs, limits=small).render({})
    with pytest.raises(TemplateError, match="max expression depth exceeded"):
        Template("{{ ((((1)))) }}", funcs, limits=small)
    assert LOKI_LIMITS == Limits(max_output=MAX_TEMPLATE_OUTPUT, max_depth=MAX_TEMPLATE_DEPTH) == Limits(262_144, 50)


@pytest.mark.parametrize(("value", "text"), [
    (0.5, "0.5"), (3.0, "3"), (100000.0, "100000"), (1e6, "1e+06"), (1234567.0, "1.234567e+06"),
    (1e-5, "1e-05"), (0.0001, "0.0001"), (-2.5e-7, "-2.5e-07"), (math.inf, "+Inf"), (math.nan, "NaN"),
])
def test_floats_print_as_go_prints_float64(value: float, text: str) -> None:
    assert format_g(value) == text


def test_strings_title_is_go_strings_title() -> None:
    assert strings_title("aa bb CC") == "Aa Bb CC"
    assert strings_title("hELLO wORLD_x-y") == "HELLO WORLD_x-Y"


# -- Prometheus ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "output"), [
    ("plain text", "plain text"),
    ("{{ 1 }}", "1"),
    ('{{ "<b>" }}', "<b>"),
    ('{{ "<b>" | safeHtml }}', "<b>"),
    ('{{ reReplaceAll "(a)b" "x$1" "ab" }}', "xa"),
    ("{{ humanize 0.0 }}:{{ humanize 1.0 }}:{{ humanize 1234567.0 }}:{{ humanize .12 }}", "0:1:1.235M:120m"),
    ('{{ humanize "1234567.0" }}:{{ humanize ".12" }}', "1.235M:120m"),
    ("{{ humanize -1 }}:{{ humanize 9223372036854775807 }}", "-1:9.223E"),
    ("{{ humanize1024 0.0 }}:{{ humanize1024 1048576.0 }}:{{ humanize1024 .12 }}:{{ humanize1024 1234567 }}", "0:1Mi:0.12:1.177Mi"),
    ("{{ humanizeDuration 0 }}:{{ humanizeDuration 60 }}:{{ humanizeDuration 86400 }}:{{ humanizeDuration 899.99 }}",
     "0s:1m 0s:1d 0h 0m 0s:14m 59s"),
    ('{{ humanizeDuration .1 }}:{{ humanizeDuration ".0001" }}:{{ humanizeDuration 12.345 }}', "100ms:100us:12.35s"),
    ('{{ humanize "+Inf" }}:{{ humanize1024 "-Inf" }}:{{ humanizeDuration "NaN" }}:{{ humanizeTimestamp "NaN" }}', "+Inf:-Inf:NaN:NaN"),
    ("{{ -0.22222 | humanizePercentage }}:{{ 0.0 | humanizePercentage }}:{{ 1234567 | humanizePercentage }}", "-22.22%:0%:1.235e+08%"),
    ("{{ 1435065584.128 | humanizeTimestamp }}", "2015-06-23 13:19:44.128 +0000 UTC"),
    ("{{ -1 | humanizeTimestamp }}:{{ 9223372036 | humanizeTimestamp }}", "1969-12-31 23:59:59 +0000 UTC:2262-04-11 23:47:16 +0000 UTC"),
    ('{{ "aa bb CC" | title }}:{{ "aa bb CC" | toUpper }}:{{ "aA bB CC" | toLower }}', "Aa Bb CC:AA BB CC:aa bb cc"),
    ('{{ match "a+" "aa" }} {{ match "a+" "b" }}', "true false"),
    ('{{ graphLink "up" }} {{ tableLink "up" }}', "/graph?g0.expr=up&g0.tab=0 /graph?g0.expr=up&g0.tab=1"),
    ('{{ printf "%0.2f" (parseDuration "1h2m10ms") }}', "3720.01"),
    ('{{ "foo.example.com:12345" | stripPort }} {{ "[2001:0DB8::1]:12345" | stripPort }} {{ "[2001:0DB8::1]::12345" | stripPort }}',
     "foo.example.com 2001:0DB8::1 [2001:0DB8::1]::12345"),
    ('{{ "foo.example.com:12345" | stripDomain }} {{ "192.0.2.1:12345" | stripDomain }} {{ "2001:0DB8::1" | stripDomain }}',
     "foo:12345 192.0.2.1:12345 2001:0DB8::1"),
    ('{{ index (args 1 "2") "arg1" }}', "2"),
])
def test_prometheus_expansion(text: str, output: str) -> None:
    assert prom(text) == output


def test_prometheus_data_and_errors() -> None:
    labels = {"job": "api", "instance": "a:9090"}
    assert prom("{{ $labels.job }} {{ .Labels.instance }} {{ $externalLabels.cluster }} {{ $value }} {{ .Value }}", 0.5, labels) \
        == "api a:9090 c1 0.5 0.5"
    assert prom("{{ $labels }}", 1, {"b": "2", "a": "1"}) == "map[a:1 b:2]"
    assert prom("{{ $value }}", 1234567.0) == "1.234567e+06"  # Go's %v, hence humanize in real rules
    assert prom("{{ $x := $labels.job }}{{ if eq $x \"api\" }}yes{{ else }}no{{ end }}", 0, labels) == "yes"
    assert prom("{{") == "<error expanding template: error parsing template test: template: test:1: unclosed action>"
    assert prom("{{ $nope }}") == ('<error expanding template: error parsing template test: '
                                   'template: test:1: undefined variable "$nope">')
    assert prom('{{ humanize "one" }}') == ('<error expanding template: error executing template test: template: test:1: '
                                            'error calling humanize: strconv.ParseFloat: parsing "one": invalid syntax>')
    assert prom("{{ -9223372036854775808 | humanizeTimestamp }}").endswith(
        "error calling humanizeTimestamp: -9.223372036854776e+18 cannot be represented as a nanoseconds timestamp "
        "since it overflows int64>")
    assert prom('{{ reReplaceAll "(" "" "x" }}').startswith("<error expanding template: error executing template test: ")
    assert {"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "title", "toUpper",
            "toLower", "printf", "reReplaceAll", "match", "label", "value", "first", "args", "safeHtml", "query"} <= set(PROM_FUNCTIONS)


def test_alert_templates_query_the_twin_at_evaluation_time() -> None:
    db = TSDB()
    for t in range(0, 300, 15):
        db.append(t, [({"__name__": "up", "job": "api", "instance": "b"}, 0.0), ({"__name__": "up", "job": "api", "instance": "a"}, 1.0)])
    rules = {"groups": [{"name": "g", "interval": "15s", "rules": [{
        "alert": "Down", "expr": "up == 0",
        "labels": {"who": "{{ $labels.instance | toUpper }}"},
        "annotations": {
            "summary": '{{ query "up" | sortByLabel "instance" | first | label "instance" }} is up: '
                       '{{ query "sum(up)" | first | value }}; {{ query "nosuch" | first }}',
            "when": "{{ now | humanizeTimestamp }}",
        },
    }]}]}
    rm = RuleManager(rules, Engine(db), start=0)
    rm.evaluate_until(60)
    (alert,) = rm.alerts()
    assert alert.labels["who"] == "B"
    assert alert.annotations["summary"] == ("<error expanding template: error executing template __alert_Down: template: "
                                            "__alert_Down:1: error calling first: first() called on vector with no elements>")
    assert alert.annotations["when"] == "1970-01-01 00:01:00 +0000 UTC"
    ok = expand_template('{{ query "up" | sortByLabel "instance" | first | label "instance" }}', {}, 0,
                         query=lambda q: [{"Labels": {"instance": "z"}, "Value": 1.0}, {"Labels": {"instance": "a"}, "Value": 0.0}])
    assert ok == "a"


# -- Loki ------------------------------------------------------------------------------------

def test_loki_templates_on_the_shared_engine() -> None:
    labels = {"app": "cart", "status": "500"}
    assert LokiTemplate("{{ .app | ToUpper }} {{ __line__ }} {{ .missing }}").render(labels, "GET /", T0) == "CART GET / "
    assert LokiTemplate("{{ $a := .app }}{{ $a }}/{{ $.status }}").render(labels, "", T0) == "cart/500"
    assert LokiTemplate("{{ __timestamp__ | unixEpoch }}").render({}, "", T0) == str(int(T0))
    assert LokiTemplate('{{ if eq .status "500" }}bad{{ else }}ok{{ end }} {{ title "hELLO" }}').render(labels, "", T0) == "bad HELLO"
    # A function that rejects its arguments yields "" in Loki, as before; size limits still fail the render.
    assert LokiTemplate("[{{ ToUpper }}]").render({}, "", T0) == "[]"
    with pytest.raises(TemplateError, match="template: line:1: repeat output would exceed 262144 characters"):
        LokiTemplate('{{ repeat 300000 "x" }}').render({}, "", T0)
    assert {"__line__", "__timestamp__", "printf", "eq", "and", "regexReplaceAll", "repeat"} <= set(LOKI_FUNCTIONS)
