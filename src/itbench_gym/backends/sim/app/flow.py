"""The fluid request-flow model: per-operation rates, error shares and latency moments.

Each tick the call graph is solved twice. Bottom-up (callees first): what fraction of an
operation's requests fail and how long successes and failures take, given reachability, flag
effects and CPU queueing. Top-down (callers first): how many requests per second reach each
operation, honouring short-circuits (a failed propagate call stops the calls after it) and the
callers' error policies (ignore / warn calls never fail the caller; a failed ``return`` call ends
the request early with an answer of its own, as code that catches the error and replies does).
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np

from .network import CAUSES, Reach
from .spec import AppSpec, Call, Operation

OpKey = tuple[str, str]
NETWORK_HOP_S = 0.0003
#: Linux's minimum TCP retransmission timeout, doubled on each further loss of the same segment.
TCP_MIN_RTO_S = 0.2
#: Segments of a small request/response exchange, each of which a lossy path may drop.
SEGMENTS_PER_CALL = 4


#: A number or an array of them: what :func:`lognormal_params` works on.
_F = TypeVar("_F", float, np.ndarray)


class Moments(NamedTuple):
    """Mean and variance of a duration in seconds (a tuple: the tick builds thousands of them)."""

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


def lognormal_params(mean: _F, var: _F) -> tuple[_F, _F]:
    """(mu, sigma) of the log-normal with this mean and variance: numbers, or arrays element-wise."""
    s2 = np.log1p(var / (mean * mean))
    return np.log(mean) - s2 / 2, np.sqrt(s2)


def bucket_probs(log_bounds_ms: Sequence[float], mean_s: np.ndarray, var_s: np.ndarray) -> np.ndarray:
    """Probability mass per histogram bucket (the last: above the largest bound) of durations that
    follow the log-normal with each row's mean and variance (seconds), one row each; the bounds are
    natural logs of milliseconds. A row whose mean is not positive is all in the first bucket."""
    bounds = np.asarray(log_bounds_ms, dtype=float)
    timed = mean_s > 0
    mean = np.where(timed, mean_s, 1.0) * 1000.0
    mu, sigma = lognormal_params(mean, np.where(timed, var_s, 0.0) * 1e6)
    scale = np.maximum(sigma, 1e-4) * math.sqrt(2.0)
    z = (bounds[None, :] - mu[:, None]) / scale[:, None]
    cdf = np.ones((len(mean), len(bounds) + 2))
    cdf[:, 0] = 0.0
    cdf[:, 1:-1] = 0.5 * (1.0 + np.array([math.erf(x) for x in z.ravel().tolist()]).reshape(z.shape))
    probs = np.clip(np.diff(cdf, axis=1), 0.0, 1.0)
    probs[~timed] = 0.0
    probs[~timed, 0] = 1.0
    out: np.ndarray = probs / np.maximum(probs.sum(axis=1, keepdims=True), 1e-12)
    return out


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def split_at(m: Moments, limit_s: float) -> tuple[float, Moments]:
    """Share of a latency distribution above ``limit_s`` and the moments of the rest.

    The distribution is taken as the log-normal with the same moments, whose truncated moments
    have closed forms: how a deadline cuts a latency distribution.
    """
    if m.mean <= 0 or limit_s <= 0:
        return 0.0, m
    if m.var <= 0:
        return (1.0, ZERO) if m.mean > limit_s else (0.0, m)
    mu, s = lognormal_params(m.mean, m.var)
    z = (math.log(limit_s) - mu) / s
    below = _phi(z)
    if below <= 1e-12:
        return 1.0, ZERO
    mean = math.exp(mu + s * s / 2) * _phi(z - s) / below
    second = math.exp(2 * mu + 2 * s * s) * _phi(z - 2 * s) / below
    return 1.0 - below, Moments(mean, max(second - mean * mean, 0.0))


def retransmit_delay(loss: float) -> Moments:
    """Added latency of one call over a path that drops ``loss`` of its packets (TCP retransmits).

    Each lost segment costs the RTO, doubled per repeated loss: per segment the expected cost is
    RTO * loss / (1 - 2 loss) (bounded near 50% loss, where the back-off stops converging).
    """
    if loss <= 0:
        return ZERO
    p = min(loss, 0.45)
    mean = SEGMENTS_PER_CALL * TCP_MIN_RTO_S * p / (1.0 - 2.0 * p)
    return Moments(mean, mean * TCP_MIN_RTO_S * 2.0)


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
    #: A proxy's fault filter holding a share of an operation's requests for a fixed time: (share, seconds).
    fault_delay: dict[OpKey, tuple[float, float]] = field(default_factory=dict)
    slowdown: dict[str, float] = field(default_factory=dict)
    #: Time a request waits before a busy service starts on it (CPU queue, throttled periods).
    queue_wait: dict[str, Moments] = field(default_factory=dict)
    #: Share of a service's requests lost this tick because the process serving them died.
    dropped: dict[str, float] = field(default_factory=dict)
    call_count: dict[tuple[str, str, str], float] = field(default_factory=dict)
    call_scale: dict[tuple[str, str, str], float] = field(default_factory=dict)
    server_error: dict[str, float] = field(default_factory=dict)
    #: An operation's own failures logged by another template than its flag's: (logs.errors key, {error}).
    error_log: dict[OpKey, tuple[str, str]] = field(default_factory=dict)


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
    #: Attempts per logical call (1 + retries of failed ones): what reaches the callee.
    attempts: float = 1.0


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
    if fast < 0 or (reach.cause == "auth" and call.auth_failure == "wait"):
        t = call.timeout_ms / 1000.0
        return Moments(t, (0.02 * t) ** 2)
    return Moments(fast, (fast / 2) ** 2)


def _dominant_cause(r: Reach, unreached: float, late: float, dropped: float, lost: float, callee_err: float) -> str | None:
    """The failure mode behind most of a call's failures; None when the callee's own errors dominate.
    The first of equal shares wins, in the order: the path's own cause, a missed deadline, a reset, an
    answer a proxy reset (a path that fails by one of the others names counts its share there)."""
    if r.cause == "reset":
        order: tuple[tuple[str, float], ...] = (("reset", dropped), ("deadline", late), ("http_abort", lost))
    elif r.cause and r.cause != "deadline":
        order = ((r.cause, unreached), ("deadline", late), ("reset", dropped), ("http_abort", lost))
    else:
        order = (("deadline", late), ("reset", dropped), ("http_abort", lost))
    shares: dict[str, float] = {}
    for name, value in order:
        shares[name] = shares.get(name, 0.0) + value
    cause = max(shares, key=lambda name: shares[name])
    return cause if shares[cause] > 0 and shares[cause] >= callee_err else None


def all_ok(q: float, n: float) -> float:
    """Share of requests whose ``n`` calls (each failing with ``q``) all succeed; a fractional count
    is a whole number of calls plus one more call made by that fraction of the requests."""
    whole = math.floor(n)
    return (1.0 - q) ** whole * (1.0 - (n - whole) * q) if n > 0 else 1.0


def _switched_off(stats: OpStats) -> bool:
    return bool(stats.calls) and all(co.count <= 0 for co in stats.calls)


class FlowSolver:
    """Solves one tick's flow over a fixed call graph."""

    def __init__(self, spec: AppSpec) -> None:
        self.spec = spec
        self.order = self._topological()
        #: each operation's own latency before any slowdown (its spec's log-normal)
        self._own = {key: lognormal(spec.op(*key).median_ms / 1000.0, spec.op(*key).sigma) for key in self.order}
        #: The exact bytes of the last inputs of :meth:`stats` and what they gave.
        self._last_stats: tuple[bytes, dict[OpKey, OpStats]] | None = None

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
        """Bottom-up: error probability and latency of every operation (rate-independent).

        A steady cluster asks the same question tick after tick: inputs whose pickle is the last
        call's byte for byte (every float to the bit) get the last answer, which nobody modifies.
        """
        key = pickle.dumps((reaches, knobs), protocol=pickle.HIGHEST_PROTOCOL)
        if self._last_stats is not None and self._last_stats[0] == key:
            return self._last_stats[1]
        out = self._solve(reaches, knobs)
        self._last_stats = (key, out)
        return out

    def _solve(self, reaches: dict[tuple[str, str, str], Reach], knobs: Knobs) -> dict[OpKey, OpStats]:
        out: dict[OpKey, OpStats] = {}
        for key in reversed(self.order):
            op = self.spec.op(*key)
            slow = knobs.slowdown.get(op.service, 1.0)
            self_t = self._own[key].scaled(slow)
            if op.service in knobs.queue_wait:
                self_t = self_t.plus(knobs.queue_wait[op.service])
            if key in knobs.extra_latency:
                self_t = self_t.plus(knobs.extra_latency[key])
            if key in knobs.fault_delay:
                share, held = knobs.fault_delay[key]
                self_t = mixture([(share, self_t.plus(Moments(held, 0.0))), (1.0 - share, self_t)])
            s, path = 1.0, ZERO
            errs: list[tuple[float, Moments]] = []
            #: requests answered early (a failed ``return`` call): their share and their time so far
            returned: list[tuple[float, Moments]] = []
            outcomes: list[CallOutcome] = []
            err_text, grpc_code = "", "OK"
            for c in op.calls:
                callee = out[(c.service, c.operation)]
                r = reaches[(op.service, op.id, c.id)]
                n = knobs.call_count.get((op.service, op.id, c.id), c.count) * knobs.call_scale.get((op.service, op.id, c.id), 1.0)
                dropped = knobs.dropped.get(c.service, 0.0)
                served_err = 1.0 - (1.0 - callee.p_err) * (1.0 - r.server_error_share * knobs.server_error.get(c.service, 1.0)) * (1.0 - dropped)
                # answers a proxy resets on their way back: the callee served them, the call still fails
                lost = (1.0 - served_err) * r.answer_lost
                srv_err = served_err + lost
                hop = Moments(NETWORK_HOP_S + r.delay_ms / 1000.0, r.delay_var_ms2 / 1e6).plus(retransmit_delay(r.loss))
                ok1 = callee.ok.plus(hop)
                late = 0.0
                if c.deadline_ms is not None:
                    late, ok1 = split_at(ok1, c.deadline_ms / 1000.0)
                deadline = Moments(c.deadline_ms / 1000.0, 0.0) if c.deadline_ms is not None else ZERO
                q = 1.0 - r.ok_share * (1.0 - srv_err) * (1.0 - late)
                fail_reach = _fail_latency(r, c)
                unreached = 1.0 - r.ok_share
                err1 = mixture([(unreached, fail_reach), (r.ok_share * served_err, callee.err.plus(hop)),
                                (r.ok_share * lost, callee.ok.plus(hop)), (r.ok_share * (1.0 - srv_err) * late, deadline)])
                attempts = 1.0
                if c.retries and q > 0:
                    # a failed attempt is retried at once: the call fails only when every attempt does
                    attempts = sum(q ** i for i in range(c.retries + 1))
                    ok1 = ok1.plus(err1.scaled(attempts - 1.0))
                    err1 = err1.scaled(c.retries + 1.0)
                    q = q ** (c.retries + 1)
                hold = knobs.fault_delay.get((c.service, c.operation))
                if c.parallel and n > 1 and hold is not None:
                    # the group waits for the hold when any of its n requests is held
                    share, d = hold
                    base = Moments(ok1.mean - share * d, max(ok1.var - share * (1.0 - share) * d * d, 0.0))
                    spread = Moments(base.mean * (1 + 0.25 * math.log(n)), base.var)
                    any_held = 1.0 - (1.0 - share) ** n
                    ok_n = mixture([(any_held, spread.plus(Moments(d, 0.0))), (1.0 - any_held, spread)])
                    err_n = err1
                elif c.parallel and n > 1:
                    ok_n = Moments(ok1.mean * (1 + 0.25 * math.log(n)), ok1.var)
                    err_n = err1
                else:
                    ok_n = ok1.scaled(n)
                    err_n = Moments(err1.mean + max(n - 1, 0) / 2 * ok1.mean, err1.var)
                p_all_ok = all_ok(q, n)
                cause = _dominant_cause(r, unreached, r.ok_share * (1.0 - srv_err) * late,
                                        r.ok_share * dropped, r.ok_share * lost, r.ok_share * (served_err - dropped))
                if cause is not None:
                    _, code, shape = CAUSES[cause]
                    text = shape.format(host=r.target.split(":")[0], target=r.target)
                else:
                    code, text = callee.grpc_code, callee.error_text
                outcomes.append(CallOutcome(c, r, s, n, q, ok1, err1, cause, text, code, attempts))
                if not c.awaited:
                    continue
                if c.on_error in ("propagate", "return"):
                    # the requests this call fails stop here: failed, or answered early by the caller
                    if p_all_ok < 1.0:
                        (errs if c.on_error == "propagate" else returned).append((s * (1.0 - p_all_ok), path.plus(err_n)))
                        if c.on_error == "propagate" and not err_text:
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
            early = sum(p for p, _ in returned)
            p_err = min(max(1.0 - s - early, 0.0), 1.0)
            ok = mixture([(s, path), *returned]) if early > 0 else path
            out[key] = OpStats(op, p_err, ok.plus(self_t), mixture(errs), outcomes, rate_err, err_text, grpc_code)
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
                rate[callee] = rate.get(callee, 0.0) + calls * co.attempts * co.reach.ok_share
        return rate, client
