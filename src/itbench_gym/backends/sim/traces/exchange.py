"""HTTP requests a process in a container sends to the app's services, answered by the model.

A request that reaches a service (through its Service, :meth:`ClusterNetwork.request`) is matched
against the service's server operations by method and route (``GET /api/products/{productId}``
serves ``/api/products/OLJCESPC7Z``), and served as the twin's traces serve that operation in the
model's latest tick: the same calls, their failures and the faults' delays and aborts
(:meth:`TraceSynth.serve`), so what a client in a pod sees agrees with Jaeger, the span metrics and
the logs. Its answer is the status and how long the server took, and the body where app.yaml holds
it (an operation's ``response`` from the catalogue, a service's ``http`` error body, a proxy passing
its upstream's on); headers are not modelled. A request reaching a listener that serves a protocol of its own (app.yaml ``serves``) is
answered by that protocol's server instead, body included: flagd's OFREP port from the flag set its
process holds (``app/ofrep.py``). What the model cannot say gives None, and the client says so: a route no operation serves
(a real server's 404 or its own page), a path argument the app's data does not hold (a product id
not in the catalogue), an app with no tick yet.
"""

from __future__ import annotations

import json
import re
import weakref
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from itbench_gym.backends.sim.app.flow import OpKey
from itbench_gym.backends.sim.app.ofrep import ofrep_answer
from itbench_gym.backends.sim.containers.context import HttpAnswer
from itbench_gym.lang.flagd import FlagSet

from .record import TraceTick
from .synth import TraceSynth

_PARAM = re.compile(r"\{(\w+)\}")


def route_pattern(route: str) -> re.Pattern[str]:
    """A route template as a pattern over request paths: each ``{name}`` one path segment."""
    parts = _PARAM.split(route)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>[^/]+)" for i, p in enumerate(parts)))


Routes = dict[str, list[tuple[str, re.Pattern[str], OpKey]]]
#: Each synthesiser's routes, read from its operations once.
_ROUTES: weakref.WeakKeyDictionary[TraceSynth, Routes] = weakref.WeakKeyDictionary()


def http_routes(synth: TraceSynth) -> Routes:
    """Per service, its server operations that are HTTP routes: (method, path pattern, operation)."""
    routes = _ROUTES.get(synth)
    if routes is None:
        routes = _ROUTES[synth] = {}
        for key, info in synth.ops.items():
            if info.route is not None and info.kind == "server":
                routes.setdefault(key[0], []).append((info.method, route_pattern(info.route), key))
    return routes


class AppHttpServers:
    """The app's HTTP operations in the model's latest tick (``HttpServers`` for ``kubectl exec``);
    the synthesiser is asked for only when a request comes."""

    def __init__(self, synth: Callable[[], TraceSynth], tick: TraceTick | None, now: float,
                 flags: Callable[[], FlagSet | None] = lambda: None, records: Sequence[Mapping[str, Any]] = ()) -> None:
        """``flags``: the flag set the app's flag service holds (its OFREP port's answers); ``records``:
        the catalogue's products as the app's API writes them (``AppModel.catalog_records``)."""
        self._synth_of = synth
        self._tick = tick
        self._now = now
        self._flags = flags
        self._records = records

    def answer(self, service: str, method: str, path: str, connection: str, body: bytes, serves: str | None) -> HttpAnswer | None:
        if serves == "ofrep":
            held = self._flags()
            return ofrep_answer(held, method, path, body) if held is not None else None
        if serves is not None or self._tick is None:
            return None
        synth = self._synth_of()
        route_path = path.split("?", 1)[0]
        for route_method, pattern, key in http_routes(synth).get(service, ()):
            matched = pattern.fullmatch(route_path)
            if route_method != method or matched is None:
                continue
            params = matched.groupdict()
            # a path argument is answered only when it names one of the catalogue's products (a trace
            # field of kind ``catalog``): the data says nothing of what another value would do
            products = [v for n, v in params.items() if synth.catalog.fields.get(n, ("", None))[0] == "catalog"]
            if len(products) != len(params) or any(v not in synth.products for v in products):
                return None
            product = products[0] if products else None
            stream = [synth.seed, int(round(self._now * 1000)), zlib.crc32(f"{connection} {method} {path}".encode())]
            seconds, status, cause = synth.serve(self._tick, key, self._now, stream, product)
            # a query (another currency, say) changes what the handler writes in ways the data does not hold
            known = _body(synth, key, status, cause, product, self._records) if "?" not in path else None
            return HttpAnswer(status, seconds, *known) if known is not None else HttpAnswer(status, seconds)
        return None


#: What Next.js's ``res.json`` sends (JSON.stringify's text) and its content type.
_JS_JSON = "application/json; charset=utf-8"


def _body(synth: TraceSynth, key: OpKey, status: int | None, cause: str | None, product: str | None,
          records: Sequence[Mapping[str, Any]]) -> tuple[bytes, str | None] | None:
    """The body of ``key``'s answer with ``status`` when the data holds it (app.yaml ``response``,
    ``http``): a proxy's is its own reply when it could not reach its upstream (``cause``), else the
    upstream's for the upstream's own statuses."""
    spec = synth.spec
    svc, op = spec.services[key[0]], spec.op(*key)
    if svc.passes_bodies and op.calls:
        if cause is not None:
            reply = svc.local_replies.get(cause)
            return (reply.encode(), "text/plain") if reply is not None else None
        upstream = spec.op(op.calls[0].service, op.calls[0].operation)
        if status in (200, upstream.error_status):
            return _body(synth, (upstream.service, upstream.id), status, None, product, records)
        return None
    route = synth.ops[key].route or ""
    if status == op.error_status and svc.http_error_body is not None and route.startswith(svc.http_error_routes):
        return svc.http_error_body.encode(), None
    if status != 200 or op.response is None:
        return None
    if op.response == "catalog":
        found: Any = list(records)
    else:
        found = next((r for r in records if str(r.get("id")) == product), None)
        if found is None:
            return None
    # JSON.stringify's text: no spaces, non-ASCII as it is, control characters escaped
    return json.dumps(found, ensure_ascii=False, separators=(",", ":")).encode(), _JS_JSON
