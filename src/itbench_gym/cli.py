"""``itbench-gym``: run agents over scenarios and report the leaderboard, list and validate scenarios, serve a twin, run PromQL tests."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Wall seconds between two advances of a ``serve --realtime`` twin.
REALTIME_STEP = 0.1


def cmd_run(args: argparse.Namespace) -> int:
    """Every (scenario, run) episode of one agent into ``--out``, then the leaderboard of that folder."""
    from itbench_gym.runner import leaderboard
    from itbench_gym.runner.batch import SelectionError, run_batch
    from itbench_gym.runner.store import StoreError

    patterns = [*args.scenario, *(args.scenarios or [])]
    if not patterns:
        print("itbench-gym run: name scenarios (ids or globs, e.g. 'SRE-*')", file=sys.stderr)
        return 2
    try:
        result = run_batch(args.agent, patterns, runs=args.runs, workers=args.workers, seed=args.seed, out=args.out,
                           resume=args.resume, executor=args.executor, address=args.address, label=args.label, backend=args.backend,
                           echo=lambda line: print(line, flush=True))
    except (SelectionError, StoreError, ValueError, RuntimeError) as exc:
        print(f"itbench-gym run: {exc}", file=sys.stderr)
        return 2
    board = leaderboard.load([args.out], k_values=_k_values(args.k))
    print()
    print(leaderboard.summary_markdown(board))
    if args.html:
        _write_html(board, Path(args.html))
    print(f"\n{result.ran} episode(s) run, {result.skipped} resumed from {result.store}, {result.errors} error(s), "
          f"{result.seconds:.0f} s")
    return 1 if result.errors else 0


def _k_values(text: str) -> list[int]:
    try:
        ks = sorted({int(k) for k in text.split(",") if k.strip()})
    except ValueError:
        raise SystemExit(f"itbench-gym: --k takes comma-separated integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise SystemExit(f"itbench-gym: --k values must be at least 1, got {text!r}")
    return ks


def _write_html(board: Any, path: Path) -> None:
    from itbench_gym.runner.html_report import render

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(board), encoding="utf-8")
    print(f"wrote {path}")


def cmd_report(args: argparse.Namespace) -> int:
    """The leaderboard of one or more ``run --out`` folders: Markdown on stdout, optionally files."""
    from itbench_gym.runner import leaderboard
    from itbench_gym.runner.store import StoreError

    try:
        board = leaderboard.load(args.folders, k_values=_k_values(args.k))
    except StoreError as exc:
        print(f"itbench-gym report: {exc}", file=sys.stderr)
        return 1
    text = leaderboard.markdown_report(board)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    if args.html:
        _write_html(board, Path(args.html))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    import itbench_gym

    for summary in itbench_gym.list_scenarios(domain=args.domain, complexity=args.complexity, cls=args.cls):
        print(f"{summary['id']:40} {summary['domain']:7} {summary['complexity']:7} {summary['name']}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Check the spec files, then prove each scenario on the twin (``itbench_gym.validate``)."""
    from itbench_gym.validate.run import main as validate_main

    return validate_main([str(a) for a in args.targets], seeds=args.seeds, workers=args.workers, results=args.results,
                         static=args.static)


def _write_private(path: Path, data: bytes) -> None:
    """Write a credential file readable by its owner only (0600), whatever the umask."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def cmd_serve(args: argparse.Namespace) -> int:
    """One twin with the scenario's faults injected (``--healthy``: not), for agents and tools outside Python."""
    import signal
    import threading

    from itbench_gym.adapters import itbench_handoff
    from itbench_gym.backends.sim.backend import SimBackend
    from itbench_gym.registry import get_spec
    from itbench_gym.tasks import make_task

    if args.healthy and args.itbench_agent_dir:
        print("itbench-gym serve: --itbench-agent-dir grades an incident; it cannot be used with --healthy", file=sys.stderr)
        return 2
    spec = get_spec(args.scenario)
    task = make_task(spec)
    backend = SimBackend(kube_port=args.port)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if args.healthy:
            backend.start(spec, args.seed)
        else:
            with backend.setting_up():
                task.setup(backend, args.seed)
        endpoints = backend.endpoints
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        _write_private(out / "kubeconfig", endpoints.kubeconfig.read_bytes())
        _write_private(out / "admin.kubeconfig", backend.admin_kubeconfig.read_bytes())
        line = {
            "scenario": spec.id,
            "seed": args.seed,
            "kubernetes": backend.kube_url,
            "kubeconfig": str((out / "kubeconfig").resolve()),
            "admin_kubeconfig": str((out / "admin.kubeconfig").resolve()),
            "prometheus": endpoints.prometheus,
            "grafana": endpoints.grafana,
            "alertmanager": endpoints.alertmanager,
            "loki": endpoints.loki,
            "jaeger": endpoints.jaeger,
            "realtime": args.realtime,
        }
        handoff = Path(args.itbench_agent_dir) if args.itbench_agent_dir else None
        if handoff is not None:
            line["scenario_data"] = str(itbench_handoff.write_scenario_data(handoff, spec, backend).resolve())
        print(json.dumps(line), flush=True)
        started_wall, started_sim = time.monotonic(), backend.clock.now()
        while not stop.wait(REALTIME_STEP if args.realtime else 1.0):
            if args.realtime:  # follow the wall clock from the start, so slow ticks do not make the twin drift behind
                backend.advance(started_sim + (time.monotonic() - started_wall) * args.speed - backend.clock.now())
            output = itbench_handoff.agent_output(handoff) if handoff is not None else None
            if handoff is not None and output is not None:
                evaluation = itbench_handoff.grade(handoff, output, task, backend)
                print(json.dumps({"graded": str(output), "passed": evaluation.get("passed"),
                                  "evaluation": str(handoff / itbench_handoff.EVALUATION)}), flush=True)
                break
    finally:
        task.close()
        backend.close()
    return 0


def cmd_cluster(args: argparse.Namespace) -> int:
    """``cluster check``: what a cluster lacks for an app; ``cluster manifests``: the app and its stack as YAML."""
    from itbench_gym.backends.kubernetes.config import ClusterConfig, ClusterConfigError
    from itbench_gym.lang import yamltext
    from itbench_gym.paths import envs_dir

    app_dir = envs_dir() / args.app
    if not (app_dir / "app.yaml").is_file():
        print(f"itbench-gym cluster: no app {args.app!r} (apps: {', '.join(sorted(p.name for p in envs_dir().iterdir() if (p / 'app.yaml').is_file()))})",
              file=sys.stderr)
        return 2
    if args.action == "manifests":
        from itbench_gym.backends.kubernetes.provision import app_objects, stack_objects
        from itbench_gym.backends.rbac import agent_rbac_objects
        from itbench_gym.spec.appfacts import load_app_facts

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        namespace = load_app_facts(app_dir).namespace or "default"
        for name, objects in (("stack.yaml", stack_objects(app_dir)), ("app.yaml", app_objects(app_dir)),
                              ("agent-access.yaml", agent_rbac_objects([namespace]))):
            (out / name).write_text("---\n".join(yamltext.dump(o) for o in objects))
            print(f"wrote {out / name} ({len(objects)} objects)")
        print(f"apply in this order: kubectl apply --server-side -f {out / 'stack.yaml'}, then app.yaml and agent-access.yaml")
        return 0
    from itbench_gym.backends.kubernetes.check import check_cluster

    try:
        config = ClusterConfig.load(args.config) if args.config else ClusterConfig.from_environment()
    except ClusterConfigError as exc:
        print(f"itbench-gym cluster check: {exc}", file=sys.stderr)
        return 2
    findings = check_cluster(config, app_dir)
    for finding in findings:
        print(finding.line())
    missing = sum(not f.ok for f in findings)
    print(f"{len(findings) - missing} met, {missing} missing")
    return 1 if missing else 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """One episode's tools over MCP on stdio (``itbench_gym.adapters.mcp_server``)."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        print("itbench-gym mcp needs the MCP SDK: pip install 'itbench-gym[mcp]'", file=sys.stderr)
        return 2
    from itbench_gym.adapters.mcp_server import serve_stdio

    serve_stdio(args.scenario, args.seed)
    return 0


def render_env_doc() -> str:
    """``docs/environment.md``: the env class's own documentation, as Gymnasium's pages render it,
    with the shipped scenarios (not an ITBench library this process may have loaded)."""
    import inspect

    from itbench_gym.env import ITBenchEnv
    from itbench_gym.registry import list_scenarios

    doc = inspect.cleandoc(ITBenchEnv.__doc__ or "")
    summary, _, body = doc.partition("\n\n")
    rows = "\n".join(
        f"| `{s['id']}` | {s['domain']} | {s['class']} | {s['complexity']} | {s['name']} |" for s in list_scenarios(library=False)
    )
    return (
        "# ITBenchEnv\n\n<!-- generated by `itbench-gym docs`; do not edit by hand -->\n\n"
        f"{summary}\n\n{body.replace('## ', '### ')}\n\n## Scenarios\n\n"
        "| id | domain | class | complexity | name |\n|---|---|---|---|---|\n"
        f"{rows}\n\nEvery SRE scenario also has `-NoTraces-` and `-NoLogs-` variants that mask a modality.\n"
    )


def cmd_docs(args: argparse.Namespace) -> int:
    """A generated page: ``environment`` (docs/environment.md) or ``scenarios`` (docs/scenarios.md)."""
    if args.topic == "scenarios":
        from itbench_gym.validate.catalogue import read_results, render_scenarios_doc

        text = render_scenarios_doc(read_results(args.results), args.library)
    else:
        text = render_env_doc()
    if args.write:
        Path(args.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def cmd_promqltest(args: argparse.Namespace) -> int:
    from itbench_gym.backends.sim.promql.promqltest import main as promqltest_main

    return promqltest_main([str(f) for f in args.files])


def cmd_conformance(args: argparse.Namespace) -> int:
    """Run an upstream policy test corpus against the twin's engine: 0 when every evaluated case passes."""
    from itbench_gym.policy.conformance import format_report

    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"itbench-gym conformance {args.engine}: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.engine == "kyverno":
        from itbench_gym.policy.kyverno.conformance import run_kyverno_suites

        result = run_kyverno_suites(args.paths)
    else:
        from itbench_gym.policy.gatekeeper.suites import run_gatekeeper_suites

        result = run_gatekeeper_suites(args.paths)
    if not result.suites:
        print(f"itbench-gym conformance {args.engine}: no test suite under {', '.join(map(str, args.paths))} "
              f"({'kyverno-test.yaml' if args.engine == 'kyverno' else 'suite.yaml'} files)", file=sys.stderr)
        return 2
    print(format_report(result))
    return 1 if result.failures or result.errors else 0


def cmd_bench(argv: Sequence[str]) -> int:
    """The performance harness of a source checkout (``benchmarks/`` beside ``src/``), as ``python -m benchmarks``."""
    import importlib

    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "harness.py").is_file():
        print("itbench-gym bench: the benchmark harness is part of the source checkout (benchmarks/), "
              "not of the installed package", file=sys.stderr)
        return 2
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    harness = importlib.import_module("benchmarks.harness")
    return int(harness.main(argv, prog="itbench-gym bench"))


def cmd_generate(args: argparse.Namespace) -> int:
    """Draft, prove and write scenario variants (itbench_gym.generator); one line per judged draft."""
    from itbench_gym.generator import generate

    def report(outcome: Any) -> None:
        verdict = "ok" if outcome.doc is not None else f"rejected: {outcome.reason}"
        print(f"{outcome.draft.scenario_id} {outcome.draft.key} {outcome.seconds:.1f}s {verdict}", flush=True)

    result = generate(args.count, args.seed, args.faults, args.noise, out=args.out, workers=args.workers, progress=report)
    for note in result.skipped:
        print(f"skipped template: {note}", file=sys.stderr)
    print(f"{len(result.variants)} variants written to {args.out}, {len(result.rejected)} rejected, {result.seconds:.0f} s")
    return 0 if len(result.variants) == args.count else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="itbench-gym", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run an agent over scenarios (every scenario × run), store the results, print the leaderboard")
    run.add_argument("scenario", nargs="*", help="scenario ids or globs (as --scenarios)")
    run.add_argument("--scenarios", nargs="+", help="scenario ids or shell-style globs over them, e.g. 'SRE-*'")
    run.add_argument("--agent", default="oracle", help="oracle, noop, random, heuristic, or module:Class (a factory taking the env)")
    run.add_argument("--label", help="the agent's name in the results (default: the agent's name, with its model)")
    run.add_argument("--runs", type=int, default=1, help="episodes per scenario (default 1)")
    run.add_argument("--workers", type=int, default=1, help="episodes at once (default 1: in this process)")
    run.add_argument("--executor", choices=["process", "ray"], default="process")
    run.add_argument("--backend", choices=["sim", "kubernetes"], default="sim",
                     help="the embedded twin (default) or the real cluster $ITBENCH_GYM_CLUSTER configures (one episode at a time)")
    run.add_argument("--address", help="with --executor ray: the cluster to join (default: start a local one)")
    run.add_argument("--seed", type=int, default=0, help="base seed; each episode's seed derives from (seed, scenario, run)")
    run.add_argument("--out", type=Path, default=Path("results"), help="results folder (results.sqlite; default ./results)")
    run.add_argument("--resume", action="store_true", help="skip the episodes the folder already holds")
    run.add_argument("--k", default="1", help="comma-separated k for pass@k in the printed table")
    run.add_argument("--html", help="also write the leaderboard page here")
    run.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", help="leaderboard tables (and an HTML page) from run --out folders")
    rep.add_argument("folders", nargs="+", type=Path)
    rep.add_argument("--k", default="1", help="comma-separated k values for pass@k")
    rep.add_argument("--markdown", type=Path, help="write the Markdown report to this file")
    rep.add_argument("--html", type=Path, help="write the self-contained HTML page to this file")
    rep.set_defaults(func=cmd_report)

    lst = sub.add_parser("list", help="list scenarios")
    lst.add_argument("--domain", choices=["sre", "ciso", "finops"])
    lst.add_argument("--complexity", choices=["easy", "medium", "hard"])
    lst.add_argument("--class", dest="cls")
    lst.set_defaults(func=cmd_list)

    val = sub.add_parser("validate", help="check scenario spec files, then prove each scenario on the twin: alerts fire, "
                         "symptoms show, the oracle passes, a no-op and a wrong fix fail (default: all shipped specs)")
    val.add_argument("targets", nargs="*", help="scenario ids, globs over ids ('ITBench-*'), spec files or folders, "
                     "ITBench library folders")
    val.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per scenario (default 1)")
    val.add_argument("--workers", type=int, default=1, help="worker processes, each with its own twins (default 1)")
    val.add_argument("--static", action="store_true", help="only check the spec files (schema, catalogue, references)")
    val.add_argument("--results", type=Path, help="merge each scenario's result into this JSON file "
                     "(what `itbench-gym docs scenarios` reads for the validation status)")
    val.set_defaults(func=cmd_validate)

    srv = sub.add_parser("serve", help="serve one twin with the scenario's faults injected until SIGINT/SIGTERM")
    srv.add_argument("scenario")
    srv.add_argument("--seed", type=int, default=0)
    srv.add_argument("--port", type=int, default=0, help="Kubernetes API port on 127.0.0.1 (default: any free port)")
    srv.add_argument("--out", default=".", help="folder for kubeconfig (agent) and admin.kubeconfig")
    srv.add_argument("--healthy", action="store_true", help="serve the healthy baseline without injecting the faults "
                     "(to inject them from outside, as on a real cluster)")
    srv.add_argument("--realtime", action="store_true", help="let the twin's clock follow the wall clock")
    srv.add_argument("--speed", type=float, default=1.0, help="with --realtime: simulated seconds per wall second")
    srv.add_argument("--itbench-agent-dir", help="ITBench's agent hand-off: write scenario_data.json here, then grade the "
                     "agent_output.json the agent leaves here (into evaluation.json) and exit")
    srv.set_defaults(func=cmd_serve)

    clu = sub.add_parser("cluster", help="a real cluster for backend=\"kubernetes\": check what it lacks, or write the "
                         "manifests of an app and its stack")
    clu.add_argument("action", choices=("check", "manifests"))
    clu.add_argument("--app", default="astronomy-shop", help="the app under envs/ (default: astronomy-shop)")
    clu.add_argument("--config", help="cluster configuration YAML (default: $ITBENCH_GYM_CLUSTER, else the usual kubeconfig)")
    clu.add_argument("--out", default="cluster-manifests", help="with manifests: the folder to write")
    clu.set_defaults(func=cmd_cluster)

    mcp = sub.add_parser("mcp", help="serve one episode's tools (and submit) to an MCP client over stdio")
    mcp.add_argument("scenario")
    mcp.add_argument("--seed", type=int, default=0)
    mcp.set_defaults(func=cmd_mcp)

    gen = sub.add_parser("generate", help="generate scenario variants that validate (faults on other targets, noise)")
    gen.add_argument("--count", type=int, required=True)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--faults", type=int, default=1, help="faults per variant")
    gen.add_argument("--noise", action="store_true", help="add background noise (an unrelated restart or a load surge)")
    gen.add_argument("--out", type=Path, default=Path("generated"), help="folder for the spec files")
    gen.add_argument("--workers", type=int, default=1, help="processes that judge variants")
    gen.set_defaults(func=cmd_generate)

    docs = sub.add_parser("docs", help="print a generated page: docs/environment.md (the env's documentation) or "
                          "docs/scenarios.md (every scenario with its validation status)")
    docs.add_argument("topic", nargs="?", choices=["environment", "scenarios"], default="environment")
    docs.add_argument("--results", type=Path, default=Path("docs/validation-results.json"),
                      help="scenarios: the results file `validate --results` wrote (default docs/validation-results.json)")
    docs.add_argument("--library", type=Path, help="scenarios: also list this ITBench library folder's scenarios")
    docs.add_argument("--write", type=Path, help="write the page to this file instead of printing it")
    docs.set_defaults(func=cmd_docs)

    # Parsed by the harness itself (main() hands it everything after `bench`): listed here for --help.
    sub.add_parser("bench", add_help=False, help="run the performance harness of a source checkout and write benchmarks.json/.md "
                   "(`itbench-gym bench --help`; same options as `python -m benchmarks`)")

    conf = sub.add_parser("conformance", help="run Kyverno kyverno-test.yaml or Gatekeeper suite.yaml suites against the "
                          "twin's policy engines; per-case failures, then `N passed, M failed, K skipped`")
    conf.add_argument("engine", choices=("kyverno", "gatekeeper"))
    conf.add_argument("paths", nargs="+", type=Path, help="suite files, or folders searched for them")
    conf.set_defaults(func=cmd_conformance)

    ptest = sub.add_parser("promqltest", help="run Prometheus promqltest files against the twin's PromQL engine")
    ptest.add_argument("files", nargs="+", type=Path)
    ptest.set_defaults(func=cmd_promqltest)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bench"]:
        return cmd_bench(args_list[1:])
    args = build_parser().parse_args(args_list)
    try:
        return int(args.func(args))
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as a Unix tool killed by SIGPIPE does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the interpreter's last flush goes nowhere
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
