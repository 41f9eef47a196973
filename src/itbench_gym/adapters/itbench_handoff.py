"""ITBench's agent hand-off, so agents built for ITBench's harness run unmodified against a twin.

ITBench's harness gives an agent ``scenario_data.json`` (the environment's credentials and URLs:
``kubeconfig`` as text, ``grafana_url``, ...) and collects the ``agent_output.json`` the agent leaves
(its diagnosis in ITBench's shape: ``entities`` with ``contributing_factor``, ``propagations``).
``itbench-gym serve SCENARIO --itbench-agent-dir DIR`` writes the first, waits for the second (or
``agent_output.data``, the name the harness pushes) and grades it as ``submit`` would, into
``DIR/evaluation.json``. The agent's own commands are not seen from here, so the destructive-command
count stays at zero; the mitigation is judged from the cluster, as always.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from itbench_gym.backends.base import Backend
from itbench_gym.evaluation.report import parse_report
from itbench_gym.spec import ScenarioSpec
from itbench_gym.tasks import Submission, Task

SCENARIO_DATA = "scenario_data.json"
#: Where an agent may leave its report, in the order they are looked for.
OUTPUT_NAMES = ("agent_output.json", "agent_output.data")
EVALUATION = "evaluation.json"


def write_scenario_data(folder: Path, spec: ScenarioSpec, backend: Backend) -> Path:
    """``scenario_data.json`` with the agent's (restricted) kubeconfig and the observability URLs, owner-readable only."""
    endpoints = backend.endpoints
    data: dict[str, Any] = {
        "scenario": spec.id,
        "namespace": spec.namespace,
        "kubeconfig": endpoints.kubeconfig.read_text(encoding="utf-8"),
        "grafana_url": endpoints.grafana,
        "prometheus_url": endpoints.prometheus,
        "alertmanager_url": endpoints.alertmanager,
        "loki_url": endpoints.loki,
        "jaeger_url": endpoints.jaeger,
        "topology_url": endpoints.grafana,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SCENARIO_DATA
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
    return path


def agent_output(folder: Path) -> Path | None:
    """The agent's output file once it is there (and not being written: it must read as complete text)."""
    for name in OUTPUT_NAMES:
        path = folder / name
        if path.is_file() and path.stat().st_size > 0:
            return path
    return None


def grade(folder: Path, output: Path, task: Task, backend: Backend) -> dict[str, Any]:
    """Grade the agent's output as a submitted report; the evaluation is written to ``evaluation.json``."""
    error: str | None
    try:
        text = output.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        report, error = None, f"{output.name}: cannot be read ({exc})"
    else:
        parsed = parse_report(text)
        report = parsed.document if parsed.valid else None
        error = None if parsed.valid else f"{output.name}: " + "; ".join(parsed.errors)
    evaluation = task.evaluate(Submission(report, error, backend.clock.now(), ())).to_dict()
    (folder / EVALUATION).write_text(json.dumps(evaluation, indent=2, default=str), encoding="utf-8")
    return evaluation
