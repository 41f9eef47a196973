"""The text a caller's own runtime produces for a failed call (data: ``errortext.yaml``).

The flow decides *what* failed (a cause such as a refused connection, or the callee's status and
message); how that reads depends on the caller: a Node frontend prints grpc-js's
``14 UNAVAILABLE: No connection established...``, Go's checkout ``rpc error: code = Unavailable
desc = ...``, .NET's cart ``Status(StatusCode="Unavailable", Detail="...")``. Logs and span events
render the same failure through :func:`message`, so both say what the real process would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext
from itbench_gym.lang.timestamps import rfc3339

_DATA = Path(__file__).with_name("errortext.yaml")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
#: The flow's causes, as the runtimes tell them apart (a Service without endpoints is refused by kube-proxy).
_CAUSES = {"dns": "dns", "refused": "refused", "no_endpoints": "refused", "timeout": "timeout", "http_abort": "reset", "reset": "reset",
           "deadline": "timeout", "mtls_reset": "reset", "rbac_reset": "reset", "auth": "auth", "dns_timeout": "dns_timeout"}


@dataclass(frozen=True)
class Failure:
    """One failed call as the caller saw it.

    ``cause`` is set when the call never got an answer from a server (the flow's cause name);
    otherwise ``code`` and ``details`` are the status the callee (or a proxy) answered with.
    ``protocol`` is ``grpc`` or ``http``; ``url``/``method``/``path`` matter for HTTP clients.
    """

    code: str
    details: str
    cause: str | None = None
    host: str = ""
    port: int | None = None
    ip: str = ""
    protocol: str = "grpc"
    method: str = "POST"
    url: str = ""
    path: str = "/"
    timeout: float = 0.0
    now: float = 0.0


@cache
def _data() -> dict[str, Any]:
    doc: dict[str, Any] = yamltext.load(_DATA.read_text())
    return doc


def runtime_of(language: str) -> str | None:
    """The runtime whose client library a service written in ``language`` uses (None: not modelled)."""
    runtime: str | None = _data()["languages"].get(language)
    return runtime


def code_number(code: str) -> int:
    """The numeric gRPC status of a code name (UNKNOWN's 2 for names gRPC does not have)."""
    entry = _data()["codes"].get(code)
    return int(entry[0]) if entry else 2


def _fill(template: str, values: dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _values(runtime: str, f: Failure, details: str) -> dict[str, str]:
    entry = _data()["codes"].get(f.code) or _data()["codes"]["UNKNOWN"]
    spelled = entry[2] if runtime == "dotnet" else entry[1]
    timeout = f"{f.timeout:.3f}".rstrip("0").rstrip(".") if f.timeout else "0"
    return {"code": str(entry[0]), "CODE": f.code if f.code in _data()["codes"] else "UNKNOWN", "Code": spelled,
            "details": details, "host": f.host, "port": "" if f.port is None else str(f.port), "ip": f.ip or f.host,
            "url": f.url, "method": f.method, "path": f.path, "timeout": timeout, "timeout_ms": f"{f.timeout * 1000:.0f}",
            "now": rfc3339(f.now, 3)}


def details(language: str, f: Failure) -> str:
    """The status detail the caller's runtime reports (the callee's own message when it answered)."""
    runtime = runtime_of(language)
    cause = _CAUSES.get(f.cause or "")
    if runtime is None or cause is None:
        return f.details
    table = _data()["runtimes"][runtime]["http" if f.protocol == "http" else "connect"]
    template = table.get(cause)
    return _fill(template, _values(runtime, f, f.details)) if template else f.details


def message(language: str, f: Failure) -> str:
    """The whole error text: the runtime's status wording around :func:`details` (HTTP clients have no status)."""
    runtime = runtime_of(language)
    text = details(language, f)
    if runtime is None or f.protocol == "http":
        return text
    return _fill(_data()["runtimes"][runtime]["status"], _values(runtime, f, text))
