"""flagd's OFREP endpoints (the OpenFeature Remote Evaluation Protocol) as the shop's flagd serves them.

Facts from open-feature/flagd at tag flagd/v0.12.9 (flagd/pkg/service/flag-evaluation/ofrep/handler.go)
and the core it builds on, core/v0.11.8 (pkg/service/ofrep/models.go, pkg/evaluator/json.go,
pkg/store/flags.go):

- gorilla/mux routes ``POST /ofrep/v1/evaluate/flags/{key}`` and ``POST /ofrep/v1/evaluate/flags`` (or
  ``flags/``); another method on those paths is 405 with no body, any other path 404 ``404 page not found``.
- The body is decoded as ``{"context": ...}``: empty is fine, anything but a JSON object (or null) is
  400 ``INVALID_CONTEXT`` "Provider context is not valid".
- A flag with no targeting evaluates to its default variant, reason ``STATIC``; an unknown flag, or one
  without a default variant, is 404 ``FLAG_NOT_FOUND`` "flag `k` does not exist"; a disabled one 404
  ``FLAG_NOT_FOUND`` "flag `k` is disabled". ``metadata`` is the flag file's own with the flag's on top.
- The bulk answer evaluates every enabled flag: ``{"flags": [...], "metadata": <the file's>}``.

What the twin does not know it leaves to the caller to say (None): a flag with targeting rules (a
JsonLogic evaluation of the request's context), a bulk evaluation over a flag whose default value is
not a boolean, string, number or object (flagd's bulk loop then reports another flag's result, in Go's
map order), a path gorilla/mux would redirect to its clean form. flagd writes the bulk answer's flags in
its map's random order; the twin writes them by key. The server's own time is not modelled (0 s).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from itbench_gym.backends.sim.containers.context import HttpAnswer
from itbench_gym.lang.flagd import FlagDefinition, FlagSet
from itbench_gym.lang.gojson import marshal, sorted_maps

_SINGLE = re.compile(r"/ofrep/v1/evaluate/flags/(?P<key>[^/]+)")
_BULK = re.compile(r"/ofrep/v1/evaluate/flags/?")
_JSON = "application/json"
_NOT_FOUND_PAGE = HttpAnswer(404, 0.0, b"404 page not found\n", "text/plain; charset=utf-8")
_INVALID_CONTEXT = {"errorCode": "INVALID_CONTEXT", "errorDetails": "Provider context is not valid", "metadata": None}


def ofrep_answer(held: FlagSet, method: str, path: str, body: bytes) -> HttpAnswer | None:
    """flagd's answer to ``method path`` with ``body`` on its OFREP port, from the flag set it holds."""
    route = unquote(path.split("?", 1)[0])
    if "//" in route or "/./" in route or "/../" in route or route.endswith(("/.", "/..")):
        return None  # mux answers a path that is not clean with a redirect to the clean one
    single, bulk = _SINGLE.fullmatch(route), _BULK.fullmatch(route)
    if single is None and bulk is None:
        return _NOT_FOUND_PAGE
    if method != "POST":
        return HttpAnswer(405, 0.0, b"", None)
    valid = _valid_request(body)
    if single is not None:
        key = single["key"]
        if not valid:
            return _json(400, {"key": key, **_INVALID_CONTEXT})
        return _evaluate(held, key)
    if not valid:
        return _json(400, _INVALID_CONTEXT)
    results = []
    for key in sorted(held.flags):
        flag = held.flags[key]
        if flag.state == "DISABLED":
            continue  # the bulk evaluation skips disabled flags
        default = flag.variants.get(flag.default_variant) if flag.default_variant else None
        if flag.targeted or isinstance(default, list) or default is None:
            return None
        results.append(_result(held, key, flag)[1])
    return _json(200, {"flags": results, "metadata": sorted_maps(dict(held.metadata))})


def _evaluate(held: FlagSet, key: str) -> HttpAnswer | None:
    flag = held.flags.get(key)
    if flag is None:
        return _json(404, _error(key, "FLAG_NOT_FOUND", f"flag `{key}` does not exist", held.metadata))
    if flag.targeted and flag.state != "DISABLED":
        return None
    status, payload = _result(held, key, flag)
    return _json(status, payload)


def _result(held: FlagSet, key: str, flag: FlagDefinition) -> tuple[int, dict[str, Any]]:
    """A flag's evaluation without targeting: its status and the object flagd writes for it."""
    metadata = {**held.metadata, **{k: v for k, v in flag.metadata.items() if v is not None}}
    if flag.state == "DISABLED":
        return 404, _error(key, "FLAG_NOT_FOUND", f"flag `{key}` is disabled", metadata)
    if not flag.default_variant:
        return 404, _error(key, "FLAG_NOT_FOUND", f"flag `{key}` does not exist", metadata)
    return 200, {"value": sorted_maps(flag.variants[flag.default_variant]), "key": key, "reason": "STATIC",
                 "variant": flag.default_variant, "metadata": sorted_maps(metadata)}


def _error(key: str, code: str, details: str, metadata: Any) -> dict[str, Any]:
    return {"key": key, "errorCode": code, "errorDetails": details, "metadata": sorted_maps(dict(metadata))}


def _json(status: int, payload: dict[str, Any]) -> HttpAnswer:
    return HttpAnswer(status, 0.0, marshal(payload).encode(), _JSON)


def _valid_request(body: bytes) -> bool:
    """Whether Go's decoder takes the body's first JSON value as an OFREP request (an object or null;
    no body at all is fine too)."""
    text = body.decode("utf-8", "replace").lstrip(" \t\r\n")
    if not text:
        return True

    def no_constants(name: str) -> Any:
        raise ValueError(name)  # NaN and Infinity are not JSON to Go

    try:
        value, _ = json.JSONDecoder(parse_constant=no_constants).raw_decode(text)
    except ValueError:
        return False
    return value is None or isinstance(value, dict)
