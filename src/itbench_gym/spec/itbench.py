"""ITBench's scenario library (its ``index`` JSON format) as scenario documents of our spec format.

A library folder is laid out like ``../shared/itbench/`` (``scenarios/<n>.json``,
``groundtruth/<n>_groundtruth[_v1].yaml``, ``schemas/faults/``) or like ITBench's repository
(``scenarios/sre/library/indexes/scenarios/<n>.json``, ground truths in
``scenarios/sre/project/roles/scenarios/files/scenario_<n>/``, schemas in ``schemas/json/``); a
folder that holds index files itself (someone else's scenarios, no ground truth) works too.

Each index becomes ``ITBench-<id>-v0``:

- ``faults``: per disruption, its ``waitFor.preInjection`` waiters, its ``injections``, its
  ``postInjection`` waiters, in that order. Each entry's arguments are checked against ITBench's own
  schema (when the library has it) and against our catalogue.
- ``environment``: ITBench's application id mapped to a folder of ``envs/`` (:data:`APPS`).
- ``alerts.triggering``: the index's ``alerts`` (names only, as ITBench lists them); when it lists
  none, the caller decides them by running the scenario on the twin (:func:`with_triggering`).
- ``ground_truth``: the v1 file, cleaned where it contradicts the index or the app (each change is a
  *discrepancy*); without one, derived from the faults and the app's call graph
  (:func:`derive_ground_truth`); either without the propagation targets that show no symptom on the
  twin (the caller decides them by a run: :func:`without_unshown`).
- ``mitigations``: each of the index's ``solutions`` (with its commands when every step is a command
  the agent's kubectl runs), then ``remove-faults``: reverting what the injection changed.

A scenario that cannot run here (a fault type or app this installation lacks, a FinOps task) is kept
with the reason (``unsupported``), as is an index that is wrong (``invalid``); neither raises at import.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itbench_gym.lang import yamltext
from itbench_gym.spec.finops import FINOPS_BASELINE_SECONDS

#: ITBench's application ids -> (folder under ``envs/``, its Kubernetes namespace in ITBench).
APPS: dict[str, str] = {"opentelemetry-demo": "astronomy-shop", "book-info": "book-info"}
#: ITBench's complexity words -> our levels.
LEVELS = {"low": "easy", "medium": "medium", "high": "hard"}
#: Labels that identify an alert across seeds (pod names and values do not).
IDENTITY_LABELS = ("namespace", "service_name", "deployment", "statefulset", "daemonset", "job_name", "container",
                   "horizontalpodautoscaler", "persistentvolumeclaim")
ID_PREFIX = "ITBench-"
REMOVE_FAULTS = "remove-faults"
_KUBECTL_INTERACTIVE = {"edit"}


class LibraryError(ValueError):
    """A folder that is not an ITBench library (the message names the folder and what was looked for)."""


@dataclass(frozen=True)
class Library:
    """Where a library folder keeps its scenario indexes, ground truths and fault schemas."""

    root: Path
    scenarios: tuple[Path, ...]
    #: ``<n>`` -> (v1 ground truth, plain ground truth), each None when absent.
    ground_truths: Mapping[str, tuple[Path | None, Path | None]]
    #: Folder of ITBench's ``faults/<id>.json`` and ``waiters/<id>.json`` schemas, if any.
    schemas: Path | None

    def schema(self, entry_id: str) -> Mapping[str, Any] | None:
        """ITBench's JSON Schema of a fault's or waiter's arguments, when the library has it."""
        if self.schemas is None:
            return None
        return self._schema(("faults", "waiters"), entry_id)

    def application_schema(self, app_id: str) -> Mapping[str, Any] | None:
        """ITBench's JSON Schema of an application's ``args`` (``applications/<id>.json``), when the library has it."""
        return self._schema(("applications",), app_id)

    def _schema(self, families: tuple[str, ...], name: str) -> Mapping[str, Any] | None:
        if self.schemas is None:
            return None
        for family in families:
            file = self.schemas / family / f"{name}.json"
            if file.is_file():
                loaded: Mapping[str, Any] = json.loads(file.read_text(encoding="utf-8"))
                return loaded
        return None


def open_library(path: Path | str) -> Library:
    """The library at ``path`` in either layout (or a folder of index files, or one index file)."""
    root = Path(path).expanduser()
    if root.is_file():
        return Library(root.parent, (root,), {}, None)
    if not root.is_dir():
        raise LibraryError(f"{root}: no such folder (ITBENCH_LIBRARY / load_itbench_library)")
    layouts = (
        (root / "scenarios", root / "groundtruth", root / "schemas"),
        (root / "scenarios/sre/library/indexes/scenarios", None, root / "schemas/json"),
        (root, None, None),
    )
    for folder, gt_dir, schemas in layouts:
        files = sorted(folder.glob("*.json"), key=_index_order) if folder.is_dir() else []
        files = [f for f in files if _is_index(f)]
        if not files:
            continue
        ground_truths: dict[str, tuple[Path | None, Path | None]] = {}
        for file in files:
            n = file.stem
            if gt_dir is not None:
                candidates = (gt_dir / f"{n}_groundtruth_v1.yaml", gt_dir / f"{n}_groundtruth.yaml")
            else:
                where = root / f"scenarios/sre/project/roles/scenarios/files/scenario_{n}"
                candidates = (where / "groundtruth_v1.yaml", where / "groundtruth.yaml")
            ground_truths[n] = (candidates[0] if candidates[0].is_file() else None,
                                candidates[1] if candidates[1].is_file() else None)
        return Library(root, tuple(files), ground_truths, schemas if schemas is not None and schemas.is_dir() else None)
    raise LibraryError(f"{root}: no ITBench scenario index found (looked for scenarios/*.json, "
                       "scenarios/sre/library/indexes/scenarios/*.json and *.json with 'disruptions')")


def _index_order(file: Path) -> tuple[int, str]:
    return (int(file.stem), "") if file.stem.isdigit() else (1 << 30, file.stem)


def _is_index(file: Path) -> bool:
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # reported as an invalid scenario, not skipped silently
    return isinstance(doc, Mapping) and "disruptions" in doc


@dataclass
class ImportedScenario:
    """One library index, converted as far as it goes; ``unsupported`` says why it cannot run here."""

    id: str
    source: Path
    domain: str
    #: Our scenario document; ``alerts.triggering`` is empty until decided (``alerts_from == "twin"``).
    document: dict[str, Any] | None
    #: Why it cannot run in this installation (a fault type, app or task it lacks).
    unsupported: str | None = None
    #: Why the index itself is wrong (unreadable, or breaking ITBench's own schema).
    invalid: str | None = None
    #: Where the library's data contradicts itself or the app, and what the importer followed instead.
    discrepancies: list[str] = field(default_factory=list)
    #: "index" (its ``alerts``) or "twin" (the new alerts a run of the faults makes fire).
    alerts_from: str = "index"
    #: "v1" (the library's v1 file, cleaned) or "derived" (faults and topology); "" before conversion.
    ground_truth_from: str = ""
    number: int | None = None
    #: ITBench's own level of the index (``complexity``: low, medium, high) in our words, if it gives one.
    itbench_level: str | None = None

    def summary(self) -> dict[str, Any]:
        """What a catalogue lists without deciding alerts (no twin run). Its complexity is ITBench's own
        level: the spec's (Eq. 6 over its ground truth) is decided with the alerts."""
        meta = (self.document or {}).get("metadata") or {}
        faults = [f["id"] for f in (self.document or {}).get("faults") or []]
        return {"id": self.id, "domain": self.domain, "class": meta.get("class"), "name": meta.get("name", self.id),
                "complexity": self.itbench_level, "app": ((self.document or {}).get("environment") or {}).get("app"),
                "itbench_scenario": self.number, "faults": faults, "unsupported": self.unsupported, "invalid": self.invalid,
                "alerts_from": self.alerts_from, "ground_truth_from": self.ground_truth_from,
                "discrepancies": list(self.discrepancies), "source": str(self.source)}


def import_library(path: Path | str) -> list[ImportedScenario]:
    """Every index of the library at ``path``, in index order."""
    library = open_library(path)
    return [import_scenario(library, file) for file in library.scenarios]


def import_scenario(library: Library, file: Path) -> ImportedScenario:
    """One index file as far as it converts (never raises for the file's content)."""
    try:
        index = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return ImportedScenario(f"{ID_PREFIX}{file.stem}-v0", file, "sre", None, invalid=f"invalid index file: {exc}")
    raw_id = index.get("id", file.stem) if isinstance(index, Mapping) else file.stem
    sid = f"{ID_PREFIX}{raw_id}-v0"
    domain = str(index.get("category") or "sre") if isinstance(index, Mapping) else "sre"
    out = ImportedScenario(sid, file, domain, None, number=raw_id if isinstance(raw_id, int) else None,
                           itbench_level=LEVELS.get(str(index.get("complexity"))) if isinstance(index, Mapping) else None)
    if not isinstance(index, Mapping):
        out.invalid = "invalid index file: not a JSON object"
        return out
    if not re.fullmatch(r"[A-Za-z0-9]+", str(raw_id)):
        out.invalid = f"invalid index file: id {raw_id!r} is not a number or word"
        return out
    try:
        _convert(library, index, out)
    except _Unsupported as exc:
        out.unsupported = str(exc)
    except _Invalid as exc:
        out.invalid = str(exc)
    return out


class _Unsupported(Exception):
    """Why a scenario cannot run in this installation (a message for the user)."""


class _Invalid(Exception):
    """Why an index is wrong whatever the installation (a message for the user)."""


def _convert(library: Library, index: Mapping[str, Any], out: ImportedScenario) -> None:
    from itbench_gym.faults.catalogue import catalogue, fault_args_problems
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.appfacts import load_app_facts
    from itbench_gym.spec.references import fault_reference_problems

    if out.domain not in ("sre", "finops"):
        raise _Unsupported(f"not yet supported: category {out.domain!r} (the {out.domain} task is not implemented)")
    finops = out.domain == "finops"
    apps = [a.get("id") for a in (index.get("environment") or {}).get("applications") or [] if isinstance(a, Mapping)]
    if len(apps) != 1:
        raise _Unsupported(f"not yet supported: {len(apps)} applications {apps} (one per scenario is)")
    app = APPS.get(str(apps[0]))
    if app is None:
        raise _Unsupported(f"not yet supported: ITBench application {apps[0]!r} has no environment here")
    if not (envs_dir() / app / "app.yaml").is_file():
        raise _Unsupported(f"not yet supported: ITBench application {apps[0]!r} needs envs/{app}, which this installation lacks")
    facts = load_app_facts(envs_dir() / app)
    app_args = next(a for a in index["environment"]["applications"] if isinstance(a, Mapping)).get("args") or {}
    app_schema = library.application_schema(str(apps[0]))
    if app_schema is not None and (theirs := _schema_problems(app_schema, app_args)):
        raise _Invalid(f"invalid index: environment.applications[0].args break ITBench's own schema: {theirs}")
    environment = _environment(app_args, str(index.get("category") or "sre"))
    entries = _flatten(index.get("disruptions"))
    if not entries and not finops:  # a FinOps index may inject nothing: a healthy system whose cost is reviewed
        raise _Invalid("invalid index: no injections")
    known = catalogue()
    for i, entry in enumerate(entries):
        if entry["id"] not in known:
            raise _Unsupported(f"not yet supported: fault type {entry['id']} is not in the catalogue")
        schema = library.schema(entry["id"])
        if schema is not None:
            theirs = _schema_problems(schema, entry["args"])
            if theirs:
                raise _Invalid(f"invalid index: faults[{i}] ({entry['id']}) breaks ITBench's own schema: {theirs}")
        ours = fault_args_problems(entry["id"], entry["args"])
        if ours:
            path, message = ours[0]
            raise _Unsupported(f"not yet supported: faults[{i}] ({entry['id']}) {path}: {message}")
    broken = fault_reference_problems(entries, facts, environment)
    if broken:
        path, message = broken[0]
        raise _Invalid(f"invalid index: {path}: {message}")
    namespace = facts.namespace or _namespace_of(entries)
    alerts = [a if isinstance(a, str) else a.get("id") for a in index.get("alerts") or []]
    out.alerts_from = "index" if alerts else "twin" if entries else "none"
    v1, plain = library.ground_truths.get(out.source.stem, (None, None))
    ground_truth = _finops_ground_truth(v1, plain, entries, namespace, out) if finops else _sre_ground_truth(v1, plain, entries, out)
    description = str(index.get("description") or f"ITBench library scenario {out.id}").strip()
    solutions = _mitigations(index.get("solutions"), entries)
    out.document = {
        "apiVersion": "itbench-gym/v1",
        "kind": "Scenario",
        "metadata": {
            "id": out.id,
            "name": _name(description),
            "description": description,
            "domain": out.domain,
            "class": scenario_class(entries) if entries else "HealthyControl",
            **({"itbench_scenario": out.number} if out.number is not None and out.number >= 1 else {}),
            "tags": [str(t) for t in index.get("tags") or []]
            + ([f"itbench-complexity:{out.itbench_level}"] if out.itbench_level else []),
            # The level follows from the factors (Eq. 6); ITBench's own label is kept as a tag.
            "complexity": {"factors": {"technologies": 1, "propagation_length": 0,
                                       "resolution_steps": _solution_steps(index.get("solutions"))}},
        },
        "environment": {"app": app, "namespace": namespace, **environment},
        "faults": entries,
        "alerts": {"triggering": [{"alertname": str(a)} for a in alerts if a]},
        "ground_truth": ground_truth,
        "mitigations": solutions if entries else [{"id": "no-change", "description": "Nothing is at fault: change nothing."}],
        "desired_outcome": {
            "diagnosis": "Name the injected object(s) as the root cause: "
                         + ", ".join(_object_text(e) for e in entries if _is_fault(e["id"])) if entries else
                         f"Nothing is at fault: name Namespace {namespace} (its cost is its legitimate load) and change nothing.",
            **(_mitigation_outcome(entries) if entries else {"mitigation": "Nothing changes and no cost alert fires."}),
        },
        "budget": {"max_steps": 50, "max_sim_seconds": 3600},
    }


def _sre_ground_truth(v1: Path | None, plain: Path | None, entries: Sequence[Mapping[str, Any]],
                      out: ImportedScenario) -> dict[str, Any] | None:
    """An SRE index's v1 ground truth, cleaned against its faults; None (derived later) without one."""
    ground_truth = _read_v1(v1, out) if v1 is not None else None
    out.ground_truth_from = "derived" if ground_truth is None else "v1"
    if ground_truth is not None:
        return clean_ground_truth(ground_truth, entries, out.discrepancies)
    if plain is not None:
        out.discrepancies.append(f"{plain.name}: no v1 ground truth; derived from the faults and the call graph")
    return None


def _finops_ground_truth(v1: Path | None, v2: Path | None, entries: Sequence[Mapping[str, Any]], namespace: str,
                         out: ImportedScenario) -> dict[str, Any]:
    """A FinOps index's ground truth: its v2 file's entities when it lists any (each a group; those the
    injections name are the root causes, and an entity of another kind with the same name, the autoscaler
    of a Deployment, is an alias of it), else the v1 file's groups as written, else the namespace; the
    namespace is where the cost shows (each root cause propagates to it)."""
    entities: list[tuple[str, str]] = []
    if v2 is not None:
        try:
            data = yamltext.load(v2.read_text(encoding="utf-8"))
            raw = ((data or {}).get("spec") or {}).get("entities") or []
            entities = [(str(e["kind"]), str(e["metadata"]["name"])) for e in raw if isinstance(e, Mapping)]
        except (OSError, ValueError, KeyError, TypeError, AttributeError, yamltext.YAMLError) as exc:
            out.discrepancies.append(f"{v2.name}: unreadable ({exc})")
    namespace_group = {"id": f"{namespace}-namespace-1", "kind": "Namespace", "namespace": namespace, "name": namespace}
    if entities:
        out.ground_truth_from = "v2"
        faulted = {(str(e["args"].get("kubernetesObject", {}).get("kind")), str(e["args"].get("kubernetesObject", {}).get("metadata", {}).get("name")))
                   for e in entries if _is_fault(e["id"])}
        groups = [{"id": f"{name}-{kind.lower()}-1", "kind": kind, "namespace": namespace, "name": name, "root_cause": (kind, name) in faulted}
                  for kind, name in dict.fromkeys(entities)]
        by_name: dict[str, list[str]] = {}
        for g in groups:
            by_name.setdefault(str(g["name"]), []).append(str(g["id"]))
        roots = [g["id"] for g in groups if g["root_cause"]]
        if v1 is not None and v2 is not None:
            out.discrepancies.append(f"{v1.name}: not used; {v2.name} names the index's own targets")
        return {"groups": [*groups, namespace_group], "aliases": [ids for ids in by_name.values() if len(ids) > 1],
                "propagations": [{"source": r, "target": namespace_group["id"], "condition": "misconfigured",
                                  "effect": "the namespace pays for what it does not need"} for r in roots]}
    gt = _read_v1(v1, out) if v1 is not None else None
    if gt is not None:
        out.ground_truth_from = "v1"
        return gt
    out.ground_truth_from = "derived"
    return {"groups": [{**namespace_group, "root_cause": True}], "propagations": []}


def _flatten(disruptions: Any) -> list[dict[str, Any]]:
    """Every disruption's pre-injection waiters, injections and post-injection waiters, in order."""
    out: list[dict[str, Any]] = []
    for disruption in disruptions if isinstance(disruptions, list) else ():
        if not isinstance(disruption, Mapping):
            continue
        wait = disruption.get("waitFor") or {}
        for item in [*(wait.get("preInjection") or []), *(disruption.get("injections") or []), *(wait.get("postInjection") or [])]:
            if isinstance(item, Mapping) and isinstance(item.get("id"), str):
                out.append({"id": item["id"], "args": copy.deepcopy(dict(item.get("args") or {}))})
    return out


def _environment(args: Any, category: str) -> dict[str, Any]:
    """The scenario's ``environment`` options from ITBench's application ``args`` (``schemas/applications/``):
    ``autoscaling.kubernetes.hpa`` and ``loadGeneration`` (users, userSpawnRate); an option the twin cannot
    honour makes the scenario unsupported, with the option named. A FinOps scenario's cluster runs
    OpenCost (ITBench sets ``tools.finops.enabled`` for its FinOps category) and settles the longer FinOps
    baseline (``FINOPS_BASELINE_SECONDS``)."""
    if not isinstance(args, Mapping):
        raise _Invalid(f"invalid index: environment.applications[0].args must be an object, got {args!r}")
    out: dict[str, Any] = {"tools": {"finops": {"enabled": True}}, "baseline_seconds": FINOPS_BASELINE_SECONDS} \
        if category == "finops" else {}
    for key, value in args.items():
        if key == "autoscaling":
            out["autoscaling"] = copy.deepcopy(dict(value))
        elif key == "loadGeneration":
            load = dict(value)
            renamed = {"users": "users", "userSpawnRate": "spawn_rate", "browserTraffic": "browser_traffic"}
            unknown = sorted(set(load) - set(renamed))
            if unknown:
                raise _Unsupported(f"not yet supported: environment.applications[0].args.loadGeneration.{unknown[0]}")
            out["load"] = {renamed[k]: v for k, v in load.items()}
        else:
            raise _Unsupported(f"not yet supported: environment.applications[0].args.{key}")
    return out


def _schema_problems(schema: Mapping[str, Any], args: Any) -> str:
    import jsonschema

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(args), key=lambda e: -len(e.absolute_path))
    if not errors:
        return ""
    err = errors[0]
    where = "args" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
    return f"{where}: {err.message}"


def _is_fault(entry_id: str) -> bool:
    from itbench_gym.faults.catalogue import catalogue

    return catalogue()[entry_id].category != "Waiter"


def _namespace_of(entries: Sequence[Mapping[str, Any]]) -> str:
    for entry in entries:
        ns = ((entry["args"].get("kubernetesObject") or {}).get("metadata") or {}).get("namespace")
        if ns:
            return str(ns)
    return "default"


def _object_text(entry: Mapping[str, Any]) -> str:
    obj = entry["args"].get("kubernetesObject") or {}
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')} {meta.get('namespace', '')}/{meta.get('name', '?')}".replace(" /", " ")


def _name(description: str) -> str:
    first = re.split(r"(?<=\.)\s", description, maxsplit=1)[0].strip().rstrip(".")
    return first[:120] or "ITBench library scenario"


def scenario_class(entries: Sequence[Mapping[str, Any]]) -> str:
    """A class name from the first fault: the flag's name, the Chaos Mesh kind, or the fault id in CamelCase."""
    from itbench_gym.faults.catalogue import catalogue

    for entry in entries:
        if catalogue()[entry["id"]].category == "Waiter":
            continue
        args = entry["args"]
        if isinstance((args.get("flag") or {}).get("name"), str):
            name = args["flag"]["name"]
        elif isinstance((args.get("scheduleSpec") or {}).get("type"), str):
            spec = args["scheduleSpec"]
            inner = next((v for v in spec.values() if isinstance(v, Mapping)), {})
            action = str(inner.get("action") or "")
            name = spec["type"] + "".join(p.capitalize() for p in re.split(r"[^A-Za-z0-9]+", action) if p)
        else:
            name = "".join(p.capitalize() for p in entry["id"].split("-"))
        name = re.sub(r"[^A-Za-z0-9]", "", name)
        return (name[:1].upper() + name[1:]) or "Fault"
    return "Waiter"


#: Why a scenario injected through Chaos Mesh grades the diagnosis only (``desired_outcome.mitigation_not_graded``).
CHAOS_NOT_GRADED = ("The fault is a Chaos Mesh experiment, and the agent's credentials cannot reach Chaos Mesh (the "
                    "injection machinery is hidden by design), so no fix is within the agent's reach; ITBench's own "
                    "solution pauses or deletes the Schedule.")


def _mitigation_outcome(entries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    from itbench_gym.backends.rbac import HARNESS_NAMESPACES
    from itbench_gym.faults.catalogue import catalogue

    known = catalogue()
    if any(known[e["id"]].category == "Chaos Mesh" for e in entries if e["id"] in known):
        return {"mitigation_not_graded": CHAOS_NOT_GRADED}
    hidden = sorted({str(ns) for e in entries
                     if (ns := (((e.get("args") or {}).get("kubernetesObject") or {}).get("metadata") or {}).get("namespace"))
                     in HARNESS_NAMESPACES})
    if hidden:
        return {"mitigation_not_graded": f"The fault changes objects in {', '.join(hidden)}, the injection machinery's "
                                         "namespace, which the agent's credentials cannot reach (hidden by design), so "
                                         "no fix is within the agent's reach."}
    return {"mitigation": "The triggering alerts stop firing and the application serves its traffic again."}


def _mitigations(solutions: Any, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The faults' workarounds within the agent's grant (the oracle's route where there are any), then
    ``remove-faults``, then the index's solutions (commands kept only when all steps are runnable kubectl)."""
    from itbench_gym.faults.catalogue import catalogue, workarounds

    known = catalogue()
    routes = [{"id": w.id, "description": w.description, "commands": [shlex.join(w.argv)]}
              for e in entries if e["id"] in known for w in workarounds(known[e["id"]], e["args"])]
    out: list[dict[str, Any]] = []
    for i, alternative in enumerate(solutions if isinstance(solutions, list) else ()):
        steps = [s for group in alternative if isinstance(group, Mapping) for s in group.get("steps") or [] if isinstance(s, Mapping)]
        if not steps:
            continue
        texts = [str(s.get("text") or s.get("command") or "").strip() for s in steps]
        item: dict[str, Any] = {"id": f"itbench-solution-{i + 1}", "description": " ".join(t for t in texts if t) or "(no text)"}
        commands = [s.get("command") for s in steps]
        if all(isinstance(c, str) and runnable_kubectl(c) for c in commands):
            item["commands"] = commands
        out.append(item)
    changed = ", ".join(_object_text(e) for e in entries if _is_fault(e["id"]))
    removal = {"id": REMOVE_FAULTS, "revert_faults": True,
               "description": f"Revert what the injection changed ({changed}) to its state before the incident, "
                              "then restart the workloads that read what was reverted."}
    return [*routes, removal, *out]


def runnable_kubectl(command: str) -> bool:
    """Whether ``command`` is one non-interactive kubectl call the agent's kubectl tool accepts."""
    from itbench_gym.tools.base import ToolInputError
    from itbench_gym.tools.kubectl import KubectlTool

    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    if argv[:1] != ["kubectl"] or any(a in _KUBECTL_INTERACTIVE for a in argv[1:3]):
        return False
    try:
        KubectlTool.check(argv[1:])
    except ToolInputError:
        return False
    return True


def _solution_steps(solutions: Any) -> int:
    """Steps of the index's first solution (1 when it has none: undoing the fault)."""
    first = solutions[0] if isinstance(solutions, list) and solutions and isinstance(solutions[0], list) else []
    return max(1, sum(len(g.get("steps") or []) for g in first if isinstance(g, Mapping)))


def _read_v1(path: Path, out: ImportedScenario) -> dict[str, Any] | None:
    try:
        data = yamltext.load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yamltext.YAMLError) as exc:
        out.discrepancies.append(f"{path.name}: unreadable ({exc}); derived instead")
        return None
    if isinstance(data, Mapping) and data.get("kind") == "GroundTruth" and isinstance(data.get("spec"), Mapping):
        data = data["spec"]
    if not isinstance(data, Mapping) or not isinstance(data.get("groups"), list):
        out.discrepancies.append(f"{path.name}: no groups; derived instead")
        return None
    keep = ("groups", "aliases", "propagations", "fault", "alerts", "recommended_actions")
    gt = {k: copy.deepcopy(data[k]) for k in keep if isinstance(data.get(k), list)}
    gt.setdefault("propagations", [])
    return gt


def injected_refs(entries: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str | None, bool]]:
    """(kind, name, namespace, primary) of each fault's object (primary) and of what it spawns (a
    Schedule's experiments, named as its controller names them)."""
    from itbench_gym.spec.appfacts import GENERATED_SUFFIX

    out: list[tuple[str, str, str | None, bool]] = []
    for entry in entries:
        if not _is_fault(entry["id"]):
            continue
        obj = entry["args"].get("kubernetesObject") or {}
        meta = obj.get("metadata") or {}
        if not obj.get("kind") or not meta.get("name"):
            continue
        out.append((str(obj["kind"]), str(meta["name"]), meta.get("namespace"), True))
        spawned = (entry["args"].get("scheduleSpec") or {}).get("type")
        if isinstance(spawned, str):
            out.append((spawned, f"{meta['name']}-{GENERATED_SUFFIX}", meta.get("namespace"), False))
    return out


def clean_ground_truth(gt: dict[str, Any], entries: Sequence[Mapping[str, Any]], notes: list[str]) -> dict[str, Any]:
    """``gt`` with what contradicts itself or the index removed, each removal noted in ``notes``.

    Duplicate group ids keep their first definition; invalid filters and references to unknown ids
    are dropped; a root cause that is none of the index's injected objects loses its flag, and the
    injected objects become the root causes (a group is added for one no group names).
    """
    from itbench_gym.evaluation.entities import EntityRef, canonical_kind
    from itbench_gym.evaluation.groundtruth import Group, filter_problem

    groups: list[dict[str, Any]] = []
    for raw in gt.get("groups") or []:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str) or not isinstance(raw.get("kind"), str):
            notes.append(f"ground truth: malformed group {raw!r} dropped")
            continue
        group = {k: copy.deepcopy(v) for k, v in raw.items() if k in ("id", "kind", "namespace", "name", "filter", "root_cause")}
        if any(g["id"] == group["id"] for g in groups):
            notes.append(f"ground truth: group id {group['id']!r} defined twice; the first kept")
            continue
        filters = [f for f in group.get("filter") or [] if isinstance(f, str) and filter_problem(f) is None]
        if len(filters) != len(group.get("filter") or []):
            notes.append(f"ground truth: group {group['id']!r}: invalid filter(s) dropped")
        if filters:
            group["filter"] = filters
        else:
            group.pop("filter", None)
        if not filters and not group.get("name"):
            notes.append(f"ground truth: group {group['id']!r} names nothing; dropped")
            continue
        groups.append(group)
    refs = injected_refs(entries)

    def injected(group: Mapping[str, Any]) -> bool:
        probe = Group(id=group["id"], kind=canonical_kind(group["kind"]), namespace=group.get("namespace"),
                      name=group.get("name"), filters=tuple(group.get("filter") or ()))
        return any(probe.specificity(EntityRef(name, kind, ns)) is not None for kind, name, ns, _ in refs)

    for group in groups:
        if group.get("root_cause") and not injected(group):
            notes.append(f"ground truth: root cause {group['id']!r} ({group['kind']}) is none of the index's injected "
                         "objects; not a root cause here")
            group.pop("root_cause")
    for kind, name, ns, primary in refs:
        if not primary:
            continue  # a Schedule's experiment may be the root cause, but need not be
        probe_ref = EntityRef(name, kind, ns)
        named = [g for g in groups if Group(id=g["id"], kind=canonical_kind(g["kind"]), namespace=g.get("namespace"),
                                             name=g.get("name"), filters=tuple(g.get("filter") or ())).specificity(probe_ref) is not None]
        if not any(g.get("root_cause") for g in named):
            if named:
                named[0]["root_cause"] = True
                notes.append(f"ground truth: {kind} {name} (injected) was not a root cause; group {named[0]['id']!r} marked")
            else:
                gid = f"{kind.lower()}-{name}-injected"
                groups.append({"id": gid, "kind": kind, "name": name, **({"namespace": ns} if ns else {}), "root_cause": True})
                notes.append(f"ground truth: {kind} {name} (injected) had no group; added {gid!r} as root cause")
        for group in named:
            if group.get("root_cause") and not group.get("name"):
                group["name"] = name  # the injected object by its name, as a report names it
    out = dict(gt, groups=groups)
    return drop_dangling(out, notes)


def drop_dangling(gt: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``gt`` without aliases, propagations, alerts and fault entities that name unknown group ids."""
    ids = {g["id"] for g in gt["groups"]}
    aliases = []
    for alias in gt.get("aliases") or []:
        kept = [g for g in alias if g in ids] if isinstance(alias, list) else []
        if len(kept) != len(alias if isinstance(alias, list) else [None]):
            notes.append(f"ground truth: alias {alias!r} names unknown group(s); kept {kept}")
        if kept:
            aliases.append(kept)
    propagations = []
    for p in gt.get("propagations") or []:
        if isinstance(p, Mapping) and p.get("source") in ids and p.get("target") in ids:
            propagations.append({k: str(v) for k, v in p.items() if k in ("source", "target", "condition", "effect") and v is not None})
        else:
            notes.append(f"ground truth: propagation {_short(p)} names unknown group(s); dropped")
    alerts = []
    for a in gt.get("alerts") or []:
        if not isinstance(a, Mapping) or not isinstance(a.get("id"), str):
            continue
        alert = copy.deepcopy(dict(a))
        if alert.get("group_id") is not None and alert["group_id"] not in ids:
            notes.append(f"ground truth: alert {alert['id']} names unknown group {alert['group_id']!r}; group dropped")
            alert.pop("group_id")
        alerts.append(alert)
    faults = []
    for f in gt.get("fault") or []:
        if not isinstance(f, Mapping):
            continue
        fault = copy.deepcopy(dict(f))
        entity = fault.get("entity")
        if isinstance(entity, Mapping) and entity.get("group_id") is not None and entity.get("group_id") not in ids:
            notes.append(f"ground truth: fault entity {entity.get('group_id')!r} is no group; its group_id dropped")
            fault["entity"] = {k: v for k, v in entity.items() if k != "group_id"}
        faults.append(fault)
    out = {"groups": gt["groups"], "aliases": aliases, "propagations": propagations}
    if alerts:
        out["alerts"] = alerts
    if faults:
        out["fault"] = faults
    if gt.get("recommended_actions"):
        out["recommended_actions"] = gt["recommended_actions"]
    return out


def _short(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"{value.get('source')!r} -> {value.get('target')!r}"
    return repr(value)


def identity_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels of an alert that say *what* alerts, the same on every seed (no pod names, no values)."""
    return {k: str(labels[k]) for k in IDENTITY_LABELS if k in labels}


def with_triggering(imported: ImportedScenario, triggering: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """The finished document and every discrepancy: triggering alerts filled in, the ground truth
    derived when it has none, and ground-truth entries the app cannot have dropped (each noted)."""
    from itbench_gym.spec.loader import check_document

    if imported.document is None:
        raise ValueError(f"{imported.id}: {imported.unsupported}")
    doc = copy.deepcopy(imported.document)
    if triggering:
        doc["alerts"]["triggering"] = [copy.deepcopy(dict(a)) for a in triggering]
    if doc["ground_truth"] is None:
        doc["ground_truth"] = derive_ground_truth(doc)
    notes = list(imported.discrepancies)
    for _ in range(4):  # each pass drops what the references check rejects, then what named it
        problems = [p for p in check_document(doc) if p.path.startswith("ground_truth.")]
        if not problems:
            break
        drop_groups: set[int] = set()
        drop_alerts: set[int] = set()
        for p in problems:
            found = re.match(r"ground_truth\.(groups|alerts)\[(\d+)\]", p.path)
            if found is None:
                continue
            (drop_groups if found.group(1) == "groups" else drop_alerts).add(int(found.group(2)))
            notes.append(f"ground truth: {p.path}: {p.message}; dropped")
        gt = doc["ground_truth"]
        gt["groups"] = [g for i, g in enumerate(gt["groups"]) if i not in drop_groups]
        if "alerts" in gt:
            gt["alerts"] = [a for i, a in enumerate(gt["alerts"]) if i not in drop_alerts]
        if not any(g.get("root_cause") for g in gt["groups"]):
            gt["groups"] += derive_ground_truth(doc)["groups"][:1]
        doc["ground_truth"] = drop_dangling(gt, notes)
        if not drop_groups and not drop_alerts:
            break
    doc["metadata"]["complexity"]["factors"].update(_factors(doc["ground_truth"]))
    return doc, notes


def without_unshown(doc: Mapping[str, Any], unshown: Sequence[str], notes: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """``doc`` without the ground-truth groups in ``unshown`` (propagation targets that show no symptom
    on the twin; a root cause is never dropped) and the propagations and aliases that named them, each
    drop noted: ITBench's v1 files list targets its own clusters did not always show."""
    out, kept_notes = copy.deepcopy(dict(doc)), list(notes)
    gt = out["ground_truth"]
    drop = {gid for gid in unshown if any(g["id"] == gid and not g.get("root_cause") for g in gt["groups"])}
    if not drop:
        return out, kept_notes
    for group in gt["groups"]:
        if group["id"] in drop:
            kept_notes.append(f"ground truth: propagation target {group['id']!r} ({group['kind']}) shows no symptom "
                              "on the twin; dropped")
    gt["groups"] = [g for g in gt["groups"] if g["id"] not in drop]
    out["ground_truth"] = drop_dangling(gt, kept_notes)
    out["metadata"]["complexity"]["factors"].update(_factors(out["ground_truth"]))
    return out, kept_notes


def _factors(gt: Mapping[str, Any]) -> dict[str, int]:
    """Technologies: distinct entity kinds; propagation length: the longest chain of propagations."""
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_edges_from((p["source"], p["target"]) for p in gt.get("propagations") or [] if p["source"] != p["target"])
    longest = nx.dag_longest_path_length(graph) if graph.number_of_edges() and nx.is_directed_acyclic_graph(graph) \
        else graph.number_of_edges()
    return {"technologies": max(1, len({str(g["kind"]).lower() for g in gt["groups"]})), "propagation_length": int(longest)}


def derive_ground_truth(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Ground truth from the faults and the app: each injected object is a root cause; the workloads it
    acts on (their Pods, Service, Deployment as aliases) follow; then the call graph's callers up to
    each service a triggering alert names."""
    import networkx as nx

    from itbench_gym.faults.catalogue import catalogue
    from itbench_gym.paths import envs_dir
    from itbench_gym.spec.appfacts import load_app_facts

    facts = load_app_facts(envs_dir() / doc["environment"]["app"])
    ns = doc["environment"]["namespace"]
    groups: list[dict[str, Any]] = []
    aliases: list[list[str]] = []
    propagations: list[dict[str, str]] = []
    faults: list[dict[str, Any]] = []
    service_groups: dict[str, str] = {}

    def service_group(service: str) -> str:
        """The group of one of the behaviour model's services: the Kubernetes Services that pick its
        workload's pods (the service's own name when none does), with the pods as an alias."""
        if service in service_groups:
            return service_groups[service]
        sid = f"{service}-service"
        pid = f"{service}-pod"
        workload = facts.workload_of(service)
        pods = [p for p in facts.pods() if p.namespace in (None, ns) and p.owner and p.owner[1] == workload]
        fronts = sorted({s.name for s in facts.of_kind("Service", ns) for p in pods if s.selects(p)}) or [service]
        groups.append({"id": sid, "kind": "Service", "namespace": ns, "filter": [rf"{re.escape(name)}\b" for name in fronts]})
        members = [sid]
        if pods:
            groups.append({"id": pid, "kind": "Pod", "namespace": ns, "filter": [f"{re.escape(workload)}-.*"]})
            members.append(pid)
        aliases.append(members)
        service_groups[service] = sid
        return sid

    affected: list[str] = []
    for i, entry in enumerate(doc["faults"]):
        definition = catalogue()[entry["id"]]
        if definition.category == "Waiter":
            continue
        obj = entry["args"].get("kubernetesObject") or {}
        meta = obj.get("metadata") or {}
        rid = f"{str(obj.get('kind', 'object')).lower()}-{meta.get('name', i)}-{i}"
        groups.append({"id": rid, "kind": obj.get("kind", "Object"), "name": meta.get("name", ""),
                       **({"namespace": meta["namespace"]} if meta.get("namespace") else {}), "root_cause": True})
        faults.append({"category": definition.category, "condition": definition.description.split(".")[0][:200],
                       "entity": {"group_id": rid, "kind": obj.get("kind"), "name": meta.get("name")},
                       "fault_mechanism": entry["id"]})
        for service in map(facts.service_of, _acted_on(facts, entry["args"], ns)):
            target = service_group(service)
            propagations.append({"source": rid, "target": target, "condition": f"{entry['id']} injected",
                                 "effect": f"{service} misbehaves"})
            affected.append(service)
    calls = nx.DiGraph()
    calls.add_edges_from((callee, caller) for caller, callee in facts.calls)
    alerting = [str(a.get("labels", {}).get("service_name")) for a in doc["alerts"]["triggering"]
                if a.get("labels", {}).get("service_name")]
    for source in dict.fromkeys(affected):
        for sink in dict.fromkeys(alerting):
            if source == sink or source not in calls or sink not in calls or not nx.has_path(calls, source, sink):
                continue
            path = nx.shortest_path(calls, source, sink)
            for callee, caller in zip(path, path[1:], strict=False):
                edge = {"source": service_group(callee), "target": service_group(caller),
                        "condition": f"{callee} fails or slows", "effect": f"{caller}'s calls to {callee} fail or slow"}
                if edge not in propagations:
                    propagations.append(edge)
    alerts = [{"id": a["alertname"], **({"group_id": service_group(s)} if (s := a.get("labels", {}).get("service_name")) else {})}
              for a in doc["alerts"]["triggering"]]
    return {"groups": groups, "aliases": aliases, "propagations": propagations, "fault": faults, "alerts": alerts}


def _acted_on(facts: Any, args: Mapping[str, Any], namespace: str) -> list[str]:
    """The app's workloads (by name) a fault's arguments act on: a workload itself, the workloads that use a
    ConfigMap or Secret, a Service's pods' workloads, a Chaos Mesh selector's pods' workloads."""
    from itbench_gym.spec.references import selector_matches
    from itbench_gym.tasks.sre import template_refs

    obj = args.get("kubernetesObject") or {}
    kind, name = obj.get("kind"), (obj.get("metadata") or {}).get("name")
    pods = [p for p in facts.pods() if p.namespace in (None, namespace) and p.owner]
    chosen: list[Any] = []
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        chosen = [p for p in pods if p.owner == (kind, name)]
    elif kind in ("ConfigMap", "Secret"):
        chosen = [p for p in pods if (kind, name) in template_refs({"spec": p.body.get("spec") or {}})]
    elif kind == "Service":
        service = facts.find("Service", namespace, name)
        chosen = [p for p in pods if service is not None and service.selects(p)]
    schedule = args.get("scheduleSpec")
    if isinstance(schedule, Mapping):
        for experiment in schedule.values():
            selector = experiment.get("selector") if isinstance(experiment, Mapping) else None
            if isinstance(selector, Mapping):
                chosen += [p for p in pods if selector_matches(selector, p) is True]
    return list(dict.fromkeys(p.owner[1] for p in chosen))
