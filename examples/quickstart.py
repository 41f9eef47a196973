"""Quickstart: one SRE-CacheFailure-v0 episode driven by hand, as in a notebook.

Run: python examples/quickstart.py
"""

from __future__ import annotations

import json

import itbench_gym


def main() -> dict:
    env = itbench_gym.make("SRE-CacheFailure-v0")
    try:
        obs, _ = env.reset(seed=0)
        print(obs["firing_alerts"])
        for action in (
            "kubectl get pods -n otel-demo",
            'promql sum by (service_name) (rate(traces_span_metrics_calls_total{status_code="STATUS_CODE_ERROR"}[2m]))',
            'logql {service_name="frontend"} |= "recommendation"',
            "traces service=frontend error=true limit=3",
        ):
            obs, *_ = env.step(action)
            print(f"$ {action}\n{obs['text'][:600]}\n")
        obs, *_ = env.step("kubectl get configmap flagd-config -n otel-demo -o json")
        flags = json.loads(json.loads(obs["text"])["data"]["demo.flagd.json"])
        flags["flags"]["recommendationCacheFailure"]["defaultVariant"] = "off"
        patch = json.dumps({"data": {"demo.flagd.json": json.dumps(flags, indent=2)}})
        env.step({"tool": "kubectl", "args": {"argv": ["patch", "configmap", "flagd-config", "-n", "otel-demo", "--type", "merge", "-p", patch]}})
        env.step("kubectl rollout restart deployment/flagd deployment/recommendation -n otel-demo")
        env.step("wait 120")
        report = {
            "entities": [
                {"id": "otel-demo/ConfigMap/flagd-config", "root_cause": True},
                {"id": "otel-demo/Service/recommendation", "root_cause": False},
                {"id": "otel-demo/Service/frontend", "root_cause": False},
            ],
            "propagations": [
                {"source": "otel-demo/ConfigMap/flagd-config", "target": "otel-demo/Service/recommendation",
                 "condition": "recommendationCacheFailure on", "effect": "recommendation OOMKilled"},
                {"source": "otel-demo/Service/recommendation", "target": "otel-demo/Service/frontend",
                 "condition": "recommendation unavailable", "effect": "frontend errors"},
            ],
        }
        _, reward, _, _, info = env.step({"tool": "submit", "args": report})
        evaluation = info["evaluation"]
        print(json.dumps({"reward": reward, "fl_pass": evaluation["diagnosis"]["fl_pass"],
                          "mitigation": evaluation["mitigation"]["passed"], "times": evaluation["times"]}, indent=2))
        return evaluation
    finally:
        env.close()


if __name__ == "__main__":
    main()
