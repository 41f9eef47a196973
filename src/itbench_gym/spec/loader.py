"""Load scenario YAML files, validate them, check their references, and build ``ScenarioSpec``s.

A file is checked in three layers, and every problem of a layer is reported (not only the first):
the JSON Schema (``scenario.schema.json``); then the ground truth (regular expressions, group ids)
and the fault arguments against the fault catalogue; then every reference into the app's data in
``envs/<app>/`` (:mod:`itbench_gym.spec.references`). A problem names the file, the field path
(``faults[0].args.kubernetesObject.metadata.name``), what was found and what was expected.

Importing this module is cheap: the validators (jsonschema, the ground truth's networkx, the fault
catalogue, the app facts) are imported on the first check, so ``import itbench_gym`` can register
ids from :func:`read_spec_id` without paying for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itbench_gym.lang import yamltext
from itbench_gym.paths import envs_dir, specs_dir
from itbench_gym.spec.loadshape import parse_shape, shape_problems
from itbench_gym.spec.model import (
    COMPLEXITY_LEVELS,
    AlertMatcher,
    Budget,
    Complexity,
    FaultRef,
    LoadOptions,
    Observability,
    ScenarioSpec,
    complexity_level,
    complexity_score,
)

if TYPE_CHECKING:
    import jsonschema

_SCHEMA_PATH = Path(__file__).with_name("scenario.schema.json")


@dataclass(frozen=True)
class SpecProblem:
    """One problem of a scenario file: the field path (``faults[0].args.flag.name``) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class SpecError(ValueError):
    """A scenario file that cannot be used; names the file, and every problem's field path and message.

    ``path`` and ``message`` are those of the first problem; ``problems`` lists all of them.
    """

    def __init__(self, source: Path | str, path: str = "", message: str = "", *,
                 problems: Sequence[SpecProblem] = ()) -> None:
        self.source = str(source)
        self.problems: tuple[SpecProblem, ...] = tuple(problems) or (SpecProblem(path, message),)
        self.path = self.problems[0].path
        self.message = self.problems[0].message
        if len(self.problems) == 1:
            text = f"{source}: {self.problems[0]}"
        else:
            text = f"{source}: {len(self.problems)} problems:\n" + "\n".join(f"  {source}: {p}" for p in self.problems)
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        """Keep every problem when the error crosses a process boundary (batch runs)."""
        return (_spec_error, (self.source, self.problems))


def _spec_error(source: str, problems: tuple[SpecProblem, ...]) -> SpecError:
    return SpecError(source, problems=problems)


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(_SCHEMA_PATH.read_text())
    return schema


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema  # ~50 ms; only validation needs it, not registering ids at import

    return jsonschema.Draft202012Validator(_schema())


@lru_cache(maxsize=1)
def _id_pattern() -> re.Pattern[str]:
    """An id either schema allows (an SRE-style scenario's or a compliance scenario's)."""
    from itbench_gym.spec import compliance

    patterns = [schema["properties"]["metadata"]["properties"]["id"]["pattern"] for schema in (_schema(), compliance.schema())]
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def read_spec_id(path: Path | str) -> tuple[str, str | None] | None:
    """``metadata.id`` and ``metadata.domain`` of a scenario file, read without validating it, so that
    ids can be registered at import for ~1 ms a file. None when no id of the schema's form can be
    read: ``load_spec`` then reports why, with the file and field path."""
    try:
        doc = yamltext.load(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError, yamltext.YAMLError):  # the errors read_document reports
        return None
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return None
    sid, domain = meta.get("id"), meta.get("domain")
    if not isinstance(sid, str) or not _id_pattern().fullmatch(sid):
        return None
    return sid, domain if isinstance(domain, str) else None


def _json_path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_problems(doc: Any) -> list[SpecProblem]:
    """Every schema violation, most specific first within a field, in document order (a compliance
    scenario against ``compliance.schema.json``, any other against ``scenario.schema.json``)."""
    from itbench_gym.spec import compliance

    found = compliance.schema_errors(doc) if compliance.is_compliance_document(doc) else _validator().iter_errors(doc)
    errors = sorted(found, key=lambda e: (_order(e.absolute_path), -len(e.absolute_path), str(e.message)))
    out: list[SpecProblem] = []
    for err in errors:
        problem = SpecProblem(_json_path(err.absolute_path), _message(err))
        if problem not in out:
            out.append(problem)
    return out


def _order(path: Iterable[Any]) -> list[tuple[int, Any]]:
    """Sort key for a schema path: indices numerically, names alphabetically."""
    return [(0, p) if isinstance(p, int) else (1, str(p)) for p in path]


def _message(err: jsonschema.ValidationError) -> str:
    try:
        return str(err.message)[:400]
    except ValueError:  # a value too large to print
        return f"invalid value ({err.validator} {err.validator_value!r})"


def validate_document(doc: Any, source: Path | str) -> None:
    """Raise ``SpecError`` listing every schema violation (the most specific first)."""
    problems = schema_problems(doc)
    if problems:
        raise SpecError(source, problems=problems)


def check_document(doc: Any, *, envs: Path | None = None) -> list[SpecProblem]:
    """Every problem of a scenario document: schema first; when that passes, ground truth, fault
    arguments against the catalogue, and references into the app's data (``envs/<app>/``)."""
    # Imported here: they pull networkx, the fault injectors' Kubernetes client and the app facts,
    # which registering ids at import must not pay for.
    from itbench_gym.evaluation.groundtruth import GroundTruthError, parse_ground_truth
    from itbench_gym.faults.catalogue import fault_args_problems
    from itbench_gym.spec import compliance
    from itbench_gym.spec.references import check_references

    problems = schema_problems(doc)
    if problems:
        return _in_file_order(problems)
    if compliance.is_compliance_document(doc):
        return [SpecProblem(path, message) for path, message in compliance.semantic_problems(doc, envs or envs_dir())]
    gt_problems: list[tuple[str, str]] = []
    try:
        parse_ground_truth(doc["ground_truth"], where="ground_truth", strict=True)
    except GroundTruthError as exc:
        gt_problems = list(exc.problems)
    for i, fault in enumerate(doc["faults"]):
        problems += [SpecProblem(f"faults[{i}].{where}", message) for where, message in fault_args_problems(fault["id"], fault["args"])]
    problems += complexity_problems(doc["metadata"]["complexity"])
    shape = doc["environment"].get("load", {}).get("shape")
    if shape is not None:
        problems += [SpecProblem(path, message) for path, message in shape_problems(shape, "environment.load.shape")]
    problems += [SpecProblem(path, message) for path, message in check_references(doc, envs or envs_dir())]
    problems += [SpecProblem(path, message) for path, message in gt_problems]
    return _in_file_order(problems)


@lru_cache(maxsize=1)
def _shape_validator() -> jsonschema.Draft202012Validator:
    import jsonschema

    return jsonschema.Draft202012Validator(_schema()["properties"]["environment"]["properties"]["load"]["properties"]["shape"])


def shape_document_problems(doc: Any) -> list[SpecProblem]:
    """Every problem of a load shape on its own (the JSON a shape program reads), paths from its root."""
    problems = [SpecProblem(_json_path(e.absolute_path), _message(e)) for e in _shape_validator().iter_errors(doc)]
    return problems or [SpecProblem(path, message) for path, message in shape_problems(doc, "")]


def complexity_problems(complexity: Any) -> list[SpecProblem]:
    """A declared ``level`` that Eq. 6 over the declared factors does not give (the level is then
    a claim no one can check); [] when it agrees or is left out (then it is computed)."""
    factors = complexity["factors"]
    score = complexity_score(factors["technologies"], factors["propagation_length"], factors["resolution_steps"])
    expected = complexity_level(score)
    declared = complexity.get("level")
    if declared is None or declared == expected:
        return []
    bounds = ", ".join(f"{level} < {bound:g}" for level, bound in COMPLEXITY_LEVELS[:-1])
    return [SpecProblem("metadata.complexity.level",
                        f"{declared!r}, but Eq. 6 gives {score:.2f} = cbrt({factors['propagation_length']} x "
                        f"{factors['resolution_steps']} x {factors['technologies']}), which is {expected!r} ({bounds})")]


#: Order in which problems are listed: the order of the sections in a scenario file.
_SECTIONS = {name: i for i, name in enumerate(
    ["", "apiVersion", "kind", "metadata", "environment", "faults", "alerts", "ground_truth", "mitigations",
     "desired_outcome", "finops", "budget"])}


def _in_file_order(problems: list[SpecProblem]) -> list[SpecProblem]:
    """Problems by the section of the file they are in (stable within a section)."""
    return sorted(problems, key=lambda p: _SECTIONS.get(p.path.split(".")[0].split("[")[0], len(_SECTIONS)))


def _load_options(raw: dict[str, Any]) -> LoadOptions:
    return LoadOptions(**{k: v for k, v in raw.items() if k != "shape"}, shape=parse_shape(raw.get("shape")))


def _build(doc: dict[str, Any], source: Path, envs: Path | None = None) -> ScenarioSpec:
    from itbench_gym.spec import compliance

    if compliance.is_compliance_document(doc):
        return compliance.build(doc, source, envs or envs_dir())
    meta = doc["metadata"]
    env = doc["environment"]
    factors = meta["complexity"]["factors"]
    obs = env.get("observability", {})
    gt = doc["ground_truth"]
    return ScenarioSpec(
        id=meta["id"],
        name=meta["name"],
        description=meta["description"].strip(),
        domain=meta["domain"],
        task=meta.get("task", meta["domain"]),
        cls=meta["class"],
        complexity=Complexity(
            level=meta["complexity"].get("level") or complexity_level(
                complexity_score(factors["technologies"], factors["propagation_length"], factors["resolution_steps"])),
            technologies=factors["technologies"],
            propagation_length=factors["propagation_length"],
            resolution_steps=factors["resolution_steps"],
        ),
        app=env["app"],
        namespace=env["namespace"],
        observability=Observability(**obs),
        load=_load_options(env.get("load", {})),
        baseline_seconds=float(env.get("baseline_seconds", 600)),
        hpa=bool(env.get("autoscaling", {}).get("kubernetes", {}).get("hpa", False)),
        finops=bool(env.get("tools", {}).get("finops", {}).get("enabled", False)),
        faults=tuple(FaultRef(id=f["id"], args=f["args"]) for f in doc["faults"]),
        triggering_alerts=tuple(
            AlertMatcher(alertname=a["alertname"], labels=dict(a.get("labels", {})))
            for a in doc["alerts"]["triggering"]
        ),
        alert_wait_timeout=float(doc["alerts"].get("wait_timeout_seconds", 1800)),
        ground_truth=gt,
        mitigations=tuple(doc.get("mitigations", [])),
        desired_outcome=doc["desired_outcome"],
        budget=Budget(max_steps=doc["budget"]["max_steps"], max_sim_seconds=float(doc["budget"]["max_sim_seconds"])),
        source=source,
        itbench_scenario=meta.get("itbench_scenario"),
        tags=tuple(meta.get("tags", [])),
        derived_from=meta.get("derived_from"),
        budgets={k: float(v) for k, v in (doc.get("finops") or {}).get("budgets", {}).items()},
    )


def read_document(path: Path | str) -> Any:
    """The parsed YAML of a scenario file; unreadable files and invalid YAML are ``SpecError``s."""
    source = Path(path)
    try:
        return yamltext.load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(source, "", f"cannot read file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(source, "", f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except yamltext.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise SpecError(source, "", f"invalid YAML: {where}{getattr(exc, 'problem', None) or exc}") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer literal too long to convert
        raise SpecError(source, "", f"invalid YAML: {type(exc).__name__}: {str(exc)[:200]}") from None


def spec_from_document(doc: Any, source: Path | str, *, envs: Path | None = None) -> ScenarioSpec:
    """A spec from an in-memory document (one the generator drafts, an imported ITBench scenario),
    checked as a file is; ``source`` names it in errors."""
    problems = check_document(doc, envs=envs)
    if problems:
        raise SpecError(source, problems=problems)
    return _build(doc, Path(source), envs)


def load_spec(path: Path | str, *, envs: Path | None = None) -> ScenarioSpec:
    """Load one scenario file; every problem is listed in one ``SpecError`` naming file and fields."""
    source = Path(path)
    return spec_from_document(read_document(source), source, envs=envs)


def domain_files(base: Path) -> list[Path]:
    """``<base>/<domain>/*.yaml`` for the schema's domains only: other folders are not scenarios."""
    domains = _schema()["properties"]["metadata"]["properties"]["domain"]["enum"]
    return sorted(file for domain in domains for file in (base / domain).glob("*.yaml"))


def spec_files(paths: Iterable[Path | str] = ()) -> list[Path]:
    """The scenario files named by ``paths`` (folders give their ``*.yaml`` files, recursively), or
    every shipped spec (``scenario_specs/<domain>/*.yaml``) when none are given."""
    paths = list(paths)
    if not paths:
        return domain_files(specs_dir())
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.yaml")) if p.is_dir() else [p]
    return out


def check_spec_files(paths: Iterable[Path | str] = ()) -> tuple[list[ScenarioSpec], list[SpecError]]:
    """Load every file (see :func:`spec_files`), collecting each bad file's ``SpecError`` instead of
    stopping at the first; a scenario id used by two files is an error of the second."""
    return _check_files(spec_files(paths))


def _check_files(files: Iterable[Path]) -> tuple[list[ScenarioSpec], list[SpecError]]:
    specs: dict[str, ScenarioSpec] = {}
    errors: list[SpecError] = []
    for file in files:
        try:
            spec = load_spec(file)
        except SpecError as exc:
            errors.append(exc)
            continue
        if spec.id in specs:
            errors.append(duplicate_id_error(file, spec.id, specs[spec.id].source))
            continue
        specs[spec.id] = spec
    return [specs[k] for k in sorted(specs)], errors


def duplicate_id_error(source: Path, spec_id: str, other: Path) -> SpecError:
    """The error of the second of two files that declare the same scenario id."""
    return SpecError(source, "metadata.id", f"duplicate id {spec_id!r}, also in {other}")


def load_all_specs(root: Path | None = None) -> list[ScenarioSpec]:
    """Every ``*.yaml`` under ``scenario_specs/<domain>/``, sorted by id; any bad file is an error."""
    base = root or specs_dir()
    specs, errors = _check_files(domain_files(base))
    if errors:
        raise errors[0]
    return specs
