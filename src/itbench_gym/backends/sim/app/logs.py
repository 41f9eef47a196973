"""Container logs synthesised on demand from the recorded tick states.

Each tick records, per container, what it did (requests served per operation, failures with their
cause, fault-specific activity); a query replays the ticks it covers with an RNG keyed by
(seed, tick, pod, container), so the same query always returns the same lines and lines cost
nothing until someone reads them.
"""

from __future__ import annotations

import hashlib
import uuid
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from .spec import AppSpec

MAX_LINES_PER_TICK = 60


@dataclass(frozen=True)
class LogActivity:
    """One kind of line a container wrote during a tick, at ``rate`` lines per second."""

    template: str
    rate: float
    context: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TickLog:
    t: float
    dt: float
    containers: dict[tuple[str, str], tuple[LogActivity, ...]]
    starts: dict[tuple[str, str], float]


class _Fields(dict[str, str]):
    """Values for template fields, drawn from a keyed RNG."""

    def __init__(self, rng: np.random.Generator, t: float, pod: str, context: dict[str, str]) -> None:
        super().__init__()
        self.rng, self.t, self.pod, self.context = rng, t, pod, context

    def __missing__(self, key: str) -> str:
        if key in self.context:
            return self.context[key]
        r = self.rng
        dt = datetime.fromtimestamp(self.t, tz=timezone.utc)
        products = ["OLJCESPC7Z", "66VCHSJNUP", "1YMWWN1N4O", "L9ECAV7KIM", "2ZYFJ3GM2N", "0PUK6V6EV0",
                    "LS4PSXUNUM", "9SIQT8TOJO", "6E92ZMYYFZ", "HQTGWGPNH4"]
        values = {
            "iso": dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z",
            "clf": dt.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "epoch_ms": str(int(self.t * 1000)),
            "valkey_ts": dt.strftime("%d %b %Y %H:%M:%S.") + f"{dt.microsecond // 1000:03d}",
            "sec": f"{r.uniform(0.005, 0.05):.4f}",
            "ms": str(int(r.integers(1, 40))),
            "uuid": str(uuid.UUID(bytes=r.bytes(16), version=4)),
            "uuid2": str(uuid.UUID(bytes=r.bytes(16), version=4)),
            "trace": r.bytes(16).hex(),
            "span": r.bytes(8).hex(),
            "n": str(int(r.integers(1, 500))),
            "ip": f"10.244.{int(r.integers(1, 4))}.{int(r.integers(2, 250))}",
            "pod": self.pod,
            "email": f"{['larry', 'sergey', 'ada', 'grace', 'alan'][int(r.integers(0, 5))]}_{int(r.integers(10, 99))}@example.com",
            "category": ["binoculars", "telescopes", "accessories", "assembly", "travel", "books"][int(r.integers(0, 6))],
            "bytes": str(int(r.integers(200, 9000))),
            "method": "GET", "path": "/", "status": "200", "error": "", "grpc_code": "OK",
            "op_text": "User accessing index page", "upstream": "frontend", "upstream_ip": "10.244.1.20",
        }
        for i, k in enumerate(["product", "product2", "product3", "product4", "product5"]):
            values[k] = products[(int(self.t) + i * 3 + int(r.integers(0, 10))) % len(products)]
        if key not in values:
            raise KeyError(key)
        self[key] = values[key]
        return values[key]


def _rng(seed: int, tick_t: float, pod: str, container: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{pod}/{container}".encode(), digest_size=8).digest()
    return np.random.default_rng([seed, int(round(tick_t * 1000)), int.from_bytes(digest, "big"), zlib.crc32(b"logs")])


def render(spec: AppSpec, seed: int, history: list[TickLog], pod: str, container: str, start: float, end: float) -> list[tuple[float, str]]:
    lines: list[tuple[float, str]] = []
    key = (pod, container)
    for tick in history:
        lo, hi = tick.t - tick.dt, tick.t
        if hi <= start or lo >= end:
            continue
        rng = _rng(seed, tick.t, pod, container)
        start_t = tick.starts.get(key)
        if start_t is not None and start <= start_t <= end:
            for i, text in enumerate(_startup(spec, container)):
                lines.append((start_t + 0.05 * i, text.format_map(_Fields(rng, start_t, pod, {}))))
        for act in tick.containers.get(key, ()):
            n = min(int(rng.poisson(act.rate * tick.dt)), MAX_LINES_PER_TICK)
            for ts in np.sort(rng.uniform(lo, hi, size=n)):
                if start <= ts <= end:
                    lines.append((float(ts), act.template.format_map(_Fields(rng, float(ts), pod, dict(act.context)))))
    lines.sort(key=lambda x: x[0])
    return lines


def _startup(spec: AppSpec, container: str) -> tuple[str, ...]:
    for svc in spec.services.values():
        if svc.container == container:
            return svc.logs.startup
    return ()


def activity(template: str | None, rate: float, **context: Any) -> list[LogActivity]:
    if not template or rate <= 0:
        return []
    return [LogActivity(template, rate, tuple(sorted((k, str(v)) for k, v in context.items())))]
