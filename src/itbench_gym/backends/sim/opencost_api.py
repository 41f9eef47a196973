"""The twin's OpenCost HTTP API (port 9003 in the cluster): ``/allocation/compute`` and ``/allocation``.

Answers as upstream's ``ComputeAllocationHandler`` does: ``{"code": 200, "status": "success", "data":
[set, ...]}`` with one set (name -> allocation) per ``step`` of the ``window``, or a single set with
``accumulate=true``. Parameters: ``window`` (required), ``aggregate``, ``step``, ``accumulate``,
``resolution`` and ``includeIdle``. Every allocation is computed at request time from PromQL over the
twin's Prometheus (``opencost_allocation.py``), relative to the simulated clock.

A parameter that cannot be used is a 400 whose ``message`` says ``Invalid '<name>' parameter: ...``
(upstream writes that text for ``window`` and ``aggregate``, as plain text; here always JSON, so a
client reads one format). Options upstream has that the twin does not model (``filter``,
``shareIdle``, ``idleByNode``, ...) are refused rather than silently ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from werkzeug.exceptions import MethodNotAllowed
from werkzeug.wrappers import Request, Response

from ...clock import Clock
from .opencost_allocation import (
    DEFAULT_CLUSTER_ID,
    IDLE,
    Allocation,
    AllocationModel,
    ParameterError,
    aggregation_key,
    parse_aggregate,
    parse_bool,
    parse_duration,
    parse_window,
)
from .promql.engine import Engine
from .promql.errors import PromQLError
from .wsgi import RoutedApp, url_map

#: Most sets one request may ask for (window / step).
MAX_SETS = 500
#: Largest JSON answer served; a bigger one is a 400 telling how to narrow the request.
MAX_RESPONSE_BYTES = 8 << 20
DEFAULT_RESOLUTION = 60.0
#: How far past now a window may end (``today`` ends tomorrow, ``2w`` at the end of today).
MAX_FUTURE_SECONDS = 366 * 86_400.0
#: Upstream options the twin does not model: refused so an agent does not read unfiltered data as filtered.
UNSUPPORTED = ("filter", "shareIdle", "idleByNode", "shareNamespaces", "shareLabels", "shareCost", "shareSplit",
               "sharelb", "includeProportionalAssetResourceCosts", "includeAggregatedMetadata", "accumulateBy", "format")


def _json(body: Any, status: int = 200, headers: Any = None) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json", headers=headers)


def _error(message: str, status: int = 400, headers: Any = None) -> Response:
    return _json({"code": status, "status": "error", "data": None, "message": message}, status=status, headers=headers)


class OpenCostAPI(RoutedApp):
    """Request handlers over an :class:`AllocationModel` and the twin's clock."""

    def __init__(self, engine: Engine, clock: Clock, cluster_id: str = DEFAULT_CLUSTER_ID) -> None:
        self.model = AllocationModel(engine, cluster_id)
        self.clock = clock
        self.url_map = url_map((
            ("/allocation/compute", "allocation", ("GET",)),
            ("/allocation", "allocation", ("GET",)),
            ("/healthz", "healthz", ("GET", "HEAD")),
        ))

    def method_not_allowed(self, request: Request, exc: MethodNotAllowed) -> Response:
        return _error(f"method {request.method} not allowed", status=405, headers=exc.get_headers())

    def bad_request(self, request: Request, message: str, status: int = 400) -> Response:
        return _error(message, status=status)

    def internal_error(self, request: Request, exc: Exception) -> Response:
        return _error(f"internal error: {exc}", status=500)

    def handle(self, request: Request, endpoint: str, args: dict[str, Any]) -> Response:
        if endpoint == "healthz":
            return Response("OK", mimetype="text/plain")
        try:
            data = self.allocation(request)
        except ParameterError as exc:
            return _error(str(exc))
        except PromQLError as exc:  # a query past the engine's limits: the request asked for too much
            return _error(f"Bad Request: {exc.message}; ask for a shorter window or a coarser resolution")
        text = json.dumps({"code": 200, "status": "success", "data": data}, allow_nan=False)
        if len(text) > MAX_RESPONSE_BYTES:
            return _error(f"the response exceeds the {MAX_RESPONSE_BYTES >> 20} MiB limit; "
                          "aggregate more coarsely (e.g. aggregate=namespace), use a larger step or accumulate=true")
        return Response(text, mimetype="application/json")

    def allocation(self, request: Request) -> list[dict[str, Any]]:
        """The allocation sets the request's parameters ask for."""
        params = request.args
        for name in UNSUPPORTED:
            if name in params:
                raise ParameterError(name, "not supported by this OpenCost (the itbench-gym twin); supported: window, "
                                           "aggregate, step, accumulate, resolution, includeIdle")
        now = self.clock.now()
        window_text = params.get("window", "")
        if not window_text:
            raise ParameterError("window", "missing; use e.g. 10m, 1h, 24h, 7d, today, yesterday, week, month or "
                                           "<start>,<end> in RFC 3339 or Unix seconds")
        start, end = parse_window(window_text, now)
        if end <= start:
            raise ParameterError("window", f"{window_text!r} is empty or ends before it starts")
        if start < 0 or end > now + MAX_FUTURE_SECONDS:
            raise ParameterError("window", f"{window_text!r} reaches before 1970 or more than a year past now; "
                                           "ask for a window up to now")
        aggregate = parse_aggregate(params.get("aggregate", ""))
        step = parse_duration(params["step"], "step") if params.get("step") else end - start
        if (end - start) / step > MAX_SETS:
            raise ParameterError("step", f"{params.get('step')!r} makes {math.ceil((end - start) / step):,} sets of the "
                                         f"window; at most {MAX_SETS} are served, so use a larger step")
        resolution = parse_duration(params["resolution"], "resolution") if params.get("resolution") else DEFAULT_RESOLUTION
        accumulate = parse_bool(params.get("accumulate", "false"), "accumulate")
        include_idle = parse_bool(params.get("includeIdle", "false"), "includeIdle")
        sets: list[tuple[tuple[float, float], dict[str, Allocation]]] = []
        s = start
        while s < end:
            e = min(s + step, end)
            found = self.model.compute(s, min(e, now), resolution, include_idle)
            sets.append(((s, e), _aggregated(found, aggregate)))
            s = e
        if accumulate:
            merged: dict[str, Allocation] = {}
            for _, allocations in sets:
                _merge(merged, allocations)
            sets = [((start, end), merged)]
        return [{name: a.to_json(name, window) for name, a in sorted(allocs.items())} for window, allocs in sets]


def _aggregated(allocations: dict[tuple[str, ...], Allocation], aggregate: tuple[str, ...]) -> dict[str, Allocation]:
    """The allocations keyed by the aggregation's names; ``__idle__`` stays apart."""
    out: dict[str, Allocation] = {}
    for key, a in allocations.items():
        name = IDLE if key == (IDLE,) else aggregation_key(a.properties, aggregate)
        _merge(out, {name: a})
    return out


def _merge(into: dict[str, Allocation], allocations: dict[str, Allocation]) -> None:
    for name, a in allocations.items():
        if name in into:
            into[name].add(a)
        else:  # a copy: merging must not change the per-container allocations
            into[name] = replace(a, properties=dict(a.properties), pvs={k: dict(v) for k, v in a.pvs.items()})


def make_opencost_app(engine: Engine, clock: Clock) -> OpenCostAPI:
    """Build the WSGI app serving OpenCost's allocation API from the twin's engine."""
    return OpenCostAPI(engine, clock)
