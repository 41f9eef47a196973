"""JVMChaos ruleData and HTTPChaos body patches: Byteman scripts as the agent reads them, what a rule
does to the JVM service's requests (the app's code as data), what a patched body does to its server,
and the experiments on the twin (alerts, failed injections)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import ShopTwin, chaos_schedule
from itbench_gym.backends.sim.app.httpbody import body_failure
from itbench_gym.backends.sim.app.jvm import MIB, heap_stress_bytes, max_heap_bytes, outcome, script_rules
from itbench_gym.backends.sim.app.spec import load_spec
from itbench_gym.backends.sim.chaos.byteman import BytemanError, Call, Literal, Return, Throw, parse_rules, unsupported
from itbench_gym.backends.sim.chaos.jvmchaos import installed_script
from itbench_gym.backends.sim.chaos.tproxy import parse_patch, selects
from itbench_gym.faults import inject_faults
from itbench_gym.faults.catalogue import FaultError
from itbench_gym.faults.operations.chaos import create_chaos_schedule
from itbench_gym.paths import envs_dir
from itbench_gym.spec import FaultRef

NS = "otel-demo"
GET_ADS = "oteldemo.AdService/GetAds"
#: ITBench library scenario 29's rule.
RETURN_NULL = "RULE modifyReturnValue\nCLASS AdService\nMETHOD getInstance\nAT ENTRY\nIF true\nDO return null\nENDRULE"


def _rule(cls: str, method: str, do: str, *, at: str = "ENTRY", cond: str = "true") -> str:
    return f"RULE r\nCLASS {cls}\nMETHOD {method}\nAT {at}\nIF {cond}\nDO {do}\nENDRULE"


def test_scripts_parse_into_rules_with_their_trigger_and_actions() -> None:
    script = ("# two rules\n" + RETURN_NULL + "\nRULE slow random\nCLASS ^oteldemo.AdService\nMETHOD getRandomAds()\n"
              "AT INVOKE java.util.Random.nextInt\nIF TRUE\nDO Thread.sleep(250); throw new IllegalStateException(\"no ads\")\nENDRULE")
    first, second = parse_rules(script)
    assert (first.name, first.target, first.method, first.location, first.actions) == (
        "modifyReturnValue", "AdService", "getInstance", "ENTRY", (Return(Literal(None)),))
    assert (second.name, second.overriding, second.signature, second.location, second.location_arg) == (
        "slow random", True, (), "INVOKE", "nextInt")
    assert second.actions[1] == Throw("IllegalStateException", (Literal("no ads"),))


@pytest.mark.parametrize(("script", "where"), [
    (RETURN_NULL.replace("\nENDRULE", ""), "rule modifyReturnValue : line 6"),
    (RETURN_NULL.replace("AT ENTRY", "AT ENTRANCE"), "rule modifyReturnValue : line 4"),
    (RETURN_NULL + "\n" + RETURN_NULL, "duplicate rule name modifyReturnValue"),
])
def test_a_script_byteman_cannot_load_is_refused_naming_rule_and_line(script: str, where: str) -> None:
    with pytest.raises(BytemanError, match=where):
        parse_rules(script)


def test_what_the_twin_does_not_evaluate_is_named() -> None:
    [rule] = parse_rules(_rule("AdService", "getAdsByCategory", "return null", cond='$1 == "books"'))
    assert unsupported(rule) == 'rule r: IF $1 == "books": the twin evaluates only IF true and IF false'
    args: dict[str, Any] = {
        "kubernetesObject": {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Schedule", "metadata": {"name": "x", "namespace": "chaos-mesh"}},
        "scheduleSpec": {"type": "JVMChaos", "jvmChaos": {"action": "ruleData", "ruleData": _rule("A", "m", "traceln(\"x\")")}}}
    with pytest.raises(FaultError, match=r"ruleData: rule r: DO traceln"):
        create_chaos_schedule(None, args)  # type: ignore[arg-type]


def test_rule_outcomes_follow_the_ad_services_code() -> None:
    code = load_spec(envs_dir() / "astronomy-shop").services["ad"].jvm
    assert code is not None
    null = outcome(code, GET_ADS, script_rules(RETURN_NULL))
    assert null is not None and null.failure is not None
    assert (null.error_ratio, null.failure.grpc_code, null.failure.details) == (1.0, "UNKNOWN", "Application error processing RPC")
    assert null.exception.startswith('java.lang.NullPointerException: Cannot invoke "oteldemo.AdService.getAdsByCategory(String)"')
    thrown = outcome(code, GET_ADS, script_rules(_rule("oteldemo.AdService", "getRandomAds", 'Thread.sleep(500); throw new IllegalStateException("x")')))
    assert thrown is not None and thrown.delays == ((0.33, 0.5),)
    assert thrown.error_ratio == pytest.approx(0.33) and thrown.exception == "java.lang.IllegalStateException: x"
    # Byteman's type check disables these: a checked exception getAds does not declare, a false condition,
    # a method the code does not have.
    for script in (_rule("AdService$AdServiceImpl", "getAds", 'throw new java.io.IOException("x")'),
                   _rule("AdService", "getInstance", "return null", cond="false"),
                   _rule("AdService", "getAdsByColour", "return null")):
        assert outcome(code, GET_ADS, script_rules(script)) is None


def test_chaos_mesh_writes_the_rule_of_latency_exception_and_return_as_byteman_meets_them() -> None:
    """Chaos Mesh turns these actions into one unconditional rule at the method's entry; the twin then
    treats it as it would the same hand-written ``ruleData``."""
    code = load_spec(envs_dir() / "astronomy-shop").services["ad"].jvm
    assert code is not None
    slow = {"action": "latency", "class": "oteldemo.AdService", "method": "getRandomAds", "latency": 800}
    script = installed_script(slow, 1_700_000_000)
    assert script is not None and "RULE oteldemo.AdService-getRandomAds-latency-1700000000\n" in script and "Thread.sleep(800L);" in script
    out = outcome(code, GET_ADS, script_rules(script))
    assert out is not None and out.delays == ((0.33, 0.8),) and out.failure is None
    thrown = outcome(code, GET_ADS, script_rules(installed_script(
        {"action": "exception", "class": "oteldemo.AdService", "method": "getInstance", "exception": 'java.lang.IllegalStateException("chaos")'}, 0) or ""))
    assert thrown is not None and thrown.error_ratio == 1.0 and thrown.exception == "java.lang.IllegalStateException: chaos"
    returned = outcome(code, GET_ADS, script_rules(installed_script(
        {"action": "return", "class": "oteldemo.AdService", "method": "getRandomAds", "returnValue": "null", "name": "nulls"}, 0) or ""))
    assert returned is not None and returned.error_ratio == pytest.approx(0.33)
    # the helpers' actions are applied by the model itself; a long literal is Byteman's, a "D" after an int is not
    assert installed_script({"action": "stress", "cpuCount": 2}, 0) is None
    assert parse_rules(_rule("A", "m", "Thread.sleep(250L)"))[0].actions[0] == Call("Thread.sleep", (Literal(250.0),))
    with pytest.raises(BytemanError, match="syntax error near 'D'"):
        parse_rules(_rule("A", "m", "Thread.sleep(250D)"))


@pytest.mark.parametrize(("spec", "refused"), [
    ({"action": "exception", "class": "oteldemo.AdService", "method": "getInstance"}, "webhook refuses it: exception not provided"),
    ({"action": "latency", "method": "getInstance", "latency": 100}, "webhook refuses it: class not provided"),
    ({"action": "stress", "cpuCount": 1, "memType": "heap"}, "inject stress on both CPU and memory is not support now"),
    ({"action": "exception", "class": "A", "method": "m", "exception": "java.lang.IllegalStateException"},
     r"the rule Chaos Mesh writes for action exception\): Byteman refuses the script"),
])
def test_a_jvm_chaos_spec_chaos_mesh_refuses_is_no_fault(spec: dict[str, Any], refused: str) -> None:
    with pytest.raises(FaultError, match=refused):
        create_chaos_schedule(None, chaos_schedule("ad-jvm", "JVMChaos", spec).args)  # type: ignore[arg-type]


def test_app_spec_rejects_jvm_code_for_an_unknown_operation(tmp_path: Path) -> None:
    text = (envs_dir() / "astronomy-shop" / "app.yaml").read_text().replace("        oteldemo.AdService/GetAds:\n          methods:",
                                                                            "        oteldemo.AdService/GetAdz:\n          methods:")
    (tmp_path / "app.yaml").write_text(text)
    with pytest.raises(ValueError, match=r"services.ad.jvm.operations.oteldemo.AdService/GetAdz: not an operation"):
        load_spec(tmp_path)


def _schedule(rule_data: str) -> FaultRef:
    return chaos_schedule("ad-jvm", "JVMChaos", {"action": "ruleData", "mode": "all", "ruleData": rule_data,
                                                 "selector": {"namespaces": [NS], "labelSelectors": {"app.kubernetes.io/component": "ad"}}})


def test_return_null_fails_every_get_ads_and_a_broken_script_fails_the_injection(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    ctx = shop_twin.context()
    inject_faults([_schedule(RETURN_NULL)], ctx)
    ctx.close()
    # the spanmetrics connector flushes once a minute: the errors reach Prometheus up to a minute late,
    # and a rate needs a window holding two flushes
    shop_twin.backend.advance(330)
    failed = 'sum(rate(traces_span_metrics_calls_total{service_name="ad",span_kind="SPAN_KIND_SERVER",status_code="STATUS_CODE_ERROR"}[2m]))'
    served = 'sum(rate(traces_span_metrics_calls_total{service_name="ad",span_kind="SPAN_KIND_SERVER"}[2m]))'
    assert shop_twin.value(failed) == pytest.approx(shop_twin.value(served)) and shop_twin.value(served) > 0
    assert "HighRequestErrorRate" in shop_twin.firing()

    shop_twin.reset()
    broken = dict(_schedule(RETURN_NULL).args["scheduleSpec"]["jvmChaos"], ruleData=RETURN_NULL.replace("DO return", "DO retrun"))
    ctx = shop_twin.context()
    ctx.create({"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "JVMChaos", "metadata": {"name": "broken", "namespace": "chaos-mesh"}, "spec": broken})
    ctx.close()
    shop_twin.backend.advance(60)
    [record] = shop_twin.store.get("JVMChaos", "chaos-mesh", "broken")["status"]["experiment"]["containerRecords"]
    assert record["phase"] == "Not Injected"
    assert record["events"][-1]["message"].startswith("rpc error: code = Unknown desc = org.jboss.byteman.rule.exception.ParseException: rule modifyReturnValue : line 6")
    assert shop_twin.value(failed) == 0


def test_an_exception_action_fails_every_get_ads_through_the_rule_chaos_mesh_writes(shop_twin: ShopTwin) -> None:
    shop_twin.reset()
    spec = {"action": "exception", "class": "oteldemo.AdService", "method": "getInstance", "exception": 'java.lang.IllegalStateException("chaos")',
            "mode": "all", "selector": {"namespaces": [NS], "labelSelectors": {"app.kubernetes.io/component": "ad"}}}
    shop_twin.inject(chaos_schedule("ad-exception", "JVMChaos", spec))
    shop_twin.backend.advance(330)
    failed = 'sum(rate(traces_span_metrics_calls_total{service_name="ad",span_kind="SPAN_KIND_SERVER",status_code="STATUS_CODE_ERROR"}[2m]))'
    served = 'sum(rate(traces_span_metrics_calls_total{service_name="ad",span_kind="SPAN_KIND_SERVER"}[2m]))'
    assert shop_twin.value(failed) == pytest.approx(shop_twin.value(served)) and shop_twin.value(served) > 0


def test_heap_stress_holds_part_of_the_old_generation_and_fails_no_request(shop_twin: ShopTwin) -> None:
    """ITBench 35's JVMChaos: the StressHelper's list keeps what fits beside its next 1.5x array."""
    assert max_heap_bytes({}, 512 * MIB, 0) == 128 * MIB  # 25 % of ad's 512Mi limit
    assert max_heap_bytes({}, 160 * MIB, 0) == 80 * MIB  # a small limit: 50 %
    assert max_heap_bytes({"JAVA_TOOL_OPTIONS": "-javaagent:/a.jar -Xmx1g"}, 512 * MIB, 0) == 1024 * MIB
    assert heap_stress_bytes(128 * MIB, 40 * MIB) == pytest.approx((128 * 2 / 3 - 40) / 2.5 * MIB)

    shop_twin.reset()
    working_set = 'sum(container_memory_working_set_bytes{namespace="otel-demo",container="ad"})'
    errors = 'sum(rate(traces_span_metrics_calls_total{service_name="ad",status_code="STATUS_CODE_ERROR"}[1m]))'
    before = shop_twin.value(working_set)
    heap = {"action": "stress", "memType": "heap", "mode": "all", "selector": {"namespaces": [NS], "labelSelectors": {"app.kubernetes.io/component": "ad"}}}
    shop_twin.inject(chaos_schedule("ad-heap", "JVMChaos", heap))
    shop_twin.backend.advance(240)
    grown = shop_twin.value(working_set) - before
    assert grown == pytest.approx(heap_stress_bytes(128 * MIB, 40 * MIB), rel=0.25)
    assert shop_twin.value(errors) == 0


# -- HTTPChaos patch of request bodies -----------------------------------------------------------

SEND = "POST /send_order_confirmation"


def test_a_body_patch_breaks_email_only_where_its_handler_dereferences() -> None:
    body = load_spec(envs_dir() / "astronomy-shop").services["email"].request_bodies[SEND]
    assert body_failure(body, parse_patch('{"email": "12345", "order": "error body"}')) == \
        "NoMethodError - undefined method 'order_id' for an instance of String"
    assert body_failure(body, {"order": None}) == "NoMethodError - undefined method 'order_id' for nil"
    assert body_failure(body, {"email": "12345", "order": {"items": []}}) is None
    assert selects({"method": "POST", "path": "/send_*"}, "POST", "/send_order_confirmation")
    assert not selects({"method": "GET", "path": "*"}, "POST", "/send_order_confirmation")
    with pytest.raises(ValueError):
        parse_patch("{'email': '12345', 'order': 'error body'}")


def _http_chaos(value: str) -> dict[str, Any]:
    return {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "HTTPChaos", "metadata": {"name": "tamper", "namespace": "chaos-mesh"},
            "spec": {"mode": "all", "target": "Request", "port": 8080, "method": "POST", "path": "*",
                     "patch": {"body": {"type": "JSON", "value": value}},
                     "selector": {"namespaces": [NS], "labelSelectors": {"app.kubernetes.io/component": "email"}}}}


@pytest.mark.parametrize(("value", "fails"), [('{"email": "12345", "order": "error body"}', True),
                                              ("{'email': '12345', 'order': 'error body'}", False)])
def test_patched_order_fails_email_and_invalid_json_leaves_the_port_to_a_dead_proxy(shop_twin: ShopTwin, value: str, fails: bool) -> None:
    """A valid patch reaches email's handler, which fails on it; an invalid one is injected as well (the
    proxy process exits on it after the redirection is set up), so nothing reaches email on its port:
    checkout's calls time out and email serves no request."""
    shop_twin.reset()
    ctx = shop_twin.context()
    ctx.create(_http_chaos(value))
    ctx.close()
    shop_twin.backend.advance(150)
    errors = shop_twin.value('sum(rate(traces_span_metrics_calls_total{service_name="email",status_code="STATUS_CODE_ERROR"}[1m]))')
    served = shop_twin.value('sum(rate(traces_span_metrics_calls_total{service_name="email",span_kind="SPAN_KIND_SERVER"}[1m]))')
    callers = shop_twin.value('sum(rate(traces_span_metrics_calls_total{service_name="checkout",span_kind="SPAN_KIND_CLIENT",'
                              'span_name="POST",status_code="STATUS_CODE_ERROR"}[1m]))')
    [record] = shop_twin.store.get("HTTPChaos", "chaos-mesh", "tamper")["status"]["experiment"]["containerRecords"]
    assert record["phase"] == "Injected"
    if fails:
        assert errors > 0 and served > 0
    else:
        assert errors == 0 and served == 0 and callers > 0
