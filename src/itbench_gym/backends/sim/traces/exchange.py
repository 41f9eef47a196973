"""HTTP requests a process in a container sends to the app's services, answered by the model.

A request that reaches a service (through its Service, :meth:`ClusterNetwork.request`) is matched
against the service's server operations by method and route (``GET /api/products/{productId}``
serves ``/api/products/OLJCESPC7Z``), and served as the twin's traces serve that operation in the
model's latest tick: the same calls, their failures and the faults' delays and aborts
(:meth:`TraceSynth.serve`), so what a client in a pod sees agrees with Jaeger, the span metrics and
the logs. Its answer is the status and how long the server took; the body and headers are not
modelled. A request reaching a listener that serves a protocol of its own (app.yaml ``serves``) is
answered by that protocol's server instead, body included: flagd's OFREP port from the flag set its
process holds (``app/ofrep.py``). What the model cannot say gives None, and the client says so: a route no operation serves
(a real server's 404 or its own page), a path argument the app's data does not hold (a product id
not in the catalogue), an app with no tick yet.
"""

from __future__ import annotations

import re
import weakref
import zlib
from collections.abc import Callable

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
                 flags: Callable[[], FlagSet | None] = lambda: None) -> None:
        """``flags``: the flag set the app's flag service holds (its OFREP port's answers)."""
        self._synth_of = synth
        self._tick = tick
        self._now = now
        self._flags = flags

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
            seconds, status = synth.serve(self._tick, key, self._now, stream, product)
            return HttpAnswer(status, seconds)
        return None
