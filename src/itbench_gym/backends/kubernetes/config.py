"""Where the real cluster and its observability stack are: a YAML file, or arguments.

``ITBENCH_GYM_CLUSTER=cluster.yaml`` is what ``make(..., backend="kubernetes")`` reads; every field is
optional (``cluster.schema.json``): without a kubeconfig the usual one (``$KUBECONFIG``,
``~/.kube/config``), without URLs no such tool for the agent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from itbench_gym.lang import yamltext

ENV_VAR = "ITBENCH_GYM_CLUSTER"


class ClusterConfigError(ValueError):
    """A cluster configuration that cannot be used; the message names the file and the field."""


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files(__package__).joinpath("cluster.schema.json").read_text())
    return schema


@dataclass(frozen=True)
class ClusterConfig:
    kubeconfig: Path | None = None
    context: str | None = None
    prometheus: str | None = None
    loki: str | None = None
    jaeger: str | None = None
    grafana: str | None = None
    alertmanager: str | None = None
    opencost: str | None = None
    #: Seconds to wait for the app's workloads to be ready (after provisioning and after cleanup).
    ready_timeout: float = 900.0
    #: Cluster seconds to let pass after the cluster is put back between episodes, before the next
    #: episode's healthy baseline: the last incident's telemetry must leave the windows that baseline
    #: reads (the SRE task's five minutes), and its alerts must resolve (then waited for, up to ``ready_timeout``).
    settle_seconds: float = 300.0
    #: Lifetime of the agent's token (the API server's minimum is ten minutes).
    token_seconds: int = 3600
    #: Run each episode in a namespace set of its own (``<namespace>-<suffix>``), so that episodes of
    #: backends with different suffixes run on one cluster at once; None: the scenario's namespaces.
    namespace_suffix: str | None = None

    def __post_init__(self) -> None:
        if self.kubeconfig is not None and not isinstance(self.kubeconfig, Path):
            object.__setattr__(self, "kubeconfig", Path(os.path.expanduser(str(self.kubeconfig))))

    @classmethod
    def from_mapping(cls, data: Any, where: str = "cluster configuration") -> ClusterConfig:
        error = next(iter(sorted(jsonschema.Draft202012Validator(_schema()).iter_errors(data), key=lambda e: e.path)), None)
        if error is not None:
            field = ".".join(str(p) for p in error.absolute_path) or "(top level)"
            raise ClusterConfigError(f"{where}: {field}: {error.message}")
        return cls(**dict(data))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ClusterConfig:
        file = Path(path)
        try:
            data = yamltext.load(file.read_text())
        except OSError as exc:
            raise ClusterConfigError(f"{file}: cannot read the cluster configuration: {exc.strerror or exc}") from None
        except yamltext.YAMLError as exc:
            raise ClusterConfigError(f"{file}: not YAML: {exc}") from None
        config = cls.from_mapping(data if data is not None else {}, str(file))
        if config.kubeconfig is not None and not config.kubeconfig.is_absolute():
            config = cls(**{**config.__dict__, "kubeconfig": (file.parent / config.kubeconfig).resolve()})
        return config

    @classmethod
    def from_environment(cls) -> ClusterConfig:
        """The file ``$ITBENCH_GYM_CLUSTER`` names, or the defaults (the usual kubeconfig, no tool URLs)."""
        path = os.environ.get(ENV_VAR)
        return cls.load(path) if path else cls()

    def for_worker(self, slot: int) -> ClusterConfig:
        """This configuration for the ``slot``-th of parallel workers: its own namespace set (``w<slot>``)."""
        return replace(self, namespace_suffix=f"w{slot}")

    def kubeconfig_path(self) -> Path:
        if self.kubeconfig is not None:
            return self.kubeconfig
        env = os.environ.get("KUBECONFIG", "")
        first = next((p for p in env.split(os.pathsep) if p), None)
        return Path(first) if first else Path.home() / ".kube" / "config"
