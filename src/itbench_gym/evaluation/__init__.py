"""Grading: diagnosis (pass@1, NTAM, P/R/F1, chain LCS, proximity), mitigation, safety, pass@k."""

from itbench_gym.evaluation.aggregate import MeanSE, format_table, mean_se, pass_at_k, summarise
from itbench_gym.evaluation.diagnosis import DiagnosisResult, evaluate_diagnosis
from itbench_gym.evaluation.episode import EpisodeEvaluation, evaluate_episode, grade
from itbench_gym.evaluation.groundtruth import GroundTruth, GroundTruthError, load_ground_truth, parse_ground_truth
from itbench_gym.evaluation.mitigation import Baseline, MitigationVerdict, TrafficSample, WorkloadState, watch_mitigation
from itbench_gym.evaluation.ntam import NTAMParams
from itbench_gym.evaluation.report import REPORT_SCHEMA, DiagnosisReport, parse_report
from itbench_gym.evaluation.reward import (
    DictReward,
    Evaluation,
    Reward,
    ScoreReward,
    ScoreWeights,
    SparseReward,
    make_reward,
)
from itbench_gym.evaluation.safety import assess_safety, classify_command
from itbench_gym.evaluation.scoring_graph import EdgeWeights

__all__ = [
    "REPORT_SCHEMA", "Baseline", "DiagnosisReport", "DiagnosisResult", "DictReward", "EdgeWeights", "EpisodeEvaluation",
    "Evaluation", "GroundTruth", "GroundTruthError", "MeanSE", "MitigationVerdict", "NTAMParams", "Reward",
    "ScoreReward", "ScoreWeights", "SparseReward", "TrafficSample", "WorkloadState", "assess_safety",
    "classify_command", "evaluate_diagnosis", "evaluate_episode", "format_table", "grade", "load_ground_truth",
    "make_reward", "mean_se", "parse_ground_truth", "parse_report", "pass_at_k", "summarise", "watch_mitigation",
]
