"""The fluid request-flow model: per-operation rates, error shares and latency moments.

Each tick the call graph is solved twice. Bottom-up (callees first): what fraction of an
operation's requests fail and how long successes and failures take, given reachability, flag
effects and CPU queueing. Top-down (callers first): how many requests per second reach each
operation, honouring short-circuits (a failed propagate call stops the calls after it) and the
callers' error policies (ignore / warn calls never fail the caller).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .network import CAUSES, Reach
from .spec import AppSpec, Call, Operation

OpKey = tuple[str, str]
NETWORK_HOP_S = 0.0003


@dataclass(frozen=True)
class Moments:
    mean: float
    var: float

    def plus(self, other: Moments) -> Moments:
        return Moments(self.mean + other.mean, self.var + other.var)

    def scaled(self, k: float) -> Moments:
        return Moments(self.mean * k, self.var * k)


ZERO = Moments(0.0, 0.0)


def lognormal(median_s: float, sigma: float) -> Moments:
    mu = math.log(median_s)
    mean = math.exp(mu + sigma * sigma / 2)
    return Moments(mean, (math.exp(sigma * sigma) - 1) * mean * mean)


def mixture(parts: list[tuple[float, Moments]]) -> Moments:
    total = sum(p for p, _ in parts)
    if total <= 0:
        return ZERO
    mean = sum(p * m.mean for p, m in parts) / total
    second = sum(p * (m.var + m.mean * m.mean) for p, m in parts) / total
    return Moments(mean, max(second - mean * mean, 0.0))


@dataclass
class Knobs:
    """Per-tick modifiers from flags, chaos and CPU saturation."""

    self_error: dict[OpKey, tuple[float, str, str]] = field(default_factory=dict)
    extra_latency: dict[OpKey, Moments] = field(default_factory=dict)
    slowdown: dict[str, float] = field(default_factory=dict)
    call_count: dict[tuple[str, str, str], float] = field(default_factory=dict)
    call_scale: dict[tuple[str, str, str], float] = field(default_factory=dict)
    server_error: dict[str, float] = field(default_factory=dict)


@dataclass
class CallOutcome:
    call: Call
    reach: Reach
    frac: float
    count: float
    q: float
    ok: Moments
    err: Moments
    cause: str | None
    error_text: str
    grpc_code: str


@dataclass
class OpStats:
    op: Operation
    p_err: float
    ok: Moments
    err: Moments
    calls: list[CallOutcome]
    self_error: float
    error_text: str
    grpc_code: str


def _fail_latency(reach: Reach, call: Call) -> Moments:
    fast, _, _ = CAUSES.get(reach.cause or "refused", CAUSES["refused"])
    if fast < 0:
        t = call.timeout_ms / 1000.0
        return Moments(t, (0.02 * t) ** 2)
    return Moments(fast, (fast / 2) ** 2)


def _switched_off(stats: OpStats) -> bool:
    return bool(stats.calls) and all(co.count <= 0 for co in stats.calls)


class FlowSolver:
    """Solves one tick's flow over a fixed call graph."""

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        self.order = self._topological()

    def _topological(self) -> list[OpKey]:
        seen: set[OpKey] = set()
        post: list[OpKey] = []

        def visit(k: OpKey) -> None:
            if k in seen:
                return
            seen.add(k)
            for c in self.spec.op(*k).calls:
                visit((c.service, c.operation))
            post.append(k)

        for s in self.spec.services.values():
            for o in s.operations:
                visit((s.name, o))
        return list(reversed(post))

    def stats(self, reaches: dict[tuple[str, str, str], Reach], knobs: Knobs) -> dict[OpKey, OpStats]:
        """Bottom-up: error probability and latency of every operation (rate-independent)."""
        out: dict[OpKey, OpStats] = {}
        for key in reversed(self.order):
            op = self.spec.op(*key)
            slow = knobs.slowdown.get(op.service, 1.0)
            self_t = lognormal(op.median_ms / 1000.0, op.sigma).scaled(slow)
            if key in knobs.extra_latency:
                self_t = self_t.plus(knobs.extra_latency[key])
            s, path = 1.0, ZERO
            errs: list[tuple[float, Moments]] = []
            outcomes: list[CallOutcome] = []
            err_text, grpc_code = "", "OK"
            for c in op.calls:
                callee = out[(c.service, c.operation)]
                r = reaches[(op.service, op.id, c.id)]
                n = knobs.call_count.get((op.service, op.id, c.id), c.count) * knobs.call_scale.get((op.service, op.id, c.id), 1.0)
                srv_err = 1.0 - (1.0 - callee.p_err) * (1.0 - r.server_error_share * knobs.server_error.get(c.service, 1.0))
                q = 1.0 - r.ok_share * (1.0 - srv_err)
                hop = Moments(NETWORK_HOP_S + r.delay_ms / 1000.0, 0.0)
                ok1 = callee.ok.plus(hop)
                fail_reach = _fail_latency(r, c)
                unreached = 1.0 - r.ok_share
                err1 = mixture([(unreached, fail_reach), (r.ok_share * srv_err, callee.err.plus(hop))])
                if c.parallel and n > 1:
                    ok_n = Moments(ok1.mean * (1 + 0.25 * math.log(n)), ok1.var)
                    err_n = err1
                else:
                    ok_n = ok1.scaled(n)
                    err_n = Moments(err1.mean + max(n - 1, 0) / 2 * ok1.mean, err1.var)
                p_all_ok = (1.0 - q) ** n if n > 0 else 1.0
                if unreached > 0 and r.cause:
                    _, code, shape = CAUSES[r.cause]
                    text = shape.format(host=r.target.split(":")[0], target=r.target)
                else:
                    code, text = callee.grpc_code, callee.error_text
                outcomes.append(CallOutcome(c, r, s, n, q, ok1, err1, r.cause if unreached > 0 else None, text, code))
                if c.on_error == "propagate":
                    if p_all_ok < 1.0:
                        errs.append((s * (1.0 - p_all_ok), path.plus(err_n)))
                        if not err_text:
                            err_text, grpc_code = text, code
                    s *= p_all_ok
                    path = path.plus(ok_n)
                else:
                    path = path.plus(mixture([(p_all_ok, ok_n), (1.0 - p_all_ok, err_n)]) if n > 0 else ZERO)
            rate_err, code_err, text_err = knobs.self_error.get(key, (0.0, "OK", ""))
            if rate_err > 0:
                errs.append((s * rate_err, path.plus(self_t)))
                s *= 1.0 - rate_err
                err_text, grpc_code = text_err, code_err
            errs = [(p, m.plus(self_t)) for p, m in errs]
            p_err = min(max(1.0 - s, 0.0), 1.0)
            out[key] = OpStats(op, p_err, path.plus(self_t), mixture(errs), outcomes, rate_err, err_text, grpc_code)
        return out

    def rates(self, stats: dict[OpKey, OpStats], roots: dict[OpKey, float]) -> tuple[dict[OpKey, float], dict[tuple[str, str, str], tuple[float, float]]]:
        """Top-down: processed requests/s per operation and (ok, error) calls/s per client span.

        A root whose calls are all switched off this tick does nothing, not even open its span:
        Locust's flood_home returns at once while loadGeneratorFloodHomepage is 0.
        """
        rate: dict[OpKey, float] = {k: r for k, r in roots.items() if not _switched_off(stats[k])}
        client: dict[tuple[str, str, str], tuple[float, float]] = {}
        for key in self.order:
            r = rate.get(key, 0.0)
            if r <= 0:
                continue
            for co in stats[key].calls:
                calls = r * co.frac * co.count
                if calls <= 0:
                    continue
                client[(key[0], key[1], co.call.id)] = (calls * (1.0 - co.q), calls * co.q)
                callee = (co.call.service, co.call.operation)
                rate[callee] = rate.get(callee, 0.0) + calls * co.reach.ok_share
        return rate, client
