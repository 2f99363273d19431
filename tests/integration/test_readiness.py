"""Readiness (grpc health of voxgate.v1.Speech) follows the engine's typed state across sidecar restarts.

The fake engine refuses new sessions while a gate file exists (script `refuse_while`), so a test turns the
engine's admission off and on from outside and restarts the sidecar in between: readiness must be what the
engine that runs now says, never what the one before it said.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from tests.helpers import ServerProcess, fake_script, start_server

SERVING = health_pb2.HealthCheckResponse.SERVING
HEALTH_INTERVAL_S = "0.2"


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    """A server whose fake engine refuses new sessions while the gate file (not there yet) exists."""
    gate = tmp_path / "refuse"
    server = start_server(
        tmp_path,
        "--sidecar-health-interval-s",
        HEALTH_INTERVAL_S,
        "--sidecar-restart-backoff-s",
        "0.5",
        engine="fake",
        model=fake_script(tmp_path, refuse_while=str(gate)),
    )
    try:
        yield server, gate
    finally:
        server.stop()


def _kill_sidecar(server: ServerProcess, refusing: Path | None = None) -> int:
    """SIGKILL the sidecar (first turning its admission off and waiting for readiness to follow, when `refusing`
    names the gate); its pid."""
    if refusing is not None:
        refusing.touch()
        server.wait_health(serving=False, timeout_s=10)
    old_pid = server.sidecar_pid()
    os.kill(old_pid, signal.SIGKILL)
    return old_pid


def _restarted(server: ServerProcess, old_pid: int, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = server.sidecar_pid()
        except AssertionError:
            pid = old_pid
        if pid != old_pid:
            return pid
        time.sleep(0.05)
    raise AssertionError("the sidecar was not restarted")


def _since_last_restart(server: ServerProcess) -> list[dict[str, object]]:
    """The server's JSON log lines after the last sidecar death."""
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    died = max(i for i, line in enumerate(lines) if line.get("event") == "sidecar_died")
    return lines[died + 1 :]


def _never_serving(server: ServerProcess, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.health() != SERVING, "SERVING while the engine refuses new sessions"
        time.sleep(0.05)


def test_restart_while_admission_is_off_serves_once_the_new_engine_admits(gated: tuple[ServerProcess, Path]) -> None:
    server, gate = gated
    old_pid = _kill_sidecar(server, refusing=gate)
    gate.unlink()  # the next engine admits from its first answer on
    _restarted(server, old_pid)
    server.wait_health(serving=True, timeout_s=10)


def test_restart_while_admission_is_off_stays_not_serving_while_the_new_engine_refuses(
    gated: tuple[ServerProcess, Path],
) -> None:
    server, gate = gated
    old_pid = _kill_sidecar(server, refusing=gate)
    _restarted(server, old_pid)
    _never_serving(server, seconds=2.0)  # ten health checks of the new engine, all refusing
    # The supervisor judged the new engine by its own answers, not by what it last heard from the old one.
    assert any(
        line.get("event") == "engine_admission" and line.get("admitting") is False
        for line in _since_last_restart(server)
    ), "the new engine's refusal was never taken in"
    gate.unlink()
    server.wait_health(serving=True, timeout_s=10)


def test_restart_into_an_engine_that_refuses_is_not_serving(gated: tuple[ServerProcess, Path]) -> None:
    server, gate = gated
    old_pid = _kill_sidecar(server)
    gate.touch()  # admission was on when the restart began; the next engine refuses from its first answer
    _restarted(server, old_pid)
    _never_serving(server, seconds=2.0)
    gate.unlink()
    server.wait_health(serving=True, timeout_s=10)
