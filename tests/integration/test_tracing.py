"""Session traces over OTLP/gRPC, received by a real (test-local) collector endpoint."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.helpers import audio_requests, config_request, recognize, silence, start_server, voiced

collector_pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
collector_grpc = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc")


class Collector(collector_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.spans: list[object] = []
        self.received = threading.Event()

    def Export(self, request, context):  # type: ignore[no-untyped-def]
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend(scope_spans.spans)
        self.received.set()
        return collector_pb.ExportTraceServiceResponse()


def test_each_session_is_a_span_with_its_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    collector_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export promptly
    voxgate = start_server(tmp_path, "--otel-endpoint", f"http://127.0.0.1:{port}", engine="fake")
    try:
        responses = recognize(voxgate.stub(), [config_request(), *audio_requests(voiced(1.0) + silence(0.5))])
        session_id = responses[0].started.session_id
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not collector.spans:
            collector.received.wait(0.2)
        spans = [s for s in collector.spans if s.name == "voxgate.session"]  # type: ignore[attr-defined]
        assert spans, "the session's span reached the collector"
        attributes = {a.key: a.value for a in spans[0].attributes}  # type: ignore[attr-defined]
        assert attributes["session.id"].string_value == session_id
        assert attributes["voxgate.end_reason"].string_value == "client_end"
        assert attributes["voxgate.audio_seconds"].double_value == pytest.approx(1.5, abs=0.05)
    finally:
        voxgate.stop()
        server.stop(0)
