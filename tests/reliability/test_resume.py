"""Resume after a client disconnect: nothing lost, nothing duplicated."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.helpers import (
    ServerProcess,
    config_request,
    error_reason,
    fake_script,
    hold_stream,
    recognize,
    requests_until,
    resume_stream,
    silence,
    start_server,
    voiced,
)
from voxgate_client.v1 import speech_pb2 as pb

CHUNK = 3200  # 100 ms


def speech() -> bytes:
    return (voiced(1.0) + silence(1.0)) * 3


def final_results(responses: list[pb.StreamingRecognizeResponse]) -> list[pb.RecognitionResult]:
    return [r.result for r in responses if r.HasField("result") and r.result.is_final]


def flow_config(**kw: object) -> pb.StreamingRecognizeRequest:
    return config_request(flow_status=pb.FlowStatusConfig(enabled=True, interval_ms=100), **kw)


def test_resume_continues_the_same_session_without_loss_or_duplicates(fake_server: ServerProcess) -> None:
    audio = speech()
    reference = final_results(
        recognize(
            fake_server.stub(),
            [
                flow_config(),
                *(pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK]) for i in range(0, len(audio), CHUNK)),
            ],
        )
    )

    # First connection: send ~2.5 s in real time, then vanish without half-closing.
    first: list[pb.StreamingRecognizeResponse] = []
    stop_sending = threading.Event()

    call = fake_server.stub().StreamingRecognize(requests_until(stop_sending, flow_config(), audio, CHUNK), timeout=60)
    for response in call:
        first.append(response)
        acked = [r.flow_status.acked_audio_bytes for r in first if r.HasField("flow_status")]
        if acked and acked[-1] >= len(audio) // 2:
            break
    stop_sending.set()
    call.cancel()
    started = first[0].started
    assert started.resume_token and started.resume_window.seconds > 0
    acked_bytes = max(r.flow_status.acked_audio_bytes for r in first if r.HasField("flow_status"))
    last_seq = first[-1].seq

    # Second connection: resume, resend from the acknowledged offset.
    resume_request = pb.StreamingRecognizeRequest(
        config=pb.StreamingConfig(
            resume_token=started.resume_token, resume_last_seq=last_seq, resume_audio_bytes=acked_bytes
        )
    )
    rest = [pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK]) for i in range(acked_bytes, len(audio), CHUNK)]
    second = resume_stream(fake_server.stub(), [resume_request, *rest])

    # The resumed stream opens with the session's SessionStarted again, resumed and outside the log (seq 0).
    assert second[0].HasField("started") and second[0].seq == 0 and second[0].started.resumed
    assert second[0].started.session_id == started.session_id and not started.resumed
    second = second[1:]
    assert [r.seq for r in second] == sorted(r.seq for r in second) and second[0].seq > last_seq
    got = final_results(first) + final_results(second)
    assert len({r.result_id for r in got}) == len(got), "no final result twice"
    assert [(r.utterance_index, r.text) for r in got] == [(r.utterance_index, r.text) for r in reference]
    assert all(r.result_id.startswith(started.session_id) for r in got)
    assert second[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_an_unknown_or_expired_token_is_not_found(fake_server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as info:
        recognize(fake_server.stub(), [pb.StreamingRecognizeRequest(config=pb.StreamingConfig(resume_token="nope"))])
    assert error_reason(info.value)[:2] == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")


def test_after_the_window_the_session_ends_and_frees_its_slot(tmp_path) -> None:
    server = start_server(tmp_path, "--resume-window-s", "0.5", "--max-sessions", "1", engine="fake")
    try:
        held = hold_stream(server.channel(), audio=voiced(0.2))  # with audio it is worth resuming
        token = held.started.started.resume_token
        held.call.cancel()
        held.stop_sending()
        with pytest.raises(grpc.RpcError) as info:  # still held for a resume: the only slot is taken
            recognize(server.stub(), [config_request()])
        assert error_reason(info.value)[1] == "CAPACITY"
        time.sleep(1.5)
        with pytest.raises(grpc.RpcError) as info:
            recognize(server.stub(), [pb.StreamingRecognizeRequest(config=pb.StreamingConfig(resume_token=token))])
        assert error_reason(info.value)[1] == "SESSION_NOT_FOUND"
        assert recognize(server.stub(), [config_request()])[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    finally:
        server.stop()


def test_a_vanished_client_is_never_taken_for_a_half_close(fake_server: ServerProcess) -> None:
    # A cancelled RPC also ends its request stream; the session must wait for a resume, not finish.
    for _ in range(20):
        gate = threading.Event()

        def vanishing(gate: threading.Event = gate) -> Iterator[pb.StreamingRecognizeRequest]:
            yield flow_config()
            yield pb.StreamingRecognizeRequest(audio=voiced(0.2))
            gate.wait(10)

        call = fake_server.stub().StreamingRecognize(vanishing(), timeout=30)
        got = []
        for response in call:
            got.append(response)
            if response.HasField("flow_status") and response.flow_status.acked_audio_bytes == 6400:
                break
        call.cancel()
        gate.set()
        resume_request = pb.StreamingRecognizeRequest(
            config=pb.StreamingConfig(
                resume_token=got[0].started.resume_token, resume_last_seq=got[-1].seq, resume_audio_bytes=6400
            )
        )
        rest = resume_stream(fake_server.stub(), [resume_request, pb.StreamingRecognizeRequest(audio=voiced(0.3))])
        assert rest[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
        assert rest[-1].ended.audio_duration.ToMilliseconds() == 500, "the session went on after the resume"


def test_a_resent_finalize_from_before_the_resume_point_is_not_applied_twice(fake_server: ServerProcess) -> None:
    a, b, c = voiced(0.5), voiced(0.5), voiced(0.5) + silence(1.0)
    finalize = pb.StreamingRecognizeRequest(finalize=pb.Finalize())

    def audio(data: bytes) -> pb.StreamingRecognizeRequest:
        return pb.StreamingRecognizeRequest(audio=data)

    reference = final_results(recognize(fake_server.stub(), [flow_config(), audio(a), finalize, audio(b), audio(c)]))
    gate = threading.Event()

    def first() -> Iterator[pb.StreamingRecognizeRequest]:
        yield flow_config()
        yield audio(a)
        yield finalize
        yield audio(b)
        gate.wait(10)

    call = fake_server.stub().StreamingRecognize(first(), timeout=30)
    got = []
    for response in call:
        got.append(response)
        if response.HasField("flow_status") and response.flow_status.acked_audio_bytes == len(a) + len(b):
            break
    call.cancel()
    gate.set()
    # The client knows only that `a` was acknowledged: it resends from there, finalize included.
    resume_request = pb.StreamingRecognizeRequest(
        config=pb.StreamingConfig(
            resume_token=got[0].started.resume_token, resume_last_seq=got[-1].seq, resume_audio_bytes=len(a)
        )
    )
    rest = resume_stream(fake_server.stub(), [resume_request, finalize, audio(b), audio(c)])
    results = final_results(got) + final_results(rest)
    assert [(r.utterance_index, r.text, r.end_offset.ToMilliseconds()) for r in results] == [
        (r.utterance_index, r.text, r.end_offset.ToMilliseconds()) for r in reference
    ]


def test_a_resume_after_a_seq_never_sent_is_invalid(fake_server: ServerProcess) -> None:
    held = hold_stream(fake_server.channel(), audio=voiced(0.2))  # with audio it is worth resuming
    assert held.acked is not None
    last_seq = held.acked.seq
    held.call.cancel()
    held.stop_sending()
    token = held.started.started.resume_token
    with pytest.raises(grpc.RpcError) as info:
        resume_stream(
            fake_server.stub(),
            [pb.StreamingRecognizeRequest(config=pb.StreamingConfig(resume_token=token, resume_last_seq=last_seq + 5))],
        )
    code, reason, meta = error_reason(info.value)
    assert (code, reason, meta.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_CONFIG",
        "config.resume_last_seq",
    )
    ok = resume_stream(
        fake_server.stub(),
        [pb.StreamingRecognizeRequest(config=pb.StreamingConfig(resume_token=token, resume_last_seq=last_seq))],
    )  # the session is still there to resume
    assert ok[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_a_client_that_vanishes_while_held_back_loses_no_audio_on_resume(tmp_path: Path) -> None:
    # A slow engine (40 ms per 80 ms chunk) and a client sending as fast as it can: the engine queue is
    # full and the session waits to hand it audio the server has already acknowledged when the client
    # vanishes. That audio must still reach the engine, or the resume (which skips acknowledged bytes)
    # loses it: the fake engine's word times would then come early by a chunk or two.
    server = start_server(tmp_path, engine="fake", model=fake_script(tmp_path, step_sleep_ms=40))
    try:
        audio = speech() * 2  # 12 s; the queue (5 s) fills long before the end, so words follow the cut
        requests = [pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK]) for i in range(0, len(audio), CHUNK)]
        reference = recognize(server.stub(), [flow_config(), *requests])
        gate = threading.Event()

        def first_requests() -> Iterator[pb.StreamingRecognizeRequest]:
            yield flow_config()
            yield from requests
            gate.wait(30)

        call = server.stub().StreamingRecognize(first_requests(), timeout=60)
        first: list[pb.StreamingRecognizeResponse] = []
        for response in call:
            first.append(response)
            if response.HasField("flow_status") and response.flow_status.buffered_audio_ms >= 4800:
                break  # the engine queue is (nearly) full: the session is holding the client back
        call.cancel()
        gate.set()
        acked = first[-1].flow_status.acked_audio_bytes
        resume = pb.StreamingRecognizeRequest(
            config=pb.StreamingConfig(
                resume_token=first[0].started.resume_token, resume_last_seq=first[-1].seq, resume_audio_bytes=acked
            )
        )
        second = resume_stream(
            server.stub(),
            [
                resume,
                *(pb.StreamingRecognizeRequest(audio=audio[i : i + CHUNK]) for i in range(acked, len(audio), CHUNK)),
            ],
        )
    finally:
        server.stop()

    def timed(results: list[pb.RecognitionResult]) -> list[tuple[str, int, int]]:
        return [(r.text, r.start_offset.ToMilliseconds(), r.end_offset.ToMilliseconds()) for r in results]

    assert timed(final_results(first) + final_results(second)) == timed(final_results(reference))
    assert second[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
