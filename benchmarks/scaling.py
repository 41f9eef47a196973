"""Figure 5: how the twin's cost grows with the application: synthetic apps of N services.

For each size, ``benchmarks.synthetic`` writes an app (pods and series in proportion to N) and the
twin is built from it (deploy, first scrape and rule evaluation), advanced one tick (the first tick
also loads the rule groups), advanced 10 simulated minutes (a healthy baseline: 40 ticks) and then
timed over single steady ticks. No scenario targets a synthetic app, so this is the twin's part of a
new-seed reset without a fault. A line fit over the sizes gives the cost per service, and a log-log
fit the growth order (1.0: linear).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.options import Options
from benchmarks.report import Row, Section, timed_ms
from benchmarks.synthetic import NAMESPACE, write_app

KEY, TITLE = "synthetic", "5. Scaling with application size (synthetic apps)"
BASELINE_SECONDS = 600.0
TICK_SECONDS = 15.0
STEADY_TICKS = 5
#: What is fitted against the number of services: (row label, key of the per-size timings).
FITTED = (("twin build", "build_ms"), ("one steady tick", "tick_ms"), ("10-minute advance", "baseline_ms"))


def measure(size: int, directory: Path) -> dict[str, Any]:
    """Timings (ms) and sizes of one synthetic app of ``size`` services."""
    from itbench_gym.backends.sim.twin import Twin

    app = write_app(directory, size, seed=size)
    start = time.perf_counter()
    twin = Twin(directory, seed=0)
    build = (time.perf_counter() - start) * 1000.0
    first = timed_ms(lambda: twin.advance(TICK_SECONDS), 1)
    baseline = timed_ms(lambda: twin.advance(BASELINE_SECONDS), 1)
    ticks = timed_ms(lambda: twin.advance(TICK_SECONDS), STEADY_TICKS)
    pods = [p for p in twin.cluster.store.list("Pod", NAMESPACE) if (p.get("status") or {}).get("phase") == "Running"]
    return {"services": app.services, "operations": app.operations, "edges": app.edges, "nodes": app.nodes,
            "pods_expected": app.pods, "pods_running": len(pods), "series": len(twin.tsdb.series(None)),
            "app_series": len(twin.tsdb.series({"namespace": NAMESPACE})),
            "build_ms": build, "first_tick_ms": first[0], "baseline_ms": baseline[0], "tick_ms": ticks}


def fit(services: list[int], ms: list[float]) -> dict[str, float]:
    """Least-squares line (ms per service, intercept) and log-log slope (growth order) of ``ms`` over ``services``."""
    x, y = np.asarray(services, dtype=np.float64), np.asarray(ms, dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    order = float(np.polyfit(np.log(x), np.log(y), 1)[0])
    return {"ms_per_service": float(slope), "intercept_ms": float(intercept), "growth_order": order}


def run(opts: Options) -> Section:
    section = Section(KEY, TITLE)
    measured: dict[int, dict[str, Any]] = {}
    for size in opts.sizes:
        with tempfile.TemporaryDirectory(prefix=f"itbench-synthetic-{size}-") as tmp:
            try:
                measured[size] = m = measure(size, Path(tmp))
            except Exception as exc:  # a size the twin cannot run is a finding, reported with its reason
                section.rows.append(Row(f"{size} services", "", na=f"{type(exc).__name__}: {exc}"))
                continue
        label = f"{size} services ({m['pods_running']} pods, {m['series']:,} series)"
        section.rows += [Row(f"{label}: twin build", "ms", [m["build_ms"]]),
                         Row(f"{label}: first tick", "ms", [m["first_tick_ms"]]),
                         Row(f"{label}: 10-minute advance", "ms", [m["baseline_ms"]]),
                         Row(f"{label}: one steady tick", "ms", m["tick_ms"])]
    section.facts["sizes"] = {str(k): v for k, v in measured.items()}
    if len(measured) >= 2:
        sizes = sorted(measured)
        for label, key in FITTED:
            values = [float(np.median(measured[s][key])) for s in sizes]
            f = fit([measured[s]["services"] for s in sizes], values)
            section.facts[f"fit_{key}"] = f
            section.rows += [Row(f"{label}: cost per service (line fit)", "ms", [f["ms_per_service"]]),
                             Row(f"{label}: growth order (log-log slope; 1 = linear)", "", [f["growth_order"]])]
    section.notes.append("Each synthetic app runs on the shop's cluster (kube-system, kube-prometheus-stack with its rules, "
                         "metrics-server, Chaos Mesh) with worker nodes added in proportion to its pods; sizes that the twin "
                         "cannot run are n/a with its error.")
    return section
