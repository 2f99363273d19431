"""Prometheus metrics on --metrics-port, scraped the way Prometheus does."""

from __future__ import annotations

import socket
import threading
import time
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


def test_engine_reported_gauges_have_a_series_per_engine(tmp_path: Path) -> None:
    """--engines 2: each engine's reported gauges are a series of its own (`engine` label), not one they overwrite.
    The fake engine reports the sessions waiting to open as its queue: one session opening shows on one engine."""
    script = tmp_path / "script.json"
    script.write_text('{"open_ms": 3000}')
    port = free_port()
    server = start_server(
        tmp_path,
        "--engines",
        "2",
        "--metrics-port",
        str(port),
        "--sidecar-health-interval-s",
        "0.2",
        engine="fake",
        model=str(script),
    )
    try:
        deadline = time.monotonic() + 30  # serving once one engine is; the other may still be starting
        while (
            sum((idle := scrape(port)).get(f'voxgate_engine_ready{{engine="{n}"}}', 0) for n in "01") < 2
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        assert [idle.get(f'voxgate_engine_queue_depth{{engine="{n}"}}') for n in "01"] == [0, 0]
        assert "voxgate_engine_queue_depth" not in idle
        session = threading.Thread(
            target=recognize, daemon=True, args=(server.stub(), [config_request(), *audio_requests(silence(0.5))])
        )
        session.start()
        deadline = time.monotonic() + 2.5  # within the session's 3 s open
        while (depths := queue_depths(port)) == [0, 0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(depths) == [0, 1], depths  # the engine that opens it waits, the other does not
        session.join(timeout=30)
        assert not session.is_alive()
        deadline = time.monotonic() + 5
        while (depths := queue_depths(port)) != [0, 0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert depths == [0, 0]
    finally:
        server.stop()


def queue_depths(port: int) -> list[float]:
    values = scrape(port)
    return [values[f'voxgate_engine_queue_depth{{engine="{n}"}}'] for n in "01"]
