"""A numeric view of an SRE env for classic RL: a discrete structured action space, golden signals as arrays.

Description
    Each of the app's Deployments is a *target*. An action picks a verb and a target; the wrapper runs
    it with the agent's own tools (one ``env.step``), then observes the cluster as the agent could —
    through the agent's kubeconfig and Prometheus URL, never the twin's internals.

Action Space
    ``Discrete(1 + 4 × targets)``: 0 waits a minute; ``1 + 4t + v`` applies verb ``v`` to target ``t``:

    | v | verb |
    |---|---|
    | 0 | ``kubectl rollout undo deployment/<t>`` |
    | 1 | ``kubectl rollout restart deployment/<t>`` |
    | 2 | ``kubectl scale deployment/<t> --replicas=1`` |
    | 3 | submit a report naming ``<namespace>/Deployment/<t>`` as the root cause (ends the episode) |

Observation Space
    ``Box(targets × 6)`` per Deployment: unavailable share of its replicas, scaled to zero, pod template
    changed (revision > 1), containers waiting in a failing state, containers restarted, and the
    rate of failing server requests of its service (per second, from the span metrics).

Rewards
    The wrapped env's: 0 until the end, then its reward (sparse: 1 iff diagnosis and mitigation pass).
"""

from __future__ import annotations

import json
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import requests
from gymnasium import spaces

from itbench_gym.paths import envs_dir
from itbench_gym.spec.appfacts import load_app_facts

VERBS = ("undo", "restart", "scale-up", "submit")
FEATURES = ("unavailable", "zero_replicas", "changed", "failing_wait", "restarted", "error_rate")
FAILING_WAIT = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "CreateContainerConfigError",
                          "CreateContainerError", "CrashLoopBackOff", "RunContainerError", "PodInitializing"})


class StructuredSRE(gym.Wrapper[np.ndarray, Any, dict[str, Any], Any]):
    """The structured view (see the module doc); ``targets`` defaults to the app's Deployments."""

    def __init__(self, env: gym.Env, targets: list[str] | None = None) -> None:
        super().__init__(env)
        spec = env.unwrapped.scenario  # type: ignore[attr-defined]
        facts = load_app_facts(envs_dir() / spec.app)
        self.namespace: str = spec.namespace
        self.targets = targets or sorted(o.name for o in facts.objects if o.kind == "Deployment" and o.namespace == self.namespace)
        self._signals = facts.golden_signals
        self._shape = (len(self.targets), len(FEATURES))
        self.action_space = spaces.Discrete(1 + len(VERBS) * len(self.targets))
        self.observation_space = spaces.Box(0.0, np.inf, shape=self._shape, dtype=np.float64)
        self._kube: Any = None

    def describe(self, action: int) -> str:
        if action == 0:
            return "wait 60"
        target, verb = divmod(action - 1, len(VERBS))
        return f"{VERBS[verb]} {self.targets[target]}"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        _obs, info = self.env.reset(seed=seed, options=options)
        self._connect()
        return self._observe(), info

    def step(self, action: int) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), f"{action!r} is not an action of {self.action_space}"
        _obs, reward, terminated, truncated, info = self.env.step(self._command(int(action)))
        observation = self._observe() if not (terminated or truncated) else np.zeros(self._shape)
        return observation, reward, terminated, truncated, info

    def _command(self, action: int) -> Any:
        if action == 0:
            return {"tool": "wait", "args": {"seconds": 60}}
        target, verb = divmod(action - 1, len(VERBS))
        name, ns = self.targets[target], self.namespace
        if VERBS[verb] == "submit":
            return {"tool": "submit", "args": {"entities": [{"id": f"{ns}/Deployment/{name}", "root_cause": True}], "propagations": []}}
        argv = {"undo": ["rollout", "undo", f"deployment/{name}"], "restart": ["rollout", "restart", f"deployment/{name}"],
                "scale-up": ["scale", f"deployment/{name}", "--replicas=1"]}[VERBS[verb]]
        return {"tool": "kubectl", "args": {"argv": [*argv, "-n", ns]}}

    # -- what the agent could see ------------------------------------------------------------------
    def _connect(self) -> None:
        from kubernetes import client, config

        if self._kube is not None:
            self._kube.close()
        endpoints = self.env.unwrapped.endpoints  # type: ignore[attr-defined]
        self._kube = config.new_client_from_config(config_file=str(endpoints.kubeconfig))
        self._prometheus = endpoints.prometheus
        # Raw JSON (``_preload_content=False``): the client's models cost more than the calls.
        self._apps: Any = client.AppsV1Api(self._kube)
        self._core: Any = client.CoreV1Api(self._kube)

    def _observe(self) -> np.ndarray:
        out = np.zeros(self._shape)
        row = {name: i for i, name in enumerate(self.targets)}
        deployments = json.loads(self._apps.list_namespaced_deployment(self.namespace, _preload_content=False).data)["items"]
        for d in deployments:
            i = row.get(d["metadata"]["name"])
            if i is None:
                continue
            wanted, ready = d["spec"].get("replicas", 1), d.get("status", {}).get("availableReplicas", 0)
            out[i, 0] = (wanted - ready) / wanted if wanted else 0.0
            out[i, 1] = float(wanted == 0)
            out[i, 2] = float(int(d["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision", "1")) > 1)
        pods = json.loads(self._core.list_namespaced_pod(self.namespace, _preload_content=False).data)["items"]
        for pod in pods:
            owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
            i = row.get(owner.rsplit("-", 1)[0])
            if i is None:
                continue
            statuses = [*(pod.get("status", {}).get("containerStatuses") or []), *(pod.get("status", {}).get("initContainerStatuses") or [])]
            out[i, 3] = max(out[i, 3], float(any((s.get("state", {}).get("waiting") or {}).get("reason") in FAILING_WAIT for s in statuses)))
            out[i, 4] = max(out[i, 4], float(any(s.get("restartCount", 0) > 0 for s in statuses)))
        if self._prometheus and self._signals is not None:
            label = self._signals.service_label
            query = f"sum by ({label}) (rate({self._signals.selector(self._signals.calls, self.namespace, errors=True)}[5m]))"
            body = requests.get(f"{self._prometheus}/api/v1/query", params={"query": query}, timeout=30).json()
            for series in body.get("data", {}).get("result", []):
                i = row.get(series["metric"].get(label, ""))
                if i is not None:
                    out[i, 5] = float(series["value"][1])
        return out

    def close(self) -> None:
        if self._kube is not None:
            self._kube.close()
            self._kube = None
        super().close()
