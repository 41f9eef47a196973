"""Apply a scenario's faults in order through the admin credentials."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes import config

from itbench_gym.faults.catalogue import catalogue
from itbench_gym.faults.operations import OPERATIONS

if TYPE_CHECKING:
    from itbench_gym.spec import FaultRef
    from itbench_gym.spec.appfacts import AppFacts


def inject_faults(faults: Sequence[FaultRef], admin_kubeconfig: Path, now: float, app: AppFacts) -> list[str]:
    """Run each fault's operation against ``app`` (whose data says e.g. where its flags are); returns
    a harness-side log (never shown to the agent)."""
    api = config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        return [OPERATIONS[catalogue()[f.id].operation](api, f.args, now, app) for f in faults]
    finally:
        api.close()
