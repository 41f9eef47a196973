"""The contract both backends (embedded twin, real cluster) honour.

Tools and faults only ever see what is here: endpoints that speak real protocols, a clock, the
admin credential the task uses, and the incident checkpoints a task replays. Nothing in this
contract is twin-specific.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from itbench_gym.backends.programs import RunningPrograms
from itbench_gym.clock import Clock

if TYPE_CHECKING:
    import requests
    from kubernetes.client import ApiClient

    from itbench_gym.spec import ScenarioSpec


class BackendError(RuntimeError):
    """The backend could not build the scenario (e.g. its alerts never fired)."""


@dataclass(frozen=True)
class Endpoints:
    """Where the agent's tools connect (every URL on loopback for the twin): the agent's side only.

    The task's admin credential is not here (see ``Backend.admin_kubeconfig``), so nothing that
    hands endpoints to tools, observations or ``info`` can leak it.
    """

    kubeconfig: Path
    kube_cache_dir: Path
    prometheus: str | None
    loki: str | None = None
    jaeger: str | None = None
    grafana: str | None = None
    alertmanager: str | None = None
    #: OpenCost's API (``/allocation/compute``): only where the scenario's cluster runs OpenCost.
    opencost: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "kubernetes_kubeconfig": str(self.kubeconfig),
            "prometheus": self.prometheus,
            "loki": self.loki,
            "jaeger": self.jaeger,
            "grafana": self.grafana,
            "alertmanager": self.alertmanager,
            "opencost": self.opencost,
        }


@dataclass(frozen=True)
class Provisioning:
    """What a scenario deploys besides its app before the healthy baseline (FinOps budget alerts).

    ``apply`` deploys it on the backend that ``start`` is setting up (with the admin credential) and
    lets what it needs settle; ``key`` names everything it deploys, so equal keys deploy equal
    objects and a backend that shares baselines between seeds may share the provisioned one too.
    """

    key: str
    apply: Callable[[Backend], None]


class Backend(Protocol):
    @property
    def clock(self) -> Clock:
        """The clock episodes are measured on."""
        ...

    @property
    def admin_kubeconfig(self) -> Path:
        """The task's cluster-admin kubeconfig (mode 0600, in a 0700 directory): fault injection
        and grading only; never given to the agent's tools."""
        ...

    def admin_client(self) -> ApiClient:
        """A Kubernetes client on the admin credential for the harness's own calls (injection,
        probes, grading), kept open with its connections until ``close``: set-ups share it rather
        than connecting again. Its users never close it."""
        ...

    def harness_http(self) -> requests.Session:
        """A new HTTP session for the harness's own requests to the endpoints (alerts, rules,
        queries); the caller closes it. The twin answers its own endpoints in-process, without a
        socket; a real cluster's go over the network."""
        ...

    @property
    def programs(self) -> RunningPrograms:
        """The agent's programs running now: the tools register them, the twin's streams let time pass
        only while they wait (``backends/programs``); a real cluster's time needs nothing of them."""
        ...

    @property
    def endpoints(self) -> Endpoints:
        """Where the agent's tools reach the environment that ``start`` or a restore made current."""
        ...

    def place(self, spec: ScenarioSpec) -> ScenarioSpec:
        """The scenario as this backend runs it: ``spec`` itself, or moved to the namespaces the
        backend gives its episodes (a real cluster shared by parallel episodes). The env builds its
        task from this spec; BackendError says why the backend cannot run the scenario there."""
        ...

    def start(self, spec: ScenarioSpec, seed: int, provisioning: Provisioning | None = None) -> Endpoints:
        """Provision the environment (with what ``provisioning`` deploys) and settle its healthy
        baseline (no fault yet)."""
        ...

    @property
    def baseline_key(self) -> Hashable | None:
        """What identifies the state the last ``start`` left: equal keys mean equal states whatever
        the seed, so a task may reuse what it measured there (the twin's shared baselines); None
        when states are not reproducible (a real cluster)."""
        ...

    def advance(self, seconds: float) -> None:
        """Let time pass (the twin fast-forwards; a real cluster waits)."""
        ...

    def setting_up(self) -> AbstractContextManager[None]:
        """Held around a whole set-up (start, inject, wait, save): what the backend does for a burst
        of work (the twin holds cyclic garbage collection off; a real cluster does nothing)."""
        ...

    @property
    def can_checkpoint(self) -> bool:
        """Whether :meth:`checkpoint` gives a token (asked without the cost of taking one)."""
        ...

    def checkpoint(self) -> object | None:
        """An opaque token for the whole current state, or None when the backend cannot snapshot
        (a real cluster). Used to replay a seed's incident without re-injecting it."""
        ...

    def restore(self, token: object) -> Endpoints:
        """Return to a state taken by ``checkpoint``."""
        ...

    def save_incident(self, key: Hashable, incident: object) -> None:
        """Checkpoint the incident just set up, with the task's record of it, under ``key``; a backend
        that cannot snapshot keeps nothing. The twin keeps them for every twin of the process (its
        snapshots are immutable and restore into any twin of the same app); the key must name
        everything the incident depends on (the task's whole spec and the seed)."""
        ...

    def restore_incident(self, key: Hashable) -> object | None:
        """Return to the incident saved under ``key`` and give back the task's record of it, or None
        (nothing saved: the task sets the incident up from scratch)."""
        ...

    def set_time_limit(self, deadline: float | None) -> None:
        """Latest clock value that blocking requests may advance to (the episode budget)."""
        ...

    def close(self) -> None:
        """Stop every server, process and temporary directory the backend started."""
        ...
