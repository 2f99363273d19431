"""The Python clients' resume policy continues a drained session (SessionEnded{DRAINING}) in a new one.

Against the in-process fake servicer (a scripted drain at an exact byte, then refusals), and against two
real `voxgate serve` instances on one round-robin channel, one of them drained with SIGTERM mid-stream.
"""

from __future__ import annotations

import signal
from pathlib import Path

import grpc
import pytest

from tests.client_streams import CLIENT_KINDS, client_stream
from tests.helpers import start_server
from tests.reliability.streams import speech_pattern, uncovered
from voxgate_client import ResumePolicy, SpeechClient, StreamConfig, chunks
from voxgate_client.v1 import speech_pb2 as pb

CONFIG = StreamConfig(encoding="linear16", sample_rate_hz=8000, interim_results=False)
CHUNK = 1600  # 100 ms at 8 kHz LINEAR16
# Every chunk different, so a byte lost, doubled or shifted shows.
AUDIO = b"".join(bytes([i]) * CHUNK for i in range(1, 11))
DRAIN_AT = 4 * CHUNK + 600  # inside the fifth chunk
POLICY = ResumePolicy(backoff_s=0.01, max_backoff_s=0.05)


def kinds(responses: list[pb.StreamingRecognizeResponse]) -> list[str]:
    return [str(r.WhichOneof("response")) for r in responses]


def served(fake_speech) -> list[bytes]:
    """The audio of each stream the fake took (refused ones took none)."""
    return [
        bytes(a) for a, k in zip(fake_speech.servicer.audio, fake_speech.servicer.received, strict=True) if "audio" in k
    ]


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_a_drained_session_continues_in_a_new_one_from_where_it_stopped(fake_speech, client_kind: str) -> None:
    fake_speech.servicer.drain_at_bytes = DRAIN_AT
    fake_speech.servicer.refuse_after_drain = 2  # the balancer picks the draining instance twice first
    got = list(client_stream(client_kind, fake_speech.target, CONFIG, chunks(AUDIO, CHUNK), resume=POLICY, timeout=30))

    assert kinds(got) == ["started", "result", "ended", "started", "result", "ended"]
    first, final_a, drained, second, final_b, ended = got
    assert drained.ended.reason == pb.SESSION_END_REASON_DRAINING
    assert ended.ended.reason == pb.SESSION_END_REASON_CLIENT_END
    # The seam: a new session (the fake's fourth stream: two were refused), not a resumed one.
    assert (first.started.session_id, second.started.session_id) == ("fake-1", "fake-4")
    assert not second.started.resumed
    assert fake_speech.servicer.refused == 2
    # Not a byte lost or sent twice: the new session starts exactly where the drained one stopped,
    # the chunk that straddles that point cut there.
    before, after = served(fake_speech)
    assert before + after == AUDIO and len(before) == DRAIN_AT
    # One timeline: seq, utterance index and offsets go on across the seam.
    assert [r.seq for r in got] == [1, 2, 3, 4, 5, 6]
    assert (final_a.result.utterance_index, final_b.result.utterance_index) == (0, 1)
    assert final_b.result.result_id == final_a.result.result_id == "r0"  # per session: not taken for a repeat
    assert final_a.result.end_offset == final_b.result.start_offset
    assert final_b.result.start_offset.ToNanoseconds() == DRAIN_AT // 2 * 1_000_000_000 // 8000
    assert final_b.result.end_offset.ToNanoseconds() == len(AUDIO) // 2 * 1_000_000_000 // 8000
    assert final_b.result.text == f"utterance 0 bytes {len(AUDIO) - DRAIN_AT}"


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_a_new_session_reset_by_a_proxy_is_opened_again(fake_speech, client_kind: str) -> None:
    # A balancer resets the replacement stream as the drained instance goes away (nginx answered a
    # CANCELLED without an ErrorInfo in one CI run): that is a lost connection, not the server's verdict.
    fake_speech.servicer.drain_at_bytes = DRAIN_AT
    fake_speech.servicer.reset_after_drain = True
    got = list(client_stream(client_kind, fake_speech.target, CONFIG, chunks(AUDIO, CHUNK), resume=POLICY, timeout=30))
    assert kinds(got) == ["started", "result", "ended", "started", "result", "ended"]
    before, after = served(fake_speech)
    assert before + after == AUDIO


def test_transcribe_spans_the_seam(fake_speech) -> None:
    fake_speech.servicer.drain_at_bytes = DRAIN_AT
    with SpeechClient(fake_speech.target) as client:
        transcript = client.transcribe(CONFIG, AUDIO, resume=POLICY, timeout=30)
    assert transcript.session_ids == ("fake-1", "fake-2") and transcript.session_id == "fake-2"
    assert transcript.end_reason == "client_end"
    assert transcript.audio_duration_s == pytest.approx(len(AUDIO) / 2 / 8000)
    assert len(transcript.finals) == 2


def test_without_reconnect_on_drain_the_stream_ends_with_the_drain(fake_speech) -> None:
    fake_speech.servicer.drain_at_bytes = DRAIN_AT
    policy = ResumePolicy(reconnect_on_drain=False)
    with SpeechClient(fake_speech.target) as client:
        got = list(client.stream(CONFIG, chunks(AUDIO, CHUNK), resume=policy, timeout=30))
    assert kinds(got) == ["started", "result", "ended"]
    assert got[-1].ended.reason == pb.SESSION_END_REASON_DRAINING
    assert len(served(fake_speech)) == 1


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_a_replacement_refused_too_often_raises(fake_speech, client_kind: str) -> None:
    fake_speech.servicer.drain_at_bytes = DRAIN_AT
    fake_speech.servicer.refuse_after_drain = 10
    policy = ResumePolicy(max_attempts=2, backoff_s=0.01)
    got: list[pb.StreamingRecognizeResponse] = []
    with pytest.raises(grpc.RpcError) as info:
        for response in client_stream(
            client_kind, fake_speech.target, CONFIG, chunks(AUDIO, CHUNK), resume=policy, timeout=30
        ):
            got.append(response)
    # The refusal arrives before any audio is written (the clients wait for the server's first answer),
    # so grpc.aio cannot hide it behind its failed-write INTERNAL (grpc/grpc#36066).
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert kinds(got) == ["started", "result", "ended"]
    assert fake_speech.servicer.refused == 3  # the first try and two more


# Two real servers (fake engine), one channel over both (round robin per stream, like a balancer).
RATE = 16000
SEGMENTS = 8


@pytest.mark.slow  # two real server processes and 16 s of real-time audio: not in `make test-fast`
def test_sigterm_mid_stream_moves_the_stream_to_the_other_server(tmp_path: Path) -> None:
    audio, spans = speech_pattern(SEGMENTS, voiced_s=1.0, silence_s=1.0)  # 16 s, a final every 2 s
    config = StreamConfig(encoding="linear16", sample_rate_hz=RATE, endpointing_silence_ms=500)
    policy = ResumePolicy(max_attempts=20, backoff_s=0.05, max_backoff_s=0.5, flow_status_interval_ms=100)
    servers = [
        start_server(tmp_path, "--drain-grace-s", "10", "--retry-delay-s", "0.1", engine="fake") for _ in range(2)
    ]
    try:
        target = "ipv4:" + ",".join(s.target for s in servers)
        got: list[pb.StreamingRecognizeResponse] = []
        drained = None
        with SpeechClient(target, channel_options=[("grpc.lb_policy_name", "round_robin")]) as client:
            for response in client.stream(config, chunks(audio, 3200), pace=2.0, resume=policy, timeout=120):
                got.append(response)
                if drained is None and response.HasField("result") and response.result.is_final:
                    (drained,) = [s for s in servers if got[0].started.session_id in s.log()]
                    drained.proc.send_signal(signal.SIGTERM)  # after the first final result
        assert drained is not None and drained.proc.wait(30) == 0
    finally:
        for server in servers:
            server.stop()

    started = [r.started for r in got if r.HasField("started")]
    ends = [r.ended for r in got if r.HasField("ended")]
    assert len(started) == 2 and [e.reason for e in ends] == [
        pb.SESSION_END_REASON_DRAINING,
        pb.SESSION_END_REASON_CLIENT_END,
    ]
    (other,) = [s for s in servers if s is not drained]
    assert started[1].session_id in other.log() and started[1].session_id not in drained.log()
    finals = [r.result for r in got if r.HasField("result") and r.result.is_final]
    # No audio lost or doubled: the two sessions together processed the stream's audio once.
    processed_ms = sum(e.audio_duration.ToMilliseconds() for e in ends)
    assert abs(processed_ms - len(audio) * 1000 // (2 * RATE)) <= 2, processed_ms
    # Every spoken segment has its final result, on one timeline (offsets continue across the seam),
    # and no stretch of audio was transcribed twice.
    assert uncovered(spans, finals) == []
    ranges = [(f.start_offset.ToMilliseconds(), f.end_offset.ToMilliseconds()) for f in finals if f.text.strip()]
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(ranges, ranges[1:], strict=False)), ranges
    assert [f.utterance_index for f in finals] == list(range(len(finals)))
    seqs = [r.seq for r in got]
    assert seqs == sorted(set(seqs))
