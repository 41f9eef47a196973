"""Synthesised traces in Jaeger's UI JSON model (``model/json``: what ``/api/traces`` returns).

Span tags are what the OpenTelemetry-to-Jaeger translation produces: the span's attributes, then
``span.kind``, ``otel.status_code`` / ``otel.status_description`` and ``error=true`` on failures;
the process carries the resource attributes (pod, node, namespace, SDK language).
"""

from __future__ import annotations

from typing import Any

from itbench_gym.backends.sim.app.spec import AppSpec

from .record import PodRef
from .synth import Span, Trace, span_id

#: ``telemetry.sdk.language`` values by the app spec's language names.
_SDK_LANGUAGE = {"typescript": "nodejs", "javascript": "nodejs", "csharp": "dotnet", "kotlin": "java", "nginx": "cpp"}


def _kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "int64"
    elif isinstance(value, float):
        kind = "float64"
    else:
        kind, value = "string", str(value)
    return {"key": key, "type": kind, "value": value}


def as_string(value: Any) -> str:
    """Jaeger's ``KeyValue.AsString`` (how tag filters compare values)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".10g")
    return str(value)


def span_tags(span: Span) -> list[tuple[str, Any]]:
    tags = list(span.attrs)
    tags.append(("span.kind", span.kind))
    if span.error:
        tags.append(("otel.status_code", "ERROR"))
        if span.status_message:
            tags.append(("otel.status_description", span.status_message))
        tags.append(("error", True))
    return tags


def process_tags(spec: AppSpec, service: str, pod: PodRef | None) -> list[tuple[str, Any]]:
    language = spec.services[service].language
    tags: list[tuple[str, Any]] = []
    if pod is not None:
        tags += [("host.name", pod.name), ("k8s.namespace.name", spec.namespace), ("k8s.node.name", pod.node),
                 ("k8s.pod.name", pod.name), ("k8s.pod.uid", pod.uid)]
        if pod.ip:
            tags.append(("k8s.pod.ip", pod.ip))
        tags.append(("service.instance.id", pod.uid))
    if spec.job_prefix:
        tags.append(("service.namespace", spec.job_prefix.rstrip("/")))
    tags += [("telemetry.sdk.language", _SDK_LANGUAGE.get(language, language)), ("telemetry.sdk.name", "opentelemetry")]
    return tags


def _micros(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


def trace_json(spec: AppSpec, trace: Trace) -> dict[str, Any]:
    """One ``ui.Trace``: spans with references and process ids, processes keyed p1, p2, ..."""
    trace_id = trace.hex_id
    processes: dict[tuple[str, PodRef | None], str] = {}
    spans = []
    for index, s in enumerate(trace.spans):
        pid = processes.setdefault((s.service, s.pod), f"p{len(processes) + 1}")
        refs = [{"refType": "CHILD_OF", "traceID": trace_id, "spanID": f"{span_id(trace.trace_id, s.parent - 1):016x}"}] if s.parent else []
        spans.append({
            "traceID": trace_id,
            "spanID": f"{span_id(trace.trace_id, index):016x}",
            "flags": 1,
            "operationName": s.name,
            "references": refs,
            "startTime": _micros(s.start),
            "duration": max(_micros(s.duration), 1),
            "tags": [_kv(k, v) for k, v in span_tags(s)],
            "logs": [{"timestamp": _micros(ts), "fields": [_kv(k, v) for k, v in fields]} for ts, fields in s.events],
            "processID": pid,
            "warnings": None,
        })
    return {
        "traceID": trace_id,
        "spans": spans,
        "processes": {pid: {"serviceName": svc, "tags": [_kv(k, v) for k, v in process_tags(spec, svc, pod)]}
                      for (svc, pod), pid in processes.items()},
        "warnings": None,
    }
