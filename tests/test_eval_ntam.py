"""NTAM (reconstruction): the properties docs/metrics.md promises, on the causal chain and on a topology."""

from __future__ import annotations

import pytest

from itbench_gym.evaluation.diagnosis import evaluate_diagnosis
from itbench_gym.evaluation.groundtruth import parse_ground_truth
from itbench_gym.evaluation.ntam import DEFAULT_NTAM_PARAMS, NTAMParams
from itbench_gym.evaluation.report import parse_report
from itbench_gym.evaluation.scoring_graph import EdgeWeights
from itbench_gym.topology import build_topology

NS = "otel-demo"
#: A call chain a -> b -> c -> d -> e; the root cause is the ConfigMap mounted by a's pod.
SERVICES = ["svc-a", "svc-b", "svc-c", "svc-d", "svc-e"]
GT = parse_ground_truth(
    {
        "groups": [
            {"id": "config", "kind": "ConfigMap", "name": "app-config", "namespace": NS, "root_cause": True},
            *({"id": s, "kind": "Service", "namespace": NS, "name": s} for s in SERVICES),
        ],
        "propagations": [{"source": "config", "target": "svc-a"}]
        + [{"source": a, "target": b} for a, b in zip(SERVICES, SERVICES[1:], strict=False)],
    }
)
ROOT = f"{NS}/ConfigMap/app-config"


def workload(name: str, suffix: str, mounts: tuple[str, ...] = ()) -> list[dict]:
    labels = {"app": name}
    rs, pod = f"{name}-6d5f9c8b7", f"{name}-6d5f9c8b7-{suffix}"
    return [
        {"kind": "Deployment", "metadata": {"name": name, "namespace": NS}},
        {"kind": "ReplicaSet", "metadata": {"name": rs, "namespace": NS, "ownerReferences": [{"kind": "Deployment", "name": name}]}},
        {"kind": "Pod", "metadata": {"name": pod, "namespace": NS, "labels": labels, "ownerReferences": [{"kind": "ReplicaSet", "name": rs}]},
         "spec": {"nodeName": "worker-1", "volumes": [{"name": m, "configMap": {"name": m}} for m in mounts]}},
        {"kind": "Service", "metadata": {"name": name, "namespace": NS}, "spec": {"selector": labels}},
    ]


def topology():
    objs = [{"kind": "Namespace", "metadata": {"name": NS}}, {"kind": "Node", "metadata": {"name": "worker-1"}},
            {"kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": NS}}]
    for i, name in enumerate([*SERVICES, "payment"]):
        objs += workload(name, "kx2l" + "bcdfgh"[i], mounts=("app-config",) if name == "svc-a" else ())
    calls = list(zip(SERVICES, SERVICES[1:], strict=False))
    return build_topology(objs, calls, namespace=NS)


TOPOLOGY = topology()


def report(root_causes: list[str], edges: list[tuple[str, str]] = (), others: list[str] = ()) -> object:  # type: ignore[assignment]
    parsed = parse_report(
        {
            "entities": [{"name": n, "root_cause": True} for n in root_causes] + [{"name": n} for n in others],
            "propagations": [{"source": s, "target": t} for s, t in edges],
        }
    )
    assert parsed.report is not None, parsed.errors
    return parsed.report


def ntam(rep, topo=TOPOLOGY, params: NTAMParams = DEFAULT_NTAM_PARAMS):
    result = evaluate_diagnosis(rep, GT, topology=topo, params=params)
    return result.ntam_fl.score, (result.ntam_fpc.score if result.ntam_fpc else None)


PERFECT_EDGES = [(ROOT, f"{NS}/Service/svc-a")] + [(f"{NS}/Service/{a}", f"{NS}/Service/{b}") for a, b in zip(SERVICES, SERVICES[1:], strict=False)]


@pytest.mark.parametrize("topo", [TOPOLOGY, None], ids=["topology", "causal-chain-only"])
def test_perfect_report_scores_one(topo) -> None:
    assert ntam(report([ROOT], PERFECT_EDGES), topo) == (1.0, 1.0)


@pytest.mark.parametrize("topo", [TOPOLOGY, None], ids=["topology", "causal-chain-only"])
def test_only_unrelated_entities_score_zero(topo) -> None:
    # payment shares only the namespace and the node with the incident; "ghost" does not exist.
    rep = report([f"{NS}/Service/payment", f"{NS}/Deployment/ghost"], [(f"{NS}/Service/payment", f"{NS}/Deployment/ghost")])
    assert ntam(rep, topo) == (0.0, 0.0)


@pytest.mark.parametrize("topo", [TOPOLOGY, None], ids=["topology", "causal-chain-only"])
def test_one_hop_scores_strictly_higher_than_four_hops(topo) -> None:
    near, _ = ntam(report([f"{NS}/Service/svc-a"]), topo)  # 1 hop from the root cause
    far, _ = ntam(report([f"{NS}/Service/svc-d"]), topo)  # 4 hops
    assert near > far >= 0.0
    assert near < 1.0


def test_partial_credit_decreases_monotonically_along_the_chain() -> None:
    scores = [ntam(report([f"{NS}/Service/{s}"]))[0] for s in SERVICES]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1]


def test_padding_lowers_the_score() -> None:
    fl, fpc = ntam(report([ROOT], PERFECT_EDGES))
    fl_padded, _ = ntam(report([ROOT, f"{NS}/Service/payment"], PERFECT_EDGES))
    _, fpc_padded = ntam(report([ROOT], PERFECT_EDGES + [(f"{NS}/Service/svc-e", f"{NS}/Service/payment")]))
    assert fl_padded < fl and fpc_padded < fpc
    # Padding with a *related* entity is still padding.
    fl_related, _ = ntam(report([ROOT, f"{NS}/Service/svc-b"], PERFECT_EDGES))
    assert fl_related < fl


def test_broad_containers_earn_less_than_specific_neighbours() -> None:
    # The pod that mounts the ConfigMap is one hop away; the namespace owns it directly but owns
    # everything else too (sub-tree-size factor), and the node is shared infrastructure.
    pod, _ = ntam(report([f"{NS}/Pod/svc-a-6d5f9c8b7-kx2lb"]))
    namespace, _ = ntam(report(["Namespace/otel-demo"]))
    node, _ = ntam(report(["Node/worker-1"]))
    assert pod > namespace and pod > node
    assert namespace < 0.1


def test_early_chain_edges_weigh_more_than_late_ones() -> None:
    _, missing_first = ntam(report([ROOT], PERFECT_EDGES[1:]))
    _, missing_last = ntam(report([ROOT], PERFECT_EDGES[:-1]))
    assert missing_first < missing_last < 1.0


def test_weights_are_parameters() -> None:
    rep = report([f"{NS}/Service/svc-b"])
    default, _ = ntam(rep)
    wider, _ = ntam(rep, params=NTAMParams(horizon=8.0))
    cheap_calls, _ = ntam(rep, params=NTAMParams(weights=EdgeWeights(calls=0.25, propagation=0.25)))
    assert wider > default and cheap_calls > default
    for bad in ({"horizon": 0.0}, {"b": 1.5}, {"chain_decay": 0.0}, {"length_penalty": -1.0}):
        with pytest.raises(ValueError, match="NTAMParams"):
            NTAMParams(**bad)
    with pytest.raises(ValueError, match="EdgeWeights.calls"):
        EdgeWeights(calls=-1.0)
