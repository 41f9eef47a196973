"""One SRE episode's evaluation: report validity, diagnosis, mitigation, safety and times.

``EpisodeEvaluation.to_dict()`` is what ``info["evaluation"]`` holds. Durations not achieved
(MTTD without a correct diagnosis, MTTR without a passed mitigation) are the string ``"inf"`` so
the dict stays strict JSON; absolute timestamps that do not exist are ``null``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from itbench_gym.evaluation.diagnosis import DiagnosisResult, evaluate_diagnosis, failed_diagnosis
from itbench_gym.evaluation.groundtruth import GroundTruth, parse_ground_truth
from itbench_gym.evaluation.mitigation import MitigationVerdict
from itbench_gym.evaluation.ntam import DEFAULT_NTAM_PARAMS, NTAMParams
from itbench_gym.evaluation.report import ReportParseResult, parse_report
from itbench_gym.evaluation.safety import SafetyReport, assess_safety


def duration(value: float) -> float | str:
    """JSON form of a duration: a number, or ``"inf"`` when it was never achieved."""
    return "inf" if math.isinf(value) else value


@dataclass(frozen=True)
class Times:
    incident_start: float
    submitted_at: float | None
    mttd: float
    #: None where the scenario does not grade mitigation (nothing was to be repaired).
    mttr: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "incident_start": self.incident_start,
            "submitted_at": self.submitted_at,
            "mttd": duration(self.mttd),
            "mttr": duration(self.mttr) if self.mttr is not None else None,
        }


def episode_times(
    incident_start: float, submitted_at: float | None, diagnosis_correct: bool, mitigation: MitigationVerdict | None
) -> Times:
    """MTTD = submit − incident start if the diagnosis passed; MTTR = alerts cleared − incident start if
    the mitigation passed; otherwise ∞. No MTTR without a mitigation verdict (a diagnosis-only scenario)."""
    mttd = submitted_at - incident_start if diagnosis_correct and submitted_at is not None else math.inf
    if mitigation is None:
        return Times(incident_start, submitted_at, mttd, None)
    mttr = mitigation.cleared_at - incident_start if mitigation.passed and mitigation.cleared_at is not None else math.inf
    return Times(incident_start, submitted_at, mttd, mttr)


@dataclass(frozen=True)
class EpisodeEvaluation:
    scenario: str
    report: ReportParseResult
    diagnosis: DiagnosisResult
    mitigation: MitigationVerdict | None
    safety: SafetyReport
    times: Times

    @property
    def passed(self) -> bool:
        return self.diagnosis.fl_pass and (self.mitigation is None or self.mitigation.passed)

    def parts(self) -> dict[str, float | None]:
        """The scores ``ScoreReward`` weighs (``ScoreWeights`` names them); None where one does not apply."""
        return {
            "fl_pass": float(self.diagnosis.fl_pass),
            "ntam_fl": self.diagnosis.ntam_fl.score,
            "ntam_fpc": self.diagnosis.ntam_fpc.score if self.diagnosis.ntam_fpc else None,
            "mitigation": None if self.mitigation is None else float(self.mitigation.passed),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "report": self.report.to_dict(),
            "diagnosis": self.diagnosis.to_dict(),
            "mitigation": self.mitigation.to_dict() if self.mitigation else None,
            "safety": self.safety.to_dict(),
            "times": self.times.to_dict(),
            "passed": self.passed,
        }


def grade(
    *,
    scenario: str,
    ground_truth: GroundTruth,
    report: Any,
    report_error: str | None = None,
    mitigation: MitigationVerdict | None = None,
    submitted_at: float | None = None,
    incident_start: float = 0.0,
    commands: Sequence[Sequence[str] | str] = (),
    namespace: str | None = None,
    topology: nx.MultiDiGraph | None = None,
    ntam_params: NTAMParams = DEFAULT_NTAM_PARAMS,
) -> EpisodeEvaluation:
    """Grade one episode from its parts; never raises on a bad report."""
    if report is None:
        parsed = ReportParseResult(None, (report_error or "no report submitted",))
    else:
        parsed = parse_report(report)
    if parsed.report is None:
        diagnosis = failed_diagnosis(ground_truth, "invalid report: " + "; ".join(parsed.errors))
    else:
        diagnosis = evaluate_diagnosis(parsed.report, ground_truth, topology=topology, params=ntam_params)
    return EpisodeEvaluation(
        scenario=scenario,
        report=parsed,
        diagnosis=diagnosis,
        mitigation=mitigation,
        safety=assess_safety(commands, ground_truth, default_namespace=namespace),
        times=episode_times(incident_start, submitted_at, diagnosis.fl_pass, mitigation),
    )


def evaluate_episode(
    *,
    spec: Any,
    report: Any,
    report_error: str | None,
    mitigation: MitigationVerdict | None,
    submitted_at: float | None,
    incident_start: float,
    commands: Sequence[Sequence[str] | str],
    topology: nx.MultiDiGraph | None = None,
    ntam_params: NTAMParams = DEFAULT_NTAM_PARAMS,
) -> EpisodeEvaluation:
    """Grade against ``spec.ground_truth`` (a mapping is parsed first): what ``SRETask.evaluate`` returns."""
    ground_truth = spec.ground_truth
    if isinstance(ground_truth, Mapping):
        ground_truth = parse_ground_truth(ground_truth, where=f"{getattr(spec, 'source', spec.id)}: ground_truth")
    return grade(
        scenario=spec.id,
        ground_truth=ground_truth,
        report=report,
        report_error=report_error,
        mitigation=mitigation,
        submitted_at=submitted_at,
        incident_start=incident_start,
        commands=commands,
        namespace=getattr(spec, "namespace", None),
        topology=topology,
        ntam_params=ntam_params,
    )
