"""Optional OpenTelemetry tracing: one span per session, exported over OTLP/gRPC (--otel-endpoint).

Off by default and free when off. Needs the `otel` extra; the SDK's standard
OTEL_* environment variables (batch delay, headers, ...) apply.
"""

from __future__ import annotations

from typing import Any

import structlog

log = structlog.get_logger("tracing")
_tracer: Any = None
_spans: dict[str, Any] = {}


def configure(endpoint: str) -> None:
    global _tracer
    if not endpoint:
        return
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "voxgate"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True)))
    _tracer = provider.get_tracer("voxgate")
    log.info("tracing_enabled", endpoint=endpoint)


def session_started(session_id: str, attributes: dict[str, Any]) -> None:
    if _tracer is not None:
        _spans[session_id] = _tracer.start_span("voxgate.session", attributes={"session.id": session_id, **attributes})


def session_event(session_id: str, name: str, attributes: dict[str, Any] | None = None) -> None:
    span = _spans.get(session_id)
    if span is not None:
        span.add_event(name, attributes=attributes or {})


def session_ended(session_id: str, attributes: dict[str, Any]) -> None:
    span = _spans.pop(session_id, None)
    if span is not None:
        span.set_attributes(attributes)
        span.end()
