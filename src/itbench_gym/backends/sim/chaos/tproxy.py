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
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
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
    return body.get("type") == "JSON" and not _is_json(str(body.get("value", "")))


@functools.lru_cache(maxsize=256)
def _is_json(value: str) -> bool:
    """Asked for every pod a caller dials while the experiment runs: each text parsed once."""
    try:
        parse_patch(value)
    except ValueError:
        return False
    return True
