"""Callers who hang up early: every slot comes back, the counts agree, readiness tells the truth."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.helpers import (
    ServerProcess,
    audio_requests,
    config_request,
    error_reason,
    fake_script,
    final_text,
    read_wav_pcm,
    recognize,
    silence,
    start_server,
    voiced,
    word_error_rate,
)
from voxgate_client.v1 import speech_pb2 as pb

CALLERS = 20


def capacity(server: ServerProcess) -> pb.CapacityCounts:
    return server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10).capacity


def wait_all_free(server: ServerProcess, timeout_s: float = 15.0) -> pb.CapacityCounts:
    """Once sessions end the service, the sidecar and the engine all count 0 (after a health check)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = capacity(server)
        if counts.service_sessions == counts.sidecar_slots == counts.engine_sessions == 0:
            return counts
        if time.monotonic() > deadline:
            raise AssertionError(f"slots still held: {counts}")
        time.sleep(0.2)


def hang_up_after(server: ServerProcess, delay_s: float) -> None:
    """Send a valid config, then cancel `delay_s` later, whatever state the session is in."""
    gate = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request()
        gate.wait(10)

    call = server.stub().StreamingRecognize(requests(), timeout=30)
    timer = threading.Timer(delay_s, call.cancel)
    timer.start()
    try:
        for _ in call:
            pass
    except grpc.RpcError:
        pass
    finally:
        timer.join()
        gate.set()


def canary(server: ServerProcess, audio: bytes | None = None) -> list[pb.StreamingRecognizeResponse]:
    return recognize(
        server.stub(), [config_request(), *audio_requests(voiced(1.5) if audio is None else audio)], timeout=30
    )


@pytest.mark.parametrize("engine", ["fake", "whisper", "sphinx"])
def test_callers_who_hang_up_while_the_session_starts_give_every_slot_back(tmp_path: Path, engine: str) -> None:
    # The fake engine takes 150 ms to open a session, so many cancels land during the engine handshake.
    model = fake_script(tmp_path, open_ms=150) if engine == "fake" else ""
    server = start_server(
        tmp_path, "--max-sessions", "4", "--sidecar-health-interval-s", "0.2", engine=engine, model=model
    )
    try:
        rng = random.Random(17)
        threads = [threading.Thread(target=hang_up_after, args=(server, rng.uniform(0, 0.3))) for _ in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        counts = wait_all_free(server)
        assert counts.mismatches == 0
        if engine == "fake":
            responses = canary(server)
            assert final_text(responses) == "alpha bravo charlie"
        else:
            pcm, _ = read_wav_pcm("go_forward.wav")
            responses = canary(server, pcm + silence(0.5))
            assert word_error_rate("go forward ten meters", final_text(responses)) <= 0.25
        assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        server.wait_health(serving=True, timeout_s=5)
        assert "Task exception was never retrieved" not in server.log()
    finally:
        server.stop()


def test_cancels_before_any_audio_do_not_lock_clients_out(tmp_path: Path) -> None:
    """A session whose caller vanished before sending audio has nothing to resume: its slot is free at once,
    not after the resume window (30 s)."""
    server = start_server(tmp_path, "--max-sessions", "2", engine="fake")
    try:
        for _ in range(5):
            gate = threading.Event()

            def requests(gate: threading.Event = gate) -> Iterator[pb.StreamingRecognizeRequest]:
                yield config_request()
                gate.wait(10)

            call = server.stub().StreamingRecognize(requests(), timeout=30)
            assert next(iter(call)).HasField("started")
            call.cancel()
            gate.set()
        deadline = time.monotonic() + 3.0  # the server hears of a cancel a moment later; far less than 30 s
        while True:
            try:
                responses = canary(server)
                break
            except grpc.RpcError as exc:
                assert error_reason(exc)[1] == "CAPACITY"
                assert time.monotonic() < deadline, "cancelled sessions without audio still hold their slots"
                time.sleep(0.1)
        assert final_text(responses) == "alpha bravo charlie"
    finally:
        server.stop()


def test_readiness_is_not_serving_while_no_session_can_be_admitted(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--max-sessions", "1", "--sidecar-health-interval-s", "0.2", engine="fake")
    try:
        gate = threading.Event()

        def holding() -> Iterator[pb.StreamingRecognizeRequest]:
            yield config_request()
            gate.wait(20)

        call = server.stub().StreamingRecognize(holding(), timeout=30)
        assert next(iter(call)).HasField("started")
        server.wait_health(serving=False, timeout_s=5)
        gate.set()  # half-close: the session ends and its slot is free
        assert list(call)[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        server.wait_health(serving=True, timeout_s=5)
        wait_all_free(server)
    finally:
        server.stop()


def test_a_session_slow_to_open_is_no_capacity_mismatch(tmp_path: Path) -> None:
    # Found by the soak: a PocketSphinx decoder takes seconds to build on a loaded box, and while it is built
    # the service and the sidecar count the session and the engine does not yet. That is no leak.
    model = fake_script(tmp_path, open_ms=1500)
    server = start_server(
        tmp_path, "--max-sessions", "2", "--sidecar-health-interval-s", "0.2", engine="fake", model=model
    )
    try:
        responses = canary(server)
        assert final_text(responses) == "alpha bravo charlie"
        counts = wait_all_free(server)
        assert counts.mismatches == 0, counts
        assert "capacity_mismatch" not in server.log()
    finally:
        server.stop()
