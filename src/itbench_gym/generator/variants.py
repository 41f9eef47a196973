"""Draw variants (catalogue faults on other targets, several at once, optional noise), decide their
triggering alerts on the twin, and keep only those that validate.

A variant is proven as a hand-written scenario is: its document passes the spec checks (schema,
fault arguments, references into ``envs/<app>/``, ground truth); a twin run from the healthy
baseline shows which alerts its faults make fire (those on the services the faults' effects can
reach, by the call graph); and an oracle episode of the final spec — whose reset waits for exactly
those alerts — passes evaluation (root cause found, mitigation cleared the alerts). A variant that
fails any step is dropped with its reason.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itbench_gym.generator.groundtruth import build_ground_truth, call_graph, chain, primary, reach, technologies
from itbench_gym.generator.templates import Candidate, Noise, canonical, fault_candidates, load_templates, noise_candidates

if TYPE_CHECKING:
    from itbench_gym.backends.sim.kube.store import ObjectStore

#: Locust users of a variant without a load surge (ITBench's value).
DEFAULT_USERS = 50
#: Longest twin time a variant's faults get to make an alert fire.
ALERT_WAIT_SECONDS = 900.0
#: Twin time between two reads of the alerts while deciding.
_POLL_SECONDS = 30.0
#: After every fault has an alert, this much longer, so alerts pending at that moment are seen too.
_LINGER_SECONDS = 60.0
#: Labels that tie an alert to a service, in order of preference (the last two: Istio's, of the
#: destination of the requests a mesh alert counts).
_SERVICE_LABELS = ("service_name", "container", "consumergroup", "destination_canonical_service", "destination_app")
#: Istio's labels of the source of the requests a mesh alert counts: such an alert is about that
#: service's requests too (a caller that cannot resolve its callee opens no connection to it).
_SOURCE_LABELS = ("source_canonical_service", "source_app")
#: Draws in a row that give no new variant before the space counts as exhausted.
_MAX_REPEATS = 2000


@dataclass(frozen=True)
class Draft:
    """A drawn combination of fault candidates and noise, before it is run."""

    index: int
    candidates: tuple[Candidate, ...]
    noise: Noise | None = None

    @property
    def key(self) -> str:
        return canonical([c.key for c in self.candidates] + ([self.noise.key] if self.noise else []))

    @property
    def scenario_id(self) -> str:
        return f"SRE-Gen-{hashlib.sha256(self.key.encode()).hexdigest()[:10]}-v0"

    @property
    def users(self) -> int:
        return self.noise.users if self.noise and self.noise.users else DEFAULT_USERS

    def fault_entries(self) -> list[Mapping[str, Any]]:
        """Faults in injection order, then each distinct waiter once, then the noise."""
        out: list[Mapping[str, Any]] = [f for c in self.candidates for f in c.faults]
        seen: set[str] = set()
        for w in (w for c in self.candidates for w in c.waiters):
            if canonical(w) not in seen:
                seen.add(canonical(w))
                out.append(w)
        return out + list(self.noise.faults if self.noise else ())


@dataclass(frozen=True)
class Outcome:
    """What became of a draft: its spec document when it validated, else the reason it did not."""

    draft: Draft
    doc: dict[str, Any] | None
    reason: str = ""
    seconds: float = 0.0


@dataclass
class Generation:
    """The result of :func:`itbench_gym.generate`."""

    variants: list[Outcome] = field(default_factory=list)
    rejected: list[Outcome] = field(default_factory=list)
    #: Templates not used, and why (their fault is not in the catalogue).
    skipped: list[str] = field(default_factory=list)
    #: Files written (``out``), in variant order.
    files: list[Path] = field(default_factory=list)
    seconds: float = 0.0


class _Space:
    """An app's candidates and noise, with the facts drafting and judging need (one per process)."""

    def __init__(self, app: str) -> None:
        from itbench_gym.backends.sim.app.spec import load_spec as load_app_model
        from itbench_gym.faults.catalogue import catalogue
        from itbench_gym.paths import envs_dir
        from itbench_gym.spec.appfacts import load_app_facts

        self.app = app
        self.facts = load_app_facts(envs_dir() / app)
        self.model = load_app_model(envs_dir() / app)
        self.namespace = self.model.namespace
        self.graph = call_graph(self.facts.calls)
        templates = load_templates()
        known = set(catalogue())
        self.candidates, self.skipped = fault_candidates(templates, self.facts, self.model, self.namespace, known)
        self.noise = noise_candidates(templates, self.facts, self.namespace, known)

    def touched(self, candidates: Sequence[Candidate]) -> set[str]:
        """Workloads a noise restart must leave alone: those the faults' effects can reach, and the
        services they act through."""
        services = reach(self.graph, candidates) | {c.via for c in candidates if c.via}
        return {self.model.services[s].workload for s in services if s in self.model.services}


def draw(space: _Space, seed: int, faults: int, noise: bool) -> Iterator[Draft]:
    """Distinct drafts in a fixed order for ``seed``, until the space runs out."""
    if faults < 1:
        raise ValueError(f"faults must be at least 1, got {faults}")
    rng = random.Random(seed)
    seen: set[str] = set()
    repeats = index = 0
    pool = space.candidates
    while repeats < _MAX_REPEATS and len(pool) >= faults:
        picked = tuple(sorted(rng.sample(pool, faults), key=lambda c: c.key))
        if len({c.exclusive for c in picked}) < faults:
            repeats += 1
            continue
        chosen: Noise | None = None
        if noise:
            touched = space.touched(picked)
            options = [n for n in space.noise if n.workload is None or n.workload not in touched]
            if not options:
                repeats += 1
                continue
            chosen = rng.choice(options)
        draft = Draft(index, picked, chosen)
        if draft.key in seen:
            repeats += 1
            continue
        seen.add(draft.key)
        repeats = 0
        index += 1
        yield draft


def _services_of(labels: Mapping[str, str], space: _Space, store: ObjectStore) -> list[tuple[str, dict[str, str]]]:
    """The services an alert is about, each with the labels that say so; none for cluster-wide
    alerts. A label value names a service, or every service whose container it names (Bookinfo's
    canonical service ``reviews``: reviews-v1, -v2 and -v3). A mesh alert about requests between two
    services is about both: its destination's, then its source's.

    An alert about a pod alone (KubePodNotReady: ``namespace`` and ``pod``) is about the service
    whose workload owns the pod in ``store``; its matcher is the namespace, since pod names change
    from seed to seed."""
    for label in _SERVICE_LABELS:
        found = _named(labels, label, space)
        if found:
            return found + [pair for source in _SOURCE_LABELS for pair in _named(labels, source, space)]
    namespace, pod = labels.get("namespace"), labels.get("pod")
    if namespace != space.namespace or pod is None:
        return []
    service = _owning_service(store, space, namespace, pod)
    return [(service, {"namespace": namespace})] if service is not None else []


def _named(labels: Mapping[str, str], label: str, space: _Space) -> list[tuple[str, dict[str, str]]]:
    """The services ``label``'s value names (itself, or the services running a container so named),
    each with the matcher: that label and the alert's namespace."""
    value = labels.get(label)
    if value is None:
        return []
    services = [value] if value in space.model.services else [n for n, s in space.model.services.items() if s.container == value]
    matcher = {label: value, **({"namespace": labels["namespace"]} if "namespace" in labels else {})}
    return [(service, matcher) for service in services]


def _owning_service(store: ObjectStore, space: _Space, namespace: str, pod: str) -> str | None:
    """The service whose workload controls ``pod``: the pod's controller, through a ReplicaSet to its Deployment."""
    from itbench_gym.backends.sim.kube.errors import ApiError

    by_workload = {s.workload: name for name, s in space.model.services.items()}
    kind, name = "Pod", pod
    for _ in range(3):  # Pod -> ReplicaSet -> Deployment at most
        try:
            obj = store.get(kind, namespace, name)
        except ApiError:
            return None
        owner = next((r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        if owner is None:
            return None
        if owner["kind"] != "ReplicaSet":
            return by_workload.get(owner["name"])
        kind, name = owner["kind"], owner["name"]
    return None


class _Judge:
    """One process's twins (per load level) and the checks a draft goes through."""

    def __init__(self, app: str) -> None:
        self.space = _Space(app)
        self._twins: dict[int, tuple[Any, Any]] = {}
        self._alone_cache: dict[str, set[tuple[str, str]]] = {}

    def _twin(self, spec: Any, users: int) -> tuple[Any, Any]:
        from itbench_gym.backends.sim.backend import SimBackend

        if users not in self._twins:
            backend = SimBackend()
            backend.start(spec, 0)
            self._twins[users] = (backend, backend.checkpoint())
        return self._twins[users]

    def close(self) -> None:
        for backend, _ in self._twins.values():
            backend.close()

    def judge(self, draft: Draft) -> Outcome:
        from itbench_gym.spec.loader import SpecError, spec_from_document

        started = time.perf_counter()
        source = Path("<generated>") / f"{draft.scenario_id}.yaml"  # names the draft in errors; never written
        try:
            probe = spec_from_document(self._document(draft, []), source)
        except SpecError as exc:
            return Outcome(draft, None, f"spec check: {exc}", time.perf_counter() - started)
        alone = {c.key: self._alone(c, probe) for c in draft.candidates}
        inert = [key for key, pairs in alone.items() if not pairs]
        if inert:
            return Outcome(draft, None, f"no alert of {', '.join(inert)} (alone) fired within {ALERT_WAIT_SECONDS:g} s",
                           time.perf_counter() - started)
        wanted = {c.key: self._preferred(c, alone[c.key]) for c in draft.candidates}
        fired = self._fired(probe, draft.users, done=lambda seen: all(wanted[c.key] & seen.keys() for c in draft.candidates))
        alerts = _triggering(draft, wanted, alone, fired)
        missing = [c.key for c in draft.candidates if not any(c.key in causes for _, _, _, causes in alerts)]
        if missing:
            return Outcome(draft, None, f"no alert of {', '.join(missing)} fired with the other faults within "
                           f"{ALERT_WAIT_SECONDS:g} s", time.perf_counter() - started)
        doc = self._document(draft, alerts)
        try:
            spec = spec_from_document(doc, source)
        except SpecError as exc:
            return Outcome(draft, None, f"spec check: {exc}", time.perf_counter() - started)
        reason = _oracle_failure(spec)
        return Outcome(draft, None if reason else doc, reason, time.perf_counter() - started)

    def _alone(self, candidate: Candidate, probe: Any) -> set[tuple[str, str]]:
        """The (alert, service) pairs that ``candidate`` alone makes fire on its chain (run once per
        process and candidate, at the default load): in a multi-fault variant an alert is credited
        only to the faults that cause it by themselves."""
        if candidate.key not in self._alone_cache:
            from dataclasses import replace

            from itbench_gym.spec import FaultRef

            single = replace(probe, faults=tuple(FaultRef(f["id"], f["args"]) for f in (*candidate.faults, *candidate.waiters)))
            def on_chain(key: tuple[str, str]) -> bool:
                return chain(self.space.graph, candidate, key[1]) is not None

            def first(key: tuple[str, str]) -> bool:
                return primary(self.space.graph, candidate, key[1])

            # a callee's alert alone does not end the run: the fault's own or a caller's may follow
            fired = self._fired(single, DEFAULT_USERS, done=lambda seen: any(map(first, seen)))
            self._alone_cache[candidate.key] = set(filter(on_chain, fired))
        return self._alone_cache[candidate.key]

    def _preferred(self, candidate: Candidate, pairs: set[tuple[str, str]]) -> set[tuple[str, str]]:
        """The alerts a triggering alert of ``candidate`` is chosen from: those on its own service or its
        callers when it has any, else those on its callees."""
        own = {key for key in pairs if primary(self.space.graph, candidate, key[1])}
        return own or set(pairs)

    def _fired(self, spec: Any, users: int, done: Any) -> dict[tuple[str, str], tuple[float, dict[str, str]]]:
        """(alert, service) -> (first firing time, matcher labels) on the twin, from the healthy
        baseline with ``spec``'s faults, until ``done(seen)`` has held for a while or time is up."""
        from itbench_gym.faults import fault_context
        from itbench_gym.faults.inject import inject_faults
        from itbench_gym.tools.alerts import fetch_alerts

        backend, baseline = self._twin(spec, users)
        endpoints = backend.restore(baseline)
        store = backend.twin.cluster.store
        ctx = fault_context(backend, self.space.facts)
        seen: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        try:
            inject_faults(spec.faults, ctx)
            start = backend.clock.now()
            since: float | None = None
            while backend.clock.now() - start < ALERT_WAIT_SECONDS:
                backend.advance(_POLL_SECONDS)
                now = backend.clock.now()
                for alert in fetch_alerts(endpoints.prometheus):
                    if alert["state"] != "firing":
                        continue
                    for service, matcher in _services_of(alert["labels"], self.space, store):
                        seen.setdefault((alert["labels"]["alertname"], service), (now - start, matcher))
                if since is None and done(seen):
                    since = now
                if since is not None and now - since >= _LINGER_SECONDS:
                    break
        finally:
            ctx.close()
        return seen

    def _document(self, draft: Draft, alerts: Sequence[tuple[str, str, Mapping[str, str], frozenset[str]]]) -> dict[str, Any]:
        """The scenario document of a draft whose triggering alerts are ``alerts``; without alerts,
        a probe (Watchdog, root causes only) that checks the faults before they are run."""
        space = self.space
        ns = space.namespace
        gt, services = build_ground_truth(draft.candidates, [(n, s, causes) for n, s, _, causes in alerts],
                                          space.model, space.graph, ns)
        if not alerts:
            gt = {"groups": [g for g in gt["groups"] if g.get("root_cause")], "propagations": []}
        restarts = [w for w in draft.fault_entries() if w["id"] == "restart-kubernetes-workload"
                    and not (draft.noise and w in draft.noise.faults)]
        # A fault without a fix of its own (a flag edit) is undone by replaying the injection journal,
        # which undoes the others too: their own fix would then undo the undo (`rollout undo`).
        revert = any(not c.commands for c in draft.candidates)
        commands = [] if revert else [cmd for c in draft.candidates for cmd in c.commands]
        restart_names = " ".join(w["args"]["kubernetesObject"]["metadata"]["name"] for w in restarts)
        if restarts:
            commands.append(f"kubectl -n {ns} rollout restart deployment {restart_names}")
        steps = len([c for c in draft.candidates if not c.commands]) + len(commands)
        keys = ", ".join(c.key for c in draft.candidates)
        noise = f" Noise: {draft.noise.key}." if draft.noise else ""
        return {
            "apiVersion": "itbench-gym/v1",
            "kind": "Scenario",
            "metadata": {
                "id": draft.scenario_id,
                "name": f"Generated: {keys}",
                "description": f"Generated by itbench_gym.generate from templates {keys}.{noise}",
                "domain": "sre",
                "class": "Generated",
                "tags": ["generated", *sorted({c.template for c in draft.candidates})],
                "complexity": {"factors": {"technologies": technologies(services, space.model),
                                           "propagation_length": len(gt["propagations"]),
                                           "resolution_steps": steps}},
            },
            "environment": {"app": space.app, "namespace": ns,
                            "observability": {"metrics": True, "logs": True, "traces": True},
                            "load": {"users": draft.users, "spawn_rate": 1}, "baseline_seconds": 600},
            "faults": [dict(f) for f in draft.fault_entries()],
            "alerts": {"triggering": [{"alertname": name, "labels": dict(labels)} for name, _, labels, _ in alerts]
                       or [{"alertname": "Watchdog"}], "wait_timeout_seconds": 1800},
            "ground_truth": {**gt, "recommended_actions": [{"solution": {
                "id": "revert_faults", "actions": [f"Revert {c.condition}" for c in draft.candidates]
                + ([f"Restart {restart_names}"] if restarts else [])}}]},
            "mitigations": [{
                "id": "revert-faults",
                "description": "Undo each fault (" + "; ".join(c.condition for c in draft.candidates)
                + ")" + (f", then restart {restart_names} so the change is served" if restarts else "") + ".",
                "commands": commands,
                **({"revert_faults": True} if revert else {}),
            }],
            "desired_outcome": {"diagnosis": "Name the faulted objects as the root cause.",
                                "mitigation": "The triggering alerts stop firing and the shop serves its traffic again."},
            "budget": {"max_steps": 40, "max_sim_seconds": 3600},
        }


def _triggering(draft: Draft, wanted: Mapping[str, set[tuple[str, str]]], alone: Mapping[str, set[tuple[str, str]]],
                fired: Mapping[tuple[str, str], tuple[float, dict[str, str]]]) -> list[tuple[str, str, dict[str, str], frozenset[str]]]:
    """Per fault, the earliest alert of the variant's run among those it is preferably credited with
    (``wanted``; each one the fault alone also makes fire): (name, service, matcher labels, the faults
    credited with it)."""
    ordered = sorted(fired.items(), key=lambda item: (item[1][0], item[0]))
    chosen: dict[tuple[str, str], tuple[dict[str, str], frozenset[str]]] = {}
    for c in draft.candidates:
        pick = next((key for key, _ in ordered if key in wanted[c.key]), None)
        if pick is not None and pick not in chosen:
            chosen[pick] = (fired[pick][1], frozenset(k for k, pairs in alone.items() if pick in pairs))
    return [(name, service, labels, causes) for (name, service), (labels, causes) in chosen.items()]


def _oracle_failure(spec: Any) -> str:
    """Why the scenario fails validation's symptom check when its alerts fire (a ground-truth entity
    that shows nothing) or the oracle fails it, or '' when both pass."""
    from itbench_gym.agents import AGENTS, run_episode
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.validate.checks import symptoms

    env = ITBenchEnv(spec)
    try:
        env.reset(seed=0)
        unshown = symptoms(env)
        if unshown:
            return "symptoms: " + "; ".join(unshown)
        evaluation = run_episode(env, AGENTS["oracle"](env), seed=0)["evaluation"]
    except Exception as exc:
        return f"oracle episode: {type(exc).__name__}: {exc}"
    finally:
        env.close()
    problems = []
    if not evaluation["diagnosis"]["fl_pass"]:
        problems.append(f"root cause not matched ({'; '.join(map(str, evaluation['diagnosis']['fl_reasons']))})")
    if not evaluation["mitigation"].get("passed"):
        problems.append(f"mitigation failed ({'; '.join(map(str, evaluation['mitigation'].get('reasons') or []))})")
    return "oracle: " + ", ".join(problems) if problems else ""


_JUDGE: _Judge | None = None


def _judge_in_worker(args: tuple[str, Draft]) -> Outcome:
    """Judge one draft in a worker process, keeping its twins between drafts."""
    global _JUDGE
    app, draft = args
    if _JUDGE is None or _JUDGE.space.app != app:
        _JUDGE = _Judge(app)
    return _JUDGE.judge(draft)


def run(count: int, seed: int, *, faults: int = 1, noise: bool = False, app: str = "astronomy-shop",
        out: Path | None = None, workers: int = 1, progress: Any = None) -> Generation:
    """Draft variants in seed order and judge them (in ``workers`` processes) until ``count`` pass
    or the space runs out; the kept ones are the first ``count`` that pass, in draft order."""
    import multiprocessing

    from itbench_gym.lang import yamltext

    started = time.perf_counter()
    space = _Space(app)
    result = Generation(skipped=list(space.skipped))
    drafts = draw(space, seed, faults, noise)
    # Workers take drafts as they free up; results come back in draft order, so the kept variants
    # do not depend on the number of workers or their speed.
    pool = multiprocessing.get_context("spawn").Pool(workers) if workers > 1 else None
    local = _Judge(app) if pool is None else None
    try:
        outcomes: Iterator[Outcome] = (pool.imap(_judge_in_worker, ((app, d) for d in drafts)) if pool is not None
                                       else (local.judge(d) for d in drafts) if local is not None else iter(()))
        for outcome in outcomes:
            (result.variants if outcome.doc is not None else result.rejected).append(outcome)
            if progress is not None:
                progress(outcome)
            if len(result.variants) >= count:
                break
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        if local is not None:
            local.close()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for outcome in result.variants:
            assert outcome.doc is not None
            file = out / f"{outcome.draft.scenario_id}.yaml"
            file.write_text(yamltext.dump(outcome.doc), encoding="utf-8")
            result.files.append(file)
    result.seconds = time.perf_counter() - started
    return result
