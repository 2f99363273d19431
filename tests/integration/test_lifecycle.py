"""Process-level behaviour: health, reflection, sidecar crash and restart, drain on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.helpers import (
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


def test_health_answers_liveness_and_readiness(fake_server: ServerProcess) -> None:
    assert fake_server.health("") == health_pb2.HealthCheckResponse.SERVING
    assert fake_server.health("voxgate.v1.Speech") == health_pb2.HealthCheckResponse.SERVING


def test_reflection_describes_the_api_without_proto_files(fake_server: ServerProcess) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(fake_server.channel())
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="voxgate.v1.Speech"),
    ]
    listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {"voxgate.v1.Speech", "grpc.health.v1.Health"} <= names
    assert described.file_descriptor_response.file_descriptor_proto


def test_grpcurl_works_with_no_proto_files(fake_server: ServerProcess) -> None:
    grpcurl = Path(sys.executable).parent / "grpcurl"
    listed = subprocess.run(
        [str(grpcurl), "-plaintext", fake_server.target, "list"], capture_output=True, text=True, timeout=30
    )
    assert "voxgate.v1.Speech" in listed.stdout.split(), listed.stderr
    request = '{"config": {"encoding": "AUDIO_ENCODING_LINEAR16", "sample_rate_hz": 16000}}'
    streamed = subprocess.run(
        [str(grpcurl), "-plaintext", "-d", request, fake_server.target, "voxgate.v1.Speech/StreamingRecognize"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert streamed.returncode == 0, streamed.stderr
    assert '"SESSION_END_REASON_CLIENT_END"' in streamed.stdout


def test_status_command_reports_health_engine_and_capacity(fake_server: ServerProcess) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "service", "status", "--server", fake_server.target, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert (status["live"], status["ready"], status["engine"]["name"]) == ("SERVING", "SERVING", "fake")
    assert status["active_sessions"] == 0 and status["max_sessions"] == 16
    text = subprocess.run(
        [sys.executable, "-m", "service", "status", "--server", fake_server.target],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert "accepting sessions: SERVING" in text.stdout and "0 active of 16" in text.stdout


def test_capabilities(fake_server: ServerProcess) -> None:
    caps = fake_server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
    assert set(caps.encodings) == {pb.AUDIO_ENCODING_LINEAR16, pb.AUDIO_ENCODING_MULAW, pb.AUDIO_ENCODING_ALAW}
    assert (caps.min_sample_rate_hz, caps.max_sample_rate_hz, caps.max_audio_channel_count) == (8000, 48000, 8)
    assert caps.engine.name == "fake" and "en-US" in caps.languages
    assert caps.max_audio_bytes_per_message == 65536
    assert caps.interim_stability == pb.INTERIM_STABILITY_APPEND_ONLY  # the fake engine never revises


def test_sidecar_sigkill_is_survived(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--sidecar-health-interval-s", "0.5", engine="fake")
    try:
        before = recognize(server.stub(), [config_request(), *audio_requests(voiced(1.0))])
        assert final_text(before)
        old_pid = server.sidecar_pid()
        os.kill(old_pid, signal.SIGKILL)
        server.wait_health(serving=False, timeout_s=10)
        server.wait_health(serving=True, timeout_s=60)
        assert server.sidecar_pid() != old_pid
        after = recognize(server.stub(), [config_request(), *audio_requests(voiced(1.0))])
        assert final_text(after) == final_text(before)
    finally:
        assert server.stop() == 0


def test_sessions_are_refused_with_retry_while_the_engine_is_down(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--sidecar-restart-backoff-s", "3", engine="fake")
    try:
        os.kill(server.sidecar_pid(), signal.SIGKILL)
        server.wait_health(serving=False, timeout_s=10)
        with pytest.raises(grpc.RpcError) as info:
            recognize(server.stub(), [config_request()])
        assert error_reason(info.value)[:2] == (grpc.StatusCode.UNAVAILABLE, "ENGINE_UNAVAILABLE")
    finally:
        server.stop()


def test_a_sidecar_that_keeps_dying_is_restarted_less_and_less_often(tmp_path: Path) -> None:
    """A sidecar killed right after each start waits 0.2, 0.4, 0.8 s for its restarts (doubling to 10 s; back to
    the first delay after a minute up: engine_api/restart_backoff.py), not 0.2 s forever."""
    server = start_server(
        tmp_path, "--sidecar-restart-backoff-s", "0.2", "--sidecar-health-interval-s", "0.2", engine="fake"
    )
    try:
        for _ in range(3):
            server.wait_health(serving=True, timeout_s=30)
            os.kill(server.sidecar_pid(), signal.SIGKILL)
            server.wait_health(serving=False, timeout_s=10)
        server.wait_health(serving=True, timeout_s=30)
        delays = [json.loads(line)["delay_s"] for line in server.log().splitlines() if '"sidecar_restart_in"' in line]
        assert delays == [0.2, 0.4, 0.8]
    finally:
        assert server.stop() == 0


def test_a_live_session_survives_a_sidecar_crash(tmp_path: Path) -> None:
    script = tmp_path / "crash.json"
    script.write_text(json.dumps({"crash_at_ms": 1200}))  # every engine session dies 1.2 s in
    server = start_server(tmp_path, engine="fake", model=str(script))
    try:
        responses = recognize(server.stub(), [config_request(), *audio_requests(voiced(2.0))], timeout=60)
        warnings = [r.warning.code for r in responses if r.HasField("warning")]
        assert "ENGINE_RESTARTED" in warnings
        assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        words = " ".join(r.result.text for r in responses if r.HasField("result") and r.result.is_final).split()
        assert len(words) >= 3, "words from before and after the seam are all delivered"
        results = [r.result for r in responses if r.HasField("result") and r.result.is_final]
        ends = [r.end_offset.ToMilliseconds() for r in results]
        assert ends == sorted(ends) and ends[-1] <= 2000, "offsets continue across the seam"
    finally:
        server.stop()


def test_a_session_ends_engine_lost_when_the_engine_stays_down(tmp_path: Path) -> None:
    script = tmp_path / "crash.json"
    script.write_text(json.dumps({"crash_at_ms": 1200}))
    server = start_server(
        tmp_path,
        "--engine-recovery-timeout-s",
        "0.5",
        "--sidecar-restart-backoff-s",
        "3",
        engine="fake",
        model=str(script),
    )
    got: list[pb.StreamingRecognizeResponse] = []
    try:
        with pytest.raises(grpc.RpcError) as info:
            for r in server.stub().StreamingRecognize(
                iter([config_request(), *audio_requests(voiced(3.0))]), timeout=60
            ):
                got.append(r)
        assert error_reason(info.value)[:2] == (grpc.StatusCode.UNAVAILABLE, "ENGINE_UNAVAILABLE")
        assert got[-1].ended.reason == pb.SESSION_END_REASON_ENGINE_LOST
        assert any(r.HasField("result") and r.result.is_final for r in got), "words heard before the crash stay"
    finally:
        server.stop()


def test_sigterm_drains_an_active_session(tmp_path: Path) -> None:
    server = start_server(tmp_path, engine="fake")
    live = stream_in_background(server, 60.0, 0.1)
    got, thread = live.got, live.thread
    assert live.in_session.wait(30)
    server.proc.send_signal(signal.SIGTERM)
    thread.join(30)
    assert not thread.is_alive()
    assert server.proc.wait(30) == 0
    assert got[-1].ended.reason == pb.SESSION_END_REASON_DRAINING
    assert any(r.HasField("result") and r.result.is_final for r in got)


def test_sigterm_exits_within_the_grace_while_the_engine_is_down(tmp_path: Path) -> None:
    # A drain that finds a session waiting for a restarting engine must not wait for the engine.
    server = start_server(
        tmp_path,
        "--sidecar-restart-backoff-s",
        "30",
        "--engine-recovery-timeout-s",
        "60",
        "--drain-grace-s",
        "2",
        engine="fake",
    )
    live = stream_in_background(server, 60.0, 0.1)
    assert live.in_session.wait(30)
    os.kill(server.sidecar_pid(), signal.SIGKILL)
    server.wait_health(serving=False, timeout_s=10)
    server.proc.send_signal(signal.SIGTERM)
    try:
        code = server.proc.wait(2 + 10)  # the grace, then the sidecar's stop timeout at most
    except subprocess.TimeoutExpired:
        server.proc.kill()
        raise AssertionError(f"voxgate serve still running 12 s after SIGTERM:\n{server.log()[-3000:]}") from None
    assert code == 0
    live.thread.join(10)
    assert not live.thread.is_alive(), "the client's stream ended with the server"
    assert any(r.HasField("result") and r.result.is_final for r in live.got), "words heard before the crash stay"


@pytest.mark.parametrize("command", [["-m", "service"], ["voxgate"]])
def test_sigterm_at_any_moment_of_start_up_is_a_clean_stop(command: list[str], tmp_path: Path) -> None:
    """While the CLI imports (before the server's own handler), at start, and once serving: exit 0, no traceback.
    Both ways in: `python -m service` and the `voxgate` console script's entry point."""
    import time

    for delay_s in (0.05, 0.25, 0.5, 0.9, 1.6):
        err = tmp_path / f"stderr-{delay_s}.txt"
        program = (
            [str(Path(sys.executable).parent / "voxgate")] if command == ["voxgate"] else [sys.executable, *command]
        )
        args = [*program, "serve", "--engine", "fake", "--port", "0", "--workers", "2"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err.open("w"), cwd=tmp_path)
        time.sleep(delay_s)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        assert code == 0, f"SIGTERM {delay_s} s after start: exit {code}\n{err.read_text()[-2000:]}"
        assert "Traceback" not in err.read_text(), err.read_text()[-2000:]


def test_other_commands_keep_the_default_sigterm(tmp_path: Path) -> None:
    """Only `serve` takes an early SIGTERM as a clean stop: a client killed by it still says so."""
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "transcribe", "--server", "127.0.0.1:9", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.5)  # past the imports, reading stdin
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert proc.stdin is not None
    proc.stdin.close()


def test_transcribe_cli_reports_errors_clearly(fake_server: ServerProcess, tmp_path: Path) -> None:
    raw = tmp_path / "audio.raw"
    raw.write_bytes(b"\0" * 3200)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "transcribe",
            "--server",
            fake_server.target,
            "--sample-rate",
            "96000",
            "--no-pace",
            str(raw),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert "UNSUPPORTED_AUDIO_FORMAT" in out.stderr and "sample_rate_hz" in out.stderr
