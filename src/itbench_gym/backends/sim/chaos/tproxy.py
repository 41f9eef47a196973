"""chaos-tproxy's handling of HTTPChaos rules (chaos-mesh/chaos-tproxy, the proxy chaos-daemon starts in
the pod's network namespace).

The controller process accepts a rule as it is and answers chaos-daemon 200 (the injection succeeds),
sets up the pod's redirection (a bridge through its own namespace, TPROXY of the selected ports to
its listen port), then starts the proxy process, which reads the rules and converts them: a JSON body
``patch`` is parsed with serde_json there (``raw_config.rs``). An invalid JSON makes the proxy process
exit before it listens, while the redirection stays: TPROXY finds no socket for the selected ports
and drops every packet to them (new connections and those already open alike), so callers time out
and the server sees none of their requests. A valid patch is merged into each selected JSON body as
an RFC 7396 merge patch (``kube.patch.merge_patch``).

The redirection matches the port as a destination port on the bridge, in both directions: requests the
pod serves on it and requests the pod sends to that port elsewhere (Chaos Mesh: "the rules will affect
both of clients and servers in the Pod"). A rule selects a request by ``port``, ``method`` (exact) and
``path`` (a wildcard over the URI's path, the ``wildmatch`` crate's: ``*`` any run of characters, ``?``
one, nothing else special); ``Request`` rules act on the request, an abort ending it before the server
sees it, ``Response`` rules on the server's answer, an abort resetting the connection instead of passing
the answer on. A body patch on a body that is not JSON (a gRPC message, a GET's empty body) fails to
parse and ends the request as an abort does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from itbench_gym.lang.durations import DurationError, parse_go_duration

#: The request methods Chaos Mesh's webhook accepts in an HTTPChaos ``method`` (``target: Request``).
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT")


def webhook_problems(spec: Mapping[str, Any]) -> list[str]:
    """What Chaos Mesh's admission webhook refuses in an HTTPChaos spec (its words), [] when it accepts it:
    a port that is not positive (an absent one is 0), a request method Go's ``net/http`` does not name,
    a ``delay`` Go's ``time.ParseDuration`` refuses."""
    out = []
    port = spec.get("port", 0)
    if isinstance(port, int) and port <= 0:
        out.append(f"port {port} is not supported")
    method = spec.get("method")
    if method is not None and spec.get("target") == "Request" and method not in HTTP_METHODS:
        out.append(f"method {method} is not supported")
    delay = spec.get("delay")
    if delay is not None:
        try:
            parse_go_duration(str(delay))
        except DurationError:
            out.append(f"invalid duration {delay}")
    return out


def parse_patch(value: str) -> Any:
    """The patch's JSON (what the proxy process converts); ValueError when it is not JSON."""
    return json.loads(value)


def proxy_exits(spec: dict[str, Any]) -> bool:
    """Whether the HTTPChaos's rule makes the proxy process exit as it starts (a JSON body patch that is not JSON)."""
    body = (spec.get("patch") or {}).get("body") or {}
    return body.get("type") == "JSON" and not is_json(str(body.get("value", "")))


@functools.lru_cache(maxsize=256)
def is_json(value: str | bytes) -> bool:
    """Whether the proxy parses ``value`` as JSON (a patch, a body). Asked for every pod a caller dials
    while the experiment runs: each text parsed once."""
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class WireRequest:
    """What chaos-tproxy sees of a request: its method, its path (each of a route template's concrete
    paths, equally likely) and whether its body is JSON."""

    method: str
    paths: tuple[str, ...]
    json_body: bool


@dataclass(frozen=True)
class HttpFaults:
    """What the selected rules do to a share of the requests: reset them on the way in (an abort, a
    body patch that cannot parse the body), reset the server's answer on the way back (``lost``: the
    server did the work), delay the rest (mean and variance, seconds), break their answers (a replaced
    message, a patched response)."""

    aborted: float = 0.0
    delay_s: float = 0.0
    delay_var_s2: float = 0.0
    broken: float = 0.0
    lost: float = 0.0


@functools.lru_cache(maxsize=256)
def _wildcard(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


def wildmatch(pattern: str, text: str) -> bool:
    """The ``wildmatch`` crate's match: ``*`` any run of characters (``/`` included), ``?`` exactly one."""
    return _wildcard(pattern).fullmatch(text) is not None


def selects(rule: Mapping[str, Any], method: str, path: str) -> bool:
    """Whether an HTTPChaos spec's selectors pick a request with this method and path (the port is the caller's to check)."""
    wanted = rule.get("method")
    return (wanted is None or str(wanted) == method) and (rule.get("path") is None or wildmatch(str(rule["path"]), path))


def http_faults(rules: Sequence[Mapping[str, Any]], request: WireRequest) -> HttpFaults:
    """The rules of the proxies a request passes (its client's, then its server's) over each of its
    paths: ``target: Request`` rules on the way in, ``Response`` rules on the answer's way back."""
    aborted = lost = broken = 0.0
    delays: list[float] = []
    for path in request.paths:
        picked = [rule for rule in rules if selects(rule, request.method, path)]
        inbound = [rule for rule in picked if rule.get("target", "Request") != "Response"]
        if any(rule.get("abort") or (request_body_patch(rule) is not None and not request.json_body) for rule in inbound):
            aborted += 1
            continue
        outbound = [rule for rule in picked if rule.get("target") == "Response"]
        if any(rule.get("abort") for rule in outbound):
            lost += 1  # the server answered; the proxy resets the connection instead of passing the answer on
            continue
        delays.append(sum(delay_seconds(rule.get("delay")) for rule in picked))
        broken += any(map(_breaks, picked))
    n = len(request.paths)
    if not delays:
        return HttpFaults(aborted / n, lost=lost / n)
    mean = sum(delays) / len(delays)
    return HttpFaults(aborted / n, mean, sum((d - mean) ** 2 for d in delays) / len(delays), broken / n, lost / n)


def _breaks(rule: Mapping[str, Any]) -> bool:
    """Whether a rule makes the answer wrong: a request sent to another path, with another method or body
    (the server answers something else), a response given an error status or another body, a patched
    response body. Added or replaced headers and queries, a request body patch (the server's to cope
    with: app.yaml ``request_bodies``) and a success status leave it as it was."""
    replace = rule.get("replace") or {}
    patch_body = (rule.get("patch") or {}).get("body")
    if rule.get("target") == "Response":
        return bool(replace.get("body")) or int(replace.get("code") or 0) >= 400 or bool(patch_body)
    return any(replace.get(k) for k in ("path", "method", "body"))


def request_body_patch(rule: Mapping[str, Any]) -> Any:
    """The JSON an HTTPChaos merges into request bodies (None: it patches no request body, or its JSON
    is invalid: the proxy never runs, :func:`proxy_exits`)."""
    body = (rule.get("patch") or {}).get("body") or {}
    if rule.get("target", "Request") != "Request" or body.get("type") != "JSON":
        return None
    try:
        return parse_patch(str(body.get("value", "")))
    except ValueError:
        return None


def delay_seconds(text: object) -> float:
    """A Chaos Mesh ``delay``/``latency`` in seconds (a Go duration; its webhook refuses a malformed one,
    for which the twin applies none)."""
    if not text:
        return 0.0
    try:
        return max(0.0, parse_go_duration(str(text)))
    except DurationError:
        return 0.0
