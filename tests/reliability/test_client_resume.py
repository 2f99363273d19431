"""The Python client's automatic resume, against a real server, through a TCP relay that drops connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.client_streams import CLIENT_KINDS, client_stream
from tests.helpers import ServerProcess, start_server
from tests.relay import Relay
from tests.reliability.streams import speech_pattern
from voxgate_client import FINALIZE, AudioItem, ResumePolicy, SpeechClient, StreamConfig, chunks
from voxgate_client.v1 import speech_pb2 as pb

CONFIG = StreamConfig(encoding="linear16", sample_rate_hz=16000, endpointing_silence_ms=500)
POLICY = ResumePolicy(backoff_s=0.05, flow_status_interval_ms=100)


@pytest.fixture
def proxy(fake_server: ServerProcess) -> Iterator[Relay]:
    p = Relay(fake_server.target)
    yield p
    p.close()


def audio_items() -> list[AudioItem]:
    audio, _ = speech_pattern(6, voiced_s=1.0, silence_s=1.0)  # 12 s, six utterances
    items: list[AudioItem] = list(chunks(audio, 3200))
    items.insert(25, FINALIZE)  # a finalize mid-utterance must survive a resend too
    return items


def summary(responses: list[pb.StreamingRecognizeResponse]) -> list[tuple[int, str, int, int]]:
    return [
        (
            r.result.utterance_index,
            r.result.text,
            r.result.start_offset.ToMilliseconds(),
            r.result.end_offset.ToMilliseconds(),
        )
        for r in responses
        if r.HasField("result") and r.result.is_final
    ]


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_a_dropped_connection_is_resumed_without_loss_or_duplicates(
    proxy: Relay, fake_server: ServerProcess, client_kind: str
) -> None:
    reference = list(
        client_stream(client_kind, proxy.target, CONFIG, audio_items(), pace=4.0, resume=POLICY, timeout=60)
    )
    assert reference[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    connections = proxy.accepted  # channels to one target may share a connection: count new ones

    got: list[pb.StreamingRecognizeResponse] = []
    cuts: list[float] = []
    recovered: list[float] = []  # cut → first response on the resumed stream
    for response in client_stream(
        client_kind, proxy.target, CONFIG, audio_items(), pace=4.0, resume=POLICY, timeout=60
    ):
        got.append(response)
        if len(cuts) > len(recovered):
            recovered.append(time.monotonic() - cuts[-1])
        n = len(summary(got))
        if response.HasField("result") and response.result.is_final and n in (1, 3):
            cuts.append(time.monotonic())
            proxy.cut()  # twice: right after the first and the third final result
    print(
        f"\nclient resume ({client_kind}): connection cut → first response of the resumed stream: "
        f"{', '.join(f'{t:.3f}s' for t in recovered)}"
    )
    assert len(cuts) == 2 and proxy.accepted - connections >= 2, "two drops, each resumed on a new connection"
    finals = [r.result for r in got if r.HasField("result") and r.result.is_final]
    assert len({f.result_id for f in finals}) == len(finals), "no result is final twice"
    assert summary(got) == summary(reference), "the same transcript as an uninterrupted run"
    assert got[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    assert got[-1].ended.audio_duration == reference[-1].ended.audio_duration, "no audio lost or doubled"
    seqs = [r.seq for r in got]
    assert seqs == sorted(set(seqs)), "responses in order, none repeated"
    assert sum(1 for r in got if r.HasField("started")) == 1
    session = got[0].started.session_id
    resumed = [line for line in fake_server.log().splitlines() if "session_resumed" in line and session in line]
    assert len(resumed) == 2, "the same session was resumed twice (not restarted)"


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_a_connection_that_died_silently_is_resumed_once_the_server_notices(tmp_path: Path, client_kind: str) -> None:
    # The server's keepalive (1 s + 1 s here; 20 s + 10 s by default) is what tells it the first
    # connection is gone; until then it refuses the resume with SESSION_ATTACHED and the client retries.
    server = start_server(tmp_path, "--keepalive-time-s", "1", "--keepalive-timeout-s", "1", engine="fake")
    proxy = Relay(server.target)
    try:
        reference = list(
            client_stream(client_kind, proxy.target, CONFIG, audio_items(), pace=4.0, resume=POLICY, timeout=60)
        )
        got: list[pb.StreamingRecognizeResponse] = []
        abandoned_at = recovered_after = 0.0
        connections = 0
        for response in client_stream(
            client_kind, proxy.target, CONFIG, audio_items(), pace=4.0, resume=POLICY, timeout=60
        ):
            got.append(response)
            # The resumed stream's first response: one on a later connection. Responses the client had
            # already received before the abandon come out of its buffer at once, and do not count.
            if abandoned_at and not recovered_after and proxy.accepted > connections:
                recovered_after = time.monotonic() - abandoned_at
            if not abandoned_at and len(summary(got)) == 1:
                abandoned_at = time.monotonic()
                connections = proxy.accepted
                proxy.abandon()
    finally:
        proxy.close()
        log = server.log()
        server.stop()
    print(f"\nsilent drop → first response of the resumed stream: {recovered_after:.2f}s")
    assert summary(got) == summary(reference), "the same transcript as an uninterrupted run"
    assert got[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    assert got[-1].ended.audio_duration == reference[-1].ended.audio_duration, "no audio lost or doubled"
    session = got[0].started.session_id
    assert sum("session_resumed" in line and session in line for line in log.splitlines()) == 1
    assert "SESSION_ATTACHED" in log, "the first resume came before the server noticed the dead connection"
    assert 0.5 < recovered_after < 10.0, "resumed once the server's keepalive gave up on the old connection"


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_reconnects_are_bounded_when_the_server_stays_away(proxy: Relay, client_kind: str) -> None:
    policy = ResumePolicy(max_attempts=3, backoff_s=0.05, flow_status_interval_ms=100)
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        for response in client_stream(
            client_kind, proxy.target, CONFIG, audio_items(), pace=1.0, resume=policy, timeout=60
        ):
            if response.HasField("started"):
                proxy.close()  # the server is unreachable from now on
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_an_outage_is_retried_for_as_long_as_the_server_holds_the_session(
    fake_server: ServerProcess, client_kind: str
) -> None:
    # POLICY's five reconnects in a row backed off from 0.05 s would all fail in a 4 s outage; the window
    # (the session's resume_window, 30 s) carries the call through it.
    relay = Relay(fake_server.target)
    try:
        reference = summary(list(client_stream(client_kind, relay.target, CONFIG, audio_items(), pace=4.0)))
        got: list[pb.StreamingRecognizeResponse] = []
        before_outage = -1
        for response in client_stream(
            client_kind, relay.target, CONFIG, audio_items(), pace=4.0, resume=POLICY, timeout=60
        ):
            got.append(response)
            if len(summary(got)) == 1 and before_outage < 0:  # once, after the first final
                before_outage = relay.accepted
                relay.down_for(4.0)
    finally:
        relay.close()
    assert summary(got) == reference, "no final lost or repeated"
    assert relay.accepted > before_outage >= 0, "the call reconnected after the outage"


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_a_reconnect_window_bounds_the_retries_in_time(proxy: Relay, client_kind: str) -> None:
    policy = ResumePolicy(reconnect_window_s=1.0, backoff_s=0.05, max_backoff_s=0.1, flow_status_interval_ms=100)
    lost = 0.0
    with pytest.raises(grpc.RpcError) as info:
        for response in client_stream(
            client_kind, proxy.target, CONFIG, audio_items(), pace=1.0, resume=policy, timeout=60
        ):
            if response.HasField("started"):
                proxy.close()  # the server is unreachable from now on
                lost = time.monotonic()
    gave_up_after = time.monotonic() - lost
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert 0.8 < gave_up_after < 10, f"gave up {gave_up_after:.2f} s after the loss, the window is 1 s"


def test_without_resume_a_dropped_connection_is_an_error(proxy: Relay) -> None:
    with SpeechClient(proxy.target) as client, pytest.raises(grpc.RpcError) as info:
        for response in client.stream(CONFIG, audio_items(), pace=4.0):
            if response.HasField("started"):
                proxy.cut()
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("client_kind", CLIENT_KINDS)
def test_an_error_from_the_audio_source_is_raised_not_resumed(proxy: Relay, client_kind: str) -> None:
    def failing() -> Iterator[AudioItem]:
        yield b"\0" * 3200
        raise RuntimeError("microphone unplugged")

    with pytest.raises(RuntimeError, match="unplugged"):
        list(client_stream(client_kind, proxy.target, CONFIG, failing(), resume=POLICY, timeout=30))


def test_resume_policy_validates() -> None:
    with pytest.raises(ValueError):
        ResumePolicy(max_attempts=0)
    with pytest.raises(ValueError, match="reconnect_window_s"):
        ResumePolicy(reconnect_window_s=-1)
    with pytest.raises(ValueError, match="attached_wait_s"):
        ResumePolicy(attached_wait_s=-1)


def test_a_connection_lost_before_any_audio_goes_on_in_a_new_session(proxy: Relay, fake_server: ServerProcess) -> None:
    # The server ends a session whose client vanished before any audio (nothing to resume: docs/reliability.md),
    # so the resume gets SESSION_NOT_FOUND; the client must open a new session and send everything there.
    reference = summary(
        list(client_stream("blocking", proxy.target, CONFIG, audio_items(), pace=4.0, resume=POLICY, timeout=60))
    )
    cut = threading.Event()

    def gated() -> Iterator[AudioItem]:
        cut.wait(30)  # no audio leaves the client before the connection is cut
        yield from audio_items()

    got: list[pb.StreamingRecognizeResponse] = []
    for response in client_stream("blocking", proxy.target, CONFIG, gated(), pace=4.0, resume=POLICY, timeout=60):
        got.append(response)
        if response.HasField("started") and not cut.is_set():
            proxy.cut()
            cut.set()
    started = [r.started for r in got if r.HasField("started")]
    assert len(started) == 2 and started[0].session_id != started[1].session_id, "a new session took over"
    assert summary(got) == reference
    assert got[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END
    log = fake_server.log()
    assert "session_abandoned" in log and started[0].session_id in log
