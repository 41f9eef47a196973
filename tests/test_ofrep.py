"""flagd's OFREP answers (``app/ofrep.py``) for flag files the shop does not ship, and the Go JSON they are written in."""

from __future__ import annotations

import json

import pytest

from itbench_gym.backends.sim.app.ofrep import ofrep_answer
from itbench_gym.lang.flagd import load_flag_set
from itbench_gym.lang.gojson import UnsupportedValue, marshal

FLAGS = load_flag_set(json.dumps({
    "metadata": {"version": "v2", "owner": "shop"},
    "flags": {
        "static": {"state": "ENABLED", "variants": {"on": {"b": 1.0, "a": [0.5]}, "off": None}, "defaultVariant": "on",
                   "metadata": {"team": "ads", "dropped": None}},
        "disabled": {"state": "DISABLED", "variants": {"on": True}, "defaultVariant": "on"},
        "nodefault": {"state": "ENABLED", "variants": {"on": True}},
        "targeted": {"state": "ENABLED", "variants": {"on": True, "off": False}, "defaultVariant": "off",
                     "targeting": {"if": [{"==": [{"var": "user"}, "x"]}, "on", None]}},
        "emptyrules": {"state": "ENABLED", "variants": {"on": "yes"}, "defaultVariant": "on", "targeting": {}},
    },
}))
SINGLE = "/ofrep/v1/evaluate/flags/"


def answer(path: str, body: bytes = b"", method: str = "POST") -> tuple[int | None, str | None]:
    got = ofrep_answer(FLAGS, method, path, body)
    assert got is not None
    return got.status, got.body.decode() if got.body is not None else None


def test_a_static_flag_evaluates_to_its_default_variant_with_both_metadata() -> None:
    assert answer(SINGLE + "static") == (200, '{"value":{"a":[0.5],"b":1},"key":"static","reason":"STATIC","variant":"on",'
                                              '"metadata":{"owner":"shop","team":"ads","version":"v2"}}')
    assert json.loads(answer(SINGLE + "emptyrules")[1] or "")["reason"] == "STATIC"  # `{}` is no targeting


def test_flags_flagd_cannot_serve_are_not_found() -> None:
    status, body = answer(SINGLE + "disabled")
    assert status == 404 and json.loads(body or "") == {"key": "disabled", "errorCode": "FLAG_NOT_FOUND",
                                                        "errorDetails": "flag `disabled` is disabled", "metadata": {"owner": "shop", "version": "v2"}}
    assert json.loads(answer(SINGLE + "nodefault")[1] or "")["errorDetails"] == "flag `nodefault` does not exist"
    assert answer(SINGLE + "no%20such") == (404, '{"key":"no such","errorCode":"FLAG_NOT_FOUND","errorDetails":"flag `no such` does not exist",'
                                                 '"metadata":{"owner":"shop","version":"v2"}}')


def test_targeting_is_left_unanswered_and_so_is_a_bulk_answer_over_it() -> None:
    assert ofrep_answer(FLAGS, "POST", SINGLE + "targeted", b"{}") is None
    assert ofrep_answer(FLAGS, "POST", "/ofrep/v1/evaluate/flags", b"") is None
    served = load_flag_set(json.dumps({"flags": {"b": {"state": "ENABLED", "variants": {"x": 2}, "defaultVariant": "x"},
                                                 "a": {"state": "DISABLED", "variants": {"x": 1}, "defaultVariant": "x"}}}))
    bulk = ofrep_answer(served, "POST", "/ofrep/v1/evaluate/flags/", b"")
    assert bulk is not None and bulk.body == b'{"flags":[{"value":2,"key":"b","reason":"STATIC","variant":"x","metadata":{}}],"metadata":{}}'


@pytest.mark.parametrize("body, valid", [(b"", True), (b" \n", True), (b"null", True), (b'{"context":{"user":"x"}}', True),
                                         (b'{"context":5} trailing', True), (b"[1]", False), (b"{", False), (b"NaN", False),
                                         (b'"text"', False)])
def test_the_request_body_is_decoded_as_go_decodes_it(body: bytes, valid: bool) -> None:
    status, text = answer(SINGLE + "static", body)
    if valid:
        assert status == 200
    else:
        assert status == 400 and text == ('{"key":"static","errorCode":"INVALID_CONTEXT","errorDetails":"Provider context is not valid",'
                                          '"metadata":null}')


def test_routes_and_methods_as_gorilla_mux_has_them() -> None:
    assert answer(SINGLE + "static", method="GET") == (405, "")
    assert answer("/ofrep/v1/evaluate/flags/static/more") == (404, "404 page not found\n")
    assert answer("/metrics") == (404, "404 page not found\n")
    assert ofrep_answer(FLAGS, "POST", "/ofrep//v1/evaluate/flags/static", b"") is None  # mux redirects to the clean path


@pytest.mark.parametrize("value, text", [(1.0, "1"), (0.1, "0.1"), (1e21, "1e+21"), (1.5e-7, "1.5e-7"), (1e20, "100000000000000000000"),
                                         (-0.0, "-0"), (12, "12"), ("a<b>&\u2028\x01\b", '"a\\u003cb\\u003e\\u0026\\u2028\\u0001\\b"'),
                                         ({"z": 1, "a": None}, '{"z":1,"a":null}'), ([True, False], "[true,false]")])
def test_json_is_written_as_gos_encoder_writes_it(value: object, text: str) -> None:
    assert marshal(value) == text


def test_go_refuses_to_encode_nan() -> None:
    with pytest.raises(UnsupportedValue, match="unsupported value"):
        marshal(float("nan"))
