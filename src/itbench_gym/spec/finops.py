"""ITBench's ``tools.finops.enabled`` install option: OpenCost in the cluster.

What the option installs is the app's data: ``envs/<app>/cluster/opencost.yaml`` holds what the
opencost chart renders and ITBench's PrometheusRules, and ``cluster/releases.yaml`` marks the
release ``option: finops``, so the same option works for any app that ships the file and no
cluster without the option holds any of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


#: The healthy baseline a FinOps scenario settles before its budgets and faults: the shop's start-up bursts
#: scale the autoscalers of the workloads that request CPU out (accounting to 4 replicas), and they take about
#: 25 minutes (the 5-minute scale-down stabilisation, then 2 pods a minute) to come back; a cost measured
#: earlier is the start-up's, not the load's.
FINOPS_BASELINE_SECONDS = 1800.0

#: The PrometheusRule that holds a FinOps scenario's budget alerts, in the app namespace.
BUDGET_RULE = "finops-budget-alerts"
#: Its rule group (ITBench's ``opentelemetry_demo.cost``, evaluated every minute).
BUDGET_GROUP = "finops.budget"
#: The budget alert of each resource a scenario may budget (``finops.budgets``).
BUDGET_ALERTS = {"cpu": "CPUSpend", "memory": "MemorySpend", "storage": "StorageSpend"}
#: The Role that lets the agent edit the namespace's budget alerts: budgets are the FinOps engineer's to set.
BUDGET_ROLE = "agent-finops-budgets"


def budget_cost_query(resource: str, namespace: str) -> str:
    """The namespace's hourly cost of ``resource`` as its budget alert sums it: ITBench's commented-out
    CPUSpend and MemorySpend (``alert-rules/otel_demo.yaml.j2``) over its recording rules, without the
    load generator; storage as OpenCost prices a volume (``pv_hourly_cost`` per GiB of capacity) over the
    volumes bound to the namespace's claims (kube-state-metrics' series: OpenCost publishes a second
    ``kube_persistentvolume_capacity_bytes``, which would make the match ambiguous)."""
    ns = f'namespace="{namespace}"'
    if resource == "cpu":
        return f'sum by (namespace) (container_namespace_node:container_cpu_allocation_cost_per_node:avg5m{{container!="load-generator", {ns}}})'
    if resource == "memory":
        return ('sum by (namespace) (container_namespace_node:container_memory_allocation_gigabytes_cost_per_node:avg5m'
                f'{{container!="load-generator", {ns}}})')
    if resource == "storage":
        return ("sum by (namespace) (label_replace(avg_over_time(pv_hourly_cost[5m]) * on (persistentvolume) group_left "
                "kube_persistentvolume_capacity_bytes{job=\"kube-state-metrics\"} / 1024 / 1024 / 1024 * on (persistentvolume) "
                f'group_left (claim_namespace) kube_persistentvolume_claim_ref{{job="kube-state-metrics", claim_namespace="{namespace}"}}, "namespace", "$1", "claim_namespace", "(.*)"))')
    raise ValueError(f"no budget alert for resource {resource!r}; resources: {', '.join(BUDGET_ALERTS)}")


def budget_objects(namespace: str, budgets: Mapping[str, float], agent: tuple[str, str]) -> list[dict[str, Any]]:
    """The budget alerts' PrometheusRule and the Role (with its binding) that lets the agent (``agent``:
    its ServiceAccount's namespace and name) edit the namespace's PrometheusRules."""
    rules = [{"alert": BUDGET_ALERTS[resource], "expr": f"{budget_cost_query(resource, namespace)} > {budget:g}", "for": "1m",
              "labels": {"severity": "warning"},
              "annotations": {"description": f"{{{{ $labels.namespace }}}} has exceeded the allocated budget for {resource} "
                                             "for 5m (current: ${{ $value }} per hour)"}}
             for resource, budget in budgets.items()]
    labels = {"app.kubernetes.io/component": "finops-budget", "app.kubernetes.io/managed-by": "itbench-gym"}
    return [
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
         "metadata": {"name": BUDGET_RULE, "namespace": namespace, "labels": labels},
         "spec": {"groups": [{"name": BUDGET_GROUP, "interval": "1m", "rules": rules}]}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": BUDGET_ROLE, "namespace": namespace, "labels": labels},
         "rules": [{"apiGroups": ["monitoring.coreos.com"], "resources": ["prometheusrules"],
                    "verbs": ["get", "list", "watch", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": BUDGET_ROLE, "namespace": namespace, "labels": labels},
         "subjects": [{"kind": "ServiceAccount", "namespace": agent[0], "name": agent[1]}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": BUDGET_ROLE}},
    ]
