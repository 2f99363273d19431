"""`voxgate serve --sidecar-external`: the sidecar runs on its own (a second container in the pod,
a systemd unit); the service attaches to its socket, and when it dies waits for the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from tests.helpers import (
    ROOT,
    ServerProcess,
    audio_requests,
    config_request,
    error_reason,
    final_text,
    recognize,
    start_server,
    stream_in_background,
    voiced,
)
from voxgate_client.v1 import speech_pb2 as pb

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def start_sidecar(socket: Path, log: Path) -> subprocess.Popen[str]:
    """`voxgate sidecar` as its own process (what the sidecar container's entrypoint runs)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "sidecar", "--engine", "fake", "--socket", str(socket)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("a"),
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("READY"), f"sidecar did not start: {line!r}\n{log.read_text()}"
    return proc


def healthcheck(*args: str) -> int:
    """deploy/docker/healthcheck.py: the images' health check (compose healthcheck, Kubernetes exec probe)."""
    return subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "docker" / "healthcheck.py"), *args], capture_output=True, timeout=30
    ).returncode


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(30)


def test_the_service_attaches_to_an_external_sidecar_and_outlives_it(tmp_path: Path) -> None:
    socket = tmp_path / "run" / "engine.sock"
    sidecar_log = tmp_path / "sidecar.log"
    sidecar = start_sidecar(socket, sidecar_log)
    server = start_server(
        tmp_path,
        "--sidecar-external",
        "--sidecar-socket",
        str(socket),
        "--sidecar-health-interval-s",
        "0.2",
        "--sidecar-restart-backoff-s",
        "0.2",
        "--engine-recovery-timeout-s",
        "20",
        engine="fake",
    )
    try:
        assert server.health("") == SERVING
        before = recognize(server.stub(), [config_request(), *audio_requests(voiced(1.0))])
        assert final_text(before)

        # A live session while the sidecar container is killed and restarted by its supervisor.
        live = stream_in_background(server, 4.0, 0.05)
        got, thread = live.got, live.thread
        assert live.in_session.wait(30)
        stop(sidecar, signal.SIGKILL)
        server.wait_health(serving=False, timeout_s=10)
        assert server.health("") == SERVING, "liveness stays SERVING: only readiness follows the engine"
        with pytest.raises(grpc.RpcError) as info:
            recognize(server.stub(), [config_request()])
        assert error_reason(info.value)[:2] == (grpc.StatusCode.UNAVAILABLE, "ENGINE_UNAVAILABLE")

        sidecar = start_sidecar(socket, sidecar_log)  # what Kubernetes / systemd does: start it again
        server.wait_health(serving=True, timeout_s=20)
        thread.join(60)
        assert not thread.is_alive()
        assert "ENGINE_RESTARTED" in [r.warning.code for r in got if r.HasField("warning")]
        assert got[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END, "the live session survived the restart"

        after = recognize(server.stub(), [config_request(), *audio_requests(voiced(1.0))])
        assert final_text(after) == final_text(before)
        assert server.proc.poll() is None
    finally:
        assert server.stop() == 0
        stop(sidecar)
    assert sidecar.returncode == 0, "the service left the external sidecar alone: it stopped on our SIGTERM"


def test_the_service_waits_for_an_external_sidecar_that_starts_late(tmp_path: Path) -> None:
    socket = tmp_path / "run" / "engine.sock"
    log_path = tmp_path / "server.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--port",
            "0",
            "--sidecar-external",
            "--sidecar-socket",
            str(socket),
            "--sidecar-restart-backoff-s",
            "0.2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log_path.open("w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    sidecar = None
    try:
        assert proc.stdout is not None
        target = proc.stdout.readline().split()[-1]
        server = ServerProcess(proc, target, log_path)
        server.wait_health(serving=True, timeout_s=10, service="")  # live at once...
        assert server.health() == NOT_SERVING, "...but not ready: no engine yet"
        assert healthcheck("--target", target) == 0
        assert healthcheck("--target", target, "--service", "voxgate.v1.Speech") == 1
        assert healthcheck("--socket", str(socket)) == 1
        started = time.monotonic()  # no engine has answered: capabilities wait a moment, then say what is known
        assert not server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10).languages
        assert 1.5 < time.monotonic() - started < 5
        sidecar = start_sidecar(socket, tmp_path / "sidecar.log")
        # Asked as soon as the sidecar listens: the answer waits for its first status instead of missing it.
        assert server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10).languages
        server.wait_health(serving=True, timeout_s=20)
        assert healthcheck("--socket", str(socket)) == 0
        assert healthcheck("--target", target, "--service", "voxgate.v1.Speech") == 0
        assert final_text(recognize(server.stub(), [config_request(), *audio_requests(voiced(1.0))]))
        assert server.stop() == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        if sidecar is not None:
            stop(sidecar)
