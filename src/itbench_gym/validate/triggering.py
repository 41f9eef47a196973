"""Triggering alerts for a scenario whose index lists none: what its faults make fire on the twin.

ITBench leaves ``alerts`` empty in 36 of its 67 indexes. Such a scenario is run once on the twin
(seed 0): the healthy baseline's firing alerts are noted, the faults injected, and the alerts are
polled until the first new one fires; the alerts firing at that poll that did not fire at baseline
are the triggering alerts (by name and the labels that say what alerts: :data:`IDENTITY_LABELS`).
Alerts that page (severity ``warning`` or ``critical``, as Alertmanager routes them and as ITBench's
indexes list them) come first; only when none pages within the wait do the first new alerts of any
severity but ``none`` (InfoInhibitor's) count (an ``info`` alert such as CPUThrottlingHigh is still what the agent's alert API
shows, and ITBench's own v1 ground truths list it). The earliest symptoms are the ones a reset can
wait for on every seed. The decision is cached on
disk, keyed by the index file's content and the package version, so only the first import pays (a
scenario whose faults make no alert fire is remembered as such too).

A v1 or derived ground truth is decided the same way (:func:`decided_unshown`): one reset on the
deciding seed, then the propagation targets that show no symptom when the alerts fire (what
``validate`` checks) are the ones the importer drops.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itbench_gym.paths import cache_dir
from itbench_gym.spec.itbench import ImportedScenario, identity_labels

#: Seed of the run that decides (the alerts must then fire on every seed: ``validate`` checks).
DECIDING_SEED = 0
POLL_SECONDS = 15.0
PAGING_SEVERITIES = frozenset({"warning", "critical"})
#: Part of the cache key: a change of how alerts are decided invalidates earlier decisions.
DECISION_RULE = "first-new-paging-else-first-new-alerts/3"
#: Likewise for the propagation targets that show no symptom.
UNSHOWN_RULE = "unshown-at-triggering-alerts/3"
#: And for the check that an index's alerts fire.
INDEX_RULE = "index-alerts-all-new-within-wait/2"
#: How the notes of that check begin (``validate`` prints them on the scenario's line).
INDEX_NOTE = "index: "


class NoAlertError(RuntimeError):
    """The faults made no new alert fire within the scenario's wait: the scenario has no incident."""


def cache_key(imported: ImportedScenario) -> str:
    from itbench_gym import __version__

    digest = hashlib.sha256(imported.source.read_bytes())
    digest.update(f"\0{__version__}\0{DECISION_RULE}".encode())
    return digest.hexdigest()[:32]


def decided_alerts(imported: ImportedScenario) -> list[dict[str, Any]]:
    """The triggering alerts of a scenario whose index lists none: from the cache, else by a twin run."""
    file = cache_dir() / "triggering" / f"{cache_key(imported)}.json"
    try:
        cached = json.loads(file.read_text(encoding="utf-8"))
        alerts = list(cached["alerts"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    else:
        if not alerts:
            raise NoAlertError(str(cached.get("reason") or f"{imported.id}: no new alert fired"))
        return alerts
    record: dict[str, Any] = {"scenario": imported.id, "source": str(imported.source), "seed": DECIDING_SEED}
    try:
        alerts, fired_after = observe_new_alerts(imported)
    except NoAlertError as exc:  # remembered too: the twin would answer the same
        _write(file, {**record, "alerts": [], "reason": str(exc)})
        raise
    _write(file, {**record, "fired_after_seconds": fired_after, "alerts": alerts})
    return alerts


def _write(file: Path, record: Mapping[str, Any]) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=file.parent, delete=False, suffix=".tmp", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    os.replace(fh.name, file)  # concurrent validators write the same answer; the rename is atomic


def decision_record(imported: ImportedScenario) -> Mapping[str, Any] | None:
    """The cached decision (alerts, seed, seconds from injection), or None when not decided yet."""
    try:
        record: Mapping[str, Any] = json.loads((cache_dir() / "triggering" / f"{cache_key(imported)}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record


def observe_new_alerts(imported: ImportedScenario) -> tuple[list[dict[str, Any]], float]:
    """Run the faults on the twin; the first new alerts to fire and how many seconds after injection."""
    seen = _observe(imported, ())
    if seen.decided is None:
        raise NoAlertError(seen.reason)
    return seen.decided, seen.decided_after


@dataclass
class Observation:
    """What one deciding run saw: the first new alerts (paging first) and, for alert names the index
    requires, when they all fired or which of them fired first."""

    reason: str = ""
    decided: list[dict[str, Any]] | None = None
    decided_after: float = 0.0
    all_required_after: float | None = None
    first_required: tuple[str, ...] = ()


def _observe(imported: ImportedScenario, required: Sequence[str]) -> Observation:
    """Run the faults on the twin until the first new paging alert (``required`` empty) or until every
    alert named in ``required`` fires as a new alert, at most the scenario's wait."""
    from dataclasses import replace

    from itbench_gym.backends.sim.backend import SimBackend
    from itbench_gym.faults import fault_context, inject_faults
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.appfacts import load_app_facts
    from itbench_gym.spec.itbench import with_triggering
    from itbench_gym.spec.loader import spec_from_document
    from itbench_gym.tasks.sre import ClusterProbe

    facts = load_app_facts(envs_dir() / imported.document["environment"]["app"]) if imported.document else None
    if facts is None or facts.edge is None or not facts.rules:
        raise NoAlertError(f"{imported.id}: its app has no alert rules or edge to observe")
    # Any rule of the app stands in for the alerts while they are being decided.
    provisional = spec_from_document(with_triggering(imported, [{"alertname": facts.rules[0].alert}])[0], imported.source)
    spec = replace(provisional, triggering_alerts=())
    backend = SimBackend()
    try:
        backend.start(spec, DECIDING_SEED)
        probe = ClusterProbe(spec, backend, facts.edge, facts.golden_signals, facts.flags)
        try:
            at_baseline = probe.firing_alerts()
            baseline, baseline_all = _paging(at_baseline), _identities(at_baseline)
            ctx = fault_context(backend, facts, DECIDING_SEED)
            try:
                inject_faults(spec.faults, ctx)
            finally:
                ctx.close()
            injected = probe.now()
            deadline = injected + spec.alert_wait_timeout
            seen = Observation()
            unpaged: tuple[set[str], float] | None = None
            while probe.now() < deadline:
                firing = probe.firing_alerts()
                after = probe.now() - injected
                new = _paging(firing) - baseline
                if new and seen.decided is None:
                    seen.decided, seen.decided_after = _decided(new), after
                if unpaged is None and (quiet := _identities(a for a in firing if a.get("severity") != "none") - baseline_all):
                    unpaged = (quiet, after)
                fired = {json.loads(key)["alertname"] for key in _identities(firing) - baseline_all}
                if required and not seen.first_required and fired & set(required):
                    seen.first_required = tuple(n for n in required if n in fired)
                if required and set(required) <= fired:
                    seen.all_required_after = after
                    return seen
                if not required and seen.decided is not None:
                    return seen
                probe.advance(POLL_SECONDS)
            if seen.decided is None and unpaged is not None:
                seen.decided, seen.decided_after = _decided(unpaged[0]), unpaged[1]
        finally:
            probe.close()
    finally:
        backend.close()
    if seen.decided is None:
        seen.reason = (f"{imported.id}: no alert that was not firing at baseline fired within "
                       f"{spec.alert_wait_timeout:.0f} s of the injection")
    return seen


def index_alerts_checked(imported: ImportedScenario, names: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The triggering alerts of a scenario whose index lists ``names``, and the discrepancy notes: the
    index's names when they all fire on the twin (as new alerts, within the wait, on the deciding
    seed); else those of them that fire first; else, when none does, the first new alerts
    (:func:`decided_alerts`' rule). An index that expects what its faults cannot cause, such as
    KubePodNotReady where the quota admission creates no pod, stays runnable and says so. Cached like
    the decisions."""
    digest = hashlib.sha256(f"{cache_key(imported)}\0{INDEX_RULE}\0{json.dumps(list(names))}".encode())
    file = cache_dir() / "index-alerts" / f"{digest.hexdigest()[:32]}.json"
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        triggering, notes, none_fired = list(record["triggering"]), [str(n) for n in record["notes"]], bool(record["none_fired"])
    except (OSError, ValueError, KeyError, TypeError):
        triggering, notes, none_fired = _index_outcome(imported, names)
        _write(file, {"scenario": imported.id, "source": str(imported.source), "seed": DECIDING_SEED,
                      "triggering": triggering, "notes": notes, "none_fired": none_fired})
    if none_fired:
        raise NoAlertError(notes[-1])
    return triggering, notes


def _index_outcome(imported: ImportedScenario, names: Sequence[str]) -> tuple[list[dict[str, Any]], list[str], bool]:
    """(triggering alerts, [] to keep the index's; notes; whether no alert fired at all)."""
    seen = _observe(imported, names)
    if seen.all_required_after is not None:
        return [], [], False
    wait = f"within the wait of the injection (seed {DECIDING_SEED})"
    if seen.first_required:
        missing = [n for n in names if n not in seen.first_required]
        kept = ", ".join(seen.first_required)
        return ([{"alertname": n} for n in seen.first_required],
                [f"{INDEX_NOTE}alert(s) {', '.join(missing)} never fired with {kept} on the twin {wait}; the triggering alerts are {kept}"],
                False)
    if seen.decided is not None:
        shown = ", ".join(a["alertname"] + "{" + ",".join(f"{k}={v}" for k, v in a["labels"].items()) + "}" for a in seen.decided)
        return (seen.decided, [f"{INDEX_NOTE}alert(s) {', '.join(names)} never fired on the twin {wait}; the triggering "
                               f"alerts are the first new ones that did: {shown}"], False)
    return [], [f"{INDEX_NOTE}alert(s) {', '.join(names)} never fired on the twin {wait}, nor any other new alert"], True


def _paging(alerts: Iterable[Mapping[str, str]]) -> set[str]:
    """The paging alerts among ``alerts``, each as the JSON of its name and identity labels."""
    return _identities(a for a in alerts if a.get("severity") in PAGING_SEVERITIES)


def _identities(alerts: Iterable[Mapping[str, str]]) -> set[str]:
    return {json.dumps({"alertname": str(a.get("alertname", "")), **identity_labels(a)}, sort_keys=True) for a in alerts}


def _decided(keys: Iterable[str]) -> list[dict[str, Any]]:
    alerts = [json.loads(key) for key in sorted(keys)]
    return [{"alertname": a.pop("alertname"), "labels": a} for a in alerts]


def decided_unshown(imported: ImportedScenario, doc: Mapping[str, Any]) -> list[str]:
    """The group ids of ``doc``'s non-root-cause ground-truth classes that show no symptom once its
    triggering alerts fire on the deciding seed: from the cache, else by a twin run ([] when the
    alerts never fire: ``validate`` reports that)."""
    from itbench_gym.backends.base import BackendError
    from itbench_gym.env import ITBenchEnv
    from itbench_gym.evaluation.groundtruth import parse_ground_truth
    from itbench_gym.spec.loader import spec_from_document
    from itbench_gym.validate.checks import unshown_classes

    digest = hashlib.sha256(f"{cache_key(imported)}\0{UNSHOWN_RULE}\0".encode())
    digest.update(json.dumps([doc["alerts"], doc["ground_truth"]], sort_keys=True).encode())
    file = cache_dir() / "unshown" / f"{digest.hexdigest()[:32]}.json"
    try:
        return [str(g) for g in json.loads(file.read_text(encoding="utf-8"))["unshown"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    spec = spec_from_document(dict(doc), imported.source)
    roots = set(parse_ground_truth(spec.ground_truth, strict=False).root_cause_classes)
    env = ITBenchEnv(scenario=spec)
    try:
        env.reset(seed=DECIDING_SEED)
        unshown = [gid for cls, groups in unshown_classes(env) if cls not in roots for gid in groups]
        reason = ""
    except BackendError as exc:
        unshown, reason = [], f"not decided: {exc}"
    finally:
        env.close()
    _write(file, {"scenario": imported.id, "source": str(imported.source), "seed": DECIDING_SEED,
                  "unshown": unshown, **({"reason": reason} if reason else {})})
    return unshown
