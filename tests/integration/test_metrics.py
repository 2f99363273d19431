"""Prometheus metrics on --metrics-port, scraped the way Prometheus does."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

import grpc
import pytest

from tests.helpers import audio_requests, config_request, recognize, silence, start_server, voiced


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def test_metrics_count_sessions_audio_latency_and_errors(tmp_path: Path) -> None:
    port = free_port()
    server = start_server(tmp_path, "--metrics-port", str(port), engine="fake")
    try:
        before = scrape(port)
        assert before["voxgate_engine_up"] == 1
        audio = voiced(1.2) + silence(1.2)
        recognize(server.stub(), [config_request(), *audio_requests(audio)])
        with pytest.raises(grpc.RpcError):
            recognize(server.stub(), [config_request(sample_rate_hz=1)])
        after = scrape(port)
        assert after["voxgate_sessions_started_total"] == before.get("voxgate_sessions_started_total", 0) + 1
        assert after['voxgate_sessions_ended_total{reason="client_end"}'] == 1
        assert after["voxgate_audio_seconds_total"] == pytest.approx(2.4, abs=0.05)
        assert after['voxgate_errors_total{reason="UNSUPPORTED_AUDIO_FORMAT"}'] == 1
        assert after["voxgate_time_to_first_result_seconds_count"] == 1
        assert after["voxgate_final_latency_seconds_count"] == 1
        assert after["voxgate_active_sessions"] == 0
        assert after["voxgate_engine_lag_seconds_count"] > 0
    finally:
        server.stop()
