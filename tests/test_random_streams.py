"""Randomness per service: one service's change never shifts another service's draws.

Run-to-run comparisons rest on it: FinOps oracle proximity compares the oracle's run with a reference
run of the same seed, and a change to one workload must move only what it causes (common random
numbers). A stream shared by the whole tick would let one extra replica reshuffle every later draw.
"""

from __future__ import annotations

from conftest import ShopTwin

#: The service scaled, and the services whose span counts may follow it (its callers' client spans).
SCALED = "email"
ITS_CALLERS = {"email", "checkout"}
MINUTES = 10
QUERIES = {
    "spans": "sum by (service_name, span_name, status_code) (traces_span_metrics_calls_total)",
    "memory": 'sum by (pod) (container_memory_working_set_bytes{namespace="otel-demo", container!=""})',
}


Series = dict[tuple[tuple[str, str], ...], float]


def _run(twin: ShopTwin, scale_to: int | None) -> dict[str, Series]:
    """The queries' values ``MINUTES`` after the healthy baseline, the service scaled to ``scale_to`` first."""
    twin.reset()
    if scale_to is not None:
        dep = twin.store.get("Deployment", "otel-demo", SCALED)
        dep["spec"]["replicas"] = scale_to
        twin.store.update(dep)
    twin.backend.twin.advance(MINUTES * 60.0)
    now = twin.backend.clock.now()
    return {name: {tuple(sorted(s.metric.items())): s.value for s in twin.backend.twin.engine.instant(q, now).data}
            for name, q in QUERIES.items()}


def _service(pod: str) -> str:
    return pod.rsplit("-", 2)[0]


def _of(labels: tuple[tuple[str, str], ...]) -> str:
    d = dict(labels)
    return d.get("service_name") or _service(d["pod"])


def test_scaling_one_service_leaves_every_other_services_draws_alone(shop_twin: ShopTwin) -> None:
    alone, scaled = _run(shop_twin, None), _run(shop_twin, 2)
    # Span counts follow the load, which the extra replica only splits; latencies are left out: they
    # follow CPU contention on shared nodes and every caller's latency up the chain (mechanisms).
    others = [k for k in alone["spans"] if _of(k) not in ITS_CALLERS]
    assert len({_of(k) for k in others}) > 10
    changed = [k for k in others if scaled["spans"].get(k) != alone["spans"][k]]
    assert not changed, f"span counts of services {SCALED}'s replicas cannot reach changed: {changed[:5]}"
    assert any(scaled["spans"].get(k) != v for k, v in alone["spans"].items() if _of(k) == SCALED), f"{SCALED}'s own spans did not change"
    # Memory follows each pod's load by tiny amounts; its noise must not be drawn again.
    others = [k for k in alone["memory"] if _of(k) not in ITS_CALLERS]
    assert len(others) > 10 and all(k in scaled["memory"] for k in others)
    moved = {_of(k): abs(scaled["memory"][k] / alone["memory"][k] - 1) for k in others}
    assert max(moved.values()) < 1e-6, moved
