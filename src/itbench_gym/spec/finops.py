"""ITBench's ``tools.finops.enabled`` install option: OpenCost in the cluster.

What the option installs is the app's data: ``envs/<app>/cluster/opencost.yaml`` holds what the
opencost chart renders and ITBench's PrometheusRules, and ``cluster/releases.yaml`` marks the
release ``option: finops``, so the same option works for any app that ships the file and no
cluster without the option holds any of it.
"""

from __future__ import annotations

from pathlib import Path

#: The manifest file the option deploys, relative to the app's folder.
FINOPS_MANIFEST = "cluster/opencost.yaml"
#: The ``option`` a release of ``cluster/releases.yaml`` names to be installed only with this option.
FINOPS_OPTION = "finops"


def finops_manifests(app_dir: Path) -> list[str]:
    """The manifest entries (relative to ``app_dir``) the option adds to the app's cluster."""
    path = app_dir / FINOPS_MANIFEST
    if not path.is_file():
        raise ValueError(f"{path}: missing; environment.tools.finops.enabled needs the app's OpenCost manifests")
    return [FINOPS_MANIFEST]
