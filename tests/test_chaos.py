"""Chaos Mesh semantics that do not need the shop: durations, cron, pod selection, what counts as
running, IOChaos arithmetic and the fault catalogue entry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import SHARED
from itbench_gym.backends.sim.chaos import is_running
from itbench_gym.backends.sim.chaos.io import DiskIO, io_fault
from itbench_gym.backends.sim.chaos.kinds import parse_duration
from itbench_gym.backends.sim.chaos.schedule import Cron
from itbench_gym.backends.sim.chaos.selection import SelectionError, choose, pod_matches
from itbench_gym.backends.sim.chaos.tproxy import HttpFaults, WireRequest, http_faults, wildmatch
from itbench_gym.faults.catalogue import FaultError, validate_fault_args
from itbench_gym.faults.operations.chaos import create_chaos_schedule
from itbench_gym.lang.timestamps import rfc3339

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SCENARIOS = SHARED / "itbench" / "scenarios"


def _pod(name: str, ns: str = "otel-demo", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def _exp(kind: str = "NetworkChaos", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": kind,
            "metadata": {"name": "x", "namespace": "chaos-mesh", "creationTimestamp": rfc3339(T0)}, "spec": spec}


@pytest.mark.parametrize("text,seconds", [("55s", 55), ("1m30s", 90), ("1.5h", 5400), ("200ms", 0.2), ("0", 0)])
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "1d", "abc", "5 s"])
def test_bad_durations_say_what_was_wrong(text: str) -> None:
    # Go's own wording (time.ParseDuration): invalid duration, missing unit, unknown unit "d"
    with pytest.raises(ValueError, match=r'time: (invalid duration|missing unit in duration|unknown unit ".*" in duration) "'):
        parse_duration(text)


def test_cron_every_and_standard_fields() -> None:
    every = Cron("@every 1m")
    assert every.next_after(T0 + 10) == T0 + 70
    assert every.last_due(T0, T0 + 185) == T0 + 180
    minute = Cron("*/5 * * * *")
    assert minute.next_after(T0 + 1) == T0 + 300
    assert minute.last_due(T0, T0 + 299) is None
    with pytest.raises(ValueError, match=r"end of range \(61\) above maximum \(59\): 61"):
        Cron("61 * * * *")
    assert Cron("@every -1m").next_after(T0) == T0 + 1  # robfig's Every: at least a second
    assert Cron("*/20 * * * * *").next_after(T0 + 1) == T0 + 20  # Chaos Mesh's parser takes seconds too
    with pytest.raises(ValueError, match=r"expected 5 to 6 fields, found 4: \[1 2 3 4\]"):
        Cron("1 2 3 4")


def test_selector_defaults_to_the_experiments_namespace_and_checks_every_criterion() -> None:
    pod = _pod("cart-1", **{"app": "cart"})
    assert pod_matches({"labelSelectors": {"app": "cart"}}, pod, "otel-demo")
    assert not pod_matches({"labelSelectors": {"app": "cart"}}, pod, "chaos-mesh")
    assert pod_matches({"namespaces": ["otel-demo"], "podPhaseSelectors": ["Running"]}, pod, "chaos-mesh")
    assert not pod_matches({"namespaces": ["otel-demo"], "podPhaseSelectors": ["Pending"]}, pod, "chaos-mesh")
    assert pod_matches({"pods": {"otel-demo": ["cart-1"]}}, pod, "chaos-mesh")
    assert not pod_matches({"namespaces": ["otel-demo"], "nodes": ["n2"]}, pod, "chaos-mesh")


def test_modes_pick_reproducible_counts() -> None:
    pods = [_pod(f"p{i}") for i in range(10)]
    assert len(choose(pods, "all", None, 0, "u")) == 10
    assert len(choose(pods, "one", None, 0, "u")) == 1
    assert len(choose(pods, "fixed", "3", 0, "u")) == 3
    assert len(choose(pods, "fixed-percent", "50", 0, "u")) == 5
    assert len(choose(pods, "random-max-percent", "30", 0, "u")) <= 3
    assert choose(pods, "fixed", "3", 7, "u") == choose(list(reversed(pods)), "fixed", "3", 7, "u")
    with pytest.raises(SelectionError, match="spec.mode"):
        choose(pods, "some", None, 0, "u")
    with pytest.raises(SelectionError, match="spec.value"):
        choose(pods, "fixed", "many", 0, "u")


def test_running_means_injected_now() -> None:
    exp = _exp(duration="55s")
    assert is_running(exp, T0 + 54) and not is_running(exp, T0 + 55)
    assert is_running(_exp(), T0 + 10**6)
    paused = _exp()
    paused["metadata"]["annotations"] = {"experiment.chaos-mesh.org/pause": "true"}
    assert not is_running(paused, T0)
    stopped = _exp()
    stopped["status"] = {"experiment": {"desiredPhase": "Stop"}}
    assert not is_running(stopped, T0)
    assert not is_running(_exp("Schedule"), T0)


def _into(exp: dict[str, Any], *pods: dict[str, Any]) -> dict[str, Any]:
    """``exp`` as chaos-daemon left it after injecting ``pods`` (its records)."""
    records = [{"id": f"{p['metadata']['namespace']}/{p['metadata']['name']}", "selectorKey": ".", "phase": "Injected"} for p in pods]
    return {**exp, "status": {"experiment": {"desiredPhase": "Run", "containerRecords": records}}}


def test_io_fault_needs_the_path_and_scales_with_percent() -> None:
    pg = _pod("postgresql-1", **{"app": "pg"})
    disk = DiskIO(("/var/lib/postgresql/data",), 2)
    sel = {"namespaces": ["otel-demo"], "labelSelectors": {"app": "pg"}}
    latency = _exp("IOChaos", action="latency", selector=sel, volumePath="/var/lib/postgresql", delay="100ms", percent=50)
    slow = io_fault([_into(latency, pg)], pg, disk)
    assert slow is not None and slow.delay_s == pytest.approx(0.1) and slow.error_ratio == 0
    # a pod the experiment's records do not hold (created after it started) is left alone, selector or not
    assert io_fault([_into(latency, _pod("postgresql-0", app="pg"))], pg, disk) is None
    assert io_fault([_into(_exp("IOChaos", action="latency", selector=sel, volumePath="/var/log", delay="1s"), pg)], pg, disk) is None
    failing = io_fault([_into(_exp("IOChaos", action="fault", selector=sel, volumePath="/var/lib/postgresql/data", errno=5, percent=50), pg)],
                       pg, disk)
    assert failing is not None and failing.error_ratio == pytest.approx(0.75)
    assert "Input/output error" in failing.message
    assert io_fault([_into(_exp("IOChaos", action="latency", selector=sel, volumePath="/", delay="1s"), pg)], pg, None) is None


def _itbench_args() -> list[dict[str, Any]]:
    out = []
    for f in sorted(SCENARIOS.glob("*.json")):
        for d in json.loads(f.read_text()).get("disruptions", []):
            out += [i["args"] for i in d.get("injections", []) if i.get("id") == "scheduled-chaos-mesh-experiment"]
    return out


@pytest.mark.skipif(not SCENARIOS.is_dir(), reason=f"ITBench scenarios not present at {SCENARIOS}")
def test_every_itbench_scheduled_experiment_validates() -> None:
    args = _itbench_args()
    assert args
    assert all(validate_fault_args("scheduled-chaos-mesh-experiment", a) is None for a in args)


def test_catalogue_entry_rejects_a_wrong_kind_with_its_path() -> None:
    bad = {"kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "PodChaos",
                                "metadata": {"name": "x", "namespace": "chaos-mesh"}},
           "scheduleSpec": {"type": "PodChaos", "podChaos": {}}}
    where, message = validate_fault_args("scheduled-chaos-mesh-experiment", bad) or ("", "")
    assert where == "args.kubernetesObject.kind" and "Schedule" in message


@pytest.mark.parametrize(("spec", "refused"), [
    ({}, "port 0 is not supported"),
    ({"port": 8080, "method": "FETCH"}, "method FETCH is not supported"),
    ({"port": 8080, "delay": "2 seconds"}, "invalid duration 2 seconds"),
])
def test_an_http_chaos_spec_chaos_mesh_refuses_is_no_fault(spec: dict[str, Any], refused: str) -> None:
    """Chaos Mesh's webhook refuses an HTTPChaos without a positive port, with a method net/http does not
    name or a delay Go cannot parse: the injection fails, naming the field and the webhook's words."""
    args = {"kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": "x", "namespace": "chaos-mesh"}},
            "scheduleSpec": {"type": "HTTPChaos", "httpChaos": {"mode": "all", "target": "Request", "abort": True,
                                                               "selector": {"labelSelectors": {"app.kubernetes.io/component": "email"}}, **spec}}}
    with pytest.raises(FaultError, match=f"args.scheduleSpec.httpChaos: Chaos Mesh's admission webhook refuses it: {refused}"):
        create_chaos_schedule(None, args)  # type: ignore[arg-type]


def test_http_chaos_paths_match_as_chaos_tproxys_wildcards() -> None:
    """``*`` runs over slashes, ``?`` is one character, brackets are literal (the wildmatch crate)."""
    assert wildmatch("/api/*", "/api/products/OLJCESPC7Z") and wildmatch("*", "/")
    assert wildmatch("/src?", "/src/") and not wildmatch("/src?", "/src")
    assert wildmatch("/[ab]", "/[ab]") and not wildmatch("/[ab]", "/a")
    assert not wildmatch("/api", "/api/")


def test_http_chaos_acts_on_the_share_of_requests_its_selectors_pick() -> None:
    """A route's concrete paths are equally likely: a rule on one product's path resets a tenth of the
    browse requests and delays none of the rest; a JSON body patch ends a request whose body is no JSON
    (a GET's, a gRPC message) as an abort does, and leaves a JSON body to the server."""
    browse = WireRequest("GET", tuple(f"/api/products/P{i}" for i in range(10)), json_body=False)
    assert http_faults([{"path": "/api/products/P3", "abort": True}], browse) == HttpFaults(aborted=0.1)
    assert http_faults([{"method": "POST", "abort": True}], browse) == HttpFaults()
    slow = http_faults([{"path": "/api/products/P[0-4]", "delay": "1s"}, {"path": "/api/products/P?", "delay": "500ms"}], browse)
    assert slow == HttpFaults(delay_s=0.5)  # the bracket is literal: only the second rule selects
    patch = {"method": "POST", "patch": {"body": {"type": "JSON", "value": '{"email": "x"}'}}}
    assert http_faults([{**patch, "method": "GET"}], browse) == HttpFaults(aborted=1.0)
    assert http_faults([patch], WireRequest("POST", ("/send_order_confirmation",), json_body=True)) == HttpFaults()
    assert http_faults([patch], WireRequest("POST", ("/oteldemo.CartService/AddItem",), json_body=False)) == HttpFaults(aborted=1.0)
    mixed = http_faults([{"path": "/api/products/P[0-9]", "abort": True}, {"path": "/api/products/P1*", "delay": "1s"}, {"path": "*P2", "replace": {"path": "/elsewhere"}}], browse)
    assert (mixed.aborted, mixed.delay_s, mixed.broken) == (0.0, 0.1, 0.1) and mixed.delay_var_s2 == pytest.approx(0.09)


def test_a_response_rule_acts_on_the_answer_after_the_server_served() -> None:
    """An abort of responses resets answers the server gave (``lost``); an abort of requests ends them
    before, and wins; a delay of responses adds to the request's."""
    send = WireRequest("POST", ("/getquote",), json_body=True)
    assert http_faults([{"target": "Response", "abort": True}], send) == HttpFaults(lost=1.0)
    assert http_faults([{"target": "Response", "abort": True}, {"target": "Request", "abort": True}], send) == HttpFaults(aborted=1.0)
    assert http_faults([{"target": "Response", "delay": "1s"}, {"target": "Request", "delay": "2s"}], send) == HttpFaults(delay_s=3.0)
    assert http_faults([{"target": "Response", "abort": True, "method": "GET"}], send) == HttpFaults()


@pytest.mark.parametrize(("rule", "broken"), [
    ({"replace": {"path": "/elsewhere"}}, True),
    ({"replace": {"method": "DELETE"}}, True),
    ({"replace": {"headers": {"X-Chaos": "1"}, "queries": {"a": "b"}}}, False),
    ({"patch": {"headers": [["X-Chaos", "1"]]}}, False),
    ({"target": "Response", "replace": {"code": 503}}, True),
    ({"target": "Response", "replace": {"code": 200}}, False),
    ({"target": "Response", "replace": {"body": "eyJ4IjogMX0="}}, True),
    ({"target": "Response", "patch": {"body": {"type": "JSON", "value": "{}"}}}, True),
])
def test_what_makes_an_answer_wrong(rule: dict[str, Any], broken: bool) -> None:
    """A request sent elsewhere, or an error status or another body in the answer, breaks it; added
    headers, queries or a success status do not."""
    faults = http_faults([rule], WireRequest("POST", ("/getquote",), json_body=True))
    assert faults == HttpFaults(broken=1.0 if broken else 0.0)
