"""Scenario specs -> Gymnasium registrations (``SRE-CacheFailure-v0``, ``...-NoTraces-v0`` variants).

``import itbench_gym`` registers every id from a cheap index (each file's ``metadata.id`` and
``metadata.domain``, read without validation) with a string entry point, so Gymnasium imports the
env only on ``make``. A spec is loaded and validated the first time it is needed (``get_spec``,
``make``, ``list_scenarios``, ``scenario_ids``), and a bad file raises its ``SpecError`` then, naming
the file and the field path. A file whose id cannot be read is not registered: importing warns, and
listing the ids or asking for an id that is not registered raises that file's ``SpecError``.

ITBench's own library (:func:`load_itbench_library`, or ``ITBENCH_LIBRARY`` at import) registers
``ITBench-<id>-v0`` per index from the index's id alone; each is converted on first use
(:mod:`itbench_gym.spec.itbench`), and one whose index lists no alerts is run once on the twin to
decide them (cached on disk). A scenario that cannot run here raises ``UnsupportedScenarioError``
with the reason.
"""

from __future__ import annotations

import difflib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from itbench_gym.spec.loader import SpecError, duplicate_id_error, load_spec, read_spec_id, spec_files

if TYPE_CHECKING:
    from itbench_gym.spec.itbench import ImportedScenario
    from itbench_gym.spec.itbench import Library as ITBenchLibrary
    from itbench_gym.spec.model import ScenarioSpec

ENTRY_POINT = "itbench_gym.env:ITBenchEnv"
#: Variant suffix -> observability modality it masks.
_VARIANTS = {"NoTraces": "traces", "NoLogs": "logs"}
_VERSION = re.compile(r"-v(\d+)$")


class UnknownScenarioError(gym.error.UnregisteredEnv):
    """An id that is not a scenario; the message lists the closest ids."""


class UnsupportedScenarioError(SpecError):
    """A library scenario this installation cannot run yet (a fault type, app or task it lacks)."""


@dataclass(frozen=True)
class _Entry:
    """Where a registered id comes from: the id of its spec, and the modality a variant masks."""

    base: str
    masks: str | None = None


class ScenarioIndex:
    """The scenario ids of a set of spec files, read cheaply; each spec is validated on first use.

    Specs are cached per file, so a spec is validated once per process however often it is asked for.
    """

    def __init__(self, files: Sequence[Path]) -> None:
        self.files = tuple(files)
        #: The id read from each file when indexing (None: unreadable; ``load_spec`` says why).
        self._read: dict[Path, str | None] = {}
        #: Spec id -> the files that declare it, in file order (two or more: a duplicate).
        self._claims: dict[str, list[Path]] = {}
        variants: dict[str, _Entry] = {}
        for file in self.files:
            header = read_spec_id(file)
            self._read[file] = header[0] if header else None
            if header is None:
                continue
            sid, domain = header
            self._claims.setdefault(sid, []).append(file)
            if domain == "sre":
                for suffix, modality in _VARIANTS.items():
                    variants[_VERSION.sub(f"-{suffix}-v\\1", sid)] = _Entry(sid, modality)
        self._entries: dict[str, _Entry] = {sid: _Entry(sid) for sid in self._claims} | variants
        self._loaded: dict[Path, ScenarioSpec] = {}
        self._specs: dict[str, ScenarioSpec] = {}

    @property
    def unread(self) -> tuple[Path, ...]:
        """Files whose id could not be read, hence not registered."""
        return tuple(file for file, sid in self._read.items() if sid is None)

    def ids(self) -> list[str]:
        """Every id to register (specs and their variants), read without validation."""
        return sorted(self._entries)

    def spec(self, scenario_id: str) -> ScenarioSpec:
        """The validated spec of a registered id; ``SpecError`` for a bad file."""
        if scenario_id in self._specs:
            return self._specs[scenario_id]
        entry = self._entries.get(scenario_id)
        if entry is None:
            for file in self.unread:  # the id asked for may be in a file that could not be read
                self._load(file)
            close = difflib.get_close_matches(scenario_id, self._entries, n=5, cutoff=0.5)
            hint = f" Did you mean: {', '.join(close)}?" if close else ""
            from itbench_gym.spec.itbench import ID_PREFIX

            if scenario_id.startswith(ID_PREFIX) and not _LIBRARY_ROOTS:
                hint += (" ITBench library scenarios are registered from their library: set ITBENCH_LIBRARY to its folder"
                         " before importing itbench_gym, or call itbench_gym.load_itbench_library(folder).")
            raise UnknownScenarioError(f"unknown scenario id {scenario_id!r}.{hint} See itbench_gym.list_scenarios().")
        files = self._claims[entry.base]
        specs = [self._load(file) for file in files]  # a bad file reports its own problems first
        if len(files) > 1:
            raise duplicate_id_error(files[1], entry.base, files[0])
        spec = specs[0]
        if entry.masks is not None:
            spec = replace(spec.with_observability(**{entry.masks: False}), id=scenario_id)
        self._specs[scenario_id] = spec
        return spec

    def base_specs(self) -> dict[str, ScenarioSpec]:
        """Every spec (no variants) by id, all validated; the first bad file, in file order, raises."""
        specs: dict[str, ScenarioSpec] = {}
        for file in self.files:
            spec = self._load(file)
            if spec.id in specs:
                raise duplicate_id_error(file, spec.id, specs[spec.id].source)
            specs[spec.id] = spec
        return specs

    def _load(self, file: Path) -> ScenarioSpec:
        """The validated spec of ``file``, whose id must still be the one registered."""
        if file in self._loaded:
            return self._loaded[file]
        spec = load_spec(file)
        registered = self._read[file]
        if spec.id != registered:
            why = "could not be read then" if registered is None else f"it was {registered!r}: the file changed since"
            raise SpecError(file, "metadata.id", f"{spec.id!r} is not the id registered at import ({why}); restart Python")
        self._loaded[file] = spec
        return spec


@dataclass
class LibraryEntry:
    """One index of an ITBench library: registered by id, converted and finished on first use."""

    library: ITBenchLibrary
    source: Path
    _imported: ImportedScenario | None = None
    _spec: ScenarioSpec | None = None
    #: Every discrepancy of the finished scenario (the import's and the ground truth's cleaning).
    discrepancies: tuple[str, ...] = ()

    @property
    def imported(self) -> ImportedScenario:
        if self._imported is None:
            from itbench_gym.spec.itbench import import_scenario

            self._imported = import_scenario(self.library, self.source)
        return self._imported

    @property
    def settled(self) -> ScenarioSpec | None:
        """The spec if this process has finished it (:meth:`spec`), without running the twin."""
        return self._spec

    def spec(self) -> ScenarioSpec:
        """The validated spec (its alerts decided on the twin when the index lists none or lists alerts
        that never fire there, and its v1 or derived ground truth's propagation targets that show no symptom
        there dropped)."""
        if self._spec is not None:
            return self._spec
        imported = self.imported
        if imported.invalid is not None:
            raise SpecError(self.source, "", imported.invalid)
        if imported.unsupported is not None:
            raise UnsupportedScenarioError(self.source, "", imported.unsupported)
        from itbench_gym.faults.catalogue import FaultError
        from itbench_gym.spec.itbench import with_triggering
        from itbench_gym.spec.loader import spec_from_document
        from itbench_gym.validate.triggering import NoAlertError, decided_alerts, decided_unshown, index_alerts_checked

        triggering: list[dict[str, Any]] = []
        checked: list[str] = []
        try:
            if imported.alerts_from == "none":  # a FinOps control: nothing injected, nothing to wait for
                triggering = []
            elif imported.alerts_from == "twin":
                triggering = decided_alerts(imported)
            else:
                names = [str(a["alertname"]) for a in (imported.document or {}).get("alerts", {}).get("triggering", [])]
                triggering, checked = index_alerts_checked(imported, names)
        except NoAlertError as exc:
            raise SpecError(self.source, "alerts", str(exc)) from None
        except FaultError as exc:  # an injection the index asks for fails on the app as deployed
            raise SpecError(self.source, "disruptions", f"its faults cannot be injected: {exc}") from None
        doc, notes = with_triggering(imported, triggering)
        notes += checked
        if imported.ground_truth_from in ("v1", "derived") and imported.domain == "sre":
            from itbench_gym.spec.itbench import without_unshown

            doc, notes = without_unshown(doc, decided_unshown(imported, doc), notes)
        self._spec = spec_from_document(doc, self.source)
        self.discrepancies = tuple(notes)
        return self._spec


#: Library scenarios by base id (``ITBench-<id>-v0``), and the roots loaded (for worker processes).
_LIBRARY: dict[str, LibraryEntry] = {}
_LIBRARY_ROOTS: list[Path] = []


def load_itbench_library(path: Path | str) -> list[str]:
    """Register every scenario index of an ITBench library folder as ``ITBench-<id>-v0`` (and its
    ``-NoTraces``/``-NoLogs`` variants); returns the base ids, supported or not. Loading the same
    folder again is a no-op; an id another folder or a shipped spec already has is an error."""
    from itbench_gym.spec.itbench import ID_PREFIX, open_library

    library = open_library(path)
    shipped = set(_index().ids())
    ids: list[str] = []
    for file in library.scenarios:
        raw = _index_header(file)
        sid = f"{ID_PREFIX}{raw[0]}-v0"
        known = _LIBRARY.get(sid)
        if known is not None and known.source.resolve() != file.resolve():
            raise SpecError(file, "id", f"duplicate id {sid!r}, also in {known.source}")
        if sid in shipped:
            raise SpecError(file, "id", f"duplicate id {sid!r}, also a shipped scenario spec")
        if known is None:
            _LIBRARY[sid] = LibraryEntry(library, file)
        ids.append(sid)
        variants = [_VERSION.sub(f"-{suffix}-v\\1", sid) for suffix in _VARIANTS] if raw[1] == "sre" else []
        for gid in (sid, *variants):
            if gid not in gym.registry:
                gym.register(id=gid, entry_point=ENTRY_POINT, kwargs={"scenario": gid}, max_episode_steps=None)
    if library.root.resolve() not in _LIBRARY_ROOTS:
        _LIBRARY_ROOTS.append(library.root.resolve())
    return ids


def _index_header(file: Path) -> tuple[str, str]:
    """An index's id (its file name when unreadable) and category, read without converting it."""
    import json

    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return file.stem, "sre"
    if not isinstance(doc, dict):
        return file.stem, "sre"
    return str(doc.get("id", file.stem)), str(doc.get("category") or "sre")


def library_roots() -> list[Path]:
    """The library folders loaded in this process (a worker process loads the same)."""
    return list(_LIBRARY_ROOTS)


def library_entry(scenario_id: str) -> LibraryEntry | None:
    """The library entry of an id or of one of its variants, if it is a library scenario."""
    base = _variant_base(scenario_id)
    return _LIBRARY.get(base[0]) if base else None


def _variant_base(scenario_id: str) -> tuple[str, str | None] | None:
    """(base id, masked modality) for a library id or variant."""
    if scenario_id in _LIBRARY:
        return scenario_id, None
    for suffix, modality in _VARIANTS.items():
        base = scenario_id.replace(f"-{suffix}-v", "-v")
        if base != scenario_id and base in _LIBRARY:
            return base, modality
    return None


@lru_cache(maxsize=1)
def _index() -> ScenarioIndex:
    """The shipped specs' index (``scenario_specs/<domain>/*.yaml``), read once per process."""
    return ScenarioIndex(spec_files())


def scenario_ids() -> list[str]:
    """Every registered id; every shipped spec is validated first, so a bad file raises rather than
    being skipped (library ids are listed without converting them)."""
    index = _index()
    index.base_specs()
    library = [gid for sid in _LIBRARY for gid in (sid, *(_VERSION.sub(f"-{s}-v\\1", sid) for s in _VARIANTS))
               if gid in gym.registry]
    return sorted([*index.ids(), *library])


def get_spec(scenario_id: str) -> ScenarioSpec:
    """The validated spec of a scenario id; ``UnknownScenarioError`` suggests the closest ids,
    ``UnsupportedScenarioError`` says why a library scenario cannot run here."""
    base = _variant_base(scenario_id)
    if base is None:
        return _index().spec(scenario_id)
    spec = _LIBRARY[base[0]].spec()
    if base[1] is not None:
        spec = replace(spec.with_observability(**{base[1]: False}), id=scenario_id)
    return spec


def list_scenarios(domain: str | None = None, complexity: str | None = None, cls: str | None = None,
                   library: bool = True) -> list[dict[str, Any]]:
    """Summaries of the scenarios matching every given filter (variants excluded); ``library=False``
    leaves out the ITBench library scenarios this process has loaded."""
    out = []
    for _, spec in sorted(_index().base_specs().items()):
        if domain and spec.domain != domain.lower():
            continue
        if complexity and spec.complexity.level != complexity.lower():
            continue
        if cls and spec.cls != cls:
            continue
        out.append(spec.summary())
    for sid, entry in sorted(_LIBRARY.items()) if library else ():
        summary = entry.imported.summary()
        if summary["unsupported"] is not None or summary["invalid"] is not None:
            continue
        if (domain and summary["domain"] != domain.lower()) or (complexity and summary["complexity"] != complexity.lower()) \
                or (cls and summary["class"] != cls):
            continue
        meta = (entry.imported.document or {})["metadata"]
        out.append({"id": sid, "name": meta["name"], "domain": summary["domain"], "task": "sre", "class": summary["class"],
                    "complexity": summary["complexity"], "app": summary["app"], "description": meta["description"],
                    "itbench_scenario": summary["itbench_scenario"], "derived_from": None})
    return out


def register_all() -> None:
    """Register every scenario id with Gymnasium (idempotent), without loading a spec or the env."""
    index = _index()
    for file in index.unread:
        warnings.warn(f"{file}: scenario not registered, its metadata.id cannot be read "
                      "(itbench_gym.list_scenarios() or `itbench-gym validate` says why)", stacklevel=2)
    for sid in index.ids():
        if sid in gym.registry:
            continue
        gym.register(
            id=sid,
            entry_point=ENTRY_POINT,
            kwargs={"scenario": sid},
            max_episode_steps=None,
            disable_env_checker=False,
        )


def make(scenario_id: str, **kwargs: Any) -> gym.Env:
    """``gymnasium.make`` with a "did you mean" error for unknown ids."""
    get_spec(scenario_id)
    return gym.make(scenario_id, **kwargs)


def make_vec(scenario_id: str, num_envs: int = 1, **kwargs: Any) -> gym.vector.VectorEnv:
    """``gymnasium.make_vec`` with the same check of the id as :func:`make`."""
    get_spec(scenario_id)
    return gym.make_vec(scenario_id, num_envs=num_envs, **kwargs)
