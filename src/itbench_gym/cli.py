"""``itbench-gym``: run episodes, list and validate scenarios, serve a twin, run PromQL tests."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _summary(evaluation: dict[str, Any]) -> dict[str, Any]:
    diagnosis = evaluation["diagnosis"]
    mitigation = evaluation["mitigation"] or {}
    return {
        "fault_localisation_pass@1": diagnosis["fl_pass"],
        "ntam_fl": diagnosis["ntam_fl"],
        "ntam_fpc": diagnosis["ntam_fpc"],
        "mitigation_pass": mitigation.get("passed"),
        "mitigation_reasons": mitigation.get("reasons"),
        "mttd_seconds": evaluation["times"]["mttd"],
        "mttr_seconds": evaluation["times"]["mttr"],
        "destructive_commands": evaluation["safety"]["destructive_count"],
        "reward": evaluation["reward"],
    }


def cmd_run(args: argparse.Namespace) -> int:
    import itbench_gym
    from itbench_gym.agents import AGENTS, run_episode

    env = itbench_gym.make(args.scenario, render_mode="ansi")
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, itbench_gym.ITBenchEnv)
    try:
        for episode in range(args.episodes):
            agent = AGENTS[args.agent](unwrapped)
            info = run_episode(env, agent, seed=args.seed + episode)
            record = unwrapped.episode
            assert record is not None
            if args.transcript:
                print(env.render())
            if args.out:
                out = Path(args.out)
                out.mkdir(parents=True, exist_ok=True)
                record.to_jsonl(out / f"{record.episode_id}.jsonl")
            line = {"episode_id": record.episode_id, "steps": len(record.steps), **_summary(info["evaluation"])}
            print(json.dumps(line, default=str))
            if args.results:
                spec = unwrapped.scenario
                result = {
                    "episode_id": record.episode_id,
                    "scenario": spec.id,
                    "class": spec.cls,
                    "complexity": spec.complexity.level,
                    "domain": spec.domain,
                    "agent": args.agent,
                    "seed": record.seed,
                    "evaluation": info["evaluation"],
                }
                with open(args.results, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(result, default=str) + "\n")
    finally:
        env.close()
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """pass@k and mean ± standard error per group, from results files written by ``run --results``."""
    from itbench_gym.evaluation.aggregate import format_table, summarise

    results = []
    for path in args.files:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    results.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    print(f"{path}:{number}: not a JSON line: {exc.msg}", file=sys.stderr)
                    return 1
    k_values = sorted({int(k) for k in args.k.split(",")})
    try:
        summaries = summarise(results, by=tuple(args.by.split(",")), k_values=k_values)
    except (KeyError, TypeError, ValueError) as exc:
        print(f"cannot summarise: {exc}", file=sys.stderr)
        return 1
    print(format_table(summaries, metrics=args.metrics.split(",") if args.metrics else None))
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

    from itbench_gym.backends.sim.backend import SimBackend
    from itbench_gym.registry import get_spec
    from itbench_gym.tasks import make_task

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
        print(json.dumps(line), flush=True)
        while not stop.wait(1.0):
            if args.realtime:
                backend.advance(args.speed)
    finally:
        task.close()
        backend.close()
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

    run = sub.add_parser("run", help="play episodes with a reference agent and print their evaluation")
    run.add_argument("scenario", help="scenario id, e.g. SRE-CacheFailure-v0")
    run.add_argument("--agent", choices=["oracle", "random"], default="oracle")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--episodes", type=int, default=1)
    run.add_argument("--out", help="write each episode as JSONL into this folder")
    run.add_argument("--transcript", action="store_true", help="print the episode transcript")
    run.add_argument("--results", help="append each episode's full result (with its evaluation) to this JSONL file")
    run.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", help="pass@k and mean ± SE tables from results files")
    rep.add_argument("files", nargs="+", type=Path)
    rep.add_argument("--by", default="scenario", help="comma-separated grouping keys: scenario, class, complexity, agent")
    rep.add_argument("--k", default="1", help="comma-separated k values for pass@k")
    rep.add_argument("--metrics", help="comma-separated metrics (default: all)")
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
    srv.set_defaults(func=cmd_serve)

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

    ptest = sub.add_parser("promqltest", help="run Prometheus promqltest files against the twin's PromQL engine")
    ptest.add_argument("files", nargs="+", type=Path)
    ptest.set_defaults(func=cmd_promqltest)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bench"]:
        return cmd_bench(args_list[1:])
    args = build_parser().parse_args(args_list)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
